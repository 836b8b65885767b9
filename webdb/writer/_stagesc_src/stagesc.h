/* The writer's inner loops in C (docs/design.md "Compiled kernels"): one extension,
 * webdb.writer._stagesc, built from the C files beside this header, one a concern:
 *
 *   edits.c   step 0: edit records packed, filtered and joined (webdb/writer/edits.py,
 *             writer.py, cascade.py), a fetch round's link records and url checks (columns.py)
 *   stages.c  the cascade's per-range loops of stages 3 and 4 (webdb/writer/cascade.py)
 *   module.c  the method table and the module
 *
 * Each function is the exact counterpart of a pure-Python function of webdb/writer/ (the
 * fallback, and the reference the tests compare these to; docs/design.md lists the pairs).  On
 * input the Python code would fail on, a function declines (returns None) or raises TypeError,
 * as its doc string says, so that the Python code names the problem.  The edit record layout
 * these functions follow is owned by webdb/writer/edits.py (docs/format.md "Edit records").
 *
 * Built by setup.py as an optional extension: without a compiler the package runs the Python
 * code.  (The directory is not named _stagesc, for the reason webdb/tables/_blockc_src/blockc.h
 * gives.)
 */
#ifndef WEBDB_STAGESC_H
#define WEBDB_STAGESC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Two bytes objects compared as bytes compare: <0, 0, >0. */
static inline int bytes_cmp(PyObject *a, PyObject *b) {
    Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b), m = la < lb ? la : lb;
    int c = m ? memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)m) : 0;
    if (c) return c;
    return la < lb ? -1 : (la > lb ? 1 : 0);
}

/* Two bytes objects equal. */
static inline int bytes_eq(PyObject *a, PyObject *b) {
    Py_ssize_t l = PyBytes_GET_SIZE(a);
    return l == PyBytes_GET_SIZE(b) && (l == 0 || memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)l) == 0);
}

/* 1 if the list holds only bytes, each greater than the one before. */
static inline int sorted_bytes(PyObject *l) {
    Py_ssize_t n = PyList_GET_SIZE(l);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *k = PyList_GET_ITEM(l, j);
        if (!PyBytes_Check(k) || (j && bytes_cmp(PyList_GET_ITEM(l, j - 1), k) >= 0)) return 0;
    }
    return 1;
}

/* What one C file lends the others: hidden, so that it stays out of the module's dynamic
 * symbols, and calls to it go direct. */
#if defined(__GNUC__)
#define SHARED __attribute__((visibility("hidden")))
#else
#define SHARED
#endif

/* A function's doc string: PyDoc_STRVAR's, but not static (module.c's method table names it). */
#define SHARED_PYDOC(name, str) const char name[] = PyDoc_STR(str)

/* The module's functions and their doc strings, by file (module.c's method table). */
/* edits.c */
SHARED PyObject *c_pack_edits(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_first_if_new(PyObject *self, PyObject *args);
SHARED PyObject *c_join_run(PyObject *self, PyObject *args);
SHARED PyObject *c_link_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_urls_ok(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED extern const char pack_edits_doc[], first_if_new_doc[], join_run_doc[], link_records_doc[], urls_ok_doc[];

/* stages.c */
SHARED PyObject *c_links_by_url_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_links_by_md5_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_links_by_md5_adds(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED PyObject *c_links_by_url_splice(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
SHARED extern const char links_by_url_groups_doc[], links_by_md5_groups_doc[], links_by_md5_adds_doc[], links_by_url_splice_doc[];

#endif
