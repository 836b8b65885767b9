/* ---- a table's levels read forward, one call per key or range (LevelCursor) ----------------
 *
 * A stage over a leveled table (webdb/tables/levels.py, LevelCursor) asks for the old records of
 * each edit's key or range in increasing order, in every level: the delta runs, newest first,
 * then the base.  In Python that is a Seeker per file and a merge per range — several calls per
 * edit group and file, which at a few runs cost more than the blocks' decompression.  A LevelSeek
 * keeps each file's place (the block at hand, decompressed; a lower bound of the file's next key)
 * and answers a range or a key for all files in one call, with the same reads and the same
 * results as the Seekers: the exact counterpart of LevelCursor's Python path, which stays the
 * reference (and the fallback: anything not sound here gives False, and the Python path names the
 * fault). */

#include "blockc.h"
#include <structmember.h> /* T_OBJECT_EX, READONLY (Lookup: Page filled in place) */

/* One file of the view.  The block at hand is held whole (blk, b) or, a codec-3 block (lz4
 * pieces, docs/format.md §1.1), as its bytes and header (data, ps) with the pieces a read has
 * reached decompressed (praw, pb): a stage's edits fall in most blocks of a link table but leave
 * many of a block's pieces untouched, and those are never decompressed. */
typedef struct {
    PyObject *ix_raw; /* the file's index block, decompressed (TableReader._ix) */
    Block ix;
    int fd, pieces, run;
    Py_ssize_t bi;   /* Seeker.bi: the block at hand, and where the index search starts */
    PyObject *blk;   /* that block decompressed, or NULL */
    Block b;         /* its offsets (when blk) */
    PyObject *data;  /* or: that block as read, a codec-3 block whose header is sound, or NULL */
    Pieces ps;       /* its header (when data) */
    PyObject **praw; /* piece i decompressed and sound, or NULL (ps.m entries, when data) */
    Block *pb;       /* its offsets (when praw[i]) */
    const Block *at_b; /* the block or piece of the last point read (NULL: none since load), */
    Py_ssize_t at;     /* and where in it that read's search ended (find_from) */
    PyObject *nxt;   /* Seeker.nxt: a lower bound of the file's next key; NULL: none left */
    PyObject *mark;  /* a bytearray of a byte per block (TableReader.verified), or NULL: a block
                        verified whole (unpack_block) gets 1 there, for the stage's scrub */
} SeekFile;

typedef struct {
    PyObject_HEAD Py_ssize_t m;
    SeekFile *f;
    PyObject *crc32, *decompress;
    Py_ssize_t decoded;       /* blocks read and decompressed (Seeker.decoded summed) */
    Py_ssize_t pieces_read;   /* pieces decompressed of the codec-3 blocks read */
    Py_ssize_t pieces_in;     /* pieces in those blocks */
} LevelSeek;

/* Forget the block at hand of f (whole or in pieces). */
static void drop_block(SeekFile *f) {
    f->at_b = NULL;
    Py_CLEAR(f->blk);
    if (f->data) {
        for (Py_ssize_t i = 0; i < f->ps.m; i++) Py_XDECREF(f->praw[i]);
        PyMem_Free(f->praw);
        PyMem_Free(f->pb);
        f->praw = NULL;
        f->pb = NULL;
        pieces_release(&f->ps);
        Py_CLEAR(f->data);
    }
}

static void ls_dealloc(LevelSeek *s) {
    for (Py_ssize_t i = 0; i < s->m; i++) {
        Py_XDECREF(s->f[i].ix_raw);
        drop_block(&s->f[i]);
        Py_XDECREF(s->f[i].nxt);
        Py_XDECREF(s->f[i].mark);
    }
    PyMem_Free(s->f);
    Py_XDECREF(s->crc32);
    Py_XDECREF(s->decompress);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* bisect_left(last_keys, key, lo): the first entry from lo on whose last key is >= key.  A
 * galloping search from lo (entries lo, lo+1, lo+3, lo+7, ... then a binary search of the last
 * step): keys come in increasing order and most fall in the block at hand or one a little
 * further, so a read costs a comparison or a few instead of a search of the whole rest of the
 * index, whose entries (cache misses on a big file's index) grow with the table. */
static inline Py_ssize_t gallop(const Block *b, Py_ssize_t lo, const char *key, Py_ssize_t klen,
                                int (*cmp)(const Block *, Py_ssize_t, const char *, Py_ssize_t)) {
    Py_ssize_t n = b->n, step = 1;
    while (lo < n && cmp(b, lo, key, klen) < 0) { /* entries < lo all compare below key */
        Py_ssize_t hi = lo + step;
        if (hi >= n || cmp(b, hi, key, klen) >= 0) return search(b, lo + 1, hi < n ? hi : n, key, klen, cmp, 0);
        lo = hi + 1;
        step <<= 1;
    }
    return lo;
}

static Py_ssize_t last_ge(const Block *ix, Py_ssize_t lo, const char *key, Py_ssize_t klen) {
    return gallop(ix, lo, key, klen, cmp_last);
}

/* lower_bound(bb, 0, key) of a point read in the block (or piece) bb, galloping from *at, where
 * the file's last point read in bb ended, if the record before it is below key (keys come in
 * increasing order, so it nearly always is; else, and for the block's first read, the block is
 * bisected): a block of a link table holds a hundred records or more, and a round's keys fall
 * several in a block.  *at is set to the result (SeekFile.at; drop_block forgets it). */
static Py_ssize_t find_from(const Block *bb, Py_ssize_t *at, const char *key, Py_ssize_t klen) {
    Py_ssize_t lo = *at;
    if (lo > 0 && lo <= bb->n && cmp_key(bb, lo - 1, key, klen) < 0) return *at = gallop(bb, lo, key, klen, cmp_key);
    return *at = lower_bound(bb, 0, key, klen);
}

/* Block b of a file (index ix), its bytes data as read, decompressed and verified as
 * TableReader._read does: 1 and *raw (a new reference) and *n set, 0 if it is not sound (bad
 * checksum, undecodable, a count the index does not give), -1 on error. */
static int unpack_block(const Block *ix, Py_ssize_t b, PyObject *data, PyObject *crc32, PyObject *decompress,
                        PyObject **raw, Py_ssize_t *n) {
    const unsigned char *v = ix->raw + key_end(ix, b);
    Py_ssize_t len = PyBytes_GET_SIZE(data);
    PyObject *a[3] = {data, crc32, decompress}, *r;
    r = c_unpack(NULL, a, 3);
    if (r == Py_None && len >= 5 && PyBytes_AS_STRING(data)[len - 5] == 3) {
        Py_DECREF(r);
        r = c_unpack_pieces(NULL, a, 3);
    }
    if (!r) return -1;
    *n = r == Py_None ? -1 : PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
    if (*n != (Py_ssize_t)rd32(v + 12)) {
        Py_DECREF(r);
        return PyErr_Occurred() ? -1 : 0;
    }
    *raw = Py_NewRef(PyTuple_GET_ITEM(r, 0));
    Py_DECREF(r);
    return 1;
}

/* Block b of a file (index ix, fd) read, then as unpack_block: 1, 0 if it is not sound (or
 * short), -1 on error. */
static int read_block(const Block *ix, int fd, Py_ssize_t b, PyObject *crc32, PyObject *decompress, PyObject **raw,
                      Py_ssize_t *n) {
    const unsigned char *v = ix->raw + key_end(ix, b);
    PyObject *data = read_at(fd, rd64(v), (Py_ssize_t)rd32(v + 8));
    if (!data) return -1;
    if (data == Py_None) {
        Py_DECREF(data);
        return 0;
    }
    int r = unpack_block(ix, b, data, crc32, decompress, raw, n);
    Py_DECREF(data);
    return r;
}

/* Whether the trailer's CRC of a block (its bytes p, the codec byte at end) matches: 1, 0 if
 * not, -1 when the registered CRC has no C function (then nobody is told it was checked). */
static int trailer_crc_ok(PyObject *crc32, const unsigned char *p, Py_ssize_t end) {
    uint32_t c;
    if (!crc_fast(crc32, p, end, &c)) return -1;
    return crc32_byte(c, p[end]) == rd32(p + end + 1);
}

/* Seeker._block: block b of f read and verified: 1, 0 if it is not sound, -1 on error.  A
 * codec-3 block of a file in pieces is kept as read, its header checked (its CRC, the piece table
 * against the body, the total count against the index entry); its pieces are decompressed and
 * checked as reads reach them (piece).  Any other block is decompressed whole (unpack_block). */
static int load(LevelSeek *s, SeekFile *f, Py_ssize_t b) {
    if (b == f->bi && (f->blk || f->data)) return 1;
    drop_block(f);
    const unsigned char *v = f->ix.raw + key_end(&f->ix, b);
    Py_ssize_t len = (Py_ssize_t)rd32(v + 8), n;
    PyObject *data = read_at(f->fd, rd64(v), len), *raw;
    if (!data) return -1;
    if (data == Py_None) {
        Py_DECREF(data);
        return 0;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    if (f->pieces && len >= 13 && p[len - 5] == 3) {
        /* A stage's read (marks kept) checks the trailer's CRC too: the header's and the pieces'
         * CRCs leave the trailer's unchecked, and with it the block counts as verified whole (its
         * scrub skipped).  The bytes are at hand: that CRC costs less than the scrub's over the
         * mapped file. */
        int whole = f->mark ? trailer_crc_ok(s->crc32, p, len - 5) : -1;
        if (whole == 0) {
            Py_DECREF(data);
            return 0;
        }
        int r = header_of(s->crc32, p, len - 5, len - 5, &f->ps);
        if (r <= 0 || f->ps.total != (Py_ssize_t)rd32(v + 12)) {
            if (r > 0) pieces_release(&f->ps);
            Py_DECREF(data);
            return r < 0 ? -1 : 0;
        }
        f->praw = PyMem_Calloc((size_t)f->ps.m, sizeof(PyObject *));
        f->pb = PyMem_Malloc(sizeof(Block) * (size_t)f->ps.m);
        f->data = data;
        if (!f->praw || !f->pb) {
            f->ps.m = 0; /* nothing to release in praw */
            drop_block(f);
            PyErr_NoMemory();
            return -1;
        }
        f->bi = b;
        s->decoded++;
        s->pieces_in += f->ps.m;
        if (whole == 1 && b < PyByteArray_GET_SIZE(f->mark)) PyByteArray_AS_STRING(f->mark)[b] = 1;
        return 1;
    }
    int r = unpack_block(&f->ix, b, data, s->crc32, s->decompress, &raw, &n);
    Py_DECREF(data);
    if (r <= 0) return r;
    /* Its trailer's CRC checked over the whole block. */
    if (f->mark && b < PyByteArray_GET_SIZE(f->mark)) PyByteArray_AS_STRING(f->mark)[b] = 1;
    f->blk = raw;
    if (block_of(f->blk, n, &f->b) < 0) {
        Py_CLEAR(f->blk);
        return -1;
    }
    f->bi = b;
    s->decoded++;
    return 1;
}

/* Piece i of the block at hand (f->data) decompressed and checked as unpack_pieces checks it (its
 * CRC and count, its offsets, its first key against the header's): 1, 0 if not sound, -1 on
 * error. */
static int piece(LevelSeek *s, SeekFile *f, Py_ssize_t i) {
    if (f->praw[i]) return 1;
    const Pieces *ps = &f->ps;
    const unsigned char *e = ps->tab + 12 * i;
    int r = piece_decode(s->crc32, s->decompress, NULL, (const unsigned char *)PyBytes_AS_STRING(f->data) + ps->at[i],
                         ps->at[i + 1] - ps->at[i], rd32(e + 8), (Py_ssize_t)rd32(e + 4), &f->praw[i], &f->pb[i]);
    if (r <= 0) return r;
    if (i && cmp_key(&f->pb[i], 0, (const char *)ps->key[i], ps->klen[i]) != 0) {
        Py_CLEAR(f->praw[i]);
        return 0;
    }
    s->pieces_read++;
    return 1;
}

/* The first key of piece i (i >= 1) compared with key[0:kl], as bytes compare. */
static inline int cmp_piece_key(const Pieces *ps, Py_ssize_t i, const char *key, Py_ssize_t kl) {
    Py_ssize_t pl = ps->klen[i], m = pl < kl ? pl : kl;
    int c = m ? memcmp(ps->key[i], key, (size_t)m) : 0;
    if (c) return c;
    return pl < kl ? -1 : (pl > kl ? 1 : 0);
}

/* The piece that can hold key: the last whose first key is <= key (0 if none is). */
static Py_ssize_t piece_of(const Pieces *ps, const char *key, Py_ssize_t kl) {
    Py_ssize_t lo = 1, hi = ps->m; /* first piece i >= 1 whose first key is > key */
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        if (cmp_piece_key(ps, mid, key, kl) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

/* span over one block's records: those in [lo, hi) appended to *ks, *vs (created on first
 * records); *nx (a new reference) the first key >= hi in it, or NULL if the range reaches its
 * end.  0, or -1 on error. */
static int span_into(const Block *b, PyObject *lo, PyObject *hi, PyObject **ks, PyObject **vs, PyObject **nx) {
    Py_ssize_t j1 = lower_bound(b, 0, PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo));
    Py_ssize_t j2 = lower_bound(b, j1, PyBytes_AS_STRING(hi), PyBytes_GET_SIZE(hi));
    *nx = NULL;
    if (j2 > j1) {
        PyObject *k = NULL, *x = NULL;
        if (split_into(b, j1, j2, &k, &x) < 0) return -1;
        if (!*ks) {
            *ks = k;
            *vs = x;
        } else {
            int e = PyList_SetSlice(*ks, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, k) < 0 ||
                    PyList_SetSlice(*vs, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, x) < 0;
            Py_DECREF(k);
            Py_DECREF(x);
            if (e) return -1;
        }
    }
    if (j2 < b->n && !(*nx = slice(b, rec_start(b, j2), key_end(b, j2)))) return -1;
    return 0;
}

/* Seeker.range(lo, hi) of one file, appended to *ks, *vs (created on first records): 1, 0 if a
 * block is not sound, -1 on error.  In a block held in pieces only the pieces from the one that
 * can hold lo to the last that starts before hi are decompressed: the records and the next key
 * (f->nxt) are those of the whole block's span. */
static int file_range(LevelSeek *s, SeekFile *f, PyObject *lo, PyObject *hi, PyObject **ks, PyObject **vs) {
    const char *hk = PyBytes_AS_STRING(hi);
    Py_ssize_t hl = PyBytes_GET_SIZE(hi), n = f->ix.n;
    Py_ssize_t b = last_ge(&f->ix, f->bi, PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo));
    for (; b < n && cmp_key(&f->ix, b, hk, hl) < 0; b++) {
        int r = load(s, f, b);
        if (r <= 0) return r;
        PyObject *nx = NULL;
        if (f->data) {
            const Pieces *ps = &f->ps;
            Py_ssize_t p = piece_of(ps, PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo)), p0 = p;
            for (; p < ps->m && !nx; p++) {
                if (p > p0 && cmp_piece_key(ps, p, hk, hl) >= 0) { /* the range ends before piece p */
                    if (!(nx = PyBytes_FromStringAndSize((const char *)ps->key[p], ps->klen[p]))) return -1;
                    break;
                }
                if ((r = piece(s, f, p)) <= 0) return r;
                if (span_into(&f->pb[p], lo, hi, ks, vs, &nx) < 0) return -1;
            }
        } else if (span_into(&f->b, lo, hi, ks, vs, &nx) < 0) {
            return -1;
        }
        if (nx) {
            Py_XSETREF(f->nxt, nx);
            return 1;
        }
    }
    if (b < n) {
        PyObject *fk = slice(&f->ix, rec_start(&f->ix, b), key_end(&f->ix, b));
        if (!fk) return -1;
        Py_XSETREF(f->nxt, fk);
    } else {
        Py_CLEAR(f->nxt);
    }
    return 1;
}

PyDoc_STRVAR(ls_range_doc,
             "range(lo, hi) -> (keys, values) | False: LevelCursor._range — the live records with lo <= "
             "key < hi over every level, read forward (ranges in increasing order), merged as merge "
             "does; False if a block or a record is not sound (the Python path names the fault).");

static PyObject *ls_range(LevelSeek *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "range(lo: bytes, hi: bytes)");
        return NULL;
    }
    PyObject *lo = args[0], *hi = args[1], *parts = NULL, *res = NULL;
    PyObject *one_k = NULL, *one_v = NULL; /* the only part, if it is the base's */
    int base_only = 0;
    for (Py_ssize_t i = 0; i < s->m; i++) {
        SeekFile *f = &s->f[i];
        if (!f->nxt || bytes_cmp(f->nxt, hi) >= 0) continue; /* nothing of this level before hi */
        PyObject *ks = NULL, *vs = NULL;
        int r = file_range(s, f, lo, hi, &ks, &vs);
        if (r <= 0) {
            Py_XDECREF(ks);
            Py_XDECREF(vs);
            if (r == 0) res = Py_NewRef(Py_False);
            goto done;
        }
        if (!ks) continue;
        if (!parts && !one_k && !f->run) { /* the base alone so far: no merge needed if it stays so */
            one_k = ks;
            one_v = vs;
            base_only = 1;
            continue;
        }
        if (!parts && !(parts = PyList_New(0))) {
            Py_DECREF(ks);
            Py_DECREF(vs);
            goto done;
        }
        PyObject *t = PyTuple_Pack(3, ks, vs, f->run ? Py_True : Py_False);
        Py_DECREF(ks);
        Py_DECREF(vs);
        if (!t || PyList_Append(parts, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    if (!parts) {
        if (base_only)
            res = PyTuple_Pack(2, one_k, one_v);
        else {
            PyObject *a = PyList_New(0), *b = PyList_New(0);
            if (a && b) res = PyTuple_Pack(2, a, b);
            Py_XDECREF(a);
            Py_XDECREF(b);
        }
        goto done;
    }
    if (one_k) { /* the base is the oldest level: last */
        PyObject *t = PyTuple_Pack(3, one_k, one_v, Py_False);
        if (!t || PyList_Append(parts, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    PyObject *a[1] = {parts};
    res = c_merge(NULL, a, 1);
    if (res == Py_None) {
        Py_DECREF(res);
        res = Py_NewRef(Py_False);
    }
done:
    Py_XDECREF(parts);
    Py_XDECREF(one_k);
    Py_XDECREF(one_v);
    return res;
}

PyDoc_STRVAR(ls_get_doc,
             "get(key) -> value | None | False: LevelCursor._get — the key's live value over every "
             "level (keys in increasing order), None if it has none; False if a block or a delta "
             "record is not sound (the Python path names the fault).");

/* LevelCursor._get of key[0:kl]: its live value over every level (a new reference), Py_None (a
 * new reference) if it has none, Py_False (a new reference) if a block or delta record is not
 * sound, NULL on error. */
static PyObject *get_value(LevelSeek *s, const char *k, Py_ssize_t kl) {
    for (Py_ssize_t i = 0; i < s->m; i++) {
        SeekFile *f = &s->f[i];
        Py_ssize_t b = last_ge(&f->ix, f->bi, k, kl);
        if (b == f->ix.n || cmp_key(&f->ix, b, k, kl) > 0) continue;
        int r = load(s, f, b);
        const Block *bb = &f->b;
        if (r > 0 && f->data) { /* held in pieces: the one piece that can hold the key */
            Py_ssize_t p = piece_of(&f->ps, k, kl);
            r = piece(s, f, p);
            bb = &f->pb[p];
        }
        if (r <= 0) return r == 0 ? Py_NewRef(Py_False) : NULL;
        if (f->at_b != bb) {
            f->at_b = bb;
            f->at = 0;
        }
        Py_ssize_t j = find_from(bb, &f->at, k, kl);
        if (j == bb->n || cmp_key(bb, j, k, kl) != 0) continue;
        Py_ssize_t vs = key_end(bb, j), ve = rec_end(bb, j);
        clamp(bb, &vs, &ve);
        if (!f->run) return slice(bb, vs, ve);
        if (ve > vs && bb->raw[vs] == 1) return slice(bb, vs + 1, ve); /* PUT + value */
        if (ve > vs && bb->raw[vs] == 0) Py_RETURN_NONE;                /* DEL */
        Py_RETURN_FALSE; /* neither: the Python path names the run */
    }
    Py_RETURN_NONE;
}

static PyObject *ls_get(LevelSeek *s, PyObject *key) {
    if (!PyBytes_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "get(key: bytes)");
        return NULL;
    }
    return get_value(s, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
}

static inline int same_bytes(PyObject *a, PyObject *b) {
    Py_ssize_t l = PyBytes_GET_SIZE(a);
    return l == PyBytes_GET_SIZE(b) && (l == 0 || memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)l) == 0);
}

/* Append key and op + value (value NULL: the op byte alone) to the out lists (merge.c's put_rec). */
static int put_delta(PyObject *out_k, PyObject *out_v, PyObject *k, char op, PyObject *v) {
    Py_ssize_t vl = v ? PyBytes_GET_SIZE(v) : 0;
    PyObject *r = PyBytes_FromStringAndSize(NULL, vl + 1);
    if (!r) return -1;
    PyBytes_AS_STRING(r)[0] = op;
    if (vl) memcpy(PyBytes_AS_STRING(r) + 1, PyBytes_AS_STRING(v), (size_t)vl);
    int e = PyList_Append(out_k, k) < 0 || PyList_Append(out_v, r) < 0;
    Py_DECREF(r);
    return e ? -1 : 0;
}

PyDoc_STRVAR(ls_splice_doc,
             "splice(sp, lo, hi, out_k, out_v) -> live | None | False: LevelCursor.merge_ranges' step "
             "for a range whose combine gave a Splice without reading the range: each spliced key's "
             "stored value read as get reads it (keys in increasing order, after every earlier call's), "
             "and the changes appended to out_k, out_v as diff appends them (PUT 0x01 + value, DEL 0x00; "
             "an unchanged record not at all); returns the change in live records.  None, nothing read "
             "or appended, for a splice diff declines (keys out of order or range, an item of the wrong "
             "type); False, nothing appended, if a block or a delta record is not sound.");

static PyObject *ls_splice(LevelSeek *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyList_Check(args[0]) || !PyBytes_Check(args[1]) || !PyBytes_Check(args[2]) ||
        !PyList_Check(args[3]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "splice(sp: list, lo: bytes, hi: bytes, out_k: list, out_v: list)");
        return NULL;
    }
    PyObject *sp = args[0], *lo = args[1], *hi = args[2], *out_k = args[3], *out_v = args[4];
    Py_ssize_t nn = PyList_GET_SIZE(sp), live = 0;
    /* Checked whole first (as diff checks a Splice), so a bad one reads and appends nothing. */
    for (Py_ssize_t b = 0; b < nn; b++) {
        PyObject *t = PyList_GET_ITEM(sp, b);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) Py_RETURN_NONE;
        PyObject *k = PyTuple_GET_ITEM(t, 0), *v = PyTuple_GET_ITEM(t, 1);
        if (!PyBytes_Check(k) || (v != Py_None && !PyBytes_Check(v))) Py_RETURN_NONE;
        if (bytes_cmp(k, lo) < 0 || bytes_cmp(k, hi) >= 0) Py_RETURN_NONE;
        if (b && bytes_cmp(PyTuple_GET_ITEM(PyList_GET_ITEM(sp, b - 1), 0), k) >= 0) Py_RETURN_NONE;
    }
    /* Nothing below calls Python code (the reads are the file's, the values bytes): sp cannot
     * change under the loop.  On False the appended records are taken back. */
    Py_ssize_t n0 = PyList_GET_SIZE(out_k), v0 = PyList_GET_SIZE(out_v);
    for (Py_ssize_t b = 0; b < nn; b++) {
        PyObject *t = PyList_GET_ITEM(sp, b), *k = PyTuple_GET_ITEM(t, 0), *v = PyTuple_GET_ITEM(t, 1);
        PyObject *o = get_value(s, PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k));
        if (!o) return NULL;
        if (o == Py_False) {
            if (PyList_SetSlice(out_k, n0, PY_SSIZE_T_MAX, NULL) < 0 ||
                PyList_SetSlice(out_v, v0, PY_SSIZE_T_MAX, NULL) < 0)
                return NULL;
            return o;
        }
        int e = 0;
        if (v == Py_None) {
            if (o != Py_None) {
                e = put_delta(out_k, out_v, k, 0, NULL);
                live--;
            }
        } else if (o == Py_None) {
            e = put_delta(out_k, out_v, k, 1, v);
            live++;
        } else if (!same_bytes(o, v)) {
            e = put_delta(out_k, out_v, k, 1, v);
        }
        Py_DECREF(o);
        if (e) return NULL;
    }
    return PyLong_FromSsize_t(live);
}

static PyObject *ls_decoded(LevelSeek *s, void *closure) { return PyLong_FromSsize_t(s->decoded); }
static PyObject *ls_pieces(LevelSeek *s, void *closure) { return Py_BuildValue("(nn)", s->pieces_read, s->pieces_in); }

static PyMethodDef ls_methods[] = {
    {"range", (PyCFunction)(void (*)(void))ls_range, METH_FASTCALL, ls_range_doc},
    {"get", (PyCFunction)ls_get, METH_O, ls_get_doc},
    {"splice", (PyCFunction)(void (*)(void))ls_splice, METH_FASTCALL, ls_splice_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ls_getset[] = {
    {"decoded", (getter)ls_decoded, NULL, "blocks read (decompressed whole or in pieces) so far", NULL},
    {"pieces", (getter)ls_pieces, NULL,
     "(decompressed, held): pieces decompressed so far of the blocks read in lz4 pieces, and their pieces",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LevelSeekType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "webdb.tables._blockc.LevelSeek",
    .tp_basicsize = sizeof(LevelSeek),
    .tp_dealloc = (destructor)ls_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A table's levels read forward (levelseek).",
    .tp_methods = ls_methods,
    .tp_getset = ls_getset,
};

SHARED_PYDOC(levelseek_doc,
             "levelseek(files, crc32, decompress, marks=None) -> LevelSeek: reads of a table's levels, "
             "forward, for LevelCursor: files are (raw, n, fd, pieces, run) of its files, newest first "
             "(the runs, then the base: short_levels' files); each keeps its place between calls as a "
             "Seeker does.  marks: per file a bytearray of a byte per block or None; a block read and "
             "verified whole gets 1 there (TableReader.verified).  The fds stay the caller's (open "
             "while the LevelSeek is used).");

PyObject *c_levelseek(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3 || nargs > 4 || !PyTuple_Check(args[0]) ||
        (nargs == 4 && args[3] != Py_None &&
         (!PyTuple_Check(args[3]) || PyTuple_GET_SIZE(args[3]) != PyTuple_GET_SIZE(args[0])))) {
        PyErr_SetString(PyExc_TypeError, "levelseek(files: tuple, crc32, decompress, marks: tuple | None = None)");
        return NULL;
    }
    PyObject *marks = nargs == 4 && args[3] != Py_None ? args[3] : NULL;
    if (PyType_Ready(&LevelSeekType) < 0) return NULL;
    Py_ssize_t m = PyTuple_GET_SIZE(args[0]);
    LevelSeek *s = PyObject_New(LevelSeek, &LevelSeekType);
    if (!s) return NULL;
    s->m = 0;
    s->decoded = s->pieces_read = s->pieces_in = 0;
    s->crc32 = Py_NewRef(args[1]);
    s->decompress = Py_NewRef(args[2]);
    if (!(s->f = PyMem_Calloc(m ? (size_t)m : 1, sizeof(SeekFile)))) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *t = PyTuple_GET_ITEM(args[0], i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5 || !PyBytes_Check(PyTuple_GET_ITEM(t, 0))) {
            PyErr_SetString(PyExc_TypeError, "levelseek: a file is (raw: bytes, n, fd, pieces, run)");
            goto fail;
        }
        SeekFile *f = &s->f[i];
        s->m = i + 1;
        f->ix_raw = Py_NewRef(PyTuple_GET_ITEM(t, 0));
        Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        long fd = PyLong_AsLong(PyTuple_GET_ITEM(t, 2));
        f->pieces = PyObject_IsTrue(PyTuple_GET_ITEM(t, 3));
        f->run = PyObject_IsTrue(PyTuple_GET_ITEM(t, 4));
        if (PyErr_Occurred() || f->pieces < 0 || f->run < 0) goto fail;
        if (fd < 0 || fd > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "levelseek: bad file descriptor");
            goto fail;
        }
        f->fd = (int)fd;
        if (block_of(f->ix_raw, n, &f->ix) < 0) goto fail;
        f->nxt = PyBytes_FromStringAndSize(NULL, 0); /* Seeker.nxt starts at b"" */
        if (!f->nxt) goto fail;
        if (marks && PyTuple_GET_ITEM(marks, i) != Py_None) {
            PyObject *mk = PyTuple_GET_ITEM(marks, i);
            if (!PyByteArray_Check(mk) || PyByteArray_GET_SIZE(mk) != n) {
                PyErr_SetString(PyExc_TypeError, "levelseek: a file's mark is a bytearray of a byte per block");
                goto fail;
            }
            f->mark = Py_NewRef(mk);
        }
    }
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

/* ---- point lookups of a table's levels through the block cache (Lookup) --------------------
 *
 * Reader.get_page at its Python path is a call per level file (TableReader.get: a bisect of the
 * index lists, the cache's dict, the block's search) plus Levels.get and Page.decode: about ten
 * Python frames, most of a cached lookup's cost.  A Lookup holds what those read — each file's
 * index block kept in place (TableReader._ix), its fd and its key base in the reader's
 * BlockCache — and answers a key, or a URL's Page, in one call: the same searches, the same
 * cache (a hit moves the block to the LRU end, a miss reads, checks and caches the block as
 * TableReader._read does) and the same result.  Anything not sound gives False, and the
 * Python path names the fault. */

typedef struct {
    PyObject *ix_raw; /* the file's index block, decompressed (TableReader._ix) */
    Block ix;
    int fd, run, pieces; /* pieces: the file's blocks are written in lz4 pieces (PIECES_KINDS) */
    long long cid;       /* the file's key base in the cache (TableReader._cid) */
} LookFile;

#define PAGE_FIELDS 11
#define PAGE_FIXED 59 /* pagecodec.PAGE_FIXED: md5(16) status(u8) 2 x i64, u16, 2 x u32, 2 x f64 */

typedef struct {
    PyObject_HEAD Py_ssize_t m;
    LookFile *f;
    PyObject *cache, *put, *rawblock; /* the BlockCache's OrderedDict and put, RawBlock's class */
    PyObject *move;                   /* the cache's move_to_end, bound (NULL: no cache) */
    PyObject *crc32, *decompress, *page, *loads;
    Py_ssize_t off[PAGE_FIELDS]; /* Page's slots, if it can be filled in place (fill) */
    int fill;
    PyObject *short_files; /* short_levels' files: (raw, n, fd, pieces, run) of each */
    PyObject *link;        /* (records.Link, LINK_FIXED, LINK_OUT, SHORT_BLOCKS) */
} Lookup;

static PyObject *s_move_to_end, *s_raw, *s_n;

static void lk_dealloc(Lookup *s) {
    for (Py_ssize_t i = 0; i < s->m; i++) Py_XDECREF(s->f[i].ix_raw);
    PyMem_Free(s->f);
    Py_XDECREF(s->cache);
    Py_XDECREF(s->move);
    Py_XDECREF(s->put);
    Py_XDECREF(s->rawblock);
    Py_XDECREF(s->crc32);
    Py_XDECREF(s->decompress);
    Py_XDECREF(s->page);
    Py_XDECREF(s->loads);
    Py_XDECREF(s->short_files);
    Py_XDECREF(s->link);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* The value cached under key: 1 and *v (a new reference) if there is one (moved to the LRU end),
 * 0 if none, 2 if the entry is not a (value, size) pair, -1 on error. */
static int cache_get(Lookup *s, PyObject *key, PyObject **v) {
    *v = NULL;
    if (s->cache == Py_None) return 0;
    PyObject *hit = PyDict_GetItemWithError(s->cache, key);
    if (!hit) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2) return 2;
    *v = Py_NewRef(PyTuple_GET_ITEM(hit, 0)); /* the dict may drop it while we call out */
    PyObject *r = PyObject_CallOneArg(s->move, key);
    if (!r) {
        Py_CLEAR(*v);
        return -1;
    }
    Py_DECREF(r);
    return 1;
}

/* A cached RawBlock's raw bytes (*raw, a new reference) and count: 1, or -1 on error. */
static int raw_of(PyObject *rb, PyObject **raw, Py_ssize_t *n) {
    PyObject *nn;
    *raw = PyObject_GetAttr(rb, s_raw);
    nn = *raw ? PyObject_GetAttr(rb, s_n) : NULL;
    if (!nn) {
        Py_XDECREF(*raw);
        return -1;
    }
    *n = PyLong_AsSsize_t(nn);
    Py_DECREF(nn);
    if (*n == -1 && PyErr_Occurred()) {
        Py_DECREF(*raw);
        return -1;
    }
    return 1;
}

/* raw (n records) put in the cache under key as the class RawBlock(raw, n), with
 * TableReader._read's size: 0, or -1 on error. */
static int cache_put(Lookup *s, PyObject *key, PyObject *raw, Py_ssize_t n) {
    if (s->cache == Py_None) return 0;
    PyObject *rb = PyObject_CallFunction(s->rawblock, "On", raw, n), *res = NULL;
    if (rb) res = PyObject_CallFunction(s->put, "OOn", key, rb, PyBytes_GET_SIZE(raw) + 100);
    Py_XDECREF(rb);
    if (!res) return -1;
    Py_DECREF(res);
    return 0;
}

/* Block b of f through the cache: 1 and *raw (a new reference), *n set; 0 if not sound; -1 on
 * error.  A hit is moved to the LRU end; a miss is read (read_block) and put in the cache as
 * the class RawBlock(raw, n) with TableReader._read's size. */
static int cached_block(Lookup *s, LookFile *f, Py_ssize_t b, PyObject **raw, Py_ssize_t *n) {
    PyObject *key = PyLong_FromLongLong(f->cid + (long long)b), *rb;
    if (!key) return -1;
    int r = cache_get(s, key, &rb);
    if (r == 1) {
        r = raw_of(rb, raw, n);
        Py_DECREF(rb);
    } else if (r == 0) {
        r = read_block(&f->ix, f->fd, b, s->crc32, s->decompress, raw, n);
        if (r == 1 && cache_put(s, key, *raw, *n) < 0) {
            Py_DECREF(*raw);
            r = -1;
        }
    } else if (r == 2) {
        r = 0;
    }
    Py_DECREF(key);
    return r;
}

/* ---- a block in lz4 pieces: its header, then the one piece a key can be in -------------------
 *
 * A lookup of a file written in pieces (PagesByURL, LinksByURL: PIECES_KINDS) caches a codec-3
 * block's header (checked by its CRC, its counts against the index entry) and the pieces it
 * decompresses, not the whole block: a miss reads and decompresses a piece (~4 KiB of a 32 KiB
 * block).  Both are cached as bytes (a piece as its raw bytes, whose last u32 is its count), not
 * as objects the garbage collector tracks: a cache of ~60k pieces of RawBlocks in tuples made
 * the collector's full passes a tenth of a lookup's time.  Cache keys: -(cid + off) for the header of the block at file offset off, and
 * -(cid + off + 1 + at) for its piece at body offset at — negative, so never a block's cid + b,
 * and unique (a block's pieces start before its end, where the next block's keys start). */

/* The header of the codec-3 block b of f (at off, len bytes on disk): 1 and *h (a new reference
 * to the header's bytes: m, the piece table, the first keys), from the cache or read from the
 * block's tail and checked (its CRC, the piece table against the body, the total count against
 * the index); 2 if the block is not in pieces or is cached whole (read it as a block); 0 if not
 * sound; -1 on error. */
static int cached_header(Lookup *s, LookFile *f, Py_ssize_t b, uint64_t off, Py_ssize_t len, PyObject **h) {
    PyObject *key = PyLong_FromLongLong(-(f->cid + (long long)off)), *tail = NULL, *bkey = NULL;
    *h = NULL;
    if (!key) return -1;
    int r = cache_get(s, key, h);
    if (r == 1 && !PyBytes_Check(*h)) {
        Py_CLEAR(*h);
        r = 2;
    }
    if (r == 2) { /* not what a lookup puts there: not sound */
        r = 0;
        goto done;
    }
    if (r != 0) goto done;
    /* Not cached: a block another path cached whole (or one not in pieces, cached by an earlier
     * lookup) is read from there, without its tail. */
    if (s->cache != Py_None) {
        if (!(bkey = PyLong_FromLongLong(f->cid + (long long)b))) goto fail;
        int has = PyDict_Contains(s->cache, bkey);
        if (has) {
            r = has < 0 ? -1 : 2;
            goto done;
        }
    }
    Py_ssize_t t = len < TAIL_BYTES ? len : TAIL_BYTES;
    if (!(tail = read_at(f->fd, off + (uint64_t)(len - t), t))) goto fail;
    if (tail == Py_None) {
        r = 0;
        goto done;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(tail);
    if (t < 13 || p[t - 5] != 3) {
        r = 2;
        goto done;
    }
    Py_ssize_t hlen = (Py_ssize_t)rd32(p + t - 13);
    if (hlen + 13 > t && hlen + 13 <= len) { /* a header longer than the tail read: read it all */
        Py_SETREF(tail, read_at(f->fd, off + (uint64_t)(len - hlen - 13), hlen + 13));
        if (!tail) goto fail;
        if (tail == Py_None) {
            r = 0;
            goto done;
        }
        t = hlen + 13;
        p = (const unsigned char *)PyBytes_AS_STRING(tail);
    }
    Pieces ps;
    r = header_of(s->crc32, p, t - 5, len - 5, &ps);
    if (r <= 0) goto done;
    r = ps.total == (Py_ssize_t)rd32(f->ix.raw + key_end(&f->ix, b) + 12);
    pieces_release(&ps);
    if (!r) goto done;
    if (!(*h = PyBytes_FromStringAndSize((const char *)p + t - 13 - hlen, hlen))) goto fail;
    if (s->cache != Py_None) {
        PyObject *res = PyObject_CallFunction(s->put, "OOn", key, *h, hlen + 100);
        if (!res) goto fail;
        Py_DECREF(res);
    }
    r = 1;
done:
    Py_XDECREF(tail);
    Py_XDECREF(bkey);
    Py_DECREF(key);
    return r;
fail:
    Py_CLEAR(*h);
    r = -1;
    goto done;
}

/* Piece pi of a checked header h (hlen bytes) whose first key is <= key and the next one's is
 * greater (piece 0 if none is): the piece's number, *at its offset in the body, *e its table
 * entry (compressed length, count, CRC), *fk and *fkl its first key (pieces 1..m-1). */
static Py_ssize_t piece_for(const unsigned char *h, const char *k, Py_ssize_t kl, Py_ssize_t *at,
                            const unsigned char **e, const unsigned char **fk, Py_ssize_t *fkl) {
    Py_ssize_t m = (Py_ssize_t)rd32(h), q = 4 + 12 * m, pi = 0;
    *fk = NULL;
    *fkl = 0;
    for (Py_ssize_t i = 1; i < m; i++) {
        Py_ssize_t pl = (Py_ssize_t)rd32(h + q), c = pl < kl ? pl : kl;
        int d = c ? memcmp(h + q + 4, k, (size_t)c) : 0;
        if (d > 0 || (d == 0 && pl > kl)) break; /* piece i starts after key */
        pi = i;
        *fk = h + q + 4;
        *fkl = pl;
        q += 4 + pl;
    }
    *at = 0;
    for (Py_ssize_t i = 0; i < pi; i++) *at += (Py_ssize_t)rd32(h + 4 + 12 * i);
    *e = h + 4 + 12 * pi;
    return pi;
}

/* The piece of block b of f that can hold key k, through the cache: 1 and *raw (a new reference),
 * *n set; 2 if the block is not in pieces or is cached whole (cached_block reads it); 0 if not
 * sound; -1 on error.  A piece read is checked by its CRC, its count and offsets and its first
 * key against the header before it is cached. */
static int cached_piece(Lookup *s, LookFile *f, Py_ssize_t b, const char *k, Py_ssize_t kl, PyObject **raw,
                        Py_ssize_t *n) {
    const unsigned char *v = f->ix.raw + key_end(&f->ix, b), *e, *fk;
    uint64_t off = rd64(v);
    Py_ssize_t len = (Py_ssize_t)rd32(v + 8), at, fkl;
    PyObject *h, *key = NULL, *rb, *data = NULL;
    int r = cached_header(s, f, b, off, len, &h);
    if (r != 1) return r;
    Py_ssize_t pi = piece_for((const unsigned char *)PyBytes_AS_STRING(h), k, kl, &at, &e, &fk, &fkl);
    if (!(key = PyLong_FromLongLong(-(f->cid + (long long)off + 1 + at)))) goto fail;
    r = cache_get(s, key, &rb);
    if (r == 1) {
        if (!PyBytes_Check(rb) || PyBytes_GET_SIZE(rb) < 4) { /* not what a lookup puts there */
            Py_DECREF(rb);
            r = 0;
            goto done;
        }
        *raw = rb;
        *n = (Py_ssize_t)rd32((const unsigned char *)PyBytes_AS_STRING(rb) + PyBytes_GET_SIZE(rb) - 4);
        goto done;
    }
    if (r != 0) {
        r = r == 2 ? 0 : -1;
        goto done;
    }
    Py_ssize_t cl = (Py_ssize_t)rd32(e);
    if (!(data = read_at(f->fd, off + (uint64_t)at, cl))) goto fail;
    r = 0;
    if (data == Py_None) goto done;
    Block blk;
    r = piece_decode(s->crc32, s->decompress, data, (const unsigned char *)PyBytes_AS_STRING(data), cl, rd32(e + 8),
                     (Py_ssize_t)rd32(e + 4), raw, &blk);
    if (r == 1 && pi && cmp_key(&blk, 0, (const char *)fk, fkl) != 0) {
        Py_CLEAR(*raw);
        r = 0;
    }
    if (r != 1) goto done;
    *n = blk.n;
    if (s->cache != Py_None) {
        PyObject *res = PyObject_CallFunction(s->put, "OOn", key, *raw, PyBytes_GET_SIZE(*raw) + 100);
        if (!res) {
            Py_CLEAR(*raw);
            goto fail;
        }
        Py_DECREF(res);
    }
done:
    Py_XDECREF(data);
    Py_XDECREF(key);
    Py_DECREF(h);
    return r;
fail:
    r = -1;
    goto done;
}

/* Levels.get (TableReader.get of one file): the value of key (a new reference), Py_None if it
 * has none, Py_False if a block or a delta record is not sound, NULL on error. */
static PyObject *lookup_value(Lookup *s, const char *k, Py_ssize_t kl) {
    for (Py_ssize_t i = 0; i < s->m; i++) {
        LookFile *f = &s->f[i];
        Py_ssize_t b = search(&f->ix, 0, f->ix.n, k, kl, cmp_key, 1) - 1; /* bisect_right(first_keys) - 1 */
        if (b < 0 || cmp_last(&f->ix, b, k, kl) < 0) continue;
        PyObject *raw;
        Py_ssize_t n;
        int r = f->pieces ? cached_piece(s, f, b, k, kl, &raw, &n) : 2;
        if (r == 2) r = cached_block(s, f, b, &raw, &n);
        if (r <= 0) return r == 0 ? Py_NewRef(Py_False) : NULL;
        Block blk;
        if (block_of(raw, n, &blk) < 0) {
            Py_DECREF(raw);
            return NULL;
        }
        Py_ssize_t j = lower_bound(&blk, 0, k, kl);
        if (j == n || cmp_key(&blk, j, k, kl) != 0) {
            Py_DECREF(raw);
            continue;
        }
        Py_ssize_t vs = key_end(&blk, j), ve = rec_end(&blk, j);
        clamp(&blk, &vs, &ve);
        PyObject *v;
        if (!f->run)
            v = slice(&blk, vs, ve);
        else if (ve > vs && blk.raw[vs] == 1) /* PUT + value */
            v = slice(&blk, vs + 1, ve);
        else if (ve > vs && blk.raw[vs] == 0) /* DEL */
            v = Py_NewRef(Py_None);
        else /* neither: Levels.get names the run */
            v = Py_NewRef(Py_False);
        Py_DECREF(raw);
        return v;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(lk_get_doc,
             "get(key) -> value | None | False: Levels.get (TableReader.get for one file) through the "
             "cache; False if a block or a delta record is not sound (the Python path names the fault).");

static PyObject *lk_get(Lookup *s, PyObject *key) {
    if (!PyBytes_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "get(key: bytes)");
        return NULL;
    }
    return lookup_value(s, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
}

static inline int64_t rd64s(const unsigned char *p) { return (int64_t)rd64(p); }

/* Page.decode(url, v): the Page of value v (pagecodec.PAGE, then the meta JSON), a new
 * reference; Py_False if v does not decode; NULL on error. */
static PyObject *make_page(Lookup *s, PyObject *url, PyObject *v) {
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(v);
    Py_ssize_t len = PyBytes_GET_SIZE(v);
    if (len < PAGE_FIXED) Py_RETURN_FALSE;
    PyObject *a[PAGE_FIELDS] = {NULL};
    a[0] = Py_NewRef(url);
    a[1] = PyBytes_FromStringAndSize((const char *)p, 16);
    a[2] = PyLong_FromLong(p[16]);
    a[3] = PyLong_FromLongLong(rd64s(p + 17));
    a[4] = PyLong_FromLongLong(rd64s(p + 25));
    a[5] = PyLong_FromLong((long)(p[33] | (p[34] << 8)));
    a[6] = PyLong_FromUnsignedLong(rd32(p + 35));
    a[7] = PyLong_FromUnsignedLong(rd32(p + 39));
    double sc = PyFloat_Unpack8((const char *)p + 43, 1), ns = PyFloat_Unpack8((const char *)p + 51, 1);
    PyObject *res = NULL;
    if (PyErr_Occurred()) goto done;
    a[8] = PyFloat_FromDouble(sc);
    a[9] = PyFloat_FromDouble(ns);
    if (len > PAGE_FIXED) {
        PyObject *m = PyBytes_FromStringAndSize((const char *)p + PAGE_FIXED, len - PAGE_FIXED);
        a[10] = m ? PyObject_CallOneArg(s->loads, m) : NULL;
        Py_XDECREF(m);
        if (!a[10] && PyErr_ExceptionMatches(PyExc_ValueError)) { /* not JSON: Page.decode names it */
            PyErr_Clear();
            res = Py_NewRef(Py_False);
            goto done;
        }
    } else {
        a[10] = PyDict_New();
    }
    for (int i = 0; i < PAGE_FIELDS; i++)
        if (!a[i]) goto done;
    if (s->fill) { /* what the dataclass's __init__ does: each field set once */
        if ((res = ((PyTypeObject *)s->page)->tp_alloc((PyTypeObject *)s->page, 0)))
            for (int i = 0; i < PAGE_FIELDS; i++) {
                *(PyObject **)((char *)res + s->off[i]) = a[i];
                a[i] = NULL;
            }
    } else {
        res = PyObject_Vectorcall(s->page, a, PAGE_FIELDS, NULL);
    }
done:
    for (int i = 0; i < PAGE_FIELDS; i++) Py_XDECREF(a[i]);
    return res;
}

PyDoc_STRVAR(lk_page_doc,
             "page(url, key) -> Page | None | False: Reader.get_page of a section's PagesByURL: the "
             "value of key (url's UTF-8 bytes) as get gives it, decoded as Page.decode(url, value); "
             "False if a block, a delta record or the value is not sound.");

static PyObject *lk_page(Lookup *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "page(url, key: bytes)");
        return NULL;
    }
    PyObject *v = lookup_value(s, PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]));
    if (!v || v == Py_None || v == Py_False) return v;
    PyObject *p = make_page(s, args[0], v);
    Py_DECREF(v);
    return p;
}

PyDoc_STRVAR(lk_links_doc,
             "links(url, key) -> list[Link] | None | False: Reader.inlinks of a section's LinksByURL: "
             "the records in [key + NUL, key + 1) over the levels (short_levels, at most SHORT_BLOCKS "
             "blocks of each file), made Links as links() makes them; None if they reach more blocks "
             "(the caller streams them); False if a block, a record or a value is not sound.");

static PyObject *lk_links(Lookup *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "links(url, key: bytes)");
        return NULL;
    }
    if (!s->short_files) {
        PyErr_SetString(PyExc_TypeError, "links: a Lookup made without link decoding");
        return NULL;
    }
    Py_ssize_t kl = PyBytes_GET_SIZE(args[1]);
    PyObject *lo = PyBytes_FromStringAndSize(NULL, kl + 1), *hi = lo ? PyBytes_FromStringAndSize(NULL, kl + 1) : NULL;
    PyObject *kv = NULL, *res = NULL;
    if (!hi) goto done;
    memcpy(PyBytes_AS_STRING(lo), PyBytes_AS_STRING(args[1]), (size_t)kl);
    memcpy(PyBytes_AS_STRING(hi), PyBytes_AS_STRING(args[1]), (size_t)kl);
    PyBytes_AS_STRING(lo)[kl] = 0;
    PyBytes_AS_STRING(hi)[kl] = 1;
    PyObject *a[6] = {s->short_files, lo, hi, PyTuple_GET_ITEM(s->link, 3), s->crc32, s->decompress};
    kv = c_short_levels(NULL, a, 6);
    if (!kv || kv == Py_None || kv == Py_False) {
        res = kv;
        kv = NULL;
        goto done;
    }
    PyObject *plen = PyLong_FromSsize_t(kl + 1);
    if (!plen) goto done;
    PyObject *b[7] = {PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1), plen, args[0], PyTuple_GET_ITEM(s->link, 0),
                      PyTuple_GET_ITEM(s->link, 1), PyTuple_GET_ITEM(s->link, 2)};
    res = c_links(NULL, b, 7);
    Py_DECREF(plen);
    if (res == Py_None) { /* a value too short: the Python path names it */
        Py_DECREF(res);
        res = Py_NewRef(Py_False);
    }
done:
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    Py_XDECREF(kv);
    return res;
}

static PyMethodDef lk_methods[] = {
    {"get", (PyCFunction)lk_get, METH_O, lk_get_doc},
    {"page", (PyCFunction)(void (*)(void))lk_page, METH_FASTCALL, lk_page_doc},
    {"links", (PyCFunction)(void (*)(void))lk_links, METH_FASTCALL, lk_links_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LookupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "webdb.tables._blockc.Lookup",
    .tp_basicsize = sizeof(Lookup),
    .tp_dealloc = (destructor)lk_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Point lookups of a table's levels through the block cache (lookup).",
    .tp_methods = lk_methods,
};

/* The offsets of Page's fields when an instance can be made by filling them (as link_slots in
 * codec.c): a slots dataclass of plain object slots, made by object.__new__.  Its __post_init__
 * only fills an empty md5, and a decoded page's md5 is 16 bytes: filling in place is what
 * __init__ would do.  0 if cls is not such a class (it is then called). */
static int page_slots(PyObject *cls, Py_ssize_t off[PAGE_FIELDS]) {
    static const char *names[PAGE_FIELDS] = {"url",          "md5",           "status", "fetch_time",
                                             "next_fetch",   "retries",       "fetch_interval",
                                             "num_outlinks", "score",         "next_score", "meta"};
    if (!PyType_Check(cls)) return 0;
    PyTypeObject *t = (PyTypeObject *)cls;
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || !t->tp_members || t->tp_base != &PyBaseObject_Type ||
        t->tp_new != PyBaseObject_Type.tp_new || t->tp_alloc != PyType_GenericAlloc)
        return 0;
    for (int i = 0; i < PAGE_FIELDS; i++) off[i] = -1;
    for (PyMemberDef *m = t->tp_members; m->name; m++)
        for (int i = 0; i < PAGE_FIELDS; i++)
            if (!strcmp(m->name, names[i])) {
                if (m->type != T_OBJECT_EX || (m->flags & READONLY)) return 0;
                off[i] = m->offset;
            }
    for (int i = 0; i < PAGE_FIELDS; i++)
        if (off[i] < (Py_ssize_t)sizeof(PyObject)) return 0;
    return PyObject_HasAttrString(cls, "__dataclass_fields__");
}

SHARED_PYDOC(lookup_doc,
             "lookup(files, cache, put, rawblock, crc32, decompress, page, loads, link) -> Lookup: "
             "point lookups of a table's levels in one call each: files are (raw, n, fd, pieces, run, "
             "cid) of its files, newest first (the runs, then the base): the index block kept in "
             "place, its entries, the fd, whether its blocks are in lz4 pieces, whether it is a delta "
             "run, the file's key base in the cache; cache and put the reader's BlockCache dict and "
             "put (None: no cache), rawblock the class a cached block is (rawblock(raw, n)), page and "
             "loads records.Page and json.loads, link (records.Link, LINK_FIXED, LINK_OUT, "
             "SHORT_BLOCKS) or None (no links()).  The fds stay the caller's (open while the Lookup "
             "is used).");

PyObject *c_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyTuple_Check(args[0]) || (args[1] != Py_None && !PyDict_Check(args[1])) ||
        (args[8] != Py_None && (!PyTuple_Check(args[8]) || PyTuple_GET_SIZE(args[8]) != 4))) {
        PyErr_SetString(PyExc_TypeError,
                        "lookup(files: tuple, cache: dict | None, put, rawblock, crc32, decompress, page, loads, link)");
        return NULL;
    }
    if (PyType_Ready(&LookupType) < 0) return NULL;
    if (!s_move_to_end && (!(s_move_to_end = PyUnicode_InternFromString("move_to_end")) ||
                           !(s_raw = PyUnicode_InternFromString("raw")) || !(s_n = PyUnicode_InternFromString("n"))))
        return NULL;
    Py_ssize_t m = PyTuple_GET_SIZE(args[0]);
    Lookup *s = PyObject_New(Lookup, &LookupType);
    if (!s) return NULL;
    s->m = 0;
    s->cache = Py_NewRef(args[1]);
    s->move = NULL;
    s->put = Py_NewRef(args[2]);
    s->rawblock = Py_NewRef(args[3]);
    s->crc32 = Py_NewRef(args[4]);
    s->decompress = Py_NewRef(args[5]);
    s->page = Py_NewRef(args[6]);
    s->loads = Py_NewRef(args[7]);
    s->fill = page_slots(args[6], s->off);
    s->link = args[8] == Py_None ? NULL : Py_NewRef(args[8]);
    s->short_files = NULL;
    if (!(s->f = PyMem_Calloc(m ? (size_t)m : 1, sizeof(LookFile)))) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    if (s->cache != Py_None && !(s->move = PyObject_GetAttr(s->cache, s_move_to_end))) goto fail;
    if (s->link && !(s->short_files = PyTuple_New(m))) goto fail;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *t = PyTuple_GET_ITEM(args[0], i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 6 || !PyBytes_Check(PyTuple_GET_ITEM(t, 0))) {
            PyErr_SetString(PyExc_TypeError, "lookup: a file is (raw: bytes, n, fd, pieces, run, cid)");
            goto fail;
        }
        LookFile *f = &s->f[i];
        s->m = i + 1;
        f->ix_raw = Py_NewRef(PyTuple_GET_ITEM(t, 0));
        Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        long fd = PyLong_AsLong(PyTuple_GET_ITEM(t, 2));
        f->pieces = PyObject_IsTrue(PyTuple_GET_ITEM(t, 3));
        f->run = PyObject_IsTrue(PyTuple_GET_ITEM(t, 4));
        f->cid = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 5));
        if (PyErr_Occurred() || f->run < 0 || f->pieces < 0) goto fail;
        if (s->short_files) {
            PyObject *sf = PyTuple_GetSlice(t, 0, 5);
            if (!sf) goto fail;
            PyTuple_SET_ITEM(s->short_files, i, sf);
        }
        if (fd < 0 || fd > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "lookup: bad file descriptor");
            goto fail;
        }
        f->fd = (int)fd;
        if (block_of(f->ix_raw, n, &f->ix) < 0) goto fail;
    }
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}
