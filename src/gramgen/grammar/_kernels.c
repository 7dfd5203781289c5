/* The grammar layer's inner loops, in C.
 *
 * Loops of a JSON Schema's lowering that ran once per schema, in Python, over objects made
 * one by one:
 *
 *   prune             the rules of a grammar that derive some finite string and that its
 *                     start reaches (gramgen.grammar.ir.prune_rules; 0.05 ms of a median
 *                     schema's 0.7 ms), with the fixed point of _rules.h;
 *   all_but           the code-point automaton of "any string but these words", an object's
 *                     undeclared keys (gramgen.grammar.cpdfa.all_but);
 *   automaton_edges   the edges of its IR automaton (gramgen.grammar.cpdfa.to_automaton);
 *                     the last two together 0.12 ms of it;
 *   seq               concatenation, flattened, neighbouring repeats merged
 *                     (gramgen.grammar.simplify.seq; the IR's classes registered by
 *                     register_ir).
 *
 * Each makes exactly what its Python reference makes (the tests compare them on random
 * inputs); the references run where this extension is not built, or under
 * GRAMGEN_NATIVE=0. Input is checked: a wrong type raises TypeError, never a crash.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_rules.h"   /* csr_of, close_rules (shared with automata/_earley.c) */

#define MAX_CODEPOINT 0x10FFFF
/* ANY_CHAR: every code point but the surrogates */
#define ANY_LO_HI 0xD7FF
#define ANY_HI_LO 0xE000

/* ------------------------------------------------------------------ growable arrays */

typedef struct {
    int32_t *v;
    Py_ssize_t n, cap;
} IVec;

static int
ivec_push(IVec *a, int32_t x)
{
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? 2 * a->cap : 16;
        int32_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* ------------------------------------------------------------------------- prune */

static PyObject *str_lhs, *str_rhs, *str_ranges;

/* The id of ``name`` in ``ids`` (a dict), given the next free id when new; -1 on error. */
static Py_ssize_t
symbol_id(PyObject *ids, PyObject *name, Py_ssize_t *next)
{
    PyObject *found = PyDict_GetItemWithError(ids, name);
    if (found)
        return PyLong_AsSsize_t(found);
    if (PyErr_Occurred())
        return -1;
    PyObject *id = PyLong_FromSsize_t(*next);
    if (!id || PyDict_SetItem(ids, name, id) < 0) {
        Py_XDECREF(id);
        return -1;
    }
    Py_DECREF(id);
    return (*next)++;
}

/* prune(rules: tuple of Rule, lexemes: dict, start) -> (kept rules: tuple, lexemes: dict)
 * or None when the start derives no finite string. A rule is kept when all its symbols
 * derive some finite string (lexemes do; a nonterminal does when one of its rules is
 * kept: the least fixed point, close_rules) and the start reaches it through kept rules;
 * a lexeme when the start reaches it. Order is kept. */
static PyObject *
prune(PyObject *self, PyObject *args)
{
    PyObject *rules, *lexemes, *start;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyTuple_Type, &rules, &PyDict_Type, &lexemes, &start))
        return NULL;
    Py_ssize_t n_rules = PyTuple_GET_SIZE(rules);
    if (n_rules > INT32_MAX / 4 || PyDict_GET_SIZE(lexemes) > INT32_MAX / 4) {
        PyErr_SetString(PyExc_OverflowError, "prune: too many rules or lexemes");
        return NULL;
    }
    PyObject *ids = PyDict_New(), *result = NULL;
    int32_t *lhs = PyMem_Calloc((size_t)n_rules + 1, sizeof *lhs);
    int32_t *rhs_at = PyMem_Calloc((size_t)n_rules + 2, sizeof *rhs_at);
    int32_t *missing = PyMem_Calloc((size_t)n_rules + 1, sizeof *missing);
    IVec rhs = {0}, kept_lhs = {0}, kept_rule = {0}, todo = {0};
    int32_t *off = NULL, *tgt = NULL;
    uint8_t *productive = NULL, *seen = NULL;
    if (!ids || !lhs || !rhs_at || !missing) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n_sym = 0, pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(lexemes, &pos, &key, &value))
        if (symbol_id(ids, key, &n_sym) < 0)
            goto done;
    Py_ssize_t n_lexemes = n_sym;
    for (Py_ssize_t i = 0; i < n_rules; i++) {
        PyObject *rule = PyTuple_GET_ITEM(rules, i);
        PyObject *l = PyObject_GetAttr(rule, str_lhs);
        if (!l)
            goto done;
        Py_ssize_t id = symbol_id(ids, l, &n_sym);
        Py_DECREF(l);
        if (id < 0)
            goto done;
        lhs[i] = (int32_t)id;
        PyObject *body = PyObject_GetAttr(rule, str_rhs);
        if (!body)
            goto done;
        PyObject *r = PySequence_Fast(body, "prune: a rule's rhs must be a sequence");
        Py_DECREF(body);
        if (!r)
            goto done;
        rhs_at[i] = (int32_t)rhs.n;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(r); j++) {
            Py_ssize_t s = symbol_id(ids, PySequence_Fast_GET_ITEM(r, j), &n_sym);
            if (s < 0 || rhs.n >= INT32_MAX / 4 || ivec_push(&rhs, (int32_t)s) < 0) {
                if (s >= 0 && !PyErr_Occurred())
                    PyErr_SetString(PyExc_OverflowError, "prune: too many symbols in the rules");
                Py_DECREF(r);
                goto done;
            }
        }
        Py_DECREF(r);
    }
    rhs_at[n_rules] = (int32_t)rhs.n;
    Py_ssize_t start_id;
    {
        PyObject *f = PyDict_GetItemWithError(ids, start);
        if (!f && PyErr_Occurred())
            goto done;
        start_id = f ? PyLong_AsSsize_t(f) : -1;
    }
    productive = PyMem_Calloc((size_t)n_sym + 1, 1);
    seen = PyMem_Calloc((size_t)n_sym + 1, 1);
    if (!productive || !seen) {
        PyErr_NoMemory();
        goto done;
    }
    memset(productive, 1, (size_t)n_lexemes);
    if (close_rules((int32_t)n_sym, (int32_t)n_rules, lhs, rhs_at, rhs_at + 1, rhs.v, productive, missing)) {
        PyErr_NoMemory();
        goto done;
    }
    if (start_id < 0 || !productive[start_id]) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* what the start reaches through kept rules */
    for (Py_ssize_t i = 0; i < n_rules; i++)
        if (!missing[i] && (ivec_push(&kept_lhs, lhs[i]) < 0 || ivec_push(&kept_rule, (int32_t)i) < 0))
            goto done;
    if (csr_of((int32_t)n_sym, kept_lhs.v, kept_rule.v, (int32_t)kept_lhs.n, &off, &tgt)) {
        PyErr_NoMemory();
        goto done;
    }
    seen[start_id] = 1;
    if (ivec_push(&todo, (int32_t)start_id) < 0)
        goto done;
    while (todo.n) {
        int32_t s = todo.v[--todo.n];
        for (int32_t e = off[s]; e < off[s + 1]; e++) {
            int32_t i = tgt[e];
            for (int32_t j = rhs_at[i]; j < rhs_at[i + 1]; j++) {
                int32_t t = rhs.v[j];
                if (!seen[t]) {
                    seen[t] = 1;
                    if (ivec_push(&todo, t) < 0)
                        goto done;
                }
            }
        }
    }
    Py_ssize_t n_kept = 0;
    for (Py_ssize_t i = 0; i < n_rules; i++)
        n_kept += !missing[i] && seen[lhs[i]];
    PyObject *kept = PyTuple_New(n_kept), *kept_lexemes = PyDict_New();
    if (!kept || !kept_lexemes) {
        Py_XDECREF(kept);
        Py_XDECREF(kept_lexemes);
        goto done;
    }
    for (Py_ssize_t i = 0, k = 0; i < n_rules; i++)
        if (!missing[i] && seen[lhs[i]])
            PyTuple_SET_ITEM(kept, k++, Py_NewRef(PyTuple_GET_ITEM(rules, i)));
    pos = 0;
    for (Py_ssize_t s = 0; PyDict_Next(lexemes, &pos, &key, &value); s++)
        if (seen[s] && PyDict_SetItem(kept_lexemes, key, value) < 0) {
            Py_DECREF(kept);
            Py_DECREF(kept_lexemes);
            goto done;
        }
    result = Py_BuildValue("(NN)", kept, kept_lexemes);
done:
    Py_XDECREF(ids);
    PyMem_Free(lhs);
    PyMem_Free(rhs_at);
    PyMem_Free(missing);
    PyMem_Free(rhs.v);
    PyMem_Free(kept_lhs.v);
    PyMem_Free(kept_rule.v);
    PyMem_Free(todo.v);
    free(off);
    free(tgt);
    PyMem_Free(productive);
    PyMem_Free(seen);
    return result;
}

/* ------------------------------------------------------------------------ all_but */

/* a trie node: its children (code point, node) sorted by code point */
typedef struct {
    Py_UCS4 *cs;
    Py_ssize_t *ts;
    Py_ssize_t n, cap;
    char terminal;
} Node;

typedef struct {
    Node *v;
    Py_ssize_t n, cap;
} Trie;

static Py_ssize_t
trie_node(Trie *t)
{
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? 2 * t->cap : 64;
        Node *v = PyMem_Realloc(t->v, (size_t)cap * sizeof *v);
        if (!v) {
            PyErr_NoMemory();
            return -1;
        }
        t->v = v;
        t->cap = cap;
    }
    memset(&t->v[t->n], 0, sizeof(Node));
    return t->n++;
}

static void
trie_free(Trie *t)
{
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyMem_Free(t->v[i].cs);
        PyMem_Free(t->v[i].ts);
    }
    PyMem_Free(t->v);
}

/* the child of node q by c, made (numbered next) when missing; -1 on error */
static Py_ssize_t
trie_child(Trie *t, Py_ssize_t q, Py_UCS4 c)
{
    Node *node = &t->v[q];
    Py_ssize_t lo = 0, hi = node->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (node->cs[mid] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < node->n && node->cs[lo] == c)
        return node->ts[lo];
    Py_ssize_t made = trie_node(t);
    if (made < 0)
        return -1;
    node = &t->v[q];   /* (the array may have moved) */
    if (node->n == node->cap) {
        Py_ssize_t cap = node->cap ? 2 * node->cap : 4;
        Py_UCS4 *cs = PyMem_Realloc(node->cs, (size_t)cap * sizeof *cs);
        if (!cs) {
            PyErr_NoMemory();
            return -1;
        }
        node->cs = cs;
        Py_ssize_t *ts = PyMem_Realloc(node->ts, (size_t)cap * sizeof *ts);
        if (!ts) {
            PyErr_NoMemory();
            return -1;
        }
        node->ts = ts;
        node->cap = cap;
    }
    memmove(node->cs + lo + 1, node->cs + lo, (size_t)(node->n - lo) * sizeof *node->cs);
    memmove(node->ts + lo + 1, node->ts + lo, (size_t)(node->n - lo) * sizeof *node->ts);
    node->cs[lo] = c;
    node->ts[lo] = made;
    node->n++;
    return made;
}

/* (lo, hi) */
static PyObject *
range2(Py_ssize_t lo, Py_ssize_t hi)
{
    return Py_BuildValue("(nn)", lo, hi);
}

/* append (lo, hi, t) to the list out; -1 on error */
static int
push_edge(PyObject *out, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t t)
{
    PyObject *e = Py_BuildValue("(nnn)", lo, hi, t);
    if (!e)
        return -1;
    int r = PyList_Append(out, e);
    Py_DECREF(e);
    return r;
}

static int
push_new(PyObject *list, PyObject *item)   /* steals item */
{
    if (!item)
        return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

/* whether (lo, hi) lies within _ONE_BYTE (printable ASCII but '"' and '\\') */
static int
in_one_byte(Py_ssize_t lo, Py_ssize_t hi)
{
    return 0x20 <= lo && hi <= 0x7F && !(lo <= 0x22 && 0x22 <= hi) && !(lo <= 0x5C && 0x5C <= hi);
}

/* cpdfa._state_groups: the edges (lo, hi, t) of state s, k of them, grouped per target in
   order of first appearance, adjacent ranges joined, each group's one-byte and other part
   from parts (a dict, filled by split_one_byte where new) */
static int
state_groups(Py_ssize_t s, const Py_ssize_t *lo, const Py_ssize_t *hi, const Py_ssize_t *t, Py_ssize_t k,
             PyObject *parts, PyObject *groups, PyObject *split_one_byte)
{
    char *done = PyMem_Calloc((size_t)k + 1, 1);
    Py_ssize_t *mine = PyMem_Malloc(((size_t)k + 1) * 2 * sizeof *mine);
    int status = -1;
    if (!done || !mine) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (done[i])
            continue;
        Py_ssize_t m = 0;   /* joined ranges, as pairs in mine */
        for (Py_ssize_t j = i; j < k; j++) {
            if (done[j] || t[j] != t[i])
                continue;
            done[j] = 1;
            if (m && lo[j] == mine[2 * m - 1] + 1)
                mine[2 * m - 1] = hi[j];
            else {
                mine[2 * m] = lo[j];
                mine[2 * m + 1] = hi[j];
                m++;
            }
        }
        PyObject *ranges = PyTuple_New(m);
        if (!ranges)
            goto out;
        for (Py_ssize_t r = 0; r < m; r++) {
            PyObject *pair = range2(mine[2 * r], mine[2 * r + 1]);
            if (!pair) {
                Py_DECREF(ranges);
                goto out;
            }
            PyTuple_SET_ITEM(ranges, r, pair);
        }
        PyObject *got = PyDict_GetItemWithError(parts, ranges);
        if (got)
            Py_INCREF(got);
        else if (PyErr_Occurred()) {
            Py_DECREF(ranges);
            goto out;
        } else {
            if (m == 1 && in_one_byte(mine[0], mine[1]))
                got = Py_BuildValue("(O())", ranges);
            else
                got = PyObject_CallOneArg(split_one_byte, ranges);
            if (!got || PyDict_SetItem(parts, ranges, got) < 0) {
                Py_XDECREF(got);
                Py_DECREF(ranges);
                goto out;
            }
        }
        if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
            PyErr_SetString(PyExc_TypeError, "all_but: split_one_byte must give a pair");
            Py_DECREF(got);
            Py_DECREF(ranges);
            goto out;
        }
        PyObject *g = Py_BuildValue("(nnNOO)", s, t[i], ranges, PyTuple_GET_ITEM(got, 0), PyTuple_GET_ITEM(got, 1));
        Py_DECREF(got);
        if (push_new(groups, g) < 0)
            goto out;
    }
    status = 0;
out:
    PyMem_Free(done);
    PyMem_Free(mine);
    return status;
}

/* all_but(words, several_of_any, split_one_byte) -> (edges, accepting, groups, kept) or
 * None when no word is kept: what cpdfa._all_but_py makes (see there). ``several_of_any``:
 * cpdfa.SEVERAL_OF_ANY; ``split_one_byte``: cpdfa._split_one_byte. */
static PyObject *
all_but(PyObject *self, PyObject *args)
{
    PyObject *words, *several, *split_one_byte;
    if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &words, &several, &split_one_byte))
        return NULL;
    Trie trie = {0};
    PyObject *kept = PyList_New(0), *edges = NULL, *groups = NULL, *parts = NULL, *accepting = NULL;
    PyObject *result = NULL;
    Py_ssize_t *lo = NULL, *hi = NULL, *to = NULL;
    if (!kept || trie_node(&trie) < 0)
        goto done;
    Py_ssize_t longest = 0;
    for (Py_ssize_t w = 0; w < PyTuple_GET_SIZE(words); w++) {
        PyObject *word = PyTuple_GET_ITEM(words, w);
        if (!PyUnicode_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "all_but: the words must be strings");
            goto done;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(word);
        int kind = PyUnicode_KIND(word);
        const void *data = PyUnicode_DATA(word);
        int surrogate = 0;
        for (Py_ssize_t i = 0; i < len && !surrogate; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            surrogate = 0xD800 <= c && c <= 0xDFFF;
        }
        if (surrogate)
            continue;
        if (PyList_Append(kept, word) < 0)
            goto done;
        Py_ssize_t q = 0;
        for (Py_ssize_t i = 0; i < len; i++)
            if ((q = trie_child(&trie, q, PyUnicode_READ(kind, data, i))) < 0)
                goto done;
        trie.v[q].terminal = 1;
    }
    if (!PyList_GET_SIZE(kept)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (Py_ssize_t q = 0; q < trie.n; q++)
        if (trie.v[q].n > longest)
            longest = trie.v[q].n;
    /* a node's edges: its children and the ranges between them, at most 2 n + 3 */
    lo = PyMem_Malloc((size_t)(2 * longest + 4) * sizeof *lo);
    hi = PyMem_Malloc((size_t)(2 * longest + 4) * sizeof *hi);
    to = PyMem_Malloc((size_t)(2 * longest + 4) * sizeof *to);
    edges = PyList_New(0);
    groups = PyList_New(0);
    parts = PyDict_New();
    accepting = PyList_New(trie.n + 1);
    if (!lo || !hi || !to || !edges || !groups || !parts || !accepting) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t free_state = trie.n;
    for (Py_ssize_t s = 0; s < trie.n; s++) {
        Node *node = &trie.v[s];
        Py_ssize_t k = 0;
        int one_byte = node->n > 0;
        for (Py_ssize_t i = 0; i < node->n && one_byte; i++) {
            Py_UCS4 c = node->cs[i];
            one_byte = 0x20 <= c && c <= 0x7F && c != 0x22 && c != 0x5C;
        }
        PyObject *mine = PyList_New(0);
        if (!mine || PyList_Append(edges, mine) < 0) {
            Py_XDECREF(mine);
            goto done;
        }
        Py_DECREF(mine);   /* (edges holds it) */
        if (one_byte) {
            /* the gaps to the free state, whose one-byte part is _ONE_BYTE without the
               children and whose rest is that of any character; then each child */
            PyObject *gaps = PyList_New(0);
            if (!gaps)
                goto done;
            Py_ssize_t at = 0;
            for (Py_ssize_t i = 0; i < node->n; i++) {
                Py_ssize_t c = node->cs[i];
                if (c > at && (push_new(gaps, range2(at, c - 1)) < 0 || push_edge(mine, at, c - 1, free_state) < 0)) {
                    Py_DECREF(gaps);
                    goto done;
                }
                if (push_edge(mine, c, c, node->ts[i]) < 0) {
                    Py_DECREF(gaps);
                    goto done;
                }
                at = c + 1;
            }
            if (push_new(gaps, range2(at, ANY_LO_HI)) < 0 || push_new(gaps, range2(ANY_HI_LO, MAX_CODEPOINT)) < 0
                    || push_edge(mine, at, ANY_LO_HI, free_state) < 0
                    || push_edge(mine, ANY_HI_LO, MAX_CODEPOINT, free_state) < 0) {
                Py_DECREF(gaps);
                goto done;
            }
            /* _one_byte_without: _ONE_BYTE's ranges without the children */
            static const Py_ssize_t ONE[3][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7F}};
            PyObject *without = PyList_New(0);
            if (!without) {
                Py_DECREF(gaps);
                goto done;
            }
            Py_ssize_t j = 0;
            for (int r = 0; r < 3; r++) {
                Py_ssize_t a = ONE[r][0];
                while (j < node->n && (Py_ssize_t)node->cs[j] <= ONE[r][1]) {
                    Py_ssize_t c = node->cs[j];
                    if (c > a && push_new(without, range2(a, c - 1)) < 0)
                        break;
                    a = c + 1;
                    j++;
                }
                if (PyErr_Occurred() || (a <= ONE[r][1] && push_new(without, range2(a, ONE[r][1])) < 0)) {
                    Py_DECREF(gaps);
                    Py_DECREF(without);
                    goto done;
                }
            }
            PyObject *g = Py_BuildValue("(nnNNO)", s, free_state, PyList_AsTuple(gaps), PyList_AsTuple(without), several);
            Py_DECREF(gaps);
            Py_DECREF(without);
            if (push_new(groups, g) < 0)
                goto done;
            for (Py_ssize_t i = 0; i < node->n; i++) {
                PyObject *pair = range2(node->cs[i], node->cs[i]);
                PyObject *r = pair ? PyTuple_Pack(1, pair) : NULL;
                Py_XDECREF(pair);
                if (!r)
                    goto done;
                if (push_new(groups, Py_BuildValue("(nnOO())", s, node->ts[i], r, r)) < 0) {
                    Py_DECREF(r);
                    goto done;
                }
                Py_DECREF(r);
            }
            continue;
        }
        /* the children, ascending, cut out of ANY_CHAR in one pass */
        static const Py_ssize_t ANY[2][2] = {{0, ANY_LO_HI}, {ANY_HI_LO, MAX_CODEPOINT}};
        int ar = 0;
        Py_ssize_t a = ANY[0][0], b = ANY[0][1];
        for (Py_ssize_t i = 0; i < node->n; i++) {
            Py_ssize_t c = node->cs[i];
            while (c > b) {
                if (a <= b) {
                    lo[k] = a, hi[k] = b, to[k++] = free_state;
                }
                ar++;
                a = ANY[ar][0], b = ANY[ar][1];   /* (c is no surrogate: ar stays < 2) */
            }
            if (a < c) {
                lo[k] = a, hi[k] = c - 1, to[k++] = free_state;
            }
            lo[k] = c, hi[k] = c, to[k++] = node->ts[i];
            a = c + 1;
        }
        for (;;) {
            if (a <= b) {
                lo[k] = a, hi[k] = b, to[k++] = free_state;
            }
            if (++ar == 2)
                break;
            a = ANY[ar][0], b = ANY[ar][1];
        }
        for (Py_ssize_t i = 0; i < k; i++)
            if (push_edge(mine, lo[i], hi[i], to[i]) < 0)
                goto done;
        if (state_groups(s, lo, hi, to, k, parts, groups, split_one_byte) < 0)
            goto done;
    }
    {
        PyObject *mine = PyList_New(0);
        if (!mine || PyList_Append(edges, mine) < 0) {
            Py_XDECREF(mine);
            goto done;
        }
        Py_DECREF(mine);
        lo[0] = 0, hi[0] = ANY_LO_HI, to[0] = free_state;
        lo[1] = ANY_HI_LO, hi[1] = MAX_CODEPOINT, to[1] = free_state;
        if (push_edge(mine, lo[0], hi[0], to[0]) < 0 || push_edge(mine, lo[1], hi[1], to[1]) < 0
                || state_groups(free_state, lo, hi, to, 2, parts, groups, split_one_byte) < 0)
            goto done;
    }
    for (Py_ssize_t s = 0; s < trie.n; s++)
        PyList_SET_ITEM(accepting, s, Py_NewRef(trie.v[s].terminal ? Py_False : Py_True));
    PyList_SET_ITEM(accepting, trie.n, Py_NewRef(Py_True));
    result = Py_BuildValue("(OOON)", edges, accepting, groups, PyList_AsTuple(kept));
done:
    trie_free(&trie);
    PyMem_Free(lo);
    PyMem_Free(hi);
    PyMem_Free(to);
    Py_XDECREF(kept);
    Py_XDECREF(edges);
    Py_XDECREF(groups);
    Py_XDECREF(parts);
    Py_XDECREF(accepting);
    return result;
}

/* ---------------------------------------------------------------- automaton_edges */

/* CharRanges(ranges): the instance made as the dataclass's __init__ makes it (the slot
   set past the frozen __setattr__), without its Python frame */
static PyObject *
char_ranges(PyTypeObject *cls, PyObject *ranges)
{
    PyObject *o = cls->tp_alloc(cls, 0);
    if (!o)
        return NULL;
    if (PyObject_GenericSetAttr(o, str_ranges, ranges) < 0) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

static int
push_triple(PyObject *out, PyObject *s, PyObject *label, PyObject *t)   /* steals label */
{
    if (!label)
        return -1;
    PyObject *e = PyTuple_Pack(3, s, label, t);
    Py_DECREF(label);
    return push_new(out, e);
}

/* automaton_edges(groups, n_states, share_from, CharRanges, EMPTY, labelled)
 *   -> (edges: tuple, n_states)
 * cpdfa.to_automaton's edges from the groups (s, t, ranges, one-byte part, other part);
 * ``labelled(ranges)``: the label of a range set (the caller caches it). */
static PyObject *
automaton_edges(PyObject *self, PyObject *args)
{
    PyObject *groups, *empty, *labelled;
    PyTypeObject *cls;
    Py_ssize_t n_states, share_from;
    if (!PyArg_ParseTuple(args, "O!nnO!OO", &PyList_Type, &groups, &n_states, &share_from, &PyType_Type, &cls,
                          &empty, &labelled))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(groups);
    PyObject *sources = PyDict_New(), *shared = PyDict_New(), *edges = PyList_New(0), *result = NULL;
    if (!sources || !shared || !edges)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *g = PyList_GET_ITEM(groups, i);
        if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 5) {
            PyErr_SetString(PyExc_TypeError, "automaton_edges: a group must be a 5-tuple");
            goto done;
        }
        PyObject *several = PyTuple_GET_ITEM(g, 4);
        int nonempty = PyObject_IsTrue(several);
        if (nonempty < 0)
            goto done;
        if (!nonempty)
            continue;
        PyObject *key = PyTuple_Pack(2, several, PyTuple_GET_ITEM(g, 1));
        if (!key)
            goto done;
        PyObject *count = PyDict_GetItemWithError(sources, key);
        Py_ssize_t c = count ? PyLong_AsSsize_t(count) : 0;
        PyObject *nc = (!count && PyErr_Occurred()) ? NULL : PyLong_FromSsize_t(c + 1);
        if (!nc || PyDict_SetItem(sources, key, nc) < 0) {
            Py_XDECREF(nc);
            Py_DECREF(key);
            goto done;
        }
        Py_DECREF(nc);
        Py_DECREF(key);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *g = PyList_GET_ITEM(groups, i);
        PyObject *s = PyTuple_GET_ITEM(g, 0), *t = PyTuple_GET_ITEM(g, 1), *ranges = PyTuple_GET_ITEM(g, 2);
        PyObject *one = PyTuple_GET_ITEM(g, 3), *several = PyTuple_GET_ITEM(g, 4);
        int nonempty = PyObject_IsTrue(several);
        if (nonempty < 0)
            goto done;
        if (!nonempty) {
            if (push_triple(edges, s, char_ranges(cls, ranges), t) < 0)
                goto done;
            continue;
        }
        PyObject *key = PyTuple_Pack(2, several, t);
        if (!key)
            goto done;
        PyObject *count = PyDict_GetItemWithError(sources, key);   /* (counted above) */
        if (!count) {
            Py_DECREF(key);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "automaton_edges: a group changed while read");
            goto done;
        }
        if (PyLong_AsSsize_t(count) < share_from) {
            Py_DECREF(key);
            if (push_triple(edges, s, PyObject_CallOneArg(labelled, ranges), t) < 0)
                goto done;
            continue;
        }
        int has_one = PyObject_IsTrue(one);
        if (has_one < 0 || (has_one && push_triple(edges, s, char_ranges(cls, one), t) < 0)) {
            Py_DECREF(key);
            goto done;
        }
        PyObject *via = PyDict_GetItemWithError(shared, key);
        if (via)
            Py_INCREF(via);
        else if (PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        } else {
            via = PyLong_FromSsize_t(n_states++);
            if (!via || PyDict_SetItem(shared, key, via) < 0
                    || push_triple(edges, via, PyObject_CallOneArg(labelled, several), t) < 0) {
                Py_XDECREF(via);
                Py_DECREF(key);
                goto done;
            }
        }
        Py_DECREF(key);
        int bad = push_triple(edges, s, Py_NewRef(empty), via) < 0;
        Py_DECREF(via);
        if (bad)
            goto done;
    }
    result = Py_BuildValue("(Nn)", PyList_AsTuple(edges), n_states);
done:
    Py_XDECREF(sources);
    Py_XDECREF(shared);
    Py_XDECREF(edges);
    return result;
}


/* -------------------------------------------------------------------------- seq */

/* the IR's classes, registered once by gramgen.grammar.simplify (register_ir) */
static PyObject *SeqT, *CharRangesT, *ByteRangesT, *AltT, *RepeatT, *NOTHING_;
static PyObject *str_items, *str_flat, *str_item, *str_min, *str_max;

static PyObject *
register_ir(PyObject *self, PyObject *args)
{
    PyObject *seq_t, *cr, *br, *alt_t, *rep, *nothing;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O", &PyType_Type, &seq_t, &PyType_Type, &cr, &PyType_Type, &br,
                          &PyType_Type, &alt_t, &PyType_Type, &rep, &nothing))
        return NULL;
    Py_XSETREF(SeqT, Py_NewRef(seq_t));
    Py_XSETREF(CharRangesT, Py_NewRef(cr));
    Py_XSETREF(ByteRangesT, Py_NewRef(br));
    Py_XSETREF(AltT, Py_NewRef(alt_t));
    Py_XSETREF(RepeatT, Py_NewRef(rep));
    Py_XSETREF(NOTHING_, Py_NewRef(nothing));
    Py_RETURN_NONE;
}

/* simplify.is_nothing: an empty class or an empty alternation; -1 on error */
static int
is_nothing(PyObject *rx)
{
    PyObject *field;
    if (PyObject_TypeCheck(rx, (PyTypeObject *)CharRangesT) || PyObject_TypeCheck(rx, (PyTypeObject *)ByteRangesT))
        field = PyObject_GetAttr(rx, str_ranges);
    else if (PyObject_TypeCheck(rx, (PyTypeObject *)AltT))
        field = PyObject_GetAttr(rx, str_items);
    else
        return 0;
    if (!field)
        return -1;
    int full = PyObject_IsTrue(field);
    Py_DECREF(field);
    return full < 0 ? -1 : !full;
}

/* simplify._merge_repeats: x y as one Repeat when both repeat the same regex; a new
   reference, Py_None when they do not, NULL on error */
static PyObject *
merge_repeats(PyObject *x, PyObject *y)
{
    PyObject *xi, *xmin, *xmax, *yi, *ymin, *ymax, *result = NULL;
    PyObject *one = PyLong_FromLong(1);
    if (!one)
        return NULL;
    if (Py_TYPE(x) == (PyTypeObject *)RepeatT) {
        xi = PyObject_GetAttr(x, str_item), xmin = PyObject_GetAttr(x, str_min), xmax = PyObject_GetAttr(x, str_max);
    } else
        xi = Py_NewRef(x), xmin = Py_NewRef(one), xmax = Py_NewRef(one);
    if (Py_TYPE(y) == (PyTypeObject *)RepeatT) {
        yi = PyObject_GetAttr(y, str_item), ymin = PyObject_GetAttr(y, str_min), ymax = PyObject_GetAttr(y, str_max);
    } else
        yi = Py_NewRef(y), ymin = Py_NewRef(one), ymax = Py_NewRef(one);
    Py_DECREF(one);
    if (!xi || !xmin || !xmax || !yi || !ymin || !ymax)
        goto out;
    if (xi != yi) {
        int differ = Py_TYPE(xi) != Py_TYPE(yi) ? 1 : PyObject_RichCompareBool(xi, yi, Py_NE);
        if (differ < 0)
            goto out;
        if (differ) {
            result = Py_NewRef(Py_None);
            goto out;
        }
    }
    PyObject *lo = PyNumber_Add(xmin, ymin);
    PyObject *hi = xmax == Py_None || ymax == Py_None ? Py_NewRef(Py_None) : PyNumber_Add(xmax, ymax);
    if (lo && hi)
        result = PyObject_CallFunctionObjArgs(RepeatT, xi, lo, hi, NULL);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
out:
    Py_XDECREF(xi);
    Py_XDECREF(xmin);
    Py_XDECREF(xmax);
    Py_XDECREF(yi);
    Py_XDECREF(ymin);
    Py_XDECREF(ymax);
    return result;
}

/* out[-1] merged with sub where they merge: 1 done, 0 not merged, -1 error */
static int
merge_last(PyObject *out, PyObject *sub)
{
    Py_ssize_t last = PyList_GET_SIZE(out) - 1;
    PyObject *merged = merge_repeats(PyList_GET_ITEM(out, last), sub);
    if (!merged)
        return -1;
    if (merged == Py_None) {
        Py_DECREF(merged);
        return 0;
    }
    return PyList_SetItem(out, last, merged) < 0 ? -1 : 1;   /* (steals merged) */
}

/* seq(items): simplify.seq (see there), the same nodes made in the same order */
static PyObject *
seq(PyObject *self, PyObject *arg)
{
    if (!SeqT) {
        PyErr_SetString(PyExc_RuntimeError, "seq: the IR classes are not registered");
        return NULL;
    }
    PyObject *items = PySequence_Fast(arg, "seq: expected an iterable of regexes");
    if (!items)
        return NULL;
    PyObject *out = PyList_New(0), *result = NULL;
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(items, i);
        PyObject *subs, *rest = NULL;
        if (PyObject_TypeCheck(it, (PyTypeObject *)SeqT)) {
            subs = PyObject_GetAttr(it, str_items);
            if (!subs)
                goto done;
            if (!PyTuple_Check(subs)) {
                PyObject *as_tuple = PySequence_Tuple(subs);
                Py_DECREF(subs);
                if (!(subs = as_tuple))
                    goto done;
            }
            PyObject *flat = PyObject_GetAttr(it, str_flat);
            int is_flat = 0;
            if (flat) {
                is_flat = PyObject_IsTrue(flat);
                Py_DECREF(flat);
                if (is_flat < 0) {
                    Py_DECREF(subs);
                    goto done;
                }
            } else if (PyErr_ExceptionMatches(PyExc_AttributeError))
                PyErr_Clear();
            else {
                Py_DECREF(subs);
                goto done;
            }
            if (is_flat) {
                /* made by seq: only its first item may merge with what came before */
                if (!PyList_GET_SIZE(out)) {
                    int bad = PyList_SetSlice(out, 0, 0, subs) < 0;
                    Py_DECREF(subs);
                    if (bad)
                        goto done;
                    continue;
                }
                rest = PyTuple_GetSlice(subs, 1, PyTuple_GET_SIZE(subs));
                PyObject *first = PyTuple_GetSlice(subs, 0, 1);
                Py_DECREF(subs);
                subs = first;
                if (!rest || !subs) {
                    Py_XDECREF(rest);
                    Py_XDECREF(subs);
                    goto done;
                }
            }
        } else if (!(subs = PyTuple_Pack(1, it)))
            goto done;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(subs); j++) {
            PyObject *sub = PyTuple_GET_ITEM(subs, j);
            PyTypeObject *cls = Py_TYPE(sub);
            Py_ssize_t n_out = PyList_GET_SIZE(out);
            int status = 0;   /* 1: merged, 2: the whole is nothing, -1: error */
            if (cls == (PyTypeObject *)CharRangesT || cls == (PyTypeObject *)ByteRangesT) {
                PyObject *ranges = PyObject_GetAttr(sub, str_ranges);
                int full = ranges ? PyObject_IsTrue(ranges) : -1;
                if (full < 0)
                    status = -1;
                else if (!full)
                    status = 2;
                else if (n_out) {
                    PyObject *prev = PyList_GET_ITEM(out, n_out - 1);
                    int mergeable = Py_TYPE(prev) == (PyTypeObject *)RepeatT;
                    if (!mergeable && Py_TYPE(prev) == cls) {
                        PyObject *pr = PyObject_GetAttr(prev, str_ranges);
                        mergeable = pr ? PyObject_RichCompareBool(pr, ranges, Py_EQ) : -1;
                        Py_XDECREF(pr);
                    }
                    status = mergeable < 0 ? -1 : mergeable ? merge_last(out, sub) : 0;
                }
                Py_XDECREF(ranges);
            } else {
                int nothing = is_nothing(sub);
                if (nothing)
                    status = nothing < 0 ? -1 : 2;
                else if (n_out) {
                    PyObject *prev = PyList_GET_ITEM(out, n_out - 1);
                    int mergeable = cls == (PyTypeObject *)RepeatT || Py_TYPE(prev) == (PyTypeObject *)RepeatT;
                    if (!mergeable && Py_TYPE(prev) == cls)
                        mergeable = PyObject_RichCompareBool(sub, prev, Py_EQ);
                    status = mergeable < 0 ? -1 : mergeable ? merge_last(out, sub) : 0;
                }
            }
            if (status < 0 || status == 2) {
                Py_DECREF(subs);
                Py_XDECREF(rest);
                if (status == 2)
                    result = Py_NewRef(NOTHING_);
                goto done;
            }
            if (status == 0 && PyList_Append(out, sub) < 0) {
                Py_DECREF(subs);
                Py_XDECREF(rest);
                goto done;
            }
        }
        Py_DECREF(subs);
        if (rest) {
            Py_ssize_t end = PyList_GET_SIZE(out);
            int bad = PyList_SetSlice(out, end, end, rest) < 0;
            Py_DECREF(rest);
            if (bad)
                goto done;
        }
    }
    if (PyList_GET_SIZE(out) == 1) {
        result = Py_NewRef(PyList_GET_ITEM(out, 0));
        goto done;
    }
    PyObject *tuple = PyList_AsTuple(out);
    if (!tuple)
        goto done;
    PyObject *made = PyObject_CallOneArg(SeqT, tuple);
    Py_DECREF(tuple);
    if (made && PyObject_GenericSetAttr(made, str_flat, Py_True) < 0)
        Py_CLEAR(made);
    result = made;
done:
    Py_DECREF(items);
    Py_XDECREF(out);
    return result;
}

static PyMethodDef methods[] = {
    {"prune", prune, METH_VARARGS, "The rules and lexemes of a grammar that derive and are reached."},
    {"all_but", all_but, METH_VARARGS, "The code-point DFA of every string but some words (its parts)."},
    {"automaton_edges", automaton_edges, METH_VARARGS, "An IR automaton's edges from a DFA's edge groups."},
    {"register_ir", register_ir, METH_VARARGS, "Register the IR classes seq makes and reads."},
    {"seq", seq, METH_O, "Concatenation, flattened, adjacent repeats merged (simplify.seq)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__kernels(void)
{
    str_lhs = PyUnicode_InternFromString("lhs");
    str_rhs = PyUnicode_InternFromString("rhs");
    str_ranges = PyUnicode_InternFromString("ranges");
    str_items = PyUnicode_InternFromString("items");
    str_flat = PyUnicode_InternFromString("_flat");
    str_item = PyUnicode_InternFromString("item");
    str_min = PyUnicode_InternFromString("min");
    str_max = PyUnicode_InternFromString("max");
    if (!str_lhs || !str_rhs || !str_ranges || !str_items || !str_flat || !str_item || !str_min || !str_max)
        return NULL;
    return PyModule_Create(&module);
}
