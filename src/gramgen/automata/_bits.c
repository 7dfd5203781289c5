/* Native bitmask kernels: the packed-mask chores of a mask computation, in C.
 *
 * A mask is uint32 words, bit i of word w for token 32 * w + i. Finding a mask's set bits
 * and setting the bits of a list of tokens are a few numpy calls each
 * (gramgen.automata.bitmask keeps those as the reference and the fallback), but on a
 * 128k vocabulary they cost a few hundred microseconds a mask; a scan of the words with
 * count-trailing-zeros costs a few tens.
 *
 * Built as an optional extension (setup.py); no numpy headers: arrays arrive through the
 * buffer protocol (results leave as bytes, which numpy.frombuffer reads), and every index
 * is checked before it is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int
get_words(PyObject *o, Py_buffer *view, int writable, const char *name)
{
    if (PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != 4 || view->len % 4) {
        PyErr_Format(PyExc_ValueError, "%s: expected uint32 words", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* an int64 or int32 index array; *wide says which */
static int
get_indices(PyObject *o, Py_buffer *view, int *wide, const char *name)
{
    if (PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (view->itemsize == 8 && *f && strchr("qlQL", *f)) {
        *wide = 1;
    } else if (view->itemsize == 4 && *f && strchr("iIl", *f)) {
        *wide = 0;
    } else {
        PyErr_Format(PyExc_ValueError, "%s: expected int32 or int64 indices", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* the set bits of x, inline (the builtin is a libgcc call without -mpopcnt, which the
 * portable build does not assume) */
static inline int
popcount32(uint32_t x)
{
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0Fu;
    return (int)((x * 0x01010101u) >> 24);
}

static inline int64_t
index_at(const Py_buffer *v, int wide, Py_ssize_t i)
{
    return wide ? ((const int64_t *)v->buf)[i] : ((const int32_t *)v->buf)[i];
}

/* The set bits of w[0..ceil(limit / 32)) below limit, ascending, as bytes of int64; with
 * `known`, only those whose token map[bit] is not set in known (n_known bits) */
static PyObject *
scan_bits(const uint32_t *w, Py_ssize_t limit, const Py_buffer *map, int wide, const uint32_t *known,
          Py_ssize_t n_known)
{
    Py_ssize_t last = (limit + 31) / 32, count = 0;
    for (Py_ssize_t i = 0; i < last; i++)
        if (w[i])
            count += popcount32(w[i]);
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * 8);
    if (!out)
        return NULL;
    int64_t *dst = (int64_t *)PyBytes_AS_STRING(out);
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < last; i++) {
        uint32_t x = w[i];
        while (x) {
            int64_t r = 32 * (int64_t)i + __builtin_ctz(x);
            x &= x - 1;
            if (r >= limit)
                break;
            if (known) {
                int64_t id = index_at(map, wide, r);
                if (id < 0 || id >= n_known) {
                    PyErr_SetString(PyExc_ValueError, "rank_to_id: a token outside known");
                    Py_DECREF(out);
                    return NULL;
                }
                if (known[id >> 5] >> (id & 31) & 1)
                    continue;
            }
            dst[n++] = r;
        }
    }
    if (n != count && _PyBytes_Resize(&out, n * 8) < 0)
        return NULL;
    return out;
}

/* positions(words, limit) -> bytes of int64: the set bits below limit, ascending */
static PyObject *
positions(PyObject *self, PyObject *args)
{
    PyObject *words_o;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "On", &words_o, &limit))
        return NULL;
    Py_buffer wv;
    if (get_words(words_o, &wv, 0, "words") < 0)
        return NULL;
    if (limit > 32 * (wv.len / 4))
        limit = 32 * (wv.len / 4);
    PyObject *out = scan_bits(wv.buf, limit < 0 ? 0 : limit, NULL, 0, NULL, 0);
    PyBuffer_Release(&wv);
    return out;
}

/* candidates(exits, limit, rank_to_id, known) -> bytes of int64: the ranks r below limit
 * whose bit is set in exits (a mask over ranks) and whose token rank_to_id[r] is not set
 * in known (a mask over ids) */
static PyObject *
candidates(PyObject *self, PyObject *args)
{
    PyObject *exits_o, *map_o, *known_o;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OnOO", &exits_o, &limit, &map_o, &known_o))
        return NULL;
    Py_buffer ev, mv, kv;
    int wide;
    if (get_words(exits_o, &ev, 0, "exits") < 0)
        return NULL;
    if (get_indices(map_o, &mv, &wide, "rank_to_id") < 0) {
        PyBuffer_Release(&ev);
        return NULL;
    }
    if (get_words(known_o, &kv, 0, "known") < 0) {
        PyBuffer_Release(&ev);
        PyBuffer_Release(&mv);
        return NULL;
    }
    Py_ssize_t n_map = mv.len / mv.itemsize;
    if (limit > 32 * (ev.len / 4))
        limit = 32 * (ev.len / 4);
    if (limit > n_map)
        limit = n_map;
    PyObject *out = scan_bits(ev.buf, limit < 0 ? 0 : limit, &mv, wide, kv.buf, 32 * (kv.len / 4));
    PyBuffer_Release(&ev);
    PyBuffer_Release(&mv);
    PyBuffer_Release(&kv);
    return out;
}

/* set_bits(words, indices[, rank_to_id]): in place, the bits of the indices (or of
 * rank_to_id[index], when given) */
static PyObject *
set_bits(PyObject *self, PyObject *args)
{
    PyObject *words_o, *idx_o, *map_o = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &words_o, &idx_o, &map_o))
        return NULL;
    Py_buffer wv, iv, mv;
    int wide_i, wide_m = 0, mapped = map_o != Py_None;
    if (get_words(words_o, &wv, 1, "words") < 0)
        return NULL;
    if (get_indices(idx_o, &iv, &wide_i, "indices") < 0) {
        PyBuffer_Release(&wv);
        return NULL;
    }
    if (mapped && get_indices(map_o, &mv, &wide_m, "rank_to_id") < 0) {
        PyBuffer_Release(&wv);
        PyBuffer_Release(&iv);
        return NULL;
    }
    uint32_t *w = wv.buf;
    Py_ssize_t n_bits = 32 * (wv.len / 4), n = iv.len / iv.itemsize, n_map = mapped ? mv.len / mv.itemsize : 0;
    PyObject *out = Py_None;
    /* check every index first: a bad one leaves the words as they were */
    for (Py_ssize_t i = 0; i < n && out; i++) {
        int64_t x = index_at(&iv, wide_i, i);
        if (mapped) {
            if (x < 0 || x >= n_map) {
                PyErr_SetString(PyExc_ValueError, "indices: a rank outside rank_to_id");
                out = NULL;
                break;
            }
            x = index_at(&mv, wide_m, x);
        }
        if (x < 0 || x >= n_bits) {
            PyErr_SetString(PyExc_ValueError, "indices: a bit outside the words");
            out = NULL;
        }
    }
    if (out)
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t x = index_at(&iv, wide_i, i);
            if (mapped)
                x = index_at(&mv, wide_m, x);
            w[x >> 5] |= (uint32_t)1 << (x & 31);
        }
    PyBuffer_Release(&wv);
    PyBuffer_Release(&iv);
    if (mapped)
        PyBuffer_Release(&mv);
    Py_XINCREF(out);
    return out;
}

/* take_few(words, max_count) -> bytes of int64, the set bits ascending, with the words
 * zeroed, when at most max_count bits are set; None (the words untouched) when more are:
 * a scratch mask read out as a short list and left clean for its next use */
static PyObject *
take_few(PyObject *self, PyObject *args)
{
    PyObject *words_o;
    Py_ssize_t max_count;
    if (!PyArg_ParseTuple(args, "On", &words_o, &max_count))
        return NULL;
    Py_buffer wv;
    if (get_words(words_o, &wv, 1, "words") < 0)
        return NULL;
    uint32_t *w = wv.buf;
    const Py_ssize_t n_words = wv.len / 4;
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < n_words && n <= max_count; i++)
        if (w[i])
            n += popcount32(w[i]);
    PyObject *out;
    if (n > max_count) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
        if (out) {
            int64_t *a = (int64_t *)PyBytes_AS_STRING(out);
            Py_ssize_t k = 0;
            for (Py_ssize_t i = 0; i < n_words && k < n; i++) {
                if (!w[i])
                    continue;
                for (uint32_t b = w[i]; b; b &= b - 1)
                    a[k++] = 32 * (int64_t)i + __builtin_ctz(b);
                w[i] = 0;
            }
        }
    }
    PyBuffer_Release(&wv);
    return out;
}

static PyMethodDef methods[] = {
    {"positions", positions, METH_VARARGS,
     "positions(words, limit) -> bytes of int64: the set bits below limit, ascending"},
    {"candidates", candidates, METH_VARARGS,
     "candidates(exits, limit, rank_to_id, known) -> bytes of int64: ranks set in exits whose "
     "token is not set in known"},
    {"take_few", take_few, METH_VARARGS,
     "take_few(words, max_count) -> bytes of int64: the set bits, the words zeroed, when at most max_count "
     "are set; else None and the words untouched"},
    {"set_bits", set_bits, METH_VARARGS,
     "set_bits(words, indices[, rank_to_id]): set the bits of the indices (or of their tokens) in place"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bits", "Native bitmask kernels (see gramgen.automata.bitmask).", -1, methods,
};

PyMODINIT_FUNC
PyInit__bits(void)
{
    return PyModule_Create(&module);
}
