"""hosts.ini and the section count: every field validated when the file is read, every error a
ConfigError/BadInput naming the file and line (CLI: exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import webdb
from webdb.errors import BadInput
from webdb.ndfs import ConfigError
from webdb.ndfs.config import NdfsConfig, load_config, local_config
from webdb.ndfs.names import NutchFile, validate_db_name

HOST = "[host:a]\naddress = {address}\nroot = {root}\n{extra}"


def write(tmp_path, text: str | bytes):
    p = tmp_path / "hosts.ini"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


@pytest.mark.parametrize(
    "address, extra, problem",
    [
        ("127.0.4.20:2222", "", r"port = 2222"),
        ("root@host", "", r"user = root"),
        ("host name", "", "bad address"),
        ("[::1]", "", "bad address"),
        ("-oProxyCommand=x", "", "bad address"),
        ("host", "user = ro ot\n", "bad user"),
        ("host", "user = -x\n", "bad user"),
        ("host", "port = 70000\n", "bad port"),
        ("host", "port = nan\n", "bad port"),
        ("host", "timeout = nan\n", "bad timeout"),
    ],
)
def test_bad_host_fields_name_file_and_line(tmp_path, address, extra, problem):
    p = write(tmp_path, "# hosts\n" + HOST.format(address=address, root="/data", extra=extra))
    with pytest.raises(ConfigError, match=problem) as e:
        load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:") and "[host:a]" in msg
    line = int(msg[len(str(p)) + 1 :].split(":")[0])
    assert 2 <= line <= 5  # the line of the key (or of the section header)


def test_ipv6_and_names_are_accepted(tmp_path):
    for addr in ("::1", "fe80::1", "127.0.0.2", "node-1.example.org"):
        cfg = load_config(write(tmp_path, HOST.format(address=addr, root="/data", extra="user = web_1\n")))
        assert cfg.hosts["a"].address == addr


@pytest.mark.parametrize("root", ["..", "data", "/data/../etc", "/data/./x", "//data", "/data//x"])
def test_roots_absolute_and_normalized(tmp_path, root):
    with pytest.raises(ConfigError, match="root"):
        load_config(write(tmp_path, HOST.format(address="h", root=root, extra="")))


def test_root_trailing_slash_is_fine(tmp_path):
    cfg = load_config(write(tmp_path, HOST.format(address="h", root="/data/", extra="")))
    assert cfg.hosts["a"].root == "/data"


def test_non_utf8_file_names_line(tmp_path):
    p = write(tmp_path, b"[host:a]\naddress = h\nroot = /caf\xe9\n")
    with pytest.raises(ConfigError, match=r"hosts.ini:3: not UTF-8"):
        load_config(p)


def test_directory_or_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="directory"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.ini")


@pytest.mark.parametrize("count", ["0", "10001", "100000", "-1", "x"])
def test_section_count_limits(tmp_path, count):
    text = HOST.format(address="h", root="/d", extra="") + f"\n[sections]\ncount = {count}\nhosts = a\n"
    with pytest.raises(ConfigError, match=r"hosts.ini:\d+: \[sections\] count"):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("k", [0, 10001, 100000, -3, 2.5, True, "4"])
def test_create_rejects_section_counts_beyond_the_format(tmp_path, k):
    with pytest.raises(BadInput, match="sections"):
        webdb.create(str(tmp_path / "db"), sections=k)
    assert not (tmp_path / "db").exists()


def test_cli_sections_100000_exit_2(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "create", str(tmp_path / "db"), "--sections", "100000"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "sections" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("name", ["../opt/escaped", "a/b", "..", ".", "", "sp ace", "semi;colon", "crawl\n"])
def test_db_names_are_one_safe_component(tmp_path, name):
    with pytest.raises(BadInput):
        validate_db_name(name)
    with pytest.raises(BadInput):
        NutchFile(name, "section-0000", "x")
    text = f"[ndfs]\ndb = {name}\n" if "\n" not in name else "[ndfs]\ndb = a\nb\n"
    with pytest.raises(ConfigError):
        load_config(write(tmp_path, text))


def test_local_config_is_data_not_text(tmp_path):
    """A db directory whose path holds a comma, '=' and '#' is a path, not INI syntax."""
    d = tmp_path / "odd,dir = x # y" / "crawl"
    cfg = local_config(str(d), 3)
    assert cfg.db == "crawl" and cfg.sections == 3 and not cfg.hosts
    assert [loc.path for loc in cfg.locations("section-0002")] == [str(d.parent)]
    with pytest.raises(ConfigError, match="control character"):
        local_config(str(tmp_path / "new\nline" / "crawl"), 1)
    with pytest.raises(ConfigError, match="db directory name"):
        local_config(str(tmp_path / "bad name"), 1)
    with pytest.raises(ConfigError, match="sections"):
        local_config(str(d), 100000)


def test_config_round_trips_as_data(tmp_path):
    text = HOST.format(address="h1", root="/data", extra="port = 2222\nkey_file = /k/id\n")
    text += "\n[sections]\ncount = 3\nhosts = a, /mnt/shared\n[ndfs]\ndb = crawl\n"
    cfg = load_config(write(tmp_path, text))
    import json

    back = NdfsConfig.from_json(json.loads(json.dumps(cfg.to_json())))
    assert back == cfg
    local = local_config(str(tmp_path / "odd,dir\n=x" / "crawl").replace("\n", "_"), 2)
    assert NdfsConfig.from_json(json.loads(json.dumps(local.to_json()))) == local
    bad = cfg.to_json()
    bad["hosts"]["a"]["address"] = "root@h1"
    with pytest.raises(ConfigError, match="user = root"):
        NdfsConfig.from_json(bad)


def test_ndfs_and_the_core_agree_on_the_section_bound() -> None:
    from webdb.core.sections import MAX_SECTIONS
    from webdb.ndfs.config import MAX_SECTIONS as NDFS_MAX

    assert NDFS_MAX == MAX_SECTIONS
