/* ---- CRC-32 without a call into Python (use_crc32) ------------------------------------------
 *
 * Every block, piece and piece header a read checks goes through the crc32 callable the
 * caller passes (zlib.crc32).  A short lookup checks four or five of them (0.3-2 KiB each),
 * and through the callable each costs a memoryview, a call and an int; zlib's table-driven
 * loop also wants its 4-8 KiB of tables in cache, which a lookup between two others has
 * evicted.  use_crc32 registers zlib.crc32 after checking that the function here gives the
 * same values; where that callable is passed, crc_fast computes the same CRC-32 (IEEE 802.3,
 * reflected, zlib's crc32(value, data)) in C: with x86-64's carry-less multiply (PCLMULQDQ),
 * 16 bytes a step and no table, when the CPU has it; else a byte-at-a-time table.
 *
 * The multiply folds the 128 bits read so far into the 16 bytes 128 bits on: x = x.lo * K_LO
 * ^ x.hi * K_HI ^ next, with K_LO = x^(128+32) mod P and K_HI = x^(128-32) mod P (bit-reflected,
 * as the Intel white paper "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"
 * derives them; four lanes fold 512 bits on with that distance's pair).  The folded value is congruent to the message read so far, so its CRC (from
 * a zero register) is the message's: the last 16 bytes and the tail (< 16 bytes) go through
 * the table, which needs no final reduction step. */

#include "blockc.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL 1
#endif

static uint32_t table[256];
static PyObject *crc_fn; /* the callable crc_fast stands for (NULL: none registered) */
static int clmul;        /* the CPU has PCLMULQDQ */

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
}

/* The register r run over p[0:len] a byte at a time. */
static uint32_t crc_bytes(uint32_t r, const unsigned char *p, size_t len) {
    while (len--) r = table[(r ^ *p++) & 0xff] ^ (r >> 8);
    return r;
}

#ifdef HAVE_CLMUL
/* x (128 bits) folded into the 16 bytes at p, k the fold's (K_LO, K_HI). */
__attribute__((target("pclmul,sse2"))) static inline __m128i fold(__m128i x, __m128i k, const unsigned char *p) {
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00), hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), _mm_loadu_si128((const __m128i *)p));
}

/* The register r run over p[0:len], len >= 32: from 64 bytes on, four lanes 64 bytes apart
 * fold independently (the multiplies overlap) and are then folded into one; then 16 bytes a
 * step until fewer than 16 remain past the folded value; that value and the rest by table. */
__attribute__((target("pclmul,sse2"))) static uint32_t crc_clmul(uint32_t r, const unsigned char *p, size_t len) {
    const __m128i k1 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);  /* 128 bits on: hi K_HI, lo K_LO */
    const __m128i k4 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL); /* 512 bits on */
    __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)r));
    if (len >= 64) {
        __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16)), x2 = _mm_loadu_si128((const __m128i *)(p + 32)),
                x3 = _mm_loadu_si128((const __m128i *)(p + 48));
        for (p += 64, len -= 64; len >= 64; p += 64, len -= 64) {
            x = fold(x, k4, p);
            x1 = fold(x1, k4, p + 16);
            x2 = fold(x2, k4, p + 32);
            x3 = fold(x3, k4, p + 48);
        }
        unsigned char b[16];
        _mm_storeu_si128((__m128i *)b, x1);
        x = fold(x, k1, b);
        _mm_storeu_si128((__m128i *)b, x2);
        x = fold(x, k1, b);
        _mm_storeu_si128((__m128i *)b, x3);
        x = fold(x, k1, b);
    } else {
        p += 16;
        len -= 16;
    }
    for (; len >= 16; p += 16, len -= 16) x = fold(x, k1, p);
    unsigned char b[16];
    _mm_storeu_si128((__m128i *)b, x);
    return crc_bytes(crc_bytes(0, b, 16), p, len);
}
#endif

/* zlib.crc32(p[0:len], value) */
static uint32_t crc_c(uint32_t value, const unsigned char *p, size_t len) {
    uint32_t r = ~value;
#ifdef HAVE_CLMUL
    if (clmul && len >= 32) return ~crc_clmul(r, p, len);
#endif
    return ~crc_bytes(r, p, len);
}

int crc_fast(PyObject *crc32, const unsigned char *p, Py_ssize_t len, uint32_t *out) {
    if (crc32 != crc_fn || !crc_fn) return 0;
    if (len >= (1 << 16)) { /* zlib.crc32 releases the GIL for long data: so does this */
        Py_BEGIN_ALLOW_THREADS *out = crc_c(0, p, (size_t)len);
        Py_END_ALLOW_THREADS
    } else {
        *out = crc_c(0, p, (size_t)len);
    }
    return 1;
}

SHARED_PYDOC(use_crc32_doc,
             "use_crc32(crc32) -> bool: compute crc32 (zlib.crc32) in C wherever it is passed, after "
             "checking that both give the same values on data of every length up to 300 bytes; False "
             "(and the callable stays in use) if they differ.");

PyObject *c_use_crc32(PyObject *self, PyObject *fn) {
    unsigned char d[300];
    uint32_t s = 12345;
    make_table();
#ifdef HAVE_CLMUL
    __builtin_cpu_init();
    clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
#endif
    for (size_t i = 0; i < sizeof d; i++) d[i] = (unsigned char)((s = s * 1103515245u + 12345u) >> 16);
    for (int pass = 0; pass < 2; pass++)
        for (Py_ssize_t n = 0; n <= (Py_ssize_t)sizeof d; n++) {
            PyObject *b = PyBytes_FromStringAndSize((const char *)d + pass, n - pass < 0 ? 0 : n - pass);
            PyObject *c = b ? PyObject_CallOneArg(fn, b) : NULL;
            Py_XDECREF(b);
            if (!c) return NULL;
            unsigned long v = PyLong_AsUnsignedLong(c);
            Py_DECREF(c);
            if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
            if ((uint32_t)v != crc_c(0, d + pass, (size_t)(n - pass < 0 ? 0 : n - pass))) {
                Py_CLEAR(crc_fn);
                Py_RETURN_FALSE;
            }
        }
    Py_XSETREF(crc_fn, Py_NewRef(fn));
    Py_RETURN_TRUE;
}
