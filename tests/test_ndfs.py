"""ndfs without ssh: name validation, hosts.ini validation, the local transport, share groups
over local paths.  The same transport contract over real sshd is in test_ndfs_ssh.py."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from webdb.errors import BadInput, CorruptionError, DistributedError
from webdb.ndfs import (
    NDFS,
    ChecksumMismatch,
    Completion,
    CompletionTimeout,
    ConfigError,
    DiskFull,
    GroupError,
    JumpHost,
    LocalTransport,
    NutchFile,
    RemoteFileNotFound,
    load_config,
    parse_config,
    section_group,
    validate_name,
)
from webdb.ndfs.names import local_path, tmp_name

REPO = Path(__file__).resolve().parent.parent

# -- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["a", "edits/stage1/from-0003", "x y/z", "ünïcode/名前", "a.b/c..d", "...x", "completed", "a/.hidden"],
)
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name, why",
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a/./b", "'.'"),
        ("a//b", "empty"),
        ("a/", "empty"),
        ("a\x00b", "control"),
        ("a\nb", "control"),
        ("a\x7fb", "control"),
        ("a\\b", "backslash"),
        ("x.completed", "completion flags"),
        ("d/.x.ndfs-tmp.abc", "reserved"),
        ("a" * 256, "longer"),
        ("a/" * 2100 + "a", "longer"),
    ],
)
def test_bad_names_are_rejected_naming_the_input(name: str, why: str) -> None:
    with pytest.raises(BadInput, match=why) as e:
        validate_name(name)
    # Long names too: the message quotes at least their first 40 characters.
    assert repr(name[:40])[1:-1] in str(e.value), str(e.value)[:200]


def test_non_string_name() -> None:
    with pytest.raises(BadInput, match="string"):
        validate_name(b"bytes")  # type: ignore[arg-type]


def test_nutch_file_paths(tmp_path: Path) -> None:
    f = NutchFile("crawl", "section-0003", "edits/pbu/from-0001")
    assert f.relpath == "crawl/section-0003/edits/pbu/from-0001"
    assert f.flag == "crawl/section-0003/edits/pbu/from-0001.completed"
    assert f.path(tmp_path) == tmp_path.resolve() / f.relpath
    with pytest.raises(BadInput, match="db name"):
        NutchFile("a/b", "g", "n")
    with pytest.raises(BadInput, match="share group"):
        NutchFile("db", "..", "n")
    with pytest.raises(BadInput, match="file name"):
        NutchFile("db", "g", "../../etc/passwd")


def test_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "outside")
    (root / "inside").symlink_to(root)
    assert local_path(root, "inside/x") == root.resolve() / "inside/x"
    with pytest.raises(BadInput, match="outside the ndfs root"):
        local_path(root, "escape/x")
    t = LocalTransport(root)
    with pytest.raises(BadInput, match="outside"):
        t.write_text("escape/x", "no")
    assert not (tmp_path / "outside" / "x").exists()


def test_tmp_names_are_reserved_and_hidden() -> None:
    assert tmp_name("a/b/c", "t1") == "a/b/.c.ndfs-tmp.t1"
    with pytest.raises(BadInput):
        validate_name(tmp_name("a/b/c", "t1"))


# -- hosts.ini ---------------------------------------------------------------------------------

GOOD = """
[ndfs]
db = crawl
user = crawl
key_file = keys/id
known_hosts = /etc/webdb/known_hosts

[host:a]
address = 10.0.0.1
root = /data/ndfs

[host:b]
address = 10.0.0.2
port = 2200
root = /data/ndfs/
transport = rsync
timeout = 5

[group:master]
locations = a, /mnt/nfs/ndfs

[sections]
count = 5
hosts = a, b
replicas = 2
4 = /mnt/nfs/ndfs
"""


def test_parse_good_config(tmp_path: Path) -> None:
    c = parse_config(GOOD, "t.ini", base_dir=tmp_path)
    assert c.db == "crawl"
    a, b = c.hosts["a"], c.hosts["b"]
    assert (a.port, a.user, a.transport, a.timeout) == (22, "crawl", "auto", 30.0)
    assert (b.port, b.root, b.transport, b.timeout) == (2200, "/data/ndfs", "rsync", 5.0)
    assert a.key_file == tmp_path.absolute() / "keys/id"
    assert a.known_hosts_path() == Path("/etc/webdb/known_hosts")
    assert [loc.label for loc in c.locations("master")] == ["a", "/mnt/nfs/ndfs"]
    assert c.sections == 5
    layout = {g: [loc.label for loc in c.locations(g)] for g in c.groups if g.startswith("section-")}
    assert layout == {
        "section-0000": ["a", "b"],
        "section-0001": ["b", "a"],
        "section-0002": ["a", "b"],
        "section-0003": ["b", "a"],
        "section-0004": ["/mnt/nfs/ndfs"],
    }
    assert c.section_group(4) == section_group(4) == "section-0004"
    assert c.groups_on("b") == ["section-0000", "section-0001", "section-0002", "section-0003"]
    with pytest.raises(ConfigError, match="section 5 out of range"):
        c.section_group(5)
    with pytest.raises(ConfigError, match="'nope' is not configured"):
        c.locations("nope")


def test_example_hosts_ini_parses() -> None:
    c = load_config(REPO / "hosts.ini")
    assert c.sections == 8 and set(c.hosts) == {"alpha", "beta", "gamma"}
    # One location per section: the distributed writer keeps a section's tables where it runs.
    assert [loc.label for loc in c.locations("section-0007")] == ["gamma"]
    assert [loc.label for loc in c.locations("master")] == ["alpha", "/mnt/nfs/webdb-ndfs"]
    assert c.hosts["alpha"].key_file == REPO / "keys/webdb_ed25519"


def test_known_hosts_defaults_to_the_users_file_at_connect_time(monkeypatch, tmp_path: Path) -> None:
    c = parse_config("[host:a]\naddress = x\nroot = /r\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert c.hosts["a"].known_hosts_path() == tmp_path / ".ssh/known_hosts"


@pytest.mark.parametrize(
    "text, where, problem",
    [
        ("[host:a]\naddress = x\n", r"\[host:a\] root", "missing"),
        ("[host:a]\nroot = /r\n", r"\[host:a\] address", "missing"),
        ("[host:a]\naddress = x\nroot = rel/dir\n", r"\[host:a\] root", "absolute"),
        ("[host:a]\naddress = x\nroot = /r\nport = 70000\n", r"\[host:a\] port", "bad port 70000"),
        ("[host:a]\naddress = x\nroot = /r\nport = ssh\n", r"\[host:a\] port", "bad port 'ssh'"),
        ("[host:a]\naddress = x\nroot = /r\ntimeout = -1\n", r"\[host:a\] timeout", "bad timeout"),
        ("[host:a]\naddress = x\nroot = /r\ntransport = ftp\n", r"\[host:a\] transport", "unknown transport"),
        ("[host:a]\naddress = x\nroot = /r\nrot = /r\n", r"\[host:a\] rot", "unknown key"),
        ("[host:a b]\naddress = x\nroot = /r\n", r"\[host:a b\]", "bad host name"),
        ("[hosts:a]\naddress = x\n", r"\[hosts:a\]", "unknown section"),
        ("[ndfs]\nport = 0\n", r"\[ndfs\] port", "bad port 0"),
        ("[ndfs]\nroot = /r\n", r"\[ndfs\] root", "unknown key"),
        ("[ndfs]\ndb = a/b\n", r"\[ndfs\] db", "one path component|may hold only"),
        ("[group:g]\nlocations = nohost\n", r"\[group:g\] locations", "unknown host 'nohost'"),
        ("[group:g]\nlocations = rel/path\n", r"\[group:g\] locations", "unknown host"),
        ("[group:g]\nlocations = ./x\n", r"\[group:g\] locations", "must be absolute"),
        ("[group:g]\n", r"\[group:g\] locations", "missing"),
        ("[group:g]\nlocations = /a,\n", r"\[group:g\] locations", "empty location"),
        ("[group:g]\nlocations = /a\nhosts = /b\n", r"\[group:g\] hosts", "unknown key"),
        ("[group:..]\nlocations = /a\n", r"\[group:..\]", "component"),
        ("[group:section-0001]\nlocations = /a\n", r"\[group:section-0001\]", r"defined by \[sections\]"),
        ("[sections]\nhosts = /a\n", r"\[sections\] count", "missing"),
        ("[sections]\ncount = 3\n0-1 = /a\n", r"\[sections\]", "sections 2 have no location"),
        ("[sections]\ncount = 3\n1-5 = /a\n", r"\[sections\] 1-5", "beyond count"),
        ("[sections]\ncount = 3\n0-2 = /a\n2 = /b\n", r"\[sections\] 2", "also given by '0-2'"),
        ("[sections]\ncount = 2\nhosts = /a\nreplicas = 2\n", r"\[sections\] replicas", "bad replicas 2"),
        ("[sections]\ncount = 2\n0-1 = /a\nreplicas = 2\n", r"\[sections\] replicas", "needs hosts"),
        ("[sections]\ncount = 2\nevens = /a\n", r"\[sections\] evens", "unknown key"),
        ("[sections]\ncount = 2\nhosts = zeta\n", r"\[sections\] hosts", "unknown host 'zeta'"),
        ("[host:a]\naddress = x\nroot = /r\n[host:a]\naddress = y\nroot = /r\n", "", "already exists"),
        ("[host:a]\naddress = x\naddress = y\nroot = /r\n", "", "already exists"),
        ("address = x\n", "", "no section headers|MissingSectionHeader|section header"),
        ("[host:a]\naddress = x\nroot = /r\njump = gw:0\n", r"\[host:a\] jump", "bad port '0'"),
        ("[host:a]\naddress = x\nroot = /r\njump = gw:ssh\n", r"\[host:a\] jump", "bad port 'ssh'"),
        ("[host:a]\naddress = x\nroot = /r\njump = @gw\n", r"\[host:a\] jump", "empty user"),
        ("[host:a]\naddress = x\nroot = /r\njump = [::1\n", r"\[host:a\] jump", "bad bracketed"),
        ("[ndfs]\njump = u@\n", r"\[ndfs\] jump", "bad host ''"),
    ],
)
def test_config_errors_name_file_section_and_key(text: str, where: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"^bad.ini(:[0-9]+)?: .*{where}.*({problem})") as e:
        parse_config(text, "bad.ini")
    assert isinstance(e.value, BadInput)


@pytest.mark.parametrize(
    "text, want",
    [
        ("gw", JumpHost("gw", 22, None)),
        ("gw.example:2222", JumpHost("gw.example", 2222, None)),
        ("ops@gw", JumpHost("gw", 22, "ops")),
        ("ops@10.0.0.1:2200", JumpHost("10.0.0.1", 2200, "ops")),
        ("ops@[2001:db8::1]:2200", JumpHost("2001:db8::1", 2200, "ops")),
        ("[2001:db8::1]", JumpHost("2001:db8::1", 22, None)),
        ("2001:db8::1", JumpHost("2001:db8::1", 22, None)),
    ],
)
def test_jump_host_user_and_port_are_parsed(text: str, want: JumpHost) -> None:
    c = parse_config(f"[ndfs]\nuser = crawler\njump = {text}\n[host:a]\naddress = x\nroot = /r\nport = 2022\n")
    h = c.hosts["a"]
    assert (h.jump, h.user, h.port) == (want, "crawler", 2022)
    assert JumpHost.parse(str(want)) == want  # the label in messages parses back
    own = parse_config(f"[ndfs]\njump = {text}\n[host:b]\naddress = y\nroot = /r\njump = gw2\n")
    assert own.hosts["b"].jump == JumpHost("gw2")  # a host's own jump overrides [ndfs]


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.ini: cannot read"):
        load_config(tmp_path / "nope.ini")


# -- local transport ---------------------------------------------------------------------------


def test_local_put_get_publishes_atomically_with_a_flag(tmp_path: Path) -> None:
    root = tmp_path / "root"
    t = LocalTransport(root, label="here")
    src = tmp_path / "src"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    c = t.put(src, "db/g/edits/f1")
    assert c == Completion(src.stat().st_size, c.sha256)
    assert (root / "db/g/edits/f1").read_bytes() == src.read_bytes()
    assert (root / "db/g/edits/f1.completed").exists()
    assert t.completion("db/g/edits/f1") == c and t.is_complete("db/g/edits/f1")
    assert t.wait_complete("db/g/edits/f1", timeout=0.1) == c
    assert t.get("db/g/edits/f1", tmp_path / "back") == c.size
    assert (tmp_path / "back").read_bytes() == src.read_bytes()
    assert not [p for p in root.rglob("*") if ".ndfs-tmp." in p.name]


def test_local_namespace_operations(tmp_path: Path) -> None:
    t = LocalTransport(tmp_path / "root")
    assert t.list() == [] and t.list("nothing/here") == []
    t.write_text("db/g/a", "A")
    t.write_text("db/g/sub/b", "B")
    (tmp_path / "root/db/g/incomplete").write_text("no flag yet")
    (tmp_path / "root/db/g/.c.ndfs-tmp.123").write_text("crashed put")
    assert t.list() == ["db/g/a", "db/g/incomplete", "db/g/sub/b"]
    assert t.list("db/g/", complete_only=True) == ["db/g/a", "db/g/sub/b"]
    assert t.exists("db/g/incomplete") and not t.is_complete("db/g/incomplete")
    assert t.read_text("db/g/sub/b") == "B"

    t.rename("db/g/a", "db/h/a2")
    assert not t.exists("db/g/a") and not (tmp_path / "root/db/g/a.completed").exists()
    assert t.read_text("db/h/a2") == "A" and t.is_complete("db/h/a2")
    t.rename("db/g/incomplete", "db/h/inc")
    assert t.exists("db/h/inc") and not t.is_complete("db/h/inc")
    with pytest.raises(RemoteFileNotFound, match="db/g/missing"):
        t.rename("db/g/missing", "db/h/a2")
    assert t.is_complete("db/h/a2")  # a failed rename leaves the destination's flag alone

    assert t.delete("db/h/a2") is True and t.delete("db/h/a2") is False
    assert not (tmp_path / "root/db/h/a2.completed").exists()
    t.makedirs("db/empty/dir")
    assert (tmp_path / "root/db/empty/dir").is_dir()
    assert t.remove_tree("db/g") == 3  # sub/b, its flag, the crashed temp file
    assert t.list("db") == ["db/h/inc"]
    assert t.disk_free() > 0 and t.disk_free("does/not/exist") > 0
    with pytest.raises(RemoteFileNotFound):
        t.get("db/nope", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_put_overwrites_and_reflags(tmp_path: Path) -> None:
    t = LocalTransport(tmp_path)
    c1 = t.write_text("f", "one")
    c2 = t.write_text("f", "two!")
    assert c1 != c2 and t.completion("f") == c2 and t.read_text("f") == "two!"


def test_corruption_before_verify_publishes_nothing(tmp_path: Path) -> None:
    t = LocalTransport(tmp_path / "root")
    src = tmp_path / "src"
    src.write_bytes(b"x" * 100_000)

    def flip(tmp: str) -> None:
        p = tmp_path / "root" / tmp
        data = bytearray(p.read_bytes())
        data[5000] ^= 1
        p.write_bytes(bytes(data))

    t.before_verify = flip
    with pytest.raises(ChecksumMismatch, match="not published") as e:
        t.put(src, "d/f")
    assert isinstance(e.value, CorruptionError) and e.value.host == t.label
    assert list((tmp_path / "root").rglob("*")) == [tmp_path / "root/d"]


def test_linked_put_publishes_the_same_inode_hashed_once(tmp_path: Path) -> None:
    """``link``: the file is hard-linked into place (one inode, nothing copied) with the same
    flag a copy gets; the caller may then drop its name.  A byte changed before the verify is
    still caught (the flag holds the hash of what was handed over)."""
    t = LocalTransport(tmp_path / "root")
    t.link = True
    src = tmp_path / "src"
    src.write_bytes(os.urandom(2 * 1024 * 1024 + 5))
    c = t.put(src, "db/g/f")
    dst = tmp_path / "root/db/g/f"
    assert dst.stat().st_ino == src.stat().st_ino and src.stat().st_nlink == 2
    assert c == LocalTransport(tmp_path / "other").put(src, "f") and t.completion("db/g/f") == c
    src.unlink()
    assert t.get("db/g/f", tmp_path / "back") == c.size and dst.stat().st_nlink == 1
    assert not [p for p in (tmp_path / "root").rglob("*") if ".ndfs-tmp." in p.name]

    src.write_bytes(b"y" * 50_000)

    def flip(tmp: str) -> None:
        with open(tmp_path / "root" / tmp, "r+b") as f:
            f.seek(100)
            f.write(b"Y")

    t.before_verify = flip
    with pytest.raises(ChecksumMismatch, match="not published"):
        t.put(src, "db/g/h")
    assert not t.exists("db/g/h") and t.completion("db/g/h") is None


def test_linked_put_across_filesystems_copies(tmp_path: Path) -> None:
    """A source on another filesystem (the link is refused with EXDEV) is copied instead."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a filesystem of its own")
    t = LocalTransport(tmp_path / "root")
    t.link = True
    src = shm / f"webdb-test-{os.getpid()}"
    try:
        src.write_bytes(os.urandom(100_000))
        c = t.put(src, "f")
        dst = tmp_path / "root/f"
        assert dst.read_bytes() == src.read_bytes() and dst.stat().st_ino != src.stat().st_ino
        assert t.completion("f") == c and src.stat().st_nlink == 1
    finally:
        src.unlink(missing_ok=True)


@pytest.mark.parametrize("scratch", [False, True])
def test_scratch_ndfs_publishes_without_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch) -> None:
    """An NDFS handle for a batch's files in flight (``scratch``) publishes with no fsync of
    file or directory and links local files; a durable one fsyncs the bytes, the flag and the
    directory after each rename.  Both publish the same files and flags."""
    root = tmp_path / "root"
    cfg = parse_config(f"[ndfs]\ndb = d\n[sections]\ncount = 1\nhosts = {root}\n", "t.ini")
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    src = tmp_path / "src"
    src.write_bytes(b"e" * 70_000)
    with NDFS(cfg, scratch=scratch) as fs:
        g = fs.section(0)
        g.put(src, "edits/b/st1/x.edits").raise_on_failure()
        g.write_text("edits/b/done-st0-from-0000", "{}").raise_on_failure()
    t = LocalTransport(root)
    assert t.read_text("d/section-0000/edits/b/done-st0-from-0000") == "{}"
    assert (root / "d/section-0000/edits/b/st1/x.edits").read_bytes() == src.read_bytes()
    assert t.is_complete("d/section-0000/edits/b/st1/x.edits")
    linked = (root / "d/section-0000/edits/b/st1/x.edits").stat().st_ino == src.stat().st_ino
    assert linked == scratch
    assert (len(synced) == 0) if scratch else (len(synced) >= 6)


def test_get_checks_the_flag(tmp_path: Path) -> None:
    t = LocalTransport(tmp_path / "root")
    t.write_text("f", "hello")
    (tmp_path / "root/f").write_text("jello")
    with pytest.raises(ChecksumMismatch, match="flag says"):
        t.get("f", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ChecksumMismatch):
        t.read_text("f")
    (tmp_path / "root/f.completed").write_text("garbage")
    with pytest.raises(CorruptionError, match="completion flag is not valid"):
        t.completion("f")


def test_wait_complete_times_out_naming_host_and_file(tmp_path: Path) -> None:
    t = LocalTransport(tmp_path, label="hostx")
    with pytest.raises(CompletionTimeout, match=r"hostx: d/late: no completion flag .* after 0.3s") as e:
        t.wait_complete("d/late", timeout=0.3, poll=0.05)
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, DistributedError)
    assert pickle.loads(pickle.dumps(e.value)).host == "hostx"


def test_local_disk_full_is_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = LocalTransport(tmp_path / "root")
    src = tmp_path / "src"
    src.write_bytes(b"z" * 5000)
    monkeypatch.setattr(t, "disk_free", lambda name="": 1000)
    with pytest.raises(DiskFull, match="needs 5000 bytes, 1000 free"):
        t.put(src, "d/f")
    assert not t.exists("d/f") and t.list() == []


# -- share groups over local paths -------------------------------------------------------------


def test_group_operations_report_per_location(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    cfg = parse_config(f"[ndfs]\ndb = crawl\n[sections]\ncount = 2\nhosts = {a}, {b}\nreplicas = 2\n")
    with NDFS(cfg) as fs:
        g = fs.section(1)
        assert g.hosts == [str(b), str(a)]
        src = tmp_path / "src"
        src.write_bytes(b"payload" * 1000)
        r = g.put(src, "edits/from-0000")
        assert r.ok and set(r.succeeded) == {str(a), str(b)} and not r.failed
        assert all(h.bytes == 7000 and h.seconds >= 0 for h in r.values())
        assert (a / "crawl/section-0001/edits/from-0000.completed").exists()
        assert g.list().ok and all(h.value == ["edits/from-0000"] for h in g.list().values())
        assert all(h.value.size == 7000 for h in g.wait_complete("edits/from-0000", 1).values())
        got = g.get("edits/from-0000", tmp_path / "back")
        assert got.ok and list(got) == [str(b)] and (tmp_path / "back").read_bytes() == src.read_bytes()

        # One replica loses the file: get falls back, per-location results say what happened.
        assert g.delete("edits/from-0000").ok
        fs.group("section-0000").write_text("marker", "m")
        (a / "crawl/section-0001").mkdir(parents=True, exist_ok=True)
        LocalTransport(a).write_text("crawl/section-0001/only-a", "A")
        got = g.get("only-a", tmp_path / "only-a")
        assert got.ok and not got[str(b)].ok and got[str(a)].ok
        assert "RemoteFileNotFound" in got[str(b)].reason
        ex = g.exists("only-a")
        assert ex[str(a)].value is True and ex[str(b)].value is False
        w = g.wait_complete("only-a", timeout=0.2, poll=0.05)
        assert not w.ok and list(w.failed) == [str(b)] and "CompletionTimeout" in w.failed[str(b)].reason
        with pytest.raises(GroupError, match=rf"failed on 1 of 2 locations: {b}: CompletionTimeout") as e:
            w.raise_on_failure()
        assert e.value.result is w
        assert g.read_text("only-a") == "A"
        assert g.remove_tree().ok and g.list().ok
        assert all(h.value > 0 for h in g.disk_free().values())


def test_ndfs_needs_a_db_and_a_known_local_host(tmp_path: Path) -> None:
    cfg = parse_config(f"[group:g]\nlocations = {tmp_path}\n", "x.ini")
    with pytest.raises(ConfigError, match="no db name"):
        NDFS(cfg)
    with pytest.raises(ConfigError, match="local host 'zz'"):
        NDFS(cfg, "db", local_host="zz")
    with pytest.raises(BadInput):
        NDFS(cfg, "db").group("g").put(tmp_path / "x", "../escape")


def test_local_host_uses_the_filesystem(tmp_path: Path) -> None:
    cfg = parse_config(f"[host:me]\naddress = 192.0.2.1\nroot = {tmp_path}\n[group:g]\nlocations = me\n", "x.ini")
    fs = NDFS(cfg, "db", local_host="me")
    r = fs.group("g").write_text("hello", "hi")
    assert r.ok and list(r) == ["me"]
    assert (tmp_path / "db/g/hello").read_text() == "hi"
    assert isinstance(fs.transport(cfg.locations("g")[0]), LocalTransport)


@pytest.mark.parametrize(
    "root,name,ok",
    [
        ("/srv/ndfs", "crawl/section-0000/x", True),
        ("/srv/ndfs", "crawl/section-0000/", True),
        ("/srv/ndfs", "", True),
        ("/srv/ndfs", "../etc/passwd", False),
        ("/srv/ndfs", "crawl/../../etc", False),
        ("/srv/ndfs", "/etc/passwd", False),
        ("/srv/ndfs", "a//b", False),
        ("relative/root", "x", False),
    ],
)
def test_every_remote_path_is_checked_to_lie_under_its_root(root: str, name: str, ok: bool) -> None:
    from webdb.ndfs.names import remote_path

    if ok:
        p = remote_path(root, name)
        assert p == root or p.startswith(root + "/")
    else:
        with pytest.raises(BadInput):
            remote_path(root, name)
