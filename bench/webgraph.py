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
    N, F = a.pages, a.round
    os.makedirs(a.out, exist_ok=True)
    web = Web(N, a.hosts or max(1, N // 50), a.seed)
    rng = web.rng
    urls = np.array(web.urls(web.ph, web.pj), dtype=object)
    assert len(set(urls.tolist())) == N, "duplicate urls"

    # ---- initial state: ~40% fetched (host index pages always) ----
    fetched = (rng.random(N) < 0.39) | (web.pj == 0)
    fid = np.flatnonzero(fetched)
    md5 = np.full(N, "", dtype=object)
    md5[fid] = web.md5s(len(fid))
    status = np.where(fetched, 1, 0)
    retries = np.zeros(N, np.int64)
    failed = ~fetched & (rng.random(N) < 0.05)
    status[failed] = 2
    retries[failed] = rng.integers(1, 4, int(failed.sum()))
    interval = np.where(fetched, rng.choice(np.array([1, 7, 30]) * DAY, N, p=[0.1, 0.3, 0.6]), 30 * DAY)
    ftime = np.where(fetched, T_ROUND - rng.integers(0, 30 * DAY, N) + interval, T_ROUND - rng.integers(0, 10 * DAY, N))
    score = [repr(s) for s in np.round(rng.lognormal(0, 0.5, N), 3).tolist()]

    row, th, tj = web.outlinks(fid)
    lsrc = fid[row]
    ltgt = web.hstart[th] + tj
    lanc = anchor_idx(rng, len(web.anchors), len(row))
    nout = np.bincount(lsrc, minlength=N)
    loff = np.searchsorted(lsrc, np.arange(N + 1))  # links of page p: loff[p]:loff[p+1]
    t1 = time.time()

    def page_chunks(step=500_000):
        for s in range(0, N, step):
            e = min(N, s + step)
            yield "".join(
                f"{u}\t{m}\t{st}\t{ft}\t{r}\t{iv}\t{sc}\t{no}\n"
                for u, m, st, ft, r, iv, sc, no in zip(
                    urls[s:e],
                    md5[s:e],
                    status[s:e].tolist(),
                    ftime[s:e].tolist(),
                    retries[s:e].tolist(),
                    interval[s:e].tolist(),
                    score[s:e],
                    nout[s:e].tolist(),
                )
            )

    def link_chunks(step=1_000_000):
        for s in range(0, len(lsrc), step):
            e = min(len(lsrc), s + step)
            yield "".join(map("{}\t{}\t{}\n".format, md5[lsrc[s:e]], urls[ltgt[s:e]], web.anchors[lanc[s:e]]))

    write_lines(os.path.join(a.out, "pages.tsv"), page_chunks())
    write_lines(os.path.join(a.out, "links.tsv"), link_chunks())
    t2 = time.time()

    # ---- fetch round: half due refetches, half never-fetched pages ----
    due = np.flatnonzero(fetched & (ftime <= T_ROUND))
    unf = np.flatnonzero(~fetched)
    n_re = min(len(due), F // 2)
    n_new = min(len(unf), F - n_re)
    n_re = min(len(due), F - n_new)
    rp = np.concatenate([rng.choice(due, n_re, replace=False), rng.choice(unf, n_new, replace=False)])
    rp = rp[rng.permutation(len(rp))]
    R = len(rp)
    ok = rng.random(R) >= 0.03
    refetch = fetched[rp]
    changed = ~refetch | (rng.random(R) < 0.30)
    fresh = ok & changed  # new md5 and new outlinks
    same = ok & ~changed  # same md5, same outlinks as before
    rmd5 = np.full(R, "", dtype=object)
    rmd5[same] = md5[rp[same]]
    rmd5[fresh] = web.md5s(int(fresh.sum()))
    fi = np.flatnonzero(fresh)
    frow, fth, ftj = web.outlinks(rp[fi], p_new=0.10)
    isnew = ftj >= web.hsize[fth]
    code = fth.astype(np.int64) << 32 | ftj
    ucode, inv = np.unique(code[isnew], return_inverse=True)
    newurls = np.array(web.urls(ucode >> 32, ucode & 0xFFFFFFFF), dtype=object)
    furl = np.empty(len(frow), dtype=object)
    furl[~isnew] = urls[web.hstart[fth[~isnew]] + ftj[~isnew]]
    furl[isnew] = newurls[inv]
    fanc = web.anchors[anchor_idx(rng, len(web.anchors), len(frow))]
    fls = np.array(list(map("{}\x1f{}".format, furl, fanc)), dtype=object)
    foff = np.searchsorted(frow, np.arange(len(fi) + 1))
    out_str = np.full(R, "", dtype=object)
    out_cnt = np.zeros(R, np.int64)
    for n, i in enumerate(fi.tolist()):
        out_str[i] = "\x1e".join(fls[foff[n] : foff[n + 1]])
        out_cnt[i] = foff[n + 1] - foff[n]
    for i in np.flatnonzero(same).tolist():
        p = rp[i]
        s, e = loff[p], loff[p + 1]
        out_str[i] = "\x1e".join(map("{}\x1f{}".format, urls[ltgt[s:e]], web.anchors[lanc[s:e]]))
        out_cnt[i] = e - s
    write_lines(
        os.path.join(a.out, "round.tsv"),
        (
            "".join(
                f"{u}\t{o}\t{m}\t{T_ROUND}\t{s}\n"
                for u, o, m, s in zip(urls[rp], ok.astype(int).tolist(), rmd5, out_str)
            ),
        ),
    )

    # ---- read-test keys (existing pages, uniform) ----
    write_lines(os.path.join(a.out, "lookups.txt"), ("\n".join(urls[rng.integers(0, N, 100_000)]) + "\n",))
    write_lines(os.path.join(a.out, "inlinks.txt"), ("\n".join(urls[rng.integers(0, N, 10_000)]) + "\n",))

    ok_old = ok & refetch  # their old links are replaced
    exp_links = len(lsrc) - int(nout[rp[ok_old]].sum()) + int(out_cnt.sum())
    meta = dict(
        pages=N,
        round=R,
        seed=a.seed,
        hosts=len(web.hsize),
        t_round=T_ROUND,
        init=dict(
            pages=N,
            fetched=int(fetched.sum()),
            links=int(len(lsrc)),
            avg_outlinks=round(len(lsrc) / len(fid), 2),
            max_outlinks=int(nout.max()),
            avg_url_len=round(float(np.mean([len(u) for u in urls[:100000]])), 1),
            largest_host=int(web.hsize.max()),
        ),
        round_stats=dict(
            refetch=int(refetch.sum()),
            first_fetch=int((~refetch).sum()),
            failed=int((~ok).sum()),
            changed=int((refetch & changed & ok).sum()),
            unchanged=int(same.sum()),
            outlinks=int(out_cnt.sum()),
            new_url_targets=int(isnew.sum()),
            new_urls=len(ucode),
            records=R + int(out_cnt.sum()),
        ),
        expected=dict(pages=N + len(ucode), fetched=int(fetched.sum()) + int((ok & ~refetch).sum()), links=exp_links),
        gen_seconds=dict(graph=round(t1 - t0, 1), write_db=round(t2 - t1, 1), round=round(time.time() - t2, 1)),
    )
    if a.rounds > 1:
        meta["rounds"] = later_rounds(
            a,
            web,
            urls,
            fetched,
            md5,
            ftime,
            interval,
            lsrc,
            ltgt,
            lanc,
            nout,
            loff,
            rp,
            ok,
            rmd5,
            fresh,
            fi,
            frow,
            out_str,
            out_cnt,
            ucode,
            newurls,
            meta,
        )
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


def later_rounds(
    a,
    web,
    urls,
    fetched,
    md5,
    ftime,
    interval,
    lsrc,
    ltgt,
    lanc,
    nout,
    loff,
    rp,
    ok,
    rmd5,
    fresh,
    fi,
    frow,
    out_str,
    out_cnt,
    ucode,
    newurls,
    meta,
):
    """Rounds 2..R, each from the state the previous round left: the same mix as round 1 (half due
    refetches, half never-fetched pages incl. pages that earlier rounds discovered, 3% failures, 30% of
    refetches changed, ~10% new-URL targets), fetched one day after the previous round.
    Returns one {round, t_round, records, expected} per round, round 1 first."""
    rng = web.rng
    urls = list(urls)
    fetched, md5, ftime, interval = fetched.copy(), md5.copy(), ftime.copy(), interval.copy()
    nout = nout.astype(np.int64).copy()
    cur = {}  # page -> its outlinks as written in a round line
    known = {}  # (host << 32 | j) of URLs added by rounds -> page index

    def grow(codes):  # new pages for new URL codes, appended to every array
        nonlocal fetched, md5, ftime, interval, nout
        n0 = len(urls)
        for c, u in zip(codes.tolist(), web.urls(codes >> 32, codes & 0xFFFFFFFF)):
            known[c] = len(urls)
            urls.append(u)
        k = len(urls) - n0
        web.ph = np.concatenate([web.ph, (codes >> 32).astype(web.ph.dtype)])
        web.pj = np.concatenate([web.pj, (codes & 0xFFFFFFFF).astype(web.pj.dtype)])
        fetched = np.concatenate([fetched, np.zeros(k, bool)])
        md5 = np.concatenate([md5, np.full(k, "", dtype=object)])
        ftime = np.concatenate([ftime, np.full(k, T, np.int64)])
        interval = np.concatenate([interval, np.full(k, 30 * DAY, np.int64)])
        nout = np.concatenate([nout, np.zeros(k, np.int64)])

    def apply(rp, ok, fresh, rmd5, strs, cnts, T):  # the round's effect on the state
        for i, p in enumerate(rp.tolist()):
            if ok[i]:
                md5[p], fetched[p], ftime[p], nout[p] = rmd5[i], True, T + interval[p], cnts[i]
                if fresh[i]:
                    cur[p] = strs[i]
            else:
                ftime[p] = T + DAY

    def links_of(p):
        if p in cur:
            return cur[p]
        s, e = loff[p], loff[p + 1]
        return "\x1e".join(map("{}\x1f{}".format, [urls[t] for t in ltgt[s:e].tolist()], web.anchors[lanc[s:e]]))

    T = T_ROUND
    apply(rp, ok, fresh, rmd5, out_str, out_cnt, T)
    grow(ucode)
    out = [dict(round=1, t_round=T, records=meta["round_stats"]["records"], expected=meta["expected"])]
    F = a.round
    for r in range(2, a.rounds + 1):
        T = T_ROUND + (r - 1) * DAY
        due = np.flatnonzero(fetched & (ftime <= T))
        unf = np.flatnonzero(~fetched)
        n_re = min(len(due), F // 2)
        n_new = min(len(unf), F - n_re)
        n_re = min(len(due), F - n_new)
        rp = np.concatenate([rng.choice(due, n_re, replace=False), rng.choice(unf, n_new, replace=False)])
        rp = rp[rng.permutation(len(rp))]
        R = len(rp)
        ok = rng.random(R) >= 0.03
        refetch = fetched[rp]
        changed = ~refetch | (rng.random(R) < 0.30)
        fresh, same = ok & changed, ok & ~changed
        rmd5 = np.full(R, "", dtype=object)
        rmd5[same] = md5[rp[same]]
        rmd5[fresh] = web.md5s(int(fresh.sum()))
        fi = np.flatnonzero(fresh)
        frow, fth, ftj = web.outlinks(rp[fi], p_new=0.10)
        code = fth.astype(np.int64) << 32 | ftj
        beyond = ftj >= web.hsize[fth]
        tidx = np.full(len(frow), -1, np.int64)
        tidx[~beyond] = web.hstart[fth[~beyond]] + ftj[~beyond]
        tidx[beyond] = [known.get(c, -1) for c in code[beyond].tolist()]
        isnew = tidx < 0
        ucode = np.unique(code[isnew])
        grow(ucode)
        tidx[isnew] = [known[c] for c in code[isnew].tolist()]
        fanc = web.anchors[anchor_idx(rng, len(web.anchors), len(frow))]
        fls = [f"{urls[t]}\x1f{an}" for t, an in zip(tidx.tolist(), fanc)]
        foff = np.searchsorted(frow, np.arange(len(fi) + 1))
        strs, cnts = [""] * R, np.zeros(R, np.int64)
        for n, i in enumerate(fi.tolist()):
            strs[i] = "\x1e".join(fls[foff[n] : foff[n + 1]])
            cnts[i] = foff[n + 1] - foff[n]
        for i in np.flatnonzero(same).tolist():
            p = rp[i]
            strs[i] = links_of(p)
            cnts[i] = nout[p]
        write_lines(
            os.path.join(a.out, f"round-{r}.tsv"),
            (
                "".join(
                    f"{urls[p]}\t{o}\t{m}\t{T}\t{s}\n"
                    for p, o, m, s in zip(rp.tolist(), ok.astype(int).tolist(), rmd5, strs)
                ),
            ),
        )
        apply(rp, ok, fresh, rmd5, strs, cnts, T)
        out.append(
            dict(
                round=r,
                t_round=T,
                records=R + int(cnts.sum()),
                new_urls=len(ucode),
                expected=dict(
                    pages=len(urls),
                    fetched=int(fetched.sum()),
                    links=int(nout[np.flatnonzero(fetched | (md5 != ""))].sum()),
                ),
            )
        )
    return out


if __name__ == "__main__":
    main()
