"""On-disk constants, all in one place (see docs/format.md).  Never reuse a value."""

from __future__ import annotations

# Table file: b"WEBDBTB1" closes every table and edit file; the trailing "1" is not the version.
TABLE_MAGIC = b"WEBDBTB1"
TABLE_VERSION = 1
FOOTER_SIZE = 48

# Block codecs (one byte in every block trailer).
CODEC_NONE = 0
CODEC_ZLIB = 1
CODEC_LZ4 = 2
# lz4 in pieces: the records of a block compressed as separately decodable pieces of about
# PIECE_BYTES, so that a lookup decompresses one piece, not the whole block (format.md §1.1).
CODEC_LZ4_PIECES = 3
PIECE_BYTES = 4096

BLOCK_TRAILER_SIZE = 5  # codec u8 + crc32 u32

# Table kinds (one byte in the footer; a file opened as the wrong kind is an error).
KIND_PAGES_BY_URL = 1
KIND_PAGES_BY_MD5 = 2
KIND_LINKS_BY_MD5 = 3
KIND_LINKS_BY_URL = 4
KIND_EDITS = 5
KIND_RUN = 6  # a spilled sort run (scratch, never part of a generation)
KIND_DUE = 7  # a section's due index (format.md §3.1), named inside its PagesByURL entry
KIND_MARKS = 8  # a section's mark table (format.md §3.2), named inside its PagesByURL entry
KIND_DUE_RUN = 17  # a delta run over a section's due index (format.md §3.1): values carry an op byte

TABLE_KINDS = {
    "pages_by_url": KIND_PAGES_BY_URL,
    "pages_by_md5": KIND_PAGES_BY_MD5,
    "links_by_md5": KIND_LINKS_BY_MD5,
    "links_by_url": KIND_LINKS_BY_URL,
}
# Delta runs of a table kept as levels (webdb.tables.levels): values carry an op byte.
DELTA_KINDS = {
    "pages_by_url": 11,
    "pages_by_md5": 12,
    "links_by_md5": 13,
    "links_by_url": 14,
}
TABLE_SUFFIX = {"pages_by_url": "pbu", "pages_by_md5": "pbm", "links_by_md5": "lbm", "links_by_url": "lbu"}
DUE_SUFFIX = "due"
MARKS_SUFFIX = "mrk"
# Due index keys start with next_fetch >> DUE_BUCKET_SHIFT (about 18 hours a bucket), u32.
DUE_BUCKET_SHIFT = 16

# Database directory.
DB_FORMAT_VERSION = 2  # 2: checksums in webdb.json, CURRENT and manifests (1 still read)
DB_IDENTITY = "webdb.json"
CURRENT = "CURRENT"
LOCK = "LOCK"
GEN_DIR = "gen"
TMP_DIR = "tmp"
