/* The module webdb.tables._blockc: its method table (the functions of every C file, blockc.h). */
#include "blockc.h"

static PyMethodDef methods[] = {
    {"index_entries", c_index_entries, METH_VARARGS, index_entries_doc},
    {"unpack", (PyCFunction)(void (*)(void))c_unpack, METH_FASTCALL, unpack_doc},
    {"unpack_range", (PyCFunction)(void (*)(void))c_unpack_range, METH_FASTCALL, unpack_range_doc},
    {"merge", (PyCFunction)(void (*)(void))c_merge, METH_FASTCALL, merge_doc},
    {"merge_run", (PyCFunction)(void (*)(void))c_merge_run, METH_FASTCALL, merge_run_doc},
    {"merge_block", (PyCFunction)(void (*)(void))c_merge_block, METH_FASTCALL, merge_block_doc},
    {"merge_segs", (PyCFunction)(void (*)(void))c_merge_segs, METH_FASTCALL, merge_segs_doc},
    {"links", (PyCFunction)(void (*)(void))c_links, METH_FASTCALL, links_doc},
    {"find", c_find, METH_VARARGS, find_doc},
    {"get", c_get, METH_VARARGS, get_doc},
    {"split", c_split, METH_VARARGS, split_doc},
    {"values", c_values, METH_VARARGS, values_doc},
    {"keys", c_keys, METH_VARARGS, keys_doc},
    {"lens", c_lens, METH_VARARGS, lens_doc},
    {"build", c_build, METH_VARARGS, build_doc},
    {"build_run", c_build_run, METH_VARARGS, build_run_doc},
    {"run_cuts", c_run_cuts, METH_VARARGS, run_cuts_doc},
    {"gather_blocks", c_gather_blocks, METH_VARARGS, gather_blocks_doc},
    {"hash_values", c_hash_values, METH_VARARGS, hash_values_doc},
    {"unhex", c_unhex, METH_VARARGS, unhex_doc},
    {"has_control", c_has_control, METH_VARARGS, has_control_doc},
    {"sort_records", c_sort_records, METH_O, sort_records_doc},
    {"diff", (PyCFunction)(void (*)(void))c_diff, METH_FASTCALL, diff_doc},
    {"span", (PyCFunction)(void (*)(void))c_span, METH_FASTCALL, span_doc},
    {"unpack_pieces", (PyCFunction)(void (*)(void))c_unpack_pieces, METH_FASTCALL, unpack_pieces_doc},
    {"unpack_range_pieces", (PyCFunction)(void (*)(void))c_unpack_range_pieces, METH_FASTCALL, unpack_range_pieces_doc},
    {"seal_pieces", c_seal_pieces, METH_VARARGS, seal_pieces_doc},
    {"index_check", c_index_check, METH_VARARGS, index_check_doc},
    {"short_file", (PyCFunction)(void (*)(void))c_short_file, METH_FASTCALL, short_file_doc},
    {"short_levels", (PyCFunction)(void (*)(void))c_short_levels, METH_FASTCALL, short_levels_doc},
    {"levelseek", (PyCFunction)(void (*)(void))c_levelseek, METH_FASTCALL, levelseek_doc},
    {"lookup", (PyCFunction)(void (*)(void))c_lookup, METH_FASTCALL, lookup_doc},
    {"use_lz4", c_use_lz4, METH_VARARGS, use_lz4_doc},
    {"use_crc32", c_use_crc32, METH_VARARGS, use_crc32_doc},
    {"crc_blocks", c_crc_blocks, METH_VARARGS, crc_blocks_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "webdb.tables._blockc",
    .m_doc = "The block codec's inner loops in C; webdb/tables/block.py is the reference and the fallback.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__blockc(void) { return PyModule_Create(&module); }
