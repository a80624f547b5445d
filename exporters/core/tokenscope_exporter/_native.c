/* tokenscope_exporter._native: what the exporter cannot do fast enough in Python, optional.
 *
 * `pack_rows(rows, width, code)`: rows of `width` numbers (a list or tuple of lists or tuples),
 * packed little-endian as `struct.pack(f"<{width}{code}", *row)` would pack each, joined; `code`
 * "I" (uint32) or "f" (float32). Returns None for anything it does not pack exactly as `struct`
 * does (a row of another width, a value of another type, one out of range, a NaN), and the
 * caller packs those rows in Python (`wire.packed_rows`), so the bytes never depend on whether
 * this module was built.
 *
 * `varint(n)`: n as protobuf's varint, or None outside int64 / uint64 (see below).
 *
 * Why C: an engine keeps a request's top-k candidates as a Python list per token, allocated step
 * by step across the batch; when the request finishes its rows lie all over the heap. One
 * `struct` call per row (a tuple, a bytes object and a join each) cost about 0.5 us a row there;
 * this reads the same objects with no allocation but the result, about 0.1 us a row.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* One value into 4 bytes at `out`; 0 when it is not one `struct` would pack the same way. */
static int pack_u32(PyObject *v, char *out) {
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || x < 0 || x > 0xFFFFFFFFLL)
        return 0;
    uint32_t u = (uint32_t)x;
    memcpy(out, &u, 4);
    return 1;
}

static int pack_f32(PyObject *v, char *out) {
    if (!PyFloat_CheckExact(v))
        return 0;
    double x = PyFloat_AS_DOUBLE(v);
    float y = (float)x;
    /* struct raises OverflowError for a finite double beyond float32; NaN payloads are left to
       it too (Python versions differ in how they keep them). */
    if (isnan(x) || (isinf(y) && !isinf(x)))
        return 0;
    memcpy(out, &y, 4);
    return 1;
}

#define PREFETCH_ROWS 16

static PyObject *pack_rows(PyObject *self, PyObject *args) {
    PyObject *rows;
    Py_ssize_t width;
    const char *code;
    if (!PyArg_ParseTuple(args, "Ons", &rows, &width, &code))
        return NULL;
    int (*pack)(PyObject *, char *);
    if (strcmp(code, "I") == 0)
        pack = pack_u32;
    else if (strcmp(code, "f") == 0)
        pack = pack_f32;
    else
        Py_RETURN_NONE;
    if (width < 0 || !(PyList_CheckExact(rows) || PyTuple_CheckExact(rows)))
        Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rows);
    if (width && n > PY_SSIZE_T_MAX / 4 / width)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * width * 4);
    if (out == NULL)
        return NULL;
    char *p = PyBytes_AS_STRING(out);
    PyObject **items = PySequence_Fast_ITEMS(rows);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* The rows are out of cache and each is two reads apart from its values (the row, then
           its item array): the next rows are fetched ahead, their objects 16 rows ahead and
           their item arrays 8 (whose objects were fetched 8 rows ago). */
        if (i + PREFETCH_ROWS < n)
            __builtin_prefetch(items[i + PREFETCH_ROWS]);
        if (i + PREFETCH_ROWS / 2 < n) {
            PyObject *ahead = items[i + PREFETCH_ROWS / 2];
            if (PyList_CheckExact(ahead))
                __builtin_prefetch(((PyListObject *)ahead)->ob_item);
        }
        PyObject *row = items[i];
        if (!(PyList_CheckExact(row) || PyTuple_CheckExact(row)) || PySequence_Fast_GET_SIZE(row) != width)
            goto other;
        PyObject **values = PySequence_Fast_ITEMS(row);
        for (Py_ssize_t j = 0; j < width; j++, p += 4) {
            if (j + PREFETCH_ROWS < width) /* one long row: a column (token ids, logprobs) */
                __builtin_prefetch(values[j + PREFETCH_ROWS]);
            if (!pack(values[j], p))
                goto other;
        }
    }
    return out;
other:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

/* varint(n): n as protobuf's varint (unsigned LEB128; a negative int64 as its two's complement),
   or None when n is outside int64 / uint64 (the caller encodes it in Python). A step's iteration
   is a dozen varints of 8-9 bytes (ids and nanosecond times): a Python loop a byte each. */
static PyObject *varint(PyObject *self, PyObject *n) {
    if (!PyLong_Check(n))
        Py_RETURN_NONE;
    unsigned long long u = PyLong_AsUnsignedLongLong(n);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        long long x = PyLong_AsLongLong(n);
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        u = (unsigned long long)x;
    }
    unsigned char buf[10];
    int len = 0;
    while (u >= 0x80) {
        buf[len++] = (unsigned char)(u | 0x80);
        u >>= 7;
    }
    buf[len++] = (unsigned char)u;
    return PyBytes_FromStringAndSize((const char *)buf, len);
}

static PyMethodDef methods[] = {
    {"varint", varint, METH_O, "n as a protobuf varint, or None outside int64 / uint64."},
    {"pack_rows", pack_rows, METH_VARARGS, "Rows of numbers packed as struct would, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tokenscope_exporter._native", "The exporter's optional native parts.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
