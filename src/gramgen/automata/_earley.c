/*
 * The Earley recogniser's per-byte step in C (see gramgen.automata.earley).
 *
 * Same algorithm, same sets, as ParserTables.step / _closure / _complete in earley.py: one
 * set per byte, kernel items (item, origin) plus scans (lexeme, DFA state) -> origins, the
 * predicted items shared per set of predicted nonterminals (Aycock-Horspool for nullable
 * symbols), ignored lexemes resuming the items of the set where they started. Here the
 * sets hold compact integer arrays:
 *
 *   - kernel items as (symbol after the dot, item, origin), sorted, so the completer finds
 *     the items waiting on a symbol by bisection;
 *   - the prediction as a pointer into the tables' cache (sorted (symbol, item) pairs);
 *   - the scans as (lexeme, state, origins) with the origins in one sorted pool.
 *
 * Sets are immutable once built (the signature and local signature slots aside, which
 * callers fill in), so a chart stays a Python list of shared sets: fork copies the list,
 * rollback truncates it. The Python views that the rest of gramgen reads (items, waiting,
 * pred as sets / dicts) are made on first access and kept; scans is made anew at each
 * access (read once or twice per mask of a new state: kept, its dict, key tuples and
 * frozensets were garbage-collector objects that lived as long as the set).
 *
 * A chart may hold stand-ins for sets (earley._Far, which notes reads beyond a horizon):
 * any element that is not a Set is asked for its attribute ``_native_self`` (the set it
 * stands for), so such reads are noticed exactly as in the Python implementation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/_rules.h"   /* csr_of, close_rules */

#define END (-1)

/* ---------------------------------------------------------------------------------------
 * small containers
 */

typedef struct {
    int32_t *a;
    Py_ssize_t n, cap;
} IVec;

/* *buf (of *cap items of `item` bytes) grown by doubling, from `first`, to hold `need` */
static int
grow(void **buf, Py_ssize_t *cap, Py_ssize_t need, size_t item, Py_ssize_t first)
{
    if (need <= *cap)
        return 0;
    Py_ssize_t c = *cap ? *cap : first;
    while (c < need)
        c *= 2;
    void *a = PyMem_Realloc(*buf, (size_t)c * item);
    if (!a) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = a;
    *cap = c;
    return 0;
}

static int
ivec_reserve(IVec *v, Py_ssize_t extra)
{
    return grow((void **)&v->a, &v->cap, v->n + extra, sizeof(int32_t), 16);
}

static inline int
ivec_push2(IVec *v, int32_t x, int32_t y)
{
    if (v->n + 2 > v->cap && ivec_reserve(v, 2) < 0)
        return -1;
    v->a[v->n++] = x;
    v->a[v->n++] = y;
    return 0;
}

static inline int
ivec_push(IVec *v, int32_t x)
{
    if (v->n + 1 > v->cap && ivec_reserve(v, 1) < 0)
        return -1;
    v->a[v->n++] = x;
    return 0;
}

static void
ivec_free(IVec *v)
{
    PyMem_Free(v->a);
    v->a = NULL;
    v->n = v->cap = 0;
}

/* a set of 64-bit keys, open addressing (the empty slot is ~0) */
typedef struct {
    uint64_t *keys;
    size_t cap, n;
} HSet;

#define HEMPTY (~(uint64_t)0)

static inline size_t
hmix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static int
hset_grow(HSet *h)
{
    size_t cap = h->cap ? h->cap * 2 : 64;
    uint64_t *keys = PyMem_Malloc(cap * sizeof(uint64_t));
    if (!keys) {
        PyErr_NoMemory();
        return -1;
    }
    memset(keys, 0xff, cap * sizeof(uint64_t));
    for (size_t i = 0; i < h->cap; i++) {
        uint64_t k = h->keys[i];
        if (k == HEMPTY)
            continue;
        size_t p = hmix(k) & (cap - 1);
        while (keys[p] != HEMPTY)
            p = (p + 1) & (cap - 1);
        keys[p] = k;
    }
    PyMem_Free(h->keys);
    h->keys = keys;
    h->cap = cap;
    return 0;
}

/* 1: added, 0: already there, -1: error */
static inline int
hset_add(HSet *h, uint64_t k)
{
    if ((h->n + 1) * 2 > h->cap && hset_grow(h) < 0)
        return -1;
    size_t mask = h->cap - 1, p = hmix(k) & mask;
    while (h->keys[p] != HEMPTY) {
        if (h->keys[p] == k)
            return 0;
        p = (p + 1) & mask;
    }
    h->keys[p] = k;
    h->n++;
    return 1;
}

/* ---------------------------------------------------------------------------------------
 * predictions: what predicting a set of nonterminals adds (static, cached in the tables)
 */

typedef struct {
    uint64_t hash;    /* first: the entry of a PtrTable */
    int32_t n_roots, n, n_lex;
    int32_t *roots;   /* the key: sorted nonterminals */
    int32_t *sym;     /* n: symbol after the dot, sorted ... */
    int32_t *item;    /* ... and the predicted item */
    int32_t *lex;     /* n_lex: lexemes that start here (symbols >= N, minus N) */
    PyObject *py;     /* the dict symbol -> tuple of items, made on first use */
} Pred;

/* an FNV-1a hash of n ints */
static uint64_t
ints_hash(const int32_t *r, int32_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)r[i];
        h *= 1099511628211ULL;
    }
    return h ^ (uint64_t)n;
}

/* A hash table of pointers to entries whose first field is their uint64_t hash, open
 * addressing; lookups walk the probe sequence from ptab_first themselves (each cache
 * compares its own keys). */
typedef struct {
    void **slot;
    size_t cap, count;
} PtrTable;

static inline uint64_t
entry_hash(const void *e)
{
    return *(const uint64_t *)e;
}

/* empty the table, freeing every entry (entries that own nothing else) */
static void
ptab_free_all(PtrTable *pt)
{
    for (size_t i = 0; i < pt->cap; i++)
        PyMem_Free(pt->slot[i]);
    PyMem_Free(pt->slot);
    memset(pt, 0, sizeof(*pt));
}

static int
ptab_insert(PtrTable *t, void *e)
{
    if ((t->count + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        void **slot = PyMem_Calloc(cap, sizeof(void *));
        if (!slot) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->slot[i])
                continue;
            size_t p = hmix(entry_hash(t->slot[i])) & (cap - 1);
            while (slot[p])
                p = (p + 1) & (cap - 1);
            slot[p] = t->slot[i];
        }
        PyMem_Free(t->slot);
        t->slot = slot;
        t->cap = cap;
    }
    size_t p = hmix(entry_hash(e)) & (t->cap - 1);
    while (t->slot[p])
        p = (p + 1) & (t->cap - 1);
    t->slot[p] = e;
    t->count++;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * the tables
 */

/* A plain chain of lexeme k from state q: the bytes `plain` that all lead from q to one
 * state, and from it to one state again, and so on for `room` steps (a string body: its
 * plain characters loop on one state, or count along a chain in a counted string). A rest
 * of at most `room` plain bytes keeps the lexeme alive to its end, whatever the bytes. */
typedef struct {
    uint8_t plain[256];
    int32_t room;
} Chain;

typedef struct {
    int32_t n_states;
    const int32_t *trans;   /* [n_states * 256]: next state or -1 */
    const uint8_t *accept;  /* [n_states] */
    uint64_t *first;        /* [n_states * 4]: bytes defined from each state, lazily */
    uint8_t *first_known;   /* [n_states] */
    Chain **chains;         /* [n_states]: each state's plain chain, made on first use */
    struct Run *runs;       /* [n_states]: what chain walks learned of each state (see plain_chain) */
} Lex;

typedef struct {
    PyObject_HEAD
    int32_t N, n_items_total, n_lex, n_sym, accept_item, any_glued, n_ignore;
    int32_t *item_next, *item_lhs;
    uint8_t *nullable;   /* [n_sym] */
    uint8_t *glued;      /* [n_items_total] */
    int32_t *rules_off;  /* [N + 1] */
    int32_t *rules;      /* first item of each rule, grouped by left-hand side */
    uint8_t *is_ignore;  /* [n_lex] */
    int32_t *ignore;     /* [n_ignore] */
    uint64_t *follow;    /* [n_lex * 4]: bytes that may come right after each lexeme */
    int32_t *item_class; /* [n_items_total]: the class signatures name an item by */
    uint8_t *relevant;   /* [n_items_total]: whether an item counts in signatures */
    Lex *lex;
    Py_buffer *views;    /* 2 per lexeme: transitions and accepting */
    int32_t n_views;
    PtrTable preds;      /* Pred: the prediction cache */
    PtrTable passes;     /* PassEntry: lexeme passes of big token groups (see cached_pass) */
    size_t pass_ints;    /* bytes held by the passes, in ints */
    struct PlainLens *plens[4];   /* plain prefixes of a vocabulary's tokens (see plain_lens) */
    int next_plens;
} Tables;

typedef struct {
    int32_t sym, it, origin;
} KItem;

typedef struct {
    int32_t lexeme, state, off, n;
} Scan;

typedef struct {
    PyObject_HEAD
    Tables *tables;
    int32_t n_items, n_scans;
    KItem *items;       /* sorted by (sym, it, origin) */
    Scan *scans;
    int32_t *origins;   /* pool of the scans' origins (each run sorted) */
    Pred *pred;         /* NULL: nothing predicted here */
    int32_t kid;        /* made in a walk: the id of its kernel there (see Kernel); else -1 */
    int kabs;           /* ... and whether its kernel items all start in the walk's chart list */
    uint64_t nb[4];
    int nb_known;
    PyObject *sig, *local;
    PyObject *py_items, *py_waiting, *py_nb;
} Set;

static PyTypeObject TablesType;
static PyTypeObject SetType;
static PyObject *str_native_self;

static void
pred_free(Pred *p)
{
    if (!p)
        return;
    Py_XDECREF(p->py);
    PyMem_Free(p->roots);
    PyMem_Free(p->sym);
    PyMem_Free(p->item);
    PyMem_Free(p->lex);
    PyMem_Free(p);
}

typedef struct {
    uint64_t hash;    /* first: the entry of a PtrTable */
    int32_t lexeme, state, depth, lo, hi;
    uint64_t *alive;  /* (hi - lo) bits: the token's rest keeps the lexeme alive to its end */
    uint64_t *ended;  /* (hi - lo) bits: the lexeme accepts inside the rest, before a byte
                       * that may follow it */
} PassEntry;

static void
pass_clear(Tables *t)
{
    ptab_free_all(&t->passes);
    t->pass_ints = 0;
}

static void
tables_dealloc(Tables *t)
{
    pass_clear(t);
    for (int i = 0; i < 4; i++)
        PyMem_Free(t->plens[i]);
    PyMem_Free(t->item_next);
    PyMem_Free(t->item_lhs);
    PyMem_Free(t->nullable);
    PyMem_Free(t->glued);
    PyMem_Free(t->rules_off);
    PyMem_Free(t->rules);
    PyMem_Free(t->is_ignore);
    PyMem_Free(t->ignore);
    PyMem_Free(t->follow);
    PyMem_Free(t->item_class);
    PyMem_Free(t->relevant);
    if (t->lex) {
        for (int32_t k = 0; k < t->n_lex; k++) {
            PyMem_Free(t->lex[k].first);
            PyMem_Free(t->lex[k].first_known);
            if (t->lex[k].chains) {
                for (int32_t q = 0; q < t->lex[k].n_states; q++)
                    PyMem_Free(t->lex[k].chains[q]);
                PyMem_Free(t->lex[k].chains);
            }
            PyMem_Free(t->lex[k].runs);
        }
        PyMem_Free(t->lex);
    }
    if (t->views) {
        for (int32_t i = 0; i < t->n_views; i++)
            if (t->views[i].obj)
                PyBuffer_Release(&t->views[i]);
        PyMem_Free(t->views);
    }
    for (size_t i = 0; i < t->preds.cap; i++)
        pred_free(t->preds.slot[i]);
    PyMem_Free(t->preds.slot);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* a list of ints into a fresh int32 array (PyMem; *n_out its length); OverflowError for an
 * int out of int32's range */
static int32_t *
int_array(PyObject *seq_o, Py_ssize_t *n_out, const char *what)
{
    PyObject *seq = PySequence_Fast(seq_o, what);
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int32_t *a = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!a) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if ((v == -1 && PyErr_Occurred()) || v < INT32_MIN || v > INT32_MAX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_OverflowError, "%s: an int out of int32's range", what);
            PyMem_Free(a);
            Py_DECREF(seq);
            return NULL;
        }
        a[i] = (int32_t)v;
    }
    Py_DECREF(seq);
    *n_out = n;
    return a;
}

static uint8_t *
bool_array(PyObject *seq_o, Py_ssize_t expect, const char *what)
{
    Py_ssize_t n;
    int32_t *a = int_array(seq_o, &n, what);
    if (!a)
        return NULL;
    if (n != expect) {
        PyMem_Free(a);
        PyErr_Format(PyExc_ValueError, "%s: expected %zd entries, got %zd", what, expect, n);
        return NULL;
    }
    uint8_t *b = PyMem_Malloc((size_t)(n ? n : 1));
    if (!b) {
        PyMem_Free(a);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        b[i] = a[i] != 0;
    PyMem_Free(a);
    return b;
}

/* Tables(N, item_next, item_lhs, nullable, rules_of, transitions, accepting, is_ignore,
 *        glued, accept_item, follow, item_class, relevant_item): follow holds 32 bytes per
 *        lexeme, the little-endian bitmask of the bytes that may come right after it
 *        (ParserTables.follow_bytes); the last two name items in signatures */
static PyObject *
tables_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    int N, accept_item;
    PyObject *item_next_o, *item_lhs_o, *nullable_o, *rules_of_o, *trans_o, *acc_o, *ignore_o, *glued_o;
    PyObject *follow_o, *class_o, *relevant_o;
    if (!PyArg_ParseTuple(args, "iOOOOO!O!OOiO!OO", &N, &item_next_o, &item_lhs_o, &nullable_o, &rules_of_o,
                          &PyTuple_Type, &trans_o, &PyTuple_Type, &acc_o, &ignore_o, &glued_o, &accept_item,
                          &PyBytes_Type, &follow_o, &class_o, &relevant_o))
        return NULL;
    Tables *t = (Tables *)type->tp_alloc(type, 0);
    if (!t)
        return NULL;
    Py_ssize_t n_items, n_lhs, n_lex = PyTuple_GET_SIZE(trans_o);
    t->N = N;
    t->accept_item = accept_item;
    if (!(t->item_next = int_array(item_next_o, &n_items, "item_next")))
        goto fail;
    if (!(t->item_lhs = int_array(item_lhs_o, &n_lhs, "item_lhs")))
        goto fail;
    if (n_lhs != n_items || PyTuple_GET_SIZE(acc_o) != n_lex) {
        PyErr_SetString(PyExc_ValueError, "tables of different lengths");
        goto fail;
    }
    t->n_items_total = (int32_t)n_items;
    t->n_lex = (int32_t)n_lex;
    t->n_sym = N + (int32_t)n_lex;
    if (!(t->nullable = bool_array(nullable_o, t->n_sym, "nullable")))
        goto fail;
    if (!(t->glued = bool_array(glued_o, n_items, "glued")))
        goto fail;
    if (!(t->relevant = bool_array(relevant_o, n_items, "relevant_item")))
        goto fail;
    {
        Py_ssize_t n_class;
        if (!(t->item_class = int_array(class_o, &n_class, "item_class")))
            goto fail;
        if (n_class != n_items) {
            PyErr_SetString(PyExc_ValueError, "item_class: one entry per item");
            goto fail;
        }
    }
    if (!(t->is_ignore = bool_array(ignore_o, n_lex, "is_ignore")))
        goto fail;
    for (Py_ssize_t i = 0; i < n_items; i++) {
        t->any_glued |= t->glued[i];
        int32_t s = t->item_next[i];
        if (s < END || s >= t->n_sym || t->item_lhs[i] < 0 || t->item_lhs[i] >= N) {
            PyErr_SetString(PyExc_ValueError, "item table out of range");
            goto fail;
        }
    }
    if (accept_item < 0 || accept_item >= n_items) {
        PyErr_SetString(PyExc_ValueError, "accept_item out of range");
        goto fail;
    }
    t->ignore = PyMem_Malloc((size_t)(n_lex ? n_lex : 1) * sizeof(int32_t));
    if (!t->ignore) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n_lex; k++)
        if (t->is_ignore[k])
            t->ignore[t->n_ignore++] = (int32_t)k;
    if (PyBytes_GET_SIZE(follow_o) != 32 * n_lex) {
        PyErr_SetString(PyExc_ValueError, "follow: 32 bytes per lexeme");
        goto fail;
    }
    t->follow = PyMem_Calloc((size_t)(n_lex ? n_lex : 1) * 4, sizeof(uint64_t));
    if (!t->follow) {
        PyErr_NoMemory();
        goto fail;
    }
    {
        const unsigned char *fb = (const unsigned char *)PyBytes_AS_STRING(follow_o);
        for (Py_ssize_t i = 0; i < 32 * n_lex; i++)
            t->follow[i / 8] |= (uint64_t)fb[i] << (8 * (i % 8));
    }
    /* rules_of: a list (per nonterminal) of lists of first items */
    {
        PyObject *seq = PySequence_Fast(rules_of_o, "rules_of");
        if (!seq)
            goto fail;
        if (PySequence_Fast_GET_SIZE(seq) != N) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "rules_of: one list per nonterminal");
            goto fail;
        }
        IVec all = {0};
        t->rules_off = PyMem_Malloc((size_t)(N + 1) * sizeof(int32_t));
        if (!t->rules_off) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            goto fail;
        }
        for (int i = 0; i < N; i++) {
            t->rules_off[i] = (int32_t)all.n;
            Py_ssize_t m;
            int32_t *r = int_array(PySequence_Fast_GET_ITEM(seq, i), &m, "rules_of entry");
            if (!r || ivec_reserve(&all, m) < 0) {
                PyMem_Free(r);
                ivec_free(&all);
                Py_DECREF(seq);
                goto fail;
            }
            for (Py_ssize_t x = 0; x < m; x++) {
                if (r[x] < 0 || r[x] >= n_items) {
                    PyMem_Free(r);
                    ivec_free(&all);
                    Py_DECREF(seq);
                    PyErr_SetString(PyExc_ValueError, "rules_of: item out of range");
                    goto fail;
                }
                all.a[all.n++] = r[x];
            }
            PyMem_Free(r);
        }
        t->rules_off[N] = (int32_t)all.n;
        Py_DECREF(seq);
        if (ivec_reserve(&all, 1) < 0)
            goto fail;
        t->rules = all.a;
    }
    /* lexeme DFAs: int32 [n, 256] transitions, bool [n] accepting (kept alive by views) */
    t->lex = PyMem_Calloc((size_t)(n_lex ? n_lex : 1), sizeof(Lex));
    t->views = PyMem_Calloc((size_t)(2 * n_lex + 1), sizeof(Py_buffer));
    if (!t->lex || !t->views) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n_lex; k++) {
        Py_buffer *tv = &t->views[2 * k], *av = &t->views[2 * k + 1];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(trans_o, k), tv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto fail;
        t->n_views = (int32_t)(2 * k + 1);
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(acc_o, k), av, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto fail;
        t->n_views = (int32_t)(2 * k + 2);
        if (tv->itemsize != 4 || tv->len % (256 * 4) || av->itemsize != 1 ||
            av->len != tv->len / (256 * 4)) {
            PyErr_SetString(PyExc_ValueError, "a lexeme DFA must be int32 [n, 256] with bool [n] accepting");
            goto fail;
        }
        Lex *L = &t->lex[k];
        L->n_states = (int32_t)(av->len);
        L->trans = tv->buf;
        L->accept = av->buf;
        L->first = PyMem_Malloc((size_t)(L->n_states ? L->n_states : 1) * 4 * sizeof(uint64_t));
        L->first_known = PyMem_Calloc((size_t)(L->n_states ? L->n_states : 1), 1);
        if (!L->first || !L->first_known) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    return (PyObject *)t;
fail:
    Py_DECREF(t);
    return NULL;
}

static inline const uint64_t *
first_bytes(Lex *L, int32_t q)
{
    uint64_t *f = L->first + 4 * (size_t)q;
    if (!L->first_known[q]) {
        const int32_t *row = L->trans + 256 * (size_t)q;
        f[0] = f[1] = f[2] = f[3] = 0;
        for (int b = 0; b < 256; b++)
            if (row[b] >= 0)
                f[b >> 6] |= (uint64_t)1 << (b & 63);
        L->first_known[q] = 1;
    }
    return f;
}

static int
cmp_pair(const void *a, const void *b)
{
    const int32_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int
cmp_int(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The prediction of the sorted nonterminals roots[0..n): looked up, or made and cached. */
static Pred *
prediction(Tables *t, int32_t *roots, int32_t n)
{
    uint64_t h = ints_hash(roots, n);
    if (t->preds.cap) {
        size_t mask = t->preds.cap - 1;
        for (size_t s = hmix(h) & mask; t->preds.slot[s]; s = (s + 1) & mask) {
            Pred *p = t->preds.slot[s];
            if (p->hash == h && p->n_roots == n && !memcmp(p->roots, roots, (size_t)n * sizeof(int32_t)))
                return p;
        }
    }
    int32_t N = t->N;
    uint8_t *seen = PyMem_Calloc((size_t)N + (size_t)t->n_items_total + 1, 1);
    uint8_t *seen_item = seen + N;
    IVec stack = {0}, items = {0};
    Pred *p = PyMem_Calloc(1, sizeof(Pred));
    if (!seen || !p) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int32_t i = 0; i < n; i++) {
        seen[roots[i]] = 1;
        if (ivec_push(&stack, roots[i]) < 0)
            goto fail;
    }
    while (stack.n) {
        int32_t nt = stack.a[--stack.n];
        for (int32_t r = t->rules_off[nt]; r < t->rules_off[nt + 1]; r++) {
            int32_t i = t->rules[r];
            for (;;) {
                int32_t sym = t->item_next[i];
                if (!seen_item[i]) {
                    seen_item[i] = 1;
                    if (sym != END && ivec_push2(&items, sym, i) < 0)
                        goto fail;
                }
                if (sym == END)
                    break;
                if (sym < N && !seen[sym]) {
                    seen[sym] = 1;
                    if (ivec_push(&stack, sym) < 0)
                        goto fail;
                }
                if (!t->nullable[sym])
                    break;
                i++;
            }
        }
    }
    qsort(items.a, (size_t)(items.n / 2), 2 * sizeof(int32_t), cmp_pair);
    int32_t m = (int32_t)(items.n / 2);
    p->n = m;
    p->n_roots = n;
    p->hash = h;
    p->roots = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    p->sym = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(int32_t));
    p->item = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(int32_t));
    p->lex = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(int32_t));
    if (!p->roots || !p->sym || !p->item || !p->lex) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(p->roots, roots, (size_t)n * sizeof(int32_t));
    for (int32_t x = 0; x < m; x++) {
        int32_t sym = items.a[2 * x];
        p->sym[x] = sym;
        p->item[x] = items.a[2 * x + 1];
        if (sym >= N && (x == 0 || items.a[2 * x - 2] != sym))
            p->lex[p->n_lex++] = sym - N;
    }
    if (ptab_insert(&t->preds, p) < 0)
        goto fail;
    PyMem_Free(seen);
    ivec_free(&stack);
    ivec_free(&items);
    return p;
fail:
    PyMem_Free(seen);
    ivec_free(&stack);
    ivec_free(&items);
    pred_free(p);
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * sets
 */

static Set *
set_alloc(Tables *t, int32_t n_items, int32_t n_scans, Py_ssize_t n_origins)
{
    Set *s = PyObject_New(Set, &SetType);
    if (!s)
        return NULL;
    s->tables = t;
    Py_INCREF(t);
    s->n_items = n_items;
    s->n_scans = n_scans;
    s->pred = NULL;
    s->kid = -1;
    s->kabs = 0;
    s->nb_known = 0;
    s->sig = s->local = NULL;
    s->py_items = s->py_waiting = s->py_nb = NULL;
    size_t bytes = (size_t)n_items * sizeof(KItem) + (size_t)n_scans * sizeof(Scan) +
                   (size_t)n_origins * sizeof(int32_t);
    char *block = PyMem_Malloc(bytes ? bytes : 1);
    if (!block) {
        s->items = NULL;
        Py_DECREF(s);
        PyErr_NoMemory();
        return NULL;
    }
    s->items = (KItem *)block;
    s->scans = (Scan *)(block + (size_t)n_items * sizeof(KItem));
    s->origins = (int32_t *)(block + (size_t)n_items * sizeof(KItem) + (size_t)n_scans * sizeof(Scan));
    return s;
}

/* Sets are not tracked by the garbage collector: what they refer to (signatures, the
 * views of ints and tuples of ints) never refers back to a set, and a generation keeps
 * thousands of them alive. */
static void
set_clear(Set *s)
{
    Py_CLEAR(s->sig);
    Py_CLEAR(s->local);
    Py_CLEAR(s->py_items);
    Py_CLEAR(s->py_waiting);
    Py_CLEAR(s->py_nb);
}

static void
set_dealloc(Set *s)
{
    set_clear(s);
    PyMem_Free(s->items);
    Py_XDECREF(s->tables);
    PyObject_Del(s);
}

/* A chart: the Python list of sets, then (during a walk) sets pushed on a C stack. A read
 * of a list position marked in `far` is noted in `read` (see walk_exits). */
typedef struct {
    Tables *tables;     /* whose sets it holds */
    PyObject *list;
    Py_ssize_t n_list;
    Set **stack;
    Py_ssize_t n_stack, cap_stack;
    const uint8_t *far;
    int read;
} Chart;

static inline Py_ssize_t
chart_len(const Chart *c)
{
    return c->n_list + c->n_stack;
}

static void
chart_of_list(Chart *c, Tables *t, PyObject *list)
{
    memset(c, 0, sizeof(*c));
    c->tables = t;
    c->list = list;
    c->n_list = PyList_GET_SIZE(list);
}

/* `o` as a set of these tables (or what a stand-in for one forwards to) */
static Set *
as_set(Tables *t, PyObject *o)
{
    Set *s = NULL;
    if (Py_TYPE(o) == &SetType) {
        s = (Set *)o;
    } else {
        PyObject *y = PyObject_GetAttr(o, str_native_self);
        if (!y && !PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        if (y && Py_TYPE(y) == &SetType)
            s = (Set *)y;   /* kept alive by `o` */
        Py_XDECREF(y);
    }
    if (!s || s->tables != t) {
        PyErr_SetString(PyExc_TypeError, "not a parser set of this grammar");
        return NULL;
    }
    return s;
}

/* The set at position o: a Set, or what a stand-in (earley._Far) returns for _native_self
 * (borrowed: the chart, or the stand-in in it, keeps it alive). */
static Set *
get_set(Chart *c, Py_ssize_t o)
{
    if (o >= c->n_list && o - c->n_list < c->n_stack)
        return c->stack[o - c->n_list];
    if (o < 0 || o >= c->n_list || o >= PyList_GET_SIZE(c->list)) {
        PyErr_Format(PyExc_IndexError, "no chart set %zd", o);
        return NULL;
    }
    if (c->far && c->far[o])
        c->read = 1;
    return as_set(c->tables, PyList_GET_ITEM(c->list, o));
}

/* Earley's completer: the items of `s` (at position `origin`) waiting on `sym`, advanced
 * over it, onto the agenda (pairs item, origin). */
static int
advance_over(IVec *agenda, Set *s, int32_t sym, int32_t origin)
{
    /* kernel items: bisect the first with this symbol */
    int32_t lo = 0, hi = s->n_items;
    while (lo < hi) {
        int32_t mid = (lo + hi) >> 1;
        if (s->items[mid].sym < sym)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < s->n_items && s->items[lo].sym == sym; lo++)
        if (ivec_push2(agenda, s->items[lo].it + 1, s->items[lo].origin) < 0)
            return -1;
    Pred *p = s->pred;
    if (p) {
        lo = 0;
        hi = p->n;
        while (lo < hi) {
            int32_t mid = (lo + hi) >> 1;
            if (p->sym[mid] < sym)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (; lo < p->n && p->sym[lo] == sym; lo++)
            if (ivec_push2(agenda, p->item[lo] + 1, origin) < 0)
                return -1;
    }
    return 0;
}

/* scans under construction: (lexeme, state) -> sorted origins, in order of first insertion;
 * the origins of every entry live in one pool (a merge writes a fresh run at its end) */
typedef struct {
    int32_t k, q, off, n;
} SEntry;

typedef struct {
    SEntry *e;
    int32_t n, cap;
    int32_t *slot;   /* hash (k, q) -> entry index + 1 */
    int32_t scap;
    IVec pool;
} ScanBuilder;

static void
sb_free(ScanBuilder *b)
{
    PyMem_Free(b->e);
    PyMem_Free(b->slot);
    ivec_free(&b->pool);
    memset(b, 0, sizeof(*b));
}

/* empty, keeping the memory (for the next step of a walk) */
static void
sb_reset(ScanBuilder *b)
{
    b->n = 0;
    b->pool.n = 0;
    if (b->slot)
        memset(b->slot, 0, (size_t)b->scap * sizeof(int32_t));
}

static int
sb_rehash(ScanBuilder *b, int32_t cap)
{
    int32_t *slot = PyMem_Calloc((size_t)cap, sizeof(int32_t));
    if (!slot) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t i = 0; i < b->n; i++) {
        uint64_t key = ((uint64_t)(uint32_t)b->e[i].k << 32) | (uint32_t)b->e[i].q;
        size_t p = hmix(key) & (size_t)(cap - 1);
        while (slot[p])
            p = (p + 1) & (size_t)(cap - 1);
        slot[p] = i + 1;
    }
    PyMem_Free(b->slot);
    b->slot = slot;
    b->scap = cap;
    return 0;
}

/* add sorted, distinct origins[0..n) to the scan (k, q) (origins must not point into the
 * builder's own pool) */
static int
sb_add(ScanBuilder *b, int32_t k, int32_t q, const int32_t *origins, int32_t n)
{
    if ((b->n + 1) * 2 > b->scap && sb_rehash(b, b->scap ? b->scap * 2 : 32) < 0)
        return -1;
    uint64_t key = ((uint64_t)(uint32_t)k << 32) | (uint32_t)q;
    size_t mask = (size_t)b->scap - 1, p = hmix(key) & mask;
    SEntry *e = NULL;
    for (; b->slot[p]; p = (p + 1) & mask) {
        SEntry *c = &b->e[b->slot[p] - 1];
        if (c->k == k && c->q == q) {
            e = c;
            break;
        }
    }
    if (!e) {
        if (b->n == b->cap) {
            int32_t cap = b->cap ? b->cap * 2 : 16;
            SEntry *ne = PyMem_Realloc(b->e, (size_t)cap * sizeof(SEntry));
            if (!ne) {
                PyErr_NoMemory();
                return -1;
            }
            b->e = ne;
            b->cap = cap;
        }
        if (ivec_reserve(&b->pool, n) < 0)
            return -1;
        e = &b->e[b->n];
        e->k = k;
        e->q = q;
        e->off = (int32_t)b->pool.n;
        e->n = n;
        memcpy(b->pool.a + b->pool.n, origins, (size_t)n * sizeof(int32_t));
        b->pool.n += n;
        b->slot[p] = ++b->n;
        return 0;
    }
    /* the entry's run is last in the pool and the new origins all come after it: append */
    if (e->off + e->n == b->pool.n && (!e->n || b->pool.a[e->off + e->n - 1] < origins[0])) {
        if (ivec_reserve(&b->pool, n) < 0)
            return -1;
        memcpy(b->pool.a + b->pool.n, origins, (size_t)n * sizeof(int32_t));
        b->pool.n += n;
        e->n += n;
        return 0;
    }
    /* merge the two sorted runs into a fresh run at the end of the pool */
    if (ivec_reserve(&b->pool, e->n + n) < 0)
        return -1;
    const int32_t *old = b->pool.a + e->off;
    int32_t *dst = b->pool.a + b->pool.n;
    int32_t i = 0, j = 0, m = e->n, out = 0;
    while (i < m || j < n) {
        int32_t x;
        if (j >= n || (i < m && old[i] < origins[j]))
            x = old[i++];
        else if (i >= m || origins[j] < old[i])
            x = origins[j++];
        else {
            x = old[i++];
            j++;
        }
        dst[out++] = x;
    }
    e->off = (int32_t)b->pool.n;
    e->n = out;
    b->pool.n += out;
    return 0;
}

/* the order of kernel items: (symbol after the dot, item, origin) */
static inline int
kitem_less(const KItem *x, const KItem *y)
{
    if (x->sym != y->sym)
        return x->sym < y->sym;
    if (x->it != y->it)
        return x->it < y->it;
    return x->origin < y->origin;
}

static int
cmp_kitem(const void *a, const void *b)
{
    return kitem_less(a, b) ? -1 : kitem_less(b, a);
}

/* kernel items in (sym, it, origin) order: insertion sort for the usual few dozen (a
 * closure lists them mostly grouped already), qsort beyond */
static void
sort_kitems(KItem *a, int32_t n)
{
    if (n > 64) {
        qsort(a, (size_t)n, sizeof(KItem), cmp_kitem);
        return;
    }
    for (int32_t i = 1; i < n; i++) {
        KItem x = a[i];
        int32_t j = i;
        while (j > 0 && kitem_less(&x, &a[j - 1])) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* a set of n_items kernel items (filled in by the caller), a prediction and built scans */
static Set *
set_with_scans(Tables *t, int32_t n_items, Pred *pred, const ScanBuilder *b)
{
    Py_ssize_t n_origins = 0;
    for (int32_t i = 0; i < b->n; i++)
        n_origins += b->e[i].n;
    Set *s = set_alloc(t, n_items, b->n, n_origins);
    if (!s)
        return NULL;
    s->pred = pred;
    int32_t off = 0;
    for (int32_t i = 0; i < b->n; i++) {
        const SEntry *e = &b->e[i];
        s->scans[i].lexeme = e->k;
        s->scans[i].state = e->q;
        s->scans[i].off = off;
        s->scans[i].n = e->n;
        memcpy(s->origins + off, b->pool.a + e->off, (size_t)e->n * sizeof(int32_t));
        off += e->n;
    }
    return s;
}

/* a set from kernel items (pairs it, origin), a prediction and built scans */
static Set *
set_build(Tables *t, const IVec *items, Pred *pred, const ScanBuilder *b)
{
    int32_t n_items = items ? (int32_t)(items->n / 2) : 0;
    Set *s = set_with_scans(t, n_items, pred, b);
    if (!s)
        return NULL;
    for (int32_t i = 0; i < n_items; i++) {
        s->items[i].it = items->a[2 * i];
        s->items[i].origin = items->a[2 * i + 1];
        s->items[i].sym = t->item_next[s->items[i].it];
    }
    if (n_items > 1)
        sort_kitems(s->items, n_items);
    return s;
}

/* Closures remembered during a walk. The walk's chart is the Python list, fixed for the
 * walk, then the sets the walk stacks on it, which change as it goes. An origin is written
 * relative to the position `here` of the set being made: one in the list as itself (>= 0),
 * one on the stack as its distance back (< 0) with the kernel id of the set there. A
 * kernel (the kernel items and the prediction of a stacked set, its origins so written
 * relative to that set) gets an id the first time it is seen; equal ids, equal kernels. A
 * step's completion and closure read nothing of the sets at the ended lexemes' origins but
 * their kernels (and, through their items, the kernels further back), so the lexemes ended
 * with their origins so written close the same way at any position of the walk, every
 * origin on the stack shifted with `here`. */
typedef struct {
    uint64_t hash;      /* first: the entry of a PtrTable */
    int32_t n, kid;
    Pred *pred;
    int32_t *data;      /* n ints: (item, origin, kernel id or -1) per kernel item */
} Kernel;

typedef struct {
    uint64_t hash;      /* first: the entry of a PtrTable */
    int32_t n_key, n_items, n_started, kid, kabs;
    int read;           /* the closure read a far set (Chart.read) */
    int start_ignored;  /* the ignored lexemes start here */
    Pred *pred;
    int32_t *key;       /* per lexeme ended: lexeme, number of origins, each origin written
                         * as two ints (see step_core) */
    KItem *items;       /* sorted, origins relative (see above) */
    int32_t *started;   /* lexemes started by the kernel items (those of pred apart) */
} Closed;

/* the closures and kernels of a walk are forgotten past this many ints (ids are not reused) */
#define CLOSED_INTS (2 << 20)

/* The buffers of a step, kept across the steps of a walk (a step finishes, its set copied
 * out, before the next one starts). */
typedef struct {
    ScanBuilder b;
    IVec agenda, items, roots;
    HSet seen;
    uint64_t *is_root;
    /* in a walk (closed_below > 0: the length of the chart's list), the closures (Closed)
     * and the kernels (Kernel) seen, and the next kernel id (0: the empty kernel) */
    PtrTable closed, kernels;
    Py_ssize_t closed_below;
    int closed_check;   /* tests: make every remembered closure afresh too, and compare */
    size_t closed_ints;
    int32_t next_kid;
    IVec enc;
    IVec ends;          /* step_core: the scans that end their lexeme */
    int step_closed;    /* step_core: its last step ended a lexeme (made a closure) */
    /* closure() leaves: its roots from n_nt on are lexemes (the rest nonterminals), and
     * whether it started the ignored lexemes */
    Py_ssize_t n_nt;
    int start_ignored;
} Scratch;

static void
closed_clear(Scratch *sc)
{
    ptab_free_all(&sc->closed);
    ptab_free_all(&sc->kernels);
    sc->closed_ints = 0;
}

/* origin `o` written relative to `here` onto sc->enc (two ints); 1: the set there has no
 * kernel id (the closure is not remembered) */
static int
enc_origin(Scratch *sc, Chart *c, int32_t here, int32_t o)
{
    int32_t a = o, b = -1;
    if (o >= sc->closed_below) {
        if (o - c->n_list < 0 || o - c->n_list >= c->n_stack)
            return 1;
        b = c->stack[o - c->n_list]->kid;
        if (b < 0)
            return 1;
        a = o - here;
    }
    if (ivec_push2(&sc->enc, a, b) < 0)
        return -1;
    return 0;
}

/* the kernel id of a set made at `here` in a walk: looked up, or given; -1 on an error,
 * -2 when a set it refers to has none */
static int32_t
kernel_id(Scratch *sc, Chart *c, Set *s, int32_t here)
{
    s->kabs = 1;
    for (int32_t i = 0; i < s->n_items && s->kabs; i++)
        s->kabs = s->items[i].origin < sc->closed_below;
    if (!s->n_items && !s->pred)
        return 0;
    sc->enc.n = 0;
    for (int32_t i = 0; i < s->n_items; i++) {
        if (ivec_push(&sc->enc, s->items[i].it) < 0)
            return -1;
        int r = enc_origin(sc, c, here, s->items[i].origin);
        if (r)
            return r < 0 ? -1 : -2;
    }
    int32_t n = (int32_t)sc->enc.n;
    uint64_t h = ints_hash(sc->enc.a, n) ^ (uint64_t)(uintptr_t)s->pred * 0x9e3779b97f4a7c15ULL;
    PtrTable *pt = &sc->kernels;
    if (pt->cap) {
        size_t mask = pt->cap - 1;
        for (size_t p = hmix(h) & mask; pt->slot[p]; p = (p + 1) & mask) {
            Kernel *k = pt->slot[p];
            if (k->hash == h && k->n == n && k->pred == s->pred &&
                !memcmp(k->data, sc->enc.a, (size_t)n * sizeof(int32_t)))
                return k->kid;
        }
    }
    Kernel *k = PyMem_Malloc(sizeof(Kernel) + (size_t)n * sizeof(int32_t));
    if (!k) {
        PyErr_NoMemory();
        return -1;
    }
    k->hash = h;
    k->n = n;
    k->kid = sc->next_kid++;
    k->pred = s->pred;
    k->data = (int32_t *)(k + 1);
    memcpy(k->data, sc->enc.a, (size_t)n * sizeof(int32_t));
    if (ptab_insert(pt, k) < 0) {
        PyMem_Free(k);
        return -1;
    }
    sc->closed_ints += (size_t)n;
    return k->kid;
}

static void
scratch_free(Scratch *sc)
{
    sb_free(&sc->b);
    ivec_free(&sc->agenda);
    ivec_free(&sc->items);
    ivec_free(&sc->roots);
    PyMem_Free(sc->seen.keys);
    PyMem_Free(sc->is_root);
    closed_clear(sc);
    ivec_free(&sc->enc);
    ivec_free(&sc->ends);
    memset(sc, 0, sizeof(*sc));
}

/* Scans at `here` for the lexemes that start there: lex[0..n) (each minus `base`), those
 * `pred` predicts, and the ignored ones when `ignored`. */
static int
start_lexemes(Tables *t, ScanBuilder *b, const int32_t *lex, Py_ssize_t n, int32_t base, const Pred *pred,
              int ignored, int32_t here)
{
    for (Py_ssize_t x = 0; x < n; x++)
        if (sb_add(b, lex[x] - base, 0, &here, 1) < 0)
            return -1;
    for (int32_t x = 0; pred && x < pred->n_lex; x++)
        if (sb_add(b, pred->lex[x], 0, &here, 1) < 0)
            return -1;
    for (int32_t x = 0; ignored && x < t->n_ignore; x++)
        if (sb_add(b, t->ignore[x], 0, &here, 1) < 0)
            return -1;
    return 0;
}

/* Complete from the agenda (kernel items) and predict, into the set at position
 * len(chart); sc->b holds the scans so far and receives the lexemes started here. */
static Set *
closure(Tables *t, Chart *chart, Scratch *sc)
{
    Py_ssize_t j = chart_len(chart);
    int32_t N = t->N;
    IVec *agenda = &sc->agenda, *items = &sc->items, *roots = &sc->roots;
    ScanBuilder *b = &sc->b;
    HSet *seen = &sc->seen;
    items->n = roots->n = 0;
    if (seen->n) {   /* (left over by an error) */
        memset(seen->keys, 0xff, seen->cap * sizeof(uint64_t));
        seen->n = 0;
    }
    size_t seen_cap = seen->cap;
    if (!sc->is_root) {
        size_t words = ((size_t)t->n_sym + 63) / 64;
        sc->is_root = PyMem_Calloc(words ? words : 1, sizeof(uint64_t));
        if (!sc->is_root) {
            PyErr_NoMemory();
            return NULL;
        }
    }
    uint64_t *is_root = sc->is_root;
    Set *out = NULL;
    int32_t here = (int32_t)j;
    while (agenda->n) {
        int32_t origin = agenda->a[--agenda->n];
        int32_t it = agenda->a[--agenda->n];
        int r = hset_add(seen, ((uint64_t)(uint32_t)it << 32) | (uint32_t)origin);
        if (r < 0)
            goto done;
        if (!r)
            continue;
        if (ivec_push2(items, it, origin) < 0)
            goto done;
        int32_t sym = t->item_next[it];
        if (sym == END) {
            if (origin >= j)   /* only the start item, completed at position 0 */
                continue;
            Set *s = get_set(chart, origin);
            if (!s || advance_over(agenda, s, t->item_lhs[it], origin) < 0)
                goto done;
            continue;
        }
        if (!(is_root[sym >> 6] >> (sym & 63) & 1)) {
            is_root[sym >> 6] |= (uint64_t)1 << (sym & 63);
            if (ivec_push(roots, sym) < 0)
                goto done;
        }
        if (t->nullable[sym] && ivec_push2(agenda, it + 1, origin) < 0)
            goto done;
    }
    Pred *pred = NULL;
    Py_ssize_t n_nt = 0;
    if (roots->n) {
        qsort(roots->a, (size_t)roots->n, sizeof(int32_t), cmp_int);
        while (n_nt < roots->n && roots->a[n_nt] < N)
            n_nt++;
        if (n_nt && !(pred = prediction(t, roots->a, (int32_t)n_nt)))
            goto done;
    }
    sc->n_nt = n_nt;
    sc->start_ignored = 0;
    if (items->n) {
        if (t->n_ignore) {
            /* ignored lexemes start where an item outside split lexemes is */
            int start = !t->any_glued;
            for (Py_ssize_t x = 0; !start && x < items->n; x += 2)
                start = !t->glued[items->a[x]];
            sc->start_ignored = start;
        }
        if (start_lexemes(t, b, roots->a + n_nt, roots->n - n_nt, N, pred, sc->start_ignored, here) < 0)
            goto done;
    }
    out = set_build(t, items, pred, b);
    /* empty `seen` for the next closure: the keys added are the items, and removed in the
     * reverse order of their adding each is found where it was put (the slots probed
     * before it still hold what they held then); after a growth, the whole table */
    if (seen->cap == seen_cap && (size_t)items->n / 2 == seen->n) {
        size_t mask = seen->cap - 1;
        for (Py_ssize_t x = items->n - 2; x >= 0; x -= 2) {
            uint64_t k = ((uint64_t)(uint32_t)items->a[x] << 32) | (uint32_t)items->a[x + 1];
            size_t p = hmix(k) & mask;
            while (seen->keys[p] != k)
                p = (p + 1) & mask;
            seen->keys[p] = HEMPTY;
        }
        seen->n = 0;
    }
done:
    for (Py_ssize_t x = 0; x < roots->n; x++)
        is_root[roots->a[x] >> 6] = 0;
    agenda->n = 0;
    return out;
}

/* A lexeme matched from origins[0..n) has ended: onto the agenda go the items it advances,
 * or, for an ignored lexeme, the items of the sets where it started. */
static int
complete(Tables *t, IVec *agenda, Chart *chart, int32_t k, const int32_t *origins, int32_t n)
{
    for (int32_t x = 0; x < n; x++) {
        Set *s = get_set(chart, origins[x]);
        if (!s)
            return -1;
        if (t->is_ignore[k]) {
            for (int32_t i = 0; i < s->n_items; i++) {
                if (t->any_glued && t->glued[s->items[i].it])
                    continue;   /* no parse resumes inside a split lexeme */
                if (ivec_push2(agenda, s->items[i].it, s->items[i].origin) < 0)
                    return -1;
            }
        } else if (advance_over(agenda, s, t->N + k, origins[x]) < 0) {
            return -1;
        }
    }
    return 0;
}

static void
allowed(Set *s)
{
    if (s->nb_known)
        return;
    uint64_t nb[4] = {0, 0, 0, 0};
    Tables *t = s->tables;
    for (int32_t i = 0; i < s->n_scans; i++) {
        const uint64_t *f = first_bytes(&t->lex[s->scans[i].lexeme], s->scans[i].state);
        nb[0] |= f[0];
        nb[1] |= f[1];
        nb[2] |= f[2];
        nb[3] |= f[3];
    }
    memcpy(s->nb, nb, sizeof(nb));
    s->nb_known = 1;
}

/* ---------------------------------------------------------------------------------------
 * the tables' methods
 */

/* The set a remembered closure makes at `here`, with the scans in sc->b. */
static Set *
closed_apply(Tables *t, Chart *chart, Scratch *sc, const Closed *e, int32_t here)
{
    chart->read |= e->read;
    if (start_lexemes(t, &sc->b, e->started, e->n_started, 0, e->pred, e->start_ignored, here) < 0)
        return NULL;
    Set *out = set_with_scans(t, e->n_items, e->pred, &sc->b);
    if (!out)
        return NULL;
    memcpy(out->items, e->items, (size_t)e->n_items * sizeof(KItem));
    for (int32_t x = 0; x < e->n_items; x++)
        if (out->items[x].origin < 0)
            out->items[x].origin += here;
    out->kid = e->kid;
    out->kabs = e->kabs;
    return out;
}

/* whether remembered closure e says what `out`, just made at `here` by closure() (what
 * it started still in sc), says; `read`: that step read a far set */
static int
closed_agrees(Tables *t, Scratch *sc, const Closed *e, const Set *out, int32_t here, int read)
{
    if (e->n_items != out->n_items || e->pred != out->pred || e->read != read)
        return 0;
    for (int32_t x = 0; x < e->n_items; x++) {
        int32_t o = e->items[x].origin < 0 ? e->items[x].origin + here : e->items[x].origin;
        if (e->items[x].it != out->items[x].it || e->items[x].sym != out->items[x].sym || o != out->items[x].origin)
            return 0;
    }
    if (e->n_started != sc->roots.n - sc->n_nt || e->start_ignored != sc->start_ignored)
        return 0;
    for (int32_t y = 0; y < e->n_started; y++)
        if (e->started[y] != sc->roots.a[sc->n_nt + y] - t->N)
            return 0;
    return 1;
}

/* the closure remembered under the key in sc->enc (hash h), or NULL */
static Closed *
closed_find(Scratch *sc, uint64_t h)
{
    PtrTable *pt = &sc->closed;
    if (!pt->cap)
        return NULL;
    int32_t n_key = (int32_t)sc->enc.n;
    size_t mask = pt->cap - 1;
    for (size_t p = hmix(h) & mask; pt->slot[p]; p = (p + 1) & mask) {
        Closed *e = pt->slot[p];
        if (e->hash == h && e->n_key == n_key && !memcmp(e->key, sc->enc.a, (size_t)n_key * sizeof(int32_t)))
            return e;
    }
    return NULL;
}

/* Remember `out`, just made at `here` by closure() (what it started still in sc), under
 * the key in sc->enc (hash h); `read`: the step read a far set. 0, or -1 on an error. */
static int
closed_store(Tables *t, Chart *chart, Scratch *sc, uint64_t h, Set *out, int32_t here, int read)
{
    int32_t n_key = (int32_t)sc->enc.n, n_started = (int32_t)(sc->roots.n - sc->n_nt);
    size_t ints = (size_t)n_key + 3 * (size_t)out->n_items + (size_t)n_started;
    Closed *e = PyMem_Malloc(sizeof(Closed) + ints * sizeof(int32_t));
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    e->hash = h;
    e->n_key = n_key;
    e->n_items = out->n_items;
    e->n_started = n_started;
    e->read = read;
    e->start_ignored = sc->start_ignored;
    e->pred = out->pred;
    e->items = (KItem *)(e + 1);
    e->key = (int32_t *)(e->items + out->n_items);
    e->started = e->key + n_key;
    memcpy(e->key, sc->enc.a, (size_t)n_key * sizeof(int32_t));
    memcpy(e->items, out->items, (size_t)out->n_items * sizeof(KItem));
    for (int32_t x = 0; x < out->n_items; x++)
        if (e->items[x].origin >= sc->closed_below)
            e->items[x].origin -= here;
    for (int32_t y = 0; y < n_started; y++)
        e->started[y] = sc->roots.a[sc->n_nt + y] - t->N;
    int32_t kid = kernel_id(sc, chart, out, here);   /* (overwrites sc->enc) */
    if (kid < 0) {
        PyMem_Free(e);
        return kid == -1 ? -1 : 0;
    }
    e->kid = out->kid = kid;
    e->kabs = out->kabs;
    if (sc->closed_ints + ints > CLOSED_INTS)
        closed_clear(sc);
    if (ptab_insert(&sc->closed, e) < 0) {
        PyMem_Free(e);
        return -1;
    }
    sc->closed_ints += ints;
    return 0;
}

/* The set after `byte` at the end of the chart: *out (a new reference), or NULL when no
 * parse survives it; -1 on an error. */
static int
step_core(Tables *t, Chart *chart, int byte, Set **out, Scratch *sc)
{
    *out = NULL;
    Py_ssize_t n = chart_len(chart);
    if (!n) {
        PyErr_SetString(PyExc_ValueError, "step() on an empty chart");
        return -1;
    }
    Set *cur = get_set(chart, n - 1);
    if (!cur)
        return -1;
    allowed(cur);
    if (!(cur->nb[byte >> 6] >> (byte & 63) & 1))
        return 0;
    Py_INCREF(cur);
    ScanBuilder *b = &sc->b;
    sb_reset(b);
    sc->agenda.n = 0;
    int rc = -1;
    /* in a walk, the lexemes ended here (lexeme, number of origins, each origin written
     * relative to here) key the closure they make */
    int32_t here = (int32_t)n, ended = 0;
    int memo = sc->closed_below > 0;
    Closed *checked = NULL;
    sc->enc.n = sc->ends.n = 0;
    sc->step_closed = 0;
    for (int32_t i = 0; i < cur->n_scans; i++) {
        const Scan *s = &cur->scans[i];
        Lex *L = &t->lex[s->lexeme];
        int32_t q2 = L->trans[256 * (size_t)s->state + byte];
        if (q2 < 0)
            continue;
        const int32_t *origins = cur->origins + s->off;
        if (sb_add(b, s->lexeme, q2, origins, s->n) < 0)
            goto done;
        if (!L->accept[q2])
            continue;
        ended = 1;
        if (ivec_push(&sc->ends, i) < 0)
            goto done;
        if (memo) {
            if (ivec_push2(&sc->enc, s->lexeme, s->n) < 0)
                goto done;
            Py_ssize_t at = sc->enc.n;
            for (int32_t x = 0; memo && x < s->n; x++) {
                int32_t o = origins[x];
                if (t->is_ignore[s->lexeme] && o >= sc->closed_below && o - chart->n_list < chart->n_stack &&
                    chart->stack[o - chart->n_list]->kabs && chart->stack[o - chart->n_list]->kid >= 0) {
                    /* an ignored lexeme's completion reads the kernel items of the sets it
                     * started from, whose origins (in the chart list) do not move with
                     * them: a stacked origin is its kernel, wherever it is, and once is
                     * enough (a run of blanks starts one at every byte) */
                    int32_t kid = chart->stack[o - chart->n_list]->kid;
                    int again = 0;
                    for (Py_ssize_t y = at; y < sc->enc.n && !again; y += 2)
                        again = sc->enc.a[y] == INT32_MIN && sc->enc.a[y + 1] == kid;
                    if (!again && ivec_push2(&sc->enc, INT32_MIN, kid) < 0)
                        goto done;
                    continue;
                }
                int r = enc_origin(sc, chart, here, o);
                if (r < 0)
                    goto done;
                memo = !r;
            }
            sc->enc.a[at - 1] = (int32_t)((sc->enc.n - at) / 2);
        }
    }
    if (b->n && !ended) {
        if (!(*out = set_build(t, NULL, NULL, b)))
            goto done;
        if (sc->closed_below) {
            (*out)->kid = 0;   /* the empty kernel */
            (*out)->kabs = 1;
        }
    } else if (b->n) {
        uint64_t h = 0;
        sc->step_closed = 1;
        if (memo) {
            h = ints_hash(sc->enc.a, (int32_t)sc->enc.n);
            Closed *e = closed_find(sc, h);
            if (e && !sc->closed_check) {
                *out = closed_apply(t, chart, sc, e, here);
                rc = *out ? 0 : -1;
                goto done;
            }
            checked = e;
        }
        int read_before = chart->read;
        chart->read = 0;
        for (Py_ssize_t x = 0; x < sc->ends.n; x++) {
            const Scan *s = &cur->scans[sc->ends.a[x]];
            if (complete(t, &sc->agenda, chart, s->lexeme, cur->origins + s->off, s->n) < 0)
                goto done;
        }
        *out = closure(t, chart, sc);
        int read = chart->read;
        chart->read |= read_before;
        if (!*out)
            goto done;
        if (checked) {
            if (!closed_agrees(t, sc, checked, *out, here, read)) {
                PyErr_SetString(PyExc_RuntimeError, "a remembered closure differs from the one made afresh");
                Py_CLEAR(*out);
                goto done;
            }
        } else if (memo && closed_store(t, chart, sc, h, *out, here, read) < 0) {
            Py_CLEAR(*out);
            goto done;
        }
    }
    rc = 0;
done:
    Py_DECREF(cur);
    return rc;
}

static PyObject *
tables_step(Tables *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "step(chart: list, byte: int)");
        return NULL;
    }
    long byte = PyLong_AsLong(args[1]);
    if (byte == -1 && PyErr_Occurred())
        return NULL;
    if (byte < 0 || byte > 255) {
        PyErr_SetString(PyExc_ValueError, "a byte is 0..255");
        return NULL;
    }
    Chart chart;
    chart_of_list(&chart, t, args[0]);
    Set *out;
    Scratch sc;
    memset(&sc, 0, sizeof(sc));
    int rc = step_core(t, &chart, (int)byte, &out, &sc);
    scratch_free(&sc);
    if (rc < 0)
        return NULL;
    if (!out)
        Py_RETURN_NONE;
    return (PyObject *)out;
}

/* initial_set(start_item): the set at position 0 */
static PyObject *
tables_initial_set(Tables *t, PyObject *arg)
{
    long first = PyLong_AsLong(arg);
    if (first == -1 && PyErr_Occurred())
        return NULL;
    if (first < 0 || first >= t->n_items_total) {
        PyErr_SetString(PyExc_ValueError, "start item out of range");
        return NULL;
    }
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    Chart chart;
    chart_of_list(&chart, t, list);
    Scratch sc;
    memset(&sc, 0, sizeof(sc));
    PyObject *out = NULL;
    if (ivec_push2(&sc.agenda, (int32_t)first, 0) == 0)
        out = (PyObject *)closure(t, &chart, &sc);
    scratch_free(&sc);
    Py_DECREF(list);
    return out;
}

/* a bitmap over the chart's list marking the positions far_o lists (NULL and no error
 * for None) */
static uint8_t *
far_bitmap(Chart *c, PyObject *far_o, int *error)
{
    *error = 0;
    if (far_o == Py_None)
        return NULL;
    Py_ssize_t n_far;
    int32_t *idx = int_array(far_o, &n_far, "far");
    uint8_t *far = idx ? PyMem_Calloc((size_t)c->n_list + 1, 1) : NULL;
    if (idx && !far)
        PyErr_NoMemory();
    for (Py_ssize_t i = 0; far && i < n_far; i++) {
        if (idx[i] < 0 || idx[i] >= c->n_list) {
            PyErr_SetString(PyExc_ValueError, "far: a position outside the chart");
            PyMem_Free(far);
            far = NULL;
            break;
        }
        far[idx[i]] = 1;
    }
    PyMem_Free(idx);
    *error = far == NULL;
    return far;
}

/* The set that completing lexeme k from the origins `origins_o` makes right after the
 * chart `list` (at position len(list)), closed; NULL with an exception set. `far_o` (None
 * or positions of the chart, see far_bitmap): *read says whether that work read one. */
static Set *
completed_set(Tables *t, PyObject *list, int k, PyObject *origins_o, PyObject *far_o, int *read)
{
    Chart chart;
    chart_of_list(&chart, t, list);
    if (k < 0 || k >= t->n_lex) {
        PyErr_SetString(PyExc_ValueError, "lexeme out of range");
        return NULL;
    }
    int error;
    uint8_t *far = far_bitmap(&chart, far_o, &error);
    if (error)
        return NULL;
    chart.far = far;
    Py_ssize_t n;
    int32_t *origins = int_array(origins_o, &n, "origins");
    if (!origins) {
        PyMem_Free(far);
        return NULL;
    }
    qsort(origins, (size_t)n, sizeof(int32_t), cmp_int);
    Scratch sc;
    memset(&sc, 0, sizeof(sc));
    Set *s = NULL;
    if (complete(t, &sc.agenda, &chart, k, origins, (int32_t)n) == 0)
        s = closure(t, &chart, &sc);
    *read = chart.read;
    PyMem_Free(origins);
    PyMem_Free(far);
    scratch_free(&sc);
    return s;
}

/* complete_closure(chart, lexeme, origins, far=None): complete `lexeme` from `origins`
 * right after chart and close the result (the work of a step that ends it). What matters
 * are the reads of the chart's sets (see earley.ParserTables.completes_within): with `far`
 * (positions of the chart), whether that work reads none of them; without, None. */
static PyObject *
tables_complete_closure(Tables *t, PyObject *args)
{
    PyObject *list, *origins_o, *far_o = Py_None;
    int k, read;
    if (!PyArg_ParseTuple(args, "O!iO|O", &PyList_Type, &list, &k, &origins_o, &far_o))
        return NULL;
    Set *s = completed_set(t, list, k, origins_o, far_o, &read);
    if (!s)
        return NULL;
    Py_DECREF(s);
    if (far_o == Py_None)
        Py_RETURN_NONE;
    return PyBool_FromLong(!read);
}

/* started_after(chart, lexeme, origins) -> bytes: the lexemes that start right after
 * `lexeme`, matched from `origins`, ends, as a bit set (ceil(n_lex / 64) native uint64
 * words): the scans in their first state of the set that completing it makes (the same
 * wherever inside a token it ends). */
static PyObject *
tables_started_after(Tables *t, PyObject *args)
{
    PyObject *list, *origins_o;
    int k, read;
    if (!PyArg_ParseTuple(args, "O!iO", &PyList_Type, &list, &k, &origins_o))
        return NULL;
    Set *st = completed_set(t, list, k, origins_o, Py_None, &read);
    if (!st)
        return NULL;
    int32_t here = (int32_t)PyList_GET_SIZE(list);
    Py_ssize_t n_words = ((Py_ssize_t)t->n_lex + 63) / 64;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n_words * (Py_ssize_t)sizeof(uint64_t));
    if (out) {
        uint64_t *bits = (uint64_t *)PyBytes_AS_STRING(out);
        memset(bits, 0, (size_t)n_words * sizeof(uint64_t));
        for (int32_t i = 0; i < st->n_scans; i++) {
            const Scan *x = &st->scans[i];
            int fresh = 0;
            for (int32_t o = 0; o < x->n && !fresh; o++)
                fresh = st->origins[x->off + o] == here;
            if (x->state == 0 && fresh)
                bits[x->lexeme >> 6] |= (uint64_t)1 << (x->lexeme & 63);
        }
    }
    Py_DECREF(st);
    return out;
}

/* position o (0 .. j) onto `next` if not yet `inside`; -1 on an error */
static inline int
reach(IVec *next, uint8_t *inside, Py_ssize_t j, int32_t o)
{
    if (o < 0 || o > j || inside[o])
        return 0;
    inside[o] = 1;
    return ivec_push(next, o);
}

/* horizon(chart, j, depth): the positions exactly `depth` origin links away from set j
 * (through the origins of its kernel items and scans), ascending; [] when every set
 * within reach is nearer (see earley.tracked_view) */
static PyObject *
tables_horizon(Tables *t, PyObject *args)
{
    PyObject *list;
    Py_ssize_t j;
    int depth;
    if (!PyArg_ParseTuple(args, "O!ni", &PyList_Type, &list, &j, &depth))
        return NULL;
    Chart chart;
    chart_of_list(&chart, t, list);
    if (j < 0 || j >= chart.n_list || depth < 0) {
        PyErr_SetString(PyExc_ValueError, "horizon(): j outside the chart or a negative depth");
        return NULL;
    }
    uint8_t *inside = PyMem_Calloc((size_t)j + 1, 1);
    IVec frontier = {0}, next = {0};
    PyObject *out = NULL;
    if (!inside) {
        PyErr_NoMemory();
        return NULL;
    }
    inside[j] = 1;
    if (ivec_push(&frontier, (int32_t)j) < 0)
        goto done;
    for (int d = 0; d < depth && frontier.n; d++) {
        next.n = 0;
        for (Py_ssize_t f = 0; f < frontier.n; f++) {
            Set *st = get_set(&chart, frontier.a[f]);
            if (!st)
                goto done;
            for (int32_t i = 0; i < st->n_items; i++)
                if (reach(&next, inside, j, st->items[i].origin) < 0)
                    goto done;
            Py_ssize_t n_origins = st->n_scans ? st->scans[st->n_scans - 1].off + st->scans[st->n_scans - 1].n : 0;
            for (Py_ssize_t i = 0; i < n_origins; i++)
                if (reach(&next, inside, j, st->origins[i]) < 0)
                    goto done;
        }
        IVec tmp = frontier;
        frontier = next;
        next = tmp;
    }
    qsort(frontier.a, (size_t)frontier.n, sizeof(int32_t), cmp_int);
    out = PyList_New(frontier.n);
    for (Py_ssize_t i = 0; out && i < frontier.n; i++) {
        PyObject *x = PyLong_FromLong(frontier.a[i]);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
done:
    PyMem_Free(inside);
    ivec_free(&frontier);
    ivec_free(&next);
    return out;
}

/* inside_lexemes(scans): the set of a position inside lexemes only, from a dict
 * (lexeme, state) -> origins */
static PyObject *
tables_inside_lexemes(Tables *t, PyObject *scans)
{
    if (!PyDict_Check(scans)) {
        PyErr_SetString(PyExc_TypeError, "inside_lexemes() takes a dict");
        return NULL;
    }
    ScanBuilder b = {0};
    PyObject *key, *value, *out = NULL;
    Py_ssize_t pos = 0;
    while (PyDict_Next(scans, &pos, &key, &value)) {
        int k, q;
        if (!PyArg_ParseTuple(key, "ii", &k, &q))
            goto done;
        if (k < 0 || k >= t->n_lex || q < 0 || q >= t->lex[k].n_states) {
            PyErr_SetString(PyExc_ValueError, "scan out of range");
            goto done;
        }
        Py_ssize_t n;
        int32_t *origins = int_array(value, &n, "origins");
        if (!origins)
            goto done;
        qsort(origins, (size_t)n, sizeof(int32_t), cmp_int);
        Py_ssize_t m = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (!m || origins[m - 1] != origins[i])
                origins[m++] = origins[i];
        int r = sb_add(&b, k, q, origins, (int32_t)m);
        PyMem_Free(origins);
        if (r < 0)
            goto done;
    }
    out = (PyObject *)set_build(t, NULL, NULL, &b);
done:
    sb_free(&b);
    return out;
}

/* a bit set of `n` uint64 words (bit b of the set: bit b % 64 of word b / 64) as a
 * non-negative Python int */
static PyObject *
int_of_words(const uint64_t *words, Py_ssize_t n)
{
    unsigned char small[64], *bytes = n * 8 <= (Py_ssize_t)sizeof(small) ? small : PyMem_Malloc((size_t)n * 8);
    if (!bytes)
        return PyErr_NoMemory();
    for (Py_ssize_t w = 0; w < n; w++)
        for (int i = 0; i < 8; i++)
            bytes[8 * w + i] = (unsigned char)(words[w] >> (8 * i));
    PyObject *out = _PyLong_FromByteArray(bytes, (size_t)n * 8, 1, 0);
    if (bytes != small)
        PyMem_Free(bytes);
    return out;
}

static PyObject *
nb_int(Set *s)
{
    if (!s->py_nb) {
        allowed(s);
        s->py_nb = int_of_words(s->nb, 4);
        if (!s->py_nb)
            return NULL;
    }
    Py_INCREF(s->py_nb);
    return s->py_nb;
}

static PyObject *
tables_allowed_bytes(Tables *t, PyObject *o)
{
    Set *s = as_set(t, o);
    return s ? nb_int(s) : NULL;
}

static PyObject *
tables_is_accepting(Tables *t, PyObject *o)
{
    Set *s = as_set(t, o);
    if (!s)
        return NULL;
    for (int32_t i = 0; i < s->n_items && s->items[i].sym == END; i++)
        if (s->items[i].it == t->accept_item && s->items[i].origin == 0)
            Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

/* ---------------------------------------------------------------------------------------
 * the exit walk: which tokens the parser accepts after the chart
 */

/* A walk's work is counted in tokens looked at (by a node, a pass or a sort), a parser
 * step counting as this many: on this project's machine a step costs about as much as
 * reading that many tokens (measured over the JSONSchemaBench masks with Llama 3's
 * vocabulary), so that work stands for time whatever the mix. */
#define WALK_STEP_WORK 8

typedef struct {
    Tables *t;
    Chart chart;
    const uint8_t *blob;
    const int64_t *off;
    Py_ssize_t n_ranks;
    IVec found, beyond;
    long long steps;   /* parser steps taken */
    long long work;    /* steps (weighted) and tokens looked at: see WALK_STEP_WORK */
    long long limit;   /* stop once work passes it (-1: never) */
    int over;          /* it did: the walk unwinds without an exception and answers None */
    int32_t *pairs;    /* lexeme_pass: the (lexeme, state) pairs of its levels */
    Py_ssize_t cap_pairs;
    Py_ssize_t *level_at;   /* lexeme_pass: where each level starts in pairs */
    uint8_t *ended;    /* lexeme_pass: a lexeme could end inside the token before the level */
    Py_ssize_t cap_levels;
    Scratch sc;        /* the buffers of its steps */
    int fold;          /* fold children with equal sets, step plain runs once (see walk, plain_run) */
    struct Children **kids;   /* per depth of the walk: the children of its node there */
    int32_t n_kids;
    int32_t *tmp;      /* reordering tokens (sort_by_byte, fold) */
    Py_ssize_t cap_tmp;
    uint8_t *tmp_bytes;   /* sort_by_byte: each token's byte */
    Py_ssize_t cap_tmp_bytes;
} Walk;

static inline int
has_byte(const uint64_t *bits, int b)
{
    return (int)(bits[b >> 6] >> (b & 63) & 1);
}

/* whether lexeme k in state q may end right before byte c: it accepts, and c may follow it */
static inline int
ends_before(const Tables *t, int32_t k, int32_t q, int c)
{
    return t->lex[k].accept[q] && has_byte(t->follow + 4 * (size_t)k, c);
}

/* The lexeme pass at `cur` for the tokens rs[0..*n) (which share their first `depth`
 * bytes, the text up to `cur`): a token whose rest keeps one of cur's lexemes alive to its
 * end is allowed (each byte leaves that scan alive, so every step succeeds), one that kills
 * every lexeme without ending one where a byte that may follow it comes next is not; the
 * others (they may end a lexeme inside the token) stay in rs, in order, for the parser.
 *
 * The tokens come in byte order, so a token shares its first bytes with the one before:
 * the pass keeps, for each byte of the current token, the (lexeme, state) pairs still alive
 * after it (a level) and whether a lexeme could have ended before it; the next token
 * resumes at the level where the two part. Each trie edge is crossed once. */
static int
lv_reserve(Walk *w, Py_ssize_t pairs, Py_ssize_t levels)
{
    Py_ssize_t cap_levels = w->cap_levels;
    if (grow((void **)&w->pairs, &w->cap_pairs, 2 * pairs, sizeof(int32_t), 256) < 0 ||
        grow((void **)&w->level_at, &w->cap_levels, levels, sizeof(Py_ssize_t), 64) < 0)
        return -1;
    /* `ended` follows level_at's capacity */
    return grow((void **)&w->ended, &cap_levels, w->cap_levels, 1, 64);
}

/* where a pass resumes for a token (len bytes at data) after the one at prev, whose levels
 * depth .. top are known: at the first byte the two differ */
static inline int32_t
resume_level(const uint8_t *data, int32_t len, const uint8_t *prev, int32_t depth, int32_t top)
{
    int32_t lcp = depth;
    if (prev)
        while (lcp < top && lcp < len && data[lcp] == prev[lcp])
            lcp++;
    return lcp;
}

/* a chain that loops: any number of plain bytes */
#define CHAIN_ROOM_MAX 4096
/* the room of a chain that does not loop is followed this far at most: a counted string
 * counts along one state per character up to its maxLength. Room is only ever used as a
 * sufficient condition (a rest of at most `room` plain bytes stays inside), so a bound
 * stays exact: it costs only tokens with longer plain rests the at-a-glance test (every
 * shipped vocabulary's tokens are at most 128 bytes long). */
#define CHAIN_WALK_MAX 256

/* What a chain walk learned of a state it stepped from: with the bytes of chain `of`,
 * `len` steps lead from it to `to`, and then the chain ends (why 1), loops (why 2), or was
 * not followed further (why 0). The states of a counted string are met in the order they
 * count, each one's walk going over the same states as the last: with the runs each new
 * state's walk jumps to where the last one stopped, so it takes one new step, not
 * CHAIN_WALK_MAX. */
typedef struct Run {
    const Chain *of;
    int32_t to, len;
    uint8_t why;
} Run;

static void
plain_chain(Lex *L, int32_t q, Chain *ch)
{
    const int32_t *row = L->trans + 256 * (size_t)q;
    /* the target most printable ASCII bytes go to */
    int32_t best = -1, best_n = 0;
    for (int b = 0x20; b < 0x7f; b++) {
        int32_t to = row[b];
        if (to < 0 || to == best)
            continue;
        int32_t n = 0;
        for (int c = 0x20; c < 0x7f; c++)
            n += row[c] == to;
        if (n > best_n) {
            best = to;
            best_n = n;
        }
    }
    ch->room = 0;
    memset(ch->plain, 0, 256);
    if (best < 0 || best_n < 8)
        return;
    uint8_t bytes[256];
    int nb = 0;
    for (int b = 0; b < 256; b++)
        if ((ch->plain[b] = row[b] == best))
            bytes[nb++] = (uint8_t)b;
    /* the states stepped from one by one, and the room when there */
    int32_t path[CHAIN_WALK_MAX], path_room[CHAIN_WALK_MAX];
    int np = 0, why = 0;
    int32_t at = best, room = 1;
    while (room < CHAIN_WALK_MAX) {
        const Run *run = L->runs ? &L->runs[at] : NULL;
        /* (a run that was not followed further always has steps: the test keeps a jump from
         * ever standing still) */
        if (run && run->of && (run->why || run->len > 0) && memcmp(run->of->plain, ch->plain, 256) == 0) {
            if (run->why == 2) {
                why = 2;
                break;
            }
            room += run->len;
            at = run->to;
            if (run->why == 1) {
                why = 1;
                break;
            }
            continue;
        }
        path[np] = at;
        path_room[np++] = room;
        const int32_t *r = L->trans + 256 * (size_t)at;
        int32_t to = r[bytes[0]];
        for (int x = 1; x < nb && to >= 0; x++)
            if (r[bytes[x]] != to)
                to = -1;
        if (to < 0) {
            why = 1;
            break;
        }
        if (to == at) {   /* a loop: any number of plain bytes */
            why = 2;
            break;
        }
        at = to;
        room++;
    }
    /* (the runs count every step they know of: room may be past the bound here) */
    ch->room = why == 2 ? CHAIN_ROOM_MAX : room < CHAIN_WALK_MAX ? room : CHAIN_WALK_MAX;
    /* a walk of a few steps is cheaper than remembering it */
    if (np < 4 || (!L->runs && !(L->runs = PyMem_Calloc((size_t)L->n_states, sizeof(Run)))))
        return;   /* (out of memory: nothing is remembered, the result stands) */
    for (int i = 0; i < np; i++) {
        Run *run = &L->runs[path[i]];
        run->of = ch;
        run->to = at;
        run->len = room - path_room[i];
        run->why = (uint8_t)why;
    }
}

/* the plain chain of lexeme k's state q, made on first use (NULL: out of memory) */
static const Chain *
state_chain(Tables *t, int32_t k, int32_t q)
{
    Lex *L = &t->lex[k];
    if (!L->chains && !(L->chains = PyMem_Calloc((size_t)(L->n_states ? L->n_states : 1), sizeof(Chain *)))) {
        PyErr_NoMemory();
        return NULL;
    }
    if (!L->chains[q]) {
        Chain *ch = PyMem_Malloc(sizeof(Chain));
        if (!ch) {
            PyErr_NoMemory();
            return NULL;
        }
        plain_chain(L, q, ch);
        L->chains[q] = ch;
    }
    return L->chains[q];
}

static int
lexeme_pass(Walk *w, Set *cur, int32_t *rs, int32_t *n, int depth)
{
    Tables *t = w->t;
    int32_t kept = 0;
    w->work += *n;
    /* with many tokens, those whose rest is plain bytes for one scan's chain are allowed at
     * a glance (a byte table read per byte); the others go through the levels below */
    const Chain *chains[4];
    int n_chains = 0;
    if (*n >= 64)
        for (int32_t i = 0; i < cur->n_scans && n_chains < 4; i++) {
            const Chain *ch = state_chain(t, cur->scans[i].lexeme, cur->scans[i].state);
            if (!ch)
                return -1;
            if (ch->room > 0)
                chains[n_chains++] = ch;
        }
    /* level p (p = depth .. top) holds pairs[2 * level_at[p - depth] .. 2 * level_at[p - depth + 1]):
     * the scans alive after the current token's bytes depth .. p - 1; ended[p - depth]: one
     * of them accepted after a byte before p - 1 and the byte after it may follow it */
    if (lv_reserve(w, cur->n_scans, 2) < 0)
        return -1;
    for (int32_t i = 0; i < cur->n_scans; i++) {
        w->pairs[2 * i] = cur->scans[i].lexeme;
        w->pairs[2 * i + 1] = cur->scans[i].state;
    }
    w->level_at[0] = 0;
    w->level_at[1] = cur->n_scans;
    w->ended[0] = 0;
    int32_t top = depth;
    const uint8_t *prev = NULL;
    for (int32_t x = 0; x < *n; x++) {
        int32_t r = rs[x];
        const uint8_t *data = w->blob + w->off[r];
        int32_t len = (int32_t)(w->off[r + 1] - w->off[r]);
        if (len <= depth) {
            if (ivec_push(&w->found, r) < 0)
                return -1;
            continue;
        }
        if (n_chains) {
            int plain = 0;
            for (int c = 0; c < n_chains && !plain; c++) {
                if (len - depth > chains[c]->room)
                    continue;
                int32_t i = depth;
                while (i < len && chains[c]->plain[data[i]])
                    i++;
                plain = i == len;
            }
            if (plain) {
                if (ivec_push(&w->found, r) < 0)
                    return -1;
                continue;
            }
        }
        top = resume_level(data, len, prev, depth, top);
        prev = data;
        /* (a level holds at most the pairs of the one before it) */
        Py_ssize_t at = w->level_at[top - depth + 1], width = at - w->level_at[top - depth];
        if (top < len && lv_reserve(w, at + (len - top) * width, len - depth + 2) < 0)
            return -1;
        while (top < len) {
            Py_ssize_t a = w->level_at[top - depth], b = w->level_at[top - depth + 1];
            if (a == b)
                break;   /* every lexeme died */
            int c = data[top], ended = w->ended[top - depth];
            Py_ssize_t m = b;
            for (Py_ssize_t i = a; i < b; i++) {
                int32_t k = w->pairs[2 * i], q = w->pairs[2 * i + 1];
                Lex *L = &t->lex[k];
                if (top > depth && !ended && ends_before(t, k, q, c))
                    ended = 1;
                int32_t q2 = L->trans[256 * (size_t)q + c];
                if (q2 >= 0) {
                    w->pairs[2 * m] = k;
                    w->pairs[2 * m + 1] = q2;
                    m++;
                }
            }
            top++;
            w->ended[top - depth] = (uint8_t)ended;
            w->level_at[top - depth + 1] = m;
        }
        int alive = top == len && w->level_at[top - depth + 1] > w->level_at[top - depth];
        if (alive) {
            if (ivec_push(&w->found, r) < 0)
                return -1;
        } else if (w->ended[top - depth]) {
            rs[kept++] = r;
        }
    }
    *n = kept;
    return 0;
}

static int
chart_push(Chart *c, Set *s)
{
    if (c->n_stack == c->cap_stack) {
        Py_ssize_t cap = c->cap_stack ? 2 * c->cap_stack : 32;
        Set **st = PyMem_Realloc(c->stack, (size_t)cap * sizeof(Set *));
        if (!st) {
            PyErr_NoMemory();
            return -1;
        }
        c->stack = st;
        c->cap_stack = cap;
    }
    c->stack[c->n_stack++] = s;
    return 0;
}

/* Lexeme passes over big groups of tokens are cached in the tables, one lexeme state at a
 * time. A pass decides a token by the (lexeme, state) pairs of the set, the depth and the
 * token's own bytes: it is allowed when one pair survives its rest, left to the parser when
 * none does but one accepts inside it before a byte that may follow, dropped otherwise.
 * Both are unions over the pairs, so the tables cache, per pair, depth and group (every
 * token of the vocabulary with the group's first `depth` bytes: a range of ranks), the two
 * bit sets over the range, and a pass ORs those of its set's pairs. A pair and a group
 * recur across parser contexts that start different lexemes at the same place. Groups
 * below PASS_MIN tokens, or a small share of their range, are passed directly; the cache
 * is emptied past PASS_INTS ints. */
#define PASS_MIN 64
#define PASS_INTS (4 << 20)

/* token x against the first `depth` bytes p of another: < 0, 0 (x starts with them), > 0 */
static inline int
prefix_cmp(const Walk *w, int32_t x, const uint8_t *p, int depth)
{
    int64_t len = w->off[x + 1] - w->off[x];
    int c = memcmp(w->blob + w->off[x], p, (size_t)(len < depth ? len : depth));
    return c ? c : (len < depth ? -1 : 0);
}

/* the first rank whose token has the first `depth` bytes of token r */
static int32_t
prefix_start(const Walk *w, int32_t r, int depth)
{
    const uint8_t *p = w->blob + w->off[r];
    int32_t a = 0, b = r;
    while (a < b) {
        int32_t mid = a + (b - a) / 2;
        if (prefix_cmp(w, mid, p, depth) < 0)
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

/* the rank after the last whose token has the first `depth` bytes of token r (galloping
 * from r: a dead prefix mostly skips a few tokens) */
static int32_t
prefix_end(const Walk *w, int32_t r, int depth)
{
    const uint8_t *p = w->blob + w->off[r];
    int32_t a = r + 1, b = (int32_t)w->n_ranks;
    for (int64_t step = 1; (int64_t)a + step - 1 < b; step *= 2) {
        int32_t probe = (int32_t)(a + step - 1);
        if (prefix_cmp(w, probe, p, depth) > 0) {
            b = probe;
            break;
        }
        a = probe + 1;
    }
    while (a < b) {
        int32_t mid = a + (b - a) / 2;
        if (prefix_cmp(w, mid, p, depth) <= 0)
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

/* bits [from, to) of `bits` set */
static void
set_bit_range(uint64_t *bits, int32_t from, int32_t to)
{
    while (from < to && (from & 63)) {
        bits[from >> 6] |= (uint64_t)1 << (from & 63);
        from++;
    }
    while (from + 64 <= to) {
        bits[from >> 6] = ~(uint64_t)0;
        from += 64;
    }
    while (from < to) {
        bits[from >> 6] |= (uint64_t)1 << (from & 63);
        from++;
    }
}

/* The pass of one (lexeme, state) pair over the tokens lo..hi-1 (sharing their first
 * `depth` bytes) into e->alive / e->ended, over the trie of the range as lexeme_pass. */
static int
pair_pass(Walk *w, PassEntry *e)
{
    Tables *t = w->t;
    int depth = e->depth;
    Lex *L = &t->lex[e->lexeme];
    /* per level p (depth .. top): the state after the token's bytes depth .. p - 1 (-1:
     * dead) and whether the lexeme accepted before then, the next byte following */
    if (lv_reserve(w, 1, 2) < 0)
        return -1;
    int32_t top = depth;
    w->pairs[0] = e->state;
    w->ended[0] = 0;
    const uint8_t *prev = NULL;
    for (int32_t r = e->lo; r < e->hi; r++) {
        const uint8_t *data = w->blob + w->off[r];
        int32_t len = (int32_t)(w->off[r + 1] - w->off[r]), i = r - e->lo;
        if (len <= depth) {
            e->alive[i >> 6] |= (uint64_t)1 << (i & 63);
            continue;
        }
        top = resume_level(data, len, prev, depth, top);
        prev = data;
        while (top < len) {
            int32_t q = w->pairs[top - depth];
            if (q < 0)
                break;
            if (lv_reserve(w, top - depth + 2, top - depth + 3) < 0)
                return -1;
            int c = data[top], ended = w->ended[top - depth];
            if (top > depth && !ended && ends_before(t, e->lexeme, q, c))
                ended = 1;
            top++;
            w->pairs[top - depth] = L->trans[256 * (size_t)q + c];
            w->ended[top - depth] = (uint8_t)ended;
        }
        if (top == len && w->pairs[top - depth] >= 0) {
            e->alive[i >> 6] |= (uint64_t)1 << (i & 63);
            continue;
        }
        int ended = w->ended[top - depth];
        if (top < len) {
            /* dead after the first `top` bytes: so is every token that has them, alike */
            int32_t end = prefix_end(w, r, top);
            if (ended)
                set_bit_range(e->ended, i, end - e->lo);
            r = end - 1;
        } else if (ended) {
            e->ended[i >> 6] |= (uint64_t)1 << (i & 63);
        }
    }
    return 0;
}

/* the cached pass of pair (k, q) over the group lo..hi-1 at `depth`, made on a miss */
static PassEntry *
pair_entry(Walk *w, int32_t k, int32_t q, int depth, int32_t lo, int32_t hi)
{
    Tables *t = w->t;
    uint64_t h = ((((uint64_t)(uint32_t)k * 1099511628211ULL ^ (uint32_t)q) * 1099511628211ULL ^
                   (uint32_t)depth) * 1099511628211ULL ^ (uint32_t)lo) * 1099511628211ULL ^ (uint32_t)hi;
    if (t->passes.cap) {
        size_t mask = t->passes.cap - 1;
        for (size_t p = hmix(h) & mask; t->passes.slot[p]; p = (p + 1) & mask) {
            PassEntry *x = t->passes.slot[p];
            if (x->hash == h && x->lexeme == k && x->state == q && x->depth == depth && x->lo == lo && x->hi == hi)
                return x;
        }
    }
    size_t words = ((size_t)(hi - lo) + 63) / 64;
    size_t bytes = sizeof(PassEntry) + 2 * words * sizeof(uint64_t);
    PassEntry *e = PyMem_Calloc(1, bytes);
    if (!e) {
        PyErr_NoMemory();
        return NULL;
    }
    e->hash = h;
    e->lexeme = k;
    e->state = q;
    e->depth = depth;
    e->lo = lo;
    e->hi = hi;
    e->alive = (uint64_t *)(e + 1);
    e->ended = e->alive + words;
    if (pair_pass(w, e) < 0) {
        PyMem_Free(e);
        return NULL;
    }
    size_t ints = (bytes + sizeof(int32_t) - 1) / sizeof(int32_t);
    if (t->pass_ints + ints > PASS_INTS)
        pass_clear(t);
    if (ptab_insert(&t->passes, e) < 0) {
        PyMem_Free(e);
        return NULL;
    }
    t->pass_ints += ints;
    return e;
}

static int
cached_pass(Walk *w, Set *cur, int32_t *rs, int32_t *n, int depth)
{
    if (*n < PASS_MIN || !cur->n_scans)
        return lexeme_pass(w, cur, rs, n, depth);
    int32_t lo = prefix_start(w, rs[0], depth), hi = prefix_end(w, rs[0], depth);
    if ((int64_t)(hi - lo) > 4 * (int64_t)*n || rs[0] < lo || rs[*n - 1] >= hi)
        return lexeme_pass(w, cur, rs, n, depth);
    w->work += *n;
    size_t words = ((size_t)(hi - lo) + 63) / 64;
    uint64_t *alive = PyMem_Calloc(2 * words + 1, sizeof(uint64_t));
    if (!alive) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t *ended = alive + words;
    for (int32_t i = 0; i < cur->n_scans; i++) {
        /* (an entry may be evicted by the next one made: read it at once) */
        PassEntry *e = pair_entry(w, cur->scans[i].lexeme, cur->scans[i].state, depth, lo, hi);
        if (!e) {
            PyMem_Free(alive);
            return -1;
        }
        for (size_t x = 0; x < words; x++) {
            alive[x] |= e->alive[x];
            ended[x] |= e->ended[x];
        }
    }
    int32_t kept = 0;
    for (int32_t x = 0; x < *n; x++) {
        int32_t i = rs[x] - lo;
        if (alive[i >> 6] >> (i & 63) & 1) {
            if (ivec_push(&w->found, rs[x]) < 0) {
                PyMem_Free(alive);
                return -1;
            }
        } else if (ended[i >> 6] >> (i & 63) & 1) {
            rs[kept++] = rs[x];
        }
    }
    PyMem_Free(alive);
    *n = kept;
    return 0;
}

/* whether two sets say the same: the same kernel items, prediction and scans (with their
 * origins), and the same walk kernel id; set_hash agrees with it */
static int
set_same(const Set *a, const Set *b)
{
    if (a->n_items != b->n_items || a->n_scans != b->n_scans || a->pred != b->pred ||
        a->kid != b->kid || a->kabs != b->kabs)
        return 0;
    if (memcmp(a->items, b->items, (size_t)a->n_items * sizeof(KItem)))
        return 0;
    for (int32_t i = 0; i < a->n_scans; i++) {
        const Scan *x = &a->scans[i], *y = &b->scans[i];
        if (x->lexeme != y->lexeme || x->state != y->state || x->n != y->n ||
            memcmp(a->origins + x->off, b->origins + y->off, (size_t)x->n * sizeof(int32_t)))
            return 0;
    }
    return 1;
}

static uint64_t
set_hash(const Set *s)
{
    const uint64_t P = 1099511628211ULL;
    uint64_t h = ((uint64_t)(uintptr_t)s->pred * P ^ (uint32_t)s->n_items) * P ^ (uint32_t)s->kid;
    for (int32_t i = 0; i < s->n_items; i++)
        h = ((h ^ (uint32_t)s->items[i].it) * P ^ (uint32_t)s->items[i].origin) * P;
    for (int32_t i = 0; i < s->n_scans; i++) {
        const Scan *x = &s->scans[i];
        h = ((h ^ (uint32_t)x->lexeme) * P ^ (uint32_t)x->state) * P;
        for (int32_t o = 0; o < x->n; o++)
            h = (h ^ (uint32_t)s->origins[x->off + o]) * P;
    }
    return h;
}

/* The children of one node of a walk: per byte that some of its tokens go on with, the
 * set after it and the tokens still undecided there (rs[start .. start + count)). */
typedef struct Children {
    int32_t n;
    int32_t start[256], count[256], rep[256];
    Set *set[256];
    uint8_t far[256], merged[256];
    uint64_t hash[256];
} Children;

static Children *
walk_children(Walk *w, int depth)
{
    if (depth >= w->n_kids) {
        int32_t n = depth + 16;
        Children **k = PyMem_Realloc(w->kids, (size_t)n * sizeof(Children *));
        if (!k) {
            PyErr_NoMemory();
            return NULL;
        }
        for (int32_t i = w->n_kids; i < n; i++)
            k[i] = NULL;
        w->kids = k;
        w->n_kids = n;
    }
    if (!w->kids[depth] && !(w->kids[depth] = PyMem_Malloc(sizeof(Children))))
        PyErr_NoMemory();
    return w->kids[depth];
}

/* the tokens rs[0..n) in the stable order of their byte at `depth` */
static int
sort_by_byte(Walk *w, int32_t *rs, int32_t n, int depth)
{
    if (grow((void **)&w->tmp, &w->cap_tmp, n, sizeof(int32_t), 256) < 0 ||
        grow((void **)&w->tmp_bytes, &w->cap_tmp_bytes, n, 1, 256) < 0)
        return -1;
    int32_t at[257] = {0};
    uint8_t *by = w->tmp_bytes;
    w->work += n;
    for (int32_t x = 0; x < n; x++) {
        by[x] = w->blob[w->off[rs[x]] + depth];
        at[by[x] + 1]++;
    }
    for (int b = 0; b < 256; b++)
        at[b + 1] += at[b];
    for (int32_t x = 0; x < n; x++)
        w->tmp[at[by[x]]++] = rs[x];
    memcpy(rs, w->tmp, (size_t)n * sizeof(int32_t));
    return 0;
}

/* the tokens of rs[0..*n) that end within `depth` bytes are found (the parser took all
 * their bytes); the rest stay, in order */
static int
take_whole(Walk *w, int32_t *rs, int32_t *n, int depth)
{
    int32_t kept = 0;
    for (int32_t x = 0; x < *n; x++) {
        if (w->off[rs[x] + 1] - w->off[rs[x]] <= depth) {
            if (ivec_push(&w->found, rs[x]) < 0)
                return -1;
        } else {
            rs[kept++] = rs[x];
        }
    }
    *n = kept;
    return 0;
}

/* Children with equal sets (and the same `far`) are folded into one: the tokens of each
 * fold are moved together (in child order) to the front of rs, c->start / c->count of its
 * first child say where, and the other children's sets are let go. */
static int
fold_children(Walk *w, Children *c, int32_t *rs)
{
    for (int32_t k = 0; k < c->n; k++) {
        c->hash[k] = set_hash(c->set[k]) ^ c->far[k];
        c->rep[k] = k;
        for (int32_t r = 0; r < k; r++)
            if (c->rep[r] == r && c->hash[r] == c->hash[k] && c->far[r] == c->far[k] &&
                set_same(c->set[r], c->set[k])) {
                c->rep[k] = r;
                break;
            }
    }
    int32_t total = 0;
    for (int32_t k = 0; k < c->n; k++)
        total += c->count[k];
    if (grow((void **)&w->tmp, &w->cap_tmp, total, sizeof(int32_t), 256) < 0)
        return -1;
    int32_t at = 0;
    for (int32_t k = 0; k < c->n; k++) {
        if (c->rep[k] != k)
            continue;
        int32_t start = at, members = 0;
        for (int32_t m = k; m < c->n; m++)
            if (c->rep[m] == k) {
                memcpy(w->tmp + at, rs + c->start[m], (size_t)c->count[m] * sizeof(int32_t));
                at += c->count[m];
                members++;
            }
        c->start[k] = start;
        c->count[k] = at - start;
        c->merged[k] |= members > 1;
    }
    memcpy(rs, w->tmp, (size_t)total * sizeof(int32_t));
    for (int32_t k = 0; k < c->n; k++)
        if (c->rep[k] != k)
            Py_CLEAR(c->set[k]);
    return 0;
}

/* The tokens rs[0..n), longer than `depth` bytes, share their first `depth` bytes, after
 * which the chart ends (`merged`: they share the set the chart ends with, not the bytes:
 * see below); `far`: a step on the way read a set marked far (the tokens are in `beyond`
 * already). Depth first over the implicit trie of the byte-sorted tokens: tokens sharing
 * a byte share the step over it.
 *
 * A child is passed (cached_pass) only when its step ended a lexeme. After a step that
 * only moved the scans along, a pass would keep every token that the one before kept (the
 * same scans, none accepting before the next byte), so only the tokens that end there are
 * taken; at the root the tokens are exit candidates, which a pass keeps too. (A pass only
 * decides early what the steps would: leaving one out changes no token's fate.)
 *
 * Children whose sets are equal are folded: their tokens go on together from one set,
 * since what the parser does next depends on the set (and the sets under it, the same
 * for siblings) and on the bytes after it alone. In a long string split into blocks the
 * set after every character is the same, so the tokens that cross a block's end are
 * stepped as one group per byte, not one per prefix. */
/* whether the walk's work has passed its limit (then it is marked over, to unwind) */
static inline int
past_limit(Walk *w)
{
    if (w->limit >= 0 && w->work > w->limit)
        w->over = 1;
    return w->over;
}

static int walk(Walk *w, int32_t *rs, int32_t n, int depth, int far, int merged, int norun);

/* Plain runs. Inside lexemes, with no parser item waiting (a set of scans only), a byte
 * that moves every scan along its plain chain (see Chain) leads to one set whatever the
 * byte: the scans move to the same states, and a lexeme that accepts there ends alike.
 * Over a run of such bytes the sets are one per position, so the walk need not step
 * (and sort, and fold) the tokens byte by byte there: it measures each token's plain
 * prefix, steps the run once with one plain byte, and goes on with each token from the
 * set where its prefix ends (the byte after it is not plain) or where the run ends (a
 * lexeme ended: the parser's items decide the next byte). In a long string counted in
 * blocks, the tokens that cross a block's end take a step per byte of the run instead of
 * a sorted group per byte. */
#define RUN_MIN 64    /* tokens at a node for a run to be worth measuring */
#define RUN_MAX 64    /* plain steps taken in one run at most */

/* For one set of plain bytes and one vocabulary (the walk's blob and offsets), each token's
 * number of leading plain bytes (PLAIN_LONG: that many or more), kept in the tables and
 * filled in as walks meet the tokens (PLAIN_UNKNOWN: not yet): a run measures a token
 * once. A few are kept (a grammar has few distinct plain sets: its strings' characters). */
#define PLAIN_LONG 254
#define PLAIN_UNKNOWN 255

typedef struct PlainLens {
    uint8_t plain[256];
    const uint8_t *blob;
    const int64_t *off;
    Py_ssize_t n_ranks;
    uint8_t len[];
} PlainLens;

static uint8_t *
plain_lens(Walk *w, const uint8_t *plain)
{
    Tables *t = w->t;
    for (int i = 0; i < 4; i++) {
        PlainLens *p = t->plens[i];
        if (p && p->blob == w->blob && p->off == w->off && p->n_ranks == w->n_ranks && !memcmp(p->plain, plain, 256))
            return p->len;
    }
    PlainLens *p = PyMem_Malloc(sizeof(PlainLens) + (size_t)(w->n_ranks ? w->n_ranks : 1));
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(p->plain, plain, 256);
    p->blob = w->blob;
    p->off = w->off;
    p->n_ranks = w->n_ranks;
    memset(p->len, PLAIN_UNKNOWN, (size_t)w->n_ranks);
    int at = t->next_plens;
    PyMem_Free(t->plens[at]);
    t->plens[at] = p;
    t->next_plens = (at + 1) % 4;
    return p->len;
}

/* token r's leading plain bytes (at most PLAIN_LONG), measured on first use */
static inline int32_t
plain_len(const Walk *w, uint8_t *lens, const uint8_t *plain, int32_t r)
{
    if (lens[r] == PLAIN_UNKNOWN) {
        const uint8_t *data = w->blob + w->off[r];
        int64_t len = w->off[r + 1] - w->off[r], j = 0;
        if (len > PLAIN_LONG)
            len = PLAIN_LONG;
        while (j < len && plain[data[j]])
            j++;
        lens[r] = (uint8_t)j;
    }
    return lens[r];
}

/* whether stepping s (scans only) over any byte of `bytes[0..nb)` leads to one set: each
 * scan moves along its plain chain on all of them, or dies on all of them, and one moves
 * on (nb == 0: whether s has scans only and one of them a chain); -1 on an error */
static int
run_continues(Tables *t, Set *s, const uint8_t *bytes, int nb)
{
    if (s->n_items || s->pred || !s->n_scans)
        return 0;
    int moves = 0;
    for (int32_t i = 0; i < s->n_scans; i++) {
        const Chain *ch = state_chain(t, s->scans[i].lexeme, s->scans[i].state);
        if (!ch)
            return -1;
        int along = ch->room > 0;
        for (int x = 0; x < nb && along; x++)
            along = ch->plain[bytes[x]];
        if (along) {
            moves = 1;
            continue;
        }
        const int32_t *row = t->lex[s->scans[i].lexeme].trans + 256 * (size_t)s->scans[i].state;
        for (int x = 0; x < nb; x++)
            if (row[bytes[x]] >= 0)
                return 0;
    }
    return moves;
}

/* The run from the walk's node at `depth` (its set `cur`, scans only, every scan with a
 * plain chain) over the tokens rs[0..n): 1 when it took them (each decided, or walked on
 * from where its plain prefix ends), 0 when no token has a plain byte next, -1 on an
 * error. */
static int
plain_run(Walk *w, Set *cur, int32_t *rs, int32_t n, int depth, int far, int merged)
{
    Tables *t = w->t;
    /* the run's bytes: those every scan's chain takes, and every scan without a chain
     * dies on */
    uint8_t plain[256], bytes[256];
    memset(plain, 1, 256);
    for (int32_t i = 0; i < cur->n_scans; i++) {
        const Chain *ch = state_chain(t, cur->scans[i].lexeme, cur->scans[i].state);
        if (!ch)
            return -1;
        const int32_t *row = t->lex[cur->scans[i].lexeme].trans + 256 * (size_t)cur->scans[i].state;
        for (int b = 0; b < 256; b++)
            plain[b] &= ch->room > 0 ? ch->plain[b] : row[b] < 0;
    }
    int nb = 0;
    for (int b = 0; b < 256; b++)
        if (plain[b])
            bytes[nb++] = (uint8_t)b;
    if (!nb)
        return 0;
    /* each token's plain prefix after `depth` (at most RUN_MAX bytes) */
    int32_t *e = PyMem_Malloc(2 * (size_t)n * sizeof(int32_t));
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    int32_t *order = e + n, longest = 0, some = 0;
    uint8_t *lens = plain_lens(w, plain);
    if (!lens) {
        PyMem_Free(e);
        return -1;
    }
    w->work += n;
    for (int32_t x = 0; x < n; x++) {
        int32_t len = (int32_t)(w->off[rs[x] + 1] - w->off[rs[x]]) - depth, j = 0;
        int32_t p = plain_len(w, lens, plain, rs[x]);
        if (len > RUN_MAX)
            len = RUN_MAX;
        if (p >= depth && p < PLAIN_LONG) {
            /* (its first `depth` bytes plain too: its plain prefix from here is known) */
            j = p - depth < len ? p - depth : len;
        } else {
            const uint8_t *data = w->blob + w->off[rs[x]] + depth;
            while (j < len && plain[data[j]])
                j++;
        }
        e[x] = j;
        some |= j > 0;
        if (j > longest)
            longest = j;
    }
    if (!some) {
        PyMem_Free(e);
        return 0;
    }
    /* the run's sets: sets[i] after i plain bytes (one new reference each), while the set
     * before still moves every scan along its chain; closed[i]: the step to it ended a
     * lexeme; read[i]: that step read a far set */
    Set *sets[RUN_MAX + 1];
    uint8_t closed[RUN_MAX + 1], read[RUN_MAX + 1];
    int32_t m = 0, pushed = 0, rc = -1;
    sets[0] = cur;
    while (m < longest) {
        if (m) {
            int r = run_continues(t, sets[m], bytes, nb);
            if (r < 0)
                goto done;
            if (!r)
                break;
            if (chart_push(&w->chart, sets[m]) < 0)
                goto done;
            pushed++;
        }
        Set *next;
        w->chart.read = 0;
        w->steps++;
        w->work += WALK_STEP_WORK;
        if (past_limit(w))
            goto done;
        if (step_core(t, &w->chart, bytes[0], &next, &w->sc) < 0)
            goto done;
        if (!next)
            break;   /* (a chain's byte always steps: not reached) */
        closed[m + 1] = (uint8_t)w->sc.step_closed;
        read[m + 1] = (uint8_t)w->chart.read;
        sets[++m] = next;
    }
    w->chart.n_stack -= pushed;
    pushed = 0;
    /* the tokens by where they leave the run (stable: each group in rank order) */
    int32_t at[RUN_MAX + 2];
    memset(at, 0, sizeof(at));
    for (int32_t x = 0; x < n; x++) {
        if (e[x] > m)
            e[x] = m;
        at[e[x] + 1]++;
    }
    for (int32_t i = 0; i <= m; i++)
        at[i + 1] += at[i];
    {
        int32_t fill[RUN_MAX + 1];
        memcpy(fill, at, (size_t)(m + 1) * sizeof(int32_t));
        for (int32_t x = 0; x < n; x++)
            order[fill[e[x]]++] = rs[x];
    }
    memcpy(rs, order, (size_t)n * sizeof(int32_t));
    /* those with no plain byte next go on from here as any node's tokens */
    if (at[1] > 0 && walk(w, rs, at[1], depth, far, merged, 1) < 0)
        goto done;
    int far_here = far;
    for (int32_t i = 1; i <= m; i++) {
        if (chart_push(&w->chart, sets[i]) < 0)
            goto done;
        pushed++;
        far_here |= read[i];
        int32_t *g = rs + at[i], k = at[i + 1] - at[i];
        if (!k)
            continue;
        if (far_here && !far) {
            /* decided through a step that read a far set (see walk) */
            for (int32_t x = 0; x < k; x++)
                if (ivec_push(&w->beyond, g[x]) < 0)
                    goto done;
        }
        /* the tokens that end here were taken whole; a pass decides the others early after
         * a step that ended a lexeme (as in walk), where a token all of plain bytes whose
         * rest fits one of the new scans' chains (of the run's bytes) is allowed at once */
        int r;
        if (closed[i]) {
            int32_t room = 0;
            for (int32_t x = 0; x < sets[i]->n_scans; x++) {
                const Chain *ch = state_chain(t, sets[i]->scans[x].lexeme, sets[i]->scans[x].state);
                if (!ch)
                    goto done;
                int covers = ch->room > room;
                for (int y = 0; y < nb && covers; y++)
                    covers = ch->plain[bytes[y]];
                if (covers)
                    room = ch->room;
            }
            int32_t kept = 0;
            if (room > 0) {
                w->work += k;
                for (int32_t x = 0; x < k; x++) {
                    int32_t len = (int32_t)(w->off[g[x] + 1] - w->off[g[x]]);
                    if (lens[g[x]] == len && len < PLAIN_LONG && len - (depth + i) <= room) {
                        if (ivec_push(&w->found, g[x]) < 0)
                            goto done;
                    } else {
                        g[kept++] = g[x];
                    }
                }
                k = kept;
            }
            r = k ? lexeme_pass(w, sets[i], g, &k, depth + i) : 0;
        } else {
            r = take_whole(w, g, &k, depth + i);
        }
        if (r < 0)
            goto done;
        /* a token that leaves before the run's end has a byte next that is not plain */
        if (k && walk(w, g, k, depth + i, far_here, 1, i < m) < 0)
            goto done;
    }
    rc = 1;
done:
    w->chart.n_stack -= pushed;
    for (int32_t i = 1; i <= m; i++)
        Py_DECREF(sets[i]);
    PyMem_Free(e);
    return rc;
}

static int
walk(Walk *w, int32_t *rs, int32_t n, int depth, int far, int merged, int norun)
{
    w->work += n;   /* each token's byte here is read */
    if (past_limit(w))
        return -1;
    Set *cur = get_set(&w->chart, chart_len(&w->chart) - 1);
    if (!cur)
        return -1;
    allowed(cur);
    if (w->fold && !norun && n >= RUN_MIN) {
        int r = run_continues(w->t, cur, NULL, 0);
        if (r > 0)
            r = plain_run(w, cur, rs, n, depth, far, merged);
        if (r)
            return r < 0 ? -1 : 0;
    }
    if (merged && sort_by_byte(w, rs, n, depth) < 0)
        return -1;
    Children *c = walk_children(w, depth);
    if (!c)
        return -1;
    c->n = 0;
    int rc = -1;
    int32_t i = 0;
    while (i < n) {
        int b = w->blob[w->off[rs[i]] + depth];
        int32_t j = i + 1;
        while (j < n && w->blob[w->off[rs[j]] + depth] == b)
            j++;
        if (has_byte(cur->nb, b)) {
            w->chart.read = 0;
            Set *next;
            w->steps++;
            w->work += WALK_STEP_WORK;
            if (past_limit(w))
                goto done;
            if (step_core(w->t, &w->chart, b, &next, &w->sc) < 0)
                goto done;
            int newly = !far && w->chart.read;
            for (int32_t x = i; newly && x < j; x++)
                if (ivec_push(&w->beyond, rs[x]) < 0) {
                    Py_XDECREF(next);
                    goto done;
                }
            if (next) {
                int32_t m = j - i, r;
                if (w->sc.step_closed)
                    r = merged ? lexeme_pass(w, next, rs + i, &m, depth + 1)
                               : cached_pass(w, next, rs + i, &m, depth + 1);
                else
                    r = take_whole(w, rs + i, &m, depth + 1);
                if (r < 0 || !m) {
                    Py_DECREF(next);
                    if (r < 0)
                        goto done;
                } else {
                    c->start[c->n] = i;
                    c->count[c->n] = m;
                    c->set[c->n] = next;
                    c->far[c->n] = (uint8_t)(far || newly);
                    c->merged[c->n] = (uint8_t)merged;
                    c->n++;
                }
            }
        }
        i = j;
    }
    if (w->fold && c->n > 1 && fold_children(w, c, rs) < 0)
        goto done;
    for (int32_t k = 0; k < c->n; k++) {
        if (!c->set[k])
            continue;
        if (chart_push(&w->chart, c->set[k]) < 0)
            goto done;
        int r = walk(w, rs + c->start[k], c->count[k], depth + 1, c->far[k], c->merged[k], 0);
        w->chart.n_stack--;
        Py_CLEAR(c->set[k]);
        if (r < 0)
            goto done;
    }
    rc = 0;
done:
    for (int32_t k = 0; k < c->n; k++)
        Py_CLEAR(c->set[k]);
    c->n = 0;
    return rc;
}

/* ranks from an int32 / int64 buffer (a numpy array) or a sequence of ints */
static int32_t *
rank_array(PyObject *o, Py_ssize_t *n_out)
{
    if (PyObject_CheckBuffer(o)) {
        Py_buffer b;
        if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
            const char *f = b.format ? b.format : "B";
            if (*f == '<' || *f == '=' || *f == '@')
                f++;
            int ok = b.ndim <= 1 && ((b.itemsize == 8 && strchr("qlQL", *f)) || (b.itemsize == 4 && strchr("iIl", *f)));
            if (ok) {
                Py_ssize_t n = b.len / b.itemsize;
                int32_t *a = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int32_t));
                if (!a) {
                    PyBuffer_Release(&b);
                    PyErr_NoMemory();
                    return NULL;
                }
                for (Py_ssize_t i = 0; i < n; i++) {
                    int64_t v = b.itemsize == 8 ? ((const int64_t *)b.buf)[i] : ((const int32_t *)b.buf)[i];
                    a[i] = v < 0 || v > INT32_MAX ? -1 : (int32_t)v;
                }
                PyBuffer_Release(&b);
                *n_out = n;
                return a;
            }
            PyBuffer_Release(&b);
        } else {
            PyErr_Clear();
        }
    }
    return int_array(o, n_out, "ranks must be ints");
}

/* The token table's buffers (blob: uint8; offsets: int64, token r is blob[offsets[r] ..
 * offsets[r + 1])) and the ranks as a fresh int32 array, each checked to name a token
 * inside the blob. -1 with an exception set; the caller releases what was acquired (bb,
 * ob, *rs). */
static int
token_args(PyObject *blob_o, PyObject *off_o, PyObject *ranks_o, Py_buffer *bb, Py_buffer *ob, int32_t **rs,
           Py_ssize_t *n)
{
    if (PyObject_GetBuffer(blob_o, bb, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (PyObject_GetBuffer(off_o, ob, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (ob->itemsize != 8 || bb->itemsize != 1) {
        PyErr_SetString(PyExc_ValueError, "blob: uint8, offsets: int64");
        return -1;
    }
    const int64_t *off = ob->buf;
    Py_ssize_t n_ranks = ob->len / 8 - 1;
    if (!(*rs = rank_array(ranks_o, n)))
        return -1;
    for (Py_ssize_t i = 0; i < *n; i++) {
        int32_t r = (*rs)[i];
        if (r < 0 || r >= n_ranks || off[r + 1] > bb->len || off[r] > off[r + 1]) {
            PyErr_SetString(PyExc_ValueError, "ranks: out of range");
            return -1;
        }
    }
    return 0;
}

/* walk_exits(chart, far, ranks, blob, offsets, remember=1, fold=1, limit=-1)
 *     -> (found, beyond, steps, work) or None;
 * found and beyond as bytes of native int32 (numpy.frombuffer reads them)
 *
 * Which of the tokens `ranks` (ranks of the byte-sorted vocabulary: token r is
 * blob[offsets[r]:offsets[r + 1]]) the parser accepts after `chart` (found), and which of
 * them were decided by a step that read one of the chart positions `far` (beyond: see
 * Matcher._exit_words), with the number of parser steps taken and the work done (see
 * WALK_STEP_WORK). With limit >= 0 the walk stops once its work passes `limit` and
 * answers None (nothing it decided is kept). For tests: remember=0, no
 * closure is remembered (Closed); remember=2, each one remembered is also made afresh
 * and compared (RuntimeError if they differ). */
static PyObject *
tables_walk_exits(Tables *t, PyObject *args)
{
    PyObject *list, *far_o, *ranks_o, *blob_o, *off_o;
    int remember = 1, fold = 1;
    long long limit = -1;
    if (!PyArg_ParseTuple(args, "O!OOOO|iiL", &PyList_Type, &list, &far_o, &ranks_o, &blob_o, &off_o, &remember,
                          &fold, &limit))
        return NULL;
    Walk w;
    memset(&w, 0, sizeof(w));
    w.t = t;
    w.fold = fold;
    w.limit = limit < 0 ? -1 : limit;
    chart_of_list(&w.chart, t, list);
    if (!w.chart.n_list) {
        PyErr_SetString(PyExc_ValueError, "walk_exits() on an empty chart");
        return NULL;
    }
    w.sc.closed_below = w.chart.n_list;   /* the chart under the stack stays as it is */
    if (!remember)
        w.sc.closed_below = 0;   /* (tests: the same walk without remembered closures) */
    w.sc.closed_check = remember == 2;   /* (tests: each remembered one checked) */
    w.sc.next_kid = 1;
    Py_buffer bb = {0}, ob = {0};
    uint8_t *far = NULL;
    int32_t *rs = NULL;
    PyObject *out = NULL;
    Py_ssize_t n;
    int error;
    if (token_args(blob_o, off_o, ranks_o, &bb, &ob, &rs, &n) < 0)
        goto done;
    w.blob = bb.buf;
    w.off = ob.buf;
    w.n_ranks = ob.len / 8 - 1;
    far = far_bitmap(&w.chart, far_o, &error);
    if (error)
        goto done;
    w.chart.far = far;
    /* rank order is byte order: tokens sharing a prefix are contiguous */
    {
        Py_ssize_t i = 1;
        while (i < n && rs[i - 1] <= rs[i])
            i++;
        if (i < n)
            qsort(rs, (size_t)n, sizeof(int32_t), cmp_int);
    }
    {
        Py_ssize_t m = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (!m || rs[m - 1] != rs[i])
                rs[m++] = rs[i];
        n = m;
    }
    if (walk(&w, rs, (int32_t)n, 0, 0, 0, 0) < 0) {
        if (w.over && !PyErr_Occurred()) {
            out = Py_None;
            Py_INCREF(out);
        }
        goto done;
    }
    {
        PyObject *found = PyBytes_FromStringAndSize((const char *)w.found.a, w.found.n * (Py_ssize_t)sizeof(int32_t));
        PyObject *beyond = PyBytes_FromStringAndSize((const char *)w.beyond.a, w.beyond.n * (Py_ssize_t)sizeof(int32_t));
        if (found && beyond)
            out = Py_BuildValue("(OOLL)", found, beyond, w.steps, w.work);
        Py_XDECREF(found);
        Py_XDECREF(beyond);
    }
done:
    for (Py_ssize_t i = 0; i < w.chart.n_stack; i++)
        Py_DECREF(w.chart.stack[i]);
    PyMem_Free(w.chart.stack);
    PyMem_Free(w.pairs);
    PyMem_Free(w.level_at);
    PyMem_Free(w.ended);
    for (int32_t i = 0; i < w.n_kids; i++)
        PyMem_Free(w.kids[i]);
    PyMem_Free(w.kids);
    PyMem_Free(w.tmp);
    PyMem_Free(w.tmp_bytes);
    scratch_free(&w.sc);
    ivec_free(&w.found);
    ivec_free(&w.beyond);
    PyMem_Free(far);
    PyMem_Free(rs);
    if (bb.obj)
        PyBuffer_Release(&bb);
    if (ob.obj)
        PyBuffer_Release(&ob);
    return out;
}

/* exit_classes(k, q, ranks, blob, offsets[, within]) -> (class_of, classes, reads)
 *
 * For the tokens `ranks` read from state q of lexeme k, where k ends inside the token (k
 * accepts after some of its bytes and the next byte may follow it; the rest is then read
 * from each lexeme's start): the lexemes that read the rest to its end alive (A), and
 * those that accept inside it before a byte that may follow them (E). Each token's pair
 * of sets is one class: class_of (bytes of int32, one per rank) names it; classes (bytes
 * of uint64, 2 W words per class, W = ceil(n_lex / 64): A, then E) holds them. Where the
 * lexemes S start after k ends (started_after, the same words: the same wherever in the token it ends), a
 * token whose A meets S is taken whole, and one whose A and E both miss S is not taken on
 * this scan's paths: neither needs a parser step (see TokenClasses.exits_after). With
 * `within` (the same words), only those lexemes are read (their bits alone are set): the
 * lexemes that may follow k anywhere hold every S of k's scans. reads: the lexemes started
 * on rests and the bytes they read (the work done, for TokenClasses to foresee it). */
static PyObject *
tables_exit_classes(Tables *t, PyObject *args)
{
    int k, q;
    PyObject *ranks_o, *blob_o, *off_o;
    Py_buffer within = {0};
    if (!PyArg_ParseTuple(args, "iiOOO|y*", &k, &q, &ranks_o, &blob_o, &off_o, &within))
        return NULL;
    const size_t W1 = ((size_t)t->n_lex + 63) / 64, W = 2 * W1;
    const char *bad = NULL;
    if (k < 0 || k >= t->n_lex || q < 0 || q >= t->lex[k].n_states)
        bad = "exit_classes: no such lexeme state";
    else if (within.obj && (size_t)within.len != W1 * sizeof(uint64_t))
        bad = "exit_classes: within must hold one bit per lexeme (uint64 words)";
    /* (within copied: its buffer is released at once; k is a lexeme, so W1 >= 1) */
    uint64_t *within_bits = NULL;
    if (within.obj) {
        if (!bad && (within_bits = PyMem_Malloc(W1 * sizeof(uint64_t))))
            memcpy(within_bits, within.buf, W1 * sizeof(uint64_t));
        PyBuffer_Release(&within);
        if (!bad && !within_bits)
            return PyErr_NoMemory();
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    Py_buffer bb = {0}, ob = {0};
    int32_t *rs = NULL, *class_of = NULL, *by_first = NULL, *slot = NULL;
    uint64_t *classes = NULL, *bits = NULL;
    Py_ssize_t n = 0, n_cls = 0, cap_cls = 0;
    size_t n_slot = 0;
    PyObject *out = NULL;
    int32_t first_at[257];
    if (token_args(blob_o, off_o, ranks_o, &bb, &ob, &rs, &n) < 0)
        goto done;
    const uint8_t *blob = bb.buf;
    const int64_t *off = ob.buf;
    /* per first byte, the lexemes that can start with it */
    if (!(by_first = PyMem_Malloc(((size_t)t->n_lex * 256 + 1) * sizeof(int32_t))) ||
        !(bits = PyMem_Malloc(W * sizeof(uint64_t))) ||
        !(class_of = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int32_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    {
        int32_t m = 0;
        for (int b = 0; b < 256; b++) {
            first_at[b] = m;
            for (int32_t L = 0; L < t->n_lex; L++)
                if (t->lex[L].n_states && t->lex[L].trans[b] >= 0
                    && (!within_bits || (within_bits[L >> 6] >> (L & 63) & 1)))
                    by_first[m++] = L;
        }
        first_at[256] = m;
    }
    const Lex *K = &t->lex[k];
    const uint64_t *follow = t->follow + 4 * (size_t)k;
    int32_t last = -1;   /* the class of the token before (neighbours in byte order often agree) */
    long long reads = 0;   /* lexemes started on a rest, and bytes they read */
    for (Py_ssize_t x = 0; x < n; x++) {
        const uint8_t *data = blob + off[rs[x]];
        int32_t len = (int32_t)(off[rs[x] + 1] - off[rs[x]]);
        memset(bits, 0, W * sizeof(uint64_t));
        int32_t s = q;
        for (int32_t i = 0; i + 1 < len; i++) {
            s = K->trans[256 * (size_t)s + data[i]];
            if (s < 0)
                break;
            int c = data[i + 1];
            if (!K->accept[s] || !has_byte(follow, c))
                continue;
            /* k ends after byte i: which lexemes read the rest data[i + 1 ..] to its end
             * (A), which accept inside it before a byte that may follow them (E) */
            for (int32_t f = first_at[c]; f < first_at[c + 1]; f++) {
                int32_t L = by_first[f];
                if (bits[L >> 6] >> (L & 63) & 1)
                    continue;   /* in A already: then E does not matter */
                const int32_t *tr = t->lex[L].trans;
                const uint8_t *acc = t->lex[L].accept;
                const uint64_t *fl = t->follow + 4 * (size_t)L;
                int32_t u = tr[c];
                reads++;
                for (int32_t y = i + 2; y < len && u >= 0; y++, reads++) {
                    if (acc[u] && has_byte(fl, data[y]))
                        bits[W1 + (L >> 6)] |= (uint64_t)1 << (L & 63);
                    u = tr[256 * (size_t)u + data[y]];
                }
                if (u >= 0)
                    bits[L >> 6] |= (uint64_t)1 << (L & 63);
            }
        }
        if (last >= 0 && !memcmp(classes + W * (size_t)last, bits, W * sizeof(uint64_t))) {
            class_of[x] = last;
            continue;
        }
        /* the class of this pair of sets: interned in an open-addressing table of class ids */
        uint64_t h = 1469598103934665603ULL;
        for (size_t w = 0; w < W; w++)
            h = (h ^ bits[w]) * 1099511628211ULL;
        if ((size_t)(n_cls + 1) * 2 > n_slot) {
            size_t ns = n_slot ? 2 * n_slot : 64;
            int32_t *sl = PyMem_Malloc(ns * sizeof(int32_t));
            if (!sl) {
                PyErr_NoMemory();
                goto done;
            }
            for (size_t i = 0; i < ns; i++)
                sl[i] = -1;
            for (Py_ssize_t c2 = 0; c2 < n_cls; c2++) {
                uint64_t h2 = 1469598103934665603ULL;
                for (size_t w = 0; w < W; w++)
                    h2 = (h2 ^ classes[W * (size_t)c2 + w]) * 1099511628211ULL;
                size_t p = hmix(h2) & (ns - 1);
                while (sl[p] >= 0)
                    p = (p + 1) & (ns - 1);
                sl[p] = (int32_t)c2;
            }
            PyMem_Free(slot);
            slot = sl;
            n_slot = ns;
        }
        size_t p = hmix(h) & (n_slot - 1);
        int32_t found = -1;
        for (; slot[p] >= 0; p = (p + 1) & (n_slot - 1))
            if (!memcmp(classes + W * (size_t)slot[p], bits, W * sizeof(uint64_t))) {
                found = slot[p];
                break;
            }
        if (found < 0) {
            if (grow((void **)&classes, &cap_cls, (n_cls + 1) * (Py_ssize_t)W, sizeof(uint64_t), 16 * (Py_ssize_t)W) < 0)
                goto done;
            memcpy(classes + W * (size_t)n_cls, bits, W * sizeof(uint64_t));
            found = (int32_t)n_cls++;
            slot[p] = found;
        }
        class_of[x] = last = found;
    }
    {
        PyObject *a = PyBytes_FromStringAndSize((const char *)class_of, n * (Py_ssize_t)sizeof(int32_t));
        PyObject *b = PyBytes_FromStringAndSize((const char *)classes, n_cls * (Py_ssize_t)(W * sizeof(uint64_t)));
        PyObject *r = PyLong_FromLongLong(reads);
        if (a && b && r)
            out = PyTuple_Pack(3, a, b, r);
        Py_XDECREF(r);
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
done:
    PyMem_Free(within_bits);
    PyMem_Free(rs);
    PyMem_Free(class_of);
    PyMem_Free(by_first);
    PyMem_Free(bits);
    PyMem_Free(slot);
    PyMem_Free(classes);
    if (bb.obj)
        PyBuffer_Release(&bb);
    if (ob.obj)
        PyBuffer_Release(&ob);
    return out;
}

/* ---------------------------------------------------------------------------------------
 * signatures (see ParserTables.signature_of)
 */

#define SIG_SELF (-1)

typedef struct {
    PyObject *source;   /* a chart (list: the .sig of its sets) or a callable */
    Py_ssize_t j;
    int32_t *pos;       /* a small memo: position -> signature */
    int64_t *val;
    int32_t n, cap;
} SigOf;

static int
sig_of(SigOf *c, int32_t o, int64_t *out)
{
    if (o == c->j) {
        *out = SIG_SELF;
        return 0;
    }
    for (int32_t i = 0; i < c->n; i++)
        if (c->pos[i] == o) {
            *out = c->val[i];
            return 0;
        }
    PyObject *v;
    if (PyList_Check(c->source)) {
        if (o < 0 || o >= PyList_GET_SIZE(c->source)) {
            PyErr_Format(PyExc_IndexError, "no chart set %d", (int)o);
            return -1;
        }
        PyObject *x = PyList_GET_ITEM(c->source, o);
        if (Py_TYPE(x) == &SetType) {
            v = ((Set *)x)->sig ? ((Set *)x)->sig : Py_None;
            Py_INCREF(v);
        } else {
            v = PyObject_GetAttrString(x, "sig");
        }
    } else {
        PyObject *arg = PyLong_FromLong(o);
        v = arg ? PyObject_CallOneArg(c->source, arg) : NULL;
        Py_XDECREF(arg);
    }
    if (!v)
        return -1;
    if (v == Py_None) {
        Py_DECREF(v);
        PyErr_Format(PyExc_ValueError, "chart set %d has no signature yet", (int)o);
        return -1;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "a signature does not fit 64 bits");
        return -1;
    }
    if (c->n == c->cap) {
        int32_t cap = c->cap ? 2 * c->cap : 16;
        int32_t *pos = PyMem_Realloc(c->pos, (size_t)cap * sizeof(int32_t));
        if (pos)
            c->pos = pos;
        int64_t *val = pos ? PyMem_Realloc(c->val, (size_t)cap * sizeof(int64_t)) : NULL;
        if (!pos || !val) {
            PyErr_NoMemory();
            return -1;
        }
        c->val = val;
        c->cap = cap;
    }
    c->pos[c->n] = o;
    c->val[c->n++] = x;
    *out = x;
    return 0;
}

static int
cmp_i64pair(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int
cmp_scan_order(const void *a, const void *b)
{
    /* by (-1 - lexeme, state): lexemes descending, then states ascending */
    const Scan *x = *(Scan *const *)a, *y = *(Scan *const *)b;
    if (x->lexeme != y->lexeme)
        return x->lexeme > y->lexeme ? -1 : 1;
    return x->state < y->state ? -1 : x->state > y->state;
}

/* signature_of(set, j, sig_of): the same tuple as ParserTables.signature_of; sig_of is the
 * chart (each origin's set's .sig) or a callable position -> signature */
static PyObject *
tables_signature_of(Tables *t, PyObject *args)
{
    PyObject *set_o, *source;
    Py_ssize_t j;
    if (!PyArg_ParseTuple(args, "OnO", &set_o, &j, &source))
        return NULL;
    Set *s = as_set(t, set_o);
    if (!s)
        return NULL;
    SigOf c = {source, j, NULL, NULL, 0, 0};
    int64_t *pairs = PyMem_Malloc((size_t)(2 * s->n_items + 1) * sizeof(int64_t));
    Scan **order = PyMem_Malloc((size_t)(s->n_scans + 1) * sizeof(Scan *));
    int64_t *osig = NULL;
    PyObject *out = NULL;
    int32_t max_origins = 1;
    for (int32_t i = 0; i < s->n_scans; i++)
        if (s->scans[i].n > max_origins)
            max_origins = s->scans[i].n;
    osig = PyMem_Malloc((size_t)max_origins * sizeof(int64_t));
    if (!pairs || !order || !osig) {
        PyErr_NoMemory();
        goto done;
    }
    int32_t np = 0;
    for (int32_t i = 0; i < s->n_items; i++) {
        if (!t->relevant[s->items[i].it])
            continue;
        int64_t sg;
        if (sig_of(&c, s->items[i].origin, &sg) < 0)
            goto done;
        pairs[2 * np] = t->item_class[s->items[i].it];
        pairs[2 * np + 1] = sg;
        np++;
    }
    qsort(pairs, (size_t)np, 2 * sizeof(int64_t), cmp_i64pair);
    int32_t nd = 0;
    for (int32_t i = 0; i < np; i++)
        if (!nd || pairs[2 * nd - 2] != pairs[2 * i] || pairs[2 * nd - 1] != pairs[2 * i + 1]) {
            pairs[2 * nd] = pairs[2 * i];
            pairs[2 * nd + 1] = pairs[2 * i + 1];
            nd++;
        }
    for (int32_t i = 0; i < s->n_scans; i++)
        order[i] = &s->scans[i];
    qsort(order, (size_t)s->n_scans, sizeof(Scan *), cmp_scan_order);
    out = PyTuple_New(s->n_scans + nd);
    if (!out)
        goto done;
    for (int32_t i = 0; i < s->n_scans; i++) {
        const Scan *sc = order[i];
        int32_t m = 0;
        for (int32_t x = 0; x < sc->n; x++)
            if (sig_of(&c, s->origins[sc->off + x], &osig[m++]) < 0)
                goto fail;
        qsort(osig, (size_t)m, sizeof(int64_t), cmp_i64);
        int32_t u = 0;
        for (int32_t x = 0; x < m; x++)
            if (!u || osig[u - 1] != osig[x])
                osig[u++] = osig[x];
        PyObject *sigs = PyTuple_New(u);
        if (!sigs)
            goto fail;
        for (int32_t x = 0; x < u; x++) {
            PyObject *v = PyLong_FromLongLong(osig[x]);
            if (!v) {
                Py_DECREF(sigs);
                goto fail;
            }
            PyTuple_SET_ITEM(sigs, x, v);
        }
        PyObject *part = Py_BuildValue("(iiN)", -1 - sc->lexeme, sc->state, sigs);
        if (!part)
            goto fail;
        PyTuple_SET_ITEM(out, i, part);
    }
    for (int32_t i = 0; i < nd; i++) {
        PyObject *part = Py_BuildValue("(LL)", (long long)pairs[2 * i], (long long)pairs[2 * i + 1]);
        if (!part)
            goto fail;
        PyTuple_SET_ITEM(out, s->n_scans + i, part);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyMem_Free(pairs);
    PyMem_Free(order);
    PyMem_Free(osig);
    PyMem_Free(c.pos);
    PyMem_Free(c.val);
    return out;
}

/* ---------------------------------------------------------------------------------------
 * try_texts: which byte strings the parser takes after the chart
 */

typedef struct {
    const uint8_t *data;
    Py_ssize_t len, idx;
} Text;

static int
cmp_text(const void *a, const void *b)
{
    const Text *x = a, *y = b;
    Py_ssize_t m = x->len < y->len ? x->len : y->len;
    int d = memcmp(x->data, y->data, (size_t)m);
    if (d)
        return d;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* try_texts(chart, texts) -> bytes: 1 where every byte of the text (a bytes object) can be
 * stepped after the chart, else 0, in the order of texts; texts sharing a start share its
 * steps (they are walked in sorted order on a stack of sets). */
static PyObject *
tables_try_texts(Tables *t, PyObject *args)
{
    PyObject *list, *texts_o;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &list, &texts_o))
        return NULL;
    PyObject *seq = PySequence_Fast(texts_o, "texts must be a sequence of bytes");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Chart chart;
    chart_of_list(&chart, t, list);
    Scratch sc;
    memset(&sc, 0, sizeof(sc));
    Text *texts = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Text));
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (!texts || !out) {
        if (!texts)
            PyErr_NoMemory();
        goto fail;
    }
    if (!chart.n_list) {
        PyErr_SetString(PyExc_ValueError, "try_texts() on an empty chart");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(x)) {
            PyErr_SetString(PyExc_TypeError, "texts must be bytes");
            goto fail;
        }
        texts[i].data = (const uint8_t *)PyBytes_AS_STRING(x);
        texts[i].len = PyBytes_GET_SIZE(x);
        texts[i].idx = i;
    }
    qsort(texts, (size_t)n, sizeof(Text), cmp_text);
    char *res = PyBytes_AS_STRING(out);
    const Text *prev = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Text *cur = &texts[i];
        Py_ssize_t common = 0;
        if (prev) {
            Py_ssize_t m = prev->len < cur->len ? prev->len : cur->len;
            while (common < m && prev->data[common] == cur->data[common])
                common++;
        }
        if (common > chart.n_stack)
            common = chart.n_stack;   /* the previous text died there */
        while (chart.n_stack > common)
            Py_DECREF(chart.stack[--chart.n_stack]);
        int ok = 1;
        for (Py_ssize_t pos = common; pos < cur->len; pos++) {
            Set *next;
            if (step_core(t, &chart, cur->data[pos], &next, &sc) < 0)
                goto fail;
            if (!next) {
                ok = 0;
                break;
            }
            if (chart_push(&chart, next) < 0) {
                Py_DECREF(next);
                goto fail;
            }
        }
        res[cur->idx] = (char)ok;
        prev = cur;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    for (Py_ssize_t i = 0; i < chart.n_stack; i++)
        Py_DECREF(chart.stack[i]);
    PyMem_Free(chart.stack);
    scratch_free(&sc);
    PyMem_Free(texts);
    Py_DECREF(seq);
    return out;
}

/* plain_chain(k, q) -> (room, plain): state_chain's result, for tests */
static PyObject *
tables_plain_chain(Tables *t, PyObject *args)
{
    int k, q;
    if (!PyArg_ParseTuple(args, "ii", &k, &q))
        return NULL;
    if (k < 0 || k >= t->n_lex || q < 0 || q >= t->lex[k].n_states) {
        PyErr_Format(PyExc_ValueError, "no state %d of lexeme %d", q, k);
        return NULL;
    }
    const Chain *ch = state_chain(t, k, q);
    if (!ch)
        return NULL;
    return Py_BuildValue("iy#", (int)ch->room, (const char *)ch->plain, (Py_ssize_t)256);
}

static PyMethodDef tables_methods[] = {
    {"step", (PyCFunction)(void (*)(void))tables_step, METH_FASTCALL,
     "step(chart, byte): the set after byte, or None if no parse survives it"},
    {"initial_set", (PyCFunction)tables_initial_set, METH_O, "initial_set(start_item)"},
    {"complete_closure", (PyCFunction)tables_complete_closure, METH_VARARGS,
     "complete_closure(chart, lexeme, origins, far=None): the completion work of a step ending lexeme; "
     "with far, whether it reads none of those positions"},
    {"started_after", (PyCFunction)tables_started_after, METH_VARARGS,
     "started_after(chart, lexeme, origins) -> bytes: the lexemes (a bit each, uint64 words) that start once it ends"},
    {"horizon", (PyCFunction)tables_horizon, METH_VARARGS,
     "horizon(chart, j, depth): the positions exactly depth origin links away from set j"},
    {"inside_lexemes", (PyCFunction)tables_inside_lexemes, METH_O,
     "inside_lexemes(scans): a set with these scans and no items"},
    {"allowed_bytes", (PyCFunction)tables_allowed_bytes, METH_O,
     "allowed_bytes(set): bitmask of the bytes that can follow"},
    {"is_accepting", (PyCFunction)tables_is_accepting, METH_O, "is_accepting(set)"},
    {"signature_of", (PyCFunction)tables_signature_of, METH_VARARGS,
     "signature_of(set, j, sig_of): ParserTables.signature_of; sig_of: the chart or a callable"},
    {"try_texts", (PyCFunction)tables_try_texts, METH_VARARGS,
     "try_texts(chart, texts) -> bytes: 1 where the parser takes every byte of the text"},
    {"exit_classes", (PyCFunction)tables_exit_classes, METH_VARARGS,
     "exit_classes(k, q, ranks, blob, offsets[, within]) -> (class_of, classes, reads): the lexemes (of within: "
     "bytes of uint64 words, a bit per lexeme) each token's rest stays inside, or ends inside, after lexeme k "
     "(from state q) ends in it"},
    {"plain_chain", (PyCFunction)tables_plain_chain, METH_VARARGS,
     "plain_chain(k, q) -> (room, plain): lexeme k's state q's plain bytes (plain[b] 1 for each) and how "
     "many of them keep the lexeme alive (CHAIN_WALK_MAX at most, CHAIN_ROOM_MAX: any number)"},
    {"walk_exits", (PyCFunction)tables_walk_exits, METH_VARARGS,
     "walk_exits(chart, far, ranks, blob, offsets, remember=1, fold=1, limit=-1) -> (found, beyond, steps, work) or None"},
    {NULL}
};

static PyTypeObject TablesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gramgen.automata._earley.Tables",
    .tp_basicsize = sizeof(Tables),
    .tp_dealloc = (destructor)tables_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The recogniser's tables as C arrays, with the cache of predictions.",
    .tp_methods = tables_methods,
    .tp_new = tables_new,
};

/* ---------------------------------------------------------------------------------------
 * the Python views of a set
 */

/* The view in *slot, made by `made` when there was none (a new reference, or NULL on an
 * error); another one made meanwhile (a collection ran Python code) is kept instead. */
static PyObject *
keep_view(PyObject **slot, PyObject *made)
{
    if (!made && !*slot)
        return NULL;
    if (*slot)
        Py_XDECREF(made);
    else
        *slot = made;
    Py_INCREF(*slot);
    return *slot;
}

static PyObject *
set_get_items(Set *s, void *unused)
{
    if (!s->py_items) {
        PyObject *out = PyFrozenSet_New(NULL);
        if (!out)
            return NULL;
        for (int32_t i = 0; i < s->n_items; i++) {
            PyObject *pair = Py_BuildValue("(ii)", s->items[i].it, s->items[i].origin);
            if (!pair || PySet_Add(out, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(pair);
        }
        return keep_view(&s->py_items, out);
    }
    Py_INCREF(s->py_items);
    return s->py_items;
}

static PyObject *
set_get_waiting(Set *s, void *unused)
{
    if (!s->py_waiting) {
        PyObject *out = PyDict_New();
        if (!out)
            return NULL;
        for (int32_t i = 0; i < s->n_items; i++) {
            if (s->items[i].sym == END)
                continue;
            PyObject *sym = PyLong_FromLong(s->items[i].sym);
            PyObject *pair = Py_BuildValue("(ii)", s->items[i].it, s->items[i].origin);
            PyObject *lst = sym ? PyDict_GetItemWithError(out, sym) : NULL;
            int bad = !sym || !pair || (!lst && PyErr_Occurred());
            if (!bad && !lst) {
                lst = PyList_New(0);
                bad = !lst || PyDict_SetItem(out, sym, lst) < 0;
                Py_XDECREF(lst);   /* the dict holds it */
            }
            bad = bad || PyList_Append(lst, pair) < 0;
            Py_XDECREF(sym);
            Py_XDECREF(pair);
            if (bad) {
                Py_DECREF(out);
                return NULL;
            }
        }
        return keep_view(&s->py_waiting, out);
    }
    Py_INCREF(s->py_waiting);
    return s->py_waiting;
}

static PyObject *
set_get_pred(Set *s, void *unused)
{
    Pred *p = s->pred;
    if (!p)
        return PyDict_New();
    if (!p->py) {
        PyObject *out = PyDict_New();
        if (!out)
            return NULL;
        for (int32_t lo = 0; lo < p->n;) {
            int32_t hi = lo;
            while (hi < p->n && p->sym[hi] == p->sym[lo])
                hi++;
            PyObject *tup = PyTuple_New(hi - lo);
            PyObject *sym = PyLong_FromLong(p->sym[lo]);
            int bad = !tup || !sym;
            for (int32_t x = lo; !bad && x < hi; x++) {
                PyObject *v = PyLong_FromLong(p->item[x]);
                bad = !v;
                if (v)
                    PyTuple_SET_ITEM(tup, x - lo, v);
            }
            bad = bad || PyDict_SetItem(out, sym, tup) < 0;
            Py_XDECREF(tup);
            Py_XDECREF(sym);
            if (bad) {
                Py_DECREF(out);
                return NULL;
            }
            lo = hi;
        }
        return keep_view(&p->py, out);
    }
    Py_INCREF(p->py);
    return p->py;
}

/* a new dict at each access (not kept: see the top of this file) */
static PyObject *
set_get_scans(Set *s, void *unused)
{
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (int32_t i = 0; i < s->n_scans; i++) {
        const Scan *sc = &s->scans[i];
        PyObject *key = Py_BuildValue("(ii)", sc->lexeme, sc->state);
        PyObject *origins = PyFrozenSet_New(NULL);
        int bad = !key || !origins;
        for (int32_t x = 0; !bad && x < sc->n; x++) {
            PyObject *v = PyLong_FromLong(s->origins[sc->off + x]);
            bad = !v || PySet_Add(origins, v) < 0;
            Py_XDECREF(v);
        }
        bad = bad || PyDict_SetItem(out, key, origins) < 0;
        Py_XDECREF(key);
        Py_XDECREF(origins);
        if (bad) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *
set_get_self(Set *s, void *unused)
{
    Py_INCREF(s);
    return (PyObject *)s;
}

static PyObject *
set_get_n_items(Set *s, void *unused)
{
    return PyLong_FromLong(s->n_items);
}

static PyGetSetDef set_getset[] = {
    {"items", (getter)set_get_items, NULL, "frozenset of the kernel items (item, origin)", NULL},
    {"waiting", (getter)set_get_waiting, NULL, "symbol -> kernel items before it", NULL},
    {"pred", (getter)set_get_pred, NULL, "symbol -> predicted items before it", NULL},
    {"scans", (getter)set_get_scans, NULL, "(lexeme, DFA state) -> frozenset of origins (a new dict at each access)", NULL},
    {"n_items", (getter)set_get_n_items, NULL, "the number of kernel items", NULL},
    {"_native_self", (getter)set_get_self, NULL, "this set (what a stand-in forwards to)", NULL},
    {NULL}
};

static PyMemberDef set_members[] = {
    {"sig", T_OBJECT, offsetof(Set, sig), 0, "the set's signature (filled in by the caller)"},
    {"local", T_OBJECT, offsetof(Set, local), 0, "local signatures by depth (filled in by the caller)"},
    {NULL}
};

static PyTypeObject SetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gramgen.automata._earley.Set",
    .tp_basicsize = sizeof(Set),
    .tp_dealloc = (destructor)set_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An Earley set (immutable, built by Tables.step).",
    .tp_getset = set_getset,
    .tp_members = set_members,
};

/* ------------------------------------------------------------------ follow sets */

/* Close bit sets (w words each) under sets[y] |= sets[x] for every edge x -> y (CSR: the
 * targets of x are tgt[off[x] .. off[x + 1]]), with a work list: the least fixed point,
 * whatever the order. */
static void
propagate_bits(int32_t n, int32_t w, uint64_t *sets, const int32_t *off, const int32_t *tgt, int32_t *work,
               char *queued)
{
    int32_t top = 0;
    for (int32_t x = 0; x < n; x++) {
        queued[x] = 0;
        if (off[x + 1] == off[x])
            continue;
        for (int32_t j = 0; j < w; j++)
            if (sets[(size_t)x * w + j]) {
                work[top++] = x;
                queued[x] = 1;
                break;
            }
    }
    while (top) {
        int32_t x = work[--top];
        queued[x] = 0;
        const uint64_t *fx = sets + (size_t)x * w;
        for (int32_t e = off[x]; e < off[x + 1]; e++) {
            uint64_t *fy = sets + (size_t)tgt[e] * w;
            int grew = 0;
            for (int32_t j = 0; j < w; j++)
                if (fx[j] & ~fy[j]) {
                    fy[j] |= fx[j];
                    grew = 1;
                }
            if (grew && !queued[tgt[e]]) {
                queued[tgt[e]] = 1;
                work[top++] = tgt[e];
            }
        }
    }
}

/* The item tables of a grammar (item_next, item_lhs over n_items items, rule_first over
 * n_rules rules, symbols below n_sym, nonterminals below n_nt), checked as `fn` reads them:
 * -1 with a ValueError naming `fn` where a symbol or rule is out of range or the last
 * rule has no end. */
static int
check_items(const char *fn, int32_t n_nt, Py_ssize_t n_sym, const int32_t *next, const int32_t *lhs_of,
            Py_ssize_t n_items, Py_ssize_t n_lhs, const int32_t *firsts, Py_ssize_t n_rules)
{
    if (n_nt < 0 || n_lhs != n_items) {
        PyErr_Format(PyExc_ValueError, "%s: inconsistent table sizes", fn);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n_items; i++)
        if (next[i] < -1 || next[i] >= n_sym || lhs_of[i] < 0 || lhs_of[i] >= n_nt) {
            PyErr_Format(PyExc_ValueError, "%s: a symbol out of range", fn);
            return -1;
        }
    for (Py_ssize_t r = 0; r < n_rules; r++)
        if (firsts[r] < 0 || firsts[r] >= n_items) {
            PyErr_Format(PyExc_ValueError, "%s: a rule out of range", fn);
            return -1;
        }
    if (n_items && next[n_items - 1] != END) {
        PyErr_Format(PyExc_ValueError, "%s: the last rule has no end", fn);
        return -1;
    }
    return 0;
}


/* follow_sets(n_nonterminals, item_next, item_lhs, rule_first, nullable, lexeme_live,
 * is_ignore[, dfa_tables]) -> (per lexeme, per nonterminal): ParserTables._follow_lexemes_py's
 * bit sets over the lexemes (see there), found with C bit sets; given the lexemes' DFA
 * tables, also the bytes that may follow each lexeme, 32 per lexeme (ParserTables.
 * _follow_bytes as bits), as a third item. */
static PyObject *
follow_sets(PyObject *self, PyObject *args)
{
    (void)self;
    int n_nt;
    PyObject *o_next, *o_lhs, *o_first, *o_nullable, *o_live, *o_ignore, *o_starts = NULL;
    if (!PyArg_ParseTuple(args, "iOOOOOO|O", &n_nt, &o_next, &o_lhs, &o_first, &o_nullable, &o_live, &o_ignore,
                          &o_starts))
        return NULL;
    Py_ssize_t n_items = 0, n_lhs = 0, n_rules = 0, n_sym = 0, n_lex = 0;
    int32_t *next = NULL, *lhs_of = NULL, *firsts = NULL, *live = NULL;
    uint8_t *nullable = NULL, *ignore = NULL;
    int32_t *e_from = NULL, *e_to = NULL, *off = NULL, *tgt = NULL, *work = NULL;
    uint64_t *first = NULL, *follow = NULL, *rest = NULL;
    char *queued = NULL;
    uint8_t *starts = NULL;
    PyObject *result = NULL, *lex_out = NULL, *nt_out = NULL, *bytes_out = NULL;
    if (!(next = int_array(o_next, &n_items, "item_next")) || !(lhs_of = int_array(o_lhs, &n_lhs, "item_lhs"))
        || !(firsts = int_array(o_first, &n_rules, "rule_first")) || !(live = int_array(o_live, &n_lex, "lexeme_live")))
        goto done;
    n_sym = n_nt + n_lex;
    if (check_items("follow_sets", n_nt, n_sym, next, lhs_of, n_items, n_lhs, firsts, n_rules)
        || !(nullable = bool_array(o_nullable, n_sym, "nullable")) || !(ignore = bool_array(o_ignore, n_lex, "is_ignore")))
        goto done;
    const int32_t w = (int32_t)((n_lex + 63) / 64) > 0 ? (int32_t)((n_lex + 63) / 64) : 1;
    const int32_t ns = (int32_t)n_sym;
    first = calloc((size_t)ns * w, sizeof(uint64_t));
    follow = calloc((size_t)ns * w, sizeof(uint64_t));
    rest = calloc((size_t)w * 2, sizeof(uint64_t));
    e_from = malloc((size_t)n_items * sizeof(int32_t) + 4);
    e_to = malloc((size_t)n_items * sizeof(int32_t) + 4);
    work = malloc((size_t)ns * sizeof(int32_t) + 4);
    queued = malloc((size_t)ns + 1);
    if (!first || !follow || !rest || !e_from || !e_to || !work || !queued) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_lex; k++)
        if (live[k])
            first[(size_t)(n_nt + k) * w + k / 64] |= (uint64_t)1 << (k % 64);
    /* FIRST: a body's lhs inherits the FIRST of each symbol up to its first non-nullable one */
    int32_t m = 0;
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        int32_t a = lhs_of[firsts[r]];
        for (int32_t i = firsts[r]; next[i] != END; i++) {
            e_from[m] = next[i];
            e_to[m++] = a;
            if (!nullable[next[i]])
                break;
        }
    }
    if (csr_of(ns, e_from, e_to, m, &off, &tgt)) {
        PyErr_NoMemory();
        goto done;
    }
    propagate_bits(ns, w, first, off, tgt, work, queued);
    free(off);
    free(tgt);
    off = tgt = NULL;
    uint64_t *ignored = rest + w;
    for (Py_ssize_t k = 0; k < n_lex; k++)
        if (ignore[k])
            ignored[k / 64] |= (uint64_t)1 << (k % 64);
    /* FOLLOW: what comes after a symbol in a body, and follow[lhs] when that rest is
     * nullable (an inclusion lhs -> symbol, propagated) */
    m = 0;
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        int32_t a = lhs_of[firsts[r]], end = firsts[r];
        while (next[end] != END)
            end++;
        memset(rest, 0, (size_t)w * sizeof(uint64_t));
        int rest_nullable = 1;
        for (int32_t i = end - 1; i >= firsts[r]; i--) {
            int32_t sym = next[i];
            uint64_t *fs = follow + (size_t)sym * w;
            for (int32_t j = 0; j < w; j++)
                fs[j] |= rest[j] | ignored[j];
            if (rest_nullable) {
                e_from[m] = a;
                e_to[m++] = sym;
            }
            const uint64_t *fi = first + (size_t)sym * w;
            if (nullable[sym])
                for (int32_t j = 0; j < w; j++)
                    rest[j] |= fi[j];
            else
                for (int32_t j = 0; j < w; j++)
                    rest[j] = fi[j];
            rest_nullable = rest_nullable && nullable[sym];
        }
    }
    if (csr_of(ns, e_from, e_to, m, &off, &tgt)) {
        PyErr_NoMemory();
        goto done;
    }
    propagate_bits(ns, w, follow, off, tgt, work, queued);
    lex_out = PyList_New(n_lex);
    nt_out = lex_out ? PyList_New(n_nt) : NULL;
    if (!nt_out)
        goto done;
    for (Py_ssize_t k = 0; k < n_lex; k++) {
        uint64_t *fk = follow + (size_t)(n_nt + k) * w;
        for (int32_t j = 0; j < w; j++) {
            if (ignore[k])   /* an ignored lexeme may be followed by any */
                fk[j] = j < (int32_t)(n_lex / 64) ? ~(uint64_t)0
                        : (n_lex % 64 && j == (int32_t)(n_lex / 64) ? (((uint64_t)1 << (n_lex % 64)) - 1) : 0);
            else
                fk[j] |= ignored[j];
        }
        PyObject *v = int_of_words(fk, w);
        if (!v)
            goto done;
        PyList_SET_ITEM(lex_out, k, v);
    }
    for (int32_t a = 0; a < n_nt; a++) {
        PyObject *v = int_of_words(follow + (size_t)a * w, w);
        if (!v)
            goto done;
        PyList_SET_ITEM(nt_out, a, v);
    }
    if (o_starts && o_starts != Py_None) {
        /* per lexeme, the bytes that may follow it: the union of its followers' first
         * bytes (32 bytes per lexeme, bit b of byte b / 8), read from the start rows of
         * their DFAs (a sequence of int32 [n, 256] tables, C-contiguous) */
        PyObject *tabs = PySequence_Fast(o_starts, "follow_sets: the DFA tables must be a sequence");
        if (!tabs)
            goto done;
        if (PySequence_Fast_GET_SIZE(tabs) != n_lex) {
            Py_DECREF(tabs);
            PyErr_SetString(PyExc_ValueError, "follow_sets: expected one DFA table per lexeme");
            goto done;
        }
        starts = calloc((size_t)(32 * n_lex) + 1, 1);
        if (!starts) {
            Py_DECREF(tabs);
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < n_lex; k++) {
            if (!live[k])
                continue;
            Py_buffer view;
            if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(tabs, k), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
                Py_DECREF(tabs);
                goto done;
            }
            if (view.itemsize != 4 || view.len < 256 * 4) {
                PyBuffer_Release(&view);
                Py_DECREF(tabs);
                PyErr_SetString(PyExc_ValueError, "follow_sets: a live lexeme's table must be int32 [n >= 1, 256]");
                goto done;
            }
            const int32_t *row = view.buf;
            for (int b = 0; b < 256; b++)
                if (row[b] >= 0)
                    starts[32 * k + b / 8] |= (uint8_t)(1u << (b % 8));
            PyBuffer_Release(&view);
        }
        Py_DECREF(tabs);
        if (!(bytes_out = PyBytes_FromStringAndSize(NULL, 32 * n_lex)))
            goto done;
        uint8_t *out = (uint8_t *)PyBytes_AS_STRING(bytes_out);
        memset(out, 0, (size_t)(32 * n_lex));
        for (Py_ssize_t k = 0; k < n_lex; k++) {
            const uint64_t *fk = follow + (size_t)(n_nt + k) * w;
            for (int32_t j = 0; j < w; j++)
                for (uint64_t bits = fk[j]; bits; bits &= bits - 1) {
                    Py_ssize_t f = (Py_ssize_t)j * 64 + __builtin_ctzll(bits);
                    if (f >= n_lex)
                        break;
                    for (int x = 0; x < 32; x++)
                        out[32 * k + x] |= starts[32 * f + x];
                }
        }
        result = PyTuple_Pack(3, lex_out, nt_out, bytes_out);
    } else {
        result = PyTuple_Pack(2, lex_out, nt_out);
    }
done:
    Py_XDECREF(lex_out);
    Py_XDECREF(nt_out);
    Py_XDECREF(bytes_out);
    free(starts);
    PyMem_Free(next);
    PyMem_Free(lhs_of);
    PyMem_Free(firsts);
    PyMem_Free(nullable);
    PyMem_Free(live);
    PyMem_Free(ignore);
    free(e_from);
    free(e_to);
    free(off);
    free(tgt);
    free(work);
    free(first);
    free(follow);
    free(rest);
    free(queued);
    return result;
}

/* ------------------------------------------------------------------ item classes */

/* (a, b, c) -> a number, in order of first appearance (open addressing) */
typedef struct {
    int64_t *keys;    /* 3 per slot */
    int32_t *vals;    /* -1: empty */
    size_t cap, n;
} TripleIds;

static int
triple_init(TripleIds *t, size_t expect)
{
    size_t cap = 16;
    while (cap < 2 * expect + 2)
        cap <<= 1;
    t->keys = malloc(cap * 3 * sizeof(int64_t));
    t->vals = malloc(cap * sizeof(int32_t));
    t->cap = cap;
    t->n = 0;
    if (!t->keys || !t->vals)
        return -1;
    for (size_t i = 0; i < cap; i++)
        t->vals[i] = -1;
    return 0;
}

/* the number of (a, b, c), given the next one if it is new (the table never fills: its
 * capacity is twice the keys it may get) */
static int32_t
triple_id(TripleIds *t, int64_t a, int64_t b, int64_t c)
{
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ULL ^ (uint64_t)b * 0xC2B2AE3D27D4EB4FULL ^ (uint64_t)c * 0x165667B19E3779F9ULL;
    h ^= h >> 29;
    size_t i = (size_t)h & (t->cap - 1);
    while (t->vals[i] >= 0) {
        const int64_t *k = t->keys + 3 * i;
        if (k[0] == a && k[1] == b && k[2] == c)
            return t->vals[i];
        i = (i + 1) & (t->cap - 1);
    }
    t->keys[3 * i] = a;
    t->keys[3 * i + 1] = b;
    t->keys[3 * i + 2] = c;
    t->vals[i] = (int32_t)t->n;
    return (int32_t)t->n++;
}

/* item_classes(named_lhs, named_next, glued, rule_first, accept_item) -> list: per item
 * the number of its class, (left-hand side, the symbols left to match, glued) named in
 * order of first appearance, the accepting item a class of its own; what ParserTables
 * numbers with tuples of the symbols left. */
static PyObject *
item_classes(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o_lhs, *o_next, *o_glued, *o_first;
    int accept_item;
    if (!PyArg_ParseTuple(args, "OOOOi", &o_lhs, &o_next, &o_glued, &o_first, &accept_item))
        return NULL;
    Py_ssize_t n = 0, n2 = 0, n3 = 0, n_rules = 0;
    int32_t *lhs = NULL, *next = NULL, *glued = NULL, *firsts = NULL, *suffix = NULL;
    TripleIds suffixes = {0}, classes = {0};
    PyObject *out = NULL;
    if (!(lhs = int_array(o_lhs, &n, "named_lhs")) || !(next = int_array(o_next, &n2, "named_next"))
        || !(glued = int_array(o_glued, &n3, "glued")) || !(firsts = int_array(o_first, &n_rules, "rule_first")))
        goto done;
    if (n2 != n || n3 != n || (n && next[n - 1] != END)) {
        PyErr_SetString(PyExc_ValueError, "item_classes: inconsistent item tables");
        goto done;
    }
    for (Py_ssize_t r = 0; r < n_rules; r++)
        if (firsts[r] < 0 || firsts[r] >= n || (r && firsts[r] <= firsts[r - 1])) {
            PyErr_SetString(PyExc_ValueError, "item_classes: a rule out of range");
            goto done;
        }
    if (n && (!n_rules || firsts[0] != 0)) {
        PyErr_SetString(PyExc_ValueError, "item_classes: rules do not cover the items");
        goto done;
    }
    suffix = malloc((size_t)n * sizeof(int32_t) + 4);
    if (!suffix || triple_init(&suffixes, (size_t)n) || triple_init(&classes, (size_t)n + 1)) {
        PyErr_NoMemory();
        goto done;
    }
    /* each suffix of a rule named by its first symbol and the suffix after it, from the
     * rule's end (-1: the empty suffix) */
    for (Py_ssize_t r = n_rules - 1; r >= 0; r--) {
        int32_t end = firsts[r];
        while (next[end] != END)
            end++;
        if (end + 1 != (r + 1 < n_rules ? firsts[r + 1] : n)) {
            PyErr_SetString(PyExc_ValueError, "item_classes: rules do not cover the items");
            goto done;
        }
        int32_t after = -1;
        suffix[end] = after;
        for (int32_t j = end - 1; j >= firsts[r]; j--) {
            after = triple_id(&suffixes, next[j], after, 0);
            suffix[j] = after;
        }
    }
    out = PyList_New(n);
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t c = i == accept_item ? triple_id(&classes, INT64_MIN, 0, 0)
                                     : triple_id(&classes, lhs[i], suffix[i], glued[i]);
        PyObject *v = PyLong_FromLong(c);
        if (!v) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, v);
    }
done:
    PyMem_Free(lhs);
    PyMem_Free(next);
    PyMem_Free(glued);
    PyMem_Free(firsts);
    free(suffix);
    free(suffixes.keys);
    free(suffixes.vals);
    free(classes.keys);
    free(classes.vals);
    return out;
}

/* A name's symbol id (interned in `ids`, a dict name -> id): the id it has, or the next one
 * (then *fresh is set); -1 with an exception set on failure */
static Py_ssize_t
symbol_id(PyObject *ids, PyObject *name, int *fresh)
{
    PyObject *found = PyDict_GetItemWithError(ids, name);
    if (found)
        return PyLong_AsSsize_t(found);
    if (PyErr_Occurred())
        return -1;
    Py_ssize_t id = PyDict_GET_SIZE(ids);
    PyObject *v = PyLong_FromSsize_t(id);
    if (!v || PyDict_SetItem(ids, name, v) < 0) {
        Py_XDECREF(v);
        return -1;
    }
    Py_DECREF(v);
    *fresh = 1;
    return id;
}

/* tuple of ints from an int32 array */
static PyObject *
int_tuple(const int32_t *a, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(a[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* rule_items(rules, lexeme_names, live, start, augmented): ParserTables' rules and items
 * (earley._rule_items_py is the reference, with the same output). `rules`: objects with
 * `lhs` and `rhs`; `live[k]`: lexeme k derives some string. Keeps the rules whose every
 * symbol is productive (a live lexeme, or a nonterminal with such a rule; none where
 * `start` is a lexeme), after `augmented -> start`; nonterminals numbered in order of
 * first left-hand side. None when `start` is not productive. Else (rules as (lhs, rhs)
 * pairs, nonterminal names, item_next, item_lhs, item_rule, rule_first, rules_of,
 * relevant_item). */
static PyObject *
rule_items(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o_rules, *o_lex, *o_live, *start, *augmented;
    if (!PyArg_ParseTuple(args, "OOOUU", &o_rules, &o_lex, &o_live, &start, &augmented))
        return NULL;
    PyObject *rules = NULL, *lex = NULL, *ids = NULL, *names = NULL, *result = NULL;
    PyObject *lhs_attr = NULL, *rhs_attr = NULL, *kept_rules = NULL, *nt_names = NULL;
    PyObject **rhs_of = NULL;
    int32_t *lhs = NULL, *body_at = NULL, *missing = NULL, *nt_of = NULL, *rule_nt = NULL;
    int32_t *next = NULL, *item_lhs = NULL, *item_rule = NULL, *firsts = NULL, *kept = NULL;
    int32_t *rules_of_n = NULL, *rules_of_at = NULL, *rules_of = NULL;
    IVec body = {0}, lex_k = {0};   /* (the bodies' symbols end to end; per symbol, its lexeme or -1) */
    uint8_t *live = NULL, *productive = NULL;
    Py_ssize_t n_items = 0, n_rules = 0, n_lex = 0;
    if (!(rules = PySequence_Fast(o_rules, "rules")) || !(lex = PySequence_Fast(o_lex, "lexeme_names")))
        goto done;
    n_rules = PySequence_Fast_GET_SIZE(rules);
    n_lex = PySequence_Fast_GET_SIZE(lex);
    if (!(live = bool_array(o_live, n_lex, "live")) || !(ids = PyDict_New()) || !(names = PyList_New(0))
        || !(lhs_attr = PyUnicode_InternFromString("lhs")) || !(rhs_attr = PyUnicode_InternFromString("rhs")))
        goto done;
    lhs = malloc((size_t)(n_rules + 1) * sizeof(int32_t));
    body_at = malloc((size_t)(n_rules + 2) * sizeof(int32_t));
    rhs_of = calloc((size_t)n_rules + 1, sizeof(PyObject *));
    if (!lhs || !body_at || !rhs_of) {
        PyErr_NoMemory();
        goto done;
    }
    /* symbols: the lexemes first (ids 0..n_lex-1), then the other names as they come */
#define INTERN(name, out)                                                   \
    do {                                                                    \
        int fresh_ = 0;                                                     \
        Py_ssize_t id_ = symbol_id(ids, (name), &fresh_);                   \
        if (id_ < 0)                                                        \
            goto done;                                                      \
        if (fresh_) {                                                       \
            if (id_ > INT32_MAX - 2 || PyList_Append(names, (name)) < 0     \
                || ivec_push(&lex_k, -1) < 0) {                             \
                if (!PyErr_Occurred())                                      \
                    PyErr_NoMemory();                                       \
                goto done;                                                  \
            }                                                               \
        }                                                                   \
        (out) = (int32_t)id_;                                               \
    } while (0)
    for (Py_ssize_t k = 0; k < n_lex; k++) {
        PyObject *name = PySequence_Fast_GET_ITEM(lex, k);
        int32_t id;
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "rule_items: a lexeme name that is not a str");
            goto done;
        }
        INTERN(name, id);
        if (lex_k.a[id] < 0)
            lex_k.a[id] = (int32_t)k;
    }
    for (Py_ssize_t r = 0; r < n_rules; r++) {
        PyObject *rule = PySequence_Fast_GET_ITEM(rules, r);
        PyObject *l = PyObject_GetAttr(rule, lhs_attr);
        if (!l)
            goto done;
        if (!PyUnicode_Check(l)) {
            Py_DECREF(l);
            PyErr_SetString(PyExc_TypeError, "rule_items: a left-hand side that is not a str");
            goto done;
        }
        int32_t id;
        INTERN(l, id);
        Py_DECREF(l);
        lhs[r] = id;
        PyObject *rhs_o = PyObject_GetAttr(rule, rhs_attr);
        if (!rhs_o)
            goto done;
        rhs_of[r] = PySequence_Tuple(rhs_o);
        Py_DECREF(rhs_o);
        if (!rhs_of[r])
            goto done;
        Py_ssize_t len = PyTuple_GET_SIZE(rhs_of[r]);
        body_at[r] = (int32_t)body.n;
        if (body.n + len > INT32_MAX - 2) {
            PyErr_SetString(PyExc_OverflowError, "rule_items: too many symbols");
            goto done;
        }
        for (Py_ssize_t j = 0; j < len; j++) {
            PyObject *s = PyTuple_GET_ITEM(rhs_of[r], j);
            int32_t id;
            if (!PyUnicode_Check(s)) {
                PyErr_SetString(PyExc_TypeError, "rule_items: a symbol that is not a str");
                goto done;
            }
            INTERN(s, id);
            if (ivec_push(&body, id) < 0)
                goto done;
        }
    }
    const Py_ssize_t m = body.n;
    body_at[n_rules] = (int32_t)m;
    int32_t start_id, aug_id;
    INTERN(start, start_id);
    INTERN(augmented, aug_id);
#undef INTERN
    const Py_ssize_t n_sym = PyDict_GET_SIZE(ids);
    /* productive: a live lexeme, or a nonterminal with a rule of productive symbols */
    productive = calloc((size_t)n_sym + 1, 1);
    missing = malloc(((size_t)n_rules + 1) * sizeof(int32_t));
    if (!productive || !missing) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t id = 0; id < n_sym; id++)
        productive[id] = lex_k.a[id] >= 0 && live[lex_k.a[id]];
    if (close_rules((int32_t)n_sym, (int32_t)n_rules, lhs, body_at, body_at + 1, body.a, productive, missing)) {
        PyErr_NoMemory();
        goto done;
    }
    if (!productive[start_id]) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    /* the kept rules, after augmented -> start (none where the start is a lexeme) */
    kept = malloc((size_t)(n_rules + 1) * sizeof(int32_t));
    nt_of = malloc((size_t)(n_sym + 1) * sizeof(int32_t));
    rule_nt = malloc((size_t)(n_rules + 2) * sizeof(int32_t));
    if (!kept || !nt_of || !rule_nt) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n_kept = 0;
    if (lex_k.a[start_id] < 0)
        for (Py_ssize_t r = 0; r < n_rules; r++)
            if (!missing[r])
                kept[n_kept++] = (int32_t)r;
    for (Py_ssize_t id = 0; id < n_sym; id++)
        nt_of[id] = -1;
    int32_t n_nt = 0;
    nt_of[aug_id] = n_nt++;
    rule_nt[0] = nt_of[aug_id];
    for (Py_ssize_t i = 0; i < n_kept; i++) {
        int32_t a = lhs[kept[i]];
        if (nt_of[a] < 0)
            nt_of[a] = n_nt++;
        rule_nt[i + 1] = nt_of[a];
    }
    const Py_ssize_t n_out = n_kept + 1;
    n_items = n_out + 1 + (Py_ssize_t)m;   /* at most: every body once, one end per rule */
    next = malloc((size_t)n_items * sizeof(int32_t));
    item_lhs = malloc((size_t)n_items * sizeof(int32_t));
    item_rule = malloc((size_t)n_items * sizeof(int32_t));
    firsts = malloc((size_t)n_out * sizeof(int32_t));
    rules_of_n = calloc((size_t)n_nt + 1, sizeof(int32_t));
    rules_of_at = calloc((size_t)n_nt + 1, sizeof(int32_t));
    rules_of = malloc((size_t)n_out * sizeof(int32_t));
    if (!next || !item_lhs || !item_rule || !firsts || !rules_of_n || !rules_of_at || !rules_of) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t r = 0; r < n_out; r++) {
        firsts[r] = (int32_t)at;
        rules_of_n[rule_nt[r]]++;
        const int32_t a = rule_nt[r];
        if (r == 0) {   /* augmented -> start */
            int32_t s = nt_of[start_id] >= 0 ? nt_of[start_id] : (int32_t)(n_nt + lex_k.a[start_id]);
            next[at] = s;
            item_lhs[at] = a;
            item_rule[at++] = 0;
        } else {
            int32_t k = kept[r - 1];
            for (int32_t j = body_at[k]; j < body_at[k + 1]; j++) {
                int32_t s = body.a[j];
                if (nt_of[s] < 0 && lex_k.a[s] < 0) {
                    PyErr_SetObject(PyExc_KeyError, PyList_GET_ITEM(names, s));
                    goto done;
                }
                next[at] = nt_of[s] >= 0 ? nt_of[s] : (int32_t)(n_nt + lex_k.a[s]);
                item_lhs[at] = a;
                item_rule[at++] = (int32_t)r;
            }
        }
        next[at] = END;
        item_lhs[at] = a;
        item_rule[at++] = (int32_t)r;
    }
    n_items = at;
    for (int32_t a = 1; a <= n_nt; a++)
        rules_of_at[a] = rules_of_at[a - 1] + rules_of_n[a - 1];
    for (Py_ssize_t r = 0; r < n_out; r++)
        rules_of[rules_of_at[rule_nt[r]]++] = firsts[r];
    /* the Python objects */
    if (!(kept_rules = PyList_New(n_out)) || !(nt_names = PyList_New(n_nt)))
        goto done;
    {
        PyObject *aug_rhs = PyTuple_Pack(1, start);
        PyObject *pair = aug_rhs ? PyTuple_Pack(2, augmented, aug_rhs) : NULL;
        Py_XDECREF(aug_rhs);
        if (!pair)
            goto done;
        PyList_SET_ITEM(kept_rules, 0, pair);
    }
    for (Py_ssize_t i = 0; i < n_kept; i++) {
        int32_t k = kept[i];
        PyObject *pair = PyTuple_Pack(2, PyList_GET_ITEM(names, lhs[k]), rhs_of[k]);
        if (!pair)
            goto done;
        PyList_SET_ITEM(kept_rules, i + 1, pair);
    }
    for (Py_ssize_t id = 0; id < n_sym; id++)
        if (nt_of[id] >= 0) {
            PyObject *nm = PyList_GET_ITEM(names, id);
            Py_INCREF(nm);
            PyList_SET_ITEM(nt_names, nt_of[id], nm);
        }
    PyObject *t_next = int_tuple(next, n_items), *t_lhs = int_tuple(item_lhs, n_items);
    PyObject *t_rule = int_tuple(item_rule, n_items), *t_first = int_tuple(firsts, n_out);
    PyObject *t_of = PyTuple_New(n_nt), *t_rel = PyTuple_New(n_items);
    if (t_next && t_lhs && t_rule && t_first && t_of && t_rel) {
        int ok = 1;
        for (int32_t a = 0; a < n_nt && ok; a++) {
            int32_t lo = a ? rules_of_at[a - 1] : 0;
            /* (rules_of_at[a] now ends group a) */
            PyObject *g = int_tuple(rules_of + lo, rules_of_at[a] - lo);
            if (!g)
                ok = 0;
            else
                PyTuple_SET_ITEM(t_of, a, g);
        }
        for (Py_ssize_t i = 0; i < n_items && ok; i++) {
            PyObject *b = (next[i] != END || i == firsts[0] + 1) ? Py_True : Py_False;
            Py_INCREF(b);
            PyTuple_SET_ITEM(t_rel, i, b);
        }
        if (ok)
            result = PyTuple_Pack(8, kept_rules, nt_names, t_next, t_lhs, t_rule, t_first, t_of, t_rel);
    }
    Py_XDECREF(t_next);
    Py_XDECREF(t_lhs);
    Py_XDECREF(t_rule);
    Py_XDECREF(t_first);
    Py_XDECREF(t_of);
    Py_XDECREF(t_rel);
done:
    if (rhs_of)
        for (Py_ssize_t r = 0; r < n_rules; r++)
            Py_XDECREF(rhs_of[r]);
    Py_XDECREF(rules);
    Py_XDECREF(lex);
    Py_XDECREF(ids);
    Py_XDECREF(names);
    Py_XDECREF(lhs_attr);
    Py_XDECREF(rhs_attr);
    Py_XDECREF(kept_rules);
    Py_XDECREF(nt_names);
    free(rhs_of);
    free(lhs);
    free(body_at);
    ivec_free(&body);
    ivec_free(&lex_k);
    free(missing);
    free(nt_of);
    free(rule_nt);
    free(next);
    free(item_lhs);
    free(item_rule);
    free(firsts);
    free(kept);
    free(rules_of_n);
    free(rules_of_at);
    free(rules_of);
    PyMem_Free(live);
    return result;
}

/* nullable_symbols(n_nonterminals, item_next, item_lhs, rule_first, lexeme_nullable) ->
 * tuple of bools, per symbol code (nonterminals, then lexemes): whether it derives the
 * empty string (ParserTables._nullable is the reference). The least fixed point with a
 * work list: each rule counts its symbols not known nullable, each nonterminal the rules
 * waiting on it. */
static PyObject *
nullable_symbols(PyObject *self, PyObject *args)
{
    (void)self;
    int n_nt;
    PyObject *o_next, *o_lhs, *o_first, *o_lex;
    if (!PyArg_ParseTuple(args, "iOOOO", &n_nt, &o_next, &o_lhs, &o_first, &o_lex))
        return NULL;
    Py_ssize_t n_items = 0, n_lhs = 0, n_rules = 0, n_lex = 0;
    int32_t *next = NULL, *lhs_of = NULL, *firsts = NULL, *lex = NULL, *missing = NULL, *ends = NULL, *rule_lhs = NULL;
    uint8_t *nullable = NULL;
    PyObject *result = NULL;
    if (!(next = int_array(o_next, &n_items, "item_next")) || !(lhs_of = int_array(o_lhs, &n_lhs, "item_lhs"))
        || !(firsts = int_array(o_first, &n_rules, "rule_first")) || !(lex = int_array(o_lex, &n_lex, "lexeme_nullable")))
        goto done;
    const Py_ssize_t n_sym = (Py_ssize_t)n_nt + n_lex;
    if (check_items("nullable_symbols", n_nt, n_sym, next, lhs_of, n_items, n_lhs, firsts, n_rules))
        goto done;
    nullable = calloc((size_t)n_sym + 1, 1);
    missing = malloc(((size_t)n_rules + 1) * sizeof(int32_t));
    ends = malloc(((size_t)n_rules + 1) * sizeof(int32_t));
    rule_lhs = malloc(((size_t)n_rules + 1) * sizeof(int32_t));
    if (!nullable || !missing || !ends || !rule_lhs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_lex; k++)
        nullable[n_nt + k] = lex[k] != 0;
    for (Py_ssize_t r = 0; r < n_rules; r++) {   /* (the last item is END: checked) */
        for (ends[r] = firsts[r]; next[ends[r]] != END; ends[r]++)
            ;
        rule_lhs[r] = lhs_of[firsts[r]];
    }
    if (close_rules((int32_t)n_sym, (int32_t)n_rules, rule_lhs, firsts, ends, next, nullable, missing)) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(result = PyTuple_New(n_sym)))
        goto done;
    for (Py_ssize_t x = 0; x < n_sym; x++) {
        PyObject *b = nullable[x] ? Py_True : Py_False;
        Py_INCREF(b);
        PyTuple_SET_ITEM(result, x, b);
    }
done:
    PyMem_Free(next);
    PyMem_Free(lhs_of);
    PyMem_Free(firsts);
    PyMem_Free(lex);
    free(nullable);
    free(missing);
    free(ends);
    free(rule_lhs);
    return result;
}

static PyMethodDef module_methods[] = {
    {"item_classes", item_classes, METH_VARARGS,
     "item_classes(named_lhs, named_next, glued, rule_first, accept_item)"},
    {"follow_sets", follow_sets, METH_VARARGS,
     "follow_sets(n_nonterminals, item_next, item_lhs, rule_first, nullable, lexeme_live, is_ignore[, "
     "dfa_tables])"},
    {"nullable_symbols", nullable_symbols, METH_VARARGS,
     "nullable_symbols(n_nonterminals, item_next, item_lhs, rule_first, lexeme_nullable)"},
    {"rule_items", rule_items, METH_VARARGS, "rule_items(rules, lexeme_names, live, start, augmented)"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_earley", "The Earley recogniser's step in C.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__earley(void)
{
    if (PyType_Ready(&TablesType) < 0 || PyType_Ready(&SetType) < 0)
        return NULL;
    str_native_self = PyUnicode_InternFromString("_native_self");
    if (!str_native_self)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&TablesType);
    Py_INCREF(&SetType);
    if (PyModule_AddObject(m, "Tables", (PyObject *)&TablesType) < 0 ||
        PyModule_AddObject(m, "Set", (PyObject *)&SetType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
