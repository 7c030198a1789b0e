/* The keyspace's table (keyspace/_keytable.c) as other compiled modules see it: its entry layout and the few
 * calls the compiled core (fastpath/_core.c) makes on a database's `data`, through a capsule:
 *
 *     const KeyTableAPI *kt = PyCapsule_Import("durakv.keyspace._keytable.CAPI", 0);
 *
 * One entry is one allocation holding a key and its value, so that a key costs what Valkey's costs: a string of
 * at most KT_INLINE_MAX bytes is kept inline (no Python object), an integer (an expiry time) as an int64, any
 * other value (a hash, a set, a large string) as a reference to its Python object. `lru` is the key's access
 * time (the LRU clock in seconds, or LFU's packed minutes and counter) when KT_ACCESS is set: what Valkey keeps in
 * its object header, here in the entry. */

#ifndef DURAKV_KEYTABLE_H
#define DURAKV_KEYTABLE_H

#include <Python.h>
#include <stdint.h>

#define KT_OBJ        0x80000000u   /* the value is a PyObject * (a strong reference), kept before the key */
#define KT_ACCESS     0x40000000u   /* lru holds an access time */
#define KT_INT        0x20000000u   /* the value is an int64, kept before the key */
#define KT_LEN_MASK   0x1FFFFFFFu   /* an inline string's length */
#define KT_INLINE_MAX 4096          /* longer strings stay Python objects: a read then copies nothing */

typedef struct kt_entry {
    struct kt_entry *next;          /* the bucket's chain */
    uint32_t hash;                  /* the low 32 bits of the key's Python hash */
    uint32_t lru;
    uint32_t klen;
    uint32_t info;                  /* KT_* flags | the inline string's length */
    char data[];                    /* [PyObject * or int64 when KT_OBJ/KT_INT] key [inline string] */
} kt_entry;

static inline int kt_is_inline(const kt_entry *e) { return (e->info & (KT_OBJ | KT_INT)) == 0; }
static inline const char *kt_key(const kt_entry *e) { return e->data + (kt_is_inline(e) ? 0 : 8); }
/* an inline string value: its bytes and length (only when kt_is_inline) */
static inline const char *kt_str(const kt_entry *e) { return e->data + e->klen; }
static inline Py_ssize_t kt_str_len(const kt_entry *e) { return (Py_ssize_t)(e->info & KT_LEN_MASK); }
/* a KT_OBJ value, borrowed */
static inline PyObject *kt_obj(const kt_entry *e) { return *(PyObject *const *)e->data; }
static inline void kt_set_access(kt_entry *e, uint32_t lru) { e->lru = lru; e->info |= KT_ACCESS; }

typedef struct {
    PyTypeObject *type;
    /* 1 and *out set when key is present, 0 when not (or not bytes), -1 with an exception */
    int (*find)(PyObject *table, PyObject *key, kt_entry **out);
    /* table[key] = value: 0 and *out (when not NULL) the key's entry, or -1 with an exception. Entries found
     * before are invalid after it. */
    int (*set)(PyObject *table, PyObject *key, PyObject *value, kt_entry **out);
    /* deletes key: 1, 0 when absent, -1 with an exception */
    int (*del)(PyObject *table, PyObject *key);
    /* the entry's value as a new reference (a bytes object for an inline string) */
    PyObject *(*value)(const kt_entry *e);
    /* A hint, no lookup: starts loading the bucket and first entry of each of keys[0..n) (bytes; others are
     * skipped) so that the finds that follow overlap their cache misses instead of taking them one by one. It
     * computes (and so caches) each key's hash and never raises. */
    void (*prefetch)(PyObject *table, PyObject *const *keys, Py_ssize_t n);
} KeyTableAPI;

#define KT_PREFETCH_MAX 32         /* keys one prefetch call handles */
#define KEYTABLE_CAPSULE "durakv.keyspace._keytable.CAPI"

#endif
