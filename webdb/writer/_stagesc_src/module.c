/* The module webdb.writer._stagesc: its method table (the functions of every C file, stagesc.h). */
#include "stagesc.h"

static PyMethodDef methods[] = {
    {"pack_edits", (PyCFunction)(void (*)(void))c_pack_edits, METH_FASTCALL, pack_edits_doc},
    {"first_if_new", c_first_if_new, METH_VARARGS, first_if_new_doc},
    {"join_run", c_join_run, METH_VARARGS, join_run_doc},
    {"link_records", (PyCFunction)(void (*)(void))c_link_records, METH_FASTCALL, link_records_doc},
    {"urls_ok", (PyCFunction)(void (*)(void))c_urls_ok, METH_FASTCALL, urls_ok_doc},
    {"links_by_url_groups", (PyCFunction)(void (*)(void))c_links_by_url_groups, METH_FASTCALL, links_by_url_groups_doc},
    {"links_by_md5_groups", (PyCFunction)(void (*)(void))c_links_by_md5_groups, METH_FASTCALL, links_by_md5_groups_doc},
    {"links_by_md5_adds", (PyCFunction)(void (*)(void))c_links_by_md5_adds, METH_FASTCALL, links_by_md5_adds_doc},
    {"links_by_url_splice", (PyCFunction)(void (*)(void))c_links_by_url_splice, METH_FASTCALL, links_by_url_splice_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "webdb.writer._stagesc",
    .m_doc = "The writer's edit and stage kernels in C; webdb/writer/kernels.py loads it, the Python "
             "references beside it in webdb/writer/ are the fallback.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__stagesc(void) { return PyModule_Create(&module); }
