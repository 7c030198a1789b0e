/* KeyTable: a database's keys and values, at about what a key costs in Valkey (keyspace/keytable.py is the
 * pure-Python reference with the same interface; docs/memory.md says where each byte goes).
 *
 * A Python dict of bytes keys and bytes values costs a dict slot (~42 B with its index), a key object
 * (33 B of header + the key, rounded up to 16) and a value object (33 B + the value, rounded), and the access
 * time OBJECT IDLETIME needs was one more dict entry. Here a key is one allocation: a 24-byte header (chain
 * link, hash, access time, lengths) then the key and, for a string of at most KT_INLINE_MAX bytes, the string
 * itself; other values (hashes, sets, lists, large strings, module types) are referenced Python objects. Buckets
 * are chained, their count a power of two grown at load 1 and shrunk below 1/8, as Valkey's dict: about 8-16 B
 * per key more. SCAN walks the buckets with Valkey's reverse-binary cursor, which stays valid across resizes,
 * and a random key is a random bucket's: neither needs a copy of the key list.
 *
 * The table takes no part in the cycle collector: its values (containers of bytes, module objects) never refer
 * back to it, and a full collection would otherwise walk every key. An iterator checks `version`, which every
 * insert, delete, resize and clear changes, and fails as a dict's does rather than read freed entries.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "keytable.h"

#define KT_MIN_BUCKETS 8
#define KT_ACCESS_MAX 0xFFFFFFFFu

typedef struct {
    PyObject_HEAD
    kt_entry **buckets;       /* NULL while size is 0 */
    uint64_t size;            /* buckets: 0 or a power of two */
    Py_ssize_t used;
    uint64_t version;
    size_t entry_bytes;       /* the entries' allocations, rounded as the allocator rounds them */
    Py_ssize_t objects;       /* entries whose value is a Python object */
} KeyTable;

static PyTypeObject KeyTable_Type;
static PyTypeObject KeyTableIter_Type;

/* What an allocation of n bytes takes: pymalloc's 16-byte classes up to 512 B, glibc malloc's 16-byte
 * rounded chunks with their 8-byte header above (the figure `stats()` reports; the table's own accounting). */
static inline size_t alloc_size(size_t n) {
    if (n <= 512) return (n + 15) & ~(size_t)15;
    size_t c = (n + 8 + 15) & ~(size_t)15;
    return c < 32 ? 32 : c;
}

static inline size_t entry_size(const kt_entry *e) {
    return sizeof(kt_entry) + e->klen + (kt_is_inline(e) ? kt_str_len(e) : 8);
}

/* -- keys ------------------------------------------------------------------------------------------- */

/* The key's bytes and 32-bit hash: 0, or 1 when key is not bytes (no key of the table, as a str is no key of a
 * dict of bytes: lookups find nothing, a store refuses it), -1 on an error. A bytes subclass is hashed as the
 * bytes it holds (its own __hash__ could differ from the one its equal exact bytes has). */
static int key_parts(PyObject *key, const char **k, Py_ssize_t *klen, uint32_t *hash) {
    if (!PyBytes_Check(key)) return 1;
    Py_hash_t h;
    if (PyBytes_CheckExact(key)) {
        h = PyObject_Hash(key);       /* cached in the object after the first time */
    } else {
        PyObject *exact = PyBytes_FromStringAndSize(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        if (exact == NULL) return -1;
        h = PyObject_Hash(exact);
        Py_DECREF(exact);
    }
    if (h == -1 && PyErr_Occurred()) return -1;
    *k = PyBytes_AS_STRING(key);
    *klen = PyBytes_GET_SIZE(key);
    if ((uint64_t)*klen > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_OverflowError, "key longer than 4 GiB");
        return -1;
    }
    *hash = (uint32_t)(Py_uhash_t)h;
    return 0;
}

/* The link that points at key's entry, or NULL when it is absent. */
static kt_entry **find_link(KeyTable *t, const char *k, Py_ssize_t klen, uint32_t hash) {
    if (t->size == 0) return NULL;
    kt_entry **pp = &t->buckets[hash & (t->size - 1)];
    for (kt_entry *e = *pp; e != NULL; pp = &e->next, e = *pp) {
        if (e->hash == hash && e->klen == (uint32_t)klen && memcmp(kt_key(e), k, (size_t)klen) == 0) return pp;
    }
    return NULL;
}

static PyObject *entry_key(const kt_entry *e) {
    return PyBytes_FromStringAndSize(kt_key(e), e->klen);
}

static PyObject *entry_value(const kt_entry *e) {
    if (e->info & KT_OBJ) {
        PyObject *o = kt_obj(e);
        Py_INCREF(o);
        return o;
    }
    if (e->info & KT_INT) {
        int64_t v;
        memcpy(&v, e->data, sizeof v);
        return PyLong_FromLongLong(v);
    }
    return PyBytes_FromStringAndSize(kt_str(e), kt_str_len(e));
}

/* -- resizing --------------------------------------------------------------------------------------- */

static int resize(KeyTable *t, uint64_t size) {
    kt_entry **nb = PyMem_Calloc((size_t)size, sizeof(kt_entry *));
    if (nb == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t mask = size - 1;
    for (uint64_t i = 0; i < t->size; i++) {
        kt_entry *e = t->buckets[i];
        while (e != NULL) {
            kt_entry *next = e->next;
            kt_entry **slot = &nb[e->hash & mask];
            e->next = *slot;
            *slot = e;
            e = next;
        }
    }
    PyMem_Free(t->buckets);
    t->buckets = nb;
    t->size = size;
    t->version++;
    return 0;
}

static uint64_t fit(uint64_t n) {
    uint64_t s = KT_MIN_BUCKETS;
    while (s < n && s < ((uint64_t)1 << 32)) s <<= 1;
    return s;
}

static void maybe_shrink(KeyTable *t) {
    if (t->size > KT_MIN_BUCKETS && (uint64_t)t->used * 8 < t->size) {
        if (resize(t, fit((uint64_t)t->used + 1)) < 0) PyErr_Clear();   /* the old buckets still serve */
    }
}

/* -- entries ---------------------------------------------------------------------------------------- */

/* How value is kept: KT_OBJ, KT_INT or 0 (an inline string, its length in *vlen). */
static uint32_t value_kind(PyObject *value, Py_ssize_t *vlen, int64_t *ival) {
    if (PyBytes_CheckExact(value) && PyBytes_GET_SIZE(value) <= KT_INLINE_MAX) {
        *vlen = PyBytes_GET_SIZE(value);
        return 0;
    }
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (!overflow && !(v == -1 && PyErr_Occurred())) {
            *ival = v;
            return KT_INT;
        }
        PyErr_Clear();
    }
    return KT_OBJ;
}

static void fill_value(kt_entry *e, uint32_t kind, PyObject *value, Py_ssize_t vlen, int64_t ival) {
    if (kind == KT_OBJ) {
        Py_INCREF(value);
        *(PyObject **)e->data = value;
    } else if (kind == KT_INT) {
        memcpy(e->data, &ival, sizeof ival);
    } else if (vlen) {
        memcpy(e->data + e->klen, PyBytes_AS_STRING(value), (size_t)vlen);
    }
}

static int table_set(KeyTable *t, PyObject *key, PyObject *value, kt_entry **out) {
    const char *k;
    Py_ssize_t klen, vlen = 0;
    uint32_t hash;
    int64_t ival = 0;
    int rc = key_parts(key, &k, &klen, &hash);
    if (rc) {
        if (rc > 0) PyErr_Format(PyExc_TypeError, "KeyTable keys are bytes, not %.100s", Py_TYPE(key)->tp_name);
        return -1;
    }
    uint32_t kind = value_kind(value, &vlen, &ival);
    size_t need = sizeof(kt_entry) + (size_t)klen + (kind ? 8 : (size_t)vlen);
    kt_entry **pp = find_link(t, k, klen, hash);
    if (pp != NULL) {
        kt_entry *old = *pp;
        uint32_t old_info = old->info;
        uint32_t old_kind = old_info & (KT_OBJ | KT_INT);
        PyObject *drop = old_kind == KT_OBJ ? kt_obj(old) : NULL;
        size_t old_size = entry_size(old);
        kt_entry *e;
        if (old_kind == kind) {
            /* same layout: the header and the key stay where they are */
            e = kind == 0 && need != old_size ? PyMem_Realloc(old, need) : old;
            if (e == NULL) {
                PyErr_NoMemory();
                return -1;
            }
        } else {
            e = PyMem_Malloc(need);
            if (e == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            e->next = old->next;
            e->hash = hash;
            e->lru = old->lru;
            e->klen = (uint32_t)klen;
            memcpy(e->data + (kind ? 8 : 0), k, (size_t)klen);
            PyMem_Free(old);
        }
        e->info = (old_info & KT_ACCESS) | kind | (kind ? 0 : (uint32_t)vlen);
        if (e != old) *pp = e;
        fill_value(e, kind, value, vlen, ival);
        t->entry_bytes += alloc_size(need) - alloc_size(old_size);
        t->objects += (kind == KT_OBJ) - (old_kind == KT_OBJ);
        if (out != NULL) *out = e;
        Py_XDECREF(drop);   /* last: the table is whole if the old value's release runs any code */
        return 0;
    }
    if ((uint64_t)t->used >= t->size) {
        if (resize(t, t->size ? t->size * 2 : KT_MIN_BUCKETS) < 0) {
            if (t->size == 0) return -1;
            PyErr_Clear();   /* longer chains, still correct */
        }
    }
    kt_entry *e = PyMem_Malloc(need);
    if (e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    e->hash = hash;
    e->lru = 0;
    e->klen = (uint32_t)klen;
    e->info = kind | (kind ? 0 : (uint32_t)vlen);
    memcpy(e->data + (kind ? 8 : 0), k, (size_t)klen);
    fill_value(e, kind, value, vlen, ival);
    kt_entry **slot = &t->buckets[hash & (t->size - 1)];
    e->next = *slot;
    *slot = e;
    t->used++;
    t->version++;
    t->entry_bytes += alloc_size(need);
    t->objects += kind == KT_OBJ;
    if (out != NULL) *out = e;
    return 0;
}

/* Unlinks and frees the entry at *pp. With `value`, *value is the entry's value (a new reference; NULL with
 * MemoryError when a string's could not be made); without, an object value is released. */
static void unlink_entry(KeyTable *t, kt_entry **pp, PyObject **value) {
    kt_entry *e = *pp;
    *pp = e->next;
    t->used--;
    t->version++;
    t->entry_bytes -= alloc_size(entry_size(e));
    PyObject *obj = NULL;
    if (e->info & KT_OBJ) {
        t->objects--;
        obj = kt_obj(e);          /* the table's reference, handed over or released below */
    } else if (value != NULL) {
        obj = entry_value(e);
    }
    PyMem_Free(e);
    if (value != NULL) *value = obj;
    else Py_XDECREF(obj);
}

static int table_del(KeyTable *t, PyObject *key) {
    const char *k;
    Py_ssize_t klen;
    uint32_t hash;
    int rc = key_parts(key, &k, &klen, &hash);
    if (rc) return rc < 0 ? -1 : 0;
    kt_entry **pp = find_link(t, k, klen, hash);
    if (pp == NULL) return 0;
    unlink_entry(t, pp, NULL);
    maybe_shrink(t);
    return 1;
}

static void table_free_all(KeyTable *t) {
    kt_entry **buckets = t->buckets;
    uint64_t size = t->size;
    t->buckets = NULL;
    t->size = 0;
    t->used = 0;
    t->entry_bytes = 0;
    t->objects = 0;
    t->version++;
    /* the table is empty before any value is released, so code a release runs sees a consistent table */
    for (uint64_t i = 0; i < size; i++) {
        kt_entry *e = buckets[i];
        while (e != NULL) {
            kt_entry *next = e->next;
            PyObject *o = (e->info & KT_OBJ) ? kt_obj(e) : NULL;
            PyMem_Free(e);
            Py_XDECREF(o);
            e = next;
        }
    }
    PyMem_Free(buckets);
}

/* -- the C API (the compiled core) ------------------------------------------------------------------ */

static int api_find(PyObject *table, PyObject *key, kt_entry **out) {
    const char *k;
    Py_ssize_t klen;
    uint32_t hash;
    int rc = key_parts(key, &k, &klen, &hash);
    if (rc) return rc < 0 ? -1 : 0;
    kt_entry **pp = find_link((KeyTable *)table, k, klen, hash);
    if (pp == NULL) return 0;
    *out = *pp;
    return 1;
}

static int api_set(PyObject *table, PyObject *key, PyObject *value, kt_entry **out) {
    return table_set((KeyTable *)table, key, value, out);
}

static int api_del(PyObject *table, PyObject *key) {
    return table_del((KeyTable *)table, key);
}

/* A pipelined batch's lookups each miss the cache twice (the bucket, then the entry) on a table larger than
 * the cache; taken one after another they serialize. Two passes over the batch's keys (every bucket, then
 * every bucket's first entry) have the memory system fetch them in parallel, as Valkey's memory_prefetch.c
 * does for a batch of commands. Only loads: an error or an odd key just leaves that key out. */
static void api_prefetch(PyObject *table, PyObject *const *keys, Py_ssize_t n) {
    KeyTable *t = (KeyTable *)table;
    if (t->size == 0 || n <= 1) return;
    if (n > KT_PREFETCH_MAX) n = KT_PREFETCH_MAX;
    kt_entry **slots[KT_PREFETCH_MAX];
    uint64_t mask = t->size - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        slots[i] = NULL;
        if (!PyBytes_CheckExact(keys[i])) continue;
        Py_hash_t h = PyObject_Hash(keys[i]);    /* cached in the object: the find that follows reuses it */
        if (h == -1) {
            PyErr_Clear();
            continue;
        }
        slots[i] = &t->buckets[(uint32_t)(Py_uhash_t)h & mask];
        __builtin_prefetch(slots[i], 0, 3);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slots[i] == NULL) continue;
        kt_entry *e = *slots[i];
        if (e != NULL) {
            __builtin_prefetch(e, 1, 3);                      /* the header and key; written by an access time */
            __builtin_prefetch((const char *)e + 64, 1, 3);   /* the start of an inline value */
        }
    }
}

static KeyTableAPI capi = {&KeyTable_Type, api_find, api_set, api_del, entry_value, api_prefetch};

/* -- the Python type -------------------------------------------------------------------------------- */

static PyObject *KeyTable_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"reserve", NULL};
    Py_ssize_t reserve = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n:KeyTable", kwlist, &reserve)) return NULL;
    KeyTable *t = (KeyTable *)type->tp_alloc(type, 0);
    if (t == NULL) return NULL;
    if (reserve > 0 && resize(t, fit((uint64_t)reserve)) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void KeyTable_dealloc(KeyTable *t) {
    table_free_all(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static Py_ssize_t KeyTable_len(KeyTable *t) {
    return t->used;
}

static PyObject *lookup(KeyTable *t, PyObject *key, int *found) {
    const char *k;
    Py_ssize_t klen;
    uint32_t hash;
    *found = 0;
    if (key_parts(key, &k, &klen, &hash)) return NULL;   /* an error, or not bytes: absent */
    kt_entry **pp = find_link(t, k, klen, hash);
    if (pp == NULL) return NULL;
    *found = 1;
    return entry_value(*pp);
}

static PyObject *KeyTable_subscript(KeyTable *t, PyObject *key) {
    int found;
    PyObject *v = lookup(t, key, &found);
    if (!found && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
    return v;
}

static int KeyTable_ass_subscript(KeyTable *t, PyObject *key, PyObject *value) {
    if (value != NULL) return table_set(t, key, value, NULL);
    int rc = table_del(t, key);
    if (rc == 0) {
        PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    return rc < 0 ? -1 : 0;
}

static int KeyTable_contains(KeyTable *t, PyObject *key) {
    const char *k;
    Py_ssize_t klen;
    uint32_t hash;
    int rc = key_parts(key, &k, &klen, &hash);
    if (rc) return rc < 0 ? -1 : 0;
    return find_link(t, k, klen, hash) != NULL;
}

static PyObject *KeyTable_get(KeyTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None)");
        return NULL;
    }
    int found;
    PyObject *v = lookup(t, args[0], &found);
    if (found || PyErr_Occurred()) return v;
    PyObject *dflt = nargs == 2 ? args[1] : Py_None;
    Py_INCREF(dflt);
    return dflt;
}

static PyObject *KeyTable_pop(KeyTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "pop(key[, default])");
        return NULL;
    }
    const char *k;
    Py_ssize_t klen;
    uint32_t hash;
    int rc = key_parts(args[0], &k, &klen, &hash);
    if (rc < 0) return NULL;
    kt_entry **pp = rc ? NULL : find_link(t, k, klen, hash);
    if (pp == NULL) {
        if (nargs == 2) {
            Py_INCREF(args[1]);
            return args[1];
        }
        PyErr_SetObject(PyExc_KeyError, args[0]);
        return NULL;
    }
    PyObject *v;
    unlink_entry(t, pp, &v);
    maybe_shrink(t);
    return v;   /* NULL with MemoryError if the value could not be made: the key is gone either way */
}

/* update(mapping or iterable of pairs), as dict.update without keywords */
static PyObject *KeyTable_update(KeyTable *t, PyObject *other) {
    if (PyDict_Check(other)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(other, &pos, &k, &v)) {
            Py_INCREF(k);
            Py_INCREF(v);
            int rc = table_set(t, k, v, NULL);
            Py_DECREF(k);
            Py_DECREF(v);
            if (rc < 0) return NULL;
        }
        Py_RETURN_NONE;
    }
    int mapping = PyObject_HasAttrString(other, "keys");
    PyObject *it = mapping ? PyObject_CallMethod(other, "keys", NULL) : PyObject_GetIter(other);
    if (it != NULL && mapping) {
        PyObject *keys = it;
        it = PyObject_GetIter(keys);
        Py_DECREF(keys);
    }
    if (it == NULL) return NULL;
    PyObject *item;
    while ((item = PyIter_Next(it)) != NULL) {
        PyObject *k, *v;
        int rc;
        if (mapping) {
            k = item;
            v = PyObject_GetItem(other, k);
            rc = v == NULL ? -1 : table_set(t, k, v, NULL);
            Py_XDECREF(v);
        } else {
            PyObject *pair = PySequence_Fast(item, "update() needs (key, value) pairs");
            rc = pair == NULL ? -1 : 0;
            if (rc == 0 && PySequence_Fast_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_ValueError, "update() needs (key, value) pairs");
                rc = -1;
            }
            if (rc == 0) rc = table_set(t, PySequence_Fast_GET_ITEM(pair, 0), PySequence_Fast_GET_ITEM(pair, 1), NULL);
            Py_XDECREF(pair);
        }
        Py_DECREF(item);
        if (rc < 0) {
            Py_DECREF(it);
            return NULL;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *KeyTable_clear(KeyTable *t, PyObject *unused) {
    table_free_all(t);
    Py_RETURN_NONE;
}

static PyObject *KeyTable_reserve(KeyTable *t, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    uint64_t want = fit((uint64_t)(n < 0 ? 0 : n));
    if (n > 0 && want > t->size && resize(t, want) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *KeyTable_get_access(KeyTable *t, PyObject *key) {
    const char *k;
    Py_ssize_t klen;
    uint32_t hash;
    int rc = key_parts(key, &k, &klen, &hash);
    if (rc < 0) return NULL;
    kt_entry **pp = rc ? NULL : find_link(t, k, klen, hash);
    if (pp == NULL || !((*pp)->info & KT_ACCESS)) Py_RETURN_NONE;
    return PyLong_FromUnsignedLong((*pp)->lru);
}

static PyObject *KeyTable_set_access(KeyTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_access(key, value)");
        return NULL;
    }
    unsigned long v = PyLong_AsUnsignedLong(args[1]);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    if (v > KT_ACCESS_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an access time is a 32-bit value");
        return NULL;
    }
    const char *k;
    Py_ssize_t klen;
    uint32_t hash;
    int rc = key_parts(args[0], &k, &klen, &hash);
    if (rc < 0) return NULL;
    kt_entry **pp = rc ? NULL : find_link(t, k, klen, hash);
    if (pp == NULL) Py_RETURN_FALSE;
    kt_set_access(*pp, (uint32_t)v);
    Py_RETURN_TRUE;
}

#define KT_RANDOM_CHAIN 4u

static PyObject *KeyTable_random_key(KeyTable *t, PyObject *arg) {
    uint64_t bits = PyLong_AsUnsignedLongLongMask(arg);
    if (bits == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    if (t->used == 0) Py_RETURN_NONE;
    uint64_t mask = t->size - 1;
    /* A random bucket and a random place among KT_RANDOM_CHAIN in it, drawn again while that place is empty, so
     * every key has the same chance (a chain longer than KT_RANDOM_CHAIN, rare at this table's fill, is picked
     * from uniformly). Walking on to the next non-empty bucket instead gave a key after a long empty run that
     * run's whole weight and a key right behind another almost none: three keys in a table that had held many,
     * 60 RANDOMKEYs never answered one of them. */
    uint64_t z = bits;
    for (int tries = 0; tries < 128; tries++) {
        z += 0x9E3779B97F4A7C15ull;                      /* splitmix64: every try's bits from the caller's */
        uint64_t x = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        bits = x ^ (x >> 31);
        kt_entry *e = t->buckets[bits & mask];
        if (e == NULL) continue;
        unsigned n = 0;
        for (kt_entry *c = e; c != NULL; c = c->next) n++;
        unsigned place = (unsigned)((bits >> 32) % (n > KT_RANDOM_CHAIN ? n : KT_RANDOM_CHAIN));
        if (place >= n) continue;
        for (; place; place--) e = e->next;
        return entry_key(e);
    }
    /* a sparse table (far fewer keys than buckets): the key at a random rank, in bucket order */
    uint64_t rank = (bits >> 11) % t->used;
    for (uint64_t i = 0; i < t->size; i++)
        for (kt_entry *c = t->buckets[i]; c != NULL; c = c->next)
            if (rank-- == 0) return entry_key(c);
    Py_RETURN_NONE;   /* not reached: used counts the entries */
}

static inline uint64_t rev64(uint64_t v) {
    v = ((v >> 1) & 0x5555555555555555ull) | ((v & 0x5555555555555555ull) << 1);
    v = ((v >> 2) & 0x3333333333333333ull) | ((v & 0x3333333333333333ull) << 2);
    v = ((v >> 4) & 0x0F0F0F0F0F0F0F0Full) | ((v & 0x0F0F0F0F0F0F0F0Full) << 4);
    v = ((v >> 8) & 0x00FF00FF00FF00FFull) | ((v & 0x00FF00FF00FF00FFull) << 8);
    v = ((v >> 16) & 0x0000FFFF0000FFFFull) | ((v & 0x0000FFFF0000FFFFull) << 16);
    return (v >> 32) | (v << 32);
}

/* scan(cursor, count) -> (next cursor, keys): Valkey's SCAN over one table. Buckets are visited in the order of
 * their reversed index bits, so a key present for a whole iteration is returned at least once even when the
 * table grows or shrinks between calls; the call stops once it has `count` keys or visited 10 x count
 * buckets (scanGenericCommand's maxiterations). It returns more than `count` keys only when one bucket holds
 * more. */
static PyObject *KeyTable_scan(KeyTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "scan(cursor, count)");
        return NULL;
    }
    uint64_t v = PyLong_AsUnsignedLongLongMask(args[0]);
    if (v == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    if (count < 1) count = 1;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    if (t->used == 0) {
        v = 0;
    } else {
        uint64_t mask = t->size - 1;
        uint64_t budget = (uint64_t)count > UINT64_MAX / 10 ? UINT64_MAX : (uint64_t)count * 10;
        do {
            /* a bucket is returned whole (the cursor cannot point inside one); one that would take the reply
             * past COUNT waits for the next call, unless the reply is still empty */
            Py_ssize_t chain = 0;
            for (kt_entry *e = t->buckets[v & mask]; e != NULL; e = e->next) chain++;
            if (PyList_GET_SIZE(out) > 0 && PyList_GET_SIZE(out) + chain > count) break;
            for (kt_entry *e = t->buckets[v & mask]; e != NULL; e = e->next) {
                PyObject *key = entry_key(e);
                if (key == NULL || PyList_Append(out, key) < 0) {
                    Py_XDECREF(key);
                    Py_DECREF(out);
                    return NULL;
                }
                Py_DECREF(key);
            }
            v |= ~mask;
            v = rev64(v);
            v++;
            v = rev64(v);
        } while (v != 0 && --budget && PyList_GET_SIZE(out) < count);
    }
    PyObject *cursor = PyLong_FromUnsignedLongLong(v);
    if (cursor == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *res = PyTuple_Pack(2, cursor, out);
    Py_DECREF(cursor);
    Py_DECREF(out);
    return res;
}

static PyObject *KeyTable_stats(KeyTable *t, PyObject *unused) {
    size_t bucket_bytes = t->size ? alloc_size((size_t)t->size * sizeof(kt_entry *)) : 0;
    return Py_BuildValue("{s:n,s:K,s:n,s:n,s:n}", "keys", t->used, "buckets", (unsigned long long)t->size,
                         "bucket_bytes", (Py_ssize_t)bucket_bytes, "entry_bytes", (Py_ssize_t)t->entry_bytes,
                         "object_values", t->objects);
}

static PyObject *KeyTable_sizeof(KeyTable *t, PyObject *unused) {
    size_t n = sizeof(KeyTable) + t->entry_bytes + (size_t)t->size * sizeof(kt_entry *);
    return PyLong_FromSize_t(n);
}

static PyObject *KeyTable_repr(KeyTable *t) {
    return PyUnicode_FromFormat("<KeyTable of %zd keys>", t->used);
}

/* -- iteration -------------------------------------------------------------------------------------- */

enum { IT_KEYS, IT_VALUES, IT_ITEMS };

typedef struct {
    PyObject_HEAD
    KeyTable *table;          /* NULL once exhausted */
    uint64_t bucket;
    Py_ssize_t pos;           /* the next entry's place in its bucket's chain */
    uint64_t version;
    int kind;
} KeyTableIter;

static PyObject *make_iter(KeyTable *t, int kind) {
    KeyTableIter *it = PyObject_New(KeyTableIter, &KeyTableIter_Type);
    if (it == NULL) return NULL;
    Py_INCREF(t);
    it->table = t;
    it->bucket = 0;
    it->pos = 0;
    it->version = t->version;
    it->kind = kind;
    return (PyObject *)it;
}

static void KeyTableIter_dealloc(KeyTableIter *it) {
    Py_XDECREF(it->table);
    PyObject_Free(it);
}

static PyObject *KeyTableIter_next(KeyTableIter *it) {
    KeyTable *t = it->table;
    if (t == NULL) return NULL;
    if (t->version != it->version) {
        PyErr_SetString(PyExc_RuntimeError, "KeyTable changed size during iteration");
        return NULL;
    }
    while (it->bucket < t->size) {
        kt_entry *e = t->buckets[it->bucket];
        for (Py_ssize_t i = 0; e != NULL && i < it->pos; i++) e = e->next;
        if (e == NULL) {
            it->bucket++;
            it->pos = 0;
            continue;
        }
        it->pos++;
        if (it->kind == IT_KEYS) return entry_key(e);
        if (it->kind == IT_VALUES) return entry_value(e);
        PyObject *k = entry_key(e);
        PyObject *v = k ? entry_value(e) : NULL;
        if (v == NULL) {
            Py_XDECREF(k);
            return NULL;
        }
        PyObject *pair = PyTuple_Pack(2, k, v);
        Py_DECREF(k);
        Py_DECREF(v);
        return pair;
    }
    it->table = NULL;
    Py_DECREF(t);
    return NULL;
}

static PyObject *KeyTable_iter(KeyTable *t) {
    return make_iter(t, IT_KEYS);
}

static PyObject *KeyTable_keys(KeyTable *t, PyObject *unused) {
    return make_iter(t, IT_KEYS);
}

static PyObject *KeyTable_values(KeyTable *t, PyObject *unused) {
    return make_iter(t, IT_VALUES);
}

static PyObject *KeyTable_items(KeyTable *t, PyObject *unused) {
    return make_iter(t, IT_ITEMS);
}

static PyTypeObject KeyTableIter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "durakv.keyspace._keytable.KeyTableIterator",
    .tp_basicsize = sizeof(KeyTableIter),
    .tp_dealloc = (destructor)KeyTableIter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)KeyTableIter_next,
};

static PyMethodDef KeyTable_methods[] = {
    {"get", (PyCFunction)(void (*)(void))KeyTable_get, METH_FASTCALL, "get(key, default=None)"},
    {"pop", (PyCFunction)(void (*)(void))KeyTable_pop, METH_FASTCALL, "pop(key[, default])"},
    {"clear", (PyCFunction)KeyTable_clear, METH_NOARGS, "removes every key"},
    {"update", (PyCFunction)KeyTable_update, METH_O, "update(mapping or (key, value) pairs)"},
    {"reserve", (PyCFunction)KeyTable_reserve, METH_O, "reserve(n): buckets for n keys before a load"},
    {"keys", (PyCFunction)KeyTable_keys, METH_NOARGS, "an iterator over the keys"},
    {"values", (PyCFunction)KeyTable_values, METH_NOARGS, "an iterator over the values"},
    {"items", (PyCFunction)KeyTable_items, METH_NOARGS, "an iterator over (key, value)"},
    {"get_access", (PyCFunction)KeyTable_get_access, METH_O, "the key's access time, or None"},
    {"set_access", (PyCFunction)(void (*)(void))KeyTable_set_access, METH_FASTCALL,
     "set_access(key, value) -> False when the key is absent"},
    {"random_key", (PyCFunction)KeyTable_random_key, METH_O, "random_key(64 random bits) -> a key or None"},
    {"scan", (PyCFunction)(void (*)(void))KeyTable_scan, METH_FASTCALL, "scan(cursor, count) -> (cursor, keys)"},
    {"stats", (PyCFunction)KeyTable_stats, METH_NOARGS, "keys, buckets and the bytes they take"},
    {"__sizeof__", (PyCFunction)KeyTable_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMappingMethods KeyTable_as_mapping = {
    .mp_length = (lenfunc)KeyTable_len,
    .mp_subscript = (binaryfunc)KeyTable_subscript,
    .mp_ass_subscript = (objobjargproc)KeyTable_ass_subscript,
};

static PySequenceMethods KeyTable_as_sequence = {
    .sq_contains = (objobjproc)KeyTable_contains,
};

static PyTypeObject KeyTable_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "durakv.keyspace._keytable.KeyTable",
    .tp_doc = "A database's keys and values (keyspace/keytable.py).",
    .tp_basicsize = sizeof(KeyTable),
    .tp_dealloc = (destructor)KeyTable_dealloc,
    .tp_repr = (reprfunc)KeyTable_repr,
    .tp_as_mapping = &KeyTable_as_mapping,
    .tp_as_sequence = &KeyTable_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = (getiterfunc)KeyTable_iter,
    .tp_methods = KeyTable_methods,
    .tp_new = KeyTable_new,
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "durakv.keyspace._keytable", "The keyspace's compact table (keytable.h).", -1, NULL,
};

PyMODINIT_FUNC PyInit__keytable(void) {
    if (PyType_Ready(&KeyTable_Type) < 0 || PyType_Ready(&KeyTableIter_Type) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (m == NULL) return NULL;
    Py_INCREF(&KeyTable_Type);
    if (PyModule_AddObject(m, "KeyTable", (PyObject *)&KeyTable_Type) < 0) {
        Py_DECREF(&KeyTable_Type);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(&capi, KEYTABLE_CAPSULE, NULL);
    if (cap == NULL || PyModule_AddObject(m, "CAPI", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "INLINE_MAX", KT_INLINE_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
