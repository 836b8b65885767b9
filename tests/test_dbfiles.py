"""The db's small files — CURRENT, the manifests, webdb.json — damaged every way an unlucky
operator or a hostile user could: every byte flipped, truncated, emptied, deleted, replaced by
an older valid copy.  Each time: the documented error naming the file (CorruptionError or
NotADatabase; CLI exit 2 and no traceback), no writer builds on it, and the db is unchanged.
``webdb recover --to N`` is the explicit way back (docs/operations.md, *Recovery*)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from dbutil import batch_b, make_db, snapshot

import webdb
from webdb.errors import CorruptionError, NotADatabase, WebDBError


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A db at generation 2 (parent 1) and the CURRENT it had at generation 1."""
    base = tmp_path_factory.mktemp("dbfiles")
    db = make_db(base / "db")
    old_current = (base / "db" / "CURRENT").read_bytes()
    old_manifest = (base / "db" / "gen" / "00000001.json").read_bytes()
    with db.writer() as w:
        batch_b(w)
    return base / "db", old_current, old_manifest, snapshot(db)


@pytest.fixture
def db_path(pristine, tmp_path):
    dst = tmp_path / "db"
    shutil.copytree(pristine[0], dst)
    return dst


def files(path, content: bool = False) -> dict[str, object]:
    """Every file of the db (but LOCK): its bytes, or (size, mtime) — cheap enough to take
    around each of thousands of attempts."""
    out: dict[str, object] = {}
    for root, _, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            if n != "LOCK":
                st = os.lstat(p)
                out[os.path.relpath(p, path)] = open(p, "rb").read() if content else (st.st_size, st.st_mtime_ns)
    return out


def refused(path, name: str, readers: bool = True) -> str:
    """Open, read and start a writer on the damaged db: each refuses naming ``name``; nothing
    in the db changes.  Returns the reader's (else the writer's) message."""
    before = files(path)
    msgs = []
    try:
        db = webdb.open(str(path))
    except (CorruptionError, NotADatabase) as e:
        msgs.append(str(e))
    else:
        if readers:
            with pytest.raises((CorruptionError, NotADatabase)) as ei:
                db.reader().close()
            msgs.append(str(ei.value))
        with pytest.raises((CorruptionError, NotADatabase)) as ei:
            db.writer().abort()
        msgs.append(str(ei.value))
    assert files(path) == before
    for m in msgs:
        assert name in m, m
    return msgs[0]


def cli(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", *map(str, args)], capture_output=True, text=True, input=stdin
    )


def assert_cli_refuses(path, name: str) -> None:
    before = files(path, content=True)
    for args in (("read", path, "--stats"), ("check", path)):
        p = cli(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert name in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert files(path, content=True) == before


SMALL = {
    "CURRENT": "CURRENT",
    "manifest": os.path.join("gen", "00000002.json"),
    "identity": "webdb.json",
}


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_every_byte_flipped(db_path, kind):
    rel = SMALL[kind]
    f = db_path / rel
    good = f.read_bytes()
    bits = (0x01,) if len(good) > 1000 else (0x01, 0x80)  # one bit per byte of a manifest keeps it quick
    for i in range(len(good)):
        for bit in bits:
            f.write_bytes(good[:i] + bytes([good[i] ^ bit]) + good[i + 1 :])
            refused(db_path, os.path.basename(rel))
    f.write_bytes(good)
    webdb.open(str(db_path)).reader().close()


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_truncated_emptied_deleted(db_path, kind):
    rel = SMALL[kind]
    f = db_path / rel
    good = f.read_bytes()
    lengths = set(range(0, len(good), 1 if len(good) < 1000 else 7)) | set(range(max(0, len(good) - 40), len(good)))
    for n in sorted(lengths):
        f.write_bytes(good[:n])
        refused(db_path, os.path.basename(rel))
    assert_cli_refuses(db_path, os.path.basename(rel))
    f.unlink()
    name = "webdb" if kind == "identity" else os.path.basename(rel)
    refused(db_path, name)
    assert_cli_refuses(db_path, name)


def test_parent_manifest_damage_stops_writers_and_check_not_readers(pristine, db_path):
    f = db_path / "gen" / "00000001.json"
    good = f.read_bytes()
    for i in range(0, len(good), 7):
        f.write_bytes(good[:i] + bytes([good[i] ^ 0x01]) + good[i + 1 :])
        refused(db_path, "00000001.json", readers=False)
        with webdb.open(str(db_path)).reader() as r:  # readers never need the parent
            assert r.generation == 2
            with pytest.raises(CorruptionError, match="00000001.json"):
                r.check()
    p = cli("check", db_path)
    assert p.returncode == 1 and "00000001.json" in p.stdout and "Traceback" not in p.stderr
    seeds = db_path.parent / "seeds.txt"
    seeds.write_text("http://new.example/\n")
    p = cli("inject", db_path, seeds)
    assert p.returncode == 2 and "00000001.json" in p.stderr and "Traceback" not in p.stderr
    # The operator's way out: commit the current generation explicitly, dropping the parent.
    p = cli("recover", db_path, "--to", 2)
    assert p.returncode == 0, p.stderr
    assert not f.exists()
    assert snapshot(webdb.open(str(db_path))) == pristine[3]
    with webdb.open(str(db_path)).writer() as w:
        w.add_page(webdb.Page("http://after.example/"))


def test_current_replaced_by_older_valid_copy(pristine, db_path):
    """The lost-generation attack: CURRENT back to generation 1.  Refused; recover --to 2
    brings the committed generation back exactly."""
    (db_path / "CURRENT").write_bytes(pristine[1])
    msg = refused(db_path, "CURRENT")
    assert "generation 2 was committed after it" in msg and "recover" in msg
    assert_cli_refuses(db_path, "CURRENT")
    p = cli("recover", db_path)
    assert p.returncode == 2 and "generation 2 (committed): manifest and table sizes ok" in p.stdout, p.stdout
    p = cli("recover", db_path, "--to", 2)
    assert p.returncode == 0, p.stderr
    assert snapshot(webdb.open(str(db_path))) == pristine[3]


def test_recover_to_older_generation_is_explicit(pristine, db_path):
    (db_path / "CURRENT").write_bytes(pristine[1])
    p = cli("recover", db_path, "--to", 1)
    assert p.returncode == 0, p.stderr
    db = webdb.open(str(db_path))
    assert db.committed() == 1 and not (db_path / "gen" / "00000002.json").exists()
    with db.reader() as r:
        r.check()
    p = cli("recover", db_path, "--to", 7)
    assert p.returncode == 2 and "no manifest of generation 7" in p.stderr


def test_manifest_replaced_by_older_valid_copy(pristine, db_path):
    (db_path / "gen" / "00000002.json").write_bytes(pristine[2])
    refused(db_path, "00000002.json")
    assert_cli_refuses(db_path, "00000002.json")


def test_manifest_pointing_at_previous_table_refused(db_path):
    """A manifest edited to name the parent's table: its checksum fails, and no writer
    commits over it (the real table stays)."""
    import json

    f = db_path / "gen" / "00000002.json"
    m = json.loads(f.read_bytes())
    old = json.loads((db_path / "gen" / "00000001.json").read_bytes())
    for j, tabs in enumerate(m["tables"]):
        for t in tabs:
            if old["tables"][j].get(t) and old["tables"][j][t]["file"] != tabs[t]["file"]:
                tabs[t] = old["tables"][j][t]
                break
        else:
            continue
        break
    f.write_text(json.dumps(m, indent=1, sort_keys=True))
    msg = refused(db_path, "00000002.json")
    assert "checksum" in msg


def test_deleted_or_replaced_table_refused_by_writers(db_path):
    name = webdb.open(str(db_path)).manifest().tables[0]["pages_by_url"]["file"]
    t = db_path / "section-0000" / name
    good = t.read_bytes()
    t.unlink()
    refused(db_path, name)
    os.mkfifo(t)
    refused(db_path, name)  # a FIFO: refused, never opened for a blocking read
    t.unlink()
    t.write_bytes(good[:-1])
    msg = refused(db_path, name, readers=False)
    assert "bytes" in msg
    t.write_bytes(good)
    webdb.open(str(db_path)).writer().abort()


def test_killed_rename_leftovers_removed_by_next_writer(db_path):
    for n in ("CURRENT.tmp.99999", "webdb.json.tmp.99999", os.path.join("gen", "00000003.json.tmp.99999")):
        (db_path / n).write_bytes(b"half")
    removed = webdb.open(str(db_path)).writer()
    removed.abort()
    assert not [n for n in files(db_path) if ".tmp." in n]


def test_stray_section_folder_is_a_clear_error(db_path):
    (db_path / "section-foo").mkdir()
    msg = refused(db_path, "section-foo", readers=False)
    assert "not a section directory" in msg


def test_legacy_db_without_checksums_opens_and_is_upgraded(pristine, db_path):
    """A db written before checksums (format 1: plain CURRENT, no checksum fields, no commit
    marks) still opens, and its next commit writes the new format."""
    import json

    for p in (db_path / "gen").iterdir():
        if p.suffix == ".committed":
            p.unlink()
        else:
            m = json.loads(p.read_bytes())
            m.pop("checksum", None)
            m.pop("parent_checksum", None)
            p.write_text(json.dumps(m, indent=1, sort_keys=True))
    ident = json.loads((db_path / "webdb.json").read_bytes())
    ident.pop("checksum")
    ident["format"] = 1
    (db_path / "webdb.json").write_text(json.dumps(ident))
    (db_path / "CURRENT").write_text("00000002\n")
    db = webdb.open(str(db_path))
    assert snapshot(db) == pristine[3]
    with db.writer() as w:
        w.add_page(webdb.Page("http://after.example/"))
    assert len((db_path / "CURRENT").read_bytes().split()) == 3
    assert "checksum" in json.loads((db_path / "gen" / "00000003.json").read_bytes())


def test_error_classes_are_webdb_errors():
    assert issubclass(CorruptionError, WebDBError) and issubclass(NotADatabase, WebDBError)
