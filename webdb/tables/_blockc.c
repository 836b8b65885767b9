/* The block codec's inner loops in C (docs/format.md §1.1, docs/design.md "Compiled block codec").
 *
 * A decompressed block ("raw") is its records (key, value, key, value, ...) back to back, then n
 * key-end offsets, n record-end offsets (u32 little-endian, from the start of the block) and the
 * count n (u32 LE).  These functions read the offsets in place from the raw bytes: nothing is
 * decoded but what is asked for.  Each one is the exact counterpart of a pure-Python function of
 * webdb/tables/block.py (the fallback, and the reference the tests compare these to), including
 * its behaviour on damaged offsets: every slice is clamped to the block as a Python slice is, so a
 * crafted offset can give wrong bytes (as in Python) but never a read outside the block.
 *
 * Python's zlib and the lz4 package do the checksums and the decompression; this module only
 * knows the layout.  Built by setup.py as an optional extension: without a compiler the
 * package runs the Python code.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY (links: a slots class filled in place) */
#include <stdint.h>
#include <string.h>
#include <unistd.h> /* pread (short_file) */

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

/* Parse (raw: bytes, n: int) into b; n must fit the block (unpack_block checked it already, this
 * guards a caller that did not). */
static int block_of(PyObject *raw, Py_ssize_t n, Block *b) {
    if (!PyBytes_Check(raw)) {
        PyErr_SetString(PyExc_TypeError, "block must be bytes");
        return -1;
    }
    b->raw = (const unsigned char *)PyBytes_AS_STRING(raw);
    b->len = PyBytes_GET_SIZE(raw);
    if (n < 0 || b->len < 4 || n > (b->len - 4) / 8) {
        PyErr_Format(PyExc_ValueError, "record count %zd does not fit a block of %zd bytes", n, b->len);
        return -1;
    }
    b->n = n;
    b->kends = b->raw + b->len - 4 - 8 * n;
    b->rends = b->kends + 4 * n;
    return 0;
}

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

/* Index of the first record in lo..n-1 whose key is >= key. */
static Py_ssize_t lower_bound(const Block *b, Py_ssize_t lo, const char *key, Py_ssize_t klen) {
    Py_ssize_t hi = b->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        if (cmp_key(b, mid, key, klen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static PyObject *slice(const Block *b, Py_ssize_t s, Py_ssize_t e) {
    clamp(b, &s, &e);
    return PyBytes_FromStringAndSize((const char *)b->raw + s, e - s);
}

PyDoc_STRVAR(find_doc, "find(raw, n, key) -> index of the first record whose key is >= key (RawBlock.find).");

static PyObject *c_find(PyObject *self, PyObject *args) {
    PyObject *raw, *res;
    Py_ssize_t n;
    Py_buffer key;
    Block b;
    if (!PyArg_ParseTuple(args, "Sny*:find", &raw, &n, &key)) return NULL;
    if (block_of(raw, n, &b) < 0) {
        PyBuffer_Release(&key);
        return NULL;
    }
    res = PyLong_FromSsize_t(lower_bound(&b, 0, key.buf, key.len));
    PyBuffer_Release(&key);
    return res;
}

PyDoc_STRVAR(get_doc, "get(raw, n, key) -> the value of key, or None (RawBlock.get).");

static PyObject *c_get(PyObject *self, PyObject *args) {
    PyObject *raw, *res;
    Py_ssize_t n;
    Py_buffer key;
    Block b;
    if (!PyArg_ParseTuple(args, "Sny*:get", &raw, &n, &key)) return NULL;
    if (block_of(raw, n, &b) < 0) {
        PyBuffer_Release(&key);
        return NULL;
    }
    Py_ssize_t j = lower_bound(&b, 0, key.buf, key.len);
    if (j < n && cmp_key(&b, j, key.buf, key.len) == 0) {
        res = slice(&b, key_end(&b, j), rec_end(&b, j));
    } else {
        res = Py_None;
        Py_INCREF(res);
    }
    PyBuffer_Release(&key);
    return res;
}

/* Records lo..hi-1 (clamped to 0..n) as a new list of keys (if keys) and/or of values (if vals). */
static int split_into(const Block *b, Py_ssize_t lo, Py_ssize_t hi, PyObject **keys, PyObject **vals) {
    if (lo < 0) lo = 0;
    if (lo > b->n) lo = b->n;
    if (hi > b->n) hi = b->n;
    if (hi < lo) hi = lo;
    if (keys && !(*keys = PyList_New(hi - lo))) return -1;
    if (vals && !(*vals = PyList_New(hi - lo))) return -1;
    Py_ssize_t s = rec_start(b, lo);
    for (Py_ssize_t j = lo; j < hi; j++) {
        Py_ssize_t ke = key_end(b, j), re = rec_end(b, j);
        if (keys) {
            PyObject *k = slice(b, s, ke);
            if (!k) return -1;
            PyList_SET_ITEM(*keys, j - lo, k);
        }
        if (vals) {
            PyObject *v = slice(b, ke, re);
            if (!v) return -1;
            PyList_SET_ITEM(*vals, j - lo, v);
        }
        s = re;
    }
    return 0;
}

static int parse_range(PyObject *args, const char *fmt, Block *b, Py_ssize_t *lo, Py_ssize_t *hi) {
    PyObject *raw, *hio = Py_None;
    Py_ssize_t n;
    *lo = 0;
    if (!PyArg_ParseTuple(args, fmt, &raw, &n, lo, &hio) || block_of(raw, n, b) < 0) return -1;
    if (hio == Py_None) {
        *hi = n;
    } else {
        *hi = PyLong_AsSsize_t(hio);
        if (*hi == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

PyDoc_STRVAR(split_doc, "split(raw, n, lo=0, hi=None) -> (keys, values) of records lo..hi-1 (RawBlock.split).");

static PyObject *c_split(PyObject *self, PyObject *args) {
    Block b;
    Py_ssize_t lo, hi;
    PyObject *keys = NULL, *vals = NULL;
    if (parse_range(args, "Sn|nO:split", &b, &lo, &hi) < 0) return NULL;
    if (split_into(&b, lo, hi, &keys, &vals) < 0) {
        Py_XDECREF(keys);
        Py_XDECREF(vals);
        return NULL;
    }
    return Py_BuildValue("(NN)", keys, vals);
}

PyDoc_STRVAR(values_doc, "values(raw, n, lo, hi) -> values of records lo..hi-1 (RawBlock.values).");

static PyObject *c_values(PyObject *self, PyObject *args) {
    Block b;
    Py_ssize_t lo, hi;
    PyObject *vals = NULL;
    if (parse_range(args, "Snn|O:values", &b, &lo, &hi) < 0) return NULL;
    if (split_into(&b, lo, hi, NULL, &vals) < 0) {
        Py_XDECREF(vals);
        return NULL;
    }
    return vals;
}

PyDoc_STRVAR(keys_doc, "keys(raw, n) -> every record key (RawBlock.keys).");

static PyObject *c_keys(PyObject *self, PyObject *args) {
    Block b;
    Py_ssize_t lo, hi;
    PyObject *keys = NULL;
    if (parse_range(args, "Sn:keys", &b, &lo, &hi) < 0) return NULL;
    if (split_into(&b, lo, hi, &keys, NULL) < 0) {
        Py_XDECREF(keys);
        return NULL;
    }
    return keys;
}

PyDoc_STRVAR(lens_doc, "lens(raw, n) -> key and value lengths, interleaved (RawBlock.lens).");

static PyObject *c_lens(PyObject *self, PyObject *args) {
    PyObject *raw, *out;
    Py_ssize_t n;
    Block b;
    if (!PyArg_ParseTuple(args, "Sn:lens", &raw, &n) || block_of(raw, n, &b) < 0) return NULL;
    if (!(out = PyList_New(2 * n))) return NULL;
    Py_ssize_t s = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        /* Unclamped differences, as the Python code's map(sub, ...) (offsets checked elsewhere). */
        Py_ssize_t ke = key_end(&b, j), re = rec_end(&b, j);
        PyObject *kl = PyLong_FromSsize_t(ke - s), *vl = kl ? PyLong_FromSsize_t(re - ke) : NULL;
        if (!vl) {
            Py_XDECREF(kl);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, 2 * j, kl);
        PyList_SET_ITEM(out, 2 * j + 1, vl);
        s = re;
    }
    return out;
}

/* The bytes of a bytes-like item: bytes directly, anything else through the buffer protocol. */
typedef struct {
    Py_buffer view;
    int held;
    const char *p;
    Py_ssize_t len;
} Item;

static int item_get(PyObject *o, Item *it) {
    it->held = 0;
    if (PyBytes_Check(o)) {
        it->p = PyBytes_AS_STRING(o);
        it->len = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyObject_GetBuffer(o, &it->view, PyBUF_SIMPLE) < 0) return -1;
    it->held = 1;
    it->p = it->view.buf;
    it->len = it->view.len;
    return 0;
}

static void item_release(Item *it) {
    if (it->held) PyBuffer_Release(&it->view);
}

static PyObject *too_big(void) {
    PyErr_SetString(PyExc_OverflowError, "block records exceed 4 GiB (u32 offsets)");
    return NULL;
}

PyDoc_STRVAR(build_doc,
             "build(keys, vals) -> the uncompressed block of these records: records, offsets, count "
             "(what encode_block seals).");

static PyObject *c_build(PyObject *self, PyObject *args) {
    PyObject *ko, *vo, *keys = NULL, *vals = NULL, *out = NULL;
    if (!PyArg_ParseTuple(args, "OO:build", &ko, &vo)) return NULL;
    if (!(keys = PySequence_Fast(ko, "keys must be a sequence")) ||
        !(vals = PySequence_Fast(vo, "values must be a sequence")))
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(vals) != n) {
        PyErr_Format(PyExc_ValueError, "%zd keys but %zd values", n, PySequence_Fast_GET_SIZE(vals));
        goto done;
    }
    if (n > UINT32_MAX) {
        too_big();
        goto done;
    }
    /* Items that are not bytes are read through the buffer protocol, which may run code: read
     * them from tuples, which that code cannot resize under us. */
    for (Py_ssize_t j = 0; j < n; j++) {
        if (!PyBytes_Check(PySequence_Fast_GET_ITEM(keys, j)) || !PyBytes_Check(PySequence_Fast_GET_ITEM(vals, j))) {
            Py_SETREF(keys, PySequence_Tuple(keys));
            if (!keys) goto done;
            Py_SETREF(vals, PySequence_Tuple(vals));
            if (!vals) goto done;
            break;
        }
    }
    PyObject **kv = PySequence_Fast_ITEMS(keys), **vv = PySequence_Fast_ITEMS(vals);
    Py_ssize_t total = 0;
    Item it;
    for (Py_ssize_t j = 0; j < 2 * n; j++) {
        if (item_get(j & 1 ? vv[j >> 1] : kv[j >> 1], &it) < 0) goto done;
        total += it.len;
        item_release(&it);
        if (total > UINT32_MAX) {
            too_big();
            goto done;
        }
    }
    if (!(out = PyBytes_FromStringAndSize(NULL, total + 8 * n + 4))) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out), *offs = p + total;
    Py_ssize_t at = 0;
    for (Py_ssize_t j = 0; j < 2 * n; j++) {
        if (item_get(j & 1 ? vv[j >> 1] : kv[j >> 1], &it) < 0) {
            Py_CLEAR(out);
            goto done;
        }
        if (at + it.len > total) { /* an item grew between the passes (a bytearray) */
            item_release(&it);
            PyErr_SetString(PyExc_RuntimeError, "a record changed size while being encoded");
            Py_CLEAR(out);
            goto done;
        }
        memcpy(p + at, it.p, (size_t)it.len);
        at += it.len;
        item_release(&it);
        wr32(offs + 4 * ((j >> 1) + (j & 1 ? n : 0)), (uint32_t)at);
    }
    if (at != total) {
        PyErr_SetString(PyExc_RuntimeError, "a record changed size while being encoded");
        Py_CLEAR(out);
        goto done;
    }
    wr32(offs + 8 * n, (uint32_t)n);
done:
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    return out;
}

PyDoc_STRVAR(build_run_doc,
             "build_run(data, lens) -> (raw, total): data followed by the offsets and count of the "
             "records whose key and value lengths lens gives, interleaved (what encode_run seals); "
             "total is the sum of lens.");

static PyObject *c_build_run(PyObject *self, PyObject *args) {
    PyObject *lo, *lens = NULL, *out = NULL;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*O:build_run", &data, &lo)) return NULL;
    if (!(lens = PySequence_Fast(lo, "lens must be a sequence"))) goto done;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(lens), n = m >> 1;
    if (m & 1) {
        PyErr_SetString(PyExc_ValueError, "lens holds an odd number of lengths");
        goto done;
    }
    if (!(out = PyBytes_FromStringAndSize(NULL, data.len + 8 * n + 4))) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out), *offs = p + data.len;
    memcpy(p, data.buf, (size_t)data.len);
    PyObject **lv = PySequence_Fast_ITEMS(lens);
    Py_ssize_t at = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        if (!PyLong_Check(lv[j])) { /* (an __index__ could run code that resizes lens) */
            PyErr_SetString(PyExc_TypeError, "lens must hold ints");
            Py_CLEAR(out);
            goto done;
        }
        Py_ssize_t l = PyLong_AsSsize_t(lv[j]);
        if (l == -1 && PyErr_Occurred()) {
            Py_CLEAR(out);
            goto done;
        }
        at += l;
        if (at < 0 || at > UINT32_MAX) {
            Py_CLEAR(out);
            if (at < 0)
                PyErr_SetString(PyExc_OverflowError, "negative record offset");
            else
                too_big();
            goto done;
        }
        wr32(offs + 4 * ((j >> 1) + (j & 1 ? n : 0)), (uint32_t)at);
    }
    wr32(offs + 8 * n, (uint32_t)n);
    out = Py_BuildValue("(Nn)", out, at);
done:
    Py_XDECREF(lens);
    PyBuffer_Release(&data);
    return out;
}

/* ---- the read path of a lookup: unpack a block, merge levels, build links ------------------ */

/* Largest uncompressed block a reader accepts (block.MAX_BLOCK_BYTES). */
#define MAX_BLOCK_BYTES (64u << 20)

/* One byte more of a CRC-32 (zlib's polynomial, as zlib.crc32): the codec byte the block's
 * checksum covers after its body. */
static uint32_t crc32_byte(uint32_t crc, unsigned char c) {
    crc = ~crc ^ c;
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    return ~crc;
}

/* An exception a damaged block can raise from the decompressor (not MemoryError, not a
 * KeyboardInterrupt): forgotten, since the caller reruns the Python code, which raises it again
 * as the CorruptionError naming the block. */
static int damaged_error(void) {
    if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

PyDoc_STRVAR(unpack_doc,
             "unpack(data, crc32, decompress) -> (raw, n): an lz4 or uncompressed block whose checksum, "
             "size, record count and offsets total are sound, decompressed; None for anything else "
             "(a damaged block, another codec): the caller runs unpack_block's Python code, which "
             "names what is wrong.  crc32 and decompress are zlib.crc32 and lz4.block.decompress.");

/* The raw bytes and record count of block data (args: data, crc32, decompress): 1 and *raw (a
 * new reference) and *n set, 0 if declined (damaged, or a codec left to Python), -1 on error. */
static int unpack_raw(PyObject *const *args, PyObject **raw, Py_ssize_t *n) {
    PyObject *data = args[0], *body, *c;
    if (!PyBytes_Check(data)) return 0;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t len = PyBytes_GET_SIZE(data);
    if (len < 5) return 0;
    Py_ssize_t end = len - 5;
    unsigned char codec = p[end];
    if (codec != 0 && codec != 2) return 0; /* zlib: rare, left to Python */
    /* data stays alive (an argument) while the view is used: the callees keep no reference. */
    if (!(body = PyMemoryView_FromMemory((char *)p, end, PyBUF_READ))) return -1;
    c = PyObject_CallOneArg(args[1], body);
    if (!c) {
        Py_DECREF(body);
        return -1;
    }
    unsigned long got = PyLong_AsUnsignedLong(c);
    Py_DECREF(c);
    if (got == (unsigned long)-1 && PyErr_Occurred()) {
        Py_DECREF(body);
        return -1;
    }
    if (crc32_byte((uint32_t)got, codec) != rd32(p + end + 1) || (codec == 2 && (end < 4 || rd32(p) > MAX_BLOCK_BYTES))) {
        Py_DECREF(body);
        return 0;
    }
    if (codec == 2) {
        *raw = PyObject_CallOneArg(args[2], body);
        Py_DECREF(body);
        if (!*raw) return damaged_error() ? 0 : -1;
        if (!PyBytes_Check(*raw)) {
            Py_DECREF(*raw);
            return 0;
        }
    } else {
        Py_DECREF(body);
        if (!(*raw = PyBytes_FromStringAndSize((const char *)p, end))) return -1;
    }
    const unsigned char *r = (const unsigned char *)PyBytes_AS_STRING(*raw);
    Py_ssize_t rl = PyBytes_GET_SIZE(*raw);
    *n = rl < 4 ? 0 : (Py_ssize_t)rd32(r + rl - 4);
    if (rl < 4 || 8 * *n > rl - 4 || (*n && (Py_ssize_t)rd32(r + rl - 8) != rl - 4 - 8 * *n)) {
        Py_DECREF(*raw);
        return 0;
    }
    return 1;
}

static PyObject *c_unpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *raw;
    Py_ssize_t n;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "unpack(data, crc32, decompress) takes 3 arguments");
        return NULL;
    }
    int r = unpack_raw(args, &raw, &n);
    if (r <= 0) {
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(Nn)", raw, n);
}

PyDoc_STRVAR(unpack_range_doc,
             "unpack_range(data, crc32, decompress, start, stop) -> (keys, values, n): unpack (as "
             "unpack) and the records with start <= key < stop split out (RawBlock.split of "
             "RawBlock.find of both ends), n the block's record count; None where unpack declines.");

static PyObject *c_unpack_range(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *raw, *keys = NULL, *vals = NULL, *res = NULL;
    Py_ssize_t n;
    Block b;
    if (nargs != 5 || !PyBytes_Check(args[3]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "unpack_range(data, crc32, decompress, start: bytes, stop: bytes)");
        return NULL;
    }
    int r = unpack_raw(args, &raw, &n);
    if (r <= 0) {
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (block_of(raw, n, &b) == 0) {
        Py_ssize_t lo = lower_bound(&b, 0, PyBytes_AS_STRING(args[3]), PyBytes_GET_SIZE(args[3]));
        Py_ssize_t hi = lower_bound(&b, lo, PyBytes_AS_STRING(args[4]), PyBytes_GET_SIZE(args[4]));
        if (split_into(&b, lo, hi, &keys, &vals) == 0) res = Py_BuildValue("(NNn)", keys, vals, n);
        else {
            Py_XDECREF(keys);
            Py_XDECREF(vals);
        }
    }
    Py_DECREF(raw);
    return res;
}

static inline int bytes_cmp(PyObject *a, PyObject *b) {
    Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b), m = la < lb ? la : lb;
    int c = m ? memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)m) : 0;
    if (c) return c;
    return la < lb ? -1 : (la > lb ? 1 : 0);
}

#define MERGE_MAX 64

PyDoc_STRVAR(merge_doc,
             "merge(parts) -> (keys, values): parts are (keys, values, ops) of the levels of a table, "
             "newest first, each sorted; for every key the newest level's record wins; when that "
             "level has ops (a delta run) its value is an op byte, PUT (1) + value or DEL (0), and a "
             "DEL hides the key.  None when anything is not as a sound table gives it (keys out of "
             "order, an unknown op byte, an item that is not bytes): the caller runs the Python code, "
             "which names what is wrong.");

static PyObject *c_merge(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "merge(parts: list) takes 1 argument");
        return NULL;
    }
    PyObject *parts = args[0];
    Py_ssize_t m = PyList_GET_SIZE(parts), idx[MERGE_MAX], len[MERGE_MAX];
    PyObject *ks[MERGE_MAX], *vs[MERGE_MAX];
    int ops[MERGE_MAX];
    if (m > MERGE_MAX) Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *t = PyList_GET_ITEM(parts, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) Py_RETURN_NONE;
        ks[i] = PyTuple_GET_ITEM(t, 0);
        vs[i] = PyTuple_GET_ITEM(t, 1);
        ops[i] = PyObject_IsTrue(PyTuple_GET_ITEM(t, 2));
        if (ops[i] < 0) return NULL;
        if (!PyList_Check(ks[i]) || !PyList_Check(vs[i]) || PyList_GET_SIZE(ks[i]) != PyList_GET_SIZE(vs[i]))
            Py_RETURN_NONE;
        idx[i] = 0;
        len[i] = PyList_GET_SIZE(ks[i]);
        for (Py_ssize_t j = 0; j < len[i]; j++) {
            PyObject *k = PyList_GET_ITEM(ks[i], j), *v = PyList_GET_ITEM(vs[i], j);
            if (!PyBytes_Check(k) || !PyBytes_Check(v) || (j && bytes_cmp(PyList_GET_ITEM(ks[i], j - 1), k) >= 0))
                Py_RETURN_NONE;
            if (ops[i] && (PyBytes_GET_SIZE(v) == 0 || (unsigned char)PyBytes_AS_STRING(v)[0] > 1)) Py_RETURN_NONE;
        }
    }
    /* Nothing below calls Python code: the lists cannot change under the loop. */
    PyObject *ok = PyList_New(0), *ov = PyList_New(0);
    if (!ok || !ov) goto fail;
    for (;;) {
        Py_ssize_t w = -1;
        for (Py_ssize_t i = 0; i < m; i++)
            if (idx[i] < len[i] && (w < 0 || bytes_cmp(PyList_GET_ITEM(ks[i], idx[i]), PyList_GET_ITEM(ks[w], idx[w])) < 0))
                w = i;
        if (w < 0) break;
        PyObject *k = PyList_GET_ITEM(ks[w], idx[w]), *v = PyList_GET_ITEM(vs[w], idx[w]), *nv = NULL;
        for (Py_ssize_t i = w + 1; i < m; i++)
            if (idx[i] < len[i] && bytes_cmp(PyList_GET_ITEM(ks[i], idx[i]), k) == 0) idx[i]++;
        idx[w]++;
        if (ops[w]) {
            if (PyBytes_AS_STRING(v)[0] == 0) continue; /* DEL */
            if (!(nv = PyBytes_FromStringAndSize(PyBytes_AS_STRING(v) + 1, PyBytes_GET_SIZE(v) - 1))) goto fail;
        } else {
            Py_INCREF(v);
            nv = v;
        }
        int e = PyList_Append(ok, k) < 0 || PyList_Append(ov, nv) < 0;
        Py_DECREF(nv);
        if (e) goto fail;
    }
    return Py_BuildValue("(NN)", ok, ov);
fail:
    Py_XDECREF(ok);
    Py_XDECREF(ov);
    return NULL;
}

PyDoc_STRVAR(links_doc,
             "links(keys, values, plen, url, cls, fixed, out) -> [cls(key[plen:], url, anchor, domain_id, "
             "flags & out != 0)] of LinksByURL records (reader._links in C): a value is domain_id "
             "(i64 LE), flags (u8), then the anchor in UTF-8 from byte fixed (pagecodec.LINK), decoded "
             "with errors replaced.  None if a value is shorter than fixed (the caller runs the "
             "Python code, which names the record).");

/* The offsets of the 5 fields of cls (records.Link, a dataclass with slots) when an instance
 * can be made by filling them: cls's own writable object slots, no __post_init__.  Running the
 * dataclass's __init__ (Python code) per link was a sixth of an inlinks lookup.  0 if cls is
 * not such a class (it is then called). */
static int link_slots(PyObject *cls, Py_ssize_t off[5]) {
    static const char *names[5] = {"from_id", "url", "anchor", "domain_id", "target_has_outlink"};
    if (!PyType_Check(cls)) return 0;
    PyTypeObject *t = (PyTypeObject *)cls;
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || !t->tp_members || t->tp_base != &PyBaseObject_Type ||
        t->tp_new != PyBaseObject_Type.tp_new || t->tp_alloc != PyType_GenericAlloc)
        return 0;
    for (int i = 0; i < 5; i++) off[i] = -1;
    for (PyMemberDef *m = t->tp_members; m->name; m++)
        for (int i = 0; i < 5; i++)
            if (!strcmp(m->name, names[i])) {
                if (m->type != T_OBJECT_EX || (m->flags & READONLY)) return 0;
                off[i] = m->offset;
            }
    for (int i = 0; i < 5; i++)
        if (off[i] < (Py_ssize_t)sizeof(PyObject)) return 0;
    if (!PyObject_HasAttrString(cls, "__dataclass_fields__") || PyObject_HasAttrString(cls, "__post_init__")) return 0;
    return 1;
}

static PyObject *c_links(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "links(keys: list, values: list, plen, url, cls, fixed, out)");
        return NULL;
    }
    PyObject *keys = args[0], *vals = args[1], *url = args[3], *cls = args[4];
    Py_ssize_t plen = PyLong_AsSsize_t(args[2]), fixed = PyLong_AsSsize_t(args[5]);
    long out = PyLong_AsLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(vals) != n || plen < 0 || fixed < 9) Py_RETURN_NONE;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *k = PyList_GET_ITEM(keys, j), *v = PyList_GET_ITEM(vals, j);
        if (!PyBytes_Check(k) || !PyBytes_Check(v) || PyBytes_GET_SIZE(v) < fixed) Py_RETURN_NONE;
    }
    Py_ssize_t off[5];
    int fill = link_slots(args[4], off);
    /* Calling cls runs Python code, which could change the lists: hold them as tuples. */
    PyObject *kt = PyList_AsTuple(keys), *vt = kt ? PyList_AsTuple(vals) : NULL, *res = NULL;
    if (!vt || !(res = PyList_New(n))) goto done;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *k = PyTuple_GET_ITEM(kt, j), *v = PyTuple_GET_ITEM(vt, j), *a[5];
        const unsigned char *vp = (const unsigned char *)PyBytes_AS_STRING(v);
        Py_ssize_t kl = PyBytes_GET_SIZE(k), s = plen < kl ? plen : kl;
        uint64_t d = (uint64_t)rd32(vp) | ((uint64_t)rd32(vp + 4) << 32);
        a[0] = PyBytes_FromStringAndSize(PyBytes_AS_STRING(k) + s, kl - s);
        a[1] = url;
        a[2] = a[0] ? PyUnicode_DecodeUTF8((const char *)vp + fixed, PyBytes_GET_SIZE(v) - fixed, "replace") : NULL;
        a[3] = a[2] ? PyLong_FromLongLong((long long)d) : NULL;
        a[4] = (vp[8] & out) ? Py_True : Py_False;
        PyObject *l = NULL;
        if (a[3] && fill) { /* what the dataclass's __init__ does: each field set once */
            if ((l = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0)))
                for (int i = 0; i < 5; i++) {
                    Py_INCREF(a[i]);
                    *(PyObject **)((char *)l + off[i]) = a[i];
                }
        } else if (a[3]) {
            l = PyObject_Vectorcall(cls, a, 5, NULL);
        }
        Py_XDECREF(a[0]);
        Py_XDECREF(a[2]);
        Py_XDECREF(a[3]);
        if (!l) {
            Py_CLEAR(res);
            goto done;
        }
        PyList_SET_ITEM(res, j, l);
    }
done:
    Py_XDECREF(kt);
    Py_XDECREF(vt);
    return res;
}

PyDoc_STRVAR(index_entries_doc,
             "index_entries(raw, n, size) -> (keys, lasts, fixed) of an index block (TableReader's "
             "index): the record keys, each value past its first size bytes, and those first size "
             "bytes of every value back to back; None if a value is shorter than size.");

static PyObject *c_index_entries(PyObject *self, PyObject *args) {
    PyObject *raw, *keys = NULL, *lasts = NULL, *fixed = NULL;
    Py_ssize_t n, size;
    Block b;
    if (!PyArg_ParseTuple(args, "Snn:index_entries", &raw, &n, &size) || block_of(raw, n, &b) < 0) return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "negative size");
        return NULL;
    }
    Py_ssize_t s;
    for (Py_ssize_t j = 0; j < n; j++) { /* the same clamped slices as split() */
        Py_ssize_t vs = key_end(&b, j), ve = rec_end(&b, j);
        clamp(&b, &vs, &ve);
        if (ve - vs < size) Py_RETURN_NONE;
    }
    if (!(keys = PyList_New(n)) || !(lasts = PyList_New(n)) || !(fixed = PyBytes_FromStringAndSize(NULL, n * size)))
        goto fail;
    char *f = PyBytes_AS_STRING(fixed);
    s = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t ke = key_end(&b, j), re = rec_end(&b, j), vs = ke, ve = re;
        PyObject *k = slice(&b, s, ke), *l;
        if (!k) goto fail;
        PyList_SET_ITEM(keys, j, k);
        clamp(&b, &vs, &ve);
        memcpy(f + j * size, b.raw + vs, (size_t)size);
        if (!(l = slice(&b, vs + size, ve))) goto fail;
        PyList_SET_ITEM(lasts, j, l);
        s = re;
    }
    return Py_BuildValue("(NNN)", keys, lasts, fixed);
fail:
    Py_XDECREF(keys);
    Py_XDECREF(lasts);
    Py_XDECREF(fixed);
    return NULL;
}

/* ---- gather_blocks: the bulk load's blocks from columns (webdb/bulkarrow.py) ---------------- */

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

PyDoc_STRVAR(gather_blocks_doc,
             "gather_blocks(parts, klen, ends) -> list of uncompressed blocks (what encode_block "
             "seals).  Record i is the concatenation of its bytes in each part (data, offs, width, "
             "idx): data[offs[r]:offs[r+1]], or data[r*width:(r+1)*width] when offs is None, with "
             "r = idx[i] (or i when idx is None); its key is its first klen[i] bytes.  Block b holds "
             "records ends[b-1]..ends[b]-1 (from 0).  offs, idx, klen and ends are int64 buffers.  "
             "The copies run without the GIL.");

static PyObject *c_gather_blocks(PyObject *self, PyObject *args) {
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

/* ---- hash_values: the bulk load's url hashes (webdb/bulkarrow.py _url_hashes) --------------- */

PyDoc_STRVAR(hash_values_doc,
             "hash_values(data, offs) -> bytes of n uint64 (native order): a 64-bit hash of each "
             "value data[offs[i]:offs[i+1]] (offs: n+1 int64), the one bulkarrow._url_hashes "
             "computes with numpy.  Runs without the GIL.");

static PyObject *c_hash_values(PyObject *self, PyObject *args) {
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

/* ---- unhex, has_control: the bulk load's TSV checks (webdb/bulkarrow.py) ------------------ */

PyDoc_STRVAR(unhex_doc,
             "unhex(data) -> the bytes the hex digits of data (an even number of 0-9a-fA-F) stand "
             "for, or None for any other byte or an odd length.  Runs without the GIL.");

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static PyObject *c_unhex(PyObject *self, PyObject *args) {
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

PyDoc_STRVAR(has_control_doc,
             "has_control(data) -> True if data holds a byte <= 0x20 (a control or a space) or 0x7f.  "
             "Runs without the GIL.");

static PyObject *c_has_control(PyObject *self, PyObject *args) {
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

/* ---- Step 0: edit records (webdb/writer/writer.py, webdb/sortbuf.py) ----------------------
 * Each function below is the counterpart of a Python reference named in its doc string (the
 * fallback, which the tests compare it to). */

/* Prefetch a list item (a bytes object) a few steps ahead: sorted records are read in key
 * order, all over the heap, and a pass over them is bound by those cache misses. */
#if defined(__GNUC__)
#define PREFETCH_ITEM(o) __builtin_prefetch(o)
#else
#define PREFETCH_ITEM(o) ((void)0)
#endif

/* A record to sort and its 16 bytes at the current depth, big-endian (zero-padded). */
typedef struct {
    uint64_t k0, k1;
    PyObject *o;
} SortItem;

static inline int key_lt(const SortItem *x, const SortItem *y) {
    return x->k0 < y->k0 || (x->k0 == y->k0 && x->k1 < y->k1);
}

static int sort_cmp_bytes(const void *a, const void *b) {
    PyObject *x = ((const SortItem *)a)->o, *y = ((const SortItem *)b)->o;
    Py_ssize_t nx = PyBytes_GET_SIZE(x), ny = PyBytes_GET_SIZE(y);
    int c = memcmp(PyBytes_AS_STRING(x), PyBytes_AS_STRING(y), (size_t)(nx < ny ? nx : ny));
    return c ? c : (nx > ny) - (nx < ny);
}

/* Sort it[0:n] by key: a quicksort (median of three, the smaller side by recursion) with an
 * insertion sort for short ranges; compares inline, no call through a function pointer. */
static void sort_by_key(SortItem *it, Py_ssize_t n) {
    while (n > 16) {
        SortItem t, *a = it, *m = it + n / 2, *z = it + n - 1;
        if (key_lt(m, a)) t = *m, *m = *a, *a = t;
        if (key_lt(z, a)) t = *z, *z = *a, *a = t;
        if (key_lt(z, m)) t = *z, *z = *m, *m = t;
        SortItem pv = *m;
        Py_ssize_t i = 0, j = n - 1;
        for (;;) {
            while (key_lt(&it[i], &pv)) i++;
            while (key_lt(&pv, &it[j])) j--;
            if (i >= j) break;
            t = it[i], it[i] = it[j], it[j] = t;
            i++, j--;
        }
        /* it[0:j+1] <= pv <= it[j+1:n] */
        if (j + 1 < n - j - 1) {
            sort_by_key(it, j + 1);
            it += j + 1, n -= j + 1;
        } else {
            sort_by_key(it + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        SortItem x = it[i];
        Py_ssize_t j = i;
        for (; j > 0 && key_lt(&x, &it[j - 1]); j--) it[j] = it[j - 1];
        it[j] = x;
    }
}

/* Sort it[0:n], whose records agree on their first off bytes: by the next 16 bytes read as two
 * integers, then each run of equal keys 16 bytes deeper (a multikey sort: most compares are
 * integer compares, not calls through bytes' rich compare, and each level reads each record
 * once). */
static void sort_level(SortItem *it, Py_ssize_t n, Py_ssize_t off) {
    if (off >= 4096) { /* records alike this far are rare: whole compares bound the recursion */
        qsort(it, (size_t)n, sizeof(SortItem), sort_cmp_bytes);
        return;
    }
    for (;;) {
        int shorter = 0, same = 1; /* shorter: a record ends within these 16 bytes */
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + 8 < n) {
                PREFETCH_ITEM(it[i + 8].o);
                PREFETCH_ITEM(PyBytes_AS_STRING(it[i + 8].o) + off);
            }
            const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(it[i].o);
            Py_ssize_t m = PyBytes_GET_SIZE(it[i].o);
            uint64_t k0 = 0, k1 = 0;
            if (m >= off + 16) {
                for (int b = 0; b < 8; b++) k0 = (k0 << 8) | p[off + b];
                for (int b = 8; b < 16; b++) k1 = (k1 << 8) | p[off + b];
            } else {
                shorter = 1;
                for (int b = 0; b < 8; b++) k0 = (k0 << 8) | (off + b < m ? p[off + b] : 0);
                for (int b = 8; b < 16; b++) k1 = (k1 << 8) | (off + b < m ? p[off + b] : 0);
            }
            it[i].k0 = k0;
            it[i].k1 = k1;
            same &= k0 == it[0].k0 && k1 == it[0].k1;
        }
        if (shorter) break;
        if (!same) {
            sort_by_key(it, n);
            for (Py_ssize_t i = 0; i < n;) {
                Py_ssize_t j = i + 1;
                while (j < n && it[j].k0 == it[i].k0 && it[j].k1 == it[i].k1) j++;
                if (j - i > 1) sort_level(it + i, j - i, off + 16);
                i = j;
            }
            return;
        }
        off += 16; /* all alike so far: one level deeper, no sort */
    }
    /* Some record ends here: sort by key, then the runs of equal keys by whole compares. */
    sort_by_key(it, n);
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t j = i + 1;
        while (j < n && it[j].k0 == it[i].k0 && it[j].k1 == it[i].k1) j++;
        if (j - i > 1) qsort(it + i, (size_t)(j - i), sizeof(SortItem), sort_cmp_bytes);
        i = j;
    }
}

PyDoc_STRVAR(sort_records_doc,
             "sort_records(recs) -> None: recs.sort() for a list of bytes (a multikey sort on 16-byte "
             "slices); TypeError if an item is not bytes.");

static PyObject *c_sort_records(PyObject *self, PyObject *arg) {
    if (!PyList_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "sort_records needs a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(arg);
    if (n < 2) Py_RETURN_NONE;
    SortItem *it = PyMem_Malloc((size_t)n * sizeof(SortItem));
    if (it == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(arg, i);
        if (!PyBytes_CheckExact(o)) {
            PyMem_Free(it);
            PyErr_Format(PyExc_TypeError, "sort_records: item %zd is %.50s, not bytes", i, Py_TYPE(o)->tp_name);
            return NULL;
        }
        it[i].o = o;
    }
    /* Sorted already (an emitter fed in key order): nothing to do, as for list.sort. */
    Py_ssize_t i = 1;
    while (i < n && sort_cmp_bytes(&it[i - 1], &it[i]) <= 0) i++;
    if (i == n) {
        PyMem_Free(it);
        Py_RETURN_NONE;
    }
    /* No Python code runs from here on: the list keeps its references, only their order
     * changes. */
    sort_level(it, n, 0);
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(arg, i, it[i].o);
    PyMem_Free(it);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(ifn_first_doc,
             "ifn_first(recs, op) -> list: writer.first_ifn_only over a sorted list of edit records "
             "(the records whose key ends in op and equals the previous key are dropped).");

static PyObject *c_ifn_first(PyObject *self, PyObject *args) {
    PyObject *recs;
    int op;
    if (!PyArg_ParseTuple(args, "O!i:ifn_first", &PyList_Type, &recs, &op)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(recs);
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    const char *prev = "";
    Py_ssize_t prevn = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(recs, i);
        if (i + 8 < n) PREFETCH_ITEM(PyList_GET_ITEM(recs, i + 8));
        if (!PyBytes_CheckExact(o)) {
            Py_DECREF(out);
            PyErr_Format(PyExc_TypeError, "ifn_first: item %zd is not bytes", i);
            return NULL;
        }
        const char *p = PyBytes_AS_STRING(o);
        Py_ssize_t m = PyBytes_GET_SIZE(o);
        Py_ssize_t kl = m >= 2 ? ((Py_ssize_t)(unsigned char)p[m - 2] | ((Py_ssize_t)(unsigned char)p[m - 1] << 8)) : 0;
        if (kl < 9 || kl > m) {
            Py_DECREF(out);
            PyErr_Format(PyExc_ValueError, "ifn_first: item %zd is not an edit record", i);
            return NULL;
        }
        Py_ssize_t keyn = kl - 8;
        if ((unsigned char)p[keyn - 1] == op && keyn == prevn && memcmp(p, prev, (size_t)keyn) == 0) continue;
        prev = p;
        prevn = keyn;
        if (PyList_Append(out, o) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

PyDoc_STRVAR(join_run_doc,
             "join_run(recs, lo, hi) -> (data, lens): b''.join(recs[lo:hi]) and [len(r), 0, ...] for "
             "each record (keys with empty values: TableWriter.add_run's arguments).");

static PyObject *c_join_run(PyObject *self, PyObject *args) {
    PyObject *recs;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "O!nn:join_run", &PyList_Type, &recs, &lo, &hi)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(recs);
    if (lo < 0) lo = 0;
    if (hi > n) hi = n;
    if (hi < lo) hi = lo;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = lo; i < hi; i++) {
        PyObject *o = PyList_GET_ITEM(recs, i);
        if (i + 8 < hi) PREFETCH_ITEM(PyList_GET_ITEM(recs, i + 8));
        if (!PyBytes_CheckExact(o)) {
            PyErr_Format(PyExc_TypeError, "join_run: item %zd is not bytes", i);
            return NULL;
        }
        total += PyBytes_GET_SIZE(o);
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    PyObject *lens = PyList_New(2 * (hi - lo));
    if (data == NULL || lens == NULL) goto fail;
    char *w = PyBytes_AS_STRING(data);
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) goto fail;
    for (Py_ssize_t i = lo; i < hi; i++) {
        PyObject *o = PyList_GET_ITEM(recs, i);
        Py_ssize_t m = PyBytes_GET_SIZE(o);
        if (i + 4 < hi) {
            PREFETCH_ITEM(PyList_GET_ITEM(recs, i + 4));
            PREFETCH_ITEM((char *)PyList_GET_ITEM(recs, i + 4) + 64);
        }
        memcpy(w, PyBytes_AS_STRING(o), (size_t)m);
        w += m;
        PyObject *len = PyLong_FromSsize_t(m);
        if (len == NULL) {
            Py_DECREF(zero);
            goto fail;
        }
        PyList_SET_ITEM(lens, 2 * (i - lo), len);
        PyList_SET_ITEM(lens, 2 * (i - lo) + 1, Py_NewRef(zero));
    }
    Py_DECREF(zero);
    return Py_BuildValue("(NN)", data, lens);
fail:
    Py_XDECREF(data);
    Py_XDECREF(lens);
    return NULL;
}

/* A 1-d buffer of n int64 (numpy's int64 array, an array('q')). */
static int get_i64(PyObject *o, Py_buffer *b, Py_ssize_t n, const char *what) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->itemsize != 8 || b->len != 8 * n || b->format == NULL || strchr("qlLQ", b->format[0]) == NULL ||
        b->format[1] != '\0') {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_ValueError, "link_records: %s must be %zd int64", what, n);
        return -1;
    }
    return 0;
}

static inline char *put_be40(char *w, int64_t q) {
    for (int b = 4; b >= 0; b--) *w++ = (char)((uint64_t)q >> (8 * b));
    return w;
}

PyDoc_STRVAR(link_records_doc,
             "link_records(data, us, ue, as_, ae, counts, md5s, tails, seqs, pp, lp, link_pre) -> "
             "(precs, lrecs, psize, lsize): columns.link_records_py in one call (the page and link edit "
             "records of a fetch block's outlinks; their lengths as native int64 bytes).");

static PyObject *c_link_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "link_records takes 12 arguments");
        return NULL;
    }
    PyObject *md5s = args[6], *tails = args[7];
    if (!PyList_Check(md5s) || !PyList_Check(tails) || PyList_GET_SIZE(md5s) != PyList_GET_SIZE(tails)) {
        PyErr_SetString(PyExc_TypeError, "link_records: md5s and tails must be lists of one length");
        return NULL;
    }
    Py_ssize_t rows = PyList_GET_SIZE(md5s);
    Py_buffer db = {0}, bus = {0}, bue = {0}, bas = {0}, bae = {0}, bcnt = {0}, bseq = {0}, bpp = {0}, blp = {0},
              bpre = {0};
    PyObject *precs = NULL, *lrecs = NULL, *psize = NULL, *lsize = NULL, *out = NULL;
    if (PyObject_GetBuffer(args[0], &db, PyBUF_SIMPLE) < 0) return NULL;
    if (get_i64(args[5], &bcnt, rows, "counts") < 0) goto done;
    const int64_t *cnt = bcnt.buf;
    Py_ssize_t nl = 0;
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (cnt[r] < 0) {
            PyErr_SetString(PyExc_ValueError, "link_records: a negative count");
            goto done;
        }
        nl += cnt[r];
    }
    if (get_i64(args[1], &bus, nl, "us") < 0 || get_i64(args[2], &bue, nl, "ue") < 0 ||
        get_i64(args[3], &bas, nl, "as_") < 0 || get_i64(args[4], &bae, nl, "ae") < 0 ||
        get_i64(args[8], &bseq, rows, "seqs") < 0)
        goto done;
    if (PyObject_GetBuffer(args[9], &bpp, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(args[10], &blp, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(args[11], &bpre, PyBUF_SIMPLE) < 0)
        goto done;
    const int64_t *us = bus.buf, *ue = bue.buf, *as = bas.buf, *ae = bae.buf, *seq = bseq.buf;
    const char *d = db.buf;
    precs = PyList_New(nl);
    lrecs = PyList_New(nl);
    psize = PyBytes_FromStringAndSize(NULL, 8 * nl);
    lsize = PyBytes_FromStringAndSize(NULL, 8 * nl);
    if (!precs || !lrecs || !psize || !lsize) goto done;
    int64_t *psz = (int64_t *)PyBytes_AS_STRING(psize), *lsz = (int64_t *)PyBytes_AS_STRING(lsize);
    Py_ssize_t l = 0;
    for (Py_ssize_t r = 0; r < rows; r++) {
        PyObject *md5 = PyList_GET_ITEM(md5s, r), *tail = PyList_GET_ITEM(tails, r);
        if (!PyBytes_Check(md5) || !PyBytes_Check(tail)) {
            PyErr_SetString(PyExc_TypeError, "link_records: md5s and tails must hold bytes");
            goto done;
        }
        const char *mp = PyBytes_AS_STRING(md5), *tp = PyBytes_AS_STRING(tail);
        Py_ssize_t mn = PyBytes_GET_SIZE(md5), tn = PyBytes_GET_SIZE(tail);
        for (int64_t k = 0; k < cnt[r]; k++, l++) {
            if (us[l] < 0 || ue[l] < us[l] || ue[l] > db.len || as[l] < 0 || ae[l] < as[l] || ae[l] > db.len) {
                PyErr_Format(PyExc_ValueError, "link_records: link %zd has offsets outside the data", l);
                goto done;
            }
            Py_ssize_t un = ue[l] - us[l], an = ae[l] - as[l];
            /* the key length goes in a u16 (U16[...] in Python: an IndexError there) */
            if (mn + 1 + un + 1 + 8 > 0xffff) {
                PyErr_Format(PyExc_ValueError, "link_records: link %zd: url too long for a record", l);
                goto done;
            }
            int64_t q = seq[r] + 1 + 2 * k;
            Py_ssize_t pn = un + bpp.len + 5 + tn + 2;
            PyObject *p = PyBytes_FromStringAndSize(NULL, pn);
            if (p == NULL) goto done;
            PyList_SET_ITEM(precs, l, p);
            char *w = PyBytes_AS_STRING(p);
            memcpy(w, d + us[l], (size_t)un);
            w += un;
            memcpy(w, bpp.buf, (size_t)bpp.len);
            w += bpp.len;
            w = put_be40(w, q);
            memcpy(w, tp, (size_t)tn);
            w += tn;
            w[0] = (char)((un + 10) & 0xff);
            w[1] = (char)((un + 10) >> 8);
            Py_ssize_t ln = mn + 1 + un + blp.len + 5 + bpre.len + an + 2;
            PyObject *lr = PyBytes_FromStringAndSize(NULL, ln);
            if (lr == NULL) goto done;
            PyList_SET_ITEM(lrecs, l, lr);
            w = PyBytes_AS_STRING(lr);
            memcpy(w, mp, (size_t)mn);
            w += mn;
            *w++ = 1;
            memcpy(w, d + us[l], (size_t)un);
            w += un;
            memcpy(w, blp.buf, (size_t)blp.len);
            w += blp.len;
            w = put_be40(w, q + 1);
            memcpy(w, bpre.buf, (size_t)bpre.len);
            w += bpre.len;
            memcpy(w, d + as[l], (size_t)an);
            w += an;
            Py_ssize_t kl = mn + 1 + un + 1 + 8;
            w[0] = (char)(kl & 0xff);
            w[1] = (char)(kl >> 8);
            psz[l] = pn;
            lsz[l] = ln;
        }
    }
    out = PyTuple_Pack(4, precs, lrecs, psize, lsize);
done:
    Py_XDECREF(precs);
    Py_XDECREF(lrecs);
    Py_XDECREF(psize);
    Py_XDECREF(lsize);
    PyBuffer_Release(&db);
    if (bus.obj) PyBuffer_Release(&bus);
    if (bue.obj) PyBuffer_Release(&bue);
    if (bas.obj) PyBuffer_Release(&bas);
    if (bae.obj) PyBuffer_Release(&bae);
    if (bcnt.obj) PyBuffer_Release(&bcnt);
    if (bseq.obj) PyBuffer_Release(&bseq);
    if (bpp.obj) PyBuffer_Release(&bpp);
    if (blp.obj) PyBuffer_Release(&blp);
    if (bpre.obj) PyBuffer_Release(&bpre);
    return out;
}

PyDoc_STRVAR(urls_ok_doc,
             "urls_ok(data, us, ue, max_url) -> bool: columns.link_urls_ok for the url slices "
             "data[us[i]:ue[i]] (int64 offsets, in bounds): at most max_url bytes, no byte <= 0x20 or "
             "0x7f, '://' first found after the start and ending within its first 32 bytes.");

static PyObject *c_urls_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "urls_ok takes 4 arguments");
        return NULL;
    }
    Py_ssize_t max_url = PyLong_AsSsize_t(args[3]);
    if (max_url == -1 && PyErr_Occurred()) return NULL;
    Py_buffer db, bs = {0}, be = {0};
    if (PyObject_GetBuffer(args[0], &db, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = PyObject_Length(args[1]);
    if (n < 0 || get_i64(args[1], &bs, n, "us") < 0 || get_i64(args[2], &be, n, "ue") < 0) goto done;
    const unsigned char *d = db.buf;
    const int64_t *us = bs.buf, *ue = be.buf;
    int ok = 1;
    for (Py_ssize_t i = 0; i < n && ok; i++) {
        int64_t a = us[i], e = ue[i];
        if (a < 0 || e < a || e > db.len) {
            PyErr_Format(PyExc_ValueError, "urls_ok: url %zd has offsets outside the data", i);
            goto done;
        }
        if (e - a > max_url) {
            ok = 0;
            break;
        }
        for (int64_t j = a; j < e; j++)
            if (d[j] <= 0x20 || d[j] == 0x7f) {
                ok = 0;
                break;
            }
        /* the first "://" at or after a (the numpy code searches the whole buffer) must start
         * after a and end by a + 32 and by e */
        int64_t lim = e < a + 32 ? e : a + 32, p = a;
        while (p + 3 <= lim && !(d[p] == ':' && d[p + 1] == '/' && d[p + 2] == '/')) p++;
        if (p + 3 > lim || p == a) ok = 0;
    }
    out = PyBool_FromLong(ok);
done:
    PyBuffer_Release(&db);
    if (bs.obj) PyBuffer_Release(&bs);
    if (be.obj) PyBuffer_Release(&be);
    return out;
}

/* ---- The cascade's per-range loops (stages 3 and 4 through levels.LevelCursor, the Emitter) -- */

/* 1 if the list holds only bytes, each greater than the one before. */
static int sorted_bytes(PyObject *l) {
    Py_ssize_t n = PyList_GET_SIZE(l);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *k = PyList_GET_ITEM(l, j);
        if (!PyBytes_Check(k) || (j && bytes_cmp(PyList_GET_ITEM(l, j - 1), k) >= 0)) return 0;
    }
    return 1;
}

/* Append key and op + value (value NULL: the op byte alone) to the out lists. */
static int put_rec(PyObject *out_k, PyObject *out_v, PyObject *k, char op, PyObject *v) {
    Py_ssize_t vl = v ? PyBytes_GET_SIZE(v) : 0;
    PyObject *r = PyBytes_FromStringAndSize(NULL, vl + 1);
    if (!r) return -1;
    PyBytes_AS_STRING(r)[0] = op;
    if (vl) memcpy(PyBytes_AS_STRING(r) + 1, PyBytes_AS_STRING(v), (size_t)vl);
    int e = PyList_Append(out_k, k) < 0 || PyList_Append(out_v, r) < 0;
    Py_DECREF(r);
    return e ? -1 : 0;
}

static inline int bytes_eq(PyObject *a, PyObject *b) {
    Py_ssize_t l = PyBytes_GET_SIZE(a);
    return l == PyBytes_GET_SIZE(b) && (l == 0 || memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)l) == 0);
}

PyDoc_STRVAR(diff_doc,
             "diff(ok, ov, new, lo, hi, out_k, out_v) -> live: LevelCursor.merge_ranges' step for one "
             "range in C.  ok, ov: the range's stored records (sorted); new: a Splice (list of (key, "
             "value or None), sorted, inside [lo, hi)) or a tuple (keys, values) of the range's new "
             "records.  Appends the changes to out_k, out_v as a delta run holds them (PUT 0x01 + "
             "value; DEL 0x00 for a removed key; an unchanged record not at all) and returns the change "
             "in live records.  None, with nothing appended, for anything else (keys out of order or "
             "range, an item that is not bytes): the caller's Python code names it.");

static PyObject *c_diff(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyBytes_Check(args[3]) ||
        !PyBytes_Check(args[4]) || !PyList_Check(args[5]) || !PyList_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "diff(ok: list, ov: list, new, lo: bytes, hi: bytes, out_k: list, out_v: list)");
        return NULL;
    }
    PyObject *ok = args[0], *ov = args[1], *nw = args[2], *lo = args[3], *hi = args[4], *out_k = args[5],
             *out_v = args[6];
    Py_ssize_t no = PyList_GET_SIZE(ok), i = 0, j = 0, live = 0;
    if (PyList_GET_SIZE(ov) != no || !sorted_bytes(ok)) Py_RETURN_NONE;
    for (Py_ssize_t a = 0; a < no; a++)
        if (!PyBytes_Check(PyList_GET_ITEM(ov, a))) Py_RETURN_NONE;
    if (PyList_CheckExact(nw)) Py_RETURN_NONE; /* a plain list is not a Splice (a subclass) */
    if (PyList_Check(nw)) {
        /* A Splice: point edits.  Checked whole first, so a bad one appends nothing. */
        Py_ssize_t nn = PyList_GET_SIZE(nw);
        for (Py_ssize_t b = 0; b < nn; b++) {
            PyObject *t = PyList_GET_ITEM(nw, b);
            if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) Py_RETURN_NONE;
            PyObject *k = PyTuple_GET_ITEM(t, 0), *v = PyTuple_GET_ITEM(t, 1);
            if (!PyBytes_Check(k) || (v != Py_None && !PyBytes_Check(v))) Py_RETURN_NONE;
            if (bytes_cmp(k, lo) < 0 || bytes_cmp(k, hi) >= 0) Py_RETURN_NONE;
            if (b && bytes_cmp(PyTuple_GET_ITEM(PyList_GET_ITEM(nw, b - 1), 0), k) >= 0) Py_RETURN_NONE;
        }
        /* Nothing below calls Python code: the lists cannot change under the loop. */
        for (Py_ssize_t b = 0; b < nn; b++) {
            PyObject *t = PyList_GET_ITEM(nw, b), *k = PyTuple_GET_ITEM(t, 0), *v = PyTuple_GET_ITEM(t, 1);
            int c = 1;
            while (i < no && (c = bytes_cmp(PyList_GET_ITEM(ok, i), k)) < 0) i++;
            PyObject *o = (i < no && c == 0) ? PyList_GET_ITEM(ov, i) : NULL;
            int e = 0;
            if (v == Py_None) {
                if (o) {
                    e = put_rec(out_k, out_v, k, 0, NULL);
                    live--;
                }
            } else if (!o) {
                e = put_rec(out_k, out_v, k, 1, v);
                live++;
            } else if (!bytes_eq(o, v)) {
                e = put_rec(out_k, out_v, k, 1, v);
            }
            if (e) return NULL;
        }
        return PyLong_FromSsize_t(live);
    }
    if (!PyTuple_Check(nw) || PyTuple_GET_SIZE(nw) != 2) Py_RETURN_NONE;
    PyObject *rk = PyTuple_GET_ITEM(nw, 0), *rv = PyTuple_GET_ITEM(nw, 1);
    if (!PyList_Check(rk) || !PyList_Check(rv) || PyList_GET_SIZE(rk) != PyList_GET_SIZE(rv) || !sorted_bytes(rk))
        Py_RETURN_NONE;
    Py_ssize_t nn = PyList_GET_SIZE(rk);
    for (Py_ssize_t b = 0; b < nn; b++)
        if (!PyBytes_Check(PyList_GET_ITEM(rv, b))) Py_RETURN_NONE;
    if (nn && (bytes_cmp(PyList_GET_ITEM(rk, 0), lo) < 0 || bytes_cmp(PyList_GET_ITEM(rk, nn - 1), hi) >= 0))
        Py_RETURN_NONE;
    /* The range's new records: both sides sorted, walked together, only differences out. */
    while (i < no || j < nn) {
        int c = i == no ? 1 : (j == nn ? -1 : bytes_cmp(PyList_GET_ITEM(ok, i), PyList_GET_ITEM(rk, j)));
        int e;
        if (c < 0) {
            e = put_rec(out_k, out_v, PyList_GET_ITEM(ok, i++), 0, NULL);
            live--;
        } else if (c > 0) {
            e = put_rec(out_k, out_v, PyList_GET_ITEM(rk, j), 1, PyList_GET_ITEM(rv, j));
            j++;
            live++;
        } else {
            e = bytes_eq(PyList_GET_ITEM(ov, i), PyList_GET_ITEM(rv, j))
                    ? 0
                    : put_rec(out_k, out_v, PyList_GET_ITEM(rk, j), 1, PyList_GET_ITEM(rv, j));
            i++;
            j++;
        }
        if (e) return NULL;
    }
    return PyLong_FromSsize_t(live);
}

PyDoc_STRVAR(pack_edits_doc,
             "pack_edits(keys, values, prefix, n0) -> [key + prefix + (n0 + i).to_bytes(5, 'big') + value "
             "+ (len(key) + 8).to_bytes(2, 'little') for i, (key, value) in enumerate(zip(keys, values), "
             "1)]: edit records (webdb.writer.edits.pack, prefix = rank + producer), Emitter.add_many "
             "in C.  None for anything that does not fit (a counter past 5 bytes, a key past 65527 "
             "bytes, lists of different lengths, an item that is not bytes): the Python code raises.");

static PyObject *c_pack_edits(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "pack_edits(keys: list, values: list, prefix: bytes, n0: int)");
        return NULL;
    }
    PyObject *keys = args[0], *vals = args[1];
    long long n0 = PyLong_AsLongLong(args[3]);
    if (n0 == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys), pl = PyBytes_GET_SIZE(args[2]);
    const char *pre = PyBytes_AS_STRING(args[2]);
    if (PyList_GET_SIZE(vals) != n || n0 < 0 || (unsigned long long)n0 + (unsigned long long)n >= (1ULL << 40))
        Py_RETURN_NONE;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *k = PyList_GET_ITEM(keys, j), *v = PyList_GET_ITEM(vals, j);
        if (!PyBytes_Check(k) || !PyBytes_Check(v) || PyBytes_GET_SIZE(k) + 8 > 65535) Py_RETURN_NONE;
    }
    PyObject *res = PyList_New(n);
    if (!res) return NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *k = PyList_GET_ITEM(keys, j), *v = PyList_GET_ITEM(vals, j);
        Py_ssize_t kl = PyBytes_GET_SIZE(k), vl = PyBytes_GET_SIZE(v);
        PyObject *r = PyBytes_FromStringAndSize(NULL, kl + pl + 5 + vl + 2);
        if (!r) {
            Py_DECREF(res);
            return NULL;
        }
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(r);
        uint64_t s = (uint64_t)n0 + (uint64_t)j + 1;
        memcpy(p, PyBytes_AS_STRING(k), (size_t)kl);
        p += kl;
        memcpy(p, pre, (size_t)pl);
        p += pl;
        for (int b = 4; b >= 0; b--) *p++ = (unsigned char)(s >> (8 * b));
        memcpy(p, PyBytes_AS_STRING(v), (size_t)vl);
        p += vl;
        p[0] = (unsigned char)((kl + 8) & 0xff);
        p[1] = (unsigned char)((kl + 8) >> 8);
        PyList_SET_ITEM(res, j, r);
    }
    return res;
}

PyDoc_STRVAR(span_doc,
             "span(raw, n, lo, hi) -> (keys, values, next): the records with lo <= key < hi (hi None: to "
             "the end of the block) and the key of the first record past them, None if none is (Seeker."
             "range on one block, without splitting out the block's keys).");

static PyObject *c_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Block b;
    PyObject *keys = NULL, *vals = NULL, *nxt;
    if (nargs != 4 || !PyBytes_Check(args[2]) || (args[3] != Py_None && !PyBytes_Check(args[3]))) {
        PyErr_SetString(PyExc_TypeError, "span(raw: bytes, n: int, lo: bytes, hi: bytes | None)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (block_of(args[0], n, &b) < 0) return NULL;
    Py_ssize_t j1 = lower_bound(&b, 0, PyBytes_AS_STRING(args[2]), PyBytes_GET_SIZE(args[2]));
    Py_ssize_t j2 = args[3] == Py_None ? n : lower_bound(&b, j1, PyBytes_AS_STRING(args[3]), PyBytes_GET_SIZE(args[3]));
    if (split_into(&b, j1, j2, &keys, &vals) < 0) goto fail;
    if (j2 < n) {
        if (!(nxt = slice(&b, rec_start(&b, j2), key_end(&b, j2)))) goto fail;
    } else {
        nxt = Py_None;
        Py_INCREF(nxt);
    }
    return Py_BuildValue("(NNN)", keys, vals, nxt);
fail:
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    return NULL;
}

PyDoc_STRVAR(lbu_groups_doc,
             "lbu_groups(recs, final) -> (groups, used): stage 4's edit records (webdb.writer.cascade, "
             "key = url 0x00 tag [fromID(16) op], E.pack layout) cut into one group per url: (url + "
             "0x00, url + 0x01, (url, notice or None, [(fromID, op, value)])), the last notice of a url "
             "winning.  Unless final, the last url's group is left (it may go on in the next records): "
             "used is the index of its first record.  None for a record the Python code would fail on.");

static PyObject *c_lbu_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "lbu_groups(recs: list, final: bool)");
        return NULL;
    }
    PyObject *recs = args[0];
    int final = PyObject_IsTrue(args[1]);
    if (final < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(recs);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *r = PyList_GET_ITEM(recs, j);
        if (!PyBytes_Check(r)) Py_RETURN_NONE;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(r);
        Py_ssize_t L = PyBytes_GET_SIZE(r);
        if (L < 2) Py_RETURN_NONE;
        Py_ssize_t kl = p[L - 2] | (p[L - 1] << 8);
        const unsigned char *z = memchr(p, 0, (size_t)L);
        if (!z) Py_RETURN_NONE;
        Py_ssize_t i = z - p;
        if (i + 1 >= L) Py_RETURN_NONE;
        if (p[i + 1] == 0 ? kl >= L : i + 18 >= L) Py_RETURN_NONE;
    }
    /* Nothing below calls Python code: the list cannot change under the loop. */
    PyObject *groups = PyList_New(0), *url = NULL, *ledits = NULL, *notice = NULL;
    Py_ssize_t gstart = 0;
    if (!groups) return NULL;
    for (Py_ssize_t j = 0; j <= n; j++) {
        const unsigned char *p = NULL;
        Py_ssize_t L = 0, i = 0;
        if (j < n) {
            PyObject *r = PyList_GET_ITEM(recs, j);
            p = (const unsigned char *)PyBytes_AS_STRING(r);
            L = PyBytes_GET_SIZE(r);
            i = (const unsigned char *)memchr(p, 0, (size_t)L) - p;
        }
        int same = url && j < n && PyBytes_GET_SIZE(url) == i && memcmp(PyBytes_AS_STRING(url), p, (size_t)i) == 0;
        if (url && !same && (j < n || final)) {
            /* The group of url ends here. */
            Py_ssize_t ul = PyBytes_GET_SIZE(url);
            PyObject *a = PyBytes_FromStringAndSize(NULL, ul + 1), *b = a ? PyBytes_FromStringAndSize(NULL, ul + 1) : NULL;
            if (!b) {
                Py_XDECREF(a);
                goto fail;
            }
            memcpy(PyBytes_AS_STRING(a), PyBytes_AS_STRING(url), (size_t)ul);
            memcpy(PyBytes_AS_STRING(b), PyBytes_AS_STRING(url), (size_t)ul);
            PyBytes_AS_STRING(a)[ul] = 0;
            PyBytes_AS_STRING(b)[ul] = 1;
            PyObject *g = Py_BuildValue("(NN(OOO))", a, b, url, notice ? notice : Py_None, ledits);
            if (!g || PyList_Append(groups, g) < 0) {
                Py_XDECREF(g);
                goto fail;
            }
            Py_DECREF(g);
            Py_CLEAR(url);
            Py_CLEAR(ledits);
            Py_CLEAR(notice);
        }
        if (j == n) break;
        if (!same) {
            gstart = j;
            if (!(url = PyBytes_FromStringAndSize((const char *)p, i)) || !(ledits = PyList_New(0))) goto fail;
        }
        Py_ssize_t kl = p[L - 2] | (p[L - 1] << 8);
        if (p[i + 1] == 0) {
            Py_XSETREF(notice, PyLong_FromLong(p[kl]));
            if (!notice) goto fail;
        } else {
            Py_ssize_t fs = i + 2, fe = i + 18, vs = kl, ve = L - 2;
            if (vs > L) vs = L;
            if (ve < vs) ve = vs;
            PyObject *t = Py_BuildValue("(y#iy#)", (const char *)p + fs, fe - fs, (int)p[i + 18], (const char *)p + vs,
                                        ve - vs);
            if (!t || PyList_Append(ledits, t) < 0) {
                Py_XDECREF(t);
                goto fail;
            }
            Py_DECREF(t);
        }
    }
    /* Not final: the last url's group (still in url) is left for the next call. */
    Py_ssize_t used = url ? gstart : n;
    Py_XDECREF(url);
    Py_XDECREF(ledits);
    Py_XDECREF(notice);
    return Py_BuildValue("(Nn)", groups, used);
fail:
    Py_XDECREF(url);
    Py_XDECREF(ledits);
    Py_XDECREF(notice);
    Py_DECREF(groups);
    return NULL;
}

PyDoc_STRVAR(lbm_groups_doc,
             "lbm_groups(recs, final) -> (groups, used): stage 3's edit records (webdb.writer.cascade, "
             "key = md5(16) tag [url 0x00], E.pack layout) cut into one group per md5: (md5, the end of "
             "the md5's key range, (delete_all, [(url, value)])), of several adds of a url the last.  "
             "Unless final, the last md5's group is left (it may go on in the next records): used is "
             "the index of its first record.  None for a record the Python code would fail on.");

static PyObject *c_lbm_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "lbm_groups(recs: list, final: bool)");
        return NULL;
    }
    PyObject *recs = args[0];
    int final = PyObject_IsTrue(args[1]);
    if (final < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(recs);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *r = PyList_GET_ITEM(recs, j);
        if (!PyBytes_Check(r)) Py_RETURN_NONE;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(r);
        Py_ssize_t L = PyBytes_GET_SIZE(r);
        if (L < 17) Py_RETURN_NONE;
        Py_ssize_t kl = p[L - 2] | (p[L - 1] << 8);
        if (p[16] != 0 && (kl - 9 < 17 || kl > L - 2)) Py_RETURN_NONE;
    }
    /* Nothing below calls Python code: the list cannot change under the loop. */
    PyObject *groups = PyList_New(0), *md5 = NULL, *adds = NULL;
    Py_ssize_t gstart = 0;
    int del_all = 0;
    if (!groups) return NULL;
    for (Py_ssize_t j = 0; j <= n; j++) {
        const unsigned char *p = NULL;
        Py_ssize_t L = 0;
        if (j < n) {
            PyObject *r = PyList_GET_ITEM(recs, j);
            p = (const unsigned char *)PyBytes_AS_STRING(r);
            L = PyBytes_GET_SIZE(r);
        }
        int same = md5 && j < n && memcmp(PyBytes_AS_STRING(md5), p, 16) == 0;
        if (md5 && !same && (j < n || final)) {
            /* The group of md5 ends here; its range ends at the next prefix (_prefix_end). */
            unsigned char e[17];
            Py_ssize_t el = 16;
            memcpy(e, PyBytes_AS_STRING(md5), 16);
            while (el && e[el - 1] == 0xff) el--;
            if (el) e[el - 1]++;
            else {
                memset(e, 0xff, 17);
                el = 17;
            }
            PyObject *g = Py_BuildValue("(Oy#(OO))", md5, (const char *)e, el, del_all ? Py_True : Py_False, adds);
            if (!g || PyList_Append(groups, g) < 0) {
                Py_XDECREF(g);
                goto fail;
            }
            Py_DECREF(g);
            Py_CLEAR(md5);
            Py_CLEAR(adds);
        }
        if (j == n) break;
        if (!same) {
            gstart = j;
            del_all = 0;
            if (!(md5 = PyBytes_FromStringAndSize((const char *)p, 16)) || !(adds = PyList_New(0))) goto fail;
        }
        if (p[16] == 0) {
            del_all = 1;
            continue;
        }
        Py_ssize_t kl = p[L - 2] | (p[L - 1] << 8), na = PyList_GET_SIZE(adds);
        PyObject *t = Py_BuildValue("(y#y#)", (const char *)p + 17, kl - 9 - 17, (const char *)p + kl, L - 2 - kl);
        if (!t) goto fail;
        PyObject *last = na ? PyTuple_GET_ITEM(PyList_GET_ITEM(adds, na - 1), 0) : NULL;
        if (last && bytes_eq(last, PyTuple_GET_ITEM(t, 0))) {
            PyList_SetItem(adds, na - 1, t); /* the last add of a url wins; steals t */
        } else {
            int e = PyList_Append(adds, t);
            Py_DECREF(t);
            if (e < 0) goto fail;
        }
    }
    /* Not final: the last md5's group (still in md5) is left for the next call. */
    Py_ssize_t used = md5 ? gstart : n;
    Py_XDECREF(md5);
    Py_XDECREF(adds);
    return Py_BuildValue("(Nn)", groups, used);
fail:
    Py_XDECREF(md5);
    Py_XDECREF(adds);
    Py_DECREF(groups);
    return NULL;
}

/* pagecodec.link_same_but_flag: a[:8] == b[:8] and a[9:] == b[9:] (Python's clamped slices). */
static int same_but_flag(PyObject *a, PyObject *b) {
    Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b);
    const char *pa = PyBytes_AS_STRING(a), *pb = PyBytes_AS_STRING(b);
    Py_ssize_t ha = la < 8 ? la : 8, hb = lb < 8 ? lb : 8, ta = la > 9 ? la - 9 : 0, tb = lb > 9 ? lb - 9 : 0;
    return ha == hb && ta == tb && memcmp(pa, pb, (size_t)ha) == 0 && (ta == 0 || memcmp(pa + 9, pb + 9, (size_t)ta) == 0);
}

PyDoc_STRVAR(lbm_adds_doc,
             "lbm_adds(md5, ok, ov, adds, tail) -> (emit_keys, emit_values, splice): stage 3's link adds of "
             "one md5 (cascade._lbm_adds in C).  ok, ov: the md5's stored links (keys md5 + url, "
             "sorted); adds: (url, value) in increasing url order.  An add whose url is not stored, or "
             "whose value differs from the stored one but in the flag byte, is emitted (url + tail, "
             "value) and spliced (md5 + url, value).  None for input it declines (not sorted, a key "
             "without the md5, an item that is not bytes): the Python code runs.");

static PyObject *c_lbm_adds(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2]) ||
        !PyList_Check(args[3]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "lbm_adds(md5: bytes, ok: list, ov: list, adds: list, tail: bytes)");
        return NULL;
    }
    PyObject *md5 = args[0], *ok = args[1], *ov = args[2], *adds = args[3], *tail = args[4];
    Py_ssize_t ml = PyBytes_GET_SIZE(md5), no = PyList_GET_SIZE(ok), na = PyList_GET_SIZE(adds);
    Py_ssize_t tl = PyBytes_GET_SIZE(tail);
    if (PyList_GET_SIZE(ov) != no || !sorted_bytes(ok)) Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < no; i++) {
        PyObject *k = PyList_GET_ITEM(ok, i);
        if (!PyBytes_Check(PyList_GET_ITEM(ov, i)) || PyBytes_GET_SIZE(k) < ml ||
            memcmp(PyBytes_AS_STRING(k), PyBytes_AS_STRING(md5), (size_t)ml) != 0)
            Py_RETURN_NONE;
    }
    for (Py_ssize_t j = 0; j < na; j++) {
        PyObject *t = PyList_GET_ITEM(adds, j);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(t, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(t, 1)))
            Py_RETURN_NONE;
        if (j && bytes_cmp(PyTuple_GET_ITEM(PyList_GET_ITEM(adds, j - 1), 0), PyTuple_GET_ITEM(t, 0)) >= 0)
            Py_RETURN_NONE;
    }
    /* Nothing below calls Python code: the lists cannot change under the loop. */
    PyObject *ek = PyList_New(0), *ev = PyList_New(0), *sp = PyList_New(0);
    if (!ek || !ev || !sp) goto fail;
    Py_ssize_t i = 0;
    for (Py_ssize_t j = 0; j < na; j++) {
        PyObject *t = PyList_GET_ITEM(adds, j), *u = PyTuple_GET_ITEM(t, 0), *v = PyTuple_GET_ITEM(t, 1);
        Py_ssize_t ul = PyBytes_GET_SIZE(u);
        int c = 1;
        /* The stored key's url part (key[ml:]) against u. */
        while (i < no) {
            PyObject *k = PyList_GET_ITEM(ok, i);
            Py_ssize_t kl = PyBytes_GET_SIZE(k) - ml, m = kl < ul ? kl : ul;
            c = m ? memcmp(PyBytes_AS_STRING(k) + ml, PyBytes_AS_STRING(u), (size_t)m) : 0;
            if (!c) c = kl < ul ? -1 : (kl > ul ? 1 : 0);
            if (c >= 0) break;
            i++;
        }
        if (i < no && c == 0 && same_but_flag(PyList_GET_ITEM(ov, i), v)) continue;
        PyObject *a = PyBytes_FromStringAndSize(NULL, ul + tl), *b = a ? PyBytes_FromStringAndSize(NULL, ml + ul) : NULL;
        if (!b) {
            Py_XDECREF(a);
            goto fail;
        }
        memcpy(PyBytes_AS_STRING(a), PyBytes_AS_STRING(u), (size_t)ul);
        memcpy(PyBytes_AS_STRING(a) + ul, PyBytes_AS_STRING(tail), (size_t)tl);
        memcpy(PyBytes_AS_STRING(b), PyBytes_AS_STRING(md5), (size_t)ml);
        memcpy(PyBytes_AS_STRING(b) + ml, PyBytes_AS_STRING(u), (size_t)ul);
        PyObject *pair = PyTuple_Pack(2, b, v);
        int e = !pair || PyList_Append(ek, a) < 0 || PyList_Append(ev, v) < 0 || PyList_Append(sp, pair) < 0;
        Py_DECREF(a);
        Py_DECREF(b);
        Py_XDECREF(pair);
        if (e) goto fail;
    }
    return Py_BuildValue("(NNN)", ek, ev, sp);
fail:
    Py_XDECREF(ek);
    Py_XDECREF(ev);
    Py_XDECREF(sp);
    return NULL;
}

PyDoc_STRVAR(lbu_splice_doc,
             "lbu_splice(start, url, ledits, state_of, tail) -> (state, splice, fix): stage 4's link edits "
             "of a url without a target notice (cascade._lbu_splice in C).  ledits: (fromID, op, value) "
             "in fromID order; the last edit of a fromID wins (op 1 adds, 0 deletes).  If any link is "
             "added, state = state_of(url) (the target's state, called once), else -1.  State 0 (absent): "
             "(0, None, []).  Else the splice [(start + fromID, value or None)], each added link's flag "
             "byte set to the target's (1 if state is 2, else 0) where it differs, and fix the fromID + "
             "tail of each link whose flag was set.  None for input it declines (fromIDs out of order, "
             "an added value without a flag byte, an item of the wrong type).");

static PyObject *c_lbu_splice(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[2]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "lbu_splice(start: bytes, url: bytes, ledits: list, state_of, tail: bytes)");
        return NULL;
    }
    PyObject *start = args[0], *tail = args[4], *res = NULL, *sp = NULL, *fix = NULL;
    /* state_of runs Python code: the edits are read from a tuple copy, which it cannot change. */
    PyObject *ed = PyList_AsTuple(args[2]);
    if (!ed) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(ed), sl = PyBytes_GET_SIZE(start), tl = PyBytes_GET_SIZE(tail);
    int any_add = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *t = PyTuple_GET_ITEM(ed, j);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3 || !PyBytes_Check(PyTuple_GET_ITEM(t, 0)) ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(t, 1)) || !PyBytes_Check(PyTuple_GET_ITEM(t, 2)))
            goto decline;
        if (j && bytes_cmp(PyTuple_GET_ITEM(PyTuple_GET_ITEM(ed, j - 1), 0), PyTuple_GET_ITEM(t, 0)) > 0) goto decline;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *t = PyTuple_GET_ITEM(ed, j);
        long op = PyLong_AsLong(PyTuple_GET_ITEM(t, 1));
        if (op == -1 && PyErr_Occurred()) goto done;
        int last = j + 1 == n || !bytes_eq(PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(PyTuple_GET_ITEM(ed, j + 1), 0));
        if (op == 1 && last) {
            any_add = 1;
            if (PyBytes_GET_SIZE(PyTuple_GET_ITEM(t, 2)) < 9) goto decline;
        }
    }
    long state = -1;
    if (any_add) {
        PyObject *st = PyObject_CallOneArg(args[3], args[1]);
        if (!st) goto done;
        state = PyLong_AsLong(st);
        Py_DECREF(st);
        if (state == -1 && PyErr_Occurred()) goto done;
    }
    if (!(fix = PyList_New(0))) goto done;
    if (state == 0) {
        res = Py_BuildValue("(lOO)", state, Py_None, fix);
        goto done;
    }
    unsigned char flag = state == 2 ? 1 : 0;
    if (!(sp = PyList_New(0))) goto done;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *t = PyTuple_GET_ITEM(ed, j), *fid = PyTuple_GET_ITEM(t, 0);
        /* The last edit of a fromID wins: skip all but it. */
        if (j + 1 < n && bytes_eq(fid, PyTuple_GET_ITEM(PyTuple_GET_ITEM(ed, j + 1), 0))) continue;
        Py_ssize_t fl = PyBytes_GET_SIZE(fid);
        PyObject *v = PyTuple_GET_ITEM(t, 2), *nv, *k = PyBytes_FromStringAndSize(NULL, sl + fl);
        if (!k) goto fail;
        memcpy(PyBytes_AS_STRING(k), PyBytes_AS_STRING(start), (size_t)sl);
        memcpy(PyBytes_AS_STRING(k) + sl, PyBytes_AS_STRING(fid), (size_t)fl);
        if (PyLong_AsLong(PyTuple_GET_ITEM(t, 1)) != 1) {
            nv = Py_None;
            Py_INCREF(nv);
        } else if (state > 0 && (PyBytes_AS_STRING(v)[8] & 1) != flag) {
            /* pagecodec.link_with_flags: the flags byte replaced; and a fix-up for stage 5. */
            Py_ssize_t vl = PyBytes_GET_SIZE(v);
            PyObject *fk = PyBytes_FromStringAndSize(NULL, fl + tl);
            nv = fk ? PyBytes_FromStringAndSize(PyBytes_AS_STRING(v), vl) : NULL;
            if (!nv || PyList_Append(fix, fk) < 0) {
                Py_XDECREF(fk);
                Py_XDECREF(nv);
                Py_DECREF(k);
                goto fail;
            }
            memcpy(PyBytes_AS_STRING(fk), PyBytes_AS_STRING(fid), (size_t)fl);
            memcpy(PyBytes_AS_STRING(fk) + fl, PyBytes_AS_STRING(tail), (size_t)tl);
            Py_DECREF(fk);
            PyBytes_AS_STRING(nv)[8] = (char)flag;
        } else {
            nv = v;
            Py_INCREF(nv);
        }
        PyObject *pair = PyTuple_Pack(2, k, nv);
        Py_DECREF(k);
        Py_DECREF(nv);
        if (!pair || PyList_Append(sp, pair) < 0) {
            Py_XDECREF(pair);
            goto fail;
        }
        Py_DECREF(pair);
    }
    res = Py_BuildValue("(lOO)", state, sp, fix);
    goto done;
decline:
    res = Py_None;
    Py_INCREF(res);
    goto done;
fail:
    res = NULL;
done:
    Py_DECREF(ed);
    Py_XDECREF(sp);
    Py_XDECREF(fix);
    return res;
}

/* ---- lz4 pieces (codec 3, docs/format.md §1.1): a block's records compressed in pieces ------
 *
 * Body: the m pieces back to back (each an lz4 block with its u32 size prefix whose raw bytes
 * are a block (§1.1) of the piece's records), then the header: m (u32), m x (compressed length,
 * record count, CRC-32 of the compressed piece) (u32 each), the first key of pieces 1..m-1
 * (length u32, bytes); then the header's length and its CRC-32 (u32 each).  The header is at
 * the end so that a lookup reads the block's tail (trailer, header), then only the pieces its
 * range reaches, each checked by its own CRC; a whole-block read checks the block's CRC, the
 * header's and every piece's, and gets the same raw bytes as an lz4 block of those records. */

typedef struct {
    Py_ssize_t m;
    const unsigned char *tab;  /* m x (clen, count, crc) */
    const unsigned char **key; /* first key of piece i (i >= 1) */
    Py_ssize_t *klen;
    Py_ssize_t *at;   /* offset of piece i in the body; at[m] = where the header starts */
    Py_ssize_t total; /* sum of counts */
} Pieces;

static void pieces_release(Pieces *ps) {
    PyMem_Free(ps->key);
    PyMem_Free(ps->klen);
    PyMem_Free(ps->at);
    ps->key = NULL;
    ps->klen = NULL;
    ps->at = NULL;
}

/* CRC-32 (zlib.crc32, called) of p[0:len] into *out: 0, or -1 on error. */
static int crc_of(PyObject *crc32, const unsigned char *p, Py_ssize_t len, uint32_t *out) {
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
static int header_of(PyObject *crc32, const unsigned char *p, Py_ssize_t end, Py_ssize_t body_len, Pieces *ps) {
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

/* Piece i (its compressed bytes at s, checked against its CRC) decompressed into *raw (a new
 * reference) as a Block: 1 if sound (its count is the table's), 0 if not, -1 on error. */
static int piece_block(PyObject *crc32, PyObject *decompress, const unsigned char *s, const Pieces *ps, Py_ssize_t i,
                       PyObject **raw, Block *b) {
    Py_ssize_t cl = ps->at[i + 1] - ps->at[i];
    uint32_t c;
    *raw = NULL;
    if (crc_of(crc32, s, cl, &c) < 0) return -1;
    if (c != rd32(ps->tab + 12 * i + 8) || rd32(s) > MAX_BLOCK_BYTES) return 0;
    PyObject *view = PyMemoryView_FromMemory((char *)s, cl, PyBUF_READ);
    if (!view) return -1;
    *raw = PyObject_CallOneArg(decompress, view);
    Py_DECREF(view);
    if (!*raw) return damaged_error() ? 0 : -1;
    if (!PyBytes_Check(*raw)) goto bad;
    const unsigned char *r = (const unsigned char *)PyBytes_AS_STRING(*raw);
    Py_ssize_t rl = PyBytes_GET_SIZE(*raw), n = rl < 4 ? 0 : (Py_ssize_t)rd32(r + rl - 4);
    if (rl < 4 || n < 1 || 8 * n > rl - 4 || (Py_ssize_t)rd32(r + rl - 8) != rl - 4 - 8 * n ||
        n != (Py_ssize_t)rd32(ps->tab + 12 * i + 4))
        goto bad;
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

PyDoc_STRVAR(unpack_pieces_doc,
             "unpack_pieces(data, crc32, decompress) -> (raw, n): an lz4-pieces block (codec 3) whose "
             "checksums (the block's, the header's, every piece's), piece table, pieces and first keys "
             "are sound, as the raw bytes of one block of its records (what unpack gives for an lz4 "
             "block); None for anything else.");

static PyObject *c_unpack_pieces(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
static void pieces_span(const Pieces *ps, PyObject *start, PyObject *stop, Py_ssize_t *p0, Py_ssize_t *p1) {
    *p0 = *p1 = 0;
    for (Py_ssize_t i = 1; i < ps->m; i++) {
        if (cmp_piece(ps, i, PyBytes_AS_STRING(start), PyBytes_GET_SIZE(start)) <= 0) *p0 = i;
        if (cmp_piece(ps, i, PyBytes_AS_STRING(stop), PyBytes_GET_SIZE(stop)) < 0) *p1 = i;
    }
}

/* The records in [start, stop) of pieces p0..p1, whose compressed bytes start at s (piece p0's
 * first byte), as (keys, values, total count); None if a piece is not sound. */
static PyObject *pieces_range(PyObject *crc32, PyObject *decompress, const unsigned char *s, const Pieces *ps,
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
        Py_ssize_t hi = i == p1 ? lower_bound(&b, lo, ek, el) : b.n;
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

PyDoc_STRVAR(unpack_range_pieces_doc,
             "unpack_range_pieces(data, crc32, decompress, start, stop) -> (keys, values, n): "
             "unpack_range of an lz4-pieces block (codec 3), checking the header's CRC and "
             "decompressing only the pieces that can hold keys in [start, stop), each checked by its "
             "CRC; None where one of them is not sound.");

static PyObject *c_unpack_range_pieces(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

PyDoc_STRVAR(seal_pieces_doc,
             "seal_pieces(raw, compress, piece_bytes, crc32) -> body: the lz4-pieces body (codec 3) of "
             "the raw block raw: m = len(raw) // piece_bytes pieces, cut at the first record boundary "
             "where a piece's records and offsets reach ceil(len(raw) / m), each compressed by compress "
             "(lz4.block.compress), then the header; None if m < 2 or that gives one piece (then: "
             "plain lz4).");

static PyObject *c_seal_pieces(PyObject *self, PyObject *args) {
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

/* ---- a table's index searched in place (TableReader._ix): no lists of keys built ------------
 *
 * An index block (format.md §1.2) has one record per data block: key = first key, value = offset
 * u64, length u32, count u32, then the last key.  A reader that only looks up short ranges keeps
 * the decompressed index block as it is and searches it here. */


static inline uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* The last key of index entry j (its value past the 16 fixed bytes) compared with key. */
static inline int cmp_last(const Block *b, Py_ssize_t j, const char *key, Py_ssize_t klen) {
    Py_ssize_t s = key_end(b, j) + 16, e = rec_end(b, j);
    clamp(b, &s, &e);
    Py_ssize_t l = e - s, m = l < klen ? l : klen;
    int c = m ? memcmp(b->raw + s, key, (size_t)m) : 0;
    if (c) return c;
    return l < klen ? -1 : (l > klen ? 1 : 0);
}

/* Index of the first entry in lo..hi-1 whose first key is > key (bisect_right), or >= key
 * when right is 0 (bisect_left). */
static Py_ssize_t bisect_first(const Block *b, Py_ssize_t lo, Py_ssize_t hi, const char *key, Py_ssize_t klen, int right) {
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        int c = cmp_key(b, mid, key, klen);
        if (right ? c <= 0 : c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

PyDoc_STRVAR(index_check_doc,
             "index_check(raw, n, data_end, count) -> bool: every entry of the index block raw (n "
             "entries) as TableReader's index load checks it: a value of at least 16 bytes, blocks "
             "back to back from offset 0 to data_end, each at least a trailer long, keys in order "
             "within and across blocks, counts adding up to count.");

static PyObject *c_index_check(PyObject *self, PyObject *args) {
    PyObject *raw;
    Py_ssize_t n;
    unsigned long long data_end, count, pos = 0, total = 0;
    Block b;
    if (!PyArg_ParseTuple(args, "OnKK", &raw, &n, &data_end, &count) || block_of(raw, n, &b) < 0) return NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t s = rec_start(&b, j), ke = key_end(&b, j), re = rec_end(&b, j);
        if (s > ke || ke + 16 > re || re > b.len - 4 - 8 * n) Py_RETURN_FALSE;
        const unsigned char *v = b.raw + ke;
        if (rd64(v) != pos || rd32(v + 8) < 5) Py_RETURN_FALSE;
        pos += rd32(v + 8);
        total += rd32(v + 12);
        /* last key >= first key; first key > the previous entry's last key */
        if (cmp_last(&b, j, (const char *)b.raw + s, ke - s) < 0) Py_RETURN_FALSE;
        if (j) {
            Py_ssize_t ps = key_end(&b, j - 1) + 16, pe = rec_end(&b, j - 1);
            if (cmp_key(&b, j, (const char *)b.raw + ps, pe - ps) <= 0) Py_RETURN_FALSE;
        }
    }
    if (pos != data_end || total != count) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* len bytes of fd at off (the GIL released while reading): a new bytes object; Py_None (a
 * new reference) if the file ends before; NULL on error. */
static PyObject *read_at(int fd, uint64_t off, Py_ssize_t len) {
    PyObject *data = PyBytes_FromStringAndSize(NULL, len);
    Py_ssize_t got;
    if (!data) return NULL;
    Py_BEGIN_ALLOW_THREADS got = pread(fd, PyBytes_AS_STRING(data), (size_t)len, (off_t)off);
    Py_END_ALLOW_THREADS if (got < 0) {
        Py_DECREF(data);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (got != len) {
        Py_DECREF(data);
        Py_RETURN_NONE;
    }
    return data;
}

/* What a lookup reads of a block first when it expects lz4 pieces: the trailer and header. */
#define TAIL_BYTES 1024

/* The records in [start, stop) of the codec-3 block at off (len bytes on disk), reading its
 * tail, then only the pieces the range reaches: (keys, values, n); Py_None if it is not sound;
 * NotImplemented if it is not a codec-3 block (read it whole); NULL on error. */
static PyObject *short_pieces(int fd, uint64_t off, Py_ssize_t len, PyObject *start, PyObject *stop, PyObject *crc32,
                              PyObject *decompress) {
    Py_ssize_t t = len < TAIL_BYTES ? len : TAIL_BYTES, p0, p1;
    PyObject *tail = read_at(fd, off + (uint64_t)(len - t), t), *res = NULL;
    Pieces ps;
    if (!tail || tail == Py_None) return tail;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(tail);
    if (t < 13 || p[t - 5] != 3) {
        Py_DECREF(tail);
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t hlen = (Py_ssize_t)rd32(p + t - 13);
    if (hlen + 13 > t && hlen + 13 <= len) { /* a header longer than the tail read: read it all */
        Py_DECREF(tail);
        t = hlen + 13;
        if (!(tail = read_at(fd, off + (uint64_t)(len - t), t)) || tail == Py_None) return tail;
        p = (const unsigned char *)PyBytes_AS_STRING(tail);
    }
    int r = header_of(crc32, p, t - 5, len - 5, &ps);
    if (r <= 0) {
        Py_DECREF(tail);
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    pieces_span(&ps, start, stop, &p0, &p1);
    PyObject *span = read_at(fd, off + (uint64_t)ps.at[p0], ps.at[p1 + 1] - ps.at[p0]);
    if (span && span != Py_None) {
        res = pieces_range(crc32, decompress, (const unsigned char *)PyBytes_AS_STRING(span), &ps, p0, p1, start, stop);
        Py_DECREF(span);
    } else {
        res = span;
    }
    pieces_release(&ps);
    Py_DECREF(tail);
    return res;
}

PyDoc_STRVAR(short_file_doc,
             "short_file(raw, n, fd, start, stop, most, crc32, decompress, pieces) -> (keys, values) | "
             "None | False: TableReader.short_range of a table whose index block is raw (n entries, "
             "checked by index_check): the blocks that can hold keys in [start, stop) found in the "
             "index; each block read from fd and unpacked (unpack_range) — or, if pieces (a file "
             "written in lz4 pieces), its tail read first (trailer and header), then only the pieces "
             "the range reaches, each checked by its CRC (unpack_range_pieces); None if more than most "
             "blocks; False if a block is not sound (the caller's Python path names the fault).");

/* short_file's work for one file: start and stop are bytes. */
static PyObject *short_one(PyObject *raw, Py_ssize_t n, long fd, PyObject *start, PyObject *stop, Py_ssize_t most,
                           PyObject *crc32, PyObject *decompress, int pieces) {
    Block ix;
    if (block_of(raw, n, &ix) < 0) return NULL;
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "short_file: bad file descriptor");
        return NULL;
    }
    const char *sk = PyBytes_AS_STRING(start), *ek = PyBytes_AS_STRING(stop);
    Py_ssize_t sl = PyBytes_GET_SIZE(start), el = PyBytes_GET_SIZE(stop);
    /* TableReader.blocks_of_range */
    Py_ssize_t b0 = bisect_first(&ix, 0, n, sk, sl, 1) - 1;
    if (b0 < 0)
        b0 = 0;
    else if (cmp_last(&ix, b0, sk, sl) < 0)
        b0++;
    Py_ssize_t hi = b0 + most + 1 < n ? b0 + most + 1 : n;
    Py_ssize_t b1 = b0 < hi ? bisect_first(&ix, b0, hi, ek, el, 0) : b0;
    if (b1 - b0 > most) Py_RETURN_NONE;
    PyObject *keys = NULL, *vals = NULL, *res = NULL;
    for (Py_ssize_t i = b0; i < b1; i++) {
        const unsigned char *v = ix.raw + key_end(&ix, i);
        uint64_t off = rd64(v);
        Py_ssize_t len = (Py_ssize_t)rd32(v + 8);
        PyObject *r = pieces ? short_pieces((int)fd, off, len, start, stop, crc32, decompress) : Py_NotImplemented;
        if (r == Py_NotImplemented) {
            if (pieces) Py_DECREF(r);
            PyObject *data = read_at((int)fd, off, len);
            if (data && data != Py_None) {
                PyObject *a[5] = {data, crc32, decompress, start, stop};
                r = len >= 5 && PyBytes_AS_STRING(data)[len - 5] == 3 ? c_unpack_range_pieces(NULL, a, 5)
                                                                        : c_unpack_range(NULL, a, 5);
                Py_DECREF(data);
            } else {
                r = data;
            }
        }
        if (!r) goto done;
        if (r == Py_None || PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 2)) != (Py_ssize_t)rd32(v + 12)) {
            Py_DECREF(r);
            res = Py_False;
            Py_INCREF(res);
            goto done;
        }
        if (!keys) {
            keys = PyTuple_GET_ITEM(r, 0);
            vals = PyTuple_GET_ITEM(r, 1);
            Py_INCREF(keys);
            Py_INCREF(vals);
        } else if (PyList_SetSlice(keys, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, PyTuple_GET_ITEM(r, 0)) < 0 ||
                   PyList_SetSlice(vals, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, PyTuple_GET_ITEM(r, 1)) < 0) {
            Py_DECREF(r);
            goto done;
        }
        Py_DECREF(r);
    }
    if (!keys) {
        keys = PyList_New(0);
        vals = PyList_New(0);
        if (!keys || !vals) goto done;
    }
    res = PyTuple_Pack(2, keys, vals);
done:
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    return res;
}

static PyObject *c_short_file(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyBytes_Check(args[3]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "short_file(raw, n, fd, start: bytes, stop: bytes, most, crc32, decompress, pieces)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]), most = PyLong_AsSsize_t(args[5]);
    long fd = PyLong_AsLong(args[2]);
    int pieces = PyObject_IsTrue(args[8]);
    if (PyErr_Occurred() || pieces < 0) return NULL;
    return short_one(args[0], n, fd, args[3], args[4], most, args[6], args[7], pieces);
}

PyDoc_STRVAR(short_levels_doc,
             "short_levels(files, start, stop, most, crc32, decompress) -> (keys, values) | None | False: "
             "Levels.short_range in one call: files are (raw, n, fd, pieces, run) of the files of a "
             "table's levels, newest first (short_file's arguments, run: a delta run); each file's "
             "records in [start, stop) as short_file gives them, merged as merge does.  None if a "
             "file's range reaches more than most blocks; False if a block is not sound or the "
             "records are not as merge wants them (the caller's Python path names the fault).");

static PyObject *c_short_levels(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyTuple_Check(args[0]) || !PyBytes_Check(args[1]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "short_levels(files: tuple, start: bytes, stop: bytes, most, crc32, decompress)");
        return NULL;
    }
    Py_ssize_t most = PyLong_AsSsize_t(args[3]), m = PyTuple_GET_SIZE(args[0]);
    if (most == -1 && PyErr_Occurred()) return NULL;
    if (m > MERGE_MAX) Py_RETURN_FALSE;
    PyObject *parts = PyList_New(0), *res = NULL;
    int base_only = 1;
    if (!parts) return NULL;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *f = PyTuple_GET_ITEM(args[0], i);
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 5) {
            PyErr_SetString(PyExc_TypeError, "short_levels: a file is (raw, n, fd, pieces, run)");
            goto done;
        }
        Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(f, 1));
        long fd = PyLong_AsLong(PyTuple_GET_ITEM(f, 2));
        int pieces = PyObject_IsTrue(PyTuple_GET_ITEM(f, 3)), run = PyObject_IsTrue(PyTuple_GET_ITEM(f, 4));
        if (PyErr_Occurred() || pieces < 0 || run < 0) goto done;
        PyObject *r = short_one(PyTuple_GET_ITEM(f, 0), n, fd, args[1], args[2], most, args[4], args[5], pieces);
        if (!r || r == Py_None || r == Py_False) {
            res = r;
            goto done;
        }
        PyObject *k = PyTuple_GET_ITEM(r, 0), *t = NULL;
        int e = PyList_GET_SIZE(k) &&
                (!(t = PyTuple_Pack(3, k, PyTuple_GET_ITEM(r, 1), run ? Py_True : Py_False)) || PyList_Append(parts, t) < 0);
        Py_XDECREF(t);
        Py_DECREF(r);
        if (e) goto done;
        if (PyList_GET_SIZE(k) && run) base_only = 0;
    }
    Py_ssize_t np = PyList_GET_SIZE(parts);
    if (np == 0) {
        PyObject *a = PyList_New(0), *b = PyList_New(0);
        if (a && b) res = PyTuple_Pack(2, a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
    } else if (np == 1 && base_only) {
        PyObject *t = PyList_GET_ITEM(parts, 0);
        res = PyTuple_Pack(2, PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1));
    } else {
        PyObject *a[1] = {parts};
        res = c_merge(NULL, a, 1);
        if (res == Py_None) {
            Py_DECREF(res);
            res = Py_False;
            Py_INCREF(res);
        }
    }
done:
    Py_DECREF(parts);
    return res;
}

static PyMethodDef methods[] = {
    {"index_entries", c_index_entries, METH_VARARGS, index_entries_doc},
    {"unpack", (PyCFunction)(void (*)(void))c_unpack, METH_FASTCALL, unpack_doc},
    {"unpack_range", (PyCFunction)(void (*)(void))c_unpack_range, METH_FASTCALL, unpack_range_doc},
    {"merge", (PyCFunction)(void (*)(void))c_merge, METH_FASTCALL, merge_doc},
    {"links", (PyCFunction)(void (*)(void))c_links, METH_FASTCALL, links_doc},
    {"find", c_find, METH_VARARGS, find_doc},
    {"get", c_get, METH_VARARGS, get_doc},
    {"split", c_split, METH_VARARGS, split_doc},
    {"values", c_values, METH_VARARGS, values_doc},
    {"keys", c_keys, METH_VARARGS, keys_doc},
    {"lens", c_lens, METH_VARARGS, lens_doc},
    {"build", c_build, METH_VARARGS, build_doc},
    {"build_run", c_build_run, METH_VARARGS, build_run_doc},
    {"gather_blocks", c_gather_blocks, METH_VARARGS, gather_blocks_doc},
    {"hash_values", c_hash_values, METH_VARARGS, hash_values_doc},
    {"unhex", c_unhex, METH_VARARGS, unhex_doc},
    {"has_control", c_has_control, METH_VARARGS, has_control_doc},
    {"sort_records", c_sort_records, METH_O, sort_records_doc},
    {"ifn_first", c_ifn_first, METH_VARARGS, ifn_first_doc},
    {"join_run", c_join_run, METH_VARARGS, join_run_doc},
    {"link_records", (PyCFunction)(void (*)(void))c_link_records, METH_FASTCALL, link_records_doc},
    {"urls_ok", (PyCFunction)(void (*)(void))c_urls_ok, METH_FASTCALL, urls_ok_doc},
    {"diff", (PyCFunction)(void (*)(void))c_diff, METH_FASTCALL, diff_doc},
    {"pack_edits", (PyCFunction)(void (*)(void))c_pack_edits, METH_FASTCALL, pack_edits_doc},
    {"span", (PyCFunction)(void (*)(void))c_span, METH_FASTCALL, span_doc},
    {"lbu_groups", (PyCFunction)(void (*)(void))c_lbu_groups, METH_FASTCALL, lbu_groups_doc},
    {"lbm_groups", (PyCFunction)(void (*)(void))c_lbm_groups, METH_FASTCALL, lbm_groups_doc},
    {"lbm_adds", (PyCFunction)(void (*)(void))c_lbm_adds, METH_FASTCALL, lbm_adds_doc},
    {"lbu_splice", (PyCFunction)(void (*)(void))c_lbu_splice, METH_FASTCALL, lbu_splice_doc},
    {"unpack_pieces", (PyCFunction)(void (*)(void))c_unpack_pieces, METH_FASTCALL, unpack_pieces_doc},
    {"unpack_range_pieces", (PyCFunction)(void (*)(void))c_unpack_range_pieces, METH_FASTCALL, unpack_range_pieces_doc},
    {"seal_pieces", c_seal_pieces, METH_VARARGS, seal_pieces_doc},
    {"index_check", c_index_check, METH_VARARGS, index_check_doc},
    {"short_file", (PyCFunction)(void (*)(void))c_short_file, METH_FASTCALL, short_file_doc},
    {"short_levels", (PyCFunction)(void (*)(void))c_short_levels, METH_FASTCALL, short_levels_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "webdb.tables._blockc",
    .m_doc = "The block codec's inner loops in C; webdb/tables/block.py is the reference and the fallback.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__blockc(void) { return PyModule_Create(&module); }
