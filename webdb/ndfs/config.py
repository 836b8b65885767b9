"""hosts.ini: the hosts of an ndfs machine group and the share group -> location mapping.

Every machine of a group reads the same file (see ``hosts.ini`` at the repository root and
docs/ndfs.md for every key).  Sections:

``[ndfs]``          defaults for every host (user, port, key_file, known_hosts, jump, python,
                    transport, connect_timeout, timeout), the default ``db`` name, and
                    ``dask_scheduler`` (``tcp://HOST:PORT``: run updates on that Dask cluster).
``[host:NAME]``     one machine: ``address`` and ``root`` are required.
``[group:NAME]``    ``locations``: comma-separated host names and/or absolute local paths.
``[sections]``      the distributed WebDB's ``section-0000`` ... groups, compactly:
                    ``count``, round-robin ``hosts`` with ``replicas``, and explicit ranges
                    such as ``0-3 = alpha`` or ``7 = /mnt/nfs/ndfs``.

Every error names the file, the section and the key.
"""

from __future__ import annotations

import configparser
import getpass
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from webdb.errors import BadInput
from webdb.ndfs.errors import ConfigError
from webdb.ndfs.names import validate_component, validate_db_name

TRANSPORTS = ("auto", "sftp", "scp", "rsync")
# section-0000 ... section-9999 keep their lexical order.  The same bound as
# webdb.core.sections.MAX_SECTIONS (ndfs imports nothing of webdb's core; tests/test_config.py checks).
MAX_SECTIONS = 10000

HOST_KEYS = frozenset(
    {
        "address",
        "port",
        "user",
        "key_file",
        "known_hosts",
        "jump",
        "root",
        "python",
        "transport",
        "connect_timeout",
        "timeout",
    }
)
# Keys of [ndfs] that are defaults for every [host:*] section.
INHERITED_KEYS = frozenset(
    {"port", "user", "key_file", "known_hosts", "jump", "python", "transport", "connect_timeout", "timeout"}
)
NDFS_KEYS = INHERITED_KEYS | {"db", "dask_scheduler"}

_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# An address is a DNS name, an IPv4 address or a bare IPv6 address; port and user have keys.
_ADDRESS = re.compile(r"^(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f.]*)$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_LINE_KEY = re.compile(r"^([^=:\s\[][^=:]*?)\s*[=:]")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
# A Dask scheduler address: PROTOCOL://HOST:PORT (an IPv6 host in brackets).
_SCHEDULER = re.compile(r"^(tcp|tls)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def check_scheduler_address(text: str) -> str:
    """A Dask scheduler address ``tcp://HOST:PORT`` (or ``tls://``); ValueError saying what is
    wrong."""
    m = _SCHEDULER.match(text.strip())
    if not m or not 1 <= int(m.group(3)) <= 65535:
        raise ValueError(f"bad Dask scheduler address {text!r} (expected tcp://HOST:PORT)")
    return text.strip()


def section_group(i: int) -> str:
    """The share group of section ``i`` of the distributed WebDB: ``section-0000`` ..."""
    if not 0 <= i < MAX_SECTIONS:
        raise ConfigError(f"section number {i} out of range 0..{MAX_SECTIONS - 1}")
    return f"section-{i:04d}"


@dataclass(frozen=True)
class JumpHost:
    """``jump = [user@]host[:port]``: the host a connection to a [host:*] is tunnelled through
    (as ``ssh -J``).  ``user`` None means the target host's user.  An IPv6 address with a port
    is written in brackets: ``[2001:db8::1]:2222``."""

    address: str
    port: int = 22
    user: str | None = None

    @classmethod
    def parse(cls, text: str) -> JumpHost:
        """Parse ``[user@]host[:port]``; ValueError saying what is wrong."""
        user, at, rest = text.strip().rpartition("@")
        if at and not user:
            raise ValueError(f"empty user in {text!r}")
        port = "22"
        if rest.startswith("["):
            addr, close, tail = rest[1:].partition("]")
            if not close or (tail and not tail.startswith(":")):
                raise ValueError(f"bad bracketed address in {text!r}")
            port = tail[1:] or port
        elif rest.count(":") == 1:
            addr, _, port = rest.partition(":")
        else:
            addr = rest  # a host name, IPv4, or an IPv6 address without a port
        if not addr or any(c.isspace() or c in "@[]/" for c in addr):
            raise ValueError(f"bad host {addr!r} in {text!r}")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"bad port {port!r} in {text!r} (1..65535)")
        return cls(addr, int(port), user or None)

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.user + '@' if self.user else ''}{host}:{self.port}"


@dataclass(frozen=True)
class HostConfig:
    """One machine reachable over ssh.  ``known_hosts`` None means ``~/.ssh/known_hosts``."""

    name: str
    address: str
    root: str
    port: int = 22
    user: str = field(default_factory=getpass.getuser)
    key_file: Path | None = None
    known_hosts: Path | None = None
    jump: JumpHost | None = None
    python: str | None = None
    transport: str = "auto"
    connect_timeout: float = 10.0
    timeout: float = 30.0

    def known_hosts_path(self) -> Path:
        """The known_hosts file host keys are checked against (resolved at connect time)."""
        return self.known_hosts or Path(os.path.expanduser("~/.ssh/known_hosts"))


@dataclass(frozen=True)
class Location:
    """Where a share group lives: a host (over ssh) or a local path (this disk or an NFS mount)."""

    host: HostConfig | None = None
    path: str | None = None

    @property
    def label(self) -> str:
        """The key of this location in per-host results."""
        return self.host.name if self.host else str(self.path)


@dataclass(frozen=True)
class NdfsConfig:
    """A parsed hosts.ini.  ``groups`` includes the ``section-NNNN`` groups of ``[sections]``."""

    source: str
    hosts: dict[str, HostConfig]
    groups: dict[str, tuple[Location, ...]]
    sections: int = 0
    db: str | None = None
    dask_scheduler: str | None = None

    def locations(self, group: str) -> tuple[Location, ...]:
        """Every location holding ``group``; BadInput if the group is not configured."""
        try:
            return self.groups[group]
        except KeyError:
            raise ConfigError(
                f"{self.source}: share group {group!r} is not configured "
                f"(known: {', '.join(sorted(self.groups)) or 'none'})"
            ) from None

    def section_group(self, i: int) -> str:
        """The group name of section ``i``, checked against ``[sections] count``."""
        if not 0 <= i < self.sections:
            raise ConfigError(f"{self.source}: section {i} out of range (count = {self.sections})")
        return section_group(i)

    def groups_on(self, host: str) -> list[str]:
        """The share groups a host holds, sorted."""
        return sorted(g for g, locs in self.groups.items() if any(loc.label == host for loc in locs))

    def to_json(self) -> dict:
        """The config as JSON-safe data (what a local rack ships to its agents instead of INI
        text).  Key file paths are kept as resolved here."""

        def loc(x: Location) -> dict:
            return {"host": x.host.name} if x.host else {"path": x.path}

        hosts = {
            n: {
                f: (str(v) if isinstance(v, Path) else v)
                for f, v in h.__dict__.items()
                if f != "name" and v is not None
            }
            for n, h in self.hosts.items()
        }
        groups = {g: [loc(x) for x in locs] for g, locs in self.groups.items()}
        return {
            "source": self.source,
            "hosts": hosts,
            "groups": groups,
            "sections": self.sections,
            "db": self.db,
            "dask_scheduler": self.dask_scheduler,
        }

    @classmethod
    def from_json(cls, d: dict) -> NdfsConfig:
        """Inverse of ``to_json``; every field is checked again as when a file is read."""
        source = str(d.get("source", "<config>"))
        hosts = {}
        for n, h in d.get("hosts", {}).items():
            kw = dict(h)
            for f in ("key_file", "known_hosts"):
                if kw.get(f) is not None:
                    kw[f] = Path(kw[f])
            hosts[n] = HostConfig(name=n, **kw)
        r = _Reader(source, Path("/"))
        for n, h in hosts.items():  # the same checks as a [host:NAME] section
            r.host(n, f"host:{n}", {"address": h.address, "root": h.root}, {})
        groups = {}
        for g, locs in d.get("groups", {}).items():
            out = []
            for x in locs:
                if "host" in x:
                    out.append(Location(host=hosts[x["host"]]))
                else:
                    out.append(Location(path=r.absolute(f"group:{g}", "locations", x["path"])))
            groups[g] = tuple(out)
        db = d.get("db")
        if db is not None:
            try:
                validate_db_name(db)
            except BadInput as e:
                raise ConfigError(f"{source}: {e}") from None
        sched = d.get("dask_scheduler")
        if sched is not None:
            try:
                sched = check_scheduler_address(sched)
            except ValueError as e:
                raise ConfigError(f"{source}: {e}") from None
        return cls(
            source=source, hosts=hosts, groups=groups, sections=int(d.get("sections", 0)), db=db, dask_scheduler=sched
        )


class _Reader:
    """Parses one file, turning every problem into a ConfigError naming file, section and key."""

    def __init__(self, source: str, base_dir: Path, text: str = "") -> None:
        self.source = source
        self.base_dir = base_dir.absolute()
        # (section, key) -> line number, and section -> its header's line, for error messages
        self.lines: dict[tuple[str, str | None], int] = {}
        sec = None
        for n, line in enumerate(text.splitlines(), 1):
            t = line.strip()
            if t.startswith("[") and t.endswith("]"):
                sec = t[1:-1]
                self.lines.setdefault((sec, None), n)
            elif sec is not None and line[:1] not in (" ", "\t", "#", ";"):
                m = _LINE_KEY.match(line)
                if m:
                    self.lines.setdefault((sec, m.group(1).strip().lower()), n)

    def error(self, section: str, key: str | None, problem: str) -> ConfigError:
        where = f"[{section}] {key}" if key else f"[{section}]"
        line = self.lines.get((section, key)) or self.lines.get((section, None))
        return ConfigError(f"{self.source}{f':{line}' if line else ''}: {where}: {problem}")

    def text(self, sec: str, key: str, value: str) -> str:
        value = value.strip()
        if not value:
            raise self.error(sec, key, "is empty")
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise self.error(sec, key, f"contains a control character: {value!r}")
        return value

    def number(self, sec: str, key: str, value: str, lo: float, hi: float, kind: type) -> int | float:
        try:
            n = kind(value.strip())
        except ValueError:
            raise self.error(sec, key, f"bad {key} {value.strip()!r}: not a number") from None
        if n != n or not lo <= n <= hi:
            raise self.error(sec, key, f"bad {key} {n}: must be in {lo}..{hi}")
        return n

    def file(self, sec: str, key: str, value: str) -> Path:
        p = Path(os.path.expanduser(self.text(sec, key, value)))
        return p if p.is_absolute() else self.base_dir / p

    def absolute(self, sec: str, key: str, value: str) -> str:
        p = self.text(sec, key, value)
        if not p.startswith("/"):
            raise self.error(sec, key, f"{p!r} must be an absolute path")
        norm = os.path.normpath(p)
        if norm.startswith("//"):
            norm = norm[1:]
        if p.rstrip("/") != norm.rstrip("/") or "//" in p:
            raise self.error(sec, key, f"{p!r} must be a normalized absolute path (no '.', '..' or '//'; {norm!r}?)")
        return norm

    def host(self, name: str, sec: str, items: dict[str, str], defaults: dict[str, str]) -> HostConfig:
        for key in items:
            if key not in HOST_KEYS:
                raise self.error(sec, key, f"unknown key (known: {', '.join(sorted(HOST_KEYS))})")
        for key in ("address", "root"):
            if key not in items:
                raise self.error(sec, key, f"missing (every host needs {key})")
        merged = {**defaults, **items}
        kw: dict[str, object] = {
            "name": name,
            "address": self.text(sec, "address", merged["address"]),
            "root": self.absolute(sec, "root", merged["root"]),
        }
        addr = str(kw["address"])
        if "@" in addr:
            user = addr.partition("@")[0]
            raise self.error(sec, "address", f"bad address {addr!r}: write the user as its own key (user = {user})")
        if addr.count(":") == 1:
            port = addr.partition(":")[2]
            raise self.error(sec, "address", f"bad address {addr!r}: write the port as its own key (port = {port})")
        if addr.startswith("[") or not _ADDRESS.match(addr):
            raise self.error(sec, "address", f"bad address {addr!r}: a host name, IPv4 or bare IPv6 address")
        if "port" in merged:
            kw["port"] = self.number(sec, "port", merged["port"], 1, 65535, int)
        if "user" in merged:
            kw["user"] = self.text(sec, "user", merged["user"])
            if not _USER.match(str(kw["user"])):
                raise self.error(sec, "user", f"bad user {kw['user']!r}: letters, digits, '.', '_', '-'")
        for key in ("key_file", "known_hosts"):
            if key in merged:
                kw[key] = self.file(sec, key, merged[key])
        if "jump" in merged:
            try:
                kw["jump"] = JumpHost.parse(self.text(sec, "jump", merged["jump"]))
            except ValueError as e:
                raise self.error(sec, "jump", str(e)) from None
        if "python" in merged:
            kw["python"] = self.text(sec, "python", merged["python"])
        if "transport" in merged:
            t = merged["transport"].strip()
            if t not in TRANSPORTS:
                raise self.error(sec, "transport", f"unknown transport {t!r} (one of {', '.join(TRANSPORTS)})")
            kw["transport"] = t
        for key in ("connect_timeout", "timeout"):
            if key in merged:
                kw[key] = float(self.number(sec, key, merged[key], 0.001, 86400, float))
        return HostConfig(**kw)  # type: ignore[arg-type]

    def locations(self, sec: str, key: str, value: str, hosts: dict[str, HostConfig]) -> tuple[Location, ...]:
        out: list[Location] = []
        for token in (t.strip() for t in value.split(",")):
            if not token:
                raise self.error(sec, key, f"empty location in {value.strip()!r}")
            if token.startswith("/"):
                loc = Location(path=self.absolute(sec, key, token))
            elif token in hosts:
                loc = Location(host=hosts[token])
            elif token.startswith(("~", ".")):
                raise self.error(sec, key, f"local path {token!r} must be absolute")
            else:
                known = ", ".join(sorted(hosts)) or "none"
                raise self.error(sec, key, f"unknown host {token!r} (hosts: {known}; paths must be absolute)")
            if loc not in out:
                out.append(loc)
        return tuple(out)

    def sections(
        self, items: dict[str, str], hosts: dict[str, HostConfig]
    ) -> tuple[int, dict[str, tuple[Location, ...]]]:
        sec = "sections"
        if "count" not in items:
            raise self.error(sec, "count", "missing (how many sections the WebDB has)")
        count = int(self.number(sec, "count", items["count"], 1, MAX_SECTIONS, int))
        placed: dict[int, tuple[Location, ...]] = {}
        given_by: dict[int, str] = {}
        for key, value in items.items():
            if key in ("count", "hosts", "replicas"):
                continue
            m = _RANGE.match(key)
            if not m:
                raise self.error(sec, key, "unknown key (count, hosts, replicas, or a range such as 0-3)")
            lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
            if lo > hi or hi >= count:
                raise self.error(sec, key, f"range {key} is empty or beyond count = {count}")
            locs = self.locations(sec, key, value, hosts)
            for i in range(lo, hi + 1):
                if i in given_by:
                    raise self.error(sec, key, f"section {i} is also given by {given_by[i]!r}")
                given_by[i] = key
                placed[i] = locs
        if "hosts" in items:
            ring = self.locations(sec, "hosts", items["hosts"], hosts)
            replicas = int(self.number(sec, "replicas", items.get("replicas", "1"), 1, len(ring), int))
            for i in range(count):
                placed.setdefault(i, tuple(ring[(i + r) % len(ring)] for r in range(replicas)))
        elif "replicas" in items:
            raise self.error(sec, "replicas", "needs hosts (replicas apply to the round-robin hosts list)")
        missing = [i for i in range(count) if i not in placed]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise self.error(sec, None, f"sections {shown} have no location (add hosts = ... or a range)")
        return count, {section_group(i): placed[i] for i in range(count)}


def parse_config(text: str, source: str = "<hosts.ini>", base_dir: str | os.PathLike[str] = ".") -> NdfsConfig:
    """Parse hosts.ini text.  Relative key_file/known_hosts paths are relative to ``base_dir``."""
    # No DEFAULT section (its keys would leak into every section) and no %-interpolation.
    cp = configparser.ConfigParser(default_section="\0", interpolation=None, strict=True)
    try:
        cp.read_string(text, source=source)
    except configparser.Error as e:
        raise ConfigError(f"{source}: {e.message if hasattr(e, 'message') else e}") from None
    r = _Reader(source, Path(base_dir), text)

    defaults: dict[str, str] = {}
    db: str | None = None
    sched: str | None = None
    if cp.has_section("ndfs"):
        for key in cp["ndfs"]:
            if key not in NDFS_KEYS:
                raise r.error("ndfs", key, f"unknown key (known: {', '.join(sorted(NDFS_KEYS))})")
        defaults = {k: v for k, v in cp.items("ndfs") if k in INHERITED_KEYS}
        if "db" in cp["ndfs"]:
            db = r.text("ndfs", "db", cp["ndfs"]["db"])
            try:
                validate_db_name(db)
            except BadInput as e:
                raise r.error("ndfs", "db", str(e)) from None
        if "dask_scheduler" in cp["ndfs"]:
            try:
                sched = check_scheduler_address(cp["ndfs"]["dask_scheduler"])
            except ValueError as e:
                raise r.error("ndfs", "dask_scheduler", str(e)) from None
        # Check the defaults themselves once, so a bad default is reported where it is written.
        r.host("defaults", "ndfs", {"address": "x", "root": "/", **defaults}, {})

    hosts: dict[str, HostConfig] = {}
    for sec in cp.sections():
        kind, _, name = sec.partition(":")
        if sec in ("ndfs", "sections") or kind == "group":
            continue
        if kind != "host" or not name:
            raise r.error(sec, None, "unknown section (expected [ndfs], [host:NAME], [group:NAME] or [sections])")
        if not _HOST_NAME.match(name):
            raise r.error(sec, None, f"bad host name {name!r} (letters, digits, '.', '_', '-')")
        hosts[name] = r.host(name, sec, dict(cp.items(sec)), defaults)

    groups: dict[str, tuple[Location, ...]] = {}
    for sec in cp.sections():
        kind, _, name = sec.partition(":")
        if kind != "group":
            continue
        _component(r, sec, None, name, "share group name")
        if name.startswith("section-"):
            raise r.error(sec, None, "section-NNNN groups are defined by [sections]")
        items = dict(cp.items(sec))
        for key in items:
            if key != "locations":
                raise r.error(sec, key, "unknown key (a group has only locations)")
        if "locations" not in items:
            raise r.error(sec, "locations", "missing (comma-separated host names and/or absolute paths)")
        groups[name] = r.locations(sec, "locations", items["locations"], hosts)

    count = 0
    if cp.has_section("sections"):
        count, section_groups = r.sections(dict(cp.items("sections")), hosts)
        groups.update(section_groups)
    return NdfsConfig(source=source, hosts=hosts, groups=groups, sections=count, db=db, dask_scheduler=sched)


def _component(r: _Reader, sec: str, key: str | None, value: str, what: str) -> None:
    try:
        validate_component(value, what)
    except BadInput as e:
        raise r.error(sec, key, str(e)) from None


def load_config(path: str | os.PathLike[str]) -> NdfsConfig:
    """Read and validate a hosts.ini file."""
    p = Path(path)
    try:
        if p.is_dir():
            raise ConfigError(f"{p}: is a directory, not an ndfs config file")
        with open(p, "rb") as f:
            data = f.read((1 << 20) + 1)
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ndfs config: {e.strerror or e}") from None
    if len(data) > 1 << 20:
        raise ConfigError(f"{p}: larger than 1 MiB, not an ndfs config file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(f"{p}:{line}: not UTF-8 (byte {data[e.start]:#04x} at offset {e.start})") from None
    return parse_config(text, source=str(p), base_dir=p.parent)


def local_config(db_path: str | os.PathLike[str], sections: int) -> NdfsConfig:
    """The config of a db whose ``sections`` sections all live in the directory ``db_path`` on
    this machine (``Rack.local``), built as data: the path is never written into INI text, so
    a comma, newline or ``=`` in it is just a character of the path."""
    path = os.path.abspath(db_path)
    source = f"<local {path}>"
    root, name = os.path.dirname(path), os.path.basename(path)
    try:
        validate_db_name(name, "db directory name")
    except BadInput as e:
        raise ConfigError(f"{source}: {e}") from None
    if any(ord(c) < 32 or ord(c) == 127 for c in root):
        raise ConfigError(f"{source}: the path holds a control character")
    if not isinstance(sections, int) or isinstance(sections, bool) or not 1 <= sections <= MAX_SECTIONS:
        raise ConfigError(f"{source}: sections must be in 1..{MAX_SECTIONS}, not {sections!r}")
    loc = (Location(path=root),)
    groups = {section_group(i): loc for i in range(sections)}
    return NdfsConfig(source=source, hosts={}, groups=groups, sections=sections, db=name)
