/* ---- a table's index searched in place (TableReader._ix): no lists of keys built ------------
 *
 * An index block (format.md §1.2) has one record per data block: key = first key, value = offset
 * u64, length u32, count u32, then the last key.  A reader that only looks up short ranges keeps
 * the decompressed index block as it is and searches it here. */

#include "blockc.h"
#include <unistd.h> /* pread (short_file) */

/* Index of the first entry in lo..hi-1 whose first key is > key (bisect_right), or >= key
 * when right is 0 (bisect_left). */
static Py_ssize_t bisect_first(const Block *b, Py_ssize_t lo, Py_ssize_t hi, const char *key, Py_ssize_t klen, int right) {
    return search(b, lo, hi, key, klen, cmp_key, right);
}

SHARED_PYDOC(index_check_doc,
             "index_check(raw, n, data_end, count) -> bool: every entry of the index block raw (n "
             "entries) as TableReader's index load checks it: a value of at least 16 bytes, blocks "
             "back to back from offset 0 to data_end, each at least a trailer long, keys in order "
             "within and across blocks, counts adding up to count.");

PyObject *c_index_check(PyObject *self, PyObject *args) {
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
PyObject *read_at(int fd, uint64_t off, Py_ssize_t len) {
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

/* A block at most this long is read whole by short_pieces, in one pread: its header and the
 * pieces the range reaches come from the same read.  Two small preads cost about what one of
 * 8 KiB does (the syscall, not the copy, is most of a read from the page cache), and a delta
 * run's blocks are mostly smaller than this; a larger block reads its tail, then the span. */
#define WHOLE_BYTES 8192

/* The records in [start, stop) of the codec-3 block at off (len bytes on disk), reading its
 * tail (the whole block if at most WHOLE_BYTES), then only the pieces the range reaches (no
 * second read when they lie in what the first read): (keys, values, n); Py_None if it is not
 * sound; NotImplemented if it is not a codec-3 block (read it whole); NULL on error. */
static PyObject *short_pieces(int fd, uint64_t off, Py_ssize_t len, PyObject *start, PyObject *stop, PyObject *crc32,
                              PyObject *decompress) {
    Py_ssize_t t = len <= WHOLE_BYTES || len < TAIL_BYTES ? len : TAIL_BYTES, p0, p1;
    PyObject *tail = read_at(fd, off + (uint64_t)(len - t), t), *res = NULL, *span = NULL;
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
    const unsigned char *s; /* piece p0's first byte */
    if (ps.at[p0] >= len - t) { /* the span lies in the tail read (ps.at[p1 + 1] is inside the body) */
        s = p + (ps.at[p0] - (len - t));
    } else {
        span = read_at(fd, off + (uint64_t)ps.at[p0], ps.at[p1 + 1] - ps.at[p0]);
        if (!span || span == Py_None) {
            res = span;
            span = NULL;
            goto done;
        }
        s = (const unsigned char *)PyBytes_AS_STRING(span);
    }
    res = pieces_range(crc32, decompress, s, &ps, p0, p1, start, stop);
done:
    Py_XDECREF(span);
    pieces_release(&ps);
    Py_DECREF(tail);
    return res;
}

SHARED_PYDOC(short_file_doc,
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

PyObject *c_short_file(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

SHARED_PYDOC(short_levels_doc,
             "short_levels(files, start, stop, most, crc32, decompress) -> (keys, values) | None | False: "
             "Levels.short_range in one call: files are (raw, n, fd, pieces, run) of the files of a "
             "table's levels, newest first (short_file's arguments, run: a delta run); each file's "
             "records in [start, stop) as short_file gives them, merged as merge does.  None if a "
             "file's range reaches more than most blocks; False if a block is not sound or the "
             "records are not as merge wants them (the caller's Python path names the fault).");

PyObject *c_short_levels(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
