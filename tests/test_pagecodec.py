"""The page/link value codec: every accessor agrees with the full encode/decode, and the
offsets docs/format.md §3 documents are the ones the codec uses."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from webdb.tables import pagecodec
from webdb.tables.records import Link, Page

ROOT = Path(__file__).resolve().parent.parent

pages = st.builds(
    Page,
    url=st.just("http://a.example/x"),
    md5=st.binary(min_size=16, max_size=16),
    status=st.integers(0, 7),
    fetch_time=st.integers(0, 2**62),
    next_fetch=st.integers(0, 2**62),
    retries=st.integers(0, 2**16 - 1),
    fetch_interval=st.integers(0, 2**32 - 1),
    num_outlinks=st.integers(0, 2**32 - 1),
    score=st.floats(allow_nan=False),
    next_score=st.floats(allow_nan=False),
    meta=st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
links = st.builds(
    Link,
    from_id=st.binary(min_size=16, max_size=16),
    url=st.just("http://b.example/"),
    anchor=st.text(max_size=20).map(lambda s: s.encode("utf-8", "replace").decode("utf-8")),
    domain_id=st.integers(-(2**63), 2**63 - 1),
    target_has_outlink=st.booleans(),
)


@given(pages, pages)
def test_page_fields_match_decode(p: Page, q: Page) -> None:
    v, w = p.encode_value(), q.encode_value()
    assert v[pagecodec.MD5] == p.md5
    assert pagecodec.page_status(v) == v[pagecodec.STATUS] == p.status
    assert int.from_bytes(v[pagecodec.NUM_OUTLINKS], "little") == p.num_outlinks
    assert (
        pagecodec.page_has_outlinks(v) == (p.num_outlinks > 0) == (v[pagecodec.NUM_OUTLINKS] != pagecodec.NO_OUTLINKS)
    )
    assert pagecodec.page_score(v) == p.score
    f = pagecodec.PAGE.unpack_from(v)
    assert (f[pagecodec.F_NEXT_FETCH], f[pagecodec.F_SCORE]) == (p.next_fetch, p.score)
    assert pagecodec.page_without_md5(v) == v[16:] and p.md5 + pagecodec.page_without_md5(v) == v
    kept = Page.decode(p.url, pagecodec.page_with_scores_of(v, w))
    assert (kept.score, kept.next_score) == (q.score, q.next_score)
    assert (kept.md5, kept.status, kept.num_outlinks, kept.meta) == (p.md5, p.status, p.num_outlinks, p.meta)


@given(links, st.booleans())
def test_link_fields_match_decode(lk: Link, flag: bool) -> None:
    v = lk.encode_value()
    assert pagecodec.link_domain_id(v) == lk.domain_id
    assert pagecodec.link_flag(v) == lk.target_has_outlink
    assert pagecodec.link_anchor(v) == lk.anchor
    flipped = pagecodec.link_with_flags(v, bytes((pagecodec.LINK_OUT if flag else 0,)))
    assert Link.decode(lk.from_id, lk.url, flipped).target_has_outlink == flag
    assert pagecodec.link_same_but_flag(v, flipped)
    assert not pagecodec.link_same_but_flag(v, v + b"#")
    assert not pagecodec.link_same_but_flag(v, bytes((v[0] ^ 1,)) + v[1:])


def _doc_table(title: str) -> dict[str, tuple[int, str]]:
    """{field: (offset, type)} of the value table under ``**title**`` in docs/format.md §3."""
    text = (ROOT / "docs" / "format.md").read_text()
    body = text[text.index(f"**{title}**") :]
    rows = re.findall(r"^\| (\d+) \| (\w+) \| ([\w ]+?) \|", body.split("\n\n|", 1)[1].split("\n\n")[0], re.M)
    return {name: (int(off), typ) for off, name, typ in rows}


def test_docs_offsets_are_the_codec_offsets() -> None:
    sizes = {"u8": "B", "u16": "H", "u32": "I", "i64": "q", "f64": "d", "16 bytes": "16s"}
    page = _doc_table("Page")
    fixed = [(off, typ) for name, (off, typ) in sorted(page.items(), key=lambda x: x[1][0]) if name != "meta"]
    assert struct.Struct("<" + "".join(sizes[t] for _, t in fixed)).format == pagecodec.PAGE.format
    off = 0
    for o, t in fixed:
        assert o == off
        off += struct.calcsize("<" + sizes[t])
    assert page["meta"][0] == pagecodec.PAGE_FIXED
    assert page["md5"][0] == pagecodec.MD5.start and page["status"][0] == pagecodec.STATUS
    assert page["num_outlinks"][0] == pagecodec.NUM_OUTLINKS.start and page["score"][0] == pagecodec.SCORE
    link = _doc_table("Link")
    assert link["flags"][0] == pagecodec.LINK_FLAGS and link["anchor"][0] == pagecodec.LINK_FIXED
