/* ---- The cascade's per-range loops (stages 3 and 4 through levels.LevelCursor, the Emitter) -- */

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

/* The arguments of lbu_groups and lbm_groups, (recs: list, final: bool): the list's length in
 * *n and final's truth in *final; -1 with a TypeError naming `name` if they are not that. */
static int groups_args(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t *n, int *final) {
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s(recs: list, final: bool)", name);
        return -1;
    }
    *final = PyObject_IsTrue(args[1]);
    if (*final < 0) return -1;
    *n = PyList_GET_SIZE(args[0]);
    return 0;
}

/* Record j of recs as an edit record (E.pack: ..., key length u16 LE at the end): its bytes in
 * *p, its length in *L and its key length in *kl; 0 if it is not bytes of at least min bytes. */
static int edit_rec(PyObject *recs, Py_ssize_t j, Py_ssize_t min, const unsigned char **p, Py_ssize_t *L,
                    Py_ssize_t *kl) {
    PyObject *r = PyList_GET_ITEM(recs, j);
    if (!PyBytes_Check(r) || PyBytes_GET_SIZE(r) < min) return 0;
    *p = (const unsigned char *)PyBytes_AS_STRING(r);
    *L = PyBytes_GET_SIZE(r);
    *kl = (*p)[*L - 2] | ((*p)[*L - 1] << 8);
    return 1;
}

SHARED_PYDOC(lbu_groups_doc,
             "lbu_groups(recs, final) -> (groups, used): stage 4's edit records (webdb.writer.cascade, "
             "key = url 0x00 tag [fromID(16) op], E.pack layout) cut into one group per url: (url + "
             "0x00, url + 0x01, (url, notice or None, [(fromID, op, value)])), the last notice of a url "
             "winning.  Unless final, the last url's group is left (it may go on in the next records): "
             "used is the index of its first record.  None for a record the Python code would fail on.");

PyObject *c_lbu_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t n;
    int final;
    if (groups_args("lbu_groups", args, nargs, &n, &final) < 0) return NULL;
    PyObject *recs = args[0];
    for (Py_ssize_t j = 0; j < n; j++) {
        const unsigned char *p;
        Py_ssize_t L, kl;
        if (!edit_rec(recs, j, 2, &p, &L, &kl)) Py_RETURN_NONE;
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

SHARED_PYDOC(lbm_groups_doc,
             "lbm_groups(recs, final) -> (groups, used): stage 3's edit records (webdb.writer.cascade, "
             "key = md5(16) tag [url 0x00], E.pack layout) cut into one group per md5: (md5, the end of "
             "the md5's key range, (delete_all, [(url, value)])), of several adds of a url the last.  "
             "Unless final, the last md5's group is left (it may go on in the next records): used is "
             "the index of its first record.  None for a record the Python code would fail on.");

PyObject *c_lbm_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t n;
    int final;
    if (groups_args("lbm_groups", args, nargs, &n, &final) < 0) return NULL;
    PyObject *recs = args[0];
    for (Py_ssize_t j = 0; j < n; j++) {
        const unsigned char *p;
        Py_ssize_t L, kl;
        if (!edit_rec(recs, j, 17, &p, &L, &kl)) Py_RETURN_NONE;
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

SHARED_PYDOC(lbm_adds_doc,
             "lbm_adds(md5, ok, ov, adds, tail) -> (emit_keys, emit_values, splice): stage 3's link adds of "
             "one md5 (cascade._lbm_adds in C).  ok, ov: the md5's stored links (keys md5 + url, "
             "sorted); adds: (url, value) in increasing url order.  An add whose url is not stored, or "
             "whose value differs from the stored one but in the flag byte, is emitted (url + tail, "
             "value) and spliced (md5 + url, value).  None for input it declines (not sorted, a key "
             "without the md5, an item that is not bytes): the Python code runs.");

PyObject *c_lbm_adds(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SHARED_PYDOC(lbu_splice_doc,
             "lbu_splice(start, url, ledits, state_of, tail) -> (state, splice, fix): stage 4's link edits "
             "of a url without a target notice (cascade._lbu_splice in C).  ledits: (fromID, op, value) "
             "in fromID order; the last edit of a fromID wins (op 1 adds, 0 deletes).  If any link is "
             "added, state = state_of(url) (the target's state, called once), else -1.  State 0 (absent): "
             "(0, None, []).  Else the splice [(start + fromID, value or None)], each added link's flag "
             "byte set to the target's (1 if state is 2, else 0) where it differs, and fix the fromID + "
             "tail of each link whose flag was set.  None for input it declines (fromIDs out of order, "
             "an added value without a flag byte, an item of the wrong type).");

PyObject *c_lbu_splice(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
