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

/* One file of the view. */
typedef struct {
    PyObject *ix_raw; /* the file's index block, decompressed (TableReader._ix) */
    Block ix;
    int fd, pieces, run;
    Py_ssize_t bi;   /* Seeker.bi: the block at hand, and where the index search starts */
    PyObject *blk;   /* that block decompressed, or NULL */
    Block b;         /* its offsets (when blk) */
    PyObject *nxt;   /* Seeker.nxt: a lower bound of the file's next key; NULL: none left */
} SeekFile;

typedef struct {
    PyObject_HEAD Py_ssize_t m;
    SeekFile *f;
    PyObject *crc32, *decompress;
    Py_ssize_t decoded; /* blocks read and decompressed (Seeker.decoded summed) */
} LevelSeek;

static void ls_dealloc(LevelSeek *s) {
    for (Py_ssize_t i = 0; i < s->m; i++) {
        Py_XDECREF(s->f[i].ix_raw);
        Py_XDECREF(s->f[i].blk);
        Py_XDECREF(s->f[i].nxt);
    }
    PyMem_Free(s->f);
    Py_XDECREF(s->crc32);
    Py_XDECREF(s->decompress);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* bisect_left(last_keys, key, lo): the first entry from lo on whose last key is >= key. */
static Py_ssize_t last_ge(const Block *ix, Py_ssize_t lo, const char *key, Py_ssize_t klen) {
    return search(ix, lo, ix->n, key, klen, cmp_last, 0);
}

/* Seeker._block: block b of f decompressed and verified as TableReader._read does (1), or 0 if
 * it is not sound (short, bad checksum, undecodable, a count the index does not give), -1 on
 * error. */
static int load(LevelSeek *s, SeekFile *f, Py_ssize_t b) {
    if (b == f->bi && f->blk) return 1;
    const unsigned char *v = f->ix.raw + key_end(&f->ix, b);
    Py_ssize_t len = (Py_ssize_t)rd32(v + 8);
    PyObject *data = read_at(f->fd, rd64(v), len), *r;
    if (!data) return -1;
    if (data == Py_None) {
        Py_DECREF(data);
        return 0;
    }
    PyObject *a[3] = {data, s->crc32, s->decompress};
    r = c_unpack(NULL, a, 3);
    if (r == Py_None && len >= 5 && PyBytes_AS_STRING(data)[len - 5] == 3) {
        Py_DECREF(r);
        r = c_unpack_pieces(NULL, a, 3);
    }
    Py_DECREF(data);
    if (!r) return -1;
    Py_ssize_t n = r == Py_None ? -1 : PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
    if (n != (Py_ssize_t)rd32(v + 12)) {
        Py_DECREF(r);
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_XSETREF(f->blk, PyTuple_GET_ITEM(r, 0));
    Py_INCREF(f->blk);
    Py_DECREF(r);
    if (block_of(f->blk, n, &f->b) < 0) return -1;
    f->bi = b;
    s->decoded++;
    return 1;
}

/* Seeker.range(lo, hi) of one file, appended to *ks, *vs (created on first records): 1, 0 if a
 * block is not sound, -1 on error. */
static int file_range(LevelSeek *s, SeekFile *f, PyObject *lo, PyObject *hi, PyObject **ks, PyObject **vs) {
    const char *hk = PyBytes_AS_STRING(hi);
    Py_ssize_t hl = PyBytes_GET_SIZE(hi), n = f->ix.n;
    Py_ssize_t b = last_ge(&f->ix, f->bi, PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo));
    for (; b < n && cmp_key(&f->ix, b, hk, hl) < 0; b++) {
        int r = load(s, f, b);
        if (r <= 0) return r;
        PyObject *a[4] = {f->blk, NULL, lo, hi}, *kvn;
        if (!(a[1] = PyLong_FromSsize_t(f->b.n))) return -1;
        kvn = c_span(NULL, a, 4);
        Py_DECREF(a[1]);
        if (!kvn) return -1;
        PyObject *k = PyTuple_GET_ITEM(kvn, 0), *x = PyTuple_GET_ITEM(kvn, 1), *nx = PyTuple_GET_ITEM(kvn, 2);
        int e = 0;
        if (PyList_GET_SIZE(k)) {
            if (!*ks) {
                *ks = k;
                *vs = x;
                Py_INCREF(k);
                Py_INCREF(x);
            } else {
                e = PyList_SetSlice(*ks, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, k) < 0 ||
                    PyList_SetSlice(*vs, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, x) < 0;
            }
        }
        if (!e && nx != Py_None) {
            Py_INCREF(nx);
            Py_XSETREF(f->nxt, nx);
        }
        Py_DECREF(kvn);
        if (e) return -1;
        if (nx != Py_None) return 1;
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

static PyObject *ls_get(LevelSeek *s, PyObject *key) {
    if (!PyBytes_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "get(key: bytes)");
        return NULL;
    }
    const char *k = PyBytes_AS_STRING(key);
    Py_ssize_t kl = PyBytes_GET_SIZE(key);
    for (Py_ssize_t i = 0; i < s->m; i++) {
        SeekFile *f = &s->f[i];
        Py_ssize_t b = last_ge(&f->ix, f->bi, k, kl);
        if (b == f->ix.n || cmp_key(&f->ix, b, k, kl) > 0) continue;
        int r = load(s, f, b);
        if (r <= 0) return r == 0 ? Py_NewRef(Py_False) : NULL;
        Py_ssize_t j = lower_bound(&f->b, 0, k, kl);
        if (j == f->b.n || cmp_key(&f->b, j, k, kl) != 0) continue;
        Py_ssize_t vs = key_end(&f->b, j), ve = rec_end(&f->b, j);
        clamp(&f->b, &vs, &ve);
        if (!f->run) return slice(&f->b, vs, ve);
        if (ve > vs && f->b.raw[vs] == 1) return slice(&f->b, vs + 1, ve); /* PUT + value */
        if (ve > vs && f->b.raw[vs] == 0) Py_RETURN_NONE;                  /* DEL */
        Py_RETURN_FALSE; /* neither: the Python path names the run */
    }
    Py_RETURN_NONE;
}

static PyObject *ls_decoded(LevelSeek *s, void *closure) { return PyLong_FromSsize_t(s->decoded); }

static PyMethodDef ls_methods[] = {
    {"range", (PyCFunction)(void (*)(void))ls_range, METH_FASTCALL, ls_range_doc},
    {"get", (PyCFunction)ls_get, METH_O, ls_get_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ls_getset[] = {
    {"decoded", (getter)ls_decoded, NULL, "blocks read and decompressed so far", NULL},
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
             "levelseek(files, crc32, decompress) -> LevelSeek: reads of a table's levels, forward, for "
             "LevelCursor: files are (raw, n, fd, pieces, run) of its files, newest first (the runs, "
             "then the base: short_levels' files); each keeps its place between calls as a Seeker "
             "does.  The fds stay the caller's (open while the LevelSeek is used).");

PyObject *c_levelseek(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "levelseek(files: tuple, crc32, decompress)");
        return NULL;
    }
    if (PyType_Ready(&LevelSeekType) < 0) return NULL;
    Py_ssize_t m = PyTuple_GET_SIZE(args[0]);
    LevelSeek *s = PyObject_New(LevelSeek, &LevelSeekType);
    if (!s) return NULL;
    s->m = 0;
    s->decoded = 0;
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
    }
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}
