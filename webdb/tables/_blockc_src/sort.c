/* ---- sort_records: a list of byte records sorted in place (webdb/util/sortbuf.py) ------------------
 * The counterpart of list.sort() for a list of bytes (the fallback, which the tests compare it to). */

#include "blockc.h"

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

SHARED_PYDOC(sort_records_doc,
             "sort_records(recs) -> None: recs.sort() for a list of bytes (a multikey sort on 16-byte "
             "slices); TypeError if an item is not bytes.");

PyObject *c_sort_records(PyObject *self, PyObject *arg) {
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
