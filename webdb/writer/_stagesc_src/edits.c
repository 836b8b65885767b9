/* ---- Step 0: edit records (webdb/writer/edits.py, writer.py, cascade.py, columns.py) ---------
 * Each function below is the counterpart of a Python reference named in its doc string (the
 * fallback, which the tests compare it to). */

#include "stagesc.h"

/* Prefetch a list item (a bytes object) a few steps ahead: sorted records are read in key
 * order, all over the heap, and a pass over them is bound by those cache misses. */
#if defined(__GNUC__)
#define PREFETCH_ITEM(o) __builtin_prefetch(o)
#else
#define PREFETCH_ITEM(o) ((void)0)
#endif

SHARED_PYDOC(pack_edits_doc,
             "pack_edits(keys, values, prefix, n0) -> [key + prefix + (n0 + i).to_bytes(5, 'big') + value "
             "+ (len(key) + 8).to_bytes(2, 'little') for i, (key, value) in enumerate(zip(keys, values), "
             "1)]: edit records (webdb.writer.edits.pack, prefix = rank + producer), Emitter.add_many "
             "in C.  None for anything that does not fit (a counter past 5 bytes, a key past 65527 "
             "bytes, lists of different lengths, an item that is not bytes): the Python code raises.");

PyObject *c_pack_edits(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SHARED_PYDOC(first_if_new_doc,
             "first_if_new(recs, op) -> list: writer.first_if_new_only over a sorted list of edit records "
             "(the records whose key ends in op and equals the previous key are dropped).");

PyObject *c_first_if_new(PyObject *self, PyObject *args) {
    PyObject *recs;
    int op;
    if (!PyArg_ParseTuple(args, "O!i:first_if_new", &PyList_Type, &recs, &op)) return NULL;
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
            PyErr_Format(PyExc_TypeError, "first_if_new: item %zd is not bytes", i);
            return NULL;
        }
        const char *p = PyBytes_AS_STRING(o);
        Py_ssize_t m = PyBytes_GET_SIZE(o);
        Py_ssize_t kl = m >= 2 ? ((Py_ssize_t)(unsigned char)p[m - 2] | ((Py_ssize_t)(unsigned char)p[m - 1] << 8)) : 0;
        if (kl < 9 || kl > m) {
            Py_DECREF(out);
            PyErr_Format(PyExc_ValueError, "first_if_new: item %zd is not an edit record", i);
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

SHARED_PYDOC(join_run_doc,
             "join_run(recs, lo, hi) -> (data, lens): b''.join(recs[lo:hi]) and [len(r), 0, ...] for "
             "each record (keys with empty values: TableWriter.add_run's arguments).");

PyObject *c_join_run(PyObject *self, PyObject *args) {
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

SHARED_PYDOC(link_records_doc,
             "link_records(data, us, ue, as_, ae, counts, md5s, tails, seqs, pp, lp, link_pre) -> "
             "(precs, lrecs, psize, lsize): columns.link_records_py in one call (the page and link edit "
             "records of a fetch block's outlinks; their lengths as native int64 bytes).");

PyObject *c_link_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SHARED_PYDOC(urls_ok_doc,
             "urls_ok(data, us, ue, max_url) -> bool: columns.link_urls_ok for the url slices "
             "data[us[i]:ue[i]] (int64 offsets, in bounds): at most max_url bytes, no byte <= 0x20 or "
             "0x7f, '://' first found after the start and ending within its first 32 bytes.");

PyObject *c_urls_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
