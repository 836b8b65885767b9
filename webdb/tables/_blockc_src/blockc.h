/* The block codec's inner loops in C (docs/format.md §1.1, docs/design.md "Compiled block codec"):
 * one extension, webdb.tables._blockc, built from the C files beside this header, one a concern:
 *
 *   codec.c   a raw block read in place and built (RawBlock); the read path of a lookup (unpack a
 *             block, merge levels, build links)
 *   bulk.c    the bulk load's blocks, url hashes and TSV checks (webdb/tools/bulkarrow.py)
 *   sort.c    a list of byte records sorted in place (webdb/util/sortbuf.py)
 *   merge.c   levels merged a range per call (LevelCursor.merge_ranges, Seeker.range)
 *   pieces.c  lz4 pieces (codec 3)
 *   index.c   a table's index searched in place (TableReader._ix)
 *   seek.c    a table's levels read forward, a range or key per call (LevelCursor); point
 *             lookups through the block cache (Lookup: Reader.get_page)
 *   module.c  the method table and the module
 *
 * This header holds what more than one of them uses: the block layout and its inline readers,
 * the helpers one file lends another, and the module's functions and doc strings.  (The
 * directory is not named _blockc: where the extension is not built, Python would import that
 * directory as a namespace package webdb.tables._blockc instead of failing, and block.py would
 * not fall back to Python.)
 *
 * A decompressed block ("raw") is its records (key, value, key, value, ...) back to back, then n
 * key-end offsets, n record-end offsets (u32 little-endian, from the start of the block) and the
 * count n (u32 LE).  These functions read the offsets in place from the raw bytes: nothing is
 * decoded but what is asked for.  Each one is the exact counterpart of a pure-Python function of
 * webdb/tables/ (block.py, levels.py; docs/design.md §4.5 lists the pairs: the fallback, and the
 * reference the tests compare these to), including
 * its behaviour on damaged offsets: every slice is clamped to the block as a Python slice is, so a
 * crafted offset can give wrong bytes (as in Python) but never a read outside the block.
 *
 * Python's zlib and the lz4 package do the checksums and the decompression; this module only
 * knows the layout.  Built by setup.py as an optional extension: without a compiler the
 * package runs the Python code.
 */
#ifndef WEBDB_BLOCKC_H
#define WEBDB_BLOCKC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void wr32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* A raw block seen through its offset arrays. */
typedef struct {
    const unsigned char *raw;
    Py_ssize_t len;
    Py_ssize_t n;
    const unsigned char *kends; /* n u32: end of record j's key */
    const unsigned char *rends; /* n u32: end of record j */
} Block;

/* Bounds of raw[s:e] as Python computes them (both clamped to the block; empty if e < s). */
static inline void clamp(const Block *b, Py_ssize_t *s, Py_ssize_t *e) {
    if (*s > b->len) *s = b->len;
    if (*e > b->len) *e = b->len;
    if (*e < *s) *e = *s;
}

static inline Py_ssize_t rec_start(const Block *b, Py_ssize_t j) { return j ? (Py_ssize_t)rd32(b->rends + 4 * (j - 1)) : 0; }
static inline Py_ssize_t key_end(const Block *b, Py_ssize_t j) { return (Py_ssize_t)rd32(b->kends + 4 * j); }
static inline Py_ssize_t rec_end(const Block *b, Py_ssize_t j) { return (Py_ssize_t)rd32(b->rends + 4 * j); }

/* Compare record j's key with key[0:klen] as bytes compare: <0, 0, >0. */
static inline int cmp_key(const Block *b, Py_ssize_t j, const char *key, Py_ssize_t klen) {
    Py_ssize_t s = rec_start(b, j), e = key_end(b, j);
    clamp(b, &s, &e);
    Py_ssize_t l = e - s, m = l < klen ? l : klen;
    int c = m ? memcmp(b->raw + s, key, (size_t)m) : 0;
    if (c) return c;
    return l < klen ? -1 : (l > klen ? 1 : 0);
}

static inline uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* An index block (format.md §1.2, index.c) has one record per data block: key = first key,
 * value = offset u64, length u32, count u32, then the last key. */
/* The last key of index entry j (its value past the 16 fixed bytes) compared with key. */
static inline int cmp_last(const Block *b, Py_ssize_t j, const char *key, Py_ssize_t klen) {
    Py_ssize_t s = key_end(b, j) + 16, e = rec_end(b, j);
    clamp(b, &s, &e);
    Py_ssize_t l = e - s, m = l < klen ? l : klen;
    int c = m ? memcmp(b->raw + s, key, (size_t)m) : 0;
    if (c) return c;
    return l < klen ? -1 : (l > klen ? 1 : 0);
}

/* The first j in lo..hi-1 with cmp(b, j, key) >= 0, or > 0 if right (hi if none): a binary
 * search over entries in cmp's order — a block's record keys (cmp_key), an index's first keys
 * (cmp_key) or last keys (cmp_last).  Inline, so each caller's comparison is inlined too. */
static inline Py_ssize_t search(const Block *b, Py_ssize_t lo, Py_ssize_t hi, const char *key, Py_ssize_t klen,
                                int (*cmp)(const Block *, Py_ssize_t, const char *, Py_ssize_t), int right) {
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        int c = cmp(b, mid, key, klen);
        if (right ? c <= 0 : c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Largest uncompressed block a reader accepts (block.MAX_BLOCK_BYTES). */
#define MAX_BLOCK_BYTES (64u << 20)

/* The most levels merge and short_levels take (more: the caller's Python code). */
#define MERGE_MAX 64

/* Two bytes objects compared as bytes compare: <0, 0, >0. */
static inline int bytes_cmp(PyObject *a, PyObject *b) {
    Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b), m = la < lb ? la : lb;
    int c = m ? memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)m) : 0;
    if (c) return c;
    return la < lb ? -1 : (la > lb ? 1 : 0);
}

/* What a lookup reads of a block first when it expects lz4 pieces: the trailer and header. */
#define TAIL_BYTES 1024

/* The header of an lz4-pieces block (pieces.c) as pieces_of parses it. */
typedef struct {
    Py_ssize_t m;
    const unsigned char *tab;  /* m x (clen, count, crc) */
    const unsigned char **key; /* first key of piece i (i >= 1) */
    Py_ssize_t *klen;
    Py_ssize_t *at;   /* offset of piece i in the body; at[m] = where the header starts */
    Py_ssize_t total; /* sum of counts */
} Pieces;

/* What one C file lends the others: hidden, so that it stays out of the module's dynamic
 * symbols as a static one did, and calls to it go direct. */
#if defined(__GNUC__)
#define SHARED __attribute__((visibility("hidden")))
#else
#define SHARED
#endif

/* A function's doc string: PyDoc_STRVAR's, but not static (module.c's method table names it). */
#define SHARED_PYDOC(name, str) const char name[] = PyDoc_STR(str)

/* Helpers: a raw block's readers (codec.c; merge.c, pieces.c and index.c use them), build's
 * overflow error (codec.c; bulk.c), the read path's checks (codec.c; pieces.c), a codec-3
 * block's header and pieces (pieces.c; index.c), a read at an offset (index.c; seek.c). */
SHARED int block_of(PyObject *raw, Py_ssize_t n, Block *b);
SHARED Py_ssize_t lower_bound(const Block *b, Py_ssize_t lo, const char *key, Py_ssize_t klen);
SHARED PyObject *slice(const Block *b, Py_ssize_t s, Py_ssize_t e);
SHARED int split_into(const Block *b, Py_ssize_t lo, Py_ssize_t hi, PyObject **keys, PyObject **vals);
SHARED PyObject *too_big(void);
SHARED uint32_t crc32_byte(uint32_t crc, unsigned char c);
SHARED int damaged_error(void);
SHARED PyObject *lz4_bytes(PyObject *decompress, const unsigned char *src, Py_ssize_t len);
SHARED void pieces_release(Pieces *ps);
SHARED int header_of(PyObject *crc32, const unsigned char *p, Py_ssize_t end, Py_ssize_t body_len, Pieces *ps);
SHARED int piece_decode(PyObject *crc32, PyObject *decompress, PyObject *obj, const unsigned char *s, Py_ssize_t cl,
                        uint32_t crc, Py_ssize_t count, PyObject **raw, Block *b);
SHARED PyObject *read_at(int fd, uint64_t off, Py_ssize_t len);
SHARED int crc_fast(PyObject *crc32, const unsigned char *p, Py_ssize_t len, uint32_t *out); /* codec.c */
SHARED void pieces_span(const Pieces *ps, PyObject *start, PyObject *stop, Py_ssize_t *p0, Py_ssize_t *p1);
SHARED PyObject *pieces_range(PyObject *crc32, PyObject *decompress, const unsigned char *s, const Pieces *ps,
                              Py_ssize_t p0, Py_ssize_t p1, PyObject *start, PyObject *stop);

/* The module's functions and their doc strings, by file (module.c's method table; index.c
 * also calls c_unpack_range, c_unpack_range_pieces and c_merge). */
/* codec.c */
SHARED PyObject *c_find(PyObject *self, PyObject *args);
SHARED PyObject *c_get(PyObject *self, PyObject *args);
SHARED PyObject *c_split(PyObject *self, PyObject *args);
SHARED PyObject *c_values(PyObject *self, PyObject *args);
SHARED PyObject *c_keys(PyObject *self, PyObject *args);
SHARED PyObject *c_lens(PyObject *self, PyObject *args);
SHARED PyObject *c_build(PyObject *self, PyObject *args);
SHARED PyObject *c_build_run(PyObject *self, PyObject *args);
SHARED PyObject *c_run_cuts(PyObject *self, PyObject *args);
SHARED PyObject *c_unpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_unpack_range(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_merge(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_merge_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_merge_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_merge_segs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED extern const char merge_segs_doc[];
SHARED PyObject *c_links(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_index_entries(PyObject *self, PyObject *args);
SHARED PyObject *c_use_lz4(PyObject *self, PyObject *args);
SHARED PyObject *c_use_crc32(PyObject *self, PyObject *args);
SHARED PyObject *c_crc_blocks(PyObject *self, PyObject *args);
SHARED extern const char find_doc[], get_doc[], split_doc[], values_doc[], keys_doc[], lens_doc[], build_doc[],
    build_run_doc[], run_cuts_doc[], unpack_doc[], unpack_range_doc[], merge_doc[], merge_run_doc[], merge_block_doc[], links_doc[], index_entries_doc[],
    use_lz4_doc[], use_crc32_doc[], crc_blocks_doc[];

/* bulk.c */
SHARED PyObject *c_gather_blocks(PyObject *self, PyObject *args);
SHARED PyObject *c_hash_values(PyObject *self, PyObject *args);
SHARED PyObject *c_unhex(PyObject *self, PyObject *args);
SHARED PyObject *c_has_control(PyObject *self, PyObject *args);
SHARED extern const char gather_blocks_doc[], hash_values_doc[], unhex_doc[], has_control_doc[];

/* sort.c */
SHARED PyObject *c_sort_records(PyObject *self, PyObject *arg);
SHARED extern const char sort_records_doc[];

/* merge.c */
SHARED PyObject *c_diff(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED extern const char diff_doc[], span_doc[];

/* pieces.c */
SHARED PyObject *c_unpack_pieces(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_unpack_range_pieces(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_seal_pieces(PyObject *self, PyObject *args);
SHARED extern const char unpack_pieces_doc[], unpack_range_pieces_doc[], seal_pieces_doc[];

/* index.c */
SHARED PyObject *c_index_check(PyObject *self, PyObject *args);
SHARED PyObject *c_short_file(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_short_levels(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED extern const char index_check_doc[], short_file_doc[], short_levels_doc[];

/* seek.c */
SHARED PyObject *c_levelseek(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED extern const char levelseek_doc[], lookup_doc[];

#endif
