/* ---- lz4 pieces (codec 3, docs/format.md §1.1): a block's records compressed in pieces ------
 *
 * Body: the m pieces back to back (each an lz4 block with its u32 size prefix whose raw bytes
 * are a block (§1.1) of the piece's records), then the header: m (u32), m x (compressed length,
 * record count, CRC-32 of the compressed piece) (u32 each), the first key of pieces 1..m-1
 * (length u32, bytes); then the header's length and its CRC-32 (u32 each).  The header is at
 * the end so that a lookup reads the block's tail (trailer, header), then only the pieces its
 * range reaches, each checked by its own CRC; a whole-block read checks the block's CRC, the
 * header's and every piece's, and gets the same raw bytes as an lz4 block of those records. */

#include "blockc.h"

void pieces_release(Pieces *ps) {
    PyMem_Free(ps->key);
    PyMem_Free(ps->klen);
    PyMem_Free(ps->at);
    ps->key = NULL;
    ps->klen = NULL;
    ps->at = NULL;
}

/* CRC-32 (zlib.crc32: its C function if use_crc32 registered it, else called) of p[0:len] into *out: 0,
 * or -1 on error. */
static int crc_of(PyObject *crc32, const unsigned char *p, Py_ssize_t len, uint32_t *out) {
    if (crc_fast(crc32, p, len, out)) return 0;
    PyObject *view = PyMemoryView_FromMemory((char *)p, len, PyBUF_READ), *c;
    if (!view) return -1;
    c = PyObject_CallOneArg(crc32, view);
    Py_DECREF(view);
    if (!c) return -1;
    unsigned long got = PyLong_AsUnsignedLong(c);
    Py_DECREF(c);
    if (got == (unsigned long)-1 && PyErr_Occurred()) return -1;
    *out = (uint32_t)got;
    return 0;
}

/* Parse the header h[0:hlen] (its CRC already checked) of a body whose pieces take the
 * body's first `pieces` bytes: 1 if sound, 0 if not (declined), -1 on error. */
static int pieces_of(const unsigned char *h, Py_ssize_t hlen, Py_ssize_t pieces, Pieces *ps) {
    ps->key = NULL;
    ps->klen = NULL;
    ps->at = NULL;
    if (hlen < 4) return 0;
    Py_ssize_t m = (Py_ssize_t)rd32(h);
    if (m < 1 || m > (hlen - 4) / 12) return 0;
    ps->m = m;
    ps->tab = h + 4;
    ps->key = PyMem_Malloc(sizeof(*ps->key) * (size_t)m);
    ps->klen = PyMem_Malloc(sizeof(*ps->klen) * (size_t)m);
    ps->at = PyMem_Malloc(sizeof(*ps->at) * (size_t)(m + 1));
    if (!ps->key || !ps->klen || !ps->at) {
        pieces_release(ps);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t q = 4 + 12 * m;
    ps->key[0] = NULL;
    ps->klen[0] = 0;
    for (Py_ssize_t i = 1; i < m; i++) {
        if (q + 4 > hlen) goto bad;
        Py_ssize_t kl = (Py_ssize_t)rd32(h + q);
        if (kl > hlen - q - 4) goto bad;
        ps->key[i] = h + q + 4;
        ps->klen[i] = kl;
        q += 4 + kl;
    }
    if (q != hlen) goto bad;
    ps->total = 0;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t cl = (Py_ssize_t)rd32(ps->tab + 12 * i);
        ps->at[i] = at;
        if (cl < 4 || cl > pieces - at) goto bad;
        at += cl;
        ps->total += (Py_ssize_t)rd32(ps->tab + 12 * i + 4);
    }
    ps->at[m] = at;
    if (at != pieces) goto bad;
    return 1;
bad:
    pieces_release(ps);
    return 0;
}

/* The header of body p[0:end] (the body's tail: its last 8 bytes are the header's length and
 * CRC), checked and parsed; `pieces` is where the header starts in the whole body.  Returns as
 * pieces_of. */
int header_of(PyObject *crc32, const unsigned char *p, Py_ssize_t end, Py_ssize_t body_len, Pieces *ps) {
    ps->key = NULL;
    ps->klen = NULL;
    ps->at = NULL;
    if (end < 8) return 0;
    Py_ssize_t hlen = (Py_ssize_t)rd32(p + end - 8);
    uint32_t c;
    if (hlen > end - 8) return 0;
    if (crc_of(crc32, p + end - 8 - hlen, hlen, &c) < 0) return -1;
    if (c != rd32(p + end - 4)) return 0;
    return pieces_of(p + end - 8 - hlen, hlen, body_len - 8 - hlen, ps);
}

/* The checksum of block data (its body p[0:end] and codec byte): 1 sound, 0 not, -1 error. */
static int crc_ok(PyObject *crc32, const unsigned char *p, Py_ssize_t end) {
    uint32_t c;
    if (crc_of(crc32, p, end, &c) < 0) return -1;
    return crc32_byte(c, p[end]) == rd32(p + end + 1);
}

/* A piece (its cl compressed bytes at s — the whole of the bytes object obj if not NULL, whose
 * checksum then needs no view — checked against crc) decompressed into *raw (a new reference)
 * as a Block: 1 if sound (count records, offsets inside it), 0 if not, -1 on error. */
int piece_decode(PyObject *crc32, PyObject *decompress, PyObject *obj, const unsigned char *s, Py_ssize_t cl,
                 uint32_t crc, Py_ssize_t count, PyObject **raw, Block *b) {
    uint32_t c;
    *raw = NULL;
    if (obj && !crc_fast(crc32, s, cl, &c)) {
        PyObject *got = PyObject_CallOneArg(crc32, obj);
        if (!got) return -1;
        unsigned long v = PyLong_AsUnsignedLong(got);
        Py_DECREF(got);
        if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
        c = (uint32_t)v;
    } else if (!obj && crc_of(crc32, s, cl, &c) < 0) {
        return -1;
    }
    if (c != crc || rd32(s) > MAX_BLOCK_BYTES) return 0;
    *raw = lz4_bytes(decompress, s, cl);
    if (!*raw) return damaged_error() ? 0 : -1;
    if (!PyBytes_Check(*raw)) goto bad;
    const unsigned char *r = (const unsigned char *)PyBytes_AS_STRING(*raw);
    Py_ssize_t rl = PyBytes_GET_SIZE(*raw), n = rl < 4 ? 0 : (Py_ssize_t)rd32(r + rl - 4);
    if (rl < 4 || n < 1 || 8 * n > rl - 4 || (Py_ssize_t)rd32(r + rl - 8) != rl - 4 - 8 * n || n != count) goto bad;
    b->raw = r;
    b->len = rl;
    b->n = n;
    b->kends = r + rl - 4 - 8 * n;
    b->rends = b->kends + 4 * n;
    return 1;
bad:
    Py_CLEAR(*raw);
    return 0;
}

/* Piece i of ps (its compressed bytes at s) as piece_decode gives it. */
static int piece_block(PyObject *crc32, PyObject *decompress, const unsigned char *s, const Pieces *ps, Py_ssize_t i,
                       PyObject **raw, Block *b) {
    return piece_decode(crc32, decompress, NULL, s, ps->at[i + 1] - ps->at[i], rd32(ps->tab + 12 * i + 8),
                        (Py_ssize_t)rd32(ps->tab + 12 * i + 4), raw, b);
}

/* Check codec 3, the block's CRC (if whole) and the header of block data (args: data, crc32). */
static int pieces_data(PyObject *const *args, int whole, const unsigned char **p, Py_ssize_t *end, Pieces *ps) {
    PyObject *data = args[0];
    if (!PyBytes_Check(data)) return 0;
    *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t len = PyBytes_GET_SIZE(data);
    if (len < 5 || (*p)[len - 5] != 3) return 0;
    *end = len - 5;
    if (whole) {
        int r = crc_ok(args[1], *p, *end);
        if (r <= 0) return r;
    }
    return header_of(args[1], *p, *end, *end, ps);
}

SHARED_PYDOC(unpack_pieces_doc,
             "unpack_pieces(data, crc32, decompress) -> (raw, n): an lz4-pieces block (codec 3) whose "
             "checksums (the block's, the header's, every piece's), piece table, pieces and first keys "
             "are sound, as the raw bytes of one block of its records (what unpack gives for an lz4 "
             "block); None for anything else.");

PyObject *c_unpack_pieces(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const unsigned char *p;
    Py_ssize_t end;
    Pieces ps;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "unpack_pieces(data, crc32, decompress) takes 3 arguments");
        return NULL;
    }
    int r = pieces_data(args, 1, &p, &end, &ps);
    if (r <= 0) {
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject **raws = PyMem_Calloc((size_t)ps.m, sizeof(PyObject *)), *out = NULL, *res = NULL;
    Block *bs = PyMem_Malloc(sizeof(Block) * (size_t)ps.m);
    Py_ssize_t rec = 0, n = 0;
    int sound = 1;
    if (!raws || !bs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < ps.m && sound; i++) {
        int k = piece_block(args[1], args[2], p + ps.at[i], &ps, i, &raws[i], &bs[i]);
        if (k < 0) goto done;
        sound = k && (i == 0 || cmp_key(&bs[i], 0, (const char *)ps.key[i], ps.klen[i]) == 0);
        if (sound) {
            rec += rec_end(&bs[i], bs[i].n - 1);
            n += bs[i].n;
        }
    }
    if (!sound || n != ps.total || rec + 8 * n + 4 > (Py_ssize_t)MAX_BLOCK_BYTES) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    if (!(out = PyBytes_FromStringAndSize(NULL, rec + 8 * n + 4))) goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out), *ko = o + rec, *ro = ko + 4 * n;
    Py_ssize_t base = 0;
    for (Py_ssize_t i = 0; i < ps.m; i++) {
        Py_ssize_t len = rec_end(&bs[i], bs[i].n - 1);
        memcpy(o + base, bs[i].raw, (size_t)len);
        for (Py_ssize_t j = 0; j < bs[i].n; j++) {
            wr32(ko, (uint32_t)(base + key_end(&bs[i], j)));
            wr32(ro, (uint32_t)(base + rec_end(&bs[i], j)));
            ko += 4;
            ro += 4;
        }
        base += len;
    }
    wr32(o + rec + 8 * n, (uint32_t)n);
    res = Py_BuildValue("(Nn)", out, n);
done:
    if (raws)
        for (Py_ssize_t i = 0; i < ps.m; i++) Py_XDECREF(raws[i]);
    PyMem_Free(raws);
    PyMem_Free(bs);
    pieces_release(&ps);
    return res;
}

/* key[0:kl] compared with the piece key of piece i (i >= 1), as bytes compare. */
static inline int cmp_piece(const Pieces *ps, Py_ssize_t i, const char *key, Py_ssize_t kl) {
    Py_ssize_t pl = ps->klen[i], m = pl < kl ? pl : kl;
    int c = m ? memcmp(ps->key[i], key, (size_t)m) : 0;
    if (c) return c;
    return pl < kl ? -1 : (pl > kl ? 1 : 0);
}

/* The pieces p0..p1 that can hold keys in [start, stop): p0 the last whose first key is <=
 * start, p1 the last whose first key is < stop. */
void pieces_span(const Pieces *ps, PyObject *start, PyObject *stop, Py_ssize_t *p0, Py_ssize_t *p1) {
    *p0 = *p1 = 0;
    for (Py_ssize_t i = 1; i < ps->m; i++) {
        if (cmp_piece(ps, i, PyBytes_AS_STRING(start), PyBytes_GET_SIZE(start)) <= 0) *p0 = i;
        if (cmp_piece(ps, i, PyBytes_AS_STRING(stop), PyBytes_GET_SIZE(stop)) < 0) *p1 = i;
    }
}

/* The records in [start, stop) of pieces p0..p1, whose compressed bytes start at s (piece p0's
 * first byte), as (keys, values, total count); None if a piece is not sound. */
PyObject *pieces_range(PyObject *crc32, PyObject *decompress, const unsigned char *s, const Pieces *ps,
                       Py_ssize_t p0, Py_ssize_t p1, PyObject *start, PyObject *stop) {
    const char *sk = PyBytes_AS_STRING(start), *ek = PyBytes_AS_STRING(stop);
    Py_ssize_t sl = PyBytes_GET_SIZE(start), el = PyBytes_GET_SIZE(stop);
    PyObject *keys = PyList_New(0), *vals = PyList_New(0), *res = NULL;
    if (!keys || !vals) goto done;
    for (Py_ssize_t i = p0; i <= p1; i++) {
        PyObject *raw = NULL, *k = NULL, *v = NULL;
        Block b;
        int r = piece_block(crc32, decompress, s + ps->at[i] - ps->at[p0], ps, i, &raw, &b);
        if (r <= 0) {
            if (r == 0) {
                res = Py_None;
                Py_INCREF(res);
            }
            goto done;
        }
        Py_ssize_t lo = i == p0 ? lower_bound(&b, 0, sk, sl) : 0;
        Py_ssize_t hi = i == p1 ? lower_bound(&b, 0, ek, el) : b.n; /* from 0: as unpack_range */
        int e = split_into(&b, lo, hi, &k, &v);
        Py_DECREF(raw);
        if (e == 0 && i == p0) {
            Py_SETREF(keys, k);
            Py_SETREF(vals, v);
            continue;
        }
        e = e || PyList_SetSlice(keys, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, k) < 0 ||
            PyList_SetSlice(vals, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (e) goto done;
    }
    res = Py_BuildValue("(OOn)", keys, vals, ps->total);
done:
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    return res;
}

SHARED_PYDOC(unpack_range_pieces_doc,
             "unpack_range_pieces(data, crc32, decompress, start, stop) -> (keys, values, n): "
             "unpack_range of an lz4-pieces block (codec 3), checking the header's CRC and "
             "decompressing only the pieces that can hold keys in [start, stop), each checked by its "
             "CRC; None where one of them is not sound.");

PyObject *c_unpack_range_pieces(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const unsigned char *p;
    Py_ssize_t end, p0, p1;
    Pieces ps;
    if (nargs != 5 || !PyBytes_Check(args[3]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "unpack_range_pieces(data, crc32, decompress, start: bytes, stop: bytes)");
        return NULL;
    }
    int r = pieces_data(args, 0, &p, &end, &ps);
    if (r <= 0) {
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    pieces_span(&ps, args[3], args[4], &p0, &p1);
    PyObject *res = pieces_range(args[1], args[2], p + ps.at[p0], &ps, p0, p1, args[3], args[4]);
    pieces_release(&ps);
    return res;
}

SHARED_PYDOC(seal_pieces_doc,
             "seal_pieces(raw, compress, piece_bytes, crc32) -> body: the lz4-pieces body (codec 3) of "
             "the raw block raw: m = len(raw) // piece_bytes pieces, cut at the first record boundary "
             "where a piece's records and offsets reach ceil(len(raw) / m), each compressed by compress "
             "(lz4.block.compress), then the header; None if m < 2 or that gives one piece (then: "
             "plain lz4).");

PyObject *c_seal_pieces(PyObject *self, PyObject *args) {
    PyObject *raw, *compress, *crc32;
    Py_ssize_t pb;
    Block b;
    if (!PyArg_ParseTuple(args, "SOnO", &raw, &compress, &pb, &crc32)) return NULL;
    Py_ssize_t len = PyBytes_GET_SIZE(raw);
    if (len < 4) Py_RETURN_NONE;
    if (block_of(raw, (Py_ssize_t)rd32((const unsigned char *)PyBytes_AS_STRING(raw) + len - 4), &b) < 0) return NULL;
    /* As many pieces as piece_bytes fits in the block (at least two), of equal shares. */
    if (b.n < 2 || pb < 1 || len / pb < 2) Py_RETURN_NONE;
    pb = (len + len / pb - 1) / (len / pb);
    /* The cuts: piece i holds records cut[i]..cut[i+1]-1. */
    Py_ssize_t *cut = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(b.n + 1)), m = 0, acc = 0;
    if (!cut) return PyErr_NoMemory();
    cut[m++] = 0;
    for (Py_ssize_t j = 0; j < b.n - 1; j++) {
        acc += rec_end(&b, j) - rec_start(&b, j) + 8;
        if (acc >= pb) {
            cut[m++] = j + 1;
            acc = 0;
        }
    }
    cut[m] = b.n;
    PyObject *parts = NULL, *res = NULL;
    if (m < 2) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    if (!(parts = PyList_New(m))) goto done;
    Py_ssize_t head = 4 + 12 * m, body = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t s = cut[i], e = cut[i + 1], k = e - s, rs = rec_start(&b, s), re = rec_end(&b, e - 1);
        if (i) head += 4 + key_end(&b, s) - rs;
        PyObject *pr = PyBytes_FromStringAndSize(NULL, re - rs + 8 * k + 4), *c;
        if (!pr) goto done;
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(pr);
        memcpy(o, b.raw + rs, (size_t)(re - rs));
        for (Py_ssize_t j = 0; j < k; j++) {
            wr32(o + re - rs + 4 * j, (uint32_t)(key_end(&b, s + j) - rs));
            wr32(o + re - rs + 4 * (k + j), (uint32_t)(rec_end(&b, s + j) - rs));
        }
        wr32(o + re - rs + 8 * k, (uint32_t)k);
        c = PyObject_CallOneArg(compress, pr);
        Py_DECREF(pr);
        if (!c) goto done;
        if (!PyBytes_Check(c)) {
            Py_DECREF(c);
            PyErr_SetString(PyExc_TypeError, "compress must return bytes");
            goto done;
        }
        body += PyBytes_GET_SIZE(c);
        PyList_SET_ITEM(parts, i, c);
    }
    if (!(res = PyBytes_FromStringAndSize(NULL, body + head + 8))) goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(res), *h = o + body, *q = h + 4 + 12 * m;
    wr32(h, (uint32_t)m);
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *c = PyList_GET_ITEM(parts, i);
        uint32_t crc;
        memcpy(o, PyBytes_AS_STRING(c), (size_t)PyBytes_GET_SIZE(c));
        if (crc_of(crc32, o, PyBytes_GET_SIZE(c), &crc) < 0) {
            Py_CLEAR(res);
            goto done;
        }
        o += PyBytes_GET_SIZE(c);
        wr32(h + 4 + 12 * i, (uint32_t)PyBytes_GET_SIZE(c));
        wr32(h + 8 + 12 * i, (uint32_t)(cut[i + 1] - cut[i]));
        wr32(h + 12 + 12 * i, crc);
        if (i) {
            Py_ssize_t rs = rec_start(&b, cut[i]), kl = key_end(&b, cut[i]) - rs;
            wr32(q, (uint32_t)kl);
            memcpy(q + 4, b.raw + rs, (size_t)kl);
            q += 4 + kl;
        }
    }
    uint32_t hc;
    if (crc_of(crc32, h, head, &hc) < 0) {
        Py_CLEAR(res);
        goto done;
    }
    wr32(h + head, (uint32_t)head);
    wr32(h + head + 4, hc);
done:
    Py_XDECREF(parts);
    PyMem_Free(cut);
    return res;
}
