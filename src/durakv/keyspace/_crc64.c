/* CRC-64/Jones as Valkey's crc64.c computes it (reflected, polynomial 0xad93d23594c935a9, no final xor): the
 * checksum of DUMP payloads and RDB files. The compiled twin of keyspace/rdbvalue.py's crc64, which stays the
 * reference and the fallback where no compiler was found at install time; tests/server/test_rdb_payload.py checks that
 * both give the same checksums.
 *
 * Slicing-by-8: eight 256-entry tables, eight input bytes per step. The GIL is released for inputs of 64 KiB
 * and more, so a thread may checksum a large payload while the event loop runs. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define POLY_REFLECTED 0x95AC9329AC4BC9B5ULL
#define RELEASE_GIL_BYTES (64 * 1024)

static uint64_t table[8][256];

static void init_tables(void) {
    for (int i = 0; i < 256; i++) {
        uint64_t c = (uint64_t)i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY_REFLECTED : c >> 1;
        table[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = table[0][table[t - 1][i] & 0xff] ^ (table[t - 1][i] >> 8);
}

static uint64_t crc64_update(uint64_t crc, const unsigned char *p, Py_ssize_t n) {
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        crc ^= w;
        crc = table[7][crc & 0xff] ^ table[6][(crc >> 8) & 0xff] ^ table[5][(crc >> 16) & 0xff] ^
              table[4][(crc >> 24) & 0xff] ^ table[3][(crc >> 32) & 0xff] ^ table[2][(crc >> 40) & 0xff] ^
              table[1][(crc >> 48) & 0xff] ^ table[0][crc >> 56];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static PyObject *py_crc64(PyObject *self, PyObject *args) {
    Py_buffer buf;
    unsigned long long crc = 0;
    if (!PyArg_ParseTuple(args, "y*|K:crc64", &buf, &crc))
        return NULL;
    uint64_t out;
    if (buf.len >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        out = crc64_update((uint64_t)crc, (const unsigned char *)buf.buf, buf.len);
        Py_END_ALLOW_THREADS
    } else {
        out = crc64_update((uint64_t)crc, (const unsigned char *)buf.buf, buf.len);
    }
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLongLong(out);
}

static PyMethodDef methods[] = {
    {"crc64", py_crc64, METH_VARARGS, "crc64(data, crc=0) -> int: CRC-64/Jones of data, continuing from crc."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_crc64", NULL, -1, methods};

PyMODINIT_FUNC PyInit__crc64(void) {
    init_tables();
    return PyModule_Create(&module);
}
