/* ---- Merging levels, a range per call (levels.LevelCursor.merge_ranges, Seeker.range) ------ */

#include "blockc.h"

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

SHARED_PYDOC(diff_doc,
             "diff(ok, ov, new, lo, hi, out_k, out_v) -> live: LevelCursor.merge_ranges' step for one "
             "range in C.  ok, ov: the range's stored records (sorted); new: a Splice (list of (key, "
             "value or None), sorted, inside [lo, hi)) or a tuple (keys, values) of the range's new "
             "records.  Appends the changes to out_k, out_v as a delta run holds them (PUT 0x01 + "
             "value; DEL 0x00 for a removed key; an unchanged record not at all) and returns the change "
             "in live records.  None, with nothing appended, for anything else (keys out of order or "
             "range, an item that is not bytes): the caller's Python code names it.");

PyObject *c_diff(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SHARED_PYDOC(span_doc,
             "span(raw, n, lo, hi) -> (keys, values, next): the records with lo <= key < hi (hi None: to "
             "the end of the block) and the key of the first record past them, None if none is (Seeker."
             "range on one block, without splitting out the block's keys).");

PyObject *c_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

