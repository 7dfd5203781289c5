/* Native token classification: the hot loop of a mask miss, in C.
 *
 * classify() decides, for one lexeme DFA state, which tokens of the vocabulary stay
 * inside the lexeme (alive at their last byte) and which may end it strictly inside the
 * token before a byte that can follow it ("exits"). It is the same function as
 * gramgen.automata.lexeme_tokens.classify_tokens (numpy), which stays the reference and
 * the fallback when this module is not built; the tests compare the two.
 *
 * The tokens are walked depth-first over the implicit trie of their byte-sorted order:
 * lcp[r] bytes of token r are shared with token r - 1, so the DFA states (and the "may end
 * here" flag) along that prefix are reused, and a prefix that kills the DFA skips every
 * token that starts with it. Only first bytes the state can take are visited at all.
 *
 * Built as an optional extension (setup.py); no numpy headers: arrays arrive through the
 * buffer protocol, and their sizes are checked before any access. The GIL is released
 * during the walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

static int
check_buffer(const Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t min_items, const char *name)
{
    if (view->itemsize != itemsize || view->len % itemsize != 0) {
        PyErr_Format(PyExc_ValueError, "%s: expected items of %zd bytes", name, itemsize);
        return -1;
    }
    if (view->len / itemsize < min_items) {
        PyErr_Format(PyExc_ValueError, "%s: expected at least %zd items, got %zd", name,
                     min_items, view->len / itemsize);
        return -1;
    }
    return 0;
}

static PyObject *
classify(PyObject *self, PyObject *args)
{
    Py_buffer table_b, acc_b, follow_b, blob_b, offsets_b, lcp_b, first_b, ids_b, inside_b, exits_b;
    int state;
    Py_ssize_t max_len;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*iy*y*y*ny*y*w*w*", &table_b, &acc_b, &follow_b, &state,
                          &blob_b, &offsets_b, &lcp_b, &max_len, &first_b, &ids_b, &inside_b, &exits_b))
        return NULL;

    const Py_ssize_t n_rows = table_b.len / (256 * 4);  /* DFA states plus the sink (last) */
    const Py_ssize_t n_ranks = lcp_b.len / 4;
    if (check_buffer(&table_b, 4, 256, "table") || table_b.len % (256 * 4) != 0
        || check_buffer(&acc_b, 1, n_rows, "acc") || check_buffer(&follow_b, 1, 256, "follow")
        || check_buffer(&offsets_b, 8, n_ranks + 1, "offsets") || check_buffer(&lcp_b, 4, 0, "lcp")
        || check_buffer(&first_b, 8, 257, "first_start") || check_buffer(&ids_b, 8, n_ranks, "rank_to_id")
        || check_buffer(&inside_b, 4, 0, "inside") || check_buffer(&exits_b, 4, (n_ranks + 31) / 32, "exits"))
        goto done;
    if (state < 0 || state >= n_rows - 1) {
        PyErr_Format(PyExc_ValueError, "state %d is not a state of the table", state);
        goto done;
    }
    const int32_t *table = (const int32_t *)table_b.buf;
    const uint8_t *acc = (const uint8_t *)acc_b.buf;
    const uint8_t *follow = (const uint8_t *)follow_b.buf;
    const uint8_t *blob = (const uint8_t *)blob_b.buf;
    const int64_t *offsets = (const int64_t *)offsets_b.buf;
    const int32_t *lcp = (const int32_t *)lcp_b.buf;
    const int64_t *first_start = (const int64_t *)first_b.buf;
    const int64_t *rank_to_id = (const int64_t *)ids_b.buf;
    uint32_t *inside = (uint32_t *)inside_b.buf;
    uint32_t *exits = (uint32_t *)exits_b.buf;
    const int64_t n_inside_bits = (int64_t)(inside_b.len / 4) * 32;
    const int32_t sink = (int32_t)(n_rows - 1);

    /* first_start is checked here, each token and each DFA step in the walk (cheap
     * compares), so that inconsistent arrays raise instead of reading out of bounds */
    for (int b = 0; b < 257; b++) {
        if (first_start[b] < 0 || first_start[b] > n_ranks || (b && first_start[b] < first_start[b - 1])) {
            PyErr_SetString(PyExc_ValueError, "first_start is inconsistent");
            goto done;
        }
    }
    if (max_len < 1) {
        PyErr_SetString(PyExc_ValueError, "max_len must be positive");
        goto done;
    }
    int32_t *st = calloc((size_t)max_len + 1, sizeof(int32_t));
    uint8_t *may_end = calloc((size_t)max_len + 1, 1);
    if (!st || !may_end) {
        free(st);
        free(may_end);
        PyErr_NoMemory();
        goto done;
    }
    long n_exits = 0;
    int bad = 0;
    const int64_t blob_len = blob_b.len;
    Py_BEGIN_ALLOW_THREADS
    for (int b = 0; b < 256; b++) {
        if (table[(int64_t)state * 256 + b] == sink)
            continue;
        int64_t r = first_start[b], hi = first_start[b + 1];
        /* st[d]: the state after d bytes of the current token; may_end[d]: the lexeme may
         * end after some p in [1, d - 1] bytes, before byte p (which may follow it). Valid
         * for d up to the depth the previous token reached, and shared through lcp. */
        st[0] = state;
        may_end[0] = 0;
        int64_t d0 = 0;
        while (r < hi) {
            const int64_t len = offsets[r + 1] - offsets[r];
            if (len < 1 || len > max_len || offsets[r] < 0 || offsets[r + 1] > blob_len || d0 > len
                || rank_to_id[r] < 0 || rank_to_id[r] >= n_inside_bits) {
                bad = 1;
                goto walked;
            }
            const uint8_t *tok = blob + offsets[r];
            int64_t d = d0;
            int32_t q = st[d];
            uint8_t e = may_end[d];
            while (d < len) {
                if (d && !e && acc[q] && follow[tok[d]])
                    e = 1;
                q = table[(int64_t)q * 256 + tok[d]];
                if ((uint32_t)q > (uint32_t)sink) {
                    bad = 1;
                    goto walked;
                }
                d++;
                st[d] = q;
                may_end[d] = e;
                if (q == sink)
                    break;
            }
            if (q != sink) {  /* alive at its last byte */
                int64_t id = rank_to_id[r];
                inside[id >> 5] |= (uint32_t)1 << (id & 31);
                r++;
                d0 = r < hi ? lcp[r] : 0;
                continue;
            }
            /* dead after d bytes: so is every following token sharing those d bytes */
            do {
                if (e) {
                    exits[r >> 5] |= (uint32_t)1 << (r & 31);
                    n_exits++;
                }
                r++;
            } while (r < hi && lcp[r] >= d);
            d0 = r < hi ? lcp[r] : 0;
        }
    }
walked:
    Py_END_ALLOW_THREADS
    free(st);
    free(may_end);
    if (bad)
        PyErr_SetString(PyExc_ValueError, "inconsistent token table or DFA table");
    else
        result = PyLong_FromLong(n_exits);

done:
    PyBuffer_Release(&table_b);
    PyBuffer_Release(&acc_b);
    PyBuffer_Release(&follow_b);
    PyBuffer_Release(&blob_b);
    PyBuffer_Release(&offsets_b);
    PyBuffer_Release(&lcp_b);
    PyBuffer_Release(&first_b);
    PyBuffer_Release(&ids_b);
    PyBuffer_Release(&inside_b);
    PyBuffer_Release(&exits_b);
    return result;
}

static PyMethodDef methods[] = {
    {"classify", classify, METH_VARARGS,
     "classify(table, acc, follow, state, blob, offsets, lcp, max_len, first_start, rank_to_id, inside, exits)"
     " -> number of exit tokens; sets the bits of inside (by token id) and exits (by rank)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tokenwalk", "Native token classification (see lexeme_tokens).", -1, methods,
};

PyMODINIT_FUNC
PyInit__tokenwalk(void)
{
    return PyModule_Create(&module);
}
