"""Deploying webdb to the hosts of a hosts.ini, and checking them (the tasks of fabfile.py).

``deploy`` makes every ``[host:*]`` ready to run a section writer, idempotently:

1. the virtualenv whose python hosts.ini names (``python = /opt/webdb/venv/bin/python``),
   created with ``base_python -m venv`` run *on the host* (the host's own ``python3`` by
   default), without the host's site-packages: the venv holds exactly what deploy installs;
2. the dependencies (setup.py ``install_requires``, plus those of the ``extras`` asked for),
   then this source tree as a source distribution, built *on the host* by its pip with the
   host's own C compiler, so the compiled extensions (``CODECS``: the block codec
   ``webdb.tables._blockc`` and the writer's kernels ``webdb.writer._stagesc``) are built for the
   host's Python and platform: packages from the index the host's pip is configured for, or,
   with ``wheelhouse``, from wheels downloaded here and shipped to the host (``pip install
   --no-index``: no network needed);
3. the proof: ``python -c "import webdb, fetchlist, lz4, ..."``, ``webdb --version`` and
   ``python -m webdb.tools.deploy facts`` (which codec runs and why, which extras import) run in the
   venv on the host; a host that fails them is reported failed with the host's error.  A host
   that could not build the codec (no compiler, no Python headers) runs the pure-Python
   fallback: its result says so, with the cause, and fails with ``require_compiled``;
4. the data root, ``<root>/<db>/`` and the share-group directories the host holds;
5. the config: hosts.ini and the key/known_hosts files it names by relative path, under
   ``<root>/.webdb/<name>-<digest>/`` (``webdb.writer.distributed.deploy_dir``: one folder
   per config, where an agent resolves them).

Every file reaches a host through ndfs's atomic put (temporary name, fsync, verified, rename).
A marker in the venv records the digest of the source distribution + dependency set + extras +
install mode: a deploy whose digest differs installs again, one whose digest matches only
proves the install (and builds again where the codec is missing, so a compiler installed since
is picked up).

``check`` verifies per host: ssh reachable (and shows the host key's fingerprint), the same
webdb version and source digest as here, the codec it runs and the extras it can import, free
disk, the clock within tolerance, the section roots present, held or stale writer locks, the
pushed config current, and that the host itself reaches every other host over ssh (the edits
travel host to host).  Both return a ``GroupResult`` (host -> HostResult), like every
distributed action; ``report`` ends with a WARNING naming the hosts on the pure-Python codec.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import posixpath
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from webdb.errors import BadInput, DistributedError, WebDBError
from webdb.ndfs import GroupResult, HostConfig, HostResult, NdfsConfig, load_config, parse_config
from webdb.writer.distributed import deploy_dir

__all__ = ["build_sdist", "check", "deploy", "host_facts", "source_digest", "venv_of"]

PACKAGES = ("webdb", "fetchlist")
TOP_FILES = ("setup.py", "pyproject.toml", "README.md")
MARKER = "webdb-deployed.txt"  # in the venv: the digest of the installed source
CMD_TIMEOUT = 600  # a pip install on a slow host
CODEC = "webdb.tables._blockc"
# Every compiled extension a host must load to say "codec compiled" (setup.py ext_modules).
CODECS = (CODEC, "webdb.writer._stagesc")
# The builds a host's pip needs for the source distribution (pyproject.toml [build-system]);
# a wheelhouse carries them too.  70.1: bdist_wheel without the ``wheel`` package.
BUILD_REQUIRES = ("setuptools>=70.1",)
# The extras a host may need at run time (setup.py extras_require; "test" is for a checkout)
# and the modules that prove each one on a host, where setup.py is not at hand.
# pyarrow and numpy (the bulk load, parquet export) are in install_requires: every host has them.
HOST_EXTRAS = {"dask": ("distributed",)}


def _package_dirs() -> dict[str, str]:
    import fetchlist
    import webdb

    return {"webdb": os.path.dirname(webdb.__file__), "fetchlist": os.path.dirname(fetchlist.__file__)}


def source_digest() -> str:
    """SHA-256 over the ``.py`` files of the imported webdb and fetchlist packages (relative
    path + content): equal here and on a host iff the same code runs there."""
    h = hashlib.sha256()
    for pkg, d in sorted(_package_dirs().items()):
        files = sorted(
            os.path.relpath(os.path.join(p, f), d)
            for p, dirs, fs in os.walk(d)
            if "__pycache__" not in p
            for f in fs
            if f.endswith(".py")
        )
        for rel in files:
            with open(os.path.join(d, rel), "rb") as f:
                h.update(f"{pkg}/{rel}\0".encode() + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _setup_kwargs(top: str) -> dict:
    """The literal keyword arguments of setup.py's ``setup(...)`` call (``packages`` evaluated
    with find_packages), read without running setup.py."""
    import ast

    from setuptools import find_packages

    with open(os.path.join(top, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    kw: dict = {}
    for k in call.keywords:
        if k.arg == "ext_modules":
            # The C files of each Extension(...): they travel in the source distribution.
            kw["ext_files"] = [
                f
                for ext in ast.walk(k.value)
                if isinstance(ext, ast.Call)
                for e in ext.keywords
                if e.arg in ("sources", "depends")
                for f in ast.literal_eval(e.value)
            ]
        elif k.arg == "packages" and isinstance(k.value, ast.Call):
            kw["packages"] = find_packages(top, **{a.arg: ast.literal_eval(a.value) for a in k.value.keywords})
        else:
            kw[k.arg] = ast.literal_eval(k.value)
    return kw


def sdist_files(top: str) -> list[tuple[str, bytes]]:
    """The files of this source tree's source distribution, as (relative path, bytes): setup.py,
    pyproject.toml, README.md, the scripts, every package's ``.py`` files and package data, and
    the C files of the compiled block codec."""
    import glob

    missing = [f for f in TOP_FILES if not os.path.exists(os.path.join(top, f))]
    if missing:
        raise BadInput(f"{top}: not a webdb source tree (no {', '.join(missing)}); deploy from a checkout")
    kw = _setup_kwargs(top)
    rels = [*TOP_FILES, *kw.get("scripts", []), *kw.get("ext_files", [])]
    for pkg in sorted(kw["packages"]):
        d = os.path.join(top, *pkg.split("."))
        rels += [os.path.relpath(os.path.join(d, f), top) for f in sorted(os.listdir(d)) if f.endswith(".py")]
        for pattern in kw.get("package_data", {}).get(pkg, []):
            rels += [os.path.relpath(f, top) for f in sorted(glob.glob(os.path.join(d, pattern))) if os.path.isfile(f)]
    out = []
    for rel in dict.fromkeys(r.replace(os.sep, "/") for r in rels):
        with open(os.path.join(top, rel), "rb") as f:
            out.append((rel, f.read()))
    return out


def build_sdist(dest: str) -> str:
    """Build a source distribution (``NAME-VERSION.tar.gz``) of this source tree into ``dest``;
    returns its path.  A host's pip builds it there (PEP 517, setuptools), compiling the block
    codec with the host's compiler for the host's Python.

    Assembled here (the files of ``sdist_files`` + PKG-INFO, fixed times and owners) so the
    same tree gives the same bytes: an unchanged tree is not shipped again.  Cost: reads the
    source once."""
    import gzip
    import io
    import tarfile

    top = os.path.dirname(_package_dirs()["webdb"])
    files = sdist_files(top)
    kw = _setup_kwargs(top)
    name, version = kw["name"], kw["version"]
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", f"Summary: {kw.get('description', '')}"]
    if kw.get("python_requires"):
        meta.append(f"Requires-Python: {kw['python_requires']}")
    files.append(("PKG-INFO", ("\n".join(meta) + "\n").encode()))
    prefix = f"{name}-{version}"
    path = os.path.join(dest, f"{prefix}.tar.gz")
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, data in sorted(files):
                info = tarfile.TarInfo(f"{prefix}/{rel}")
                info.size, info.mtime, info.mode = len(data), 1577836800, 0o755 if rel.startswith("bin/") else 0o644
                tar.addfile(info, io.BytesIO(data))
    return path


def venv_of(host: HostConfig) -> str:
    """The virtualenv directory of a host: hosts.ini ``python`` must be ``VENV/bin/python*``."""
    py = host.python
    if not py or posixpath.basename(posixpath.dirname(py)) != "bin" or not posixpath.basename(py).startswith("python"):
        raise BadInput(f"[host:{host.name}] python = {py!r}: set it to the python of the virtualenv to deploy "
                       f"into, e.g. /opt/webdb/venv/bin/python")  # fmt: skip
    return posixpath.dirname(posixpath.dirname(py))


def relative_files(ini_path: str) -> list[str]:
    """key_file / known_hosts values of hosts.ini given as relative paths (pushed with it)."""
    cp = configparser.ConfigParser(default_section="\0", interpolation=None, strict=True)
    cp.read(ini_path, encoding="utf-8")
    out = []
    for sec in cp.sections():
        for key in ("key_file", "known_hosts"):
            v = cp[sec].get(key, "").strip()
            if v and not v.startswith(("/", "~")) and v not in out:
                out.append(v)
    return out


def _connect(host: HostConfig):
    """An open fabric Connection to ``host`` with its key checked against known_hosts: the
    one place deploy and check connect, through ndfs's connection factory (the rack's too)."""
    from webdb.ndfs.connect import fabric_connection

    return fabric_connection(host)


class _Host:
    """Commands on one host through a fabric Connection, files through the ndfs transport."""

    def __init__(self, host: HostConfig) -> None:
        self.host = host
        self.conn = _connect(host)
        self._transport = None

    def run(self, cmd: str, what: str, timeout: float = CMD_TIMEOUT) -> str:
        r = self.conn.run(cmd, hide=True, warn=True, timeout=timeout, in_stream=False)
        if r.exited != 0:
            err = (r.stderr.strip() or r.stdout.strip()).splitlines()[-3:]
            raise DistributedError(f"{self.host.name}: {what} failed ({r.exited}): {' | '.join(err)}")
        return r.stdout

    def put_bytes(self, data: bytes, name: str) -> bool:
        """Publish ``<root>/<name>`` with ndfs's atomic put (temp file, fsync, rename, verified)
        unless its completion flag already records these bytes; True if written."""
        from webdb.ndfs import open_transport
        from webdb.ndfs.config import Location

        if self._transport is None:
            self._transport = open_transport(Location(host=self.host))
        have = self._transport.completion(name)
        if have is not None and have.size == len(data) and have.sha256 == hashlib.sha256(data).hexdigest():
            return False
        self._transport.put_bytes(data, name)
        return True

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self.conn.close()


def _each(config: NdfsConfig, what: str, fn: Callable[[_Host], dict], hosts: list[str] | None) -> GroupResult:
    names = hosts or list(config.hosts)
    unknown = [n for n in names if n not in config.hosts]
    if unknown:
        raise BadInput(f"{config.source}: no [host:{unknown[0]}]")
    out = GroupResult(what)
    results: dict[str, HostResult] = {}

    def one(name: str) -> None:
        t0 = time.monotonic()
        h = None
        try:
            h = _Host(config.hosts[name])
            value = fn(h)
            results[name] = HostResult(name, True, value, seconds=time.monotonic() - t0)
        except (WebDBError, OSError) as e:
            results[name] = HostResult(name, False, error=e, seconds=time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - fabric/invoke errors are per-host results too
            err = DistributedError(f"{name}: {type(e).__name__}: {e}")
            results[name] = HostResult(name, False, error=err, seconds=time.monotonic() - t0)
        finally:
            if h is not None:
                h.close()

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in names:
        out[n] = results[n]
    return out


def requirements(extras: tuple[str, ...] = ()) -> list[str]:
    """The ``install_requires`` of setup.py plus the requirements of ``extras``: the dependency
    set a host's venv must hold."""
    kw = _setup_kwargs(os.path.dirname(_package_dirs()["webdb"]))
    reqs = list(kw.get("install_requires", []))
    for extra in extras:
        reqs += [r for r in kw.get("extras_require", {}).get(extra, []) if r not in reqs]
    return reqs


def parse_extras(spec: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"dask"`` -> ("dask",), each checked against HOST_EXTRAS."""
    items = spec.split(",") if isinstance(spec, str) else list(spec or ())
    extras = tuple(dict.fromkeys(e.strip() for e in items if e.strip()))
    unknown = [e for e in extras if e not in HOST_EXTRAS]
    if unknown:
        raise BadInput(f"extras {unknown[0]!r}: not an extra a host can install (one of {', '.join(HOST_EXTRAS)})")
    return extras


def import_names(reqs: list[str]) -> list[str]:
    """Top-level modules proving an install: webdb, fetchlist and one per requirement
    (a distribution ``a-b>=1`` imports as ``a_b``)."""
    names = [re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].strip().lower().replace("-", "_") for r in reqs]
    return ["webdb", "fetchlist", *names]


def wheelhouse_fill(dest: str, reqs: list[str], python_version: str | None = None) -> list[str]:
    """``pip download`` the requirements ``reqs`` and the source distribution's build
    requirements into ``dest`` on this machine (binary wheels only; files already there are
    reused, ``--find-links dest`` lets it work offline when ``dest`` is complete).
    ``python_version`` ("3.11") targets hosts whose Python differs from this one.  Returns the
    wheel file names in ``dest``."""
    import subprocess

    os.makedirs(dest, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
           "--dest", dest, "--find-links", dest]  # fmt: skip
    if python_version and python_version != f"{sys.version_info[0]}.{sys.version_info[1]}":
        cmd += ["--python-version", python_version]
    p = subprocess.run([*cmd, *reqs, *BUILD_REQUIRES], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        err = " | ".join(p.stderr.strip().splitlines()[-3:])
        raise BadInput(f"wheelhouse {dest}: pip download failed: {err}")
    return sorted(f for f in os.listdir(dest) if f.endswith(".whl") and not f.startswith("webdb-"))


def host_facts() -> dict:
    """What this interpreter runs, for ``deploy`` and ``check`` (``python -m webdb.tools.deploy
    facts`` on a host): webdb's version, source digest and location; ``codec``, "compiled" or
    "python", and ``why`` the fallback runs (no compiler, no Python headers, the import's
    error); ``extras``: each of HOST_EXTRAS that imports here."""
    import importlib
    import shutil
    import sysconfig

    from webdb import __version__
    from webdb.tables import block
    from webdb.writer import kernels

    why = ""
    compiled = block.COMPILED and kernels.COMPILED
    for mod in CODECS if not compiled else ():
        try:
            importlib.import_module(mod)
        except ImportError as e:
            cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
            header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
            if "No module named" not in str(e):
                why = f"{mod} does not load: {e}"
            elif shutil.which(cc) is None:
                why = f"no C compiler: {cc} is not on PATH ({os.environ.get('PATH', '')}); install gcc"
            elif not os.path.exists(header):
                why = f"no Python headers: {header} is missing; install python3-dev"
            else:
                why = f"{mod} was not built (run the host's pip install -v of the sdist to see the compiler)"
            break
    else:
        why = "WEBDB_PURE_PYTHON is set" if not compiled else ""
    extras = []
    for extra, mods in HOST_EXTRAS.items():
        try:
            for mod in mods:
                importlib.import_module(mod)
            extras.append(extra)
        except ImportError:
            pass
    return {
        "version": __version__,
        "digest": source_digest(),
        "path": os.path.dirname(_package_dirs()["webdb"]),
        "python": sys.version.split()[0],
        "codec": "compiled" if compiled else "python",
        "why": why,
        "extras": extras,
    }


def codec_line(facts: dict) -> str:
    """A host's codec as ``deploy`` and ``check`` print it: loud when it is the fallback."""
    if facts["codec"] == "compiled":
        return "compiled"
    return f"FALLBACK pure Python (merges 5-8x slower): {facts['why']}"


def _facts(h: _Host, py: str) -> dict:
    import json

    out = h.run(f"{py} -m webdb.tools.deploy facts", "reading the host's facts")
    try:
        return json.loads(out)
    except ValueError:
        raise DistributedError(f"{h.host.name}: python -m webdb.tools.deploy facts printed {out[:200]!r}") from None


@dataclass(frozen=True)
class _Shipment:
    """What deploy sends every host: the source distribution, the wheels, the config files, and
    the digest a host's install marker must hold to count as current."""

    sdist: bytes
    sdist_name: str
    wheels: dict[str, bytes]  # file name -> bytes; empty without a wheelhouse
    reqs: list[str]
    digest: str
    probe_imports: str
    ini_bytes: bytes
    config_dir: str  # where hosts.ini and the files it names live here
    extra_files: list[str]  # relative to config_dir


def _shipment(ini_path: str, reqs: list[str], deps: bool, wheelhouse: str | None) -> _Shipment:
    import tempfile

    ini_bytes = open(ini_path, "rb").read()
    extra_files = relative_files(ini_path)
    with tempfile.TemporaryDirectory() as tmp:
        sdist_path = build_sdist(tmp)
        with open(sdist_path, "rb") as f:
            sdist = f.read()
    house: dict[str, bytes] = {}
    if wheelhouse:
        for f in wheelhouse_fill(wheelhouse, reqs):
            with open(os.path.join(wheelhouse, f), "rb") as fh:
                house[f] = fh.read()
    # The marker covers the shipped source (C files included), the dependency set, the extras
    # and how it was installed: a deploy that changes any of them installs again.
    mode = "wheelhouse " + " ".join(sorted(house)) if wheelhouse else "index"
    digest = hashlib.sha256(
        "\n".join([hashlib.sha256(sdist).hexdigest(), *reqs, mode, f"upgrade={deps}"]).encode()
    ).hexdigest()
    return _Shipment(
        sdist=sdist,
        sdist_name=os.path.basename(sdist_path),
        wheels=house,
        reqs=reqs,
        digest=digest,
        probe_imports=", ".join(import_names(reqs)),
        ini_bytes=ini_bytes,
        config_dir=os.path.dirname(os.path.abspath(ini_path)),
        extra_files=extra_files,
    )


def _make_dirs(h: _Host, config: NdfsConfig, db: str | None) -> str:
    """The data root, the db's share-group directories and the (private) config folder; returns
    the config folder."""
    hc = h.host
    conf = deploy_dir(hc.root, config)  # per config: racks sharing a root do not collide
    dirs = [hc.root, conf]
    if db:
        dirs += [posixpath.join(hc.root, db, g) for g in config.groups_on(hc.name)]
    h.run("mkdir -p " + " ".join(map(shlex.quote, dirs)), "creating directories")
    # Key files arrive by atomic put with default modes: the folder keeps them private.
    h.run(f"chmod 700 {shlex.quote(conf)}", "protecting the config folder")
    return conf


def _ensure_venv(h: _Host, base_python: str, done: list[str]) -> None:
    """A venv of its own (no system site-packages) at the python hosts.ini names."""
    hc = h.host
    venv = venv_of(hc)
    py = shlex.quote(hc.python)
    cfg = shlex.quote(posixpath.join(venv, "pyvenv.cfg"))
    state = h.run(f"if test -x {py}; then grep -qi '^include-system-site-packages *= *true' {cfg} 2>/dev/null "
                  f"&& echo shared || echo own; else echo none; fi", "looking for the venv").strip()  # fmt: skip
    if state != "own":
        # From the host's own python, never with the host's site-packages: the venv holds
        # exactly what deploy installs (and proves below).
        h.run(f"{shlex.quote(base_python)} -m venv --clear {shlex.quote(venv)}", "creating the venv")
        done.append("venv created" if state == "none" else "venv rebuilt (had system site-packages)")
    if h.run(f"test -f {cfg} && echo yes || echo no", "looking for pyvenv.cfg").strip() != "yes":
        raise BadInput(f"[host:{hc.name}] python = {hc.python}: {venv} is not a virtualenv (no pyvenv.cfg); "
                       f"refusing to install into it")  # fmt: skip


class _Install:
    """Installing the shipment into one host's venv and proving it runs there."""

    def __init__(self, h: _Host, ship: _Shipment, conf: str, deps: bool) -> None:
        hc = h.host
        self.h, self.ship, self.deps = h, ship, deps
        self.venv = venv_of(hc)
        self.conf_rel = posixpath.relpath(conf, hc.root)
        self.py = shlex.quote(hc.python)
        self.marker = posixpath.join(self.venv, MARKER)
        self.pip = f"{self.py} -m pip install -q --disable-pip-version-check"
        if ship.wheels:
            for f, b in ship.wheels.items():
                h.put_bytes(b, posixpath.join(self.conf_rel, "wheels", f))
            self.pip += f" --no-index --find-links {shlex.quote(posixpath.join(conf, 'wheels'))}"

    def installed_digest(self) -> str:
        return self.h.run(f"cat {shlex.quote(self.marker)} 2>/dev/null || true", "reading the deployed digest").strip()

    def install(self) -> None:
        h, ship = self.h, self.ship
        src = posixpath.join(self.conf_rel, ship.sdist_name)
        h.put_bytes(ship.sdist, src)
        h.run(f"rm -f {shlex.quote(self.marker)}", "clearing the install marker")
        upgrade = " --upgrade --upgrade-strategy eager" if self.deps else ""
        h.run(f"{self.pip}{upgrade} {' '.join(map(shlex.quote, ship.reqs))}", "pip install the dependencies")
        # Built here, by the host's pip and compiler; never from pip's wheel cache (a wheel
        # built before, or on a host that had a compiler, under the same name).
        q = shlex.quote(posixpath.join(h.host.root, src))
        h.run(f"{self.pip} --no-cache-dir --force-reinstall --no-deps {q}", "pip install webdb (building its codec)")

    def prove(self) -> tuple[str, dict]:
        h, probe_imports = self.h, self.ship.probe_imports
        h.run(f"{self.py} -c {shlex.quote('import ' + probe_imports)}", f"importing {probe_imports} in {self.venv}")
        version = h.run(f"{shlex.quote(posixpath.join(self.venv, 'bin', 'webdb'))} --version", "webdb --version")
        return version.strip(), _facts(h, self.py)

    def run(self, done: list[str]) -> tuple[str, dict]:
        """Install where the marker is not current, prove, and install again where the proof
        shows a venv without the codec or a broken one; records the install in the marker.
        Returns the proved version and the host's facts."""
        digest = self.ship.digest
        have = self.installed_digest()
        if have != digest:
            self.install()
            done.append("installed")
        try:
            try:
                version, facts = self.prove()
                if facts["codec"] != "compiled" and have == digest:
                    self.install()  # current, but without the codec: a compiler may be there now
                    done.append("rebuilt")
                    version, facts = self.prove()
            except DistributedError:
                if have != digest:
                    raise
                self.install()  # the marker said current but the venv is broken: install again
                done.append("reinstalled")
                version, facts = self.prove()
        except DistributedError as e:
            raise DistributedError(f"{e}; the venv cannot run webdb: fix the cause, or remove {self.venv} "
                                   f"and run fab deploy again to rebuild it") from None  # fmt: skip
        tmp = shlex.quote(f"{self.marker}.tmp")
        self.h.run(f"echo {digest} > {tmp} && sync {tmp} && mv -f {tmp} {shlex.quote(self.marker)}",
                   "recording the install")  # fmt: skip
        return version, facts


def _push_config(h: _Host, ship: _Shipment, conf: str) -> bool:
    """hosts.ini and the key files it names, into the config folder; True if any changed."""
    conf_rel = posixpath.relpath(conf, h.host.root)
    changed = h.put_bytes(ship.ini_bytes, posixpath.join(conf_rel, "hosts.ini"))
    for rel in ship.extra_files:
        with open(os.path.join(ship.config_dir, rel), "rb") as f:
            changed |= h.put_bytes(f.read(), posixpath.join(conf_rel, rel))
        h.run(f"chmod 600 {shlex.quote(posixpath.join(conf, rel))}", "protecting key files")
    return changed


def deploy(ini_path: str, *, db: str | None = None, base_python: str = "python3", deps: bool = False,
           wheelhouse: str | None = None, hosts: list[str] | None = None, extras: tuple[str, ...] = (),
           require_compiled: bool = False) -> GroupResult:  # fmt: skip
    """Install, prove, create directories and push the config on every host (see module doc).

    ``wheelhouse``: a directory on this machine; the dependencies (and the build's setuptools)
    are downloaded into it (``pip download``), shipped to each host and installed with
    ``--no-index`` (hosts need no network).  Without it each host's pip resolves them from
    the index it is configured for.  ``deps``: also upgrade dependencies already installed to
    the newest offered.  ``extras``: of HOST_EXTRAS, installed and proved too.
    ``require_compiled``: a host that cannot build the block codec fails (else it succeeds,
    its result naming the fallback and why)."""
    config = check_file(ini_path, "hosts.ini")
    extras = parse_extras(extras)
    db = db or config.db
    ship = _shipment(ini_path, requirements(extras), deps, wheelhouse)
    code = source_digest()

    def one(h: _Host) -> dict:
        conf = _make_dirs(h, config, db)
        done: list[str] = []
        _ensure_venv(h, base_python, done)
        installing = _Install(h, ship, conf, deps)
        version, facts = installing.run(done)
        if _push_config(h, ship, conf):
            done.append("config pushed")
        if require_compiled and facts["codec"] != "compiled":
            raise DistributedError(f"{h.host.name}: the compiled block codec is required: {facts['why']}")
        return {"done": done or ["unchanged"], "venv": installing.venv, "proved": version, "digest": code[:12],
                "codec": codec_line(facts), "extras": ", ".join(facts["extras"]) or "none"}  # fmt: skip

    return _each(config, f"deploy {ini_path}", one, hosts)


def check_file(ini_path: str, what: str) -> NdfsConfig:
    """``load_config`` with a missing or unreadable file reported as BadInput naming it."""
    if not os.path.isfile(ini_path):
        raise BadInput(f"{ini_path}: no such {what}" + (" (it is a directory)" if os.path.isdir(ini_path) else ""))
    try:
        return load_config(ini_path)
    except OSError as e:
        raise BadInput(f"{ini_path}: cannot read {what}: {e.strerror}") from None


def check(ini_path: str, *, db: str | None = None, max_skew: float = 2.0, min_free_mb: int = 100,
          hosts: list[str] | None = None, require_compiled: bool = False) -> GroupResult:  # fmt: skip
    """Per host: reachable (and its host key), same version and source digest, the block codec
    it runs and the extras it imports, free disk, clock, config, section roots, stale or held
    locks, and ssh from the host to every other host.  A host fails if any check fails (and,
    with ``require_compiled``, if it runs the pure-Python codec)."""
    from webdb import __version__

    config = check_file(ini_path, "hosts.ini")
    db = db or config.db
    ini_bytes = open(ini_path, "rb").read()
    digest = source_digest()
    ini_sha = hashlib.sha256(ini_bytes).hexdigest()

    def one(h: _Host) -> dict:
        hc = h.host
        py = shlex.quote(hc.python or "python3")
        problems: list[str] = []
        key = h.conn.client.get_transport().get_remote_server_key()
        t0 = time.time()
        remote = float(h.run("date +%s.%N", "reading the clock").strip())
        t1 = time.time()
        skew = remote - (t0 + t1) / 2
        if abs(skew) > max_skew + (t1 - t0) / 2:
            problems.append(f"clock off by {skew:+.2f}s (tolerance {max_skew:g}s)")
        facts = _facts(h, py)
        if [facts["version"], facts["digest"]] != [__version__, digest]:
            problems.append(f"runs webdb {facts['version']} (source {facts['digest'][:12]}), this is {__version__} "
                            f"({digest[:12]}): run fab deploy")  # fmt: skip
        if require_compiled and facts["codec"] != "compiled":
            problems.append(f"runs the pure-Python block codec: {facts['why']}")
        free_kb = int(h.run(f"df -Pk {shlex.quote(hc.root)} | tail -1", "df").split()[3])
        if free_kb < min_free_mb * 1024:
            problems.append(f"only {free_kb // 1024} MiB free under {hc.root} (want {min_free_mb})")
        sections: list[str] = []
        locks: list[str] = []
        if db:
            # The agent's writer lock is <root>/<db>/LOCK; the sections are share-group folders.
            dirs = [posixpath.join(hc.root, db)] + [posixpath.join(hc.root, db, g) for g in config.groups_on(hc.name)]
            lines = h.run(f"{py} -m webdb.tools.deploy locks " + " ".join(map(shlex.quote, dirs)), "reading locks")
            for n, line in enumerate(lines.splitlines()):
                path, _, state = line.partition(" ")
                if state == "missing":
                    problems.append(f"{path} is missing: run fab deploy --db {db}")
                elif n > 0:
                    sections.append(posixpath.basename(path))
                if state not in ("free", "missing"):
                    locks.append(f"{posixpath.relpath(path, hc.root)} {state}")
        conf = posixpath.join(deploy_dir(hc.root, config), "hosts.ini")
        have = h.run(f"sha256sum {shlex.quote(conf)} 2>/dev/null || true", "reading the config").split()
        if not have or have[0] != ini_sha:
            problems.append(f"{conf} is missing or differs from {ini_path}: run fab deploy")
        else:
            probe = h.run(
                f"{py} -m webdb.tools.deploy probe {shlex.quote(conf)} {shlex.quote(hc.name)}", "probing peers"
            )
            problems += [line for line in probe.splitlines() if line.strip()]
        if problems:
            raise DistributedError(f"{hc.name}: " + "; ".join(problems))
        return {
            "version": facts["version"],
            "digest": facts["digest"][:12],
            "codec": codec_line(facts),
            "extras": ", ".join(facts["extras"]) or "none",
            "skew": round(skew, 3),
            "free_mb": free_kb // 1024,
            "host key": f"{key.get_name()} {key_fingerprint(key)}",
            "sections": ", ".join(sections) or "none",
            "locks": "; ".join(locks) or "none",
        }

    return _each(config, f"check {ini_path}", one, hosts)


def key_fingerprint(key) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a paramiko public key (what ssh-keygen -l shows)."""
    import base64

    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def lock_state(section_dir: str) -> str:
    """``free``, ``missing``, ``held by pid N on HOST since T`` or ``stale (pid N on HOST ...)``:
    the writer lock of one section directory, read on the host that holds it."""
    import fcntl
    import json

    if not os.path.isdir(section_dir):
        return "missing"
    path = os.path.join(section_dir, "LOCK")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return "free"
    try:
        try:
            raw = os.read(fd, 4096)
            holder = json.loads(raw) if raw.strip() else {}
        except ValueError:
            holder = {}
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since {holder.get('since', '?')}"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return f"held by {who}"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return f"stale ({who}, process gone; the next writer takes it over)" if holder else "free"
    finally:
        os.close(fd)


def probe(conf: str, me: str) -> list[str]:
    """From host ``me``: reach every other host with the ndfs transport (what the edits use)."""
    from webdb.ndfs import open_transport
    from webdb.ndfs.config import Location

    with open(conf, encoding="utf-8") as f:
        config = parse_config(f.read(), source=conf, base_dir=os.path.dirname(conf))
    bad = []
    for name, hc in config.hosts.items():
        if name == me:
            continue
        t = open_transport(Location(host=hc), local_host=me)
        try:
            t.disk_free()
        except (WebDBError, OSError) as e:
            bad.append(f"cannot reach {name} from {me}: {e}")
        finally:
            t.close()
    return bad


def fallback_hosts(res: GroupResult) -> dict[str, str]:
    """Hosts of a deploy or check that succeeded but run the pure-Python codec -> why."""
    return {n: r.value["codec"] for n, r in res.items() if r.ok and r.value["codec"] != "compiled"}


def report(res: GroupResult) -> str:
    """A per-host table of a deploy or check, then a WARNING naming the hosts that run the
    pure-Python block codec."""
    lines = [res.what]
    for name, r in res.items():
        if r.ok:
            detail = ", ".join(f"{k} {', '.join(v) if isinstance(v, list) else v}" for k, v in r.value.items())
            lines.append(f"  {name:<12} ok      {r.seconds:6.1f}s  {detail}")
        else:
            lines.append(f"  {name:<12} FAILED  {r.seconds:6.1f}s  {r.error}")
    slow = fallback_hosts(res)
    if slow:
        lines.append(f"WARNING: {len(slow)} of {len(res)} hosts run the pure-Python block codec, not {CODEC}: "
                     f"{', '.join(slow)} (install gcc and python3-dev there and run fab deploy again)")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Helpers run on a host by ``deploy`` and ``check``: ``facts``, ``locks DIR...`` and
    ``probe CONF HOST``."""
    import json

    argv = sys.argv[1:] if argv is None else argv
    if argv == ["facts"]:
        print(json.dumps(host_facts()))
        return 0
    if len(argv) >= 2 and argv[0] == "locks":
        for d in argv[1:]:
            print(d, lock_state(d))
        return 0
    if len(argv) == 3 and argv[0] == "probe":
        for line in probe(argv[1], argv[2]):
            print(line)
        return 0
    print("usage: python -m webdb.tools.deploy facts | probe HOSTS_INI HOST | locks DIR...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
