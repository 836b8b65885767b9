"""The typed settings (webdb.core.settings.Settings): a db's ``webdb.json`` read and written back
is the same bytes, a setting it does not know is refused as before, ``replace`` checks names and
values (BadInput naming the setting; exit 2 at the CLI), and a value crosses a process boundary
as JSON and comes back equal."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dbutil import make_db

import webdb
from webdb.core.db import init_location
from webdb.core.dbfiles import identity, seal
from webdb.core.schedule import Schedule
from webdb.core.sections import Sections
from webdb.core.settings import DEFAULTS, NAMES, SCHEDULE_KEYS, Settings
from webdb.errors import BadInput, CorruptionError
from webdb.writer.engine import stage_job
from webdb.writer.spec import SectionInput, SectionSpec

ROOT = Path(__file__).resolve().parent.parent

# webdb.json of a db made by `webdb.create("crawl", sections=2, sync=False, block_size=1024,
# level_ratio=1, codec="zlib")`: only the settings given are stored, as given (1, not 1.0).
STORED = (
    b'{\n "checksum": "b586665b",\n "created": 1795779844.9980166,\n "format": 2,\n "name": "crawl",\n'
    b' "settings": {\n  "block_size": 1024,\n  "codec": "zlib",\n  "level_ratio": 1,\n  "sync": false\n }\n}'
)


def existing_db(path: Path, identity_bytes: bytes) -> Path:
    """A db directory whose ``webdb.json`` is ``identity_bytes`` (generation 0 committed)."""
    ident = json.loads(identity_bytes)
    del ident["checksum"]
    init_location(str(path), ident, range(2), Sections(2))
    (path / "webdb.json").write_bytes(identity_bytes)
    return path


def test_an_existing_identity_reads_and_writes_back_the_same_bytes(tmp_path):
    db = webdb.open(str(existing_db(tmp_path / "crawl", STORED)))
    assert db.settings == DEFAULTS.replace(block_size=1024, level_ratio=1, codec="zlib", sync=False)
    assert db.settings.level_ratio == 1 and type(db.settings.level_ratio) is int  # as stored
    assert db.settings.memory_mb == DEFAULTS.memory_mb  # not stored: follows the default
    assert seal(db.identity) == STORED
    # A rack's other location gets the identity as read: the same bytes.
    init_location(str(tmp_path / "other"), db.identity, [1], Sections(2))
    assert (tmp_path / "other" / "webdb.json").read_bytes() == STORED
    with db.writer(memory_mb=64) as w:
        assert w.settings == db.settings.replace(memory_mb=64)
    assert (tmp_path / "crawl" / "webdb.json").read_bytes() == STORED


def test_create_stores_the_settings_given_and_only_those(tmp_path):
    db = webdb.create(str(tmp_path / "crawl"), sections=2, sync=False, block_size=1024, level_ratio=1, codec="zlib")
    ident = json.loads((tmp_path / "crawl" / "webdb.json").read_bytes())
    assert ident["settings"] == {"block_size": 1024, "codec": "zlib", "level_ratio": 1, "sync": False}
    assert seal({**ident, "created": 1795779844.9980166}) == STORED  # but for the time, the same bytes
    assert identity("crawl", {"sync": False, "codec": None})["settings"] == {"sync": False}
    assert db.settings == Settings.from_json(ident["settings"])


@pytest.mark.parametrize(
    "stored, message",
    [
        ({"future_setting": 1}, "unknown setting 'future_setting' (known: adaptive, anchor_max, "),
        ({"block_size": 7}, "setting block_size must be in 64..16777216, not 7"),
        ({"codec": "zstd"}, "setting codec must be lz4, zlib or none, not 'zstd'"),
    ],
)
def test_a_setting_this_webdb_does_not_accept_is_refused_at_open(tmp_path, stored, message):
    ident = {"format": 2, "name": "crawl", "created": 1795779844.9980166, "settings": {"sync": False}}
    path = tmp_path / "crawl"
    init_location(str(path), ident, range(1), Sections(1))
    (path / "webdb.json").write_bytes(seal({**ident, "settings": {"sync": False, **stored}}))
    with pytest.raises(CorruptionError) as e:
        webdb.open(str(path))
    assert str(e.value).startswith(f"{path / 'webdb.json'}: {message}")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"no_such": 1}, "unknown setting 'no_such' (known: " + ", ".join(sorted(NAMES)) + ")"),
        ({"memory_mb": "lots"}, "setting memory_mb must be a whole number, not 'lots'"),
        ({"memory_mb": 0}, "setting memory_mb must be in 1..1048576, not 0"),
        ({"sync": 1}, "setting sync must be true or false, not 1"),
        ({"inc_rate": True}, "setting inc_rate must be a number, not True"),
        ({"codec": "zstd"}, "setting codec must be lz4, zlib or none, not 'zstd'"),
        ({"min_interval": 10, "max_interval": 5}, "setting min_interval 10 is above max_interval 5"),
    ],
)
def test_replace_names_the_bad_setting(overrides, message):
    with pytest.raises(BadInput) as e:
        DEFAULTS.replace(**overrides)
    assert str(e.value) == message
    with pytest.raises(BadInput) as e:
        Settings.from_json(overrides)
    assert str(e.value) == message


def test_replace_keeps_what_it_is_not_given_and_the_value_is_frozen():
    s = DEFAULTS.replace(memory_mb=64, codec=None)
    assert s.memory_mb == 64 and s.codec == DEFAULTS.codec and DEFAULTS.memory_mb == 512
    assert DEFAULTS.replace() is DEFAULTS and Settings() == DEFAULTS == Settings.from_json(None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.memory_mb = 1  # type: ignore[misc]
    with pytest.raises(BadInput, match="setting workers must be a whole number, not 1.5"):
        Settings(workers=1.5)  # type: ignore[arg-type]


def test_the_schedule_settings_default_to_schedule_and_make_it():
    assert DEFAULTS.schedule() == Schedule()
    assert SCHEDULE_KEYS == tuple(f.name for f in dataclasses.fields(Schedule))
    assert {k: getattr(DEFAULTS, k) for k in SCHEDULE_KEYS} == dataclasses.asdict(Schedule())
    s = DEFAULTS.replace(adaptive=True, retry_delay=77, min_interval=10, dec_rate=0.5)
    assert s.schedule() == Schedule(adaptive=True, retry_delay=77, min_interval=10, dec_rate=0.5)


def test_every_setting_is_a_field_with_a_comment_and_a_documented_row():
    src = (ROOT / "webdb" / "core" / "settings.py").read_text()
    body = src.split("class Settings:", 1)[1].split("def __post_init__", 1)[0]
    names = re.findall(r"^    (\w+): \w+ = ", body, re.M)
    assert tuple(names) == NAMES and [f.name for f in dataclasses.fields(Settings)] == list(NAMES)
    for block in re.split(r"\n\n", body.split('"""', 2)[2].strip()):
        assert block.lstrip().startswith("#"), block  # each group of fields opens with its comment
    table = (ROOT / "docs" / "operations.md").read_text().split("| setting | default | meaning |", 1)[1]
    rows = table.split("\n\n", 1)[0]
    documented = re.findall(r"`(\w+)`", "".join(r.split("|")[1] for r in rows.splitlines()[1:]))
    assert sorted(documented) == sorted(NAMES)


def test_settings_cross_a_process_boundary_as_json_and_come_back_equal(tmp_path):
    s = DEFAULTS.replace(memory_mb=64, codec="zlib", level_ratio=2, adaptive=True)
    assert Settings.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert list(s.to_json()) == list(NAMES)
    secs = Sections(2, [b"m"])
    job = stage_job(str(tmp_path / "db"), "B", 1, secs, s, str(tmp_path / "tmp"), 2)
    sent = json.loads(json.dumps(job.to_json()))
    assert sent["settings"] == s.to_json() and sent["schedule"]["adaptive"] is True
    assert job.schedule == s.schedule() and job.schedule.adaptive and job.schedule.retry_delay == s.retry_delay
    assert type(job).from_json(sent) == job and isinstance(type(job).from_json(sent).settings, Settings)
    spec = SectionSpec(
        section=0, k=2, host="h", db="db", path="/p", root="/", local_host=None, ini=None, config=None,
        ini_source="", base_dir="", batch="B", gen=1, sections=secs, tables=[{}, {}], status=[{}, {}],
        settings=s, input=SectionInput("m:f", ["x"], {}), stage_timeout=60.0,
    )  # fmt: skip
    back = SectionSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert back == spec and isinstance(back.settings, Settings)


def test_a_db_and_its_writer_read_settings_as_attributes(tmp_path):
    db = make_db(tmp_path / "db", sections=1)
    assert isinstance(db.settings, Settings) and db.settings.sync is False
    with db.writer(workers=1) as w:
        assert w.settings.workers == 1 and w.settings.sync is False
    with pytest.raises(BadInput, match="setting cache_mb must be in 0..1048576, not -1"):
        db.reader(cache_mb=-1)


def test_a_bad_set_at_the_cli_is_exit_2_naming_the_setting(tmp_path):
    for value, message in (
        ("memory_mb=0", "setting memory_mb must be in 1..1048576, not 0"),
        ("memory_mb=lots", "--set 'memory_mb=lots': memory_mb takes a int"),
        ("nope=1", "--set 'nope=1': expected NAME=VALUE with NAME one of " + ", ".join(sorted(NAMES))),
    ):
        p = subprocess.run(
            [sys.executable, "-m", "webdb.cli.main", "create", str(tmp_path / "db"), "--set", value],
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert not (tmp_path / "db").exists() or not list((tmp_path / "db").iterdir())
