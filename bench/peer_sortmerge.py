#!/usr/bin/env python3
"""Sort-merge peer: load and round are sortmerge.sh (GNU sort/join/awk over sorted TSV files);
reads are binary searches over the sorted files through mmap."""

import mmap
import os
import subprocess

import driver

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = dict(pages_by_url="P", pages_by_md5="PM", links_by_md5="LM", links_by_url="LU")


class SortedFile:
    def __init__(self, path):
        self.f = open(path, "rb")
        self.m = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(path) else b""

    def seek(self, key):
        """Offset of the first line >= key (key = field1 + b'\\t')."""
        m, lo, hi, k = self.m, 0, len(self.m), len(key)
        while lo < hi:  # lo, hi are line starts
            p = m.rfind(b"\n", lo, (lo + hi) // 2) + 1 or lo
            if m[p : p + k] < key:
                lo = m.find(b"\n", p) + 1
            else:
                hi = p
        return lo

    def lines(self, field1):
        key = field1.encode() + b"\t"
        m, p, out = self.m, self.seek(key), []
        while m[p : p + len(key)] == key:
            e = m.find(b"\n", p)
            out.append(m[p + len(key) : e].decode())
            p = e + 1
        return out


class Peer:
    name = "sortmerge"

    def __init__(self, work, meta, opt):
        self.work, self.meta, self.files = work, meta, {}

    def sh(self, *args):
        subprocess.run(["bash", os.path.join(HERE, "sortmerge.sh"), *args], check=True)

    def load(self, pages, links):
        self.sh("load", self.work, os.path.abspath(pages), os.path.abspath(links))

    def apply_round(self, path):
        self.sh("round", self.work, os.path.abspath(path), str(self.meta["t_round"]))

    def open(self, name):
        if name not in self.files:
            self.files[name] = SortedFile(os.path.join(self.work, name))
        return self.files[name]

    def get_page(self, url):
        r = self.open("P").lines(url)
        return r[0].split("\t") if r else None

    def inlinks(self, url):
        return [tuple(line.split("\t")) for line in self.open("LU").lines(url)]

    def dump(self, table):
        with open(os.path.join(self.work, FILES[table]), "rb") as f:
            while b := f.read(1 << 23):
                yield b

    def close(self):
        self.files.clear()


if __name__ == "__main__":
    driver.main(Peer)
