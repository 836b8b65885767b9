/* ---- a raw block read in place and built (RawBlock, encode_block, encode_run) -------------- */

#include "blockc.h"
#include <structmember.h> /* T_OBJECT_EX, READONLY (links: a slots class filled in place) */
#include <dlfcn.h>      /* dlopen, dlsym (use_lz4, use_crc32) */

/* Parse (raw: bytes, n: int) into b; n must fit the block (unpack_block checked it already, this
 * guards a caller that did not). */
int block_of(PyObject *raw, Py_ssize_t n, Block *b) {
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

/* Index of the first record in lo..n-1 whose key is >= key. */
Py_ssize_t lower_bound(const Block *b, Py_ssize_t lo, const char *key, Py_ssize_t klen) {
    return search(b, lo, b->n, key, klen, cmp_key, 0);
}

PyObject *slice(const Block *b, Py_ssize_t s, Py_ssize_t e) {
    clamp(b, &s, &e);
    return PyBytes_FromStringAndSize((const char *)b->raw + s, e - s);
}

SHARED_PYDOC(find_doc, "find(raw, n, key) -> index of the first record whose key is >= key (RawBlock.find).");

PyObject *c_find(PyObject *self, PyObject *args) {
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

SHARED_PYDOC(get_doc, "get(raw, n, key) -> the value of key, or None (RawBlock.get).");

PyObject *c_get(PyObject *self, PyObject *args) {
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
int split_into(const Block *b, Py_ssize_t lo, Py_ssize_t hi, PyObject **keys, PyObject **vals) {
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

SHARED_PYDOC(split_doc, "split(raw, n, lo=0, hi=None) -> (keys, values) of records lo..hi-1 (RawBlock.split).");

PyObject *c_split(PyObject *self, PyObject *args) {
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

SHARED_PYDOC(values_doc, "values(raw, n, lo, hi) -> values of records lo..hi-1 (RawBlock.values).");

PyObject *c_values(PyObject *self, PyObject *args) {
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

SHARED_PYDOC(keys_doc, "keys(raw, n) -> every record key (RawBlock.keys).");

PyObject *c_keys(PyObject *self, PyObject *args) {
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

SHARED_PYDOC(lens_doc, "lens(raw, n) -> key and value lengths, interleaved (RawBlock.lens).");

PyObject *c_lens(PyObject *self, PyObject *args) {
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

PyObject *too_big(void) {
    PyErr_SetString(PyExc_OverflowError, "block records exceed 4 GiB (u32 offsets)");
    return NULL;
}

SHARED_PYDOC(build_doc,
             "build(keys, vals) -> the uncompressed block of these records: records, offsets, count "
             "(what encode_block seals).");

PyObject *c_build(PyObject *self, PyObject *args) {
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

SHARED_PYDOC(build_run_doc,
             "build_run(data, lens) -> (raw, total): data followed by the offsets and count of the "
             "records whose key and value lengths lens gives, interleaved (what encode_run seals); "
             "total is the sum of lens.");

PyObject *c_build_run(PyObject *self, PyObject *args) {
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

SHARED_PYDOC(run_cuts_doc,
             "run_cuts(lens, size, block_size) -> [j, end, j, end, ...]: where TableWriter.add_run "
             "ends blocks in a run of records whose key and value lengths lens gives, interleaved, "
             "after size bytes already pending: a block ends after record j-1 (j counts records, end "
             "is the byte offset in the run's data) where its records' lengths plus 8 each reach "
             "block_size, the next block then starting empty.  Only the cuts; the tail after the "
             "last stays pending.");

PyObject *c_run_cuts(PyObject *self, PyObject *args) {
    PyObject *lens, *out;
    Py_ssize_t size, bs;
    if (!PyArg_ParseTuple(args, "O!nn:run_cuts", &PyList_Type, &lens, &size, &bs)) return NULL;
    Py_ssize_t m = PyList_GET_SIZE(lens);
    if (m & 1) {
        PyErr_SetString(PyExc_ValueError, "lens holds an odd number of lengths");
        return NULL;
    }
    if (!(out = PyList_New(0))) return NULL;
    Py_ssize_t acc = size, at = 0;
    for (Py_ssize_t j = 0; j < m; j += 2) {
        PyObject *a = PyList_GET_ITEM(lens, j), *b = PyList_GET_ITEM(lens, j + 1);
        if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b)) {
            PyErr_SetString(PyExc_TypeError, "lens must hold ints");
            goto fail;
        }
        Py_ssize_t kl = PyLong_AsSsize_t(a), vl = kl < 0 ? -1 : PyLong_AsSsize_t(b);
        if (kl < 0 || vl < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative length");
            goto fail;
        }
        at += kl + vl;
        acc += kl + vl + 8;
        if (acc >= bs) {
            PyObject *x = PyLong_FromSsize_t((j >> 1) + 1), *y = x ? PyLong_FromSsize_t(at) : NULL;
            int e = !y || PyList_Append(out, x) < 0 || PyList_Append(out, y) < 0;
            Py_XDECREF(x);
            Py_XDECREF(y);
            if (e) goto fail;
            acc = 0;
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- the read path of a lookup: unpack a block, merge levels, build links ------------------ */

/* One byte more of a CRC-32 (zlib's polynomial, as zlib.crc32): the codec byte the block's
 * checksum covers after its body. */
uint32_t crc32_byte(uint32_t crc, unsigned char c) {
    crc = ~crc ^ c;
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    return ~crc;
}

/* An exception a damaged block can raise from the decompressor (not MemoryError, not a
 * KeyboardInterrupt): forgotten, since the caller reruns the Python code, which raises it again
 * as the CorruptionError naming the block. */
int damaged_error(void) {
    if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* ---- lz4 decompression: lz4.block.decompress, or the function it calls, called directly ---
 *
 * Every block and piece a read decodes went through a Python call of lz4.block.decompress: a
 * memoryview, the call's argument parsing, a release of the GIL and a fresh bytes object each
 * time (~0.5 us a piece, a tenth of an inlinks lookup); and it decompresses into memory of its
 * own, then copies that into the bytes it returns: for a table's index block (megabytes) twice
 * the fresh pages, at a few microseconds each on a VM, most of a reader's first lookup of the
 * table.  use_lz4 finds the C function that callable calls, LZ4_decompress_safe, in the lz4
 * package's own extension (already loaded), and lz4_bytes calls it with the checks
 * lz4.block.decompress makes, straight into the bytes object it returns: the same function on
 * the same bytes gives the same bytes, and what it refuses is refused here (an exception, which
 * the callers treat as a damaged block, as they treat the callable's). */

static int (*lz4_safe)(const char *src, char *dst, int srclen, int dstcap);
static PyObject *lz4_fn; /* the callable lz4_safe stands for */

SHARED_PYDOC(use_lz4_doc,
             "use_lz4(decompress, path) -> bool: call LZ4_decompress_safe of the loaded extension at path "
             "(lz4.block._block) directly wherever decompress (lz4.block.decompress) is passed; False "
             "(and the callable stays in use) if that extension does not export it.");

PyObject *c_use_lz4(PyObject *self, PyObject *args) {
    PyObject *fn;
    const char *path;
    if (!PyArg_ParseTuple(args, "Os", &fn, &path)) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD), *sym = h ? dlsym(h, "LZ4_decompress_safe") : NULL;
    if (!sym) {
        if (h) dlclose(h);
        Py_RETURN_FALSE;
    }
    *(void **)&lz4_safe = sym;
    Py_XSETREF(lz4_fn, Py_NewRef(fn));
    Py_RETURN_TRUE;
}

PyObject *lz4_bytes(PyObject *decompress, const unsigned char *src, Py_ssize_t len) {
    if (decompress != lz4_fn || !lz4_safe) {
        PyObject *view = PyMemoryView_FromMemory((char *)src, len, PyBUF_READ), *r;
        if (!view) return NULL;
        r = PyObject_CallOneArg(decompress, view);
        Py_DECREF(view);
        return r;
    }
    /* lz4.block.decompress with store_size: a u32 LE size, then an lz4 block of that size */
    if (len < 4 || len - 4 > INT32_MAX || rd32(src) > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "lz4: bad size header");
        return NULL;
    }
    int size = (int)rd32(src), got;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out) return NULL;
    char *dst = PyBytes_AS_STRING(out);
    if (size >= (1 << 16)) {
        Py_BEGIN_ALLOW_THREADS got = lz4_safe((const char *)src + 4, dst, (int)(len - 4), size);
        Py_END_ALLOW_THREADS
    } else {
        got = lz4_safe((const char *)src + 4, dst, (int)(len - 4), size);
    }
    if (got != size) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, "lz4: corrupt input");
        return NULL;
    }
    return out;
}

/* ---- CRC-32: the registered callable's own C function, called directly ---------------------
 *
 * Every block, piece and piece header a read checks went through a Python call of the CRC
 * callable: a memoryview, the call and an int each, and a short lookup checks four to six of
 * them (0.3-2 KiB each).  use_crc32 finds the C function that callable calls, through the
 * callable's extension module (already loaded; dlsym on its handle also finds what it links):
 * ISA-L's crc32_gzip_refl in python-isal's isal_zlib (isal_zlib.crc32, 4-8x zlib's speed),
 * or zlib's crc32_z (crc32 before zlib 1.2.9) in Python's zlib extension
 * (zlib.crc32); crc_fast calls it: the same function on the same bytes, without the Python
 * call, and a maintained library's CRC code rather than one of ours.  It is registered only
 * once it has given the callable's values on data of many lengths and alignments (an extension
 * built against another library, under the same names or not, fails the check or the lookup);
 * otherwise the callable is called as before.  The prototypes are the libraries' own (zlib.h,
 * isa-l's crc.h), declared here so that building needs neither's headers. */

typedef unsigned long (*crc32_z_fn)(unsigned long crc, const unsigned char *buf, size_t len);
typedef unsigned long (*crc32_fn)(unsigned long crc, const unsigned char *buf, unsigned int len);
typedef uint32_t (*crc32_gzip_refl_fn)(uint32_t init, const unsigned char *buf, uint64_t len);

/* The C functions use_crc32 knows, by symbol: each prototype above is one kind. */
enum { CRC_ZLIB_Z, CRC_ZLIB, CRC_ISAL };
static const struct {
    const char *name;
    int kind;
} crc_symbols[] = {{"crc32_z", CRC_ZLIB_Z}, {"crc32", CRC_ZLIB}, {"crc32_gzip_refl", CRC_ISAL}};

typedef struct {
    int kind;
    void *fn;
} CrcFn;
static CrcFn crc_c;      /* the registered callable's C function */
static PyObject *crc_fn; /* the callable it stands for (NULL: none registered) */

static uint32_t crc_call(CrcFn f, const unsigned char *p, size_t len) {
    if (f.kind == CRC_ISAL) return ((crc32_gzip_refl_fn)f.fn)(0, p, (uint64_t)len);
    if (f.kind == CRC_ZLIB_Z) return (uint32_t)((crc32_z_fn)f.fn)(0, p, len);
    unsigned long r = 0; /* zlib's crc32 takes an unsigned int length: longer data in chunks */
    do {
        size_t k = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        r = ((crc32_fn)f.fn)(r, p, (unsigned int)k);
        p += k;
        len -= k;
    } while (len);
    return (uint32_t)r;
}

int crc_fast(PyObject *crc32, const unsigned char *p, Py_ssize_t len, uint32_t *out) {
    if (crc32 != crc_fn || !crc_fn) return 0;
    CrcFn f = crc_c;
    if (len >= (1 << 16)) { /* the callables release the GIL for long data: so does this */
        Py_BEGIN_ALLOW_THREADS *out = crc_call(f, p, (size_t)len);
        Py_END_ALLOW_THREADS
    } else {
        *out = crc_call(f, p, (size_t)len);
    }
    return 1;
}

/* The lengths use_crc32 checks: every one up to CHECK_SHORT, at two alignments, and these. */
#define CHECK_SHORT 300
static const Py_ssize_t check_long[] = {1000, 4096, 8191, 70001};

SHARED_PYDOC(use_crc32_doc,
             "use_crc32(crc32, path, names=('crc32_z', 'crc32')) -> bool: call the first C function of "
             "names (crc32_z, crc32: zlib's; crc32_gzip_refl: ISA-L's) found through the loaded "
             "extension at path (the callable's module's __file__) directly wherever crc32 is passed, "
             "once it has given crc32's values on data of every length up to 300 bytes, at two "
             "alignments, and some longer; False if none is found or its values differ: then no "
             "callable is registered and crc32 is called wherever it is passed.  ValueError for a "
             "name whose prototype the codec does not know.");

PyObject *c_use_crc32(PyObject *self, PyObject *args) {
    PyObject *fn, *names = NULL;
    const char *path;
    if (!PyArg_ParseTuple(args, "Os|O!", &fn, &path, &PyTuple_Type, &names)) return NULL;
    Py_ssize_t nsym = sizeof crc_symbols / sizeof *crc_symbols, nnames = names ? PyTuple_GET_SIZE(names) : 2;
    int kinds[8];
    if (nnames > 8) {
        PyErr_SetString(PyExc_ValueError, "use_crc32: at most 8 names");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < nnames; j++) {
        const char *name = names ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, j)) : crc_symbols[j].name;
        if (!name) return NULL;
        kinds[j] = -1;
        for (Py_ssize_t s = 0; s < nsym; s++)
            if (!strcmp(name, crc_symbols[s].name)) kinds[j] = crc_symbols[s].kind;
        if (kinds[j] < 0) {
            PyErr_Format(PyExc_ValueError, "use_crc32: no known prototype for the C function %s", name);
            return NULL;
        }
    }
    Py_CLEAR(crc_fn); /* until the new one is found and checked */
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    CrcFn f = {0, NULL};
    for (Py_ssize_t j = 0; h && !f.fn && j < nnames; j++) {
        f.kind = kinds[j];
        f.fn = dlsym(h, crc_symbols[kinds[j]].name);
    }
    if (!f.fn) {
        if (h) dlclose(h);
        Py_RETURN_FALSE;
    }
    Py_ssize_t nlong = sizeof check_long / sizeof *check_long, size = check_long[nlong - 1] + 1;
    unsigned char *d = PyMem_Malloc((size_t)size);
    if (!d) {
        dlclose(h);
        return PyErr_NoMemory();
    }
    uint32_t s = 12345;
    for (Py_ssize_t i = 0; i < size; i++) d[i] = (unsigned char)((s = s * 1103515245u + 12345u) >> 16);
    int same = 1;
    for (Py_ssize_t k = 0; same && k < 2 * (CHECK_SHORT + 1) + nlong; k++) {
        Py_ssize_t at = k < 2 * (CHECK_SHORT + 1) ? k % 2 : 1,
                   n = k < 2 * (CHECK_SHORT + 1) ? k / 2 : check_long[k - 2 * (CHECK_SHORT + 1)];
        PyObject *b = PyBytes_FromStringAndSize((const char *)d + at, n);
        PyObject *v = b ? PyObject_CallOneArg(fn, b) : NULL;
        Py_XDECREF(b);
        unsigned long got = v ? PyLong_AsUnsignedLong(v) : 0;
        int failed = !v || (got == (unsigned long)-1 && PyErr_Occurred());
        Py_XDECREF(v);
        if (failed) {
            PyMem_Free(d);
            dlclose(h);
            return NULL;
        }
        same = got <= 0xffffffffUL && (uint32_t)got == crc_call(f, d + at, (size_t)n);
    }
    PyMem_Free(d);
    if (!same) {
        dlclose(h);
        Py_RETURN_FALSE;
    }
    crc_c = f; /* the handle stays open: the function stays loaded */
    crc_fn = Py_NewRef(fn);
    Py_RETURN_TRUE;
}

SHARED_PYDOC(crc_blocks_doc,
             "crc_blocks(data, lengths, crc32) -> int | None: the index of the first block whose CRC "
             "(over its body, then its codec byte) does not match its trailer, of the blocks laid back "
             "to back from the start of data with the lengths given (a buffer of native u32, as "
             "array('I')), -1 if all match; None, having checked nothing, where crc32 is not the "
             "registered callable (use_crc32): the caller checks them in Python.  The scrub's loop: "
             "no Python call, slice or int per block, and the GIL released throughout.");

PyObject *c_crc_blocks(PyObject *self, PyObject *args) {
    Py_buffer data, lens;
    PyObject *fn;
    if (!PyArg_ParseTuple(args, "y*y*O", &data, &lens, &fn)) return NULL;
    Py_ssize_t found = -1, n = lens.len / 4;
    int declined = fn != crc_fn || !crc_fn;
    if (!declined) {
        const unsigned char *p = data.buf;
        const uint32_t *len = lens.buf;
        Py_ssize_t at = 0, size = data.len;
        CrcFn f = crc_c;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t b = 0; b < n; b++) {
            Py_ssize_t l = (Py_ssize_t)len[b];
            if (l < 5 || l > size - at ||
                crc32_byte(crc_call(f, p + at, (size_t)(l - 5)), p[at + l - 5]) != rd32(p + at + l - 4)) {
                found = b;
                break;
            }
            at += l;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&lens);
    if (declined) Py_RETURN_NONE;
    return PyLong_FromSsize_t(found);
}

SHARED_PYDOC(unpack_doc,
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
    uint32_t fast;
    unsigned long got;
    if (crc_fast(args[1], p, end, &fast)) { /* the callable's own C function (use_crc32) */
        got = fast;
    } else {
        c = PyObject_CallOneArg(args[1], body);
        if (!c) {
            Py_DECREF(body);
            return -1;
        }
        got = PyLong_AsUnsignedLong(c);
        Py_DECREF(c);
        if (got == (unsigned long)-1 && PyErr_Occurred()) {
            Py_DECREF(body);
            return -1;
        }
    }
    if (crc32_byte((uint32_t)got, codec) != rd32(p + end + 1) || (codec == 2 && (end < 4 || rd32(p) > MAX_BLOCK_BYTES))) {
        Py_DECREF(body);
        return 0;
    }
    if (codec == 2) {
        Py_DECREF(body);
        *raw = lz4_bytes(args[2], p, end);
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

PyObject *c_unpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SHARED_PYDOC(unpack_range_doc,
             "unpack_range(data, crc32, decompress, start, stop) -> (keys, values, n): unpack (as "
             "unpack) and the records with start <= key < stop split out (RawBlock.split of "
             "RawBlock.find of both ends), n the block's record count; None where unpack declines.");

PyObject *c_unpack_range(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
        /* From 0, as RawBlock.find: the same answer on a sound block, and on a crafted one whose
         * keys are out of order the same records as the Python code reads. */
        Py_ssize_t hi = lower_bound(&b, 0, PyBytes_AS_STRING(args[4]), PyBytes_GET_SIZE(args[4]));
        if (split_into(&b, lo, hi, &keys, &vals) == 0) res = Py_BuildValue("(NNn)", keys, vals, n);
        else {
            Py_XDECREF(keys);
            Py_XDECREF(vals);
        }
    }
    Py_DECREF(raw);
    return res;
}

SHARED_PYDOC(merge_doc,
             "merge(parts) -> (keys, values): parts are (keys, values, ops) of the levels of a table, "
             "newest first, each sorted; for every key the newest level's record wins; when that "
             "level has ops (a delta run) its value is an op byte, PUT (1) + value or DEL (0), and a "
             "DEL hides the key.  None when anything is not as a sound table gives it (keys out of "
             "order, an unknown op byte, an item that is not bytes): the caller runs the Python code, "
             "which names what is wrong.");

/* The parts of merge and merge_run, checked: 1, or 0 when they are not as a sound table gives
 * them (the caller declines), -1 with an exception set. */
typedef struct {
    Py_ssize_t m, idx[MERGE_MAX], len[MERGE_MAX];
    PyObject *ks[MERGE_MAX], *vs[MERGE_MAX];
    int ops[MERGE_MAX];
} Parts;

static int parts_of(PyObject *parts, Parts *p) {
    p->m = PyList_GET_SIZE(parts);
    if (p->m > MERGE_MAX) return 0;
    for (Py_ssize_t i = 0; i < p->m; i++) {
        PyObject *t = PyList_GET_ITEM(parts, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) return 0;
        p->ks[i] = PyTuple_GET_ITEM(t, 0);
        p->vs[i] = PyTuple_GET_ITEM(t, 1);
        p->ops[i] = PyObject_IsTrue(PyTuple_GET_ITEM(t, 2));
        if (p->ops[i] < 0) return -1;
        if (!PyList_Check(p->ks[i]) || !PyList_Check(p->vs[i]) || PyList_GET_SIZE(p->ks[i]) != PyList_GET_SIZE(p->vs[i]))
            return 0;
        p->idx[i] = 0;
        p->len[i] = PyList_GET_SIZE(p->ks[i]);
        for (Py_ssize_t j = 0; j < p->len[i]; j++) {
            PyObject *k = PyList_GET_ITEM(p->ks[i], j), *v = PyList_GET_ITEM(p->vs[i], j);
            if (!PyBytes_Check(k) || !PyBytes_Check(v) || (j && bytes_cmp(PyList_GET_ITEM(p->ks[i], j - 1), k) >= 0))
                return 0;
            if (p->ops[i] && (PyBytes_GET_SIZE(v) == 0 || (unsigned char)PyBytes_AS_STRING(v)[0] > 1)) return 0;
        }
    }
    return 1;
}

/* The next key of the merge: the part whose record wins (the newest holding the smallest key),
 * every other part's record of that key skipped; -1 when all parts are done. */
static Py_ssize_t next_winner(Parts *p) {
    Py_ssize_t w = -1;
    for (Py_ssize_t i = 0; i < p->m; i++)
        if (p->idx[i] < p->len[i] &&
            (w < 0 || bytes_cmp(PyList_GET_ITEM(p->ks[i], p->idx[i]), PyList_GET_ITEM(p->ks[w], p->idx[w])) < 0))
            w = i;
    if (w < 0) return -1;
    PyObject *k = PyList_GET_ITEM(p->ks[w], p->idx[w]);
    for (Py_ssize_t i = w + 1; i < p->m; i++)
        if (p->idx[i] < p->len[i] && bytes_cmp(PyList_GET_ITEM(p->ks[i], p->idx[i]), k) == 0) p->idx[i]++;
    return w;
}

PyObject *c_merge(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "merge(parts: list) takes 1 argument");
        return NULL;
    }
    Parts p;
    int r = parts_of(args[0], &p);
    if (r <= 0) {
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    /* Nothing below calls Python code: the lists cannot change under the loop. */
    PyObject *ok = PyList_New(0), *ov = PyList_New(0);
    if (!ok || !ov) goto fail;
    Py_ssize_t w;
    while ((w = next_winner(&p)) >= 0) {
        PyObject *k = PyList_GET_ITEM(p.ks[w], p.idx[w]), *v = PyList_GET_ITEM(p.vs[w], p.idx[w]), *nv = NULL;
        p.idx[w]++;
        if (p.ops[w]) {
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

/* A merged record of a list input into the run form at o: the key, then the value less its
 * op byte (skip); its two lengths out. */
static void copy_item(char *o, PyObject *k, PyObject *v, Py_ssize_t skip, Py_ssize_t *kl, Py_ssize_t *vl) {
    *kl = PyBytes_GET_SIZE(k);
    *vl = PyBytes_GET_SIZE(v) - skip;
    memcpy(o, PyBytes_AS_STRING(k), (size_t)*kl);
    memcpy(o + *kl, PyBytes_AS_STRING(v) + skip, (size_t)*vl);
}

/* Record t's key and value lengths into the run form's lens list; -1 on a failed allocation. */
static int set_lens(PyObject *lens, Py_ssize_t t, Py_ssize_t kl, Py_ssize_t vl) {
    PyObject *a = PyLong_FromSsize_t(kl), *b = a ? PyLong_FromSsize_t(vl) : NULL;
    if (!b) {
        Py_XDECREF(a);
        return -1;
    }
    PyList_SET_ITEM(lens, 2 * t, a);
    PyList_SET_ITEM(lens, 2 * t + 1, b);
    return 0;
}

SHARED_PYDOC(merge_run_doc,
             "merge_run(parts, keep_ops) -> (data, lens): merge's records as a run, keys and values "
             "back to back in data, lens their lengths (key, value, key, value, ...), for "
             "TableWriter.add_run: no object per record.  keep_ops: every winning record as it is "
             "(op bytes and DELs kept: runs merged into a run); else ops applied as merge does.  "
             "None where merge declines.");

PyObject *c_merge_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "merge_run(parts: list, keep_ops) takes 2 arguments");
        return NULL;
    }
    int keep = PyObject_IsTrue(args[1]);
    if (keep < 0) return NULL;
    Parts p;
    int r = parts_of(args[0], &p);
    if (r <= 0) {
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    /* First pass: the winners, as (part, index, value skip); then one bytes object. */
    Py_ssize_t cap = 0, n = 0, total = 0;
    for (Py_ssize_t i = 0; i < p.m; i++) cap += p.len[i];
    Py_ssize_t *win = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(cap ? cap : 1));
    if (!win) return PyErr_NoMemory();
    PyObject *data = NULL, *lens = NULL, *res = NULL;
    Py_ssize_t w;
    while ((w = next_winner(&p)) >= 0) {
        Py_ssize_t j = p.idx[w]++;
        PyObject *k = PyList_GET_ITEM(p.ks[w], j), *v = PyList_GET_ITEM(p.vs[w], j);
        int skip = 0;
        if (p.ops[w] && !keep) {
            if (PyBytes_AS_STRING(v)[0] == 0) continue; /* DEL */
            skip = 1;
        }
        win[2 * n] = w | ((Py_ssize_t)skip << 8); /* MERGE_MAX < 256 */
        win[2 * n + 1] = j;
        n++;
        total += PyBytes_GET_SIZE(k) + PyBytes_GET_SIZE(v) - skip;
    }
    if (!(data = PyBytes_FromStringAndSize(NULL, total)) || !(lens = PyList_New(2 * n))) goto done;
    char *q = PyBytes_AS_STRING(data);
    for (Py_ssize_t t = 0; t < n; t++) {
        Py_ssize_t part = win[2 * t] & 0xff, skip = win[2 * t] >> 8, j = win[2 * t + 1];
        Py_ssize_t kl, vl;
        copy_item(q, PyList_GET_ITEM(p.ks[part], j), PyList_GET_ITEM(p.vs[part], j), skip, &kl, &vl);
        q += kl + vl;
        if (set_lens(lens, t, kl, vl) < 0) goto done;
    }
    res = Py_BuildValue("(OO)", data, lens);
done:
    PyMem_Free(win);
    Py_XDECREF(data);
    Py_XDECREF(lens);
    return res;
}

SHARED_PYDOC(merge_block_doc,
             "merge_block(raw, n, parts, keep_ops) -> (data, lens): merge_run(parts + [(keys, values, "
             "False)], keep_ops) where keys, values are the n records of the decoded block raw (a base "
             "block, oldest): its records are read in place, never made objects.  None where merge_run "
             "declines, or when the block's offsets or key order are not as a sound block has them.");

/* Record j of a part: the block (the last part when there is one) or the part's lists. */
typedef struct {
    Parts p;
    Block b;
    Py_ssize_t bi, bn; /* the block's next record and its count */
} BlockParts;

static inline void bp_key(const BlockParts *q, Py_ssize_t i, Py_ssize_t j, const char **s, Py_ssize_t *l) {
    if (i == q->p.m) {
        Py_ssize_t a = rec_start(&q->b, j);
        *s = (const char *)q->b.raw + a;
        *l = key_end(&q->b, j) - a;
    } else {
        PyObject *k = PyList_GET_ITEM(q->p.ks[i], j);
        *s = PyBytes_AS_STRING(k);
        *l = PyBytes_GET_SIZE(k);
    }
}

static inline int mem_cmp(const char *a, Py_ssize_t la, const char *b, Py_ssize_t lb) {
    Py_ssize_t m = la < lb ? la : lb;
    int c = m ? memcmp(a, b, (size_t)m) : 0;
    if (c) return c;
    return la < lb ? -1 : (la > lb ? 1 : 0);
}

/* next_winner over the lists and the block (index p.m, never with ops): -1 when all are done. */
static Py_ssize_t bp_next(BlockParts *q) {
    Py_ssize_t w = -1, wl = 0, m = q->p.m;
    const char *ws = NULL;
    for (Py_ssize_t i = 0; i <= m; i++) {
        Py_ssize_t j = i == m ? q->bi : q->p.idx[i], n = i == m ? q->bn : q->p.len[i];
        if (j >= n) continue;
        const char *s;
        Py_ssize_t l;
        bp_key(q, i, j, &s, &l);
        if (w < 0 || mem_cmp(s, l, ws, wl) < 0) {
            w = i;
            ws = s;
            wl = l;
        }
    }
    if (w < 0) return -1;
    for (Py_ssize_t i = w + 1; i <= m; i++) {
        Py_ssize_t *j = i == m ? &q->bi : &q->p.idx[i], n = i == m ? q->bn : q->p.len[i];
        if (*j >= n) continue;
        const char *s;
        Py_ssize_t l;
        bp_key(q, i, *j, &s, &l);
        if (mem_cmp(s, l, ws, wl) == 0) ++*j;
    }
    return w;
}

/* 1 if records j0..j1-1 of b have offsets in order inside their records and strictly increasing
 * keys; with ops, each also has an op byte (0 or 1) after its key (a delta run's records). */
static int recs_sound(const Block *b, Py_ssize_t j0, Py_ssize_t j1, int ops) {
    Py_ssize_t end = b->len - 4 - 8 * b->n, prev = rec_start(b, j0);
    if (prev > end) return 0;
    for (Py_ssize_t j = j0; j < j1; j++) {
        Py_ssize_t ke = key_end(b, j), re = rec_end(b, j);
        if (ke < prev || re < ke || re > end) return 0;
        if (ops && (re == ke || b->raw[ke] > 1)) return 0;
        if (j > j0 && mem_cmp((const char *)b->raw + rec_start(b, j - 1), key_end(b, j - 1) - rec_start(b, j - 1),
                              (const char *)b->raw + prev, ke - prev) >= 0)
            return 0;
        prev = re;
    }
    return 1;
}

static int block_sound(const Block *b) { return recs_sound(b, 0, b->n, 0); }

PyObject *c_merge_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "merge_block(raw: bytes, n: int, parts: list, keep_ops)");
        return NULL;
    }
    BlockParts q;
    Py_ssize_t n0 = PyLong_AsSsize_t(args[1]);
    if (n0 == -1 && PyErr_Occurred()) return NULL;
    if (block_of(args[0], n0, &q.b) < 0) return NULL;
    int keep = PyObject_IsTrue(args[3]);
    if (keep < 0) return NULL;
    int r = parts_of(args[2], &q.p);
    if (r <= 0) {
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (q.p.m >= MERGE_MAX || !block_sound(&q.b)) Py_RETURN_NONE;
    q.bi = 0;
    q.bn = n0;
    Py_ssize_t m = q.p.m, cap = n0, n = 0, total = 0;
    for (Py_ssize_t i = 0; i < m; i++) cap += q.p.len[i];
    Py_ssize_t *win = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(cap ? cap : 1));
    if (!win) return PyErr_NoMemory();
    PyObject *data = NULL, *lens = NULL, *res = NULL;
    Py_ssize_t w;
    while ((w = bp_next(&q)) >= 0) {
        Py_ssize_t j = w == m ? q.bi++ : q.p.idx[w]++, kl, vl;
        int skip = 0;
        if (w == m) {
            kl = key_end(&q.b, j) - rec_start(&q.b, j);
            vl = rec_end(&q.b, j) - key_end(&q.b, j);
        } else {
            PyObject *v = PyList_GET_ITEM(q.p.vs[w], j);
            if (q.p.ops[w] && !keep) {
                if (PyBytes_AS_STRING(v)[0] == 0) continue; /* DEL */
                skip = 1;
            }
            kl = PyBytes_GET_SIZE(PyList_GET_ITEM(q.p.ks[w], j));
            vl = PyBytes_GET_SIZE(v) - skip;
        }
        win[2 * n] = w | ((Py_ssize_t)skip << 8); /* MERGE_MAX < 256 */
        win[2 * n + 1] = j;
        n++;
        total += kl + vl;
    }
    if (!(data = PyBytes_FromStringAndSize(NULL, total)) || !(lens = PyList_New(2 * n))) goto done;
    char *o = PyBytes_AS_STRING(data);
    for (Py_ssize_t t = 0; t < n; t++) {
        Py_ssize_t part = win[2 * t] & 0xff, skip = win[2 * t] >> 8, j = win[2 * t + 1], kl, vl;
        if (part == m) {
            Py_ssize_t s = rec_start(&q.b, j);
            kl = key_end(&q.b, j) - s;
            vl = rec_end(&q.b, j) - s - kl;
            memcpy(o, q.b.raw + s, (size_t)(kl + vl));
        } else {
            copy_item(o, PyList_GET_ITEM(q.p.ks[part], j), PyList_GET_ITEM(q.p.vs[part], j), skip, &kl, &vl);
        }
        o += kl + vl;
        if (set_lens(lens, t, kl, vl) < 0) goto done;
    }
    res = Py_BuildValue("(OO)", data, lens);
done:
    PyMem_Free(win);
    Py_XDECREF(data);
    Py_XDECREF(lens);
    return res;
}

SHARED_PYDOC(merge_segs_doc,
             "merge_segs(raw, n, segs) -> (data, lens): merge_block(raw, n, parts, False) where the "
             "parts are delta-run records read in place too: segs are (block, count, j0, j1), records "
             "j0..j1-1 of a decoded run block, newest run first (one run's segments in key order, "
             "after each other).  A compaction's base block and the runs' records in its range merge "
             "without one object per record.  None where merge_block declines or a segment's range, "
             "offsets, key order or op bytes are not as a sound run has them.");

/* One segment of a run block: records j..e-1 of b, read in place (values: op byte first). */
typedef struct {
    Block b;
    Py_ssize_t j, e;
} Seg;

static inline void seg_key(const Seg *s, const char **p, Py_ssize_t *l) {
    Py_ssize_t a = rec_start(&s->b, s->j);
    *p = (const char *)s->b.raw + a;
    *l = key_end(&s->b, s->j) - a;
}

PyObject *c_merge_segs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "merge_segs(raw: bytes, n: int, segs: list)");
        return NULL;
    }
    Py_ssize_t n0 = PyLong_AsSsize_t(args[1]);
    if (n0 == -1 && PyErr_Occurred()) return NULL;
    Block base;
    if (block_of(args[0], n0, &base) < 0) return NULL;
    if (!block_sound(&base)) Py_RETURN_NONE;
    /* Nothing below calls Python code once the segments are parsed: the list and the bytes they
     * hold cannot change under the loop (the tuples keep the blocks alive). */
    Py_ssize_t m = PyList_GET_SIZE(args[2]), cap = n0, n = 0, total = 0;
    Seg *sg = PyMem_Malloc(sizeof(Seg) * (size_t)(m + 1));
    if (!sg) return PyErr_NoMemory();
    PyObject *data = NULL, *lens = NULL, *res = NULL;
    Py_ssize_t *win = NULL;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *t = PyList_GET_ITEM(args[2], i);
        Py_ssize_t sn, j0, j1;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4 || !PyBytes_Check(PyTuple_GET_ITEM(t, 0))) goto decline;
        sn = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        j0 = sn < 0 ? -1 : PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
        j1 = j0 < 0 ? -1 : PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 3));
        if (PyErr_Occurred()) goto done;
        if (j1 < j0 || j0 < 0 || block_of(PyTuple_GET_ITEM(t, 0), sn, &sg[i].b) < 0) {
            PyErr_Clear();
            goto decline;
        }
        if (j1 > sn || !recs_sound(&sg[i].b, j0, j1, 1)) goto decline;
        sg[i].j = j0;
        sg[i].e = j1;
        cap += j1 - j0;
    }
    /* The base block as the oldest segment (no op bytes). */
    sg[m].b = base;
    sg[m].j = 0;
    sg[m].e = n0;
    if (!(win = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(cap ? cap : 1)))) {
        PyErr_NoMemory();
        goto done;
    }
    /* The runs' records are a fraction of the base block's: each step finds the runs' next
     * record (the newest segment holding the smallest key; the others' records of that key
     * skipped), then takes the base records before it with one comparison each. */
    Block *bb = &sg[m].b;
    for (;;) {
        Py_ssize_t w = -1, wl = 0;
        const char *ws = NULL;
        for (Py_ssize_t i = 0; i < m; i++) {
            if (sg[i].j >= sg[i].e) continue;
            const char *s;
            Py_ssize_t l;
            seg_key(&sg[i], &s, &l);
            if (w < 0 || mem_cmp(s, l, ws, wl) < 0) {
                w = i;
                ws = s;
                wl = l;
            }
        }
        Py_ssize_t bi = sg[m].j;
        int c = 1;
        while (bi < n0) {
            Py_ssize_t s0 = rec_start(bb, bi), ke = key_end(bb, bi);
            if (w >= 0 && (c = mem_cmp((const char *)bb->raw + s0, ke - s0, ws, wl)) >= 0) break;
            win[2 * n] = m;
            win[2 * n + 1] = bi++;
            n++;
            total += rec_end(bb, bi - 1) - s0;
        }
        if (w < 0) break;
        if (c == 0) bi++; /* the base record of the run's key: replaced or deleted */
        sg[m].j = bi;
        for (Py_ssize_t i = w + 1; i < m; i++) {
            if (sg[i].j >= sg[i].e) continue;
            const char *s;
            Py_ssize_t l;
            seg_key(&sg[i], &s, &l);
            if (mem_cmp(s, l, ws, wl) == 0) sg[i].j++;
        }
        Py_ssize_t j = sg[w].j++, ke = key_end(&sg[w].b, j), re = rec_end(&sg[w].b, j);
        if (sg[w].b.raw[ke] == 0) continue; /* DEL */
        win[2 * n] = w;
        win[2 * n + 1] = j;
        n++;
        total += re - rec_start(&sg[w].b, j) - 1;
    }
    if (!(data = PyBytes_FromStringAndSize(NULL, total)) || !(lens = PyList_New(2 * n))) goto done;
    char *o = PyBytes_AS_STRING(data);
    for (Py_ssize_t t = 0; t < n; t++) {
        Py_ssize_t i = win[2 * t], j = win[2 * t + 1], skip = i < m;
        const Block *b = &sg[i].b;
        Py_ssize_t s = rec_start(b, j), ke = key_end(b, j), re = rec_end(b, j);
        Py_ssize_t kl = ke - s, vl = re - ke - skip;
        memcpy(o, b->raw + s, (size_t)kl);
        memcpy(o + kl, b->raw + ke + skip, (size_t)vl);
        o += kl + vl;
        if (set_lens(lens, t, kl, vl) < 0) goto done;
    }
    res = Py_BuildValue("(OO)", data, lens);
    goto done;
decline:
    res = Py_NewRef(Py_None);
done:
    PyMem_Free(sg);
    PyMem_Free(win);
    Py_XDECREF(data);
    Py_XDECREF(lens);
    return res;
}

SHARED_PYDOC(links_doc,
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

PyObject *c_links(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
    /* The last class's answer kept: link_slots' attribute lookups cost as much as a few links. */
    static PyObject *slots_cls;
    static Py_ssize_t slots_off[5];
    static int slots_fill;
    if (cls != slots_cls) {
        slots_fill = link_slots(cls, slots_off);
        Py_XSETREF(slots_cls, Py_NewRef(cls));
    }
    Py_ssize_t *off = slots_off;
    int fill = slots_fill;
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

SHARED_PYDOC(index_entries_doc,
             "index_entries(raw, n, size) -> (keys, lasts, fixed) of an index block (TableReader's "
             "index): the record keys, each value past its first size bytes, and those first size "
             "bytes of every value back to back; None if a value is shorter than size.");

PyObject *c_index_entries(PyObject *self, PyObject *args) {
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
