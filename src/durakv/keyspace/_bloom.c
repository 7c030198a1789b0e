/* The hashing and bit operations of one Bloom sub-filter exactly as valkey-bloom computes them (it uses the Rust
 * `bloomfilter` crate 3.0.1 with `siphasher` 1.0.1): the compiled twin of keyspace/bloom.py's pure-Python
 * reference (`filter_contains_py`, `filter_add_py`), which stays the fallback where no compiler was found at install
 * time; tests/unit/test_bloom_units.py checks that both give the same bits as the crate.
 *
 * A sub-filter is the crate's byte layout, held in one bytearray: a 45-byte header (version u8 = 1, bitmap length
 * in bytes u64 LE, number of hash functions k u32 LE, seed [32]) then the bitmap. Its item hashes are two SipHash-1-3
 * values keyed by the seed's halves over the item as Rust hashes a `[u8]` (its length as a little-endian u64, then
 * its bytes); hash i >= 2 is (h0 + i * h1 mod 2^64) mod 0xFFFFFFFFFFFFFFC5, and each hash picks bit (h mod bits),
 * least significant bit first within a byte. Why C: this is the whole cost of BF.ADD / BF.EXISTS (7 to 20 hash
 * positions per item at the default error rates), 150 to 270 times cheaper here than in Python (measured with
 * scripts/measure_bloom_hash.py: 192 ns against 51 us per added item at 0.01), and the filter is
 * part of keyspace/'s value type (RDB load and journal replay run it too), below fastpath/ like _crc64.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_BYTES 45
#define K_OFFSET 9
#define SEED_OFFSET 13
#define LARGEST_U64_PRIME 0xFFFFFFFFFFFFFFC5ULL

static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

static inline uint64_t load_le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

#define SIPROUND                                                                                                 \
    do {                                                                                                         \
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);                                                \
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;                                                                   \
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;                                                                   \
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);                                                \
    } while (0)

/* SipHash-1-3 keyed by key[0..16] of (len as u64 LE) || m[0..len]: the 8-byte prefix is exactly one block. */
static uint64_t sip13_slice(const unsigned char *key, const unsigned char *m, size_t len) {
    uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    uint64_t w = (uint64_t)len;
    v3 ^= w; SIPROUND; v0 ^= w;
    size_t full = len & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        w = load_le64(m + i);
        v3 ^= w; SIPROUND; v0 ^= w;
    }
    uint64_t b = ((uint64_t)(len + 8)) << 56;
    for (size_t i = 0; i < (len & 7); i++)
        b |= (uint64_t)m[full + i] << (8 * i);
    v3 ^= b; SIPROUND; v0 ^= b;
    v2 ^= 0xff;
    SIPROUND; SIPROUND; SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

typedef struct {
    unsigned char *bits;
    uint64_t nbits;
    uint32_t k;
    const unsigned char *seed;
} filter_view;

static int view_of(Py_buffer *buf, filter_view *f) {
    if (buf->len < HEADER_BYTES + 1) {
        PyErr_SetString(PyExc_ValueError, "a Bloom sub-filter is a 45-byte header and a bitmap");
        return -1;
    }
    const unsigned char *p = buf->buf;
    f->bits = (unsigned char *)buf->buf + HEADER_BYTES;
    f->nbits = (uint64_t)(buf->len - HEADER_BYTES) * 8;
    f->k = (uint32_t)p[K_OFFSET] | (uint32_t)p[K_OFFSET + 1] << 8 | (uint32_t)p[K_OFFSET + 2] << 16 |
           (uint32_t)p[K_OFFSET + 3] << 24;
    f->seed = p + SEED_OFFSET;
    return 0;
}

static inline uint64_t nth_hash(uint64_t h0, uint64_t h1, uint32_t i) {
    if (i == 0) return h0;
    if (i == 1) return h1;
    return (h0 + (uint64_t)i * h1) % LARGEST_U64_PRIME;
}

static int view_contains(const filter_view *f, uint64_t h0, uint64_t h1) {
    for (uint32_t i = 0; i < f->k; i++) {
        uint64_t bit = nth_hash(h0, h1, i) % f->nbits;
        if (!(f->bits[bit >> 3] & (1u << (bit & 7)))) return 0;
    }
    return 1;
}

/* contains(filters, item) -> bool: whether every bit of item is set in any of the sub-filters (a sequence of
 * bytes-like objects in the crate's layout). Sub-filters of one object share their seed: the item is hashed again
 * only when a seed differs from the previous one. */
static PyObject *py_contains(PyObject *self, PyObject *args) {
    PyObject *filters;
    Py_buffer item;
    if (!PyArg_ParseTuple(args, "Oy*:contains", &filters, &item)) return NULL;
    PyObject *seq = PySequence_Fast(filters, "filters must be a sequence");
    if (seq == NULL) {
        PyBuffer_Release(&item);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    unsigned char seed[32];
    int hashed = 0, found = 0;
    uint64_t h0 = 0, h1 = 0;
    for (Py_ssize_t j = 0; j < n && !found; j++) {
        Py_buffer buf;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, j), &buf, PyBUF_SIMPLE) < 0) goto fail;
        filter_view f;
        if (view_of(&buf, &f) < 0) {
            PyBuffer_Release(&buf);
            goto fail;
        }
        if (!hashed || memcmp(seed, f.seed, 32) != 0) {
            memcpy(seed, f.seed, 32);
            h0 = sip13_slice(seed, item.buf, (size_t)item.len);
            h1 = sip13_slice(seed + 16, item.buf, (size_t)item.len);
            hashed = 1;
        }
        found = view_contains(&f, h0, h1);
        PyBuffer_Release(&buf);
    }
    Py_DECREF(seq);
    PyBuffer_Release(&item);
    return PyBool_FromLong(found);
fail:
    Py_DECREF(seq);
    PyBuffer_Release(&item);
    return NULL;
}

/* add(filter, item): sets item's bits in one sub-filter (a writable buffer: the bytearray). */
static PyObject *py_add(PyObject *self, PyObject *args) {
    Py_buffer buf, item;
    if (!PyArg_ParseTuple(args, "w*y*:add", &buf, &item)) return NULL;
    filter_view f;
    if (view_of(&buf, &f) < 0) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&item);
        return NULL;
    }
    uint64_t h0 = sip13_slice(f.seed, item.buf, (size_t)item.len);
    uint64_t h1 = sip13_slice(f.seed + 16, item.buf, (size_t)item.len);
    for (uint32_t i = 0; i < f.k; i++) {
        uint64_t bit = nth_hash(h0, h1, i) % f.nbits;
        f.bits[bit >> 3] |= (unsigned char)(1u << (bit & 7));
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&item);
    Py_RETURN_NONE;
}

/* sip13(key16, data) -> int: SipHash-1-3 of `data` as Rust hashes a byte slice (length prefix included). */
static PyObject *py_sip13(PyObject *self, PyObject *args) {
    Py_buffer key, data;
    if (!PyArg_ParseTuple(args, "y*y*:sip13", &key, &data)) return NULL;
    if (key.len != 16) {
        PyBuffer_Release(&key);
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "a SipHash key is 16 bytes");
        return NULL;
    }
    uint64_t h = sip13_slice(key.buf, data.buf, (size_t)data.len);
    PyBuffer_Release(&key);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLongLong(h);
}

static PyMethodDef methods[] = {
    {"contains", py_contains, METH_VARARGS, "contains(filters, item) -> bool"},
    {"add", py_add, METH_VARARGS, "add(filter, item): set item's bits in one sub-filter"},
    {"sip13", py_sip13, METH_VARARGS, "sip13(key16, data) -> int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bloom", NULL, -1, methods};

PyMODINIT_FUNC PyInit__bloom(void) { return PyModule_Create(&module); }
