/* ---- The cascade's per-range loops of stages 3 and 4 (webdb/writer/cascade.py) ------------- */

#include "stagesc.h"

/* The arguments of links_by_url_groups and links_by_md5_groups, (recs: list, final: bool): the list's length in
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

/* Record j of recs as an edit record (edits.pack: ..., key length u16 LE at the end): its bytes in
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

SHARED_PYDOC(links_by_url_groups_doc,
             "links_by_url_groups(recs, final) -> (groups, used): stage 4's edit records (webdb.writer.cascade, "
             "key = url 0x00 tag [fromID(16) op], edits.pack layout) cut into one group per url: (url + "
             "0x00, url + 0x01, (url, notice or None, [(fromID, op, value)])), the last notice of a url "
             "winning.  Unless final, the last url's group is left (it may go on in the next records): "
             "used is the index of its first record.  None for a record the Python code would fail on.");

PyObject *c_links_by_url_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t n;
    int final;
    if (groups_args("links_by_url_groups", args, nargs, &n, &final) < 0) return NULL;
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

SHARED_PYDOC(links_by_md5_groups_doc,
             "links_by_md5_groups(recs, final) -> (groups, used): stage 3's edit records (webdb.writer.cascade, "
             "key = md5(16) tag [url 0x00], edits.pack layout) cut into one group per md5: (md5, the end of "
             "the md5's key range, (delete_all, [(url, value)])), of several adds of a url the last.  "
             "Unless final, the last md5's group is left (it may go on in the next records): used is "
             "the index of its first record.  None for a record the Python code would fail on.");

PyObject *c_links_by_md5_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t n;
    int final;
    if (groups_args("links_by_md5_groups", args, nargs, &n, &final) < 0) return NULL;
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
            /* The group of md5 ends here; its range ends at the next prefix (prefix_end). */
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

SHARED_PYDOC(links_by_md5_adds_doc,
             "links_by_md5_adds(md5, ok, ov, adds, tail) -> (emit_keys, emit_values, splice): stage 3's link adds of "
             "one md5 (cascade.links_by_md5_adds_py in C).  ok, ov: the md5's stored links (keys md5 + url, "
             "sorted); adds: (url, value) in increasing url order.  An add whose url is not stored, or "
             "whose value differs from the stored one but in the flag byte, is emitted (url + tail, "
             "value) and spliced (md5 + url, value).  None for input it declines (not sorted, a key "
             "without the md5, an item that is not bytes): the Python code runs.");

PyObject *c_links_by_md5_adds(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2]) ||
        !PyList_Check(args[3]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "links_by_md5_adds(md5: bytes, ok: list, ov: list, adds: list, tail: bytes)");
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

SHARED_PYDOC(links_by_url_splice_doc,
             "links_by_url_splice(start, url, ledits, state_of, tail) -> (state, splice, fix, fixv): stage 4's link edits "
             "of a url without a target notice (cascade.links_by_url_splice_py in C).  ledits: (fromID, op, value) "
             "in fromID order; the last edit of a fromID wins (op 1 adds, 0 deletes).  If any link is "
             "added, state = state_of(url) (the target's state, called once), else -1.  State 0 (absent): "
             "(0, None, [], []).  Else the splice [(start + fromID, value or None)], each added link's flag "
             "byte set to the target's (1 if state is 2, else 0) where it differs, fix the fromID + "
             "tail of each link whose flag was set and fixv its new value.  None for input it "
             "declines (fromIDs out of order, "
             "an added value without a flag byte, an item of the wrong type).");

PyObject *c_links_by_url_splice(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[2]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "links_by_url_splice(start: bytes, url: bytes, ledits: list, state_of, tail: bytes)");
        return NULL;
    }
    PyObject *start = args[0], *tail = args[4], *res = NULL, *sp = NULL, *fix = NULL, *fixv = NULL;
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
    if (!(fix = PyList_New(0)) || !(fixv = PyList_New(0))) goto done;
    if (state == 0) {
        res = Py_BuildValue("(lOOO)", state, Py_None, fix, fixv);
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
            /* pagecodec.link_with_flags: the flags byte replaced; and a fix-up for stage 5, which
               carries the new value (stage 5 writes it without reading LinksByMD5). */
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
            if (PyList_Append(fixv, nv) < 0) {
                Py_DECREF(nv);
                Py_DECREF(k);
                goto fail;
            }
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
    res = Py_BuildValue("(lOOO)", state, sp, fix, fixv);
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
    Py_XDECREF(fixv);
    return res;
}
