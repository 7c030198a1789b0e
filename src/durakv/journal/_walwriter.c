/* The local journal's writer thread in C (journal/local.py's _Writer, _write_items and _flush are the reference).

A LocalJournal with the default SysIO hands each batch that stays in the current segment to Writer.submit():
the payloads are copied into one buffer (with the GIL, on the loop), and a pthread that never takes the GIL
stamps each record's time, builds its header exactly as journal/walformat.py's encode_header does (CRC32C in
C: SSE4.2 when the CPU has it, else a table), pwrites the records, pwrites the state slot (walformat's
encode_slot), fsyncs, and on a failure cuts the segment back to where the batch began, as _flush does. It then
writes to an eventfd the event loop watches (add_reader); the loop's callback takes the finished batches'
outcomes with results(), in order. What the Python writer did per batch with the GIL (the queue, the join, two
crc32c calls that each release and retake the GIL, call_soon_threadsafe) is gone from the loop's thread.

Batches that rotate a segment, and every batch of a journal whose io is a test's SysIO subclass, keep the
Python writer: the C thread only ever pwrites, fsyncs and ftruncates an fd the journal owns.

The bytes on disk are identical to the Python writer's: tests/unit/test_walwriter.py compares encode_header,
encode_slot and crc32c here with walformat's for random inputs.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

/* ---- CRC32C (Castagnoli), the crc32c package's function: crc32c(data, value) continues from value ---- */

static uint32_t crc_table[8][256];

static void crc_init_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
}

/* slicing-by-8: the fallback where the CPU has no crc32 instruction */
static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;   /* little-endian only: the build is for x86-64 / aarch64 Linux */
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff] ^
              crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

static uint32_t (*crc32c_fn)(uint32_t, const unsigned char *, size_t) = crc_sw;

/* ---- the record header and the state slot (journal/walformat.py) ---- */

#define MAGIC 0xD8
#define HEADER_SIZE 33
#define SLOT_SIZE 48     /* _SLOT (44 bytes) + its crc */
#define SLOT_BODY 44

static inline void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static inline void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* header for the `len` payload bytes that follow it at h + HEADER_SIZE */
static void fill_header(unsigned char *h, uint64_t index, uint64_t epoch, uint64_t time_ms, uint32_t len) {
    h[0] = MAGIC;
    put_u32(h + 1, len);
    put_u64(h + 9, index);
    put_u64(h + 17, epoch);
    put_u64(h + 25, time_ms);
    uint32_t crc = crc32c_fn(0, h + 9, 24);
    crc = crc32c_fn(crc, h + HEADER_SIZE, len);
    put_u32(h + 5, crc);
}

static void fill_slot(unsigned char *s, uint64_t seq, uint64_t end, uint64_t batch_start, uint64_t last_index,
                      int sealed, int fsync) {
    memcpy(s, "DKVS", 4);
    put_u32(s + 4, 0);
    put_u64(s + 8, seq);
    put_u64(s + 16, end);
    put_u64(s + 24, batch_start);
    put_u64(s + 32, last_index);
    s[40] = (unsigned char)sealed;
    s[41] = (unsigned char)fsync;
    s[42] = s[43] = 0;
    put_u32(s + SLOT_BODY, crc32c_fn(0, s, SLOT_BODY));
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the writer ---- */

typedef struct {
    uint64_t index, epoch;
    size_t off;        /* of the record's header in the batch's buffer */
    uint32_t len;
} Rec;

typedef struct Batch {
    struct Batch *next;
    int fd;
    int fsync;
    uint64_t start, seq, last_index;
    unsigned char *buf;
    size_t size;
    Rec *recs;
    Py_ssize_t count;
    /* outcome, filled by the thread */
    int err;          /* errno of the failure, 0 when the batch is durable */
    int written;      /* 1 once the records' pwrite completed (the Python writer's write_count) */
    int cut_err;      /* errno of the ftruncate that failed after err (the journal is then broken) */
} Batch;

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    int started;
    int stopping;
    int efd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Batch *todo_head, *todo_tail;       /* submitted, not yet written */
    Batch *done_head, *done_tail;       /* written (or failed), not yet taken by results() */
    unsigned long long batches;         /* taken by results(): the batches this writer wrote */
} Writer;

static void batch_free(Batch *b) {
    free(b->buf);
    free(b->recs);
    free(b);
}

static int write_all(int fd, const unsigned char *p, size_t n, uint64_t off) {
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;   /* a regular file never does this; never spin on it */
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* _flush's body, without the GIL */
static void write_batch(Batch *b) {
    uint64_t t = now_ms();
    for (Py_ssize_t i = 0; i < b->count; i++) {
        Rec *r = &b->recs[i];
        fill_header(b->buf + r->off, r->index, r->epoch, t, r->len);
    }
    int err = write_all(b->fd, b->buf, b->size, b->start);
    if (!err) {
        b->written = 1;
        unsigned char slot[SLOT_SIZE];
        fill_slot(slot, b->seq, b->start + b->size, b->start, b->last_index, 0, b->fsync);
        /* the slot's offset: walformat.slot_offset, SLOT_OFFSETS[seq % 2] */
        if (pwrite(b->fd, slot, SLOT_SIZE, (b->seq % 2) ? 128 : 64) < 0)
            err = errno;
        else if (b->fsync && fsync(b->fd) < 0)
            err = errno;
    }
    if (err) {
        b->err = err;
        if (ftruncate(b->fd, (off_t)b->start) < 0)
            b->cut_err = errno;
    }
}

static void *writer_main(void *arg) {
    Writer *w = (Writer *)arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->todo_head && !w->stopping)
            pthread_cond_wait(&w->cv, &w->mu);
        Batch *b = w->todo_head;
        if (!b)
            break;    /* stopping, and every batch submitted before stop() is written */
        w->todo_head = b->next;
        if (!w->todo_head) w->todo_tail = NULL;
        pthread_mutex_unlock(&w->mu);

        write_batch(b);
        free(b->buf);      /* the payloads' copy: not held until the loop takes the outcome */
        b->buf = NULL;
        b->next = NULL;

        pthread_mutex_lock(&w->mu);
        if (w->done_tail) w->done_tail->next = b; else w->done_head = b;
        w->done_tail = b;
        pthread_mutex_unlock(&w->mu);
        uint64_t one = 1;
        /* the eventfd's counter only grows; a failed write (it cannot overflow here) loses no outcome:
           results() takes every finished batch whenever it runs */
        ssize_t ignored = write(w->efd, &one, sizeof one);
        (void)ignored;
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int Writer_init(Writer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Writer", kwlist))
        return -1;
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "Writer already initialised");
        return -1;
    }
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    int rc = pthread_create(&self->thread, NULL, writer_main, self);
    if (rc) {
        close(self->efd);
        self->efd = -1;
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->started = 1;
    return 0;
}

static void writer_stop(Writer *self) {
    if (!self->started) return;
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->started = 0;
}

static void Writer_dealloc(Writer *self) {
    writer_stop(self);
    for (Batch *b = self->todo_head, *n; b; b = n) { n = b->next; batch_free(b); }
    for (Batch *b = self->done_head, *n; b; b = n) { n = b->next; batch_free(b); }
    self->todo_head = self->todo_tail = self->done_head = self->done_tail = NULL;
    if (self->efd >= 0) close(self->efd);
    self->efd = -1;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Writer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Writer *self = (Writer *)type->tp_alloc(type, 0);
    if (self) self->efd = -1;
    return (PyObject *)self;
}

PyDoc_STRVAR(submit_doc,
"submit(items, fd, start, seg_size, limit, seq, last_index_base, fsync) -> bool\n\n"
"Queues a batch of LocalJournal items ((kind, index, payload, epoch, fut)) for the C thread: the records go at\n"
"offset `start` of fd, the state slot gets `seq` and last index last_index_base + count. False, and nothing\n"
"queued, when the batch holds a rotation or a record that would cross `limit` (the segment size), exactly where\n"
"_write_items would rotate: the Python writer takes such a batch.");

/* An argument that must be an int >= 0 (PyLong_AsUnsignedLongLong's own error otherwise). */
static int arg_u64(PyObject *o, unsigned long long *out) {
    if (!PyLong_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "submit: the offsets, sizes and indices must be int");
        return -1;
    }
    *out = PyLong_AsUnsignedLongLong(o);
    return (*out == (unsigned long long)-1 && PyErr_Occurred()) ? -1 : 0;
}

/* METH_FASTCALL, the arguments converted one by one: PyArg_ParseTuple's format walk was ~1.5k instructions of
   every batch (callgrind), more than the rest of submit() */
static PyObject *Writer_submit(Writer *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long fd_arg, start, seg_size, limit, seq, last_base;
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "submit() takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *items = args[0];
    if (!PyList_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "submit: items must be a list");
        return NULL;
    }
    if (arg_u64(args[1], &fd_arg) < 0 || arg_u64(args[2], &start) < 0 || arg_u64(args[3], &seg_size) < 0 ||
        arg_u64(args[4], &limit) < 0 || arg_u64(args[5], &seq) < 0 || arg_u64(args[6], &last_base) < 0)
        return NULL;
    if (fd_arg > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "submit: not a file descriptor");
        return NULL;
    }
    int fd = (int)fd_arg;
    int fsync_flag = PyObject_IsTrue(args[7]);
    if (fsync_flag < 0)
        return NULL;
    if (!self->started) {
        PyErr_SetString(PyExc_RuntimeError, "the journal writer is stopped");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (n == 0)
        Py_RETURN_FALSE;
    /* the sizes first, and _write_items' rotation rule: a record that would make a non-empty segment
       exceed the limit starts a new segment (the Python writer's job) */
    size_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) < 4 || !PyLong_Check(PyTuple_GET_ITEM(it, 0)) ||
            PyLong_AsLong(PyTuple_GET_ITEM(it, 0)) != 0)
            Py_RETURN_FALSE;     /* a rotation (kind 1) */
        PyObject *payload = PyTuple_GET_ITEM(it, 2);
        if (!PyBytes_Check(payload) || !PyLong_Check(PyTuple_GET_ITEM(it, 3)))
            Py_RETURN_FALSE;     /* not an item of this writer's shape: the reference writer takes it */
        size_t rec = HEADER_SIZE + (size_t)PyBytes_GET_SIZE(payload);
        if (seg_size + size > 0 && seg_size + size + rec > limit)
            Py_RETURN_FALSE;
        if ((size_t)PyBytes_GET_SIZE(payload) > 0xffffffffu) {
            PyErr_SetString(PyExc_ValueError, "journal record payload larger than 4 GiB");
            return NULL;
        }
        size += rec;
    }
    Batch *b = calloc(1, sizeof *b);
    if (!b) return PyErr_NoMemory();
    b->buf = malloc(size ? size : 1);
    b->recs = malloc(sizeof(Rec) * (size_t)n);
    if (!b->buf || !b->recs) {
        batch_free(b);
        return PyErr_NoMemory();
    }
    size_t off = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyList_GET_ITEM(items, i);
        PyObject *payload = PyTuple_GET_ITEM(it, 2);
        Rec *r = &b->recs[i];
        r->index = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(it, 1));
        r->epoch = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(it, 3));
        if (PyErr_Occurred()) {
            batch_free(b);
            return NULL;
        }
        r->len = (uint32_t)PyBytes_GET_SIZE(payload);
        r->off = off;
        memcpy(b->buf + off + HEADER_SIZE, PyBytes_AS_STRING(payload), r->len);
        off += HEADER_SIZE + r->len;
    }
    b->fd = fd;
    b->fsync = fsync_flag;
    b->start = start;
    b->seq = seq;
    b->last_index = last_base + (uint64_t)n;
    b->size = size;
    b->count = n;
    pthread_mutex_lock(&self->mu);
    if (self->todo_tail) self->todo_tail->next = b; else self->todo_head = b;
    self->todo_tail = b;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(results_doc,
"results() -> [(err, written, cut_err, size, count)]\n\n"
"The outcomes of the batches finished since the last call, in submission order (and clears the eventfd):\n"
"err is 0 when the batch is written, its slot written and fsynced, else the errno that stopped it (the\n"
"segment was then cut back to the batch's start); written is 1 once its records' pwrite completed;\n"
"cut_err is the errno of a failed cut (0: none); size the batch's record bytes, count its records.");

static PyObject *Writer_results(Writer *self, PyObject *unused) {
    uint64_t counter;
    ssize_t ignored = read(self->efd, &counter, sizeof counter);   /* EAGAIN when nothing was signalled */
    (void)ignored;
    pthread_mutex_lock(&self->mu);
    Batch *b = self->done_head;
    self->done_head = self->done_tail = NULL;
    pthread_mutex_unlock(&self->mu);
    PyObject *out = PyList_New(0);
    if (!out) goto fail;
    while (b) {
        Batch *next = b->next;
        /* not Py_BuildValue: its format walk was ~1.3k instructions of every batch (callgrind) */
        PyObject *t = PyTuple_New(5);
        if (t) {
            PyObject *v[5] = {PyLong_FromLong(b->err), PyLong_FromLong(b->written), PyLong_FromLong(b->cut_err),
                              PyLong_FromSize_t(b->size), PyLong_FromSsize_t(b->count)};
            for (int i = 0; i < 5; i++) {
                if (!v[i]) Py_CLEAR(t);
                if (t) PyTuple_SET_ITEM(t, i, v[i]);
                else Py_XDECREF(v[i]);
            }
        }
        if (!t || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_CLEAR(out);
            goto fail;
        }
        Py_DECREF(t);
        self->batches++;
        batch_free(b);
        b = next;
    }
    return out;
fail:
    while (b) { Batch *next = b->next; batch_free(b); b = next; }
    return NULL;
}

static PyObject *Writer_stop(Writer *self, PyObject *unused) {
    writer_stop(self);
    Py_RETURN_NONE;
}

static PyObject *Writer_get_fd(Writer *self, void *closure) {
    return PyLong_FromLong(self->efd);
}

static PyObject *Writer_get_batches(Writer *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->batches);
}

static PyMethodDef Writer_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))Writer_submit, METH_FASTCALL, submit_doc},
    {"results", (PyCFunction)Writer_results, METH_NOARGS, results_doc},
    {"stop", (PyCFunction)Writer_stop, METH_NOARGS,
     "Returns once every batch submitted before it is written (its outcome stays for results())."},
    {NULL}
};

static PyGetSetDef Writer_getset[] = {
    {"fd", (getter)Writer_get_fd, NULL, "the eventfd the loop watches: readable once a batch has finished", NULL},
    {"batches", (getter)Writer_get_batches, NULL, "batches whose outcome results() returned", NULL},
    {NULL}
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "durakv.journal._walwriter.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The journal's writer thread (one a LocalJournal).",
    .tp_new = Writer_new,
    .tp_init = (initproc)Writer_init,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
    .tp_getset = Writer_getset,
};

/* ---- module functions: walformat's encoders, for the tests that compare the two ---- */

static PyObject *py_crc32c(PyObject *mod, PyObject *args) {
    Py_buffer buf;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32c", &buf, &value))
        return NULL;
    uint32_t crc = crc32c_fn(value, buf.buf, (size_t)buf.len);
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(crc);
}

/* the table's CRC whatever the CPU: the tests compare both implementations with the crc32c package */
static PyObject *py_crc32c_table(PyObject *mod, PyObject *args) {
    Py_buffer buf;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32c_table", &buf, &value))
        return NULL;
    uint32_t crc = crc_sw(value, buf.buf, (size_t)buf.len);
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_encode_header(PyObject *mod, PyObject *args) {
    unsigned long long index, epoch, time_ms;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "KKy*K:encode_header", &index, &epoch, &buf, &time_ms))
        return NULL;
    if ((size_t)buf.len > 0xffffffffu) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "journal record payload larger than 4 GiB");
        return NULL;
    }
    /* fill_header reads the payload right after the header, as the writer's buffer holds it */
    unsigned char *rec = malloc(HEADER_SIZE + (size_t)buf.len);
    if (!rec) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    memcpy(rec + HEADER_SIZE, buf.buf, (size_t)buf.len);
    fill_header(rec, index, epoch, time_ms, (uint32_t)buf.len);
    PyBuffer_Release(&buf);
    PyObject *out = PyBytes_FromStringAndSize((char *)rec, HEADER_SIZE);
    free(rec);
    return out;
}

static PyObject *py_encode_slot(PyObject *mod, PyObject *args) {
    unsigned long long seq, end, batch_start, last_index;
    int sealed, fsync_flag;
    if (!PyArg_ParseTuple(args, "(KKKKii):encode_slot", &seq, &end, &batch_start, &last_index, &sealed, &fsync_flag))
        return NULL;
    unsigned char slot[SLOT_SIZE];
    fill_slot(slot, seq, end, batch_start, last_index, sealed, fsync_flag);
    return PyBytes_FromStringAndSize((char *)slot, SLOT_SIZE);
}

static PyMethodDef module_methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0): the crc32c package's function"},
    {"crc32c_table", py_crc32c_table, METH_VARARGS, "crc32c(), always by the table (for the tests)"},
    {"encode_header", py_encode_header, METH_VARARGS,
     "encode_header(index, epoch, payload, time_ms): walformat.encode_header's 33 bytes"},
    {"encode_slot", py_encode_slot, METH_VARARGS, "encode_slot(state): walformat.encode_slot's 48 bytes"},
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "durakv.journal._walwriter",
    "The local journal's writer thread in C (see journal/_walwriter.c).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__walwriter(void) {
    crc_init_table();
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        crc32c_fn = crc_hw;
#endif
    if (PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *hw = PyUnicode_FromString(crc32c_fn == crc_sw ? "table" : "sse4.2");
    if (!hw || PyModule_AddObject(m, "CRC32C", hw) < 0) {
        Py_XDECREF(hw);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
