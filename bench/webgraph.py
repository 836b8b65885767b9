#!/usr/bin/env python3
"""Deterministic synthetic web for the WebDB benchmark.

Writes into --out:
  pages.tsv   url md5 status fetch_time retries interval score num_outlinks   (initial db)
  links.tsv   from_md5 to_url anchor                                          (initial db)
  round.tsv   url ok md5 fetch_time outlinks    (one fetch round, one line per fetched page;
              outlinks = to_url US anchor, joined by RS, i.e. \\x1f and \\x1e; empty if ok=0)
  lookups.txt 100k urls for getPage, inlinks.txt 10k urls for inlinks()
  meta.json   parameters, sizes and the expected counts after the round

Page semantics (Nutch WebDB): md5 '' = never fetched; status 0 unfetched, 1 fetched, 2 last fetch
failed; fetch_time = next fetch time (epoch s); interval in s.  Applying the round:
  ok=1: md5:=new, status:=1, fetch_time:=t+interval, retries:=0, num_outlinks:=len(outlinks),
        links from the old md5 are deleted, the new outlinks inserted (from the new md5),
        unseen targets become pages ('' ,0, t, 0, 2592000, 1.0, 0).
  ok=0: status:=2, fetch_time:=t+86400, retries+=1; md5 and links unchanged.
"""

import argparse
import json
import os
import time
from dataclasses import dataclass

import numpy as np

T_ROUND = 1717200000  # 2024-06-01, the round's fetch time
DAY = 86400
SECTIONS = [
    "news",
    "sports",
    "tech",
    "science",
    "business",
    "world",
    "blog",
    "products",
    "docs",
    "wiki",
    "forum",
    "archive",
    "events",
    "people",
    "travel",
    "health",
    "music",
    "video",
    "reviews",
    "support",
    "en/articles",
    "de/nachrichten",
    "catalog/items",
    "community",
]
TLDS = ["com", "com", "com", "com", "org", "net", "de", "co.uk", "io", "info", "fr", "nl"]
PREFIX = ["www.", "www.", "www.", "", "news.", "blog.", "shop.", "en."]
COMMON = [
    "home",
    "next",
    "more",
    "read more",
    "about",
    "contact",
    "news",
    "the",
    "of",
    "and",
    "login",
    "search",
    "privacy policy",
    "previous",
    "blog",
    "products",
    "help",
    "faq",
]
U64 = np.uint64


def mix64(x):
    """splitmix64 finalizer on a uint64 array (deterministic hash)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
        return x ^ (x >> U64(31))


def make_words(rng, n=4000):
    syl = [
        "ka",
        "ri",
        "to",
        "man",
        "sel",
        "ver",
        "on",
        "da",
        "lo",
        "pi",
        "ne",
        "stra",
        "gu",
        "bel",
        "for",
        "tin",
        "ex",
        "po",
        "lis",
        "ar",
        "mi",
        "que",
        "zen",
        "tor",
        "al",
        "ben",
        "cor",
        "dex",
    ]
    words, seen = list(COMMON), set(COMMON)
    while len(words) < n:
        w = "".join(syl[i] for i in rng.integers(0, len(syl), rng.integers(2, 5)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def zipf_idx(rng, a, n, size):
    return np.minimum(rng.zipf(a, size), n) - 1


def anchor_idx(rng, n, size):
    """half Zipf (popular anchors like 'home', 'next'), half uniform"""
    return np.where(rng.random(size) < 0.5, zipf_idx(rng, 1.2, n, size), rng.integers(0, n, size))


def make_pool(rng, words, n, sep):
    """n strings of 1..5 words (Zipf word choice)."""
    k = rng.choice(np.arange(1, 6), n, p=[0.35, 0.3, 0.2, 0.1, 0.05])
    w = zipf_idx(rng, 1.3, len(words), int(k.sum())).tolist()
    out, o = [], 0
    for kk in k.tolist():
        out.append(sep.join(words[i] for i in w[o : o + kk]))
        o += kk
    return out


class Web:
    def __init__(self, n_pages, n_hosts, seed):
        self.rng = rng = np.random.default_rng(seed)
        self.seed = seed
        self.words = make_words(rng)
        self.anchors = np.array(make_pool(rng, self.words, 1 << 17, " "), dtype=object)
        self.slugs = [g.replace(" ", "-") for g in make_pool(rng, self.words, 1 << 16, "-")]
        # hosts with Zipf(1.0) sizes; pages are numbered host by host
        w = 1.0 / np.arange(1, n_hosts + 1)
        host = np.searchsorted(np.cumsum(w) / w.sum(), rng.random(n_pages), side="right")
        self.hsize = np.bincount(host, minlength=n_hosts).astype(np.int64)
        self.hstart = np.concatenate([[0], np.cumsum(self.hsize)[:-1]])
        self.hcum = np.cumsum(self.hsize) / n_pages  # cross-host links ~ host size
        self.ph = np.repeat(np.arange(n_hosts), self.hsize)
        self.pj = np.arange(n_pages) - self.hstart[self.ph]
        hx = mix64(np.arange(n_hosts, dtype=U64) ^ U64(seed * 7919 + 1))
        self.hosts = [
            f"{PREFIX[a % 8]}{self.words[18 + (b % 3900)]}{h}.{TLDS[c % 12]}"
            for h, (a, b, c) in enumerate(
                zip((hx % U64(8)).tolist(), ((hx >> U64(8)) % U64(3900)).tolist(), ((hx >> U64(24)) % U64(12)).tolist())
            )
        ]

    def urls(self, hs, js):
        """URL strings for (host, local index) pairs; local index j is part of every URL."""
        x = mix64((hs.astype(U64) << U64(32) | js.astype(U64)) ^ U64(self.seed * 104729 + 3))
        cols = [
            (x % U64(100)).tolist(),
            ((x >> U64(8)) % U64(len(SECTIONS))).tolist(),
            (2010 + (x >> U64(16)) % U64(15)).tolist(),
            (1 + (x >> U64(24)) % U64(12)).tolist(),
            ((x >> U64(32)) % U64(len(self.slugs))).tolist(),
            ((x >> U64(50)) % U64(1000)).tolist(),
        ]
        H, S, G = self.hosts, SECTIONS, self.slugs
        out = []
        for h, j, k, s, y, m, g, q in zip(hs.tolist(), js.tolist(), *cols):
            if j == 0:
                out.append(f"http://{H[h]}/index.html")
            elif k < 45:
                out.append(f"http://{H[h]}/{S[s]}/{y}/{m:02d}/{G[g]}-{j}.html")
            elif k < 65:
                out.append(f"http://{H[h]}/{S[s]}/{G[g]}-{j}")
            elif k < 80:
                out.append(f"http://{H[h]}/{S[s]}/item.php?id={j}&ref={q}")
            elif k < 92:
                out.append(f"http://{H[h]}/{S[s]}/{y}/{G[g]}/{j}/index.html")
            else:
                out.append(f"http://{H[h]}/search?q={G[g].replace('-', '+')}&page={j}")
        return out

    def outlinks(self, src, p_new=0.0):
        """Random outlinks for pages src: returns (row, host, j) sorted by row, deduplicated,
        self links removed. row indexes src. Targets with j >= host size are new URLs."""
        rng = self.rng
        k = np.minimum(np.rint(rng.lognormal(np.log(33) - 0.5, 1.0, len(src))), 2000).astype(np.int64)
        row = np.repeat(np.arange(len(src)), k)
        sh = self.ph[src][row]
        n = len(row)
        th = np.where(rng.random(n) < 0.7, sh, np.searchsorted(self.hcum, rng.random(n), side="right"))
        th = np.minimum(th, len(self.hsize) - 1)
        r = rng.random(n)
        size = self.hsize[th]
        tj = np.minimum((size * r * r).astype(np.int64), size - 1)  # skew to index pages
        if p_new:
            new = rng.random(n) < p_new
            tj[new] = size[new] + (rng.random(int(new.sum())) * np.maximum(1, size[new] // 5)).astype(np.int64)
        keep = ~((th == sh) & (tj == self.pj[src][row]))
        row, th, tj = row[keep], th[keep], tj[keep]
        o = np.lexsort((tj, th, row))
        row, th, tj = row[o], th[o], tj[o]
        first = np.ones(len(row), bool)
        first[1:] = (row[1:] != row[:-1]) | (th[1:] != th[:-1]) | (tj[1:] != tj[:-1])
        return row[first], th[first], tj[first]

    def md5s(self, n):
        b = self.rng.bytes(16 * n).hex()
        return [b[i : i + 32] for i in range(0, 32 * n, 32)]


def write_lines(path, chunks):
    with open(path, "w", buffering=1 << 22) as f:
        for c in chunks:
            f.write(c)


@dataclass
class Db:
    """The initial db: arrays indexed by page number, and the links sorted by source page."""

    urls: np.ndarray
    fetched: np.ndarray
    md5: np.ndarray
    status: np.ndarray
    retries: np.ndarray
    interval: np.ndarray
    ftime: np.ndarray
    score: list
    lsrc: np.ndarray  # link source page
    ltgt: np.ndarray  # link target page
    lanc: np.ndarray  # link anchor, an index into web.anchors
    nout: np.ndarray  # outlinks per page
    loff: np.ndarray  # links of page p: loff[p]:loff[p+1]

    def links_line(self, web, urls, p):
        """Page p's links as a round line writes them (to_url US anchor, joined by RS)."""
        s, e = self.loff[p], self.loff[p + 1]
        return "\x1e".join(
            map("{}\x1f{}".format, [urls[t] for t in self.ltgt[s:e].tolist()], web.anchors[self.lanc[s:e]])
        )


def initial_db(web, n):
    """~40% of the pages fetched (host index pages always), 5% of the others failed once or more."""
    rng = web.rng
    urls = np.array(web.urls(web.ph, web.pj), dtype=object)
    assert len(set(urls.tolist())) == n, "duplicate urls"
    fetched = (rng.random(n) < 0.39) | (web.pj == 0)
    fid = np.flatnonzero(fetched)
    md5 = np.full(n, "", dtype=object)
    md5[fid] = web.md5s(len(fid))
    status = np.where(fetched, 1, 0)
    retries = np.zeros(n, np.int64)
    failed = ~fetched & (rng.random(n) < 0.05)
    status[failed] = 2
    retries[failed] = rng.integers(1, 4, int(failed.sum()))
    interval = np.where(fetched, rng.choice(np.array([1, 7, 30]) * DAY, n, p=[0.1, 0.3, 0.6]), 30 * DAY)
    ftime = np.where(fetched, T_ROUND - rng.integers(0, 30 * DAY, n) + interval, T_ROUND - rng.integers(0, 10 * DAY, n))
    score = [repr(s) for s in np.round(rng.lognormal(0, 0.5, n), 3).tolist()]
    row, th, tj = web.outlinks(fid)
    lsrc = fid[row]
    ltgt = web.hstart[th] + tj
    lanc = anchor_idx(rng, len(web.anchors), len(row))
    nout = np.bincount(lsrc, minlength=n)
    loff = np.searchsorted(lsrc, np.arange(n + 1))
    return Db(urls, fetched, md5, status, retries, interval, ftime, score, lsrc, ltgt, lanc, nout, loff)


def write_db(out, web, db):
    """pages.tsv and links.tsv, written in chunks."""
    n = len(db.urls)

    def page_chunks(step=500_000):
        for s in range(0, n, step):
            e = min(n, s + step)
            yield "".join(
                f"{u}\t{m}\t{st}\t{ft}\t{r}\t{iv}\t{sc}\t{no}\n"
                for u, m, st, ft, r, iv, sc, no in zip(
                    db.urls[s:e],
                    db.md5[s:e],
                    db.status[s:e].tolist(),
                    db.ftime[s:e].tolist(),
                    db.retries[s:e].tolist(),
                    db.interval[s:e].tolist(),
                    db.score[s:e],
                    db.nout[s:e].tolist(),
                )
            )

    def link_chunks(step=1_000_000):
        for s in range(0, len(db.lsrc), step):
            e = min(len(db.lsrc), s + step)
            yield "".join(
                map("{}\t{}\t{}\n".format, db.md5[db.lsrc[s:e]], db.urls[db.ltgt[s:e]], web.anchors[db.lanc[s:e]])
            )

    write_lines(os.path.join(out, "pages.tsv"), page_chunks())
    write_lines(os.path.join(out, "links.tsv"), link_chunks())


@dataclass
class Round:
    """A fetch round drawn from a db state: the pages fetched and what each fetch found."""

    rp: np.ndarray  # the pages fetched, in round order
    ok: np.ndarray  # the fetch succeeded
    refetch: np.ndarray  # the page had been fetched before
    changed: np.ndarray  # new content (always for a first fetch)
    fresh: np.ndarray  # ok and changed: a new md5 and new outlinks
    same: np.ndarray  # ok and unchanged: the same md5 and outlinks as before
    rmd5: np.ndarray  # the md5 the fetch found ('' if it failed)
    fi: np.ndarray  # positions of the fresh pages in rp


def draw_round(web, fetched, md5, ftime, size, t):
    """Half due refetches, half never-fetched pages; 3% fail, 30% of the refetches changed."""
    rng = web.rng
    due = np.flatnonzero(fetched & (ftime <= t))
    unf = np.flatnonzero(~fetched)
    n_re = min(len(due), size // 2)
    n_new = min(len(unf), size - n_re)
    n_re = min(len(due), size - n_new)
    rp = np.concatenate([rng.choice(due, n_re, replace=False), rng.choice(unf, n_new, replace=False)])
    rp = rp[rng.permutation(len(rp))]
    n = len(rp)
    ok = rng.random(n) >= 0.03
    refetch = fetched[rp]
    changed = ~refetch | (rng.random(n) < 0.30)
    fresh = ok & changed
    same = ok & ~changed
    rmd5 = np.full(n, "", dtype=object)
    rmd5[same] = md5[rp[same]]
    rmd5[fresh] = web.md5s(int(fresh.sum()))
    fi = np.flatnonzero(fresh)
    return Round(rp=rp, ok=ok, refetch=refetch, changed=changed, fresh=fresh, same=same, rmd5=rmd5, fi=fi)


def join_fresh_outlinks(rnd, frow, fls):
    """The round lines' outlink strings and counts, filled in for the fresh pages; frow is the
    fresh page (an index into rnd.fi) of each outlink fls, sorted."""
    n = len(rnd.rp)
    strs = np.full(n, "", dtype=object)
    cnts = np.zeros(n, np.int64)
    foff = np.searchsorted(frow, np.arange(len(rnd.fi) + 1))
    for k, i in enumerate(rnd.fi.tolist()):
        strs[i] = "\x1e".join(fls[foff[k] : foff[k + 1]])
        cnts[i] = foff[k + 1] - foff[k]
    return strs, cnts


def write_round(path, urls, rnd, strs, t):
    """One line per fetched page: url ok md5 fetch_time outlinks; urls are those of rnd.rp."""
    lines = (f"{u}\t{o}\t{m}\t{t}\t{s}\n" for u, o, m, s in zip(urls, rnd.ok.astype(int).tolist(), rnd.rmd5, strs))
    write_lines(path, ("".join(lines),))


def first_round(out, web, db, size):
    """Round 1 from the initial db, written to round.tsv. Returns the round, its outlink strings and
    counts, whether each fresh outlink targets a new URL, and the codes (host << 32 | j) of the new URLs."""
    rnd = draw_round(web, db.fetched, db.md5, db.ftime, size, T_ROUND)
    frow, fth, ftj = web.outlinks(rnd.rp[rnd.fi], p_new=0.10)
    isnew = ftj >= web.hsize[fth]
    code = fth.astype(np.int64) << 32 | ftj
    ucode, inv = np.unique(code[isnew], return_inverse=True)
    newurls = np.array(web.urls(ucode >> 32, ucode & 0xFFFFFFFF), dtype=object)
    furl = np.empty(len(frow), dtype=object)
    furl[~isnew] = db.urls[web.hstart[fth[~isnew]] + ftj[~isnew]]
    furl[isnew] = newurls[inv]
    fanc = web.anchors[anchor_idx(web.rng, len(web.anchors), len(frow))]
    fls = np.array(list(map("{}\x1f{}".format, furl, fanc)), dtype=object)
    strs, cnts = join_fresh_outlinks(rnd, frow, fls)
    for i in np.flatnonzero(rnd.same).tolist():
        p = rnd.rp[i]
        strs[i] = db.links_line(web, db.urls, p)
        cnts[i] = db.loff[p + 1] - db.loff[p]
    write_round(os.path.join(out, "round.tsv"), db.urls[rnd.rp], rnd, strs, T_ROUND)
    return rnd, strs, cnts, isnew, ucode


def write_read_keys(out, rng, urls):
    """Keys for the read tests: existing pages, uniform."""
    n = len(urls)
    write_lines(os.path.join(out, "lookups.txt"), ("\n".join(urls[rng.integers(0, n, 100_000)]) + "\n",))
    write_lines(os.path.join(out, "inlinks.txt"), ("\n".join(urls[rng.integers(0, n, 10_000)]) + "\n",))


def round1_meta(seed, web, db, rnd, cnts, isnew, ucode):
    """Parameters, sizes, and the expected counts after round 1."""
    n, fetched, nout = len(db.urls), db.fetched, db.nout
    ok, refetch = rnd.ok, rnd.refetch
    ok_old = ok & refetch  # their old links are replaced
    exp_links = len(db.lsrc) - int(nout[rnd.rp[ok_old]].sum()) + int(cnts.sum())
    return dict(
        pages=n,
        round=len(rnd.rp),
        seed=seed,
        hosts=len(web.hsize),
        t_round=T_ROUND,
        init=dict(
            pages=n,
            fetched=int(fetched.sum()),
            links=int(len(db.lsrc)),
            avg_outlinks=round(len(db.lsrc) / int(fetched.sum()), 2),
            max_outlinks=int(nout.max()),
            avg_url_len=round(float(np.mean([len(u) for u in db.urls[:100000]])), 1),
            largest_host=int(web.hsize.max()),
        ),
        round_stats=dict(
            refetch=int(refetch.sum()),
            first_fetch=int((~refetch).sum()),
            failed=int((~ok).sum()),
            changed=int((refetch & rnd.changed & ok).sum()),
            unchanged=int(rnd.same.sum()),
            outlinks=int(cnts.sum()),
            new_url_targets=int(isnew.sum()),
            new_urls=len(ucode),
            records=len(rnd.rp) + int(cnts.sum()),
        ),
        expected=dict(pages=n + len(ucode), fetched=int(fetched.sum()) + int((ok & ~refetch).sum()), links=exp_links),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--round", type=int, default=10_000)
    ap.add_argument("--hosts", type=int, default=0, help="default pages/50")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="also write round-2.tsv .. round-R.tsv: each round drawn from the state the previous one left",
    )
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    web = Web(a.pages, a.hosts or max(1, a.pages // 50), a.seed)
    db = initial_db(web, a.pages)
    t1 = time.time()
    write_db(a.out, web, db)
    t2 = time.time()
    rnd, strs, cnts, isnew, ucode = first_round(a.out, web, db, a.round)
    write_read_keys(a.out, web.rng, db.urls)
    meta = round1_meta(a.seed, web, db, rnd, cnts, isnew, ucode)
    meta["gen_seconds"] = dict(graph=round(t1 - t0, 1), write_db=round(t2 - t1, 1), round=round(time.time() - t2, 1))
    if a.rounds > 1:
        meta["rounds"] = later_rounds(a, web, db, rnd, strs, cnts, ucode, meta)
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


class State:
    """The db as the rounds after the first see it: it grows by the URLs each round discovers."""

    def __init__(self, web, db):
        self.web, self.db = web, db
        self.urls = list(db.urls)
        self.fetched, self.md5 = db.fetched.copy(), db.md5.copy()
        self.ftime, self.interval = db.ftime.copy(), db.interval.copy()
        self.nout = db.nout.astype(np.int64).copy()
        self.cur = {}  # page -> its outlinks as written in a round line
        self.known = {}  # (host << 32 | j) of URLs added by rounds -> page index

    def grow(self, codes, t):
        """New pages, due at t, for new URL codes, appended to every array."""
        web = self.web
        n0 = len(self.urls)
        for c, u in zip(codes.tolist(), web.urls(codes >> 32, codes & 0xFFFFFFFF)):
            self.known[c] = len(self.urls)
            self.urls.append(u)
        k = len(self.urls) - n0
        web.ph = np.concatenate([web.ph, (codes >> 32).astype(web.ph.dtype)])
        web.pj = np.concatenate([web.pj, (codes & 0xFFFFFFFF).astype(web.pj.dtype)])
        self.fetched = np.concatenate([self.fetched, np.zeros(k, bool)])
        self.md5 = np.concatenate([self.md5, np.full(k, "", dtype=object)])
        self.ftime = np.concatenate([self.ftime, np.full(k, t, np.int64)])
        self.interval = np.concatenate([self.interval, np.full(k, 30 * DAY, np.int64)])
        self.nout = np.concatenate([self.nout, np.zeros(k, np.int64)])

    def apply(self, rnd, strs, cnts, t):
        """The round's effect on the state."""
        for i, p in enumerate(rnd.rp.tolist()):
            if rnd.ok[i]:
                self.md5[p], self.fetched[p] = rnd.rmd5[i], True
                self.ftime[p], self.nout[p] = t + self.interval[p], cnts[i]
                if rnd.fresh[i]:
                    self.cur[p] = strs[i]
            else:
                self.ftime[p] = t + DAY

    def links_of(self, p):
        if p in self.cur:
            return self.cur[p]
        return self.db.links_line(self.web, self.urls, p)

    def targets(self, fth, ftj, t):
        """The page index of each outlink target (host fth, local index ftj), adding the URLs no
        round has seen yet as pages due at t. Returns the indexes and the new URLs' codes."""
        web = self.web
        code = fth.astype(np.int64) << 32 | ftj
        beyond = ftj >= web.hsize[fth]
        tidx = np.full(len(fth), -1, np.int64)
        tidx[~beyond] = web.hstart[fth[~beyond]] + ftj[~beyond]
        tidx[beyond] = [self.known.get(c, -1) for c in code[beyond].tolist()]
        isnew = tidx < 0
        ucode = np.unique(code[isnew])
        self.grow(ucode, t)
        tidx[isnew] = [self.known[c] for c in code[isnew].tolist()]
        return tidx, ucode


def later_rounds(a, web, db, rnd, strs, cnts, ucode, meta):
    """Rounds 2..R, each from the state the previous round left: the same mix as round 1 (half due
    refetches, half never-fetched pages incl. pages that earlier rounds discovered, 3% failures, 30% of
    refetches changed, ~10% new-URL targets), fetched one day after the previous round.
    Returns one {round, t_round, records, expected} per round, round 1 first."""
    state = State(web, db)
    state.apply(rnd, strs, cnts, T_ROUND)
    state.grow(ucode, T_ROUND)
    out = [dict(round=1, t_round=T_ROUND, records=meta["round_stats"]["records"], expected=meta["expected"])]
    for r in range(2, a.rounds + 1):
        out.append(next_round(a.out, a.round, state, r))
    return out


def next_round(out, size, state, r):
    """Round r (2 or later), written to round-r.tsv and applied to the state."""
    web, t = state.web, T_ROUND + (r - 1) * DAY
    rnd = draw_round(web, state.fetched, state.md5, state.ftime, size, t)
    frow, fth, ftj = web.outlinks(rnd.rp[rnd.fi], p_new=0.10)
    tidx, ucode = state.targets(fth, ftj, t)
    fanc = web.anchors[anchor_idx(web.rng, len(web.anchors), len(frow))]
    fls = [f"{state.urls[p]}\x1f{an}" for p, an in zip(tidx.tolist(), fanc)]
    strs, cnts = join_fresh_outlinks(rnd, frow, fls)
    for i in np.flatnonzero(rnd.same).tolist():
        p = rnd.rp[i]
        strs[i] = state.links_of(p)
        cnts[i] = state.nout[p]
    write_round(os.path.join(out, f"round-{r}.tsv"), [state.urls[p] for p in rnd.rp.tolist()], rnd, strs, t)
    state.apply(rnd, strs, cnts, t)
    return dict(
        round=r,
        t_round=t,
        records=len(rnd.rp) + int(cnts.sum()),
        new_urls=len(ucode),
        expected=dict(
            pages=len(state.urls),
            fetched=int(state.fetched.sum()),
            links=int(state.nout[np.flatnonzero(state.fetched | (state.md5 != ""))].sum()),
        ),
    )


if __name__ == "__main__":
    main()
