/* ---- gather_blocks: the bulk load's blocks from columns (webdb/tools/bulkarrow.py) ---------------- */

#include "blockc.h"

/* One field of every record: row r's bytes are data[offs[r]:offs[r+1]] (offs: int64) or, without
 * offs, data[r*width:(r+1)*width]; r = idx[i] for record i (idx: int64) or i without idx. */
typedef struct {
    Py_buffer data, offs, idx;
    int has_offs, has_idx;
    Py_ssize_t width, rows;
} Part;

static void parts_release(Part *p, Py_ssize_t m) {
    for (Py_ssize_t j = 0; j < m; j++) {
        PyBuffer_Release(&p[j].data);
        if (p[j].has_offs) PyBuffer_Release(&p[j].offs);
        if (p[j].has_idx) PyBuffer_Release(&p[j].idx);
    }
}

/* Record i's bytes of part p, or -1 if its row or offsets fall outside the part's buffers. */
static inline Py_ssize_t part_span(const Part *p, Py_ssize_t i, const char **src) {
    Py_ssize_t r = p->has_idx ? (Py_ssize_t)((const int64_t *)p->idx.buf)[i] : i;
    if (r < 0 || r >= p->rows) return -1;
    if (!p->has_offs) {
        *src = (const char *)p->data.buf + r * p->width;
        return p->width;
    }
    const int64_t *o = (const int64_t *)p->offs.buf;
    if (o[r] < 0 || o[r] > o[r + 1] || o[r + 1] > p->data.len) return -1;
    *src = (const char *)p->data.buf + o[r];
    return (Py_ssize_t)(o[r + 1] - o[r]);
}

SHARED_PYDOC(gather_blocks_doc,
             "gather_blocks(parts, klen, ends) -> list of uncompressed blocks (what encode_block "
             "seals).  Record i is the concatenation of its bytes in each part (data, offs, width, "
             "idx): data[offs[r]:offs[r+1]], or data[r*width:(r+1)*width] when offs is None, with "
             "r = idx[i] (or i when idx is None); its key is its first klen[i] bytes.  Block b holds "
             "records ends[b-1]..ends[b]-1 (from 0).  offs, idx, klen and ends are int64 buffers.  "
             "The copies run without the GIL.");

PyObject *c_gather_blocks(PyObject *self, PyObject *args) {
    PyObject *po, *parts = NULL, *out = NULL, **blocks = NULL;
    Py_buffer kb, eb;
    Part *pt = NULL;
    Py_ssize_t m = 0, got = 0, nb = 0;
    int64_t *sizes = NULL;
    if (!PyArg_ParseTuple(args, "Oy*y*:gather_blocks", &po, &kb, &eb)) return NULL;
    if (!(parts = PySequence_Tuple(po))) goto done;
    m = PyTuple_GET_SIZE(parts);
    nb = eb.len / 8;
    const int64_t *ends = (const int64_t *)eb.buf, *klen = (const int64_t *)kb.buf;
    Py_ssize_t n = nb ? (Py_ssize_t)ends[nb - 1] : 0;
    if (n < 0 || n > kb.len / 8) {
        PyErr_SetString(PyExc_ValueError, "ends name records that klen does not cover");
        goto done;
    }
    for (Py_ssize_t b = 0; b < nb; b++)
        if (ends[b] < (b ? ends[b - 1] : 0)) {
            PyErr_SetString(PyExc_ValueError, "ends must not decrease");
            goto done;
        }
    if (!(pt = PyMem_Calloc(m ? m : 1, sizeof(Part))) || !(sizes = PyMem_Calloc(nb ? nb : 1, sizeof(int64_t))) ||
        !(blocks = PyMem_Calloc(nb ? nb : 1, sizeof(PyObject *)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < m; got++) {
        PyObject *data, *offs, *idx;
        Part *p = &pt[got];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(parts, got), "OOnO:part", &data, &offs, &p->width, &idx)) goto done;
        if (PyObject_GetBuffer(data, &p->data, PyBUF_SIMPLE) < 0) goto done;
        if (offs != Py_None) {
            if (PyObject_GetBuffer(offs, &p->offs, PyBUF_SIMPLE) < 0) {
                PyBuffer_Release(&p->data);
                goto done;
            }
            p->has_offs = 1;
            p->rows = p->offs.len / 8 - 1;
        } else {
            p->rows = p->width > 0 ? p->data.len / p->width : (p->width == 0 ? PY_SSIZE_T_MAX : -1);
        }
        if (idx != Py_None) {
            if (PyObject_GetBuffer(idx, &p->idx, PyBUF_SIMPLE) < 0) {
                PyBuffer_Release(&p->data);
                if (p->has_offs) PyBuffer_Release(&p->offs);
                goto done;
            }
            p->has_idx = 1;
        }
        if (p->rows < 0 || (p->has_idx && p->idx.len / 8 < n)) {
            got++;
            PyErr_SetString(PyExc_ValueError, "a part has a negative width or fewer indexes than records");
            goto done;
        }
    }
    /* Pass 1: every block's size, every row checked. */
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS;
    Py_ssize_t i = 0;
    for (Py_ssize_t b = 0; b < nb && !bad; b++) {
        int64_t size = 0;
        for (; i < ends[b]; i++) {
            int64_t rec = 0;
            const char *src = NULL;
            for (Py_ssize_t j = 0; j < m; j++) {
                Py_ssize_t l = part_span(&pt[j], i, &src);
                if (l < 0) {
                    bad = 1;
                    break;
                }
                rec += l;
            }
            if (bad || klen[i] < 0 || klen[i] > rec) {
                bad = 1;
                break;
            }
            size += rec;
        }
        if (size > UINT32_MAX) bad = 2;
        sizes[b] = size;
    }
    Py_END_ALLOW_THREADS;
    if (bad) {
        if (bad == 2)
            too_big();
        else
            PyErr_SetString(PyExc_ValueError, "a row, offset or key length outside its part");
        goto done;
    }
    for (Py_ssize_t b = 0; b < nb; b++) {
        Py_ssize_t cnt = (Py_ssize_t)(ends[b] - (b ? ends[b - 1] : 0));
        if (!(blocks[b] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizes[b] + 8 * cnt + 4))) goto done;
    }
    /* Pass 2: the copies (the rows were checked in pass 1). */
    Py_BEGIN_ALLOW_THREADS;
    Py_ssize_t i2 = 0;
    for (Py_ssize_t b = 0; b < nb; b++) {
        Py_ssize_t s = i2, cnt = (Py_ssize_t)(ends[b] - s);
        unsigned char *base = (unsigned char *)PyBytes_AS_STRING(blocks[b]), *p = base;
        unsigned char *ko = base + sizes[b], *ro = ko + 4 * cnt;
        for (; i2 < ends[b]; i2++) {
            unsigned char *start = p;
            const char *src = NULL;
            for (Py_ssize_t j = 0; j < m; j++) {
                Py_ssize_t l = part_span(&pt[j], i2, &src);
                memcpy(p, src, (size_t)l);
                p += l;
            }
            wr32(ko + 4 * (i2 - s), (uint32_t)(start - base + klen[i2]));
            wr32(ro + 4 * (i2 - s), (uint32_t)(p - base));
        }
        wr32(ro + 4 * cnt, (uint32_t)cnt);
    }
    Py_END_ALLOW_THREADS;
    if (!(out = PyList_New(nb))) goto done;
    for (Py_ssize_t b = 0; b < nb; b++) {
        PyList_SET_ITEM(out, b, blocks[b]);
        blocks[b] = NULL;
    }
done:
    if (blocks)
        for (Py_ssize_t b = 0; b < nb; b++) Py_XDECREF(blocks[b]);
    PyMem_Free(blocks);
    PyMem_Free(sizes);
    if (pt) parts_release(pt, got);
    PyMem_Free(pt);
    Py_XDECREF(parts);
    PyBuffer_Release(&kb);
    PyBuffer_Release(&eb);
    return out;
}

/* ---- hash_values: the bulk load's url hashes (webdb/tools/bulkarrow.py _url_hashes) --------------- */

SHARED_PYDOC(hash_values_doc,
             "hash_values(data, offs) -> bytes of n uint64 (native order): a 64-bit hash of each "
             "value data[offs[i]:offs[i+1]] (offs: n+1 int64), the one bulkarrow._url_hashes "
             "computes with numpy.  Runs without the GIL.");

PyObject *c_hash_values(PyObject *self, PyObject *args) {
    Py_buffer db, ob;
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "y*y*:hash_values", &db, &ob)) return NULL;
    Py_ssize_t n = ob.len / 8 - 1;
    const int64_t *o = (const int64_t *)ob.buf;
    const unsigned char *d = (const unsigned char *)db.buf;
    if (n < 0) n = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (o[i] < 0 || o[i] > o[i + 1] || o[i + 1] > db.len) {
            PyErr_SetString(PyExc_ValueError, "an offset outside the data");
            goto done;
        }
    if (!(out = PyBytes_FromStringAndSize(NULL, 8 * n))) goto done;
    uint64_t *h = (uint64_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS;
    const uint64_t mul = 0x9E3779B97F4A7C15ULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *p = d + o[i];
        int64_t len = o[i + 1] - o[i];
        uint64_t x = (uint64_t)len * mul;
        for (int64_t k = 0; k < len; k += 8) {
            uint64_t w = 0;
            if (len - k >= 8) {
                memcpy(&w, p + k, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
                w = __builtin_bswap64(w);
#endif
            } else {
                for (int64_t b = 0; b < len - k; b++) w |= (uint64_t)p[k + b] << (8 * b);
            }
            x = (x ^ w) * mul;
        }
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ULL;
        x ^= x >> 29;
        h[i] = x;
    }
    Py_END_ALLOW_THREADS;
done:
    PyBuffer_Release(&db);
    PyBuffer_Release(&ob);
    return out;
}

/* ---- unhex, has_control: the bulk load's TSV checks (webdb/tools/bulkarrow.py) ------------------ */

SHARED_PYDOC(unhex_doc,
             "unhex(data) -> the bytes the hex digits of data (an even number of 0-9a-fA-F) stand "
             "for, or None for any other byte or an odd length.  Runs without the GIL.");

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

PyObject *c_unhex(PyObject *self, PyObject *args) {
    Py_buffer db;
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "y*:unhex", &db)) return NULL;
    if (db.len & 1) {
        PyBuffer_Release(&db);
        Py_RETURN_NONE;
    }
    if (!(out = PyBytes_FromStringAndSize(NULL, db.len / 2))) goto done;
    const unsigned char *d = (const unsigned char *)db.buf;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < db.len / 2; i++) {
        int hi = hexval(d[2 * i]), lo = hexval(d[2 * i + 1]);
        bad |= (hi | lo) < 0;
        o[i] = (unsigned char)((hi << 4) | (lo & 15));
    }
    Py_END_ALLOW_THREADS;
    if (bad) {
        Py_CLEAR(out);
        out = Py_NewRef(Py_None);
    }
done:
    PyBuffer_Release(&db);
    return out;
}

SHARED_PYDOC(has_control_doc,
             "has_control(data) -> True if data holds a byte <= 0x20 (a control or a space) or 0x7f.  "
             "Runs without the GIL.");

PyObject *c_has_control(PyObject *self, PyObject *args) {
    Py_buffer db;
    if (!PyArg_ParseTuple(args, "y*:has_control", &db)) return NULL;
    const unsigned char *d = (const unsigned char *)db.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < db.len; i++) bad |= (d[i] <= 0x20) | (d[i] == 0x7f);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&db);
    return PyBool_FromLong(bad);
}
