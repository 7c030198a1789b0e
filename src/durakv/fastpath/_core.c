/* durakv's compiled core: the per-read batch loop for requests that need nothing but the keyspace's dicts.
 *
 * The Python modules are the reference semantics (commands/pipeline.py's process + call, the handlers of
 * commands/strings.py and commands/keys.py, server/connection.py's process, journal/codec.py). This file
 * runs the same steps for a small set of commands on plain strings and gives up, before changing anything,
 * wherever the Python path would do something else: an expired key (lazy expiry and its effects), a value of
 * another type, an argument that makes an error reply, a session or server state that admission, an observer
 * or WATCH must see. A command it gives up on runs through the pipeline as if the core did not exist, so
 * every rule still lives in one place; tests/server/test_fastpath_differential.py proves the two agree.
 *
 * What it owns:
 *   parse(buf, pos, end, commands, max_bulk_len) -> pos
 *       the complete canonical multibulk requests of buf[pos:end] as lists of bytes (protocol/parser.py's
 *       fast path: it stops at the first byte it cannot vouch for and the exact parser goes on there)
 *   Core(...).run(conn, commands, start) -> (next, status)
 *       runs commands[start:] while they are fast commands, with their accounting, effects (to durability)
 *       and replies (to the connection's outbox), in request order
 *   encode_effects(effects) -> bytes
 *       one journal payload for [(db_id, argv)] (journal/codec.py's encode_effects)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h"
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* The CPython private APIs this file uses, each taken here with the exact type it was written against:
 *   _PyType_Lookup       a type's MRO lookup, borrowed (slot_offset: a __slots__ member's offset)
 *   _PyBytes_Join        b"".join(list) without a method call (flush_conn: one write per flush)
 *   _PyList_Extend       list.extend (a handler's touched keys)
 *   _PyDict_NewPresized  an empty dict with room for n keys (presized_dict: RDB loads; CPython 3.13 took it out
 *                        of its headers, where presized_dict makes a plain dict: the same dict, grown as it fills)
 * setup.py compiles with -Werror=implicit-function-declaration and -Werror=incompatible-pointer-types, so a
 * CPython that drops one or changes its signature fails this build loudly, and scripts/test.sh fails where the
 * core did not build, instead of a server that quietly runs its pure-Python core. */
static PyObject *(*const private_type_lookup)(PyTypeObject *, PyObject *) __attribute__((unused)) = _PyType_Lookup;
static PyObject *(*const private_bytes_join)(PyObject *, PyObject *) __attribute__((unused)) = _PyBytes_Join;
static PyObject *(*const private_list_extend)(PyListObject *, PyObject *) __attribute__((unused)) = _PyList_Extend;
#if PY_VERSION_HEX < 0x030D0000
static PyObject *(*const private_dict_presized)(Py_ssize_t) __attribute__((unused)) = _PyDict_NewPresized;
#endif

#include "../keyspace/keytable.h"

/* A database's table of keys (keyspace/_keytable.c), reached through its capsule: the core reads and writes
 * entries in place, so a GET copies the value once, into the reply. */
static const KeyTableAPI *kt;

#define MAX_MULTIBULK (1024 * 1024)

/* ---------------------------------------------------------------------------------------------------- */
/* Numbers                                                                                              */

/* util.c string2ll: an optional '-', digits without a leading zero ('0' alone), within int64. */
static int string2ll(const char *s, Py_ssize_t n, long long *out) {
    if (n == 0 || n > 20) return 0;
    if (n == 1 && s[0] == '0') { *out = 0; return 1; }
    int neg = 0;
    Py_ssize_t i = 0;
    if (s[0] == '-') { neg = 1; i = 1; if (n == 1) return 0; }
    if (s[i] < '1' || s[i] > '9') return 0;
    unsigned long long v = 0;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < '0' || c > '9') return 0;
        if (v > (ULLONG_MAX - (c - '0')) / 10) return 0;
        v = v * 10 + (c - '0');
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1) return 0;
        *out = (long long)(0 - v);
    } else {
        if (v > (unsigned long long)LLONG_MAX) return 0;
        *out = (long long)v;
    }
    return 1;
}

/* CRC16/XMODEM of the cluster's key slots (routing/slots.py key_slot: hash tags included). */
static uint16_t crc16_table[256];

static void init_crc16(void) {
    for (int i = 0; i < 256; i++) {
        uint16_t c = (uint16_t)(i << 8);
        for (int k = 0; k < 8; k++) c = (c & 0x8000) ? (uint16_t)((c << 1) ^ 0x1021) : (uint16_t)(c << 1);
        crc16_table[i] = c;
    }
}

static int key_slot(const char *s, Py_ssize_t n) {
    const char *open = memchr(s, '{', n);
    if (open != NULL) {
        const char *close = memchr(open + 1, '}', n - (open + 1 - s));
        if (close != NULL && close > open + 1) {
            s = open + 1;
            n = close - s;
        }
    }
    uint16_t crc = 0;
    for (Py_ssize_t i = 0; i < n; i++) crc = (uint16_t)((crc << 8) ^ crc16_table[((crc >> 8) ^ (unsigned char)s[i]) & 0xff]);
    return crc & 16383;
}

static inline double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------------------------------------- */
/* The request parser's fast path                                                                        */

/* A canonical decimal header number ending in CRLF at p (within end): its value, or -1 if the line is not
 * canonical ([1-9][0-9]* or, where zero_ok, "0"), too long, or not complete; *after is set past the CRLF. */
static long long header_number(const unsigned char *p, const unsigned char *end, int zero_ok,
                               const unsigned char **after) {
    const unsigned char *q = p;
    long long v = 0;
    int digits = 0;
    if (q >= end) return -1;
    if (*q == '0') {
        if (!zero_ok) return -1;
        q++;
        digits = 1;
    } else {
        while (q < end && *q >= '0' && *q <= '9') {
            if (++digits > 18) return -1;
            v = v * 10 + (*q - '0');
            q++;
        }
        if (digits == 0 || *p == '0') return -1;
    }
    if (q + 1 >= end || q[0] != '\r' || q[1] != '\n') return -1;
    *after = q + 2;
    return v;
}

/* The end of the canonical request starting at p, or NULL if it is not complete, not canonical, or over a
 * limit (then the exact parser decides: it answers the error or keeps the partial request). */
static const unsigned char *scan_request(const unsigned char *p, const unsigned char *end,
                                         long long max_bulk, long long *argc) {
    const unsigned char *q;
    if (p >= end || *p != '*') return NULL;
    long long n = header_number(p + 1, end, 0, &q);
    if (n < 1 || n > MAX_MULTIBULK) return NULL;
    for (long long i = 0; i < n; i++) {
        if (q >= end || *q != '$') return NULL;
        long long len = header_number(q + 1, end, 1, &q);
        if (len < 0 || len > max_bulk) return NULL;
        if (end - q < len + 2) return NULL;
        q += len + 2;   /* the two bytes after a payload are not checked: networking.c skips them too */
    }
    *argc = n;
    return q;
}

static Py_ssize_t parse_into(const unsigned char *base, Py_ssize_t pos, Py_ssize_t endpos, PyObject *commands,
                             long long max_bulk);

static PyObject *fast_parse(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "parse(buf, pos, end, commands, max_bulk_len)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(argv[1]);
    Py_ssize_t endpos = PyLong_AsSsize_t(argv[2]);
    long long max_bulk = PyLong_AsLongLong(argv[4]);
    PyObject *commands = argv[3];
    if (PyErr_Occurred() || !PyList_Check(commands)) {
        PyBuffer_Release(&view);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "commands must be a list");
        return NULL;
    }
    if (endpos > view.len) endpos = view.len;
    Py_ssize_t at = parse_into((const unsigned char *)view.buf, pos, endpos, commands, max_bulk);
    PyBuffer_Release(&view);
    return at < 0 ? NULL : PyLong_FromSsize_t(at);
}

/* parse()'s loop: the index after the last complete canonical request, or -1 with an exception set. */
static Py_ssize_t parse_into(const unsigned char *base, Py_ssize_t pos, Py_ssize_t endpos, PyObject *commands,
                             long long max_bulk) {
    const unsigned char *p = base + pos, *end = base + endpos;
    while (p < end) {
        long long argc;
        const unsigned char *next = scan_request(p, end, max_bulk, &argc);
        if (next == NULL) break;
        PyObject *cmd = PyList_New((Py_ssize_t)argc);
        if (cmd == NULL) goto error;
        const unsigned char *q;
        header_number(p + 1, end, 0, &q);
        for (long long i = 0; i < argc; i++) {
            long long len = header_number(q + 1, end, 1, &q);
            PyObject *arg = PyBytes_FromStringAndSize((const char *)q, (Py_ssize_t)len);
            if (arg == NULL) { Py_DECREF(cmd); goto error; }
            PyList_SET_ITEM(cmd, (Py_ssize_t)i, arg);
            q += len + 2;
        }
        int rc = PyList_Append(commands, cmd);
        Py_DECREF(cmd);
        if (rc < 0) goto error;
        p = next;
    }
    return p - base;
error:
    return -1;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Output buffer                                                                                         */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more) cap *= 2;
    char *d = PyMem_Realloc(b->data, cap);
    if (d == NULL) { PyErr_NoMemory(); return -1; }
    b->data = d;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

/* The decimal digits of v at dst (at least 20 bytes of room); returns how many. snprintf's "%lld" parses its
 * format and goes through stdio's machinery: about 2,000 instructions a call, and an unpipelined SET formats
 * four headers for its journal entry (*3 $3 $key $value), a GET one for its reply. */
static int fmt_ll(char *dst, long long v) {
    char tmp[24];
    int k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do { tmp[k++] = (char)('0' + u % 10); u /= 10; } while (u);
    int n = 0;
    if (v < 0) dst[n++] = '-';
    while (k) dst[n++] = tmp[--k];
    return n;
}

/* type, the digits of n, CRLF at dst (room for 23 bytes): a RESP header or an integer reply; its length. */
static int fmt_line(char *dst, char type, long long n) {
    dst[0] = type;
    int k = 1 + fmt_ll(dst + 1, n);
    dst[k] = '\r';
    dst[k + 1] = '\n';
    return k + 2;
}

static int buf_header(Buf *b, char type, long long n) {
    char tmp[32];
    return buf_put(b, tmp, fmt_line(tmp, type, n));
}

static int buf_bulk(Buf *b, PyObject *value) {
    Py_ssize_t n = PyBytes_GET_SIZE(value);
    if (buf_header(b, '$', n) < 0) return -1;
    if (buf_reserve(b, n + 2) < 0) return -1;
    memcpy(b->data + b->len, PyBytes_AS_STRING(value), n);
    b->data[b->len + n] = '\r';
    b->data[b->len + n + 1] = '\n';
    b->len += n + 2;
    return 0;
}

static int buf_bulk_raw(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_header(b, '$', n) < 0) return -1;
    if (buf_reserve(b, n + 2) < 0) return -1;
    memcpy(b->data + b->len, s, n);
    b->data[b->len + n] = '\r';
    b->data[b->len + n + 1] = '\n';
    b->len += n + 2;
    return 0;
}

static int buf_null(Buf *b, int resp3) {
    return resp3 ? buf_put(b, "_\r\n", 3) : buf_put(b, "$-1\r\n", 5);
}

/* ---------------------------------------------------------------------------------------------------- */
/* Effect encoding (journal/codec.py)                                                                    */

static int encode_command_into(Buf *b, PyObject *argv) {
    PyObject *seq = PySequence_Fast(argv, "an effect's argv must be a sequence");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (buf_header(b, '*', n) < 0) goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = items[i];
        if (PyBytes_Check(a)) {
            if (buf_bulk(b, a) < 0) goto error;
        } else {
            Py_buffer v;
            PyObject *owned = NULL;
            if (PyObject_CheckBuffer(a)) {
                if (PyObject_GetBuffer(a, &v, PyBUF_SIMPLE) < 0) goto error;
            } else {
                /* str(a).encode(): what protocol/resp.py extend_command does with an argument of another type */
                PyObject *s = PyObject_Str(a);
                if (s == NULL) goto error;
                owned = PyUnicode_AsUTF8String(s);
                Py_DECREF(s);
                if (owned == NULL) goto error;
                if (PyObject_GetBuffer(owned, &v, PyBUF_SIMPLE) < 0) { Py_DECREF(owned); goto error; }
            }
            int rc = buf_header(b, '$', v.len) < 0 || buf_put(b, v.buf, v.len) < 0 || buf_put(b, "\r\n", 2) < 0;
            PyBuffer_Release(&v);
            Py_XDECREF(owned);
            if (rc) goto error;
        }
    }
    Py_DECREF(seq);
    return 0;
error:
    Py_DECREF(seq);
    return -1;
}

static int encode_effects_into(Buf *b, PyObject *effects) {
    PyObject *seq = PySequence_Fast(effects, "effects must be a sequence");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    long long current = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = items[i];
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) {
            PyErr_SetString(PyExc_TypeError, "an effect is a (db_id, argv) tuple");
            goto error;
        }
        long long db = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 0));
        if (db == -1 && PyErr_Occurred()) goto error;
        if (db != current) {
            char num[24];
            int k = fmt_ll(num, db);
            if (buf_put(b, "*2\r\n$6\r\nSELECT\r\n", 16) < 0 || buf_header(b, '$', k) < 0
                || buf_put(b, num, k) < 0 || buf_put(b, "\r\n", 2) < 0)
                goto error;
            current = db;
        }
        if (encode_command_into(b, PyTuple_GET_ITEM(e, 1)) < 0) goto error;
    }
    Py_DECREF(seq);
    return 0;
error:
    Py_DECREF(seq);
    return -1;
}

static Py_ssize_t digits_of(Py_ssize_t n) {
    Py_ssize_t d = 1;
    while (n >= 10) { n /= 10; d++; }
    return d;
}

/* What encode_effects adds for effects to a batch whose last effect was in database db (None: a new batch):
 * *size, and in *db_out (a new reference) the database it ends in. 0/-1. effects_size's body, which the tracker
 * join calls once per write without building its tuple. */
static int effects_size_of(PyObject *effects, PyObject *db, long long *size_out, PyObject **db_out) {
    PyObject *seq = PySequence_Fast(effects, "effects must be a sequence");
    if (seq == NULL) return -1;
    Py_INCREF(db);
    long long size = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = items[i];
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) {
            PyErr_SetString(PyExc_TypeError, "an effect is a (db_id, argv) tuple");
            goto error;
        }
        PyObject *edb = PyTuple_GET_ITEM(e, 0);
        int same = db != Py_None && PyObject_RichCompareBool(edb, db, Py_EQ);
        if (same < 0) goto error;
        if (!same) {
            Py_ssize_t id = PyLong_AsSsize_t(edb);
            if (id == -1 && PyErr_Occurred()) goto error;
            Py_ssize_t d = digits_of(id);
            size += 4 + 12 + 1 + digits_of(d) + 2 + d + 2;   /* *2 $6 SELECT $d id */
            Py_INCREF(edb);
            Py_SETREF(db, edb);
        }
        PyObject *args = PySequence_Fast(PyTuple_GET_ITEM(e, 1), "an effect's argv must be a sequence");
        if (args == NULL) goto error;
        Py_ssize_t argc = PySequence_Fast_GET_SIZE(args);
        PyObject **a = PySequence_Fast_ITEMS(args);
        size += 3 + digits_of(argc);
        for (Py_ssize_t k = 0; k < argc; k++) {
            Py_ssize_t la = PyObject_Length(a[k]);
            if (la < 0) { Py_DECREF(args); goto error; }
            size += 5 + digits_of(la) + la;
        }
        Py_DECREF(args);
    }
    Py_DECREF(seq);
    *size_out = size;
    *db_out = db;
    return 0;
error:
    Py_DECREF(seq);
    Py_DECREF(db);
    return -1;
}

/* effects_size(effects, db) -> (bytes, db): effects_size_of for Python (codec.effects_size). */
static PyObject *fast_effects_size(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "effects_size(effects, db)");
        return NULL;
    }
    long long size;
    PyObject *db;
    if (effects_size_of(argv[0], argv[1], &size, &db) < 0) return NULL;
    PyObject *out = Py_BuildValue("(LO)", size, db);
    Py_DECREF(db);
    return out;
}

static PyObject *fast_encode_effects(PyObject *self, PyObject *effects) {
    Buf b = {0};
    if (encode_effects_into(&b, effects) < 0) { PyMem_Free(b.data); return NULL; }
    PyObject *out = PyBytes_FromStringAndSize(b.data ? b.data : "", b.len);
    PyMem_Free(b.data);
    return out;
}

/* ---------------------------------------------------------------------------------------------------- */
/* The batch loop                                                                                        */

enum { C_PING, C_ECHO, C_GET, C_SET, C_MGET, C_MSET, C_INCR, C_DECR, C_INCRBY, C_DECRBY, C_DEL, C_UNLINK,
       C_EXISTS, C_TTL, C_PTTL, C_HGET, C_HSET, C_LPUSH, C_RPUSH, C_LPOP, C_RPOP, C_SADD, NCMD };
/* the commands implemented here, by their names in the command table (the module exports them as IMPLEMENTED);
 * which of them the core runs, and their arities, are the table's: Core() takes the table's core=True commands
 * (commands/registry.py) and refuses one it has no implementation of */
static const char *CMD_NAMES[NCMD] = {"ping", "echo", "get", "set", "mget", "mset", "incr", "decr", "incrby",
                                      "decrby", "del", "unlink", "exists", "ttl", "pttl", "hget", "hset", "lpush",
                                      "rpush", "lpop", "rpop", "sadd"};

/* A session's core_block bits (commands/session.py, whose setters keep it current) */
#define CORE_BLOCK_ALWAYS 1           /* its requests go through the pipeline */
#define CORE_BLOCK_GATED 2            /* ... where a role gate is set */
#define CORE_BLOCK_UNAUTHENTICATED 4  /* not authenticated (the parser's limits are an unauthenticated one's) */
#define CORE_BLOCK_SPECIAL 8          /* subscribed or MONITOR (a pubsub client's output limits) */

/* interned attribute names */
static PyObject *s_session, *s_outbox, *s_closing,
    *s_perf_counter, *s_mark, *s_mark_now, *s_count_error, *s_set_expire, *s_entry_cost, *s_write_tracker, *s_text,
    *s_fullname, *s_tracker, *s_feeds, *s_core_block, *s_resp,
    *s_db_id, *s_data,
    *s_expires, *s_hexpires, *s_enc, *s_slots, *s_ready,
    *s_held, *s_calls, *s_usec, *s_latency, *s_skip_slowlog, *s_record, *s_record_request,
    *s_record_reply, *s_total_commands, *s_commands_processed, *s_last_cmd, *s_hits, *s_misses, *s_used_bytes,
    *s_changes, *s_submit, *s_assigned, *s_committed, *s_pending, *s_last_write_index,
    *s_clock_ms, *s_needs_touched, *s_ctx, *s_db, *s_id,
    *s_handler, *s_arity, *s_failed_calls,
    *s_fast_serving,
    *s_add, *s_discard, *s_effects, *s_touched, *s_touched_exact, *s_no_touch;
/* the core's state object's slots (commands/corestate.py CoreState), read at the offsets Core() finds */
#define NSTATE 13
enum { ST_MAY_RUN, ST_GATE, ST_SLOT_CODES, ST_LRU_STAMP, ST_CLOCK, ST_WATCHERS, ST_MOVING, ST_DELETED, ST_OWN_FEED,
       ST_THRESHOLD_US, ST_REQUEST_LIMIT, ST_REPLY_LIMIT, ST_OUTPUT_LIMITS };
static const char *STATE_NAMES[NSTATE] = {"may_run", "gate", "slot_codes", "lru_stamp", "clock", "watchers",
                                              "moving", "deleted", "own_feed", "threshold_us", "request_limit",
                                              "reply_limit", "output_limits"};
/* CoreState.output_limits (commands/corestate.py OUTPUT_LIMITS_*) */
#define OUTPUT_LIMITS_SPECIAL 1
#define OUTPUT_LIMITS_ALL 2
static PyObject *s_state[NSTATE];
static PyObject *s_server, *s_parser, *s_backlog, *s_transport, *s_boundary_for, *s_max_bulk_len, *s_net_in,
    *s_net_out, *s_net_input_bytes, *s_reads_processed,
    *s_net_output_bytes, *s_writes_processed, *s_loop_stats, *s_open, *s_begin, *s_wall_clock_ms, *s_now_ms,
    *s_last_interaction_ms, *s_closed, *s_read, *s_process, *s_run_batch, *s_is_closing,
    *s_write, *s_feed_rest, *s_flush;
static PyObject *s_hold, *s_emit, *s_read_ticket, *s_held_bytes, *s_carried_bytes, *s_carried_by_ticket, *s_limit_bytes,
    *s_over_limit, *s_durability, *s_waiting, *s_set_over;
static PyObject *s_batch_index, *s_close_at, *s_promised_index, *s_mode, *s_ack_before_commit, *s_journal,
    *s_max_entry_bytes, *s_batch_db, *s_batch_bytes, *s_batch_effects, *s_batch_keys, *s_uncommitted, *s_sync,
    *s_close_batch, *s_open_batch;
static PyObject *s_loop, *s_turn_started_s, *s_call_soon, *s_cycles, *s_duration_s, *s_longest_stall_s;
static PyObject *one;
static PyObject *b_SET, *b_PXAT, *b_KEEPTTL, *b_DEL;

typedef struct {
    PyObject_HEAD
    PyObject *state;          /* the pipeline's CoreState: every server-wide decision to run (commands/corestate.py) */
    PyTypeObject *state_type; /* ... its class, whose slots are at these offsets */
    Py_ssize_t state_off[NSTATE];
    PyObject *pipeline, *keyspace, *durability, *monitors;
    PyObject *perf_counter;   /* time.perf_counter: CLOCK_MONOTONIC, which the core reads itself */
    PyObject *estimate_key;   /* keyspace.db.estimate_key: a collection's sampled size, as call() measures it */
    PyObject *deque_type;     /* collections.deque */
    PyObject *cmds[NCMD];     /* the table's Command of each implementation the table lets run here, or NULL */
    int arity[NCMD];          /* ... and its arity, the table's (a wrong count is answered by the Python path) */
    PyObject *end_turn;       /* this core's end_turn, bound: what begin_turn schedules */
    long long key_cost;       /* estimate_key(k, v) - len(k) - len(v) for a string value */
    long long fast_runs;      /* batches that ran at least one command here */
    long long fast_commands;  /* commands run here */
} Core;

/* The core is in the cycle collector's view: it holds its bound end_turn (a cycle through itself) and the
 * server's objects, which refer to it (server.fast); without tp_traverse a stopped server and all it held
 * would never be freed. */
static int core_traverse(Core *self, visitproc visit, void *arg) {
    Py_VISIT(self->state); Py_VISIT(self->state_type);
    Py_VISIT(self->pipeline); Py_VISIT(self->keyspace); Py_VISIT(self->durability);
    Py_VISIT(self->monitors); Py_VISIT(self->perf_counter);
    Py_VISIT(self->estimate_key); Py_VISIT(self->deque_type);
    for (int i = 0; i < NCMD; i++) Py_VISIT(self->cmds[i]);
    Py_VISIT(self->end_turn);
    return 0;
}

static int core_clear(Core *self) {
    Py_CLEAR(self->end_turn);     /* first: breaks the cycle through this core's own bound method */
    Py_CLEAR(self->state); Py_CLEAR(self->state_type);
    Py_CLEAR(self->pipeline); Py_CLEAR(self->keyspace); Py_CLEAR(self->durability);
    Py_CLEAR(self->monitors); Py_CLEAR(self->perf_counter);
    Py_CLEAR(self->estimate_key); Py_CLEAR(self->deque_type);
    for (int i = 0; i < NCMD; i++) Py_CLEAR(self->cmds[i]);
    return 0;
}

static void core_dealloc(Core *self) {
    PyObject_GC_UnTrack(self);
    core_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int cmd_id(PyObject *name);

/* Core(state, pipeline, keyspace, durability, monitors, commands: {name: Command}, key_cost, estimate_key,
 *      deque) */
static int core_init(Core *self, PyObject *args, PyObject *kw) {
    PyObject *state, *pipeline, *keyspace, *durability, *monitors, *commands, *estimate_key, *dq;
    long long key_cost;
    if (!PyArg_ParseTuple(args, "OOOOOO!LOO", &state, &pipeline, &keyspace, &durability, &monitors,
                          &PyDict_Type, &commands, &key_cost, &estimate_key, &dq))
        return -1;
    core_clear(self);   /* (__init__ called again: what the first call held is let go) */
    /* the state's slots: found once here, read at their offsets per batch (the state's class is checked there) */
    for (int i = 0; i < NSTATE; i++) {
        PyObject *d = _PyType_Lookup(Py_TYPE(state), s_state[i]);
        PyMemberDef *m = d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)d)->d_member : NULL;
        if (m == NULL || m->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "Core(): the state object %R has no __slots__ member %R", state, s_state[i]);
            return -1;
        }
        self->state_off[i] = m->offset;
    }
    Py_INCREF(state); self->state = state;
    Py_INCREF(Py_TYPE(state)); self->state_type = Py_TYPE(state);
    {
        PyObject *time = PyImport_ImportModule("time");
        self->perf_counter = time != NULL ? PyObject_GetAttr(time, s_perf_counter) : NULL;
        Py_XDECREF(time);
        if (self->perf_counter == NULL) return -1;
    }
    Py_INCREF(estimate_key); self->estimate_key = estimate_key;
    Py_INCREF(dq); self->deque_type = dq;
    Py_INCREF(pipeline); self->pipeline = pipeline;
    Py_INCREF(keyspace); self->keyspace = keyspace;
    Py_INCREF(durability); self->durability = durability;
    Py_INCREF(monitors); self->monitors = monitors;
    self->key_cost = key_cost;
    PyObject *key, *cmd;
    Py_ssize_t pos = 0;
    while (PyDict_Next(commands, &pos, &key, &cmd)) {
        PyObject *name = PyUnicode_Check(key) ? PyUnicode_AsASCIIString(key) : NULL;
        if (name == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "Core(): command names are str, not %R", key);
            return -1;
        }
        int id = cmd_id(name);
        Py_DECREF(name);
        if (id < 0) {
            PyErr_Format(PyExc_ValueError, "the command table lets the compiled core run %R, which it does not "
                         "implement", key);
            return -1;
        }
        PyObject *arity = PyObject_GetAttr(cmd, s_arity);
        long a = arity == NULL ? -1 : PyLong_AsLong(arity);
        Py_XDECREF(arity);
        if (a == -1 && PyErr_Occurred()) return -1;
        if (a == 0 || a > 64 || a < -64) {
            PyErr_Format(PyExc_ValueError, "Core(): %R has arity %ld", key, a);
            return -1;
        }
        Py_INCREF(cmd);
        Py_XSETREF(self->cmds[id], cmd);
        self->arity[id] = (int)a;
    }
    /* a cycle through this core: the collector breaks it (core_traverse, core_clear) */
    self->end_turn = PyObject_GetAttrString((PyObject *)self, "end_turn");
    return self->end_turn == NULL ? -1 : 0;
}

static int cmd_id(PyObject *name) {
    Py_ssize_t n = PyBytes_GET_SIZE(name);
    if (n < 3 || n > 6) return -1;
    char low[8];
    const char *s = PyBytes_AS_STRING(name);
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        low[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
    }
    switch (low[0]) {
    case 'p':
        if (n == 4 && !memcmp(low, "ping", 4)) return C_PING;
        if (n == 4 && !memcmp(low, "pttl", 4)) return C_PTTL;
        break;
    case 'e':
        if (n == 4 && !memcmp(low, "echo", 4)) return C_ECHO;
        if (n == 6 && !memcmp(low, "exists", 6)) return C_EXISTS;
        break;
    case 'g': if (n == 3 && !memcmp(low, "get", 3)) return C_GET; break;
    case 's':
        if (n == 3 && !memcmp(low, "set", 3)) return C_SET;
        if (n == 4 && !memcmp(low, "sadd", 4)) return C_SADD;
        break;
    case 'h':
        if (n == 4 && !memcmp(low, "hget", 4)) return C_HGET;
        if (n == 4 && !memcmp(low, "hset", 4)) return C_HSET;
        break;
    case 'l':
        if (n == 5 && !memcmp(low, "lpush", 5)) return C_LPUSH;
        if (n == 4 && !memcmp(low, "lpop", 4)) return C_LPOP;
        break;
    case 'r':
        if (n == 5 && !memcmp(low, "rpush", 5)) return C_RPUSH;
        if (n == 4 && !memcmp(low, "rpop", 4)) return C_RPOP;
        break;
    case 'm':
        if (n == 4 && !memcmp(low, "mget", 4)) return C_MGET;
        if (n == 4 && !memcmp(low, "mset", 4)) return C_MSET;
        break;
    case 'i':
        if (n == 4 && !memcmp(low, "incr", 4)) return C_INCR;
        if (n == 6 && !memcmp(low, "incrby", 6)) return C_INCRBY;
        break;
    case 'd':
        if (n == 4 && !memcmp(low, "decr", 4)) return C_DECR;
        if (n == 6 && !memcmp(low, "decrby", 6)) return C_DECRBY;
        if (n == 3 && !memcmp(low, "del", 3)) return C_DEL;
        break;
    case 'u': if (n == 6 && !memcmp(low, "unlink", 6)) return C_UNLINK; break;
    case 't': if (n == 3 && !memcmp(low, "ttl", 3)) return C_TTL; break;
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Attributes                                                                                           */

/* The state the core reads per batch lives in Python objects (the pipeline, the keyspace, durability, the
 * session ...). A generic getattr costs a type lookup and a dict or descriptor call each time (about 150
 * instructions; some 60 of them per batch were 40% of an unpipelined SET's instructions), so the attributes
 * those classes declare in __slots__ are read at their offset: a cache of (name, type) -> the member's offset,
 * valid while the type's version tag is (CPython retags a type whenever its dict changes, and never reuses a
 * tag), so an attribute redefined on the class, a subclass or a plain-dict attribute take the generic path. */
typedef struct { PyObject *name; PyTypeObject *type; unsigned int tag; Py_ssize_t off; } SlotEntry;
#define SLOT_SETS_BITS 11                       /* 2048 sets of two: the ~80 (name, type) pairs never evict */
static SlotEntry slot_cache[1 << SLOT_SETS_BITS][2];

static inline __attribute__((always_inline)) Py_ssize_t slot_offset(PyObject *o, PyObject *name) {
    PyTypeObject *t = Py_TYPE(o);
    uint64_t h = ((uint64_t)(uintptr_t)name * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)(uintptr_t)t * 0xC2B2AE3D27D4EB4FULL);
    SlotEntry *set = slot_cache[h >> (64 - SLOT_SETS_BITS)];
    for (int w = 0; w < 2; w++) {
        SlotEntry *e = &set[w];
        if (e->name == name && e->type == t && e->tag == t->tp_version_tag
            && (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
            return e->off;
    }
    Py_ssize_t off = 0;
    PyObject *d = _PyType_Lookup(t, name);   /* borrowed; assigns the type a version tag */
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) off = m->offset;
    }
    if (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) {
        SlotEntry *e = set[0].name == NULL || (set[0].name == name && set[0].type == t) ? &set[0] : &set[1];
        if (e == &set[1] && set[1].name != NULL && !(set[1].name == name && set[1].type == t)) {
            set[1] = set[0];     /* both taken by others: the newest goes first, the older second */
            e = &set[0];
        }
        e->name = name; e->type = t; e->tag = t->tp_version_tag; e->off = off;
    }
    return off;
}

/* getattr(o, name), a new reference */
static inline PyObject *ga(PyObject *o, PyObject *name) {
    Py_ssize_t off = slot_offset(o, name);
    if (off) {
        PyObject *v = *(PyObject **)((char *)o + off);
        if (v != NULL) { Py_INCREF(v); return v; }
    }
    return PyObject_GetAttr(o, name);   /* (an unset slot raises its AttributeError here) */
}

/* setattr(o, name, v) */
static int sa(PyObject *o, PyObject *name, PyObject *v) {
    Py_ssize_t off = slot_offset(o, name);
    if (off) {
        PyObject **p = (PyObject **)((char *)o + off);
        PyObject *old = *p;
        Py_INCREF(v);
        *p = v;
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(o, name, v);
}

/* Truthiness of an attribute: 1, 0, or -1 with an exception set. */
static int attr_true(PyObject *o, PyObject *name) {
    PyObject *v = ga(o, name);
    if (v == NULL) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static int attr_is_none(PyObject *o, PyObject *name) {
    PyObject *v = ga(o, name);
    if (v == NULL) return -1;
    int r = v == Py_None;
    Py_DECREF(v);
    return r;
}

static long long attr_ll(PyObject *o, PyObject *name) {
    PyObject *v = ga(o, name);
    if (v == NULL) return -1;
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return r;
}

static int attr_add(PyObject *o, PyObject *name, long long delta) {
    if (!delta) return 0;
    Py_ssize_t off = slot_offset(o, name);
    if (off) {   /* an int in a slot: replaced in place, without the generic number protocol */
        PyObject **p = (PyObject **)((char *)o + off);
        PyObject *old = *p;
        if (old != NULL && PyLong_CheckExact(old)) {
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(old, &overflow);
            if (!overflow && !(delta > 0 && x > LLONG_MAX - delta) && !(delta < 0 && x < LLONG_MIN - delta)) {
                PyObject *sum = PyLong_FromLongLong(x + delta);
                if (sum == NULL) return -1;
                *p = sum;
                Py_DECREF(old);
                return 0;
            }
            if (overflow == 0 && x == -1 && PyErr_Occurred()) return -1;
        }
    }
    PyObject *v = ga(o, name);
    if (v == NULL) return -1;
    PyObject *d = PyLong_FromLongLong(delta);
    if (d == NULL) { Py_DECREF(v); return -1; }
    PyObject *s = PyNumber_Add(v, d);
    Py_DECREF(v);
    Py_DECREF(d);
    if (s == NULL) return -1;
    int rc = sa(o, name, s);
    Py_DECREF(s);
    return rc;
}

/* What one run() keeps while it goes. */
typedef struct {
    Core *core;
    PyObject *session, *ctx, *outbox, *held, *db, *data, *expires, *enc;
    int stamp;                /* a lookup or a store sets the key's access time to `lru` (keyspace.lru_stamp) */
    uint32_t lru;
    PyObject *cur_args;       /* the request being run (borrowed): a held reply counts its bytes */
    Py_ssize_t reply_len;     /* its reply's encoded size (the large-reply log) */
    int resp3;
    int needs_touched;        /* durability wants the keys each write touched (a journal is attached) */
    long long db_id;
    int journal;              /* durability.submit is not the no-op of durability none */
    long long now_ms;         /* keyspace.clock_ms(), read once when first needed (-1: not yet) */
    long long threshold_us, request_limit, reply_limit;
    long long hits, misses, used_delta, changes, commands;
    long long calls[NCMD], usec[NCMD];
    /* LATENCY HISTOGRAM counts not yet added to the command's list: a pipeline's commands mostly share a
     * command and a bucket, so one pending (command, bucket, count) spares an attribute read and an integer
     * add per command (lat_flush) */
    int lat_id, lat_bucket;
    long long lat_n;
    PyObject *last_cmd;       /* borrowed */
    PyObject *gate;           /* a shard member's gate (lease): checked per keyed command; NULL elsewhere */
    PyObject *slot_codes;     /* the cluster router's per-slot codes (routing/decide.py _fast); NULL elsewhere */
    PyObject *slots;          /* the database's SlotIndex (cluster mode), kept on every insert and delete */
    Buf out;                  /* replies that may leave with this batch, not handed to the outbox yet */
    Py_ssize_t size;          /* reply bytes since the last flush (connection.OUTPUT_FLUSH_BYTES) */
} Run;

static long long run_now(Run *r) {
    if (r->now_ms < 0) {
        PyObject *v = PyObject_CallMethodNoArgs(r->core->keyspace, s_clock_ms);
        if (v == NULL) return -1;
        r->now_ms = PyLong_AsLongLong(v);
        Py_DECREF(v);
        if (r->now_ms < 0 && PyErr_Occurred()) return -1;
    }
    return r->now_ms;
}

/* 1 if key has an expiry that has passed (the Python path must run: it deletes the key and journals it),
 * 0 if not, -1 on error. */
static int expired(Run *r, PyObject *key) {
    if (PyDict_GET_SIZE(r->expires) == 0) return 0;
    PyObject *at = PyDict_GetItemWithError(r->expires, key);
    if (at == NULL) return PyErr_Occurred() ? -1 : 0;
    long long now = run_now(r);
    if (now < 0 && PyErr_Occurred()) return -1;
    long long when = PyLong_AsLongLong(at);
    if (when == -1 && PyErr_Occurred()) return -1;
    return when <= now;
}

/* ---- The Outbox API (durability/release.py Outbox: its docstring states this contract) ----
 * The core hands every reply to the connection's outbox through the Outbox's methods: emit(ticket, data) for a
 * reply, hold(ticket, data, carried) for one that waits for a commit, take_ready() for what a flush writes. For
 * an Outbox of exactly that class they are these C functions: fastpath.install() puts them on the class as its
 * methods (outbox_methods below), so the Python callers and the core run the same code, and the core calls them
 * without a Python call. For a subclass (which may override them) the core calls the methods by name. The core
 * reads `held` (a ticket-0 reply may be buffered only while nothing is held) and `closed`; it writes no field. */

static PyTypeObject *outbox_type;      /* the Outbox class whose methods these are (outbox_methods) */
static long long outbox_entry_cost;    /* its ENTRY_COST */

static inline int outbox_exact(PyObject *outbox) {
    return outbox_type != NULL && Py_TYPE(outbox) == outbox_type;
}

/* Outbox.hold(ticket, data, carried): the reply waits for entry `ticket` (or for what is held before it). 0/-1. */
static int outbox_hold(PyObject *outbox, long long ticket, PyObject *data, long long carried) {
    Py_ssize_t size = PyBytes_Check(data) ? PyBytes_GET_SIZE(data) : PyObject_Size(data);
    if (size < 0) return -1;
    long long entry_cost = outbox_entry_cost;
    if (!outbox_exact(outbox)) {   /* a subclass that kept this method: its own ENTRY_COST */
        PyObject *cost = PyObject_GetAttr(outbox, s_entry_cost);
        entry_cost = cost ? PyLong_AsLongLong(cost) : -1;
        Py_XDECREF(cost);
        if (entry_cost == -1 && PyErr_Occurred()) return -1;
    }
    PyObject *held = ga(outbox, s_held);
    if (held == NULL) return -1;
    PyObject *tk = PyLong_FromLongLong(ticket);
    PyObject *item = tk ? PyTuple_Pack(2, tk, data) : NULL;
    int rc = item == NULL || !PyList_CheckExact(held) ? -1 : PyList_Append(held, item);
    Py_XDECREF(item);
    Py_DECREF(held);
    if (rc < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "outbox.held is not a list");
        goto out;
    }
    rc = -1;
    if (attr_add(outbox, s_held_bytes, size + entry_cost) < 0) goto out;
    PyObject *dur = ga(outbox, s_durability);
    if (dur == NULL) goto out;
    long long committed = attr_ll(dur, s_committed);
    if (committed == -1 && PyErr_Occurred()) { Py_DECREF(dur); goto out; }
    if (ticket > committed) {
        PyObject *waiting = ga(dur, s_waiting);
        int added = waiting == NULL ? -1 : PySet_Add(waiting, outbox);
        Py_XDECREF(waiting);
        if (added < 0) { Py_DECREF(dur); goto out; }
        if (carried) {
            if (attr_add(outbox, s_carried_bytes, carried) < 0) { Py_DECREF(dur); goto out; }
            PyObject *c = ga(outbox, s_carried_by_ticket);
            PyObject *was = c ? PyDict_GetItemWithError(c, tk) : NULL;    /* borrowed */
            long long before = was ? PyLong_AsLongLong(was) : 0;
            PyObject *now = c && !PyErr_Occurred() ? PyLong_FromLongLong(before + carried) : NULL;
            int set = now ? PyDict_SetItem(c, tk, now) : -1;
            Py_XDECREF(now);
            Py_XDECREF(c);
            if (set < 0) { Py_DECREF(dur); goto out; }
        }
    }
    Py_DECREF(dur);
    long long limit = attr_ll(outbox, s_limit_bytes);
    if (limit == -1 && PyErr_Occurred()) goto out;
    if (limit) {
        long long total = attr_ll(outbox, s_held_bytes);
        long long carried_total = total == -1 && PyErr_Occurred() ? -1 : attr_ll(outbox, s_carried_bytes);
        if (PyErr_Occurred()) goto out;
        if (total + carried_total > limit) {
            int over = attr_true(outbox, s_over_limit);
            if (over < 0) goto out;
            if (!over) {
                PyObject *res = PyObject_CallMethodOneArg(outbox, s_set_over, Py_True);
                if (res == NULL) goto out;
                Py_DECREF(res);
            }
        }
    }
    rc = 0;
out:
    Py_XDECREF(tk);
    return rc;
}

/* Outbox.emit(ticket, data): leaves with the batch (the ready list) unless it, or anything before it, waits. */
static int outbox_emit(PyObject *outbox, long long ticket, PyObject *data) {
    PyObject *held = ga(outbox, s_held);
    if (held == NULL) return -1;
    Py_ssize_t nheld = PyObject_Size(held);
    Py_DECREF(held);
    if (nheld < 0) return -1;
    if (ticket || nheld) return outbox_hold(outbox, ticket, data, 0);
    PyObject *ready = ga(outbox, s_ready);
    if (ready == NULL) return -1;
    int rc = PyList_Append(ready, data);
    Py_DECREF(ready);
    return rc;
}

/* Outbox.take_ready(): the bytes that may leave now, joined (None if none); the ready list is emptied. */
static PyObject *outbox_take_ready(PyObject *outbox) {
    PyObject *ready = ga(outbox, s_ready);
    if (ready == NULL) return NULL;
    if (!PyList_CheckExact(ready)) {
        Py_DECREF(ready);
        PyErr_SetString(PyExc_TypeError, "outbox.ready is not a list");
        return NULL;
    }
    PyObject *data;
    Py_ssize_t n = PyList_GET_SIZE(ready);
    if (n == 0) {
        data = Py_None;
        Py_INCREF(data);
    } else if (n == 1) {
        data = PyList_GET_ITEM(ready, 0);
        Py_INCREF(data);
    } else {
        PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
        data = empty ? _PyBytes_Join(empty, ready) : NULL;
        Py_XDECREF(empty);
    }
    if (data != NULL && n && PyList_SetSlice(ready, 0, PY_SSIZE_T_MAX, NULL) < 0) Py_CLEAR(data);
    Py_DECREF(ready);
    return data;
}

/* The Deferred class (protocol/resp.py): a held reply not known yet; release() encodes it once it is resolved and
 * its own entry committed. Given to outbox_methods(cls, deferred). */
static PyTypeObject *deferred_type;
static PyObject *s_encode, *s_on_drained, *s_done, *s_index, *s_reply;

/* Drops the carried bytes counted against tickets <= committed (Outbox._drop_carried(committed=...)). 0/-1. */
static int outbox_drop_carried(PyObject *outbox, long long committed) {
    PyObject *c = ga(outbox, s_carried_by_ticket);
    if (c == NULL) return -1;
    int rc = -1;
    if (!PyDict_CheckExact(c)) {
        PyErr_SetString(PyExc_TypeError, "outbox.carried_by_ticket is not a dict");
        goto out;
    }
    if (PyDict_GET_SIZE(c) == 0) { rc = 0; goto out; }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    long long newest = LLONG_MIN, dropped = 0;
    while (PyDict_Next(c, &pos, &key, &value)) {
        long long t = PyLong_AsLongLong(key);
        if (t == -1 && PyErr_Occurred()) goto out;
        if (t > newest) newest = t;
    }
    if (newest <= committed) {        /* the usual case: one ticket, now committed */
        PyDict_Clear(c);
        PyObject *zero = PyLong_FromLong(0);
        rc = zero ? sa(outbox, s_carried_bytes, zero) : -1;
        Py_XDECREF(zero);
        goto out;
    }
    PyObject *gone = PyList_New(0);
    if (gone == NULL) goto out;
    pos = 0;
    while (PyDict_Next(c, &pos, &key, &value)) {
        long long t = PyLong_AsLongLong(key);
        long long n = PyLong_AsLongLong(value);
        if (PyErr_Occurred() || (t <= committed && PyList_Append(gone, key) < 0)) { Py_DECREF(gone); goto out; }
        if (t <= committed) dropped += n;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(gone); i++)
        if (PyDict_DelItem(c, PyList_GET_ITEM(gone, i)) < 0) { Py_DECREF(gone); goto out; }
    Py_DECREF(gone);
    rc = attr_add(outbox, s_carried_bytes, -dropped);
out:
    Py_DECREF(c);
    return rc;
}

/* Outbox.flush(): what is ready goes to the transport (the method, by name, for a subclass). 0/-1. */
static int outbox_flush(PyObject *outbox) {
    if (!outbox_exact(outbox)) {
        PyObject *res = PyObject_CallMethodNoArgs(outbox, s_flush);
        Py_XDECREF(res);
        return res ? 0 : -1;
    }
    PyObject *data = outbox_take_ready(outbox);
    if (data == NULL) return -1;
    int rc = 0;
    if (data != Py_None) {
        int closed = attr_true(outbox, s_closed);
        if (closed < 0) rc = -1;
        else if (!closed) {
            PyObject *write = ga(outbox, s_write);
            PyObject *res = write ? PyObject_CallOneArg(write, data) : NULL;
            Py_XDECREF(write);
            Py_XDECREF(res);
            if (res == NULL) rc = -1;
        }
    }
    Py_DECREF(data);
    return rc;
}

/* Outbox.release(): moves what may leave now from held to ready, in order, and writes it. Called once per
 * waiting outbox on every commit (Durability.on_commit): a held reply's way out. 0/-1. */
static int outbox_release(PyObject *outbox) {
    PyObject *dur = ga(outbox, s_durability);
    if (dur == NULL) return -1;
    PyObject *held = NULL, *ready = NULL, *waiting = NULL;
    int rc = -1;
    long long committed = attr_ll(dur, s_committed);
    if (committed == -1 && PyErr_Occurred()) goto out;
    if (outbox_drop_carried(outbox, committed) < 0) goto out;
    held = ga(outbox, s_held);
    if (held == NULL) goto out;
    if (!PyList_CheckExact(held)) {
        PyErr_SetString(PyExc_TypeError, "outbox.held is not a list");
        goto out;
    }
    Py_ssize_t nheld = PyList_GET_SIZE(held);
    if (nheld) {
        long long entry_cost = outbox_entry_cost;
        if (!outbox_exact(outbox)) {
            PyObject *cost = PyObject_GetAttr(outbox, s_entry_cost);
            entry_cost = cost ? PyLong_AsLongLong(cost) : -1;
            Py_XDECREF(cost);
            if (entry_cost == -1 && PyErr_Occurred()) goto out;
        }
        ready = ga(outbox, s_ready);
        waiting = ready ? ga(dur, s_waiting) : NULL;
        if (waiting == NULL) goto out;
        if (!PyList_CheckExact(ready)) {
            PyErr_SetString(PyExc_TypeError, "outbox.ready is not a list");
            goto out;
        }
        Py_ssize_t n = 0;
        long long freed = 0;
        int failed = 0;
        for (; n < PyList_GET_SIZE(held); n++) {
            PyObject *entry = PyList_GET_ITEM(held, n);
            if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
                PyErr_SetString(PyExc_TypeError, "outbox.held holds (index, reply) pairs");
                failed = 1;
                break;
            }
            long long index = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 0));
            if (index == -1 && PyErr_Occurred()) { failed = 1; break; }
            if (index > committed) {
                if (PySet_Add(waiting, outbox) < 0) failed = 1;
                break;
            }
            PyObject *item = PyTuple_GET_ITEM(entry, 1);
            if (deferred_type != NULL && Py_TYPE(item) == deferred_type) {
                int done = attr_true(item, s_done);
                if (done <= 0) { failed = done < 0; break; }
                long long di = attr_ll(item, s_index);
                if (di == -1 && PyErr_Occurred()) { failed = 1; break; }
                if (di > committed) {
                    if (PySet_Add(waiting, outbox) < 0) failed = 1;
                    break;
                }
                PyObject *encode = ga(outbox, s_encode);
                PyObject *reply = encode ? ga(item, s_reply) : NULL;
                PyObject *data = reply ? PyObject_CallOneArg(encode, reply) : NULL;
                Py_XDECREF(encode);
                Py_XDECREF(reply);
                int appended = data ? PyList_Append(ready, data) : -1;
                Py_XDECREF(data);
                if (appended < 0) { failed = 1; break; }
                freed += entry_cost;
            } else {
                Py_ssize_t size = PyBytes_Check(item) ? PyBytes_GET_SIZE(item) : PyObject_Size(item);
                if (size < 0 || PyList_Append(ready, item) < 0) { failed = 1; break; }
                freed += size + entry_cost;
            }
        }
        /* (what moved to ready is no longer held, even when a later item failed: as the Python method, which
         * counts each item as it goes, leaves it) */
        if (attr_add(outbox, s_held_bytes, -freed) < 0 || failed) goto out;
        if (n) {
            if (PyList_SetSlice(held, 0, n, NULL) < 0) goto out;
            int over = attr_true(outbox, s_over_limit);
            if (over < 0) goto out;
            if (over) {
                long long limit = attr_ll(outbox, s_limit_bytes);
                long long total = limit == -1 && PyErr_Occurred() ? -1 : attr_ll(outbox, s_held_bytes);
                long long carried = total == -1 && PyErr_Occurred() ? -1 : attr_ll(outbox, s_carried_bytes);
                if (PyErr_Occurred()) goto out;
                if (total + carried <= limit / 2) {   /* (limit >= 0: client-held-replies-limit's bounds) */
                    PyObject *res = PyObject_CallMethodOneArg(outbox, s_set_over, Py_False);
                    if (res == NULL) goto out;
                    Py_DECREF(res);
                }
            }
        }
        if (PyList_GET_SIZE(held) == 0) {
            if (PySet_Discard(waiting, outbox) < 0 || outbox_flush(outbox) < 0) goto out;
            PyObject *drained = ga(outbox, s_on_drained);
            if (drained == NULL) goto out;
            PyObject *res = drained == Py_None ? Py_None : PyObject_CallNoArgs(drained);
            Py_DECREF(drained);
            if (res == NULL) goto out;
            if (res != Py_None) Py_DECREF(res);
            rc = 0;
            goto out;
        }
    }
    rc = outbox_flush(outbox);
out:
    Py_XDECREF(held);
    Py_XDECREF(ready);
    Py_XDECREF(waiting);
    Py_DECREF(dur);
    return rc;
}

/* The methods' Python faces (METH_FASTCALL | METH_KEYWORDS on the instance: Outbox.hold(self, ticket, data,
   carried=0), ...), taking their arguments by position or by name as the Python methods do. */
static int outbox_args(PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
                       Py_ssize_t count, Py_ssize_t required, PyObject **out, const char *usage) {
    for (Py_ssize_t i = 0; i < count; i++) out[i] = NULL;
    if (nargs > count) goto usage_error;
    for (Py_ssize_t i = 0; i < nargs; i++) out[i] = argv[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        if (name == NULL) return -1;
        Py_ssize_t i = 0;
        while (i < count && strcmp(name, names[i]) != 0) i++;
        if (i == count || out[i] != NULL) goto usage_error;     /* unknown, or given twice */
        out[i] = argv[nargs + k];
    }
    for (Py_ssize_t i = 0; i < required; i++)
        if (out[i] == NULL) goto usage_error;
    return 0;
usage_error:
    PyErr_SetString(PyExc_TypeError, usage);
    return -1;
}

static const char *const outbox_hold_names[] = {"ticket", "data", "carried"};
static const char *const outbox_emit_names[] = {"ticket", "data"};

static PyObject *outbox_m_hold(PyObject *self, PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *args[3];
    if (outbox_args(argv, nargs, kwnames, outbox_hold_names, 3, 2, args, "hold(ticket, data, carried=0)") < 0)
        return NULL;
    long long ticket = PyLong_AsLongLong(args[0]);
    long long carried = args[2] != NULL ? PyLong_AsLongLong(args[2]) : 0;
    if (PyErr_Occurred() || outbox_hold(self, ticket, args[1], carried) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *outbox_m_emit(PyObject *self, PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *args[2];
    if (outbox_args(argv, nargs, kwnames, outbox_emit_names, 2, 2, args, "emit(ticket, data)") < 0) return NULL;
    long long ticket = PyLong_AsLongLong(args[0]);
    if ((ticket == -1 && PyErr_Occurred()) || outbox_emit(self, ticket, args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *outbox_m_take_ready(PyObject *self, PyObject *unused) {
    return outbox_take_ready(self);
}

static PyObject *outbox_m_release(PyObject *self, PyObject *unused) {
    if (outbox_release(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef outbox_method_defs[] = {
    {"hold", (PyCFunction)(void (*)(void))outbox_m_hold, METH_FASTCALL | METH_KEYWORDS,
     "hold(ticket, data, carried=0): a reply that waits for entry `ticket` (or for what is held before it); "
     "`carried`: the bytes of the request it answers, kept in memory until that entry commits"},
    {"emit", (PyCFunction)(void (*)(void))outbox_m_emit, METH_FASTCALL | METH_KEYWORDS,
     "emit(ticket, data): an encoded reply; leaves with the batch unless it (or anything before it) must wait"},
    {"take_ready", (PyCFunction)outbox_m_take_ready, METH_NOARGS,
     "take_ready() -> bytes or None: what may leave now, joined; the ready list is emptied"},
    {"release", (PyCFunction)outbox_m_release, METH_NOARGS,
     "release(): moves what may leave now from held to ready, in order, and writes it"},
    {NULL}
};

/* outbox_methods(cls, deferred) -> {name: method}: the Outbox API's C implementations as methods of cls
 * (durability/release.py Outbox, its ENTRY_COST read here), which fastpath.install() puts on the class; deferred is
 * protocol/resp.py's Deferred, the one held item release() does not write as it is. */
static PyObject *fast_outbox_methods(PyObject *mod, PyObject *args) {
    PyObject *cls, *deferred;
    if (!PyArg_ParseTuple(args, "OO:outbox_methods", &cls, &deferred)) return NULL;
    if (!PyType_Check(cls) || !PyType_Check(deferred)) {
        PyErr_SetString(PyExc_TypeError, "outbox_methods(cls, deferred): two classes");
        return NULL;
    }
    if (deferred_type != NULL && deferred_type != (PyTypeObject *)deferred) {
        PyErr_SetString(PyExc_ValueError, "the compiled Outbox methods release another Deferred class");
        return NULL;
    }
    PyObject *cost = PyObject_GetAttr(cls, s_entry_cost);
    long long c = cost ? PyLong_AsLongLong(cost) : -1;
    Py_XDECREF(cost);
    if (c == -1 && PyErr_Occurred()) return NULL;
    if (c < 0) {
        PyErr_SetString(PyExc_ValueError, "Outbox.ENTRY_COST must be >= 0");
        return NULL;
    }
    if (outbox_type != NULL && outbox_type != (PyTypeObject *)cls) {
        PyErr_SetString(PyExc_ValueError, "the compiled Outbox methods belong to another class");
        return NULL;
    }
    PyObject *methods = PyDict_New();
    if (methods == NULL) return NULL;
    for (PyMethodDef *def = outbox_method_defs; def->ml_name != NULL; def++) {
        PyObject *m = PyDescr_NewMethod((PyTypeObject *)cls, def);
        if (m == NULL || PyDict_SetItemString(methods, def->ml_name, m) < 0) {
            Py_XDECREF(m);
            Py_DECREF(methods);
            return NULL;
        }
        Py_DECREF(m);
    }
    if (outbox_type == NULL) {
        Py_INCREF(cls);     /* (kept: a module's class lives as long as the process) */
        outbox_type = (PyTypeObject *)cls;
    }
    if (deferred_type == NULL) {
        Py_INCREF(deferred);
        deferred_type = (PyTypeObject *)deferred;
    }
    outbox_entry_cost = c;
    return methods;
}

/* The ready bytes go to the outbox as one reply (nothing is held before them: emit() flushed before holding). */
static int flush_out(Run *r) {
    if (r->out.len == 0) return 0;
    PyObject *chunk = PyBytes_FromStringAndSize(r->out.data, r->out.len);
    if (chunk == NULL) return -1;
    r->out.len = 0;
    int rc;
    if (outbox_exact(r->outbox)) {
        rc = outbox_emit(r->outbox, 0, chunk);
    } else {   /* outbox.emit(0, chunk) by its interned name, vectorcall */
        PyObject *zero = PyLong_FromLong(0);   /* (a cached small int) */
        PyObject *callargs[3] = {r->outbox, zero, chunk};
        PyObject *res = PyObject_VectorcallMethod(s_emit, callargs, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(zero);
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    Py_DECREF(chunk);
    return rc;
}

static long long args_bytes(PyObject *args);

/* One reply, encoded in data[:n], with its ticket: as connection.run_batch gives it to the outbox. */
static int emit(Run *r, const char *data, Py_ssize_t n, long long ticket) {
    r->reply_len = n;
    if (ticket == 0 && PyList_GET_SIZE(r->held) == 0)
        return buf_put(&r->out, data, n);
    long long carried = args_bytes(r->cur_args);
    if (flush_out(r) < 0) return -1;
    PyObject *bytes = PyBytes_FromStringAndSize(data, n);
    if (bytes == NULL) return -1;
    if (outbox_exact(r->outbox)) {
        int rc = outbox_hold(r->outbox, ticket, bytes, ticket ? carried : 0);
        Py_DECREF(bytes);
        return rc;
    }
    /* outbox.hold(ticket, bytes[, carried]) by its interned name, vectorcall: PyObject_CallMethod's format
     * string made a method name and an argument tuple per held reply */
    PyObject *t = PyLong_FromLongLong(ticket);
    PyObject *c = ticket && t != NULL ? PyLong_FromLongLong(carried) : NULL;
    PyObject *res = NULL;
    if (t != NULL && (c != NULL || !ticket)) {
        PyObject *callargs[4] = {r->outbox, t, bytes, c};
        res = PyObject_VectorcallMethod(s_hold, callargs, (ticket ? 4 : 3) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_XDECREF(t);
    Py_XDECREF(c);
    Py_DECREF(bytes);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

static long long args_bytes(PyObject *args) {
    long long n = 0;
    Py_ssize_t argc = PyList_GET_SIZE(args);
    for (Py_ssize_t i = 0; i < argc; i++) n += PyBytes_GET_SIZE(PyList_GET_ITEM(args, i));
    return n;
}

/* durability.submit(effects, touched) and the session's last write: the reply's ticket, or -1. */
static PyObject *fast_effects_size(PyObject *self, PyObject *const *argv, Py_ssize_t nargs);

/* durability/tracker.py's WriteTracker class, looked up at the first sync write (as outbox_class) */
static PyTypeObject *tracker_class(void) {
    static int looked;
    static PyTypeObject *type;
    if (!looked) {
        looked = 1;
        PyObject *mod = PyImport_ImportModule("durakv.durability.tracker");
        PyObject *cls = mod ? PyObject_GetAttr(mod, s_write_tracker) : NULL;
        if (cls != NULL && PyType_Check(cls)) {
            type = (PyTypeObject *)cls;
            Py_INCREF(cls);
        }
        PyErr_Clear();
        Py_XDECREF(cls);
        Py_XDECREF(mod);
    }
    return type;
}

/* An item of a plain instance's __dict__ (borrowed), NULL when absent (no exception set). */
static inline PyObject *dict_item(PyObject *d, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(d, name);
    if (v == NULL) PyErr_Clear();
    return v;
}

/* WriteTracker.submit's common case, in C: a sync write whose effects join the open batch, after opening one
 * when none is (the tracker's open_batch(), in Python: the index, its clock, timers and group commit decisions
 * stay there; a batch waiting for the writers the last commit answered is closed by its close_batch, as the
 * Python submit does, once they are in). It reads and writes only the fields the tracker's docstring lists as
 * this contract (batch_index, batch_effects, batch_bytes, batch_db, batch_keys, close_at, close_batch,
 * open_batch) and `uncommitted`. Anything else -- a batch that would pass the entry limit (sealed, or parts),
 * a promised push, async or the test-only broken mode, unknown keys, feeds, a subclass -- answers -2 before
 * adding anything, and the Python submit runs (it joins a batch opened here as any open batch). Same steps as
 * the Python code (tests/server/test_fastpath_differential.py compares the journals): the ticket, or -1 with an
 * exception. */
static long long tracker_join(Run *r, PyObject *effects, PyObject *touched) {
    PyObject *dur = r->core->durability;
    if (touched == NULL || !PyList_CheckExact(touched) || !PyList_CheckExact(effects) || PyList_GET_SIZE(effects) == 0)
        return -2;
    PyObject *tracker = ga(dur, s_tracker);
    if (tracker == NULL) return -1;
    long long ticket = -2;
    PyObject **dp, **odp;
    PyObject *feeds = NULL;
    if (Py_TYPE(tracker) != tracker_class()) goto out;
    feeds = ga(dur, s_feeds);
    if (feeds == NULL) { ticket = -1; goto out; }
    if (!PyList_CheckExact(feeds) || PyList_GET_SIZE(feeds) != 0) goto out;
    dp = _PyObject_GetDictPtr(tracker);
    odp = _PyObject_GetDictPtr(dur);
    if (dp == NULL || *dp == NULL || odp == NULL || *odp == NULL) goto out;
    PyObject *d = *dp;
    /* limit = journal.max_entry_bytes or 0, first: a journal's property may run Python, and what is read from
     * the tracker's dict below is borrowed */
    PyObject *journal = dict_item(d, s_journal);
    if (journal == NULL) goto out;
    Py_INCREF(journal);
    PyObject *lim = PyObject_GetAttr(journal, s_max_entry_bytes);
    Py_DECREF(journal);
    if (lim == NULL) { PyErr_Clear(); goto out; }
    long long limit = PyLong_Check(lim) ? PyLong_AsLongLong(lim) : -1;
    Py_DECREF(lim);
    if (limit < 0) { PyErr_Clear(); goto out; }
    PyObject *index_o = dict_item(d, s_batch_index);
    if (index_o == NULL || !PyLong_CheckExact(index_o)) goto out;
    long long index = PyLong_AsLongLong(index_o);
    if (index < 0) { PyErr_Clear(); goto out; }
    PyObject *promise = dict_item(*odp, s_promised_index);
    PyObject *mode = dict_item(d, s_mode);
    PyObject *ack_early = dict_item(d, s_ack_before_commit);
    if (promise == NULL || PyObject_IsTrue(promise) != 0
        || mode == NULL || !PyUnicode_Check(mode) || PyUnicode_Compare(mode, s_sync) != 0 || ack_early != Py_False) {
        PyErr_Clear();
        goto out;
    }
    /* The effects' encoded size and the database they end in, from the open batch's (None when none is open:
     * the Python submit's `self.batch_db if index else None`), before anything changes */
    long long size = 0;
    PyObject *sized = NULL;     /* new reference, once limit */
    if (limit) {
        PyObject *db = index ? dict_item(d, s_batch_db) : Py_None;
        if (db == NULL) goto out;
        if (effects_size_of(effects, db, &size, &sized) < 0) { ticket = -1; goto out; }
    }
    if (index == 0) {
        /* No open batch: effects larger than an entry go to the journal in parts (Python); others open one (it
         * has no effects yet: batch_bytes 0). Everything read from the tracker's dict is read again after:
         * open_batch runs Python. */
        if (limit && size > limit) { Py_DECREF(sized); goto out; }
        PyObject *opened = PyObject_CallMethodNoArgs(tracker, s_open_batch);
        if (opened == NULL) { Py_XDECREF(sized); ticket = -1; goto out; }
        Py_DECREF(opened);
        index_o = dict_item(d, s_batch_index);
        index = index_o != NULL && PyLong_CheckExact(index_o) ? PyLong_AsLongLong(index_o) : -1;
        if (index <= 0) { PyErr_Clear(); Py_XDECREF(sized); goto out; }
    }
    PyObject *batch = dict_item(d, s_batch_effects);
    PyObject *marks = dict_item(d, s_batch_keys);
    PyObject *uncommitted = dict_item(d, s_uncommitted);
    if (batch == NULL || !PyList_CheckExact(batch) || marks == NULL || !PyList_CheckExact(marks)
        || uncommitted == NULL || !PyDict_CheckExact(uncommitted)) {
        Py_XDECREF(sized);
        goto out;
    }
    if (limit) {
        PyObject *bytes_o = dict_item(d, s_batch_bytes);
        PyObject *db = dict_item(d, s_batch_db);
        if (bytes_o == NULL || !PyLong_CheckExact(bytes_o) || db == NULL) { Py_DECREF(sized); goto out; }
        long long have = PyLong_AsLongLong(bytes_o);
        if (PyErr_Occurred()) { ticket = -1; Py_DECREF(sized); goto out; }
        if (have + size > limit) { Py_DECREF(sized); goto out; }   /* the batch is sealed: Python */
        PyObject *total = PyLong_FromLongLong(have + size);
        if (total == NULL || PyDict_SetItem(d, s_batch_bytes, total) < 0
            || (sized != db && PyDict_SetItem(d, s_batch_db, sized) < 0)) {   /* (sized: the db it ends in) */
            Py_XDECREF(total); Py_DECREF(sized); ticket = -1; goto out;
        }
        Py_DECREF(total);
        Py_DECREF(sized);
    }
    /* from here on nothing gives up: the effects are in the batch */
    PyObject *res = _PyList_Extend((PyListObject *)batch, effects);
    if (res == NULL) { ticket = -1; goto out; }
    Py_DECREF(res);
    Py_INCREF(index_o); Py_INCREF(marks); Py_INCREF(uncommitted);   /* (close_batch below replaces the batch) */
    ticket = index;
    PyObject *close_at = dict_item(d, s_close_at);   /* 0: the batch does not wait for answered writers */
    long long want = close_at != NULL ? PyLong_AsLongLong(close_at) : 0;
    if (want == -1 && PyErr_Occurred()) ticket = -1;
    else if (want > 0) {
        if (PyList_GET_SIZE(batch) >= want) {   /* the writers the last commit answered are back */
            res = PyObject_CallMethodNoArgs(tracker, s_close_batch);
            if (res == NULL) ticket = -1;
            Py_XDECREF(res);
        }
    }
    Py_ssize_t nt = PyList_GET_SIZE(touched);
    for (Py_ssize_t k = 0; k < nt && ticket >= 0; k++)
        if (PyDict_SetItem(uncommitted, PyList_GET_ITEM(touched, k), index_o) < 0) ticket = -1;
    res = ticket >= 0 ? _PyList_Extend((PyListObject *)marks, touched) : NULL;
    if (res == NULL) ticket = -1;
    Py_XDECREF(res);
    Py_DECREF(index_o); Py_DECREF(marks); Py_DECREF(uncommitted);
out:
    Py_XDECREF(feeds);
    Py_DECREF(tracker);
    return ticket;
}

static long long submit(Run *r, PyObject *effects, PyObject *touched) {
    long long ticket = tracker_join(r, effects, touched);
    if (ticket == -1) return -1;
    if (ticket == -2) {
        PyObject *t = PyObject_CallMethodObjArgs(r->core->durability, s_submit, effects, touched, NULL);
        if (t == NULL) return -1;
        ticket = PyLong_AsLongLong(t);
        Py_DECREF(t);
        if (ticket == -1 && PyErr_Occurred()) return -1;
    }
    PyObject *assigned = ga(r->core->durability, s_assigned);
    if (assigned == NULL) return -1;
    int rc = sa(r->session, s_last_write_index, assigned);
    Py_DECREF(assigned);
    return rc < 0 ? -1 : ticket;
}

/* A command that changed nothing while writes are uncommitted: pipeline._read_ticket for keyed commands. */
static long long read_ticket(Run *r, PyObject *args, Py_ssize_t first, Py_ssize_t step, Py_ssize_t last) {
    if (!r->journal) return 0;
    PyObject *dur = r->core->durability;
    long long assigned = attr_ll(dur, s_assigned);
    long long committed = attr_ll(dur, s_committed);
    if (PyErr_Occurred()) return -1;
    if (assigned <= committed) return 0;
    int pending = attr_true(dur, s_pending);
    if (pending <= 0) return pending;
    PyObject *keys = PyList_New(0);
    if (keys == NULL) return -1;
    for (Py_ssize_t i = first; i <= last; i += step)
        if (PyList_Append(keys, PyList_GET_ITEM(args, i)) < 0) { Py_DECREF(keys); return -1; }
    PyObject *db = PyLong_FromLongLong(r->db_id);
    PyObject *t = db != NULL ? PyObject_CallMethodObjArgs(dur, s_read_ticket, db, keys, NULL) : NULL;
    Py_XDECREF(db);
    Py_DECREF(keys);
    if (t == NULL) return -1;
    long long ticket = PyLong_AsLongLong(t);
    Py_DECREF(t);
    return ticket;
}

static PyObject *make_touched(Run *r, PyObject *args, Py_ssize_t first, Py_ssize_t step, Py_ssize_t last) {
    PyObject *touched = PyList_New(0);
    if (touched == NULL || !r->needs_touched) return touched;
    PyObject *db = PyLong_FromLongLong(r->db_id);
    if (db == NULL) { Py_DECREF(touched); return NULL; }
    for (Py_ssize_t i = first; i <= last; i += step) {
        PyObject *dk = PyTuple_Pack(2, db, PyList_GET_ITEM(args, i));
        if (dk == NULL || PyList_Append(touched, dk) < 0) {
            Py_XDECREF(dk); Py_DECREF(db); Py_DECREF(touched); return NULL;
        }
        Py_DECREF(dk);
    }
    Py_DECREF(db);
    return touched;
}

/* One effect (db_id, argv) in a new list, submitted with touched; returns the ticket or -1. */
static long long submit_one(Run *r, PyObject *argv, PyObject *touched) {
    r->changes += 1;
    if (!r->journal) return 0;
    PyObject *db = PyLong_FromLongLong(r->db_id);
    if (db == NULL) return -1;
    PyObject *effect = PyTuple_Pack(2, db, argv);
    Py_DECREF(db);
    if (effect == NULL) return -1;
    PyObject *effects = PyList_New(1);
    if (effects == NULL) { Py_DECREF(effect); return -1; }
    PyList_SET_ITEM(effects, 0, effect);
    long long ticket = submit(r, effects, touched);
    Py_DECREF(effects);
    return ticket;
}

static inline long long string_cost(Run *r, PyObject *key, PyObject *value) {
    return r->core->key_cost + PyBytes_GET_SIZE(key) + PyBytes_GET_SIZE(value);
}

static inline long long str_cost(Run *r, PyObject *key, Py_ssize_t n) {
    return r->core->key_cost + PyBytes_GET_SIZE(key) + n;
}

/* Keyspace.lookup's and Context.store's access time: the key's entry takes the LRU clock (keyspace.lru_stamp),
 * when it is kept and the session is not CLIENT NO-TOUCH. */
static inline void touch(Run *r, kt_entry *e) {
    if (r->stamp) kt_set_access(e, r->lru);
}

/* An entry's value as a string: 1 with its bytes (inline, or a bytes object kept whole), 0 for another type. */
static inline int entry_string(const kt_entry *e, const char **s, Py_ssize_t *n) {
    if (kt_is_inline(e)) {
        *s = kt_str(e);
        *n = kt_str_len(e);
        return 1;
    }
    if ((e->info & KT_OBJ) && PyBytes_CheckExact(kt_obj(e))) {
        *s = PyBytes_AS_STRING(kt_obj(e));
        *n = PyBytes_GET_SIZE(kt_obj(e));
        return 1;
    }
    return 0;
}

/* A value of another type than a string (a hash, a list, a set), borrowed; NULL for a string. */
static inline PyObject *entry_object(const kt_entry *e) {
    return (e->info & KT_OBJ) && !PyBytes_CheckExact(kt_obj(e)) ? kt_obj(e) : NULL;
}

/* key's entry, or NULL when absent (*stop -1 on an error). Valid until the next write to the table. */
static kt_entry *find(Run *r, PyObject *key, int *stop) {
    kt_entry *e;
    int f = kt->find(r->data, key, &e);
    if (f < 0) *stop = -1;
    return f > 0 ? e : NULL;
}

/* The live entry of key for this command: NULL with *stop set when the Python path must run (the key
 * expired) or on an error, NULL without for a missing key. It does not touch the key: a command whose Python
 * handler looks it up (not peeks) calls touch() on a hit. */
static kt_entry *look(Run *r, PyObject *key, int *stop) {
    kt_entry *v = find(r, key, stop);
    if (v == NULL) return NULL;
    int e = expired(r, key);
    if (e != 0) { *stop = e < 0 ? -1 : 1; return NULL; }
    return v;
}

/* store(): data[key] = value, its encoding note dropped, its TTL too unless keep_ttl. */
static int slots_call(Run *r, PyObject *name, PyObject *key) {
    if (r->slots == NULL) return 0;
    PyObject *res = PyObject_CallMethodObjArgs(r->slots, name, key, NULL);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

static int store(Run *r, PyObject *key, PyObject *value, int keep_ttl) {
    if (r->slots != NULL && slots_call(r, s_add, key) < 0) return -1;
    kt_entry *e;
    if (kt->set(r->data, key, value, &e) < 0) return -1;
    touch(r, e);
    if (PyDict_GET_SIZE(r->enc) && PyDict_DelItem(r->enc, key) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) return -1;
        PyErr_Clear();
    }
    if (!keep_ttl && PyDict_GET_SIZE(r->expires) && PyDict_DelItem(r->expires, key) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) return -1;
        PyErr_Clear();
    }
    return 0;
}

#define F_NX 1
#define F_XX 2
#define F_GET 4
#define F_KEEPTTL 8
#define F_EX 32
#define F_PX 64
#define F_EXAT 128
#define F_PXAT 256
#define F_ANY_EXPIRE (F_EX | F_PX | F_EXAT | F_PXAT)

static int upper_is(PyObject *arg, const char *word) {
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    if ((size_t)n != strlen(word)) return 0;
    const char *s = PyBytes_AS_STRING(arg);
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'a' && c <= 'z') c -= 32;
        if (c != word[i]) return 0;
    }
    return 1;
}

/* estimate_key(key, value) as call() measures a key before and after a write: 0 for none, -1 on error. */
static long long key_size(Run *r, PyObject *key, PyObject *value) {
    if (value == NULL) return 0;
    if (PyBytes_CheckExact(value)) return string_cost(r, key, value);
    PyObject *n = PyObject_CallFunctionObjArgs(r->core->estimate_key, key, value, NULL);
    if (n == NULL) return -1;
    long long size = PyLong_AsLongLong(n);
    Py_DECREF(n);
    return size;
}

/* key_size() of the entry's value (0 for NULL). */
static long long entry_cost(Run *r, PyObject *key, const kt_entry *e) {
    const char *s;
    Py_ssize_t n;
    if (e == NULL) return 0;
    if (entry_string(e, &s, &n)) return str_cost(r, key, n);
    PyObject *v = kt->value(e);
    if (v == NULL) return -1;
    long long size = key_size(r, key, v);
    Py_DECREF(v);
    return size;
}

static int clear_flag(PyObject *o, PyObject *name) {
    return sa(o, name, Py_False);
}

/* A write on one key (args[1]) whose body is the command's own Python handler (commands/hashes.py,
 * lists.py, sets.py): call()'s steps around it here, the handler's semantics there. The caller checked the
 * key's type and the arguments, so the handler cannot refuse. */
static int run_handler(Run *r, PyObject *args, PyObject *cmd, PyObject *value) {
    PyObject *key = PyList_GET_ITEM(args, 1);
    long long before = key_size(r, key, value);
    if (before < 0) return -1;
    PyObject *handler = ga(cmd, s_handler);
    if (handler == NULL) return -1;
    PyObject *reply = PyObject_CallFunctionObjArgs(handler, r->ctx, args, NULL);
    Py_DECREF(handler);
    Buf b = {0};
    int rc = 0;
    if (reply == NULL) {
        /* as call(): a CommandError is the reply (counted as failed), any other exception an internal error */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        PyObject *text = ev ? PyObject_GetAttr(ev, s_text) : NULL;
        if (text == NULL) {
            PyErr_Clear();
            PyObject *name = PyObject_GetAttr(cmd, s_fullname);
            text = PyUnicode_FromFormat("ERR internal error in '%S': %S", name ? name : Py_None, ev ? ev : Py_None);
            Py_XDECREF(name);
        }
        Py_XDECREF(et); Py_XDECREF(ev); Py_XDECREF(tb);
        if (text == NULL) return -1;
        PyObject *res = PyObject_CallMethodOneArg(r->core->pipeline, s_count_error, text);
        Py_XDECREF(res);
        if (res == NULL || attr_add(cmd, s_failed_calls, 1) < 0) { Py_DECREF(text); return -1; }
        const char *t = PyUnicode_AsUTF8(text);
        rc = t == NULL ? -1 : (buf_put(&b, "-", 1) < 0 || buf_put(&b, t, strlen(t)) < 0 || buf_put(&b, "\r\n", 2) < 0);
        Py_DECREF(text);
        if (rc) { PyMem_Free(b.data); return -1; }
    } else if (PyLong_CheckExact(reply)) {
        long long v = PyLong_AsLongLong(reply);
        char tmp[32];
        int k = fmt_line(tmp, ':', v);
        rc = buf_put(&b, tmp, k);
    } else if (PyBytes_CheckExact(reply)) {
        rc = buf_bulk(&b, reply);
        r->size += PyBytes_GET_SIZE(reply);
    } else if (reply == Py_None) {
        rc = buf_null(&b, r->resp3);
    } else {
        PyErr_Format(PyExc_TypeError, "fast path: unexpected reply %R", reply);
        rc = -1;
    }
    Py_XDECREF(reply);
    if (rc < 0) { PyMem_Free(b.data); return -1; }
    int stop = 0;
    kt_entry *now = find(r, key, &stop);
    long long after = stop ? -1 : entry_cost(r, key, now);
    if (after < 0 && PyErr_Occurred()) { PyMem_Free(b.data); return -1; }
    r->used_delta += after - before;
    long long ticket = 0;
    PyObject *effects = ga(r->ctx, s_effects);
    if (effects == NULL || !PyList_Check(effects)) { Py_XDECREF(effects); PyMem_Free(b.data); return -1; }
    if (PyList_GET_SIZE(effects)) {
        PyObject *fresh = PyList_New(0);
        rc = fresh == NULL || sa(r->ctx, s_effects, fresh) < 0;
        Py_XDECREF(fresh);
        PyObject *touched = rc ? NULL : ga(r->ctx, s_touched);
        int exact = touched ? attr_true(r->ctx, s_touched_exact) : -1;
        if (exact < 0) rc = 1;
        else if (exact) rc = clear_flag(r->ctx, s_touched_exact) < 0;
        else if (touched != Py_None && r->needs_touched) {
            PyObject *mine = make_touched(r, args, 1, 1, 1);
            rc = mine == NULL || _PyList_Extend((PyListObject *)touched, mine) == NULL;
            if (!rc) Py_DECREF(Py_None);   /* _PyList_Extend's result */
            Py_XDECREF(mine);
        }
        if (!rc && (touched == Py_None || PyObject_IsTrue(touched))) {
            PyObject *next = PyList_New(0);
            rc = next == NULL || sa(r->ctx, s_touched, next) < 0;
            Py_XDECREF(next);
        }
        if (!rc) {
            r->changes += PyList_GET_SIZE(effects);
            ticket = r->journal ? submit(r, effects, touched) : 0;
            if (ticket < 0) rc = 1;
        }
        Py_XDECREF(touched);
    } else {
        ticket = read_ticket(r, args, 1, 1, 1);
        rc = ticket < 0;
    }
    Py_DECREF(effects);
    if (!rc) rc = emit(r, b.data, b.len, ticket) < 0;
    PyMem_Free(b.data);
    return rc ? -1 : 1;
}

/* The steps of one command. Returns 1 when it ran (reply emitted), 0 when the Python path must run it
 * (nothing was changed), -1 on a Python error. */
static int run_one(Run *r, int id, PyObject *args, PyObject *cmd) {
    Py_ssize_t argc = PyList_GET_SIZE(args);
    char tmp[64];
    int stop = 0;
    long long ticket = 0;
    switch (id) {
    case C_PING:
        if (argc == 1) return emit(r, "+PONG\r\n", 7, 0) < 0 ? -1 : 1;
        /* fall through: PING msg answers msg */
    case C_ECHO: {
        PyObject *msg = PyList_GET_ITEM(args, 1);
        if (PyList_GET_SIZE(r->held) == 0) {
            Py_ssize_t before = r->out.len;
            if (buf_bulk(&r->out, msg) < 0) return -1;
            r->reply_len = r->out.len - before;
        } else {
            Buf b = {0};
            if (buf_bulk(&b, msg) < 0 || emit(r, b.data, b.len, 0) < 0) { PyMem_Free(b.data); return -1; }
            PyMem_Free(b.data);
        }
        r->size += PyBytes_GET_SIZE(msg);
        return 1;
    }
    case C_GET: {
        PyObject *key = PyList_GET_ITEM(args, 1);
        kt_entry *v = look(r, key, &stop);
        if (stop) return stop < 0 ? -1 : 0;
        const char *s = NULL;
        Py_ssize_t n = 0;
        if (v != NULL && !entry_string(v, &s, &n)) return 0;   /* WRONGTYPE: the Python path answers it */
        if (v == NULL) r->misses++;
        else {
            r->hits++;
            touch(r, v);
        }
        ticket = read_ticket(r, args, 1, 1, 1);
        if (ticket < 0) return -1;
        Buf b = {0};
        Buf *dst = (ticket == 0 && PyList_GET_SIZE(r->held) == 0) ? &r->out : &b;
        Py_ssize_t before = dst->len;
        int rc = v == NULL ? buf_null(dst, r->resp3) : buf_bulk_raw(dst, s, n);
        if (rc == 0 && dst == &b) rc = emit(r, b.data, b.len, ticket);
        else r->reply_len = dst->len - before;
        PyMem_Free(b.data);
        if (rc < 0) return -1;
        r->size += n;
        return 1;
    }
    case C_SET: {
        PyObject *key = PyList_GET_ITEM(args, 1), *value = PyList_GET_ITEM(args, 2);
        int flags = 0, expire_flag = 0;
        PyObject *expire_arg = NULL;
        for (Py_ssize_t i = 3; i < argc; i++) {
            PyObject *opt = PyList_GET_ITEM(args, i);
            if (upper_is(opt, "NX") && !(flags & F_XX)) flags |= F_NX;
            else if (upper_is(opt, "XX") && !(flags & F_NX)) flags |= F_XX;
            else if (upper_is(opt, "GET")) flags |= F_GET;
            else if (upper_is(opt, "KEEPTTL") && !(flags & F_ANY_EXPIRE)) flags |= F_KEEPTTL;
            else {
                int bit = upper_is(opt, "EX") ? F_EX : upper_is(opt, "PX") ? F_PX : upper_is(opt, "EXAT") ? F_EXAT
                          : upper_is(opt, "PXAT") ? F_PXAT : 0;
                if (!bit || i + 1 >= argc || (flags & F_KEEPTTL) || (flags & (F_ANY_EXPIRE & ~bit))) return 0;
                flags |= bit;
                expire_flag = bit;
                expire_arg = PyList_GET_ITEM(args, ++i);
            }
        }
        long long expire_at = 0;
        if (expire_arg != NULL) {
            long long ms;
            if (!string2ll(PyBytes_AS_STRING(expire_arg), PyBytes_GET_SIZE(expire_arg), &ms)) return 0;
            int seconds = expire_flag & (F_EX | F_EXAT);
            if (ms <= 0 || (seconds && ms > LLONG_MAX / 1000)) return 0;
            if (seconds) ms *= 1000;
            long long now = run_now(r);
            if (now < 0 && PyErr_Occurred()) return -1;
            if (expire_flag & (F_EX | F_PX)) {
                if (ms > LLONG_MAX - now) return 0;
                ms += now;
            } else if (ms <= now) {
                return 0;   /* already expired: the Python path deletes the key */
            }
            expire_at = ms;
        }
        kt_entry *olde = look(r, key, &stop);
        if (stop) return stop < 0 ? -1 : 0;
        const char *os = NULL;
        Py_ssize_t on = 0;
        if (olde != NULL && !entry_string(olde, &os, &on)) return 0;   /* WRONGTYPE with GET; another type's size */
        int found = olde != NULL;
        if (flags & F_GET) {   /* SET ... GET reads the key first, as GET does (getGenericCommand): a hit or a miss */
            if (found) r->hits++;
            else r->misses++;
        }
        if (((flags & F_NX) && found) || ((flags & F_XX) && !found)) {
            ticket = read_ticket(r, args, 1, 1, 1);
            if (ticket < 0) return -1;
            Buf b = {0};
            int rc = ((flags & F_GET) && found) ? buf_bulk_raw(&b, os, on) : buf_null(&b, r->resp3);
            if (rc == 0) rc = emit(r, b.data, b.len, ticket);
            PyMem_Free(b.data);
            return rc < 0 ? -1 : 1;
        }
        /* the reply of SET ... GET outlives the store, which frees the old entry */
        PyObject *old = (flags & F_GET) && found ? PyBytes_FromStringAndSize(os, on) : NULL;
        if ((flags & F_GET) && found && old == NULL) return -1;
        long long before = found ? str_cost(r, key, on) : 0;
        if (store(r, key, value, flags & F_KEEPTTL) < 0) { Py_XDECREF(old); return -1; }
        PyObject *argv;
        if (expire_arg != NULL) {
            PyObject *at = PyLong_FromLongLong(expire_at);
            PyObject *res = at == NULL ? NULL : PyObject_CallMethodObjArgs(r->db, s_set_expire, key, at, NULL);
            Py_XDECREF(at);
            if (res == NULL) { Py_XDECREF(old); return -1; }
            Py_DECREF(res);
            if (expire_flag == F_PXAT) {
                argv = PyList_AsTuple(args);
            } else {
                int k = fmt_ll(tmp, expire_at);
                PyObject *at = PyBytes_FromStringAndSize(tmp, k);
                argv = at ? PyTuple_Pack(5, b_SET, key, value, b_PXAT, at) : NULL;
                Py_XDECREF(at);
            }
        } else if (flags & F_KEEPTTL) {
            argv = PyTuple_Pack(4, b_SET, key, value, b_KEEPTTL);
        } else {
            argv = PyTuple_Pack(3, b_SET, key, value);
        }
        if (argv == NULL) { Py_XDECREF(old); return -1; }
        r->used_delta += string_cost(r, key, value) - before;
        PyObject *touched = make_touched(r, args, 1, 1, 1);
        ticket = touched ? submit_one(r, argv, touched) : -1;
        Py_XDECREF(touched);
        Py_DECREF(argv);
        if (ticket < 0) { Py_XDECREF(old); return -1; }
        int rc;
        if (flags & F_GET) {
            Buf b = {0};
            rc = found ? buf_bulk(&b, old) : buf_null(&b, r->resp3);
            if (rc == 0) rc = emit(r, b.data, b.len, ticket);
            PyMem_Free(b.data);
        } else {
            rc = emit(r, "+OK\r\n", 5, ticket);
        }
        Py_XDECREF(old);
        return rc < 0 ? -1 : 1;
    }
    case C_MGET: {
        for (Py_ssize_t i = 1; i < argc; i++) {
            int e = PyDict_GET_SIZE(r->expires) ? expired(r, PyList_GET_ITEM(args, i)) : 0;
            if (e) return e < 0 ? -1 : 0;
        }
        ticket = read_ticket(r, args, 1, 1, argc - 1);
        if (ticket < 0) return -1;
        Buf b = {0};
        int rc = buf_header(&b, '*', argc - 1);
        for (Py_ssize_t i = 1; i < argc && rc == 0; i++) {
            kt_entry *v = find(r, PyList_GET_ITEM(args, i), &stop);
            const char *s;
            Py_ssize_t n;
            if (stop) rc = -1;
            else if (v == NULL) { r->misses++; rc = buf_null(&b, r->resp3); }
            else {
                r->hits++;
                touch(r, v);
                if (entry_string(v, &s, &n)) { rc = buf_bulk_raw(&b, s, n); r->size += n; }
                else rc = buf_null(&b, r->resp3);
            }
        }
        if (rc == 0) rc = emit(r, b.data, b.len, ticket);
        PyMem_Free(b.data);
        return rc < 0 ? -1 : 1;
    }
    case C_MSET: {
        if (argc % 2 == 0) return 0;
        /* before/after per key as call() measures them (a key named twice counts twice, as there) */
        long long before = 0, after = 0;
        for (Py_ssize_t i = 1; i < argc; i += 2) {
            PyObject *key = PyList_GET_ITEM(args, i);
            kt_entry *old = look(r, key, &stop);
            if (stop) return stop < 0 ? -1 : 0;
            const char *s;
            Py_ssize_t n;
            if (old != NULL && !entry_string(old, &s, &n)) return 0;
            if (old != NULL) before += str_cost(r, key, n);
        }
        for (Py_ssize_t i = 1; i < argc; i += 2)
            if (store(r, PyList_GET_ITEM(args, i), PyList_GET_ITEM(args, i + 1), 0) < 0) return -1;
        for (Py_ssize_t i = 1; i < argc; i += 2) {
            PyObject *key = PyList_GET_ITEM(args, i);
            long long cost = entry_cost(r, key, find(r, key, &stop));
            if (stop || cost < 0) return -1;
            after += cost;
        }
        r->used_delta += after - before;
        PyObject *argv = PyList_AsTuple(args);
        PyObject *touched = argv ? make_touched(r, args, 1, 2, argc - 2) : NULL;
        ticket = touched ? submit_one(r, argv, touched) : -1;
        Py_XDECREF(touched);
        Py_XDECREF(argv);
        if (ticket < 0) return -1;
        return emit(r, "+OK\r\n", 5, ticket) < 0 ? -1 : 1;
    }
    case C_INCR: case C_DECR: case C_INCRBY: case C_DECRBY: {
        PyObject *key = PyList_GET_ITEM(args, 1);
        long long delta = id == C_INCR ? 1 : id == C_DECR ? -1 : 0;
        if (id == C_INCRBY || id == C_DECRBY) {
            PyObject *d = PyList_GET_ITEM(args, 2);
            if (!string2ll(PyBytes_AS_STRING(d), PyBytes_GET_SIZE(d), &delta)) return 0;
            if (id == C_DECRBY) {
                if (delta == LLONG_MIN) return 0;
                delta = -delta;
            }
        }
        kt_entry *old = look(r, key, &stop);
        if (stop) return stop < 0 ? -1 : 0;
        long long current = 0;
        const char *os;
        Py_ssize_t on = 0;
        if (old != NULL) {
            if (!entry_string(old, &os, &on)) return 0;
            if (!string2ll(os, on, &current)) return 0;
        }
        long long result;
        if (__builtin_add_overflow(current, delta, &result)) return 0;
        int k = fmt_ll(tmp, result);
        PyObject *value = PyBytes_FromStringAndSize(tmp, k);
        if (value == NULL) return -1;
        long long before = old != NULL ? str_cost(r, key, on) : 0;
        if (store(r, key, value, 1) < 0) { Py_DECREF(value); return -1; }
        r->used_delta += string_cost(r, key, value) - before;
        Py_DECREF(value);
        PyObject *argv = PyList_AsTuple(args);
        PyObject *touched = argv ? make_touched(r, args, 1, 1, 1) : NULL;
        ticket = touched ? submit_one(r, argv, touched) : -1;
        Py_XDECREF(touched);
        Py_XDECREF(argv);
        if (ticket < 0) return -1;
        int m = fmt_line(tmp, ':', result);
        return emit(r, tmp, m, ticket) < 0 ? -1 : 1;
    }
    case C_DEL: case C_UNLINK: {
        for (Py_ssize_t i = 1; i < argc; i++) {
            PyObject *key = PyList_GET_ITEM(args, i);
            (void)look(r, key, &stop);   /* an expired key: the Python path deletes it and journals that */
            if (stop) return stop < 0 ? -1 : 0;
        }
        PyObject *argv = PyList_New(1);
        if (argv == NULL) return -1;
        Py_INCREF(b_DEL);
        PyList_SET_ITEM(argv, 0, b_DEL);
        long long before = 0;
        for (Py_ssize_t i = 1; i < argc; i++) {
            PyObject *key = PyList_GET_ITEM(args, i);
            kt_entry *v = find(r, key, &stop);
            /* another type's: the Python estimator's, as call()'s */
            long long size = stop ? -1 : entry_cost(r, key, v);
            if (size < 0) { Py_DECREF(argv); return -1; }
            before += size;
        }
        for (Py_ssize_t i = 1; i < argc; i++) {
            PyObject *key = PyList_GET_ITEM(args, i);
            int gone = kt->del(r->data, key);
            if (gone == 0) continue;
            if (gone < 0 || PyList_Append(argv, key) < 0 || slots_call(r, s_discard, key) < 0) {
                Py_DECREF(argv);
                return -1;
            }
            PyObject *dicts[2] = {r->expires, r->enc};   /* the access time went with the entry */
            for (int d = 0; d < 2; d++) {
                if (PyDict_GET_SIZE(dicts[d]) && PyDict_DelItem(dicts[d], key) < 0) {
                    if (!PyErr_ExceptionMatches(PyExc_KeyError)) { Py_DECREF(argv); return -1; }
                    PyErr_Clear();
                }
            }
        }
        Py_ssize_t removed = PyList_GET_SIZE(argv) - 1;
        r->used_delta -= before;
        if (removed) {
            PyObject *tuple = PyList_AsTuple(argv);
            PyObject *touched = tuple ? make_touched(r, args, 1, 1, argc - 1) : NULL;
            ticket = touched ? submit_one(r, tuple, touched) : -1;
            Py_XDECREF(touched);
            Py_XDECREF(tuple);
        } else {
            ticket = read_ticket(r, args, 1, 1, argc - 1);
        }
        Py_DECREF(argv);
        if (ticket < 0) return -1;
        int m = fmt_line(tmp, ':', (long long)removed);
        return emit(r, tmp, m, ticket) < 0 ? -1 : 1;
    }
    case C_EXISTS: {
        long long count = 0;
        for (Py_ssize_t i = 1; i < argc; i++) {
            PyObject *key = PyList_GET_ITEM(args, i);
            kt_entry *v = look(r, key, &stop);
            if (stop) return stop < 0 ? -1 : 0;
            if (v != NULL) count++;
        }
        ticket = read_ticket(r, args, 1, 1, argc - 1);
        if (ticket < 0) return -1;
        int m = fmt_line(tmp, ':', count);
        return emit(r, tmp, m, ticket) < 0 ? -1 : 1;
    }
    case C_HGET: {
        PyObject *key = PyList_GET_ITEM(args, 1);
        kt_entry *he = look(r, key, &stop);
        if (stop) return stop < 0 ? -1 : 0;
        PyObject *h = he != NULL ? entry_object(he) : NULL;
        if (he != NULL && (h == NULL || !PyDict_CheckExact(h))) return 0;
        PyObject *v = NULL;
        if (h == NULL) r->misses++;
        else {
            r->hits++;
            touch(r, he);
            v = PyDict_GetItemWithError(h, PyList_GET_ITEM(args, 2));
            if (v == NULL && PyErr_Occurred()) return -1;
            if (v != NULL && !PyBytes_CheckExact(v)) v = NULL;
        }
        ticket = read_ticket(r, args, 1, 1, 1);
        if (ticket < 0) return -1;
        Buf b = {0};
        int rc = v == NULL ? buf_null(&b, r->resp3) : buf_bulk(&b, v);
        if (rc == 0) rc = emit(r, b.data, b.len, ticket);
        PyMem_Free(b.data);
        if (v != NULL) r->size += PyBytes_GET_SIZE(v);
        return rc < 0 ? -1 : 1;
    }
    case C_HSET: case C_LPUSH: case C_RPUSH: case C_LPOP: case C_RPOP: case C_SADD: {
        if (id == C_HSET && argc % 2) return 0;                      /* wrong arity: the Python path */
        if ((id == C_LPOP || id == C_RPOP) && argc != 2) return 0;   /* the COUNT form */
        PyObject *key = PyList_GET_ITEM(args, 1);
        kt_entry *ve = look(r, key, &stop);
        if (stop) return stop < 0 ? -1 : 0;
        PyObject *v = ve != NULL ? entry_object(ve) : NULL;
        if (ve != NULL && v == NULL) return 0;                       /* a string: WRONGTYPE */
        if (v != NULL) {
            int right = id == C_HSET ? PyDict_CheckExact(v)
                        : id == C_SADD ? PySet_CheckExact(v)
                        : (PyObject *)Py_TYPE(v) == r->core->deque_type;
            if (!right) return 0;                                     /* WRONGTYPE */
        }
        return run_handler(r, args, cmd, v);
    }
    case C_TTL: case C_PTTL: {
        PyObject *key = PyList_GET_ITEM(args, 1);
        kt_entry *v = look(r, key, &stop);
        if (stop) return stop < 0 ? -1 : 0;
        long long ttl;
        if (v == NULL) ttl = -2;
        else {
            PyObject *at = PyDict_GET_SIZE(r->expires) ? PyDict_GetItemWithError(r->expires, key) : NULL;
            if (at == NULL && PyErr_Occurred()) return -1;
            if (at == NULL) ttl = -1;
            else {
                long long now = run_now(r);
                if (now < 0 && PyErr_Occurred()) return -1;
                ttl = PyLong_AsLongLong(at) - now;
                if (ttl < 0) ttl = 0;
                if (id == C_TTL) ttl = (ttl + 500) / 1000;
            }
        }
        ticket = read_ticket(r, args, 1, 1, 1);
        if (ticket < 0) return -1;
        int m = fmt_line(tmp, ':', ttl);
        return emit(r, tmp, m, ticket) < 0 ? -1 : 1;
    }
    }
    return 0;
}

/* A slot of the core's state object (commands/corestate.py CoreState), borrowed, at the offset Core() found;
 * NULL with an exception if it was deleted. */
static inline PyObject *state_get(Core *c, int i) {
    PyObject *v = *(PyObject **)((char *)c->state + c->state_off[i]);
    if (v == NULL) PyErr_Format(PyExc_AttributeError, "the compiled core's state has no %R", s_state[i]);
    return v;
}

/* Whether one of the state's containers (filled and drained in place by their owners) holds something:
 * 1, 0 (empty, or None), -1. */
static int holds_something(PyObject *o) {
    if (o == Py_None) return 0;
    if (PyDict_Check(o)) return PyDict_GET_SIZE(o) != 0;
    if (PyList_Check(o)) return PyList_GET_SIZE(o) != 0;
    if (PyAnySet_Check(o)) return PySet_GET_SIZE(o) != 0;
    return PyObject_IsTrue(o);
}

/* A shard member (cluster mode): the state's gate and slot codes are what the pipeline's admission inputs (the
 * role gate, the cluster router) say, and the core serves a command itself only where their answer is "serve":
 * a gate that answers fast_serving() (a shard member's, replication/lease.py: a primary, its lease valid now by
 * the rule serving_error uses, no hand-over holding commands) and answers yes for each keyed command, the
 * router's per-slot code SERVE, no key on its way to another shard (the state's `moving`, fast_allowed).
 * Any other gate (a REPLICAOF link's), or a router without slot codes (CLUSTERDOWN), keeps the state's may_run
 * false. Errors surface. 1: may run here, 0: not, -1: error. */
static int cluster_entry(Run *r, PyObject *session) {
    Core *c = r->core;
    PyObject *gate = state_get(c, ST_GATE);
    if (gate == NULL) return -1;
    if (gate != Py_None) {
        /* CLIENT CAPA redirect, or the REPLICAOF link's session: the gate's own rules in admission */
        long long block = attr_ll(session, s_core_block);
        if (block == -1 && PyErr_Occurred()) return -1;
        if (block & CORE_BLOCK_GATED) return 0;
        Py_INCREF(gate);
        r->gate = gate;
    }
    PyObject *codes = state_get(c, ST_SLOT_CODES);
    if (codes == NULL) return -1;
    if (codes == Py_None) return 1;
    if (!PyBytes_CheckExact(codes) || PyBytes_GET_SIZE(codes) != 16384) return 0;
    Py_INCREF(codes);
    r->slot_codes = codes;
    return 1;
}

#define CODE_SERVE 1   /* routing/decide.py _SERVE: this node serves the slot's reads and writes */

/* Admission of one keyed command on a shard member (keys args[first], args[first + step], ... args[last]):
 * the gate's fast_serving() now (the lease by the node's own rule and clock: the core reads neither), and every
 * key in one slot this node serves. 1, 0 (the pipeline's), -1. */
static int cluster_admits(Run *r, PyObject *args, Py_ssize_t first, Py_ssize_t step, Py_ssize_t last) {
    if (r->gate != NULL) {
        PyObject *yes = PyObject_CallMethodNoArgs(r->gate, s_fast_serving);
        if (yes == NULL) return -1;
        int t = PyObject_IsTrue(yes);
        Py_DECREF(yes);
        if (t <= 0) return t;   /* lapsed, held, a replica: the gate refuses it in admission and logs why */
    }
    if (r->slot_codes != NULL && last >= first) {
        const unsigned char *codes = (const unsigned char *)PyBytes_AS_STRING(r->slot_codes);
        PyObject *k = PyList_GET_ITEM(args, first);
        int slot = key_slot(PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k));
        if (codes[slot] != CODE_SERVE) return 0;
        for (Py_ssize_t i = first + step; i <= last; i += step) {
            k = PyList_GET_ITEM(args, i);
            if (key_slot(PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k)) != slot) return 0;   /* CROSSSLOT */
        }
    }
    return 1;
}

/* The state that sends every request through the Python pipeline: the session's (MULTI, subscribed, CLIENT
 * REPLY, ...), and the server's, all of which the core's state object says (admission, an observer, WATCH,
 * statistics, the clock, refused writes, expiry, access times, a gate or router that cannot answer, keys moving,
 * deletions or pushes not yet sent: commands/corestate.py): 1 if none of it holds, 0 if some does, -1 on error. */
static int fast_allowed(Core *c, PyObject *conn, PyObject *session) {
    int t = attr_true(conn, s_closing);
    if (t != 0) return t < 0 ? -1 : 0;
    /* the session's flags (authenticated, MULTI, subscribed or MONITOR, CLIENT REPLY, ASKING, a decoded RESTORE
     * payload, closing after the reply), folded by their setters (commands/session.py) */
    long long block = attr_ll(session, s_core_block);
    if (block == -1 && PyErr_Occurred()) return -1;
    if (block & CORE_BLOCK_ALWAYS) return 0;
    if (Py_TYPE(c->state) != c->state_type) {   /* (its class reassigned: the offsets are not its slots) */
        PyErr_SetString(PyExc_TypeError, "the compiled core's state object changed class");
        return -1;
    }
    PyObject *v = state_get(c, ST_MAY_RUN);
    if (v == NULL) return -1;
    if (v != Py_True) return 0;
    static const int held[] = {ST_WATCHERS, ST_MOVING, ST_DELETED, ST_OWN_FEED};
    for (size_t k = 0; k < sizeof held / sizeof held[0]; k++) {
        v = state_get(c, held[k]);
        if (v == NULL) return -1;
        t = holds_something(v);
        if (t != 0) return t < 0 ? -1 : 0;
    }
    return 1;
}

/* Writes back what a run counted (the Python objects hold every counter; the run only batches the adds). */
/* Adds the pending LATENCY HISTOGRAM count to its command's bucket (cmd.latency[bucket] += n). */
static int lat_flush(Run *r) {
    if (r->lat_n == 0) return 0;
    PyObject *lat = ga(r->core->cmds[r->lat_id], s_latency);
    long long n = r->lat_n;
    r->lat_n = 0;
    if (lat == NULL) return -1;
    int rc = 0;
    if (PyList_Check(lat) && r->lat_bucket < PyList_GET_SIZE(lat)) {
        PyObject *add = PyLong_FromLongLong(n);
        PyObject *inc = add ? PyNumber_Add(PyList_GET_ITEM(lat, r->lat_bucket), add) : NULL;
        Py_XDECREF(add);
        if (inc == NULL) rc = -1;
        else PyList_SetItem(lat, r->lat_bucket, inc);
    }
    Py_DECREF(lat);
    return rc;
}

static int run_finish(Run *r, double end) {
    Core *c = r->core;
    int rc = 0;
    if (lat_flush(r) < 0) rc = -1;
    if (flush_out(r) < 0) rc = -1;
    PyObject *mark = PyFloat_FromDouble(end);
    if (mark == NULL || sa(c->pipeline, s_mark, mark) < 0) rc = -1;
    Py_XDECREF(mark);
    for (int i = 0; i < NCMD; i++) {
        if (!r->calls[i]) continue;
        if (attr_add(c->cmds[i], s_calls, r->calls[i]) < 0 || attr_add(c->cmds[i], s_usec, r->usec[i]) < 0)
            rc = -1;
    }
    if (attr_add(c->pipeline, s_total_commands, r->commands) < 0
        || attr_add(r->session, s_commands_processed, r->commands) < 0
        || attr_add(c->keyspace, s_hits, r->hits) < 0 || attr_add(c->keyspace, s_misses, r->misses) < 0
        || attr_add(c->keyspace, s_used_bytes, r->used_delta) < 0
        || attr_add(c->keyspace, s_changes, r->changes) < 0)
        rc = -1;
    if (r->last_cmd != NULL && sa(r->session, s_last_cmd, r->last_cmd) < 0) rc = -1;
    if (r->commands) {
        c->fast_runs++;
        c->fast_commands += r->commands;
    }
    return rc;
}

static void run_release(Run *r) {
    Py_XDECREF(r->session); Py_XDECREF(r->ctx); Py_XDECREF(r->outbox); Py_XDECREF(r->held);
    Py_XDECREF(r->gate); Py_XDECREF(r->slot_codes); Py_XDECREF(r->slots);
    Py_XDECREF(r->db); Py_XDECREF(r->data); Py_XDECREF(r->expires); Py_XDECREF(r->enc);
    PyMem_Free(r->out.data);
}

#define OUTPUT_FLUSH_BYTES (1 << 20)

/* A pipelined batch's keys: the table's lookups miss the cache (bucket, then entry), one command after another
 * they would wait for each miss in turn. Before running the next KT_PREFETCH_MAX commands, the table starts
 * loading their first keys together (a command whose args[1] is not a key, PING's message, costs one useless
 * load). Sets *upto to the first command not covered. */
static void prefetch_keys(Run *r, PyObject *commands, Py_ssize_t i, Py_ssize_t *upto) {
    PyObject *keys[KT_PREFETCH_MAX];
    Py_ssize_t n = PyList_GET_SIZE(commands), k = 0, j = i;
    for (; j < n && k < KT_PREFETCH_MAX; j++) {
        PyObject *args = PyList_GET_ITEM(commands, j);
        if (PyList_CheckExact(args) && PyList_GET_SIZE(args) >= 2) keys[k++] = PyList_GET_ITEM(args, 1);
    }
    *upto = j;
    kt->prefetch(r->data, keys, k);
}

/* core_run's body: the next index (its status in *status), or -1 with an exception set. */
static Py_ssize_t run_batch(Core *self, PyObject *conn, PyObject *commands, Py_ssize_t i, int *status_out) {
    Py_ssize_t n = PyList_GET_SIZE(commands);
    *status_out = 0;
    if (i < n) {   /* the next request is not a fast command: leave at once, before any of the checks */
        PyObject *first = PyList_GET_ITEM(commands, i);
        if (!PyList_CheckExact(first) || PyList_GET_SIZE(first) == 0 || !PyBytes_CheckExact(PyList_GET_ITEM(first, 0))
            || cmd_id(PyList_GET_ITEM(first, 0)) < 0)
            return i;
    }
    Run r;
    memset(&r, 0, sizeof r);
    r.core = self;
    r.now_ms = -1;
    int status = 0;
    double start, end;
    r.session = ga(conn, s_session);
    if (r.session == NULL) return -1;
    int ok = fast_allowed(self, conn, r.session);
    if (ok <= 0) {
        Py_DECREF(r.session);
        *status_out = 1;
        return ok < 0 ? -1 : i;
    }
    r.outbox = ga(conn, s_outbox);
    r.held = r.outbox ? ga(r.outbox, s_held) : NULL;   /* (read: the Outbox API's contract) */
    if (r.held == NULL || !PyList_Check(r.held)) goto error;
    r.resp3 = attr_ll(r.session, s_resp) == 3;
    r.db_id = attr_ll(r.session, s_db_id);
    if (PyErr_Occurred()) goto error;
    r.ctx = ga(r.session, s_ctx);
    if (r.ctx == NULL) goto error;
    if (r.ctx == Py_None) { status = 1; goto done_early; }
    r.db = ga(r.ctx, s_db);     /* the database call() runs in: the context's */
    if (r.db == NULL) goto error;
    if (attr_ll(r.db, s_id) != r.db_id) {     /* (never apart for a client; if they were, the Python path) */
        if (PyErr_Occurred()) goto error;
        status = 1;
        goto done_early;
    }
    {
        int t = cluster_entry(&r, r.session);
        if (t < 0) goto error;
        if (t == 0) { status = 1; goto done_early; }
        PyObject *slots = ga(r.db, s_slots);
        if (slots == NULL) goto error;
        if (slots == Py_None) Py_DECREF(slots);
        else r.slots = slots;
    }
    {   /* hash field TTLs in this db (HEXPIRE & co.): HGET must skip expired fields and DEL/SET drop the key's
           TTLs (keyspace/db.py), so the Python path runs; no fast command creates one */
        PyObject *hx = ga(r.db, s_hexpires);
        if (hx == NULL) goto error;
        int some = !PyDict_CheckExact(hx) || PyDict_GET_SIZE(hx) != 0;
        Py_DECREF(hx);
        if (some) { status = 1; goto done_early; }
    }
    r.data = ga(r.db, s_data);
    r.expires = ga(r.db, s_expires);
    r.enc = ga(r.db, s_enc);
    if (r.data == NULL || r.expires == NULL || r.enc == NULL) goto error;
    if (Py_TYPE(r.data) != kt->type || !PyDict_CheckExact(r.expires) || !PyDict_CheckExact(r.enc)) {
        status = 1;
        goto done_early;
    }
    {
        int no_touch = attr_true(r.session, s_no_touch);   /* CLIENT NO-TOUCH: lookups leave access times */
        if (no_touch < 0) goto error;
        if (!no_touch) {
            PyObject *stamp = state_get(self, ST_LRU_STAMP);   /* the keyspace's lru_stamp, borrowed */
            if (stamp == NULL) goto error;
            if (stamp != Py_None) {
                unsigned long lru = PyLong_AsUnsignedLong(stamp);
                if (PyErr_Occurred() || lru > 0xFFFFFFFFul) {   /* (an access time is 32 bits: set_access says so) */
                    PyErr_Clear();
                    status = 1;
                    goto done_early;
                }
                r.stamp = 1;
                r.lru = (uint32_t)lru;
            }
        }
    }
    {
        PyObject *dur = self->durability;
        int no_tracker = attr_is_none(dur, s_tracker);
        int feeds = attr_true(dur, s_feeds);
        r.needs_touched = attr_true(dur, s_needs_touched);
        if (no_tracker < 0 || feeds < 0 || r.needs_touched < 0) goto error;
        r.journal = !no_tracker || feeds;
    }
    {   /* the monitors' thresholds, as they wrote them to the state */
        PyObject *t = state_get(self, ST_THRESHOLD_US), *q = t ? state_get(self, ST_REQUEST_LIMIT) : NULL;
        PyObject *p = q ? state_get(self, ST_REPLY_LIMIT) : NULL;
        if (p == NULL) goto error;
        r.threshold_us = PyLong_AsLongLong(t);
        r.request_limit = PyLong_AsLongLong(q);
        r.reply_limit = PyLong_AsLongLong(p);
        if (PyErr_Occurred()) goto error;
    }
    {
        PyObject *m = ga(self->pipeline, s_mark);
        if (m == NULL) goto error;
        start = PyFloat_AsDouble(m);
        Py_DECREF(m);
        if (start == -1.0 && PyErr_Occurred()) goto error;
    }
    end = start;
    Py_ssize_t prefetched = i;   /* commands before this one had their first key prefetched */
    for (; i < n; i++) {
        if (i == prefetched) prefetch_keys(&r, commands, i, &prefetched);
        PyObject *args = PyList_GET_ITEM(commands, i);
        if (!PyList_CheckExact(args) || PyList_GET_SIZE(args) == 0) break;
        PyObject *name = PyList_GET_ITEM(args, 0);
        if (!PyBytes_CheckExact(name)) break;
        int id = cmd_id(name);
        if (id < 0) break;
        PyObject *cmd = self->cmds[id];
        if (cmd == NULL) break;
        Py_ssize_t argc = PyList_GET_SIZE(args);
        Py_ssize_t j;
        for (j = 1; j < argc; j++)
            if (!PyBytes_CheckExact(PyList_GET_ITEM(args, j))) break;
        if (j < argc) break;
        /* arity (the table's: a wrong count is answered by the Python path) */
        int a = self->arity[id];
        if ((a > 0 && argc != a) || (a < 0 && argc < -a)) break;
        if (id == C_PING && argc > 2) break;
        if (r.gate != NULL || r.slot_codes != NULL) {
            if (id == C_PING || id == C_ECHO) {
                /* keyless: neither the router nor (checks_stale false) the gate looks at them */
            } else {
                Py_ssize_t step = id == C_MSET ? 2 : 1;
                Py_ssize_t last = (id == C_MGET || id == C_MSET || id == C_DEL || id == C_UNLINK || id == C_EXISTS)
                                  ? argc - step : 1;
                int ok = cluster_admits(&r, args, 1, step, last);
                if (ok < 0) goto error_counted;
                if (ok == 0) break;
            }
        }
        r.cur_args = args;
        r.reply_len = 0;
        int rc = run_one(&r, id, args, cmd);
        if (rc < 0) goto error_counted;
        if (rc == 0) break;
        if (r.reply_len > r.reply_limit) {   /* COMMANDLOG large-reply, as connection.process checks it */
            PyObject *nn = PyLong_FromSsize_t(r.reply_len);
            PyObject *res = nn ? PyObject_CallMethodObjArgs(self->monitors, s_record_reply, r.session, cmd, args,
                                                            nn, NULL) : NULL;
            Py_XDECREF(nn);
            if (res == NULL) goto error_counted;
            Py_DECREF(res);
        }
        end = monotonic_s();
        long long usec = (long long)((end - start) * 1e6);
        start = end;
        r.calls[id]++;
        r.usec[id] += usec;
        r.commands++;
        r.last_cmd = cmd;
        {   /* LATENCY HISTOGRAM: bucket usec.bit_length() */
            int bucket = 0;
            for (unsigned long long u = (unsigned long long)usec; u; u >>= 1) bucket++;
            if (r.lat_n && (r.lat_id != id || r.lat_bucket != bucket) && lat_flush(&r) < 0) goto error_counted;
            r.lat_id = id;
            r.lat_bucket = bucket;
            r.lat_n++;
        }
        if (usec >= r.threshold_us) {
            int skip = attr_true(cmd, s_skip_slowlog);
            if (skip < 0) goto error_counted;
            if (!skip) {
                PyObject *us = PyLong_FromLongLong(usec);
                PyObject *res = us ? PyObject_CallMethodObjArgs(self->monitors, s_record, r.session, cmd, args,
                                                                us, NULL) : NULL;
                Py_XDECREF(us);
                if (res == NULL) goto error_counted;
                Py_DECREF(res);
            }
        }
        if (args_bytes(args) + 15 * argc + 13 > r.request_limit) {
            PyObject *res = PyObject_CallMethodObjArgs(self->monitors, s_record_request, r.session, cmd, args,
                                                       NULL);
            if (res == NULL) goto error_counted;
            Py_DECREF(res);
        }
        if (r.size > OUTPUT_FLUSH_BYTES) {
            i++;
            status = 2;
            break;
        }
    }
    if (run_finish(&r, end) < 0) goto error;
    run_release(&r);
    *status_out = status;
    return i;
done_early:
    run_release(&r);
    *status_out = status;
    return i;
error_counted:
    {   /* keep what already ran counted, then raise */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        run_finish(&r, end);
        PyErr_Restore(et, ev, tb);
    }
error:
    run_release(&r);
    return -1;
}

/* run(conn, commands, start) -> (next, status): status 0 = commands[next] is for the Python path (or next is
 * the end), 1 = the session or server state needs the Python path for the rest of this batch, 2 = replies
 * passed connection.OUTPUT_FLUSH_BYTES after commands[next - 1]: the caller flushes (and parks if the client
 * is not reading). */
static PyObject *core_run(Core *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "run(conn, commands: list, start)");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(argv[2]);
    if (i < 0 && PyErr_Occurred()) return NULL;
    int status;
    Py_ssize_t next = run_batch(self, argv[0], argv[1], i, &status);
    if (next < 0) return NULL;
    return Py_BuildValue("(ni)", next, status);
}

static inline double realtime_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* Outbox.flush with Connection._write as its write, for a connection whose server has no client output limits
 * (otherwise, and for an outbox that is not exactly an Outbox, the Python flush runs): the bytes come from the
 * Outbox API's take_ready. 0 or -1. */
static int flush_conn(Core *self, PyObject *conn, PyObject *session, PyObject *server, PyObject *outbox) {
    if (!outbox_exact(outbox)) goto python;
    {
        PyObject *ready = ga(outbox, s_ready);     /* (read: nothing to write, nothing to do) */
        if (ready == NULL) return -1;
        Py_ssize_t n = PyObject_Size(ready);
        Py_DECREF(ready);
        if (n <= 0) return n < 0 ? -1 : 0;
    }
    /* Connection._write checks this client's output limits when some apply to it (the state's output_limits,
     * written where client-output-buffer-limit is set) */
    PyObject *lim = state_get(self, ST_OUTPUT_LIMITS);
    long long limits = lim != NULL ? PyLong_AsLongLong(lim) : -1;
    if (limits == -1 && PyErr_Occurred()) return -1;
    int t = limits >= OUTPUT_LIMITS_ALL;
    if (limits == OUTPUT_LIMITS_SPECIAL) {
        long long block = attr_ll(session, s_core_block);
        t = block == -1 && PyErr_Occurred() ? -1 : (block & CORE_BLOCK_SPECIAL) != 0;
    }
    if (t != 0) { if (t < 0) return -1; goto python; }
    t = attr_true(outbox, s_closed);
    if (t != 0) { if (t < 0) return -1; goto python; }
    PyObject *transport = ga(conn, s_transport);
    if (transport == NULL) return -1;
    if (transport == Py_None) { Py_DECREF(transport); goto python; }
    PyObject *closing = PyObject_CallMethodNoArgs(transport, s_is_closing);
    t = closing == NULL ? -1 : PyObject_IsTrue(closing);
    Py_XDECREF(closing);
    if (t != 0) { Py_DECREF(transport); if (t < 0) return -1; goto python; }
    PyObject *data = outbox_take_ready(outbox);
    if (data == NULL || data == Py_None) { Py_DECREF(transport); Py_XDECREF(data); return data == NULL ? -1 : 0; }
    PyObject *res = PyObject_CallMethodOneArg(transport, s_write, data);
    Py_DECREF(transport);
    Py_ssize_t n = PyBytes_Check(data) ? PyBytes_GET_SIZE(data) : 0;
    Py_DECREF(data);
    if (res == NULL) return -1;
    Py_DECREF(res);
    if (attr_add(session, s_net_out, n) < 0 || attr_add(server, s_net_output_bytes, n) < 0
        || attr_add(server, s_writes_processed, 1) < 0)
        return -1;
    return 0;
python:
    {
        PyObject *r2 = PyObject_CallMethodNoArgs(outbox, s_flush);
        if (r2 == NULL) return -1;
        Py_DECREF(r2);
    }
    return 0;
}

/* LoopStats.begin and ._end (server/loopstats.py, the reference) for a read: the Python pair costs two frames
 * and a perf_counter call per event-loop turn, as much as the whole of an unpipelined GET. Same fields, same
 * clock (time.perf_counter is CLOCK_MONOTONIC), same call_soon; an injected clock takes the Python pair. */
static int begin_turn(Core *self, PyObject *ls) {
    int t = attr_true(ls, s_open);
    if (t != 0) return t < 0 ? -1 : 0;
    PyObject *loop = ga(ls, s_loop);
    if (loop == NULL) return -1;
    if (loop == Py_None) { Py_DECREF(loop); return 0; }
    PyObject *pc = ga(ls, s_perf_counter);
    if (pc == NULL) { Py_DECREF(loop); return -1; }
    int own = pc == self->perf_counter && self->end_turn != NULL;
    Py_DECREF(pc);
    PyObject *res;
    if (!own) {
        res = PyObject_CallMethodNoArgs(ls, s_begin);
    } else {
        PyObject *started = PyFloat_FromDouble(monotonic_s());
        if (started == NULL || sa(ls, s_open, Py_True) < 0 || sa(ls, s_turn_started_s, started) < 0) {
            Py_XDECREF(started); Py_DECREF(loop); return -1;
        }
        Py_DECREF(started);
        res = PyObject_CallMethodObjArgs(loop, s_call_soon, self->end_turn, ls, NULL);
    }
    Py_DECREF(loop);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

static int float_attr_add(PyObject *o, PyObject *name, double delta, int as_max) {
    PyObject *v = ga(o, name);
    if (v == NULL) return -1;
    double x = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (x == -1.0 && PyErr_Occurred()) return -1;
    if (as_max && delta <= x) return 0;
    PyObject *nv = PyFloat_FromDouble(as_max ? delta : x + delta);
    if (nv == NULL) return -1;
    int rc = sa(o, name, nv);
    Py_DECREF(nv);
    return rc;
}

/* end_turn(loop_stats): LoopStats._end, scheduled by begin_turn */
static PyObject *core_end_turn(Core *self, PyObject *ls) {
    PyObject *v = ga(ls, s_turn_started_s);
    if (v == NULL) return NULL;
    double took = monotonic_s() - PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (PyErr_Occurred()) return NULL;
    if (sa(ls, s_open, Py_False) < 0 || attr_add(ls, s_cycles, 1) < 0
        || float_attr_add(ls, s_duration_s, took, 0) < 0 || float_attr_add(ls, s_longest_stall_s, took, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* received(conn, data): Connection.data_received with the compiled core (server/connection.py sets it per
 * connection). The steps of Connection.read, process and the outbox's flush for a read that starts at a request
 * boundary of an authenticated session with nothing parked: the counters, the turn's start (loopstats), the
 * compiled parse of the read's complete requests, the batch loop, one write. Whatever else the read holds (a
 * partial request, a non-canonical one) goes on in the parser's Python steps from where the compiled parse
 * stopped; a request the core does not run goes on in run_batch from there; any other state is read's from
 * the start, before anything was changed. One read then costs no Python frame at all. */
static PyObject *core_received(Core *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "received(conn, data)");
        return NULL;
    }
    PyObject *conn = argv[0], *data = argv[1];
    PyObject *session = NULL, *server = NULL, *parser = NULL, *commands = NULL, *res = NULL, *o = NULL;
    int t;
    if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) == 0 || PyBytes_AS_STRING(data)[0] != '*')
        goto python;
    if ((t = attr_true(conn, s_closing)) != 0) { if (t < 0) return NULL; goto python; }
    if ((t = attr_is_none(conn, s_backlog)) != 1) { if (t < 0) return NULL; goto python; }
    parser = ga(conn, s_parser);
    session = parser ? ga(conn, s_session) : NULL;
    if (session == NULL) goto error;
    /* RequestParser's contract: boundary_for is this session while the parser stands at a request boundary with
     * nothing pending and follows the session's authentication (which is true) */
    o = ga(parser, s_boundary_for);
    if (o == NULL) goto error;
    t = o == session;
    Py_CLEAR(o);
    if (!t) goto python_decref;
    {
        long long block = attr_ll(session, s_core_block);
        if (block == -1 && PyErr_Occurred()) goto error;
        if (block & CORE_BLOCK_UNAUTHENTICATED) goto python_decref;
    }
    server = ga(conn, s_server);
    if (server == NULL) goto error;
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    /* read's counters and the turn's start */
    if (attr_add(session, s_net_in, n) < 0 || attr_add(server, s_net_input_bytes, n) < 0
        || attr_add(server, s_reads_processed, 1) < 0)
        goto error;
    o = ga(server, s_loop_stats);
    if (o == NULL) goto error;
    t = begin_turn(self, o);
    Py_CLEAR(o);
    if (t < 0) goto error;
    long long max_bulk = attr_ll(parser, s_max_bulk_len);
    if (max_bulk == -1 && PyErr_Occurred()) goto error;
    commands = PyList_New(0);
    if (commands == NULL) goto error;
    Py_ssize_t pos = parse_into((const unsigned char *)PyBytes_AS_STRING(data), 0, n, commands, max_bulk);
    if (pos < 0) goto error;
    if (pos != n) {
        /* the parser's Python steps from pos, then process (nothing is parked: tested above) */
        PyObject *at = PyLong_FromSsize_t(pos);
        PyObject *fed = at ? PyObject_CallMethodObjArgs(parser, s_feed_rest, data, at, commands, NULL) : NULL;
        Py_XDECREF(at);
        if (fed == NULL) goto error;
        if (!PyTuple_Check(fed) || PyTuple_GET_SIZE(fed) != 2) {
            Py_DECREF(fed);
            PyErr_SetString(PyExc_TypeError, "feed_rest() must return (commands, error)");
            goto error;
        }
        res = PyObject_CallMethodObjArgs(conn, s_process, PyTuple_GET_ITEM(fed, 0), PyTuple_GET_ITEM(fed, 1), NULL);
        Py_DECREF(fed);
        if (res == NULL) goto error;
        goto done;
    }
    /* process: one clock read for the batch (idle times), the pipeline's mark, the batch loop */
    {
        PyObject *clock = ga(server, s_clock_ms);
        PyObject *wall = clock ? ga(server, s_wall_clock_ms) : NULL;
        if (wall == NULL) { Py_XDECREF(clock); goto error; }
        PyObject *now = clock == wall ? PyLong_FromLongLong((long long)realtime_ms()) : PyObject_CallNoArgs(clock);
        Py_DECREF(clock);
        Py_DECREF(wall);
        if (now == NULL) goto error;
        t = sa(session, s_last_interaction_ms, now) < 0 || sa(server, s_now_ms, now) < 0;
        Py_DECREF(now);
        if (t) goto error;
        PyObject *pc = state_get(self, ST_CLOCK);   /* the pipeline's clock, borrowed */
        if (pc == NULL) goto error;
        if (pc == self->perf_counter) {   /* time.perf_counter is CLOCK_MONOTONIC, as monotonic_s */
            PyObject *mark = PyFloat_FromDouble(monotonic_s());
            t = mark == NULL || sa(self->pipeline, s_mark, mark) < 0;
            Py_XDECREF(mark);
        } else {
            PyObject *m = PyObject_CallMethodNoArgs(self->pipeline, s_mark_now);   /* an injected clock's */
            t = m == NULL;
            Py_XDECREF(m);
        }
        if (t) goto error;
    }
    int status;
    Py_ssize_t next = run_batch(self, conn, commands, 0, &status);
    if (next < 0) goto error;
    if (next >= PyList_GET_SIZE(commands)) {
        PyObject *outbox = ga(conn, s_outbox);
        if (outbox == NULL) goto error;
        t = flush_conn(self, conn, session, server, outbox);
        Py_DECREF(outbox);
        if (t < 0) goto error;
    } else {
        PyObject *at = PyLong_FromSsize_t(next);
        if (at == NULL) goto error;
        res = PyObject_CallMethodObjArgs(conn, s_run_batch, commands, Py_None, at,
                                         status == 1 ? Py_None : (PyObject *)self, NULL);
        Py_DECREF(at);
        if (res == NULL) goto error;
    }
done:
    Py_XDECREF(res);
    Py_XDECREF(commands); Py_XDECREF(server); Py_XDECREF(session); Py_XDECREF(parser);
    Py_RETURN_NONE;
python_decref:
    Py_XDECREF(session); Py_XDECREF(parser);
python:
    return PyObject_CallMethodOneArg(conn, s_read, data);
error:
    Py_XDECREF(o);
    Py_XDECREF(commands); Py_XDECREF(server); Py_XDECREF(session); Py_XDECREF(parser);
    return NULL;
}

static PyObject *core_stats(Core *self, PyObject *unused) {
    return Py_BuildValue("{sLsL}", "fast_runs", self->fast_runs, "fast_commands", self->fast_commands);
}

static PyMethodDef core_methods[] = {
    {"run", (PyCFunction)(void (*)(void))core_run, METH_FASTCALL, "run(conn, commands, start) -> (next, status)"},
    {"end_turn", (PyCFunction)core_end_turn, METH_O, "end_turn(loop_stats): LoopStats._end"},
    {"received", (PyCFunction)(void (*)(void))core_received, METH_FASTCALL,
     "received(conn, data): Connection.data_received's steps for a read"},
    {"stats", (PyCFunction)core_stats, METH_NOARGS, "batches and commands run by the core"},
    {NULL}
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "durakv.fastpath._core.Core",
    .tp_basicsize = sizeof(Core),
    .tp_dealloc = (destructor)core_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled batch loop over one server's pipeline, keyspace and durability.",
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_init = (initproc)core_init,
    .tp_new = PyType_GenericNew,
};

/* presized_dict(n): an empty dict with room for n keys. CPython grows a dict by rebuilding its whole table at
 * once (~30 ms at 700,000 keys), where Valkey rehashes incrementally; a full load that knows its key count
 * (an RDB's RESIZEDB) makes the keyspace's dicts that large first, so no insert of the load rebuilds one. */
static PyObject *fast_presized_dict(PyObject *mod, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) n = 0;
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    return PyDict_New();
#endif
}

static PyMethodDef module_methods[] = {
    {"presized_dict", (PyCFunction)fast_presized_dict, METH_O, "presized_dict(n) -> an empty dict with room for n"},
    {"outbox_methods", (PyCFunction)fast_outbox_methods, METH_VARARGS,
     "outbox_methods(Outbox, Deferred) -> {name: method}: the Outbox API's hold, emit, take_ready and release in "
     "C, for the class; a held Deferred is released as Outbox.release does"},
    {"parse", (PyCFunction)(void (*)(void))fast_parse, METH_FASTCALL,
     "parse(buf, pos, end, commands, max_bulk_len) -> pos"},
    {"encode_effects", (PyCFunction)fast_encode_effects, METH_O, "encode_effects(effects) -> bytes"},
    {"effects_size", (PyCFunction)(void (*)(void))fast_effects_size, METH_FASTCALL,
     "effects_size(effects, db) -> (bytes, db)"},
    {NULL}
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_core", "durakv's compiled core", -1,
                                       module_methods};

/* Every Python name the core touches, interned once; the module exports them as NAMES, and
 * tests/server/test_fastpath_contract.py checks that each exists where the core reads it (a rename breaks that test). */
#define INTERN(var, text) do { var = PyUnicode_InternFromString(text); \
                               if (var == NULL || PyList_Append(names, var) < 0) return NULL; } while (0)

PyMODINIT_FUNC PyInit__core(void) {
    PyObject *names = PyList_New(0);   /* (a reference kept for the module's life: it becomes NAMES) */
    if (names == NULL) return NULL;
    INTERN(s_session, "session"); INTERN(s_outbox, "outbox"); INTERN(s_closing, "closing");
    for (int i = 0; i < NSTATE; i++) INTERN(s_state[i], STATE_NAMES[i]);
    INTERN(s_perf_counter, "perf_counter"); INTERN(s_mark, "mark_s"); INTERN(s_mark_now, "mark");
    INTERN(s_count_error, "count_error"); INTERN(s_set_expire, "set_expire");
    INTERN(s_entry_cost, "ENTRY_COST"); INTERN(s_write_tracker, "WriteTracker"); INTERN(s_text, "text");
    INTERN(s_fullname, "fullname");
    INTERN(s_tracker, "tracker"); INTERN(s_feeds, "feeds");
    INTERN(s_core_block, "core_block"); INTERN(s_resp, "resp");
    INTERN(s_db_id, "db_id");
    INTERN(s_data, "data"); INTERN(s_expires, "expires"); INTERN(s_hexpires, "hexpires");
    INTERN(s_enc, "enc");
    INTERN(s_slots, "slots");
    INTERN(s_ready, "ready");
    INTERN(s_held, "held"); INTERN(s_calls, "calls"); INTERN(s_usec, "usec");
    INTERN(s_latency, "latency"); INTERN(s_skip_slowlog, "skip_slowlog"); INTERN(s_record, "record");
    INTERN(s_record_request, "record_request"); INTERN(s_record_reply, "record_reply");
    INTERN(s_total_commands, "total_commands"); INTERN(s_commands_processed, "commands_processed");
    INTERN(s_last_cmd, "last_cmd"); INTERN(s_hits, "hits"); INTERN(s_misses, "misses");
    INTERN(s_used_bytes, "used_bytes"); INTERN(s_changes, "changes"); INTERN(s_submit, "submit");
    INTERN(s_hold, "hold"); INTERN(s_emit, "emit"); INTERN(s_read_ticket, "read_ticket");
    INTERN(s_held_bytes, "held_bytes"); INTERN(s_carried_bytes, "carried_bytes");
    INTERN(s_carried_by_ticket, "carried_by_ticket");
    INTERN(s_limit_bytes, "limit_bytes"); INTERN(s_over_limit, "over_limit"); INTERN(s_durability, "durability");
    INTERN(s_waiting, "waiting"); INTERN(s_set_over, "set_over");
    INTERN(s_encode, "encode"); INTERN(s_on_drained, "on_drained"); INTERN(s_done, "done");
    INTERN(s_index, "index"); INTERN(s_reply, "reply");
    INTERN(s_batch_index, "batch_index"); INTERN(s_close_at, "close_at");
    INTERN(s_promised_index, "promised_index"); INTERN(s_mode, "mode");
    INTERN(s_ack_before_commit, "ack_before_commit");
    INTERN(s_journal, "journal"); INTERN(s_max_entry_bytes, "max_entry_bytes"); INTERN(s_batch_db, "batch_db");
    INTERN(s_batch_bytes, "batch_bytes"); INTERN(s_batch_effects, "batch_effects"); INTERN(s_batch_keys, "batch_keys");
    INTERN(s_uncommitted, "uncommitted");
    s_sync = PyUnicode_InternFromString("sync");    /* (a value the tracker's mode is compared with, not a name) */
    if (s_sync == NULL) return NULL;
    INTERN(s_close_batch, "close_batch");
    INTERN(s_open_batch, "open_batch");
    INTERN(s_assigned, "assigned"); INTERN(s_committed, "committed"); INTERN(s_pending, "pending");
    INTERN(s_last_write_index, "last_write_index");
    INTERN(s_clock_ms, "clock_ms");     INTERN(s_needs_touched, "needs_touched");
    INTERN(s_ctx, "ctx"); INTERN(s_db, "db"); INTERN(s_id, "id"); INTERN(s_handler, "handler");
    INTERN(s_arity, "arity");
    INTERN(s_fast_serving, "fast_serving");
    INTERN(s_add, "add"); INTERN(s_discard, "discard");
    init_crc16(); INTERN(s_failed_calls, "failed_calls");
    INTERN(s_no_touch, "no_touch");
    INTERN(s_effects, "effects"); INTERN(s_touched, "touched"); INTERN(s_touched_exact, "touched_exact");
        INTERN(s_server, "server"); INTERN(s_parser, "parser"); INTERN(s_backlog, "backlog");
    INTERN(s_transport, "transport"); INTERN(s_boundary_for, "boundary_for");
    INTERN(s_max_bulk_len, "max_bulk_len"); INTERN(s_net_in, "net_in"); INTERN(s_net_out, "net_out");
    INTERN(s_net_input_bytes, "net_input_bytes"); INTERN(s_reads_processed, "reads_processed");
    INTERN(s_net_output_bytes, "net_output_bytes"); INTERN(s_writes_processed, "writes_processed");
    INTERN(s_loop_stats, "loop_stats"); INTERN(s_open, "open"); INTERN(s_begin, "begin");
    INTERN(s_wall_clock_ms, "wall_clock_ms"); INTERN(s_now_ms, "now_ms");
    INTERN(s_last_interaction_ms, "last_interaction_ms");
    INTERN(s_closed, "closed"); INTERN(s_read, "read"); INTERN(s_process, "process");
    INTERN(s_run_batch, "run_batch"); INTERN(s_is_closing, "is_closing"); INTERN(s_write, "write");
    INTERN(s_feed_rest, "feed_rest"); INTERN(s_flush, "flush");
    INTERN(s_loop, "loop"); INTERN(s_turn_started_s, "turn_started_s"); INTERN(s_call_soon, "call_soon");
    INTERN(s_cycles, "cycles"); INTERN(s_duration_s, "duration_s"); INTERN(s_longest_stall_s, "longest_stall_s");
    one = PyLong_FromLong(1);
    if (one == NULL) return NULL;
    b_SET = PyBytes_FromString("SET"); b_PXAT = PyBytes_FromString("PXAT");
    b_KEEPTTL = PyBytes_FromString("KEEPTTL"); b_DEL = PyBytes_FromString("DEL");
    if (!b_SET || !b_PXAT || !b_KEEPTTL || !b_DEL) return NULL;
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *ktmod = PyImport_ImportModule("durakv.keyspace._keytable");   /* PyCapsule_Import walks attributes */
    Py_XDECREF(ktmod);
    kt = ktmod != NULL ? PyCapsule_Import(KEYTABLE_CAPSULE, 0) : NULL;
    if (kt == NULL) {   /* the core runs on the compiled key table only: without it, the pure-Python path */
        PyErr_Clear();
        PyErr_SetString(PyExc_ImportError, "durakv.keyspace._keytable was not built: the compiled core needs it");
        return NULL;
    }
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) return NULL;
    PyObject *impl = PyTuple_New(NCMD);
    if (impl == NULL) return NULL;
    for (int i = 0; i < NCMD; i++) {
        PyObject *n = PyUnicode_FromString(CMD_NAMES[i]);
        if (n == NULL) { Py_DECREF(impl); return NULL; }
        PyTuple_SET_ITEM(impl, i, n);
    }
    if (PyModule_AddObject(m, "IMPLEMENTED", impl) < 0) return NULL;
    PyObject *exported = PyList_AsTuple(names);
    Py_DECREF(names);
    if (exported == NULL || PyModule_AddObject(m, "NAMES", exported) < 0) return NULL;
    return m;
}
