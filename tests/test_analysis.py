"""Tests of webdb.analysis: link analysis, dedup, prefix statistics, filter generation."""

from __future__ import annotations

import hashlib
import json
import random
import re

import pytest

import webdb
from fetchlist.filters import UrlFilter
from webdb import Page, Status
from webdb.analysis.dedup import dedup
from webdb.analysis.filtergen import filtergen, generate_rules
from webdb.analysis.prefixes import PrefixStat, prefix_stats, url_prefixes
from webdb.analysis.rank import rank
from webdb.cli.main import main


def _md5(s: str) -> bytes:
    return hashlib.md5(s.encode()).digest()


def _new_db(path, k: int) -> webdb.WebDB:
    return webdb.create(str(path), sections=k, sync=False, block_size=512)


# ---- link analysis ------------------------------------------------------------------------------


def _random_graph(seed: int, n: int = 60) -> tuple[dict[str, bytes], dict[bytes, list[str]]]:
    """url → content md5, md5 → outlink targets.  Some pages unfetched, some dangling, some
    sharing another page's content (and so its outlinks)."""
    rng = random.Random(seed)
    urls = [f"http://h{i % 5}.example/p{i}" for i in range(n)]
    md5_of: dict[str, bytes] = {}
    out: dict[bytes, list[str]] = {}
    for u in urls:
        x = rng.random()
        if x < 0.2:
            md5_of[u] = webdb.url_md5(u)  # unfetched: no outlinks
        elif x < 0.3 and out:
            md5_of[u] = rng.choice(sorted(out))  # duplicate content
        else:
            c = _md5("content " + u)
            md5_of[u] = c
            out[c] = rng.sample(urls, rng.choice([0, 1, 2, 5, 9]))  # 0: dangling
    return md5_of, out


def _load(db, md5_of, out) -> None:
    with db.writer() as w:
        for u, c in md5_of.items():
            fetched = c != webdb.url_md5(u)
            w.add_page_with_score(
                Page(u, c, Status.FETCHED if fetched else Status.UNFETCHED, num_outlinks=len(out.get(c, [])))
            )
        for c, targets in out.items():
            w.add_links(c, [(t, "") for t in targets])


def _reference_rank(md5_of, out, iterations: int, d: float) -> dict[str, float]:
    score = dict.fromkeys(md5_of, 1.0)
    for _ in range(iterations):
        acc = dict.fromkeys(md5_of, 0.0)
        for u, c in md5_of.items():
            targets = out.get(c, [])
            for t in targets:
                acc[t] += score[u] / len(targets)
        score = {u: (1 - d) + d * acc[u] for u in md5_of}
    return score


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("seed", [1, 2])
def test_rank_equals_in_memory_pagerank(tmp_path, k, seed):
    md5_of, out = _random_graph(seed)
    db = _new_db(tmp_path / "db", k)
    _load(db, md5_of, out)
    res = rank(db, 4, 0.85, workers=2 if k > 1 else 1)
    assert len(res) == 4 and all(x["pages"] == len(md5_of) for x in res)
    want = _reference_rank(md5_of, out, 4, 0.85)
    with db.reader() as r:
        got = {p.url: p for p in r.pages()}
        r.check()
    assert set(got) == set(want)
    inlinked = {t for ts in out.values() for t in ts}
    for u, s in want.items():
        assert got[u].score == pytest.approx(s, rel=1e-9, abs=1e-12)
        assert got[u].next_score == got[u].score
        if u not in inlinked:
            assert got[u].score == pytest.approx(0.15)


def test_rank_dangling_and_cli(tmp_path):
    db = _new_db(tmp_path / "db", 2)
    a, b = _md5("a"), _md5("b")
    with db.writer() as w:
        w.add_page_with_score(Page("http://x.example/a", a, Status.FETCHED, num_outlinks=2, score=2.0))
        w.add_page_with_score(Page("http://x.example/b", b, Status.FETCHED, score=3.0))  # dangling
        w.add_page(Page("http://x.example/c"))
        w.add_links(a, [("http://x.example/b", ""), ("http://x.example/c", "")])
    assert main(["rank", str(tmp_path / "db"), "--iterations", "1", "--damping", "0.5"]) == 0
    with db.reader() as r:
        s = {p.url: p.score for p in r.pages()}
    # a: no inlinks → 1-d; b and c: half of a's 2.0 each; b's 3.0 goes nowhere
    assert s == pytest.approx({"http://x.example/a": 0.5, "http://x.example/b": 1.0, "http://x.example/c": 1.0})


# ---- dedup ----------------------------------------------------------------------------------------


def test_dedup_keeps_best_page_per_content(tmp_path, capsys):
    rng = random.Random(5)
    db = _new_db(tmp_path / "db", 2)
    contents = [_md5(f"c{i}") for i in range(30)]
    pages = []
    for i in range(200):
        u = f"http://h{i % 4}.example/{'x' * rng.randrange(3)}{i}"
        if rng.random() < 0.25:
            pages.append(Page(u, score=rng.choice([1.0, 2.0])))  # unfetched: url_md5, never a duplicate
        else:
            pages.append(Page(u, rng.choice(contents), Status.FETCHED, score=rng.choice([1.0, 2.0, 3.0])))
    with db.writer() as w:
        for p in pages:
            w.add_page_with_score(p)
    want: dict[str, int] = {p.url: p.status for p in pages}
    by_md5: dict[bytes, list[Page]] = {}
    for p in pages:
        if p.status == Status.FETCHED:
            by_md5.setdefault(p.md5, []).append(p)
    for run in by_md5.values():
        keep = sorted(run, key=lambda p: (-p.score, len(p.url), p.url))[0]
        for p in run:
            if p is not keep:
                want[p.url] = Status.DUPLICATE
    n_dup = sum(1 for s in want.values() if s == Status.DUPLICATE)
    assert n_dup > 50

    assert main(["dedup", str(tmp_path / "db"), "--dry-run"]) == 0
    listed = [ln.split("\t") for ln in capsys.readouterr().out.splitlines() if ln.count("\t") == 2]
    assert sorted(u for u, s, _ in listed if s == "duplicate") == sorted(
        u for u, s in want.items() if s == Status.DUPLICATE
    )
    with db.reader() as r:
        assert all(p.status != Status.DUPLICATE for p in r.pages())  # dry run wrote nothing

    assert main(["dedup", str(tmp_path / "db")]) == 0
    with db.reader() as r:
        got = {p.url: p for p in r.pages()}
        r.check()
    assert {u: p.status for u, p in got.items()} == want
    assert all(got[p.url].score == p.score for p in pages)  # scores kept
    assert dedup(db) == {"duplicate": 0, "restored": 0}  # idempotent


def test_dedup_restores_a_keeper_whose_twin_left(tmp_path):
    db = _new_db(tmp_path / "db", 1)
    c = _md5("same")
    with db.writer() as w:
        w.add_page_with_score(Page("http://a.example/long-url", c, Status.FETCHED, score=5.0))
        w.add_page_with_score(Page("http://a.example/s", c, Status.FETCHED, score=5.0))
        w.add_page_with_score(Page("http://a.example/u"))
    assert dedup(db) == {"duplicate": 1, "restored": 0}
    with db.reader() as r:
        assert r.get_page("http://a.example/long-url").status == Status.DUPLICATE
        assert r.get_page("http://a.example/s").status == Status.FETCHED
    with db.writer() as w:
        w.delete_page("http://a.example/s")
    assert dedup(db, dry_run=True) == {"duplicate": 0, "restored": 1}
    assert dedup(db) == {"duplicate": 0, "restored": 1}
    with db.reader() as r:
        assert r.get_page("http://a.example/long-url").status == Status.FETCHED
        assert r.get_page("http://a.example/u").status == Status.UNFETCHED


# ---- prefix statistics ----------------------------------------------------------------------------


def test_url_prefixes():
    assert url_prefixes("http://lenta.ru/2010/05/09/x", 4) == [
        "http://lenta.ru/",
        "http://lenta.ru/2010/",
        "http://lenta.ru/2010/05/",
        "http://lenta.ru/2010/05/09/",
    ]
    assert url_prefixes("http://lenta.ru/2010/05/09/x", 2) == ["http://lenta.ru/", "http://lenta.ru/2010/"]
    assert url_prefixes("http://lenta.ru/a/b?q=/c/d/#/e/", 9) == ["http://lenta.ru/", "http://lenta.ru/a/"]
    assert url_prefixes("http://lenta.ru", 3) == ["http://lenta.ru/"]


def _site_pages(seed: int, n_domains: int = 3) -> list[Page]:
    """A news site per domain: fit articles under /news/YYYY/MM/, an archive, tags, photos,
    on two hosts of the registered domain, a third of the pages unfetched."""
    rng = random.Random(seed)
    pages: dict[str, Page] = {}
    for d in range(n_domains):
        dom = f"site{d}.co.uk"
        for i in range(rng.randrange(150, 250)):
            host = rng.choice([f"www.{dom}", f"news.{dom}"])
            kind = rng.random()
            if kind < 0.3:
                url, fit = f"http://{host}/news/{2010 + i % 3}/{i % 12 + 1:02d}/story-{i}.html", True
            elif kind < 0.6:
                url, fit = f"http://{host}/archive/{i % 40}/", False
            elif kind < 0.8:
                url, fit = f"http://{host}/tags/t{i % 17}/p/{i}", False
            elif kind < 0.95:
                url, fit = f"http://{host}/photo/{i}?size=big", False
            else:
                url, fit = f"http://{host}", False
            fetched = fit or rng.random() < 0.6
            meta = {"fit": "1" if fit else "0"} if fetched else {}
            pages[url] = Page(url, _md5(url) if fetched else b"", Status.FETCHED if fetched else 0, meta=meta)
    return list(pages.values())


def _reference_prefixes(pages: list[Page], depth: int, min_count: int) -> list[tuple]:
    acc: dict[tuple[str, str], list[int]] = {}
    for p in pages:
        for pre in url_prefixes(p.url, depth):
            dom = pre.split("/")[2].split(".", 1)[1]  # the test's hosts are www./news. + registered domain
            c = acc.setdefault((dom, pre), [0, 0, 0])
            c[1 if p.fetched else 0] += 1
            c[2] += p.meta.get("fit") == "1"
    rows = [(d, pre, *c) for (d, pre), c in acc.items() if c[0] + c[1] >= min_count]
    return sorted(rows, key=lambda r: (r[0].encode(), r[1].encode()))


@pytest.mark.parametrize("k,depth,min_count", [(1, 4, 1), (3, 3, 5), (2, 9, 2)])
def test_prefix_stats_equal_a_dict_count(tmp_path, k, depth, min_count):
    pages = _site_pages(k + depth)
    db = _new_db(tmp_path / "db", k)
    with db.writer() as w:
        for p in pages:
            w.add_page(p)
    with db.reader() as r:
        got = [
            (s.domain, s.prefix, s.unfetched, s.fetched, s.fit)
            for s in prefix_stats(r, depth, min_count, max_bytes=1 << 16)
        ]
    assert got == _reference_prefixes(pages, depth, min_count)
    assert len(got) > 40


def test_prefixes_cli(tmp_path, capsys):
    db = _new_db(tmp_path / "db", 2)
    with db.writer() as w:
        w.add_page(Page("http://www.lenta.ru/2010/05/09/a", _md5("a"), Status.FETCHED, meta={"fit": "1"}))
        w.add_page(Page("http://www.lenta.ru/2010/05/10/b", _md5("b"), Status.FETCHED))
        w.add_page(Page("http://lenta.ru/about"))
    assert main(["prefixes", str(tmp_path / "db"), "--depth", "3", "--min-count", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "#domain\tprefix\tunfetched\tfetched\tfit",
        "lenta.ru\thttp://www.lenta.ru/\t0\t2\t1",
        "lenta.ru\thttp://www.lenta.ru/2010/\t0\t2\t1",
        "lenta.ru\thttp://www.lenta.ru/2010/05/\t0\t2\t1",
    ]
    assert main(["prefixes", str(tmp_path / "db"), "--json", "--depth", "1"]) == 0
    rows = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert rows[0] == {"domain": "lenta.ru", "prefix": "http://lenta.ru/", "unfetched": 1, "fetched": 0, "fit": 0}
    assert len(rows) == 2


# ---- filter generation ----------------------------------------------------------------------------


def _news_site(seed: int) -> tuple[list[Page], dict[str, list[str]]]:
    """Two news domains with few useful sections and large useless ones (tags, photos, a forum
    host), a small archive linking to the news, and a young domain with too few useful pages.
    Returns the pages and the links (source url → targets) of the fetched pages."""
    rng = random.Random(seed)
    pages: dict[str, Page] = {}
    links: dict[str, list[str]] = {}

    def add(url: str, fit: bool, fetched: bool) -> str:
        meta = {"fit": "1" if fit else "0"} if fetched else {}
        pages[url] = Page(url, _md5(url) if fetched else b"", Status.FETCHED if fetched else 0, meta=meta)
        return url

    for dom in ("lenta.ru", "news.co.uk"):
        root = add(f"http://www.{dom}/", False, True)
        news = [add(f"http://www.{dom}/news/{2009 + i % 3}/{i % 12 + 1:02d}/{i}.html", True, True) for i in range(80)]
        archive = [add(f"http://www.{dom}/archive/{i}/", False, True) for i in range(20)]  # smaller than the news
        tags = [
            add(f"http://www.{dom}/tags/{rng.choice('abcdefgh')}/{i}", False, rng.random() < 0.5) for i in range(300)
        ]
        photos = [
            add(f"http://www.{dom}/photo/{i}.jpg?size={rng.choice('sl')}", False, rng.random() < 0.3)
            for i in range(150)
        ]
        forum = [add(f"http://forum.{dom}/t/{i}", False, rng.random() < 0.5) for i in range(120)]
        links[root] = archive + tags[:50] + photos[:20] + forum[:10] + news[:5]
        for i, a in enumerate(archive):
            links[a] = news[i::20]
        for t in tags[:50]:
            links[t] = rng.sample(tags, 5) + rng.sample(news, 2)
    for i in range(5):
        add(f"http://young.org/news/{i}", True, True)
    for i in range(200):
        add(f"http://young.org/tags/{i}", False, False)
    links = {u: ts for u, ts in links.items() if pages[u].fetched}
    return list(pages.values()), links


def test_filters_keep_every_useful_url_and_drop_most_others(tmp_path):
    pages, links = _news_site(7)
    db = _new_db(tmp_path / "db", 2)
    with db.writer() as w:
        for p in pages:
            w.add_page(p)
        for u, targets in links.items():
            w.add_links(_md5(u), [(t, "") for t in targets])
    out = tmp_path / "generated-filters.txt"
    assert main(["filters", str(tmp_path / "db"), "--out", str(out), "--min-useful", "10", "--depth", "3"]) == 0
    text = out.read_text()
    assert text.rstrip().endswith("+.")
    f = UrlFilter.from_files([str(out)])
    rules = [ln for ln in text.splitlines() if ln.startswith("-")]
    useful = [p.url for p in pages if p.meta.get("fit") == "1"]
    others = [p.url for p in pages if p.meta.get("fit") != "1"]
    for rule in rules:  # no rule covers a useful URL
        assert not any(re.search(rule[1:], u) for u in useful), rule
    assert useful and all(f.accept(u) for u in useful)
    rejected = [u for u in others if not f.accept(u)]
    young = [u for u in others if "young.org" in u]
    assert len(rejected) > 0.8 * (len(others) - len(young))
    assert young and all(f.accept(u) for u in young)  # 5 useful < 10: too early to judge
    assert f.accept("http://www.lenta.ru/archive/3/") and f.accept("http://www.lenta.ru/")
    with db.reader() as r:  # every useful URL stays reachable from its domain's root
        seen = {"http://www.lenta.ru/", "http://www.news.co.uk/"}
        todo = list(seen)
        while todo:
            page = r.get_page(todo.pop())
            for lk in r.outlinks(page.md5):
                if lk.url not in seen and f.accept(lk.url):
                    seen.add(lk.url)
                    todo.append(lk.url)
    assert {u for u in useful if "young.org" not in u} <= seen
    assert f.accept("http://elsewhere.example/tags/x")  # other sites pass
    assert "-^http://forum\\.lenta\\.ru/" in rules  # a host with nothing useful goes whole
    assert not any(
        r.startswith("-^http://www\\.lenta\\.ru/tags/") and r != "-^http://www\\.lenta\\.ru/tags/" for r in rules
    )  # sub-prefixes of an excluded prefix add nothing

    # a disabled rule is not re-created, nor its sub-prefixes
    disabled = tmp_path / "disabled.txt"
    disabled.write_text("# keep tags crawlable\n-^http://www\\.lenta\\.ru/tags/\n")
    assert filtergen(db, str(out), 10, 3, str(disabled))["disabled"] == 1
    again = [ln for ln in out.read_text().splitlines() if ln.startswith("-")]
    assert set(again) == set(rules) - {"-^http://www\\.lenta\\.ru/tags/"}
    f2 = UrlFilter.from_files([str(out)])
    assert f2.accept("http://www.lenta.ru/tags/a/3") and not f2.accept("http://www.news.co.uk/tags/a/3")


def test_generate_rules_thresholds():
    stats = [
        PrefixStat("x.ru", "http://x.ru/", 0, 30, 10),
        PrefixStat("x.ru", "http://x.ru/a/", 0, 10, 10),
        PrefixStat("x.ru", "http://x.ru/b/", 0, 10, 0),  # known 10 = u_d: not more, kept
        PrefixStat("x.ru", "http://x.ru/c/", 5, 6, 0),  # 11 > 10: excluded
        PrefixStat("x.ru", "http://x.ru/c/d/", 11, 0, 0),  # under an excluded prefix
    ]
    assert [r.prefix for r in generate_rules(stats, min_useful=10)] == ["http://x.ru/c/"]
    assert list(generate_rules(stats, min_useful=11)) == []


# ---- edges: what the analysis commands do with odd input -------------------------------------------


def test_rank_unfetched_pages_give_nothing_even_with_links_under_their_url_md5(tmp_path):
    db = _new_db(tmp_path / "db", 2)
    with db.writer() as w:
        w.add_page_with_score(Page("http://x.example/u", score=4.0))  # unfetched: carries url_md5
        w.add_page(Page("http://x.example/t"))
        w.add_links(webdb.url_md5("http://x.example/u"), [("http://x.example/t", "")])
    rank(db, 1, 0.5)
    with db.reader() as r:
        assert r.get_page("http://x.example/t").score == pytest.approx(0.5)  # 1-d: nothing from u


def test_rank_help_shows_the_default_and_negative_counts_are_rejected(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["rank", "--help"])
    assert "(default 10)" in capsys.readouterr().out
    _new_db(tmp_path / "db", 1)
    for argv in (
        ["rank", str(tmp_path / "db"), "--iterations", "-1"],
        ["rank", str(tmp_path / "db"), "--workers", "-2"],
        ["prefixes", str(tmp_path / "db"), "--depth", "-1"],
        ["filters", str(tmp_path / "db"), "--out", str(tmp_path / "f.txt"), "--depth", "0"],
        ["filters", str(tmp_path / "db"), "--out", str(tmp_path / "f.txt"), "--min-useful", "-1"],
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
        assert "expected a whole number" in capsys.readouterr().err
    with pytest.raises(webdb.BadInput, match="iterations"):
        rank(webdb.open(str(tmp_path / "db")), -1)
    assert not (tmp_path / "f.txt").exists()


def test_dedup_restores_a_gone_page_as_gone(tmp_path):
    db = _new_db(tmp_path / "db", 1)
    c = _md5("same")
    with db.writer() as w:
        w.add_page_with_score(Page("http://a.example/gone-page", c, Status.GONE, score=1.0))
        w.add_page_with_score(Page("http://a.example/s", c, Status.FETCHED, score=5.0))
    assert dedup(db) == {"duplicate": 1, "restored": 0}
    with db.reader() as r:
        assert r.get_page("http://a.example/gone-page").status == Status.DUPLICATE
    with db.writer() as w:
        w.delete_page("http://a.example/s")
    assert dedup(db) == {"duplicate": 0, "restored": 1}
    with db.reader() as r:
        p = r.get_page("http://a.example/gone-page")
        assert p.status == Status.GONE and "dup_status" not in p.meta
    assert dedup(db) == {"duplicate": 0, "restored": 0}


@pytest.mark.parametrize(
    ("scope", "kept"),
    [
        ("global", {"http://www.a.example/1"}),
        ("domain", {"http://www.a.example/1", "http://b.example/1"}),
        ("host", {"http://www.a.example/1", "http://news.a.example/1", "http://b.example/1"}),
    ],
)
def test_dedup_scope(tmp_path, capsys, scope, kept):
    db = _new_db(tmp_path / "db", 2)
    c = _md5("syndicated")
    urls = ["http://www.a.example/1", "http://www.a.example/22", "http://news.a.example/1", "http://b.example/1"]
    with db.writer() as w:
        for i, u in enumerate(urls):
            w.add_page_with_score(Page(u, c, Status.FETCHED, score=9.0 - i))
    argv = ["dedup", str(tmp_path / "db"), "--json"] + ([] if scope == "global" else ["--scope", scope])
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["duplicate"] == len(urls) - len(kept)
    with db.reader() as r:
        assert {p.url for p in r.pages() if p.status == Status.FETCHED} == kept
    assert dedup(db, scope=scope) == {"duplicate": 0, "restored": 0}
    if scope != "global":  # back to global: only the best page of the md5 stays
        assert dedup(db)["duplicate"] == len(kept) - 1


def test_focus_rules_with_a_unicode_domain_match_punycode_urls(tmp_path):
    from fetchlist.focus import FocusRules
    from fetchlist.normalize import normalize

    f = tmp_path / "focus.txt"
    f.write_text("пример.рф  /news/\nBÜCHER.de  /b/\n", encoding="utf-8")
    rules = FocusRules.from_file(str(f))
    assert set(rules.rules) == {"xn--e1afmkfd.xn--p1ai", "xn--bcher-kva.de"}
    assert rules.fits(normalize("http://www.пример.рф/news/1"))
    assert rules.fits("http://xn--bcher-kva.de/b/x") and not rules.fits("http://xn--bcher-kva.de/c/")
    f.write_text("a..b.рф  /x/\n", encoding="utf-8")
    with pytest.raises(webdb.BadInput, match=r"focus.txt:1: 'a\.\.b\.рф' is not a valid domain name"):
        FocusRules.from_file(str(f))


def test_filters_out_edges(tmp_path, capsys):
    db = _new_db(tmp_path / "db", 1)
    with db.writer() as w:
        w.add_page(Page("http://a.example/"))
    for out, why in (
        (tmp_path / "no-such" / "f.txt", f"the folder {tmp_path / 'no-such'} does not exist"),
        (tmp_path, "is a directory"),
    ):
        assert main(["filters", str(tmp_path / "db"), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"webdb filters: error: --out {out}: {why}; name the filter file to write" or (
            err.startswith(f"webdb filters: error: --out {out}:") and why in err
        ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]  # no DIR.tmp.<pid> left
    # A name containing "prefix" is still read as the regex file it is: the kind is in the file.
    out = tmp_path / "prefix-rules.txt"
    assert main(["filters", str(tmp_path / "db"), "--out", str(out)]) == 0
    assert out.read_text().startswith("# webdb-filter-kind: regex\n")
    f = UrlFilter.from_files([str(out)])
    assert f.files[0].kind == "regex" and f.accept("http://a.example/x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db", "prefix-rules.txt"]
