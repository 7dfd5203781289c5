/* Native DFA construction: subset construction, trim, minimization and canonical
 * numbering of a lexeme's NFA, in C.
 *
 * This is the same function as the Python pipeline of gramgen.automata.dfa
 * (_determinize -> _trim -> _minimize -> _renumber), which stays the reference and the
 * fallback when this module is not built; the tests compare the two on many regexes.
 * Compiling a JSON schema is mostly this work (string lexemes with counted lengths have
 * thousands of DFA states), and in Python it costs ~60 us per DFA state.
 *
 * Input: the regex as a flat program (see gramgen.automata.dfa._Program), expanded here
 * into a Thompson NFA exactly as _NFA.build does, then split into byte classes. Output: the minimal trimmed DFA
 * over classes, its states numbered breadth-first from the start in class order (the
 * canonical form: equal languages give equal tables), or a status when a budget is
 * exceeded. Determinization counts the same work as the Python version (epsilon-closure
 * steps of distinct seed sets) and the same states, so both raise at the same point.
 *
 * No numpy headers: arrays arrive through the buffer protocol and every index read from
 * them is checked. The GIL is released during the work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, TOO_MANY_STATES = 1, TOO_MUCH_WORK = 2, NO_MEMORY = 3, BAD_INPUT = 4, TOO_BIG_NFA = 5, TOO_DEEP = 6 };

/* ------------------------------------------------------------------ growable arrays */

typedef struct {
    int32_t *v;
    size_t n, cap;
} Vec;

static int
vec_reserve(Vec *a, size_t extra)
{
    if (a->n + extra <= a->cap)
        return 0;
    size_t cap = a->cap ? a->cap : 64;
    while (cap < a->n + extra)
        cap *= 2;
    int32_t *v = realloc(a->v, cap * sizeof(int32_t));
    if (!v)
        return -1;
    a->v = v;
    a->cap = cap;
    return 0;
}

static int
vec_push(Vec *a, int32_t x)
{
    if (vec_reserve(a, 1))
        return -1;
    a->v[a->n++] = x;
    return 0;
}

/* ------------------------------------------------- sets of ints, interned by content */

/* Each set is a sorted run of ints in `pool`; the table maps content -> (value). */
typedef struct {
    Vec pool;
    Vec start, len, value;   /* per interned set */
    int64_t *slots;          /* open addressing: index into start/len/value, or -1 */
    size_t n_slots;
} SetTable;

static uint64_t
hash_ints(const int32_t *x, size_t n)
{
    uint64_t h = 1469598103934665603ULL ^ n;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint32_t)x[i];
        h *= 1099511628211ULL;
        h ^= h >> 29;
    }
    return h;
}

static int
set_table_init(SetTable *t)
{
    memset(t, 0, sizeof(*t));
    t->n_slots = 1024;
    t->slots = malloc(t->n_slots * sizeof(int64_t));
    if (!t->slots)
        return -1;
    for (size_t i = 0; i < t->n_slots; i++)
        t->slots[i] = -1;
    return 0;
}

static void
set_table_free(SetTable *t)
{
    free(t->pool.v);
    free(t->start.v);
    free(t->len.v);
    free(t->value.v);
    free(t->slots);
}

/* The slot where `x` is or would go. */
static size_t
set_table_slot(const SetTable *t, const int32_t *x, size_t n, uint64_t h)
{
    size_t mask = t->n_slots - 1, i = h & mask;
    for (;;) {
        int64_t k = t->slots[i];
        if (k < 0)
            return i;
        if ((size_t)t->len.v[k] == n && memcmp(t->pool.v + t->start.v[k], x, n * sizeof(int32_t)) == 0)
            return i;
        i = (i + 1) & mask;
    }
}

static int
set_table_grow(SetTable *t)
{
    size_t n_slots = t->n_slots * 2;
    int64_t *slots = malloc(n_slots * sizeof(int64_t));
    if (!slots)
        return -1;
    for (size_t i = 0; i < n_slots; i++)
        slots[i] = -1;
    for (size_t k = 0; k < t->start.n; k++) {
        const int32_t *x = t->pool.v + t->start.v[k];
        size_t i = hash_ints(x, t->len.v[k]) & (n_slots - 1);
        while (slots[i] >= 0)
            i = (i + 1) & (n_slots - 1);
        slots[i] = (int64_t)k;
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
    return 0;
}

/* The value stored for set `x`, or -2 when absent. */
static int32_t
set_table_get(const SetTable *t, const int32_t *x, size_t n)
{
    int64_t k = t->slots[set_table_slot(t, x, n, hash_ints(x, n))];
    return k < 0 ? -2 : t->value.v[k];
}

static int
set_table_put(SetTable *t, const int32_t *x, size_t n, int32_t value)
{
    if ((t->start.n + 1) * 2 > t->n_slots && set_table_grow(t))
        return -1;
    size_t i = set_table_slot(t, x, n, hash_ints(x, n));
    if (t->pool.n > INT32_MAX - n)
        return -1;
    int32_t at = (int32_t)t->pool.n;
    if (vec_reserve(&t->pool, n) || vec_push(&t->start, at) || vec_push(&t->len, (int32_t)n)
        || vec_push(&t->value, value))
        return -1;
    memcpy(t->pool.v + at, x, n * sizeof(int32_t));
    t->pool.n += n;
    t->slots[i] = (int64_t)(t->start.n - 1);
    return 0;
}

static int
cmp_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------------------- determinize */

typedef struct {
    int32_t n;                       /* NFA states */
    const int64_t *eps_off;          /* n + 1 */
    const int32_t *eps_tgt;
    const int64_t *edge_off;         /* n + 1 */
    const int32_t *edges;            /* (lo byte, hi byte, target) triples */
    int32_t final;
    const int32_t *class_of;         /* 256 */
    int32_t n_classes;
} Nfa;

typedef struct {
    Nfa nfa;
    int32_t max_states;
    int64_t work_budget;
    /* results of determinize */
    Vec trans;                       /* n_dfa * n_classes */
    Vec accepting;                   /* n_dfa */
    int32_t n_dfa;
} Build;

/* Subset construction; the DFA states are the sets of NFA states that have byte edges
 * (plus the final state) of the epsilon closures of seed sets, like the Python version. */
static int
determinize(Build *b)
{
    const Nfa *a = &b->nfa;
    const int32_t k = a->n_classes;
    int status = NO_MEMORY;
    SetTable dfa_states, closed;     /* member set -> DFA id; seed set -> DFA id (or -1) */
    int ok_tables = set_table_init(&dfa_states) == 0;
    ok_tables = set_table_init(&closed) == 0 && ok_tables;
    int32_t *stamp = calloc((size_t)a->n, sizeof(int32_t));
    char *keep = calloc((size_t)a->n, 1);
    int32_t *head = malloc((size_t)k * sizeof(int32_t));
    Vec node_t = {0}, node_next = {0}, seeds = {0}, stack = {0}, members = {0}, prev = {0};
    int32_t cur_stamp = 0;
    int64_t work = 0;
    if (!ok_tables || !stamp || !keep || !head)
        goto done;
    for (int32_t s = 0; s < a->n; s++)
        keep[s] = a->edge_off[s + 1] > a->edge_off[s] || s == a->final;

    /* the id of the closure of `seeds` (sorted, distinct), interning it; -1 for none */
#define STATE_OF(result)                                                                \
    do {                                                                                \
        int32_t got_ = set_table_get(&closed, seeds.v, seeds.n);                        \
        if (got_ != -2) { result = got_; break; }                                       \
        cur_stamp++;                                                                    \
        stack.n = 0; members.n = 0;                                                     \
        int64_t seen_ = 0;                                                              \
        for (size_t i_ = 0; i_ < seeds.n; i_++) {                                       \
            stamp[seeds.v[i_]] = cur_stamp;                                             \
            if (vec_push(&stack, seeds.v[i_])) goto done;                               \
        }                                                                               \
        while (stack.n) {                                                               \
            int32_t s_ = stack.v[--stack.n];                                            \
            seen_++;                                                                    \
            if (keep[s_] && vec_push(&members, s_)) goto done;                          \
            for (int64_t e_ = a->eps_off[s_]; e_ < a->eps_off[s_ + 1]; e_++) {          \
                int32_t t_ = a->eps_tgt[e_];                                            \
                if (stamp[t_] != cur_stamp) {                                           \
                    stamp[t_] = cur_stamp;                                              \
                    if (vec_push(&stack, t_)) goto done;                                \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        work += seen_;                                                                  \
        if (work > b->work_budget) { status = TOO_MUCH_WORK; goto done; }              \
        if (!members.n) {                                                               \
            result = -1;                                                                \
        } else {                                                                        \
            qsort(members.v, members.n, sizeof(int32_t), cmp_int32);                    \
            result = set_table_get(&dfa_states, members.v, members.n);                  \
            if (result == -2) {                                                         \
                if (b->n_dfa >= b->max_states) { status = TOO_MANY_STATES; goto done; } \
                result = b->n_dfa++;                                                    \
                if (set_table_put(&dfa_states, members.v, members.n, result)) goto done;\
            }                                                                           \
        }                                                                               \
        if (set_table_put(&closed, seeds.v, seeds.n, result)) goto done;                \
    } while (0)

    int32_t sid;
    if (vec_push(&seeds, 0))
        goto done;
    STATE_OF(sid);
    (void)sid;
    for (int32_t i = 0; i < b->n_dfa; i++) {
        /* the members of DFA state i: interned in order, so set i is at index i of the
         * table's storage (read here before the loop below adds states and may move it) */
        const int32_t *mem = dfa_states.pool.v + dfa_states.start.v[i];
        const size_t m_len = (size_t)dfa_states.len.v[i];
        int32_t is_final = 0;
        for (int32_t c = 0; c < k; c++)
            head[c] = -1;
        node_t.n = node_next.n = 0;
        for (size_t j = 0; j < m_len; j++) {
            int32_t s = mem[j];
            if (s == a->final)
                is_final = 1;
            for (int64_t e = a->edge_off[s]; e < a->edge_off[s + 1]; e++) {
                int32_t c0 = a->class_of[a->edges[3 * e]], c1 = a->class_of[a->edges[3 * e + 1]];
                int32_t t = a->edges[3 * e + 2];
                for (int32_t c = c0; c <= c1; c++) {
                    if (vec_push(&node_t, t) || vec_push(&node_next, head[c]))
                        goto done;
                    head[c] = (int32_t)node_t.n - 1;
                }
            }
        }
        if (vec_push(&b->accepting, is_final) || vec_reserve(&b->trans, (size_t)k))
            goto done;
        b->trans.n += (size_t)k;
        prev.n = 0;
        int32_t prev_id = -1, have_prev = 0;
        for (int32_t c = 0; c < k; c++) {
            int32_t id = -1;
            if (head[c] >= 0) {
                seeds.n = 0;
                for (int32_t x = head[c]; x >= 0; x = node_next.v[x])
                    if (vec_push(&seeds, node_t.v[x]))
                        goto done;
                qsort(seeds.v, seeds.n, sizeof(int32_t), cmp_int32);
                size_t w = 0;
                for (size_t r = 0; r < seeds.n; r++)
                    if (!w || seeds.v[r] != seeds.v[w - 1])
                        seeds.v[w++] = seeds.v[r];
                seeds.n = w;
                if (have_prev && prev.n == seeds.n && memcmp(prev.v, seeds.v, w * sizeof(int32_t)) == 0) {
                    id = prev_id;
                } else {
                    STATE_OF(id);
                    prev.n = 0;
                    if (vec_reserve(&prev, seeds.n))
                        goto done;
                    memcpy(prev.v, seeds.v, seeds.n * sizeof(int32_t));
                    prev.n = seeds.n;
                    prev_id = id;
                    have_prev = 1;
                }
            }
            b->trans.v[(size_t)i * k + c] = id;
        }
    }
#undef STATE_OF
    status = OK;
done:
    set_table_free(&dfa_states);
    set_table_free(&closed);
    free(stamp);
    free(keep);
    free(head);
    free(node_t.v);
    free(node_next.v);
    free(seeds.v);
    free(stack.v);
    free(members.v);
    free(prev.v);
    return status;
}

/* ------------------------------------------------------ trim, minimize, renumber */

/* Hopcroft's partition refinement on the states plus an explicit sink n (the DFA is
 * completed so that the textbook algorithm applies). group_of[s]: 0 accepting, 1 another
 * live state (one that reaches acceptance), 2 dead. The sink and the dead states start in
 * one block (all equivalent: none reaches acceptance, and none has an edge to a live
 * state), never split and never a splitter: with a total transition function, splitting
 * by every block but one splits by that one too, so the work list may leave one initial
 * block out. Leaving out the sink means its in-edges, one per missing transition of the
 * DFA (most of them), are never walked. in_off / in_src / in_cls: the in-edges (source,
 * class) of each state, as CSR over 0..n-1. Blocks are contiguous ranges of `elems`;
 * marking moves a state to the front of its block. Returns block per state. */
static int
hopcroft(int32_t n, int32_t k, const int64_t *in_off, const int32_t *in_src, const int32_t *in_cls,
         const char *group_of, int32_t *blk_out)
{
    /* states 0..n-1, sink n; in_off[t]..in_off[t+1]: the in-edges (source, class) of t */
    const int32_t N = n + 1;
    int status = NO_MEMORY;
    int64_t *cnt = malloc(((size_t)k + 1) * sizeof(int64_t));
    int32_t *elems = malloc((size_t)N * sizeof(int32_t)), *loc = malloc((size_t)N * sizeof(int32_t));
    int32_t *first = malloc((size_t)N * sizeof(int32_t)), *end = malloc((size_t)N * sizeof(int32_t));
    int32_t *mid = malloc((size_t)N * sizeof(int32_t)), *work = malloc((size_t)N * sizeof(int32_t));
    char *in_work = calloc((size_t)N, 1);
    int32_t *touched = malloc((size_t)N * sizeof(int32_t));
    int32_t *pre = malloc((size_t)in_off[n] * sizeof(int32_t) + 4);
    int32_t *blk = blk_out;
    if (!cnt || !elems || !loc || !first || !end || !mid || !work || !in_work || !touched || !pre)
        goto done;
    /* initial partition: accepting states, the other live states, the sink with the
     * dead states; the work list holds the first two */
    int32_t n_blocks = 0, pos = 0;
    for (int pass = 0; pass < 3; pass++) {
        int32_t start = pos;
        for (int32_t s = 0; s < N; s++) {
            int32_t group = s == n ? 2 : group_of[s];
            if (group == pass) {
                elems[pos] = s;
                loc[s] = pos++;
                blk[s] = n_blocks;
            }
        }
        if (pos > start) {
            first[n_blocks] = mid[n_blocks] = start;
            end[n_blocks] = pos;
            n_blocks++;
        }
    }
    int32_t n_work = 0;
    for (int32_t b = 0; b < n_blocks; b++) {
        if (b == blk[n])
            continue;  /* the sink's block */
        work[n_work++] = b;
        in_work[b] = 1;
    }
    while (n_work) {
        int32_t a = work[--n_work];
        in_work[a] = 0;
        /* the splitter's predecessors, bucketed by class (read before any split moves
         * the splitter's own states) */
        memset(cnt, 0, ((size_t)k + 1) * sizeof(int64_t));
        for (int32_t i = first[a]; i < end[a]; i++)
            for (int64_t e = in_off[elems[i]]; e < in_off[elems[i] + 1]; e++)
                cnt[in_cls[e] + 1]++;
        for (int32_t c = 0; c < k; c++)
            cnt[c + 1] += cnt[c];
        for (int32_t i = first[a]; i < end[a]; i++)
            for (int64_t e = in_off[elems[i]]; e < in_off[elems[i] + 1]; e++)
                pre[cnt[in_cls[e]]++] = in_src[e];
        /* cnt[c] is now the end of class c's bucket */
        int64_t from = 0;
        for (int32_t c = 0; c < k; c++) {
            int64_t to = cnt[c];
            int32_t n_touched = 0;
            for (int64_t e = from; e < to; e++) {
                int32_t s = pre[e], b = blk[s];
                if (loc[s] < mid[b])
                    continue;  /* already marked */
                if (mid[b] == first[b])
                    touched[n_touched++] = b;
                int32_t p = loc[s], q = mid[b]++;
                int32_t other = elems[q];
                elems[q] = s;
                loc[s] = q;
                elems[p] = other;
                loc[other] = p;
            }
            from = to;
            for (int32_t t = 0; t < n_touched; t++) {
                int32_t b = touched[t];
                if (mid[b] == end[b]) {
                    mid[b] = first[b];
                    continue;
                }
                int32_t nb = n_blocks++;  /* the marked part becomes a new block */
                first[nb] = mid[nb] = first[b];
                end[nb] = mid[b];
                first[b] = mid[b];
                mid[b] = first[b];
                for (int32_t p = first[nb]; p < end[nb]; p++)
                    blk[elems[p]] = nb;
                if (in_work[b] || end[nb] - first[nb] <= end[b] - first[b]) {
                    work[n_work++] = nb;
                    in_work[nb] = 1;
                } else {
                    work[n_work++] = b;
                    in_work[b] = 1;
                }
            }
        }
    }
    status = OK;
done:
    free(cnt);
    free(pre);
    free(elems);
    free(loc);
    free(first);
    free(end);
    free(mid);
    free(work);
    free(in_work);
    free(touched);
    return status;
}

/* Trim, minimize and renumber the determinized automaton in `b`; the result replaces
 * b->trans / b->accepting (n_dfa = 0 for the empty language). */
static int
trim_minimize(Build *b)
{
    const int32_t n = b->n_dfa, k = b->nfa.n_classes;
    int status = NO_MEMORY;
    int32_t *trans = b->trans.v, *acc = b->accepting.v;
    /* in-edges (source, class) per target: for the live states and for Hopcroft */
    int64_t *in_off = calloc((size_t)n + 1, sizeof(int64_t));
    int32_t *in_src = NULL, *in_cls = NULL;
    char *live = calloc((size_t)n + 1, 1);
    int32_t *queue = malloc(((size_t)n + 1) * sizeof(int32_t));
    int32_t *blk = malloc(((size_t)n + 1) * sizeof(int32_t)), *bid = NULL, *rep = NULL, *order = NULL;
    int32_t *out_t = NULL, *out_a = NULL;
    if (!in_off || !live || !queue || !blk)
        goto done;
    for (int32_t s = 0; s < n; s++)
        for (int32_t c = 0; c < k; c++) {
            int32_t t = trans[(size_t)s * k + c];
            if (t >= 0)
                in_off[t + 1]++;
        }
    for (int32_t s = 0; s < n; s++)
        in_off[s + 1] += in_off[s];
    in_src = malloc((size_t)in_off[n] * sizeof(int32_t) + 4);
    in_cls = malloc((size_t)in_off[n] * sizeof(int32_t) + 4);
    if (!in_src || !in_cls)
        goto done;
    {
        int64_t *fill = malloc(((size_t)n + 1) * sizeof(int64_t));
        if (!fill)
            goto done;
        memcpy(fill, in_off, ((size_t)n + 1) * sizeof(int64_t));
        for (int32_t s = 0; s < n; s++)
            for (int32_t c = 0; c < k; c++) {
                int32_t t = trans[(size_t)s * k + c];
                if (t >= 0) {
                    int64_t at = fill[t]++;
                    in_src[at] = s;
                    in_cls[at] = c;
                }
            }
        free(fill);
    }
    /* live = can reach acceptance */
    int32_t qh = 0, qt = 0;
    for (int32_t s = 0; s < n; s++)
        if (acc[s]) {
            live[s] = 1;
            queue[qt++] = s;
        }
    while (qh < qt) {
        int32_t t = queue[qh++];
        for (int64_t e = in_off[t]; e < in_off[t + 1]; e++)
            if (!live[in_src[e]]) {
                live[in_src[e]] = 1;
                queue[qt++] = in_src[e];
            }
    }
    if (n == 0 || !live[0]) {
        b->n_dfa = 0;
        b->trans.n = b->accepting.n = 0;
        status = OK;
        goto done;
    }
    /* Hopcroft on the states as they are, the dead ones in the sink's block; the groups
     * reuse `live` (0 accepting, 1 other live, 2 dead) */
    for (int32_t s = 0; s < n; s++)
        live[s] = live[s] ? (acc[s] ? 0 : 1) : 2;
    if ((status = hopcroft(n, k, in_off, in_src, in_cls, live, blk)) != OK)
        goto done;
    status = NO_MEMORY;
    const int32_t dead = blk[n];   /* (the sink's block, which holds the dead states) */
    /* the quotient, numbered breadth-first from the start's block in class order; edges
     * into dead states cut */
    int32_t n_blocks = 0;
    for (int32_t s = 0; s <= n; s++)
        if (blk[s] + 1 > n_blocks)
            n_blocks = blk[s] + 1;
    bid = malloc((size_t)n_blocks * sizeof(int32_t));
    rep = malloc((size_t)n_blocks * sizeof(int32_t));
    order = malloc((size_t)n_blocks * sizeof(int32_t));
    if (!bid || !rep || !order)
        goto done;
    for (int32_t x = 0; x < n_blocks; x++)
        bid[x] = rep[x] = -1;
    for (int32_t s = 0; s < n; s++)
        if (blk[s] != dead && rep[blk[s]] < 0)
            rep[blk[s]] = s;
    int32_t n_out = 0;
    bid[blk[0]] = n_out;
    order[n_out++] = blk[0];
    for (int32_t i = 0; i < n_out; i++) {
        int32_t r = rep[order[i]];
        for (int32_t c = 0; c < k; c++) {
            int32_t t = trans[(size_t)r * k + c];
            if (t >= 0 && blk[t] != dead && bid[blk[t]] < 0) {
                bid[blk[t]] = n_out;
                order[n_out++] = blk[t];
            }
        }
    }
    out_t = malloc((size_t)n_out * k * sizeof(int32_t) + 1);
    out_a = malloc((size_t)n_out * sizeof(int32_t) + 1);
    if (!out_t || !out_a)
        goto done;
    for (int32_t i = 0; i < n_out; i++) {
        int32_t r = rep[order[i]];
        out_a[i] = acc[r];
        for (int32_t c = 0; c < k; c++) {
            int32_t t = trans[(size_t)r * k + c];
            out_t[(size_t)i * k + c] = t >= 0 && blk[t] != dead ? bid[blk[t]] : -1;
        }
    }
    free(b->trans.v);
    free(b->accepting.v);
    b->trans.v = out_t;
    b->trans.n = b->trans.cap = (size_t)n_out * k;
    b->accepting.v = out_a;
    b->accepting.n = b->accepting.cap = (size_t)n_out;
    b->n_dfa = n_out;
    out_t = out_a = NULL;
    status = OK;
done:
    free(in_off);
    free(in_src);
    free(in_cls);
    free(live);
    free(queue);
    free(blk);
    free(bid);
    free(rep);
    free(order);
    free(out_t);
    free(out_a);
    return status;
}

/* ---------------------------------------------------------- Thompson construction */

/* The regex arrives as a flat program of int32 nodes (gramgen.automata.dfa._Program);
 * a node is referred to by its offset. Shared subtrees are encoded once. */
enum { K_BYTES = 0, K_CHARS = 1, K_SEQ = 2, K_ALT = 3, K_REPEAT = 4, K_AUTOMATON = 5, K_STRING = 6 };

typedef struct {
    const int32_t *prog;
    Py_ssize_t len;
    int32_t budget;                  /* NFA states */
    int32_t n;                       /* NFA states so far */
    Vec eps_from, eps_to, e_from, e_lo, e_hi, e_to;
    int status;
    int depth;
} Thompson;

#define MAX_DEPTH 4000

static int32_t
t_state(Thompson *t)
{
    if (t->n >= t->budget) {
        t->status = TOO_BIG_NFA;
        return -1;
    }
    return t->n++;
}

static int
t_eps(Thompson *t, int32_t a, int32_t b)
{
    if (vec_push(&t->eps_from, a) || vec_push(&t->eps_to, b)) {
        t->status = NO_MEMORY;
        return -1;
    }
    return 0;
}

static int
t_edge(Thompson *t, int32_t a, int32_t lo, int32_t hi, int32_t b)
{
    if (vec_push(&t->e_from, a) || vec_push(&t->e_lo, lo) || vec_push(&t->e_hi, hi) || vec_push(&t->e_to, b)) {
        t->status = NO_MEMORY;
        return -1;
    }
    return 0;
}

/* reads prog[at + i], or fails the build when the program is malformed */
#define ARG(i) ((at + (i) < t->len && at + (i) >= 0) ? t->prog[at + (i)] : (t->status = BAD_INPUT, 0))

/* Adds node `at` starting at NFA state `src`; returns the state after it, -1 on failure
 * (t->status says why). Mirrors _NFA.build. */
static int32_t
t_build(Thompson *t, Py_ssize_t at, int32_t src)
{
    if (t->status != OK)
        return -1;
    if (++t->depth > MAX_DEPTH) {
        t->status = TOO_DEEP;
        return -1;
    }
    int32_t dst = -1;
    int32_t kind = ARG(0);
    if (t->status != OK)
        goto out;
    switch (kind) {
    case K_BYTES: {
        int32_t n = ARG(1);
        if ((dst = t_state(t)) < 0)
            break;
        for (int32_t i = 0; i < n && t->status == OK; i++) {
            int32_t lo = ARG(2 + 2 * i), hi = ARG(3 + 2 * i);
            if (t->status == OK && (lo < 0 || hi > 255 || lo > hi))
                t->status = BAD_INPUT;
            if (t->status == OK)
                t_edge(t, src, lo, hi, dst);
        }
        break;
    }
    case K_CHARS: {
        /* n_states, then per state: n_edges, (lo, hi, target or -1 = exit)... */
        int32_t n_states = ARG(1);
        if (t->status != OK || n_states < 1 || n_states > t->budget) {
            t->status = BAD_INPUT;
            break;
        }
        if ((dst = t_state(t)) < 0)
            break;
        int32_t base = t->n;  /* automaton state i > 0 is NFA state base + i - 1 */
        for (int32_t i = 1; i < n_states; i++)
            if (t_state(t) < 0)
                goto out;
        Py_ssize_t p = 2;
        for (int32_t i = 0; i < n_states && t->status == OK; i++) {
            int32_t n_edges = ARG(p), from = i == 0 ? src : base + i - 1;
            p++;
            for (int32_t e = 0; e < n_edges && t->status == OK; e++, p += 3) {
                int32_t lo = ARG(p), hi = ARG(p + 1), tg = ARG(p + 2);
                if (t->status == OK && (lo < 0 || hi > 255 || lo > hi || tg < -1 || tg >= n_states || tg == 0))
                    t->status = BAD_INPUT;
                if (t->status == OK)
                    t_edge(t, from, lo, hi, tg < 0 ? dst : base + tg - 1);
            }
        }
        break;
    }
    case K_STRING: {
        /* n, then n bytes: a chain of single-byte edges (a literal) */
        int32_t n = ARG(1);
        dst = src;
        for (int32_t i = 0; i < n && t->status == OK; i++) {
            int32_t byte = ARG(2 + i), next;
            if (t->status == OK && (byte < 0 || byte > 255))
                t->status = BAD_INPUT;
            if (t->status != OK || (next = t_state(t)) < 0)
                break;
            t_edge(t, dst, byte, byte, next);
            dst = next;
        }
        break;
    }
    case K_SEQ: {
        int32_t n = ARG(1);
        dst = src;
        for (int32_t i = 0; i < n && t->status == OK; i++)
            dst = t_build(t, ARG(2 + i), dst);
        break;
    }
    case K_ALT: {
        int32_t n = ARG(1);
        if ((dst = t_state(t)) < 0)
            break;
        for (int32_t i = 0; i < n && t->status == OK; i++) {
            int32_t end = t_build(t, ARG(2 + i), src);
            if (end >= 0)
                t_eps(t, end, dst);
        }
        break;
    }
    case K_REPEAT: {
        Py_ssize_t item = ARG(1);
        int32_t lo = ARG(2), hi = ARG(3);  /* hi < 0: unbounded */
        if (t->status != OK || lo < 0)
            break;
        if (hi >= 0 && hi < lo) {  /* matches nothing: an unreachable exit */
            dst = t_state(t);
            break;
        }
        for (int32_t i = 0; i < lo && src >= 0; i++)
            src = t_build(t, item, src);
        if (src < 0)
            break;
        if (hi < 0) {
            int32_t head = t_state(t);
            if (head < 0 || t_eps(t, src, head))
                break;
            int32_t end = t_build(t, item, head);
            if (end < 0 || t_eps(t, end, head))
                break;
            dst = head;
        } else if (hi == lo) {
            dst = src;
        } else {
            int32_t out = t_state(t);
            if (out < 0)
                break;
            for (int32_t i = 0; i < hi - lo && src >= 0; i++) {
                if (t_eps(t, src, out))
                    goto out;
                src = t_build(t, item, src);
            }
            if (src < 0 || t_eps(t, src, out))
                break;
            dst = out;
        }
        break;
    }
    case K_AUTOMATON: {
        /* n_states, start, n_accepting, accepting..., n_edges, (a, label node, b)... */
        int32_t n_states = ARG(1), start = ARG(2), n_acc = ARG(3);
        if (t->status != OK || n_states < 1 || n_states > t->budget || start < 0 || start >= n_states || n_acc < 0) {
            t->status = BAD_INPUT;
            break;
        }
        int32_t base = t->n;
        for (int32_t i = 0; i < n_states; i++)
            if (t_state(t) < 0)
                goto out;
        if (t_eps(t, src, base + start))
            break;
        int32_t n_edges = ARG(4 + n_acc);
        for (int32_t e = 0; e < n_edges && t->status == OK; e++) {
            Py_ssize_t q = 5 + n_acc + 3 * e;
            int32_t a = ARG(q), label = ARG(q + 1), b = ARG(q + 2);
            if (t->status == OK && (a < 0 || a >= n_states || b < 0 || b >= n_states))
                t->status = BAD_INPUT;
            if (t->status != OK)
                break;
            int32_t end = t_build(t, label, base + a);
            if (end >= 0)
                t_eps(t, end, base + b);
        }
        if (t->status != OK || (dst = t_state(t)) < 0)
            break;
        for (int32_t i = 0; i < n_acc && t->status == OK; i++) {
            int32_t q = ARG(4 + i);
            if (t->status == OK && (q < 0 || q >= n_states))
                t->status = BAD_INPUT;
            if (t->status == OK)
                t_eps(t, base + q, dst);
        }
        break;
    }
    default:
        t->status = BAD_INPUT;
    }
out:
    t->depth--;
    return t->status == OK ? dst : -1;
}
#undef ARG

/* compressed rows of (from, ...) pairs: offsets per state (n + 1) */
static int64_t *
csr_offsets(const Vec *from, int32_t n)
{
    int64_t *off = calloc((size_t)n + 1, sizeof(int64_t));
    if (!off)
        return NULL;
    for (size_t i = 0; i < from->n; i++)
        off[from->v[i] + 1]++;
    for (int32_t s = 0; s < n; s++)
        off[s + 1] += off[s];
    return off;
}

/* ------------------------------------------------------------------- entry point */

/* The minimal DFA in `b` (over the classes of `class_of`) as compile_program returns it:
 * (OK, table over bytes with -1 for no transition, the same with an explicit sink state n
 * in place of -1 and a last row of sinks, accepting flags with the sink's (0) last, n, classes) */
static PyObject *
dfa_result(const Build *b, const int32_t *class_of)
{
    PyObject *result = NULL;
    const int32_t n = b->n_dfa, k = b->nfa.n_classes;
    PyObject *tr = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n * 256 * 4);
    PyObject *sink = PyBytes_FromStringAndSize(NULL, ((Py_ssize_t)n + 1) * 256 * 4);
    PyObject *acc = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n + 1);
    PyObject *classes = PyBytes_FromStringAndSize(NULL, 256);
    if (tr && sink && acc && classes) {
        PyBytes_AS_STRING(acc)[n] = 0;   /* (the sink's) */
        char *out_classes = PyBytes_AS_STRING(classes);
        for (int x = 0; x < 256; x++)
            out_classes[x] = (char)class_of[x];
        int32_t *out = (int32_t *)PyBytes_AS_STRING(tr), *out_sink = (int32_t *)PyBytes_AS_STRING(sink);
        char *out_acc = PyBytes_AS_STRING(acc);
        for (int32_t q = 0; q < n; q++) {
            const int32_t *row = b->trans.v + (size_t)q * k;
            for (int x = 0; x < 256; x++) {
                int32_t t2 = row[class_of[x]];
                out[(size_t)q * 256 + x] = t2;
                out_sink[(size_t)q * 256 + x] = t2 < 0 ? n : t2;
            }
            out_acc[q] = b->accepting.v[q] != 0;
        }
        for (int x = 0; x < 256; x++)
            out_sink[(size_t)n * 256 + x] = n;
        result = Py_BuildValue("(iOOOiO)", OK, tr, sink, acc, n, classes);
    }
    Py_XDECREF(tr);
    Py_XDECREF(sink);
    Py_XDECREF(acc);
    Py_XDECREF(classes);
    return result;
}

static PyObject *
compile_program(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer prog_b;
    Py_ssize_t root;
    int nfa_budget, max_states;
    long long work_budget;
    if (!PyArg_ParseTuple(args, "y*niiL", &prog_b, &root, &nfa_budget, &max_states, &work_budget))
        return NULL;
    PyObject *result = NULL;
    if (prog_b.itemsize != 4 || prog_b.len % 4 || nfa_budget < 1) {
        PyErr_SetString(PyExc_ValueError, "program: expected int32 items and a positive NFA budget");
        PyBuffer_Release(&prog_b);
        return NULL;
    }
    Thompson t;
    memset(&t, 0, sizeof(t));
    t.prog = prog_b.buf;
    t.len = prog_b.len / 4;
    t.budget = nfa_budget;
    Build b;
    memset(&b, 0, sizeof(b));
    int64_t *eps_off = NULL, *edge_off = NULL;
    int32_t *eps_tgt = NULL, *edges = NULL, class_of[256];
    int status;
    Py_BEGIN_ALLOW_THREADS
    int32_t start = t_state(&t);
    int32_t final = t_build(&t, root, start);
    status = t.status;
    if (status == OK) {
        const int32_t n = t.n;
        eps_off = csr_offsets(&t.eps_from, n);
        edge_off = csr_offsets(&t.e_from, n);
        eps_tgt = malloc(t.eps_from.n * sizeof(int32_t) + 4);
        edges = malloc(t.e_from.n * 3 * sizeof(int32_t) + 4);
        int64_t *fill = malloc(((size_t)n + 1) * sizeof(int64_t));
        if (!eps_off || !edge_off || !eps_tgt || !edges || !fill) {
            status = NO_MEMORY;
        } else {
            memcpy(fill, eps_off, ((size_t)n + 1) * sizeof(int64_t));
            for (size_t i = 0; i < t.eps_from.n; i++)
                eps_tgt[fill[t.eps_from.v[i]]++] = t.eps_to.v[i];
            memcpy(fill, edge_off, ((size_t)n + 1) * sizeof(int64_t));
            for (size_t i = 0; i < t.e_from.n; i++) {
                int64_t at = fill[t.e_from.v[i]]++;
                edges[3 * at] = t.e_lo.v[i];
                edges[3 * at + 1] = t.e_hi.v[i];
                edges[3 * at + 2] = t.e_to.v[i];
            }
            /* byte classes: intervals that no edge distinguishes */
            char cut[257] = {0};
            for (size_t i = 0; i < t.e_from.n; i++) {
                cut[t.e_lo.v[i]] = 1;
                cut[t.e_hi.v[i] + 1] = 1;
            }
            int32_t c = -1;
            for (int x = 0; x < 256; x++) {
                if (x == 0 || cut[x])
                    c++;
                class_of[x] = c;
            }
            b.nfa = (Nfa){n, eps_off, eps_tgt, edge_off, edges, final, class_of, c + 1};
            b.max_states = max_states;
            b.work_budget = work_budget;
            status = determinize(&b);
            if (status == OK)
                status = trim_minimize(&b);
        }
        free(fill);
    }
    Py_END_ALLOW_THREADS
    if (status == NO_MEMORY) {
        PyErr_NoMemory();
    } else if (status == BAD_INPUT) {
        PyErr_SetString(PyExc_ValueError, "malformed regex program");
    } else if (status != OK) {
        result = Py_BuildValue("(iOOOiO)", status, Py_None, Py_None, Py_None, 0, Py_None);
    } else {
        result = dfa_result(&b, class_of);
    }
    free(t.eps_from.v);
    free(t.eps_to.v);
    free(t.e_from.v);
    free(t.e_lo.v);
    free(t.e_hi.v);
    free(t.e_to.v);
    free(eps_off);
    free(edge_off);
    free(eps_tgt);
    free(edges);
    free(b.trans.v);
    free(b.accepting.v);
    PyBuffer_Release(&prog_b);
    return result;
}

/* ------------------------------------------------------------ literal prefixes */

/* with_prefix(data, sink, accepting, classes, max_states) -> the minimal DFA of `data`
 * followed by the language of a minimal DFA given in sink form (n + 1 rows of 256 int32,
 * the sink n last), its accepting flags (n bytes) and byte classes (256 bytes): a chain
 * of len(data) states before the DFA's, as (table, sink table, accepting, n, classes) in
 * the form of compile_program (classes None when more than 256 would be needed); None
 * where that chain is not minimal (a state of the DFA that, not accepting, has the last
 * byte of data as its only way on, into its start), the DFA is empty, data is empty or
 * the result has more than max_states states (gramgen.automata.dfa.with_prefix). */
static PyObject *
with_prefix(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data_b, sink_b, acc_b, cls_b;
    int max_states;
    if (!PyArg_ParseTuple(args, "y*y*y*y*i", &data_b, &sink_b, &acc_b, &cls_b, &max_states))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t m = data_b.len, n = acc_b.len;
    if (sink_b.len != (n + 1) * 256 * 4 || cls_b.len != 256) {
        PyErr_SetString(PyExc_ValueError, "with_prefix: expected a sink table of n + 1 rows and 256 classes");
        goto out;
    }
    if (m == 0 || n == 0 || m + n > max_states) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    const uint8_t *data = data_b.buf, *tail_cls = cls_b.buf;
    const int32_t *tail = sink_b.buf;
    const char *tail_acc = acc_b.buf;
    const int last = data[m - 1];
    for (Py_ssize_t q = 0; q < n; q++) {
        if (tail_acc[q] || tail[q * 256 + last] != 0)
            continue;
        int live = 0;
        for (int x = 0; x < 256 && live < 2; x++)
            live += tail[q * 256 + x] != (int32_t)n;
        if (live == 1) {
            result = Py_NewRef(Py_None);
            goto out;
        }
    }
    const Py_ssize_t total = m + n;
    PyObject *tr = PyBytes_FromStringAndSize(NULL, total * 256 * 4);
    PyObject *sink = PyBytes_FromStringAndSize(NULL, (total + 1) * 256 * 4);
    PyObject *acc = PyBytes_FromStringAndSize(NULL, total + 1);
    PyObject *classes = PyBytes_FromStringAndSize(NULL, 256);
    if (tr && sink && acc && classes) {
        int32_t *out = (int32_t *)PyBytes_AS_STRING(tr), *out_sink = (int32_t *)PyBytes_AS_STRING(sink);
        char *out_acc = PyBytes_AS_STRING(acc);
        out_acc[total] = 0;   /* (the sink's) */
        for (Py_ssize_t i = 0; i < m; i++) {
            for (int x = 0; x < 256; x++) {
                out[i * 256 + x] = -1;
                out_sink[i * 256 + x] = (int32_t)total;
            }
            out[i * 256 + data[i]] = out_sink[i * 256 + data[i]] = (int32_t)(i + 1);
            out_acc[i] = 0;
        }
        for (Py_ssize_t q = 0; q < n; q++) {
            for (int x = 0; x < 256; x++) {
                int32_t t = tail[q * 256 + x];
                out_sink[(m + q) * 256 + x] = t + (int32_t)m;
                out[(m + q) * 256 + x] = t == (int32_t)n ? -1 : t + (int32_t)m;
            }
            out_acc[m + q] = tail_acc[q] != 0;
        }
        for (int x = 0; x < 256; x++)
            out_sink[total * 256 + x] = (int32_t)total;
        /* the tail's classes, each byte of data in a class of its own (finer than the
         * columns at worst) */
        int next = 0, own[256] = {0};
        for (int x = 0; x < 256; x++)
            if (tail_cls[x] + 1 > next)
                next = tail_cls[x] + 1;
        for (Py_ssize_t i = 0; i < m; i++)
            own[data[i]] = 1;
        char *out_cls = PyBytes_AS_STRING(classes);
        for (int x = 0; x < 256; x++)
            out_cls[x] = (char)tail_cls[x];
        for (int x = 0; x < 256 && next <= 256; x++)
            if (own[x]) {
                if (next < 256)
                    out_cls[x] = (char)next;
                next++;
            }
        if (next > 256) {
            Py_DECREF(classes);
            classes = Py_NewRef(Py_None);
        }
        result = Py_BuildValue("(OOOnO)", tr, sink, acc, total, classes);
    }
    Py_XDECREF(tr);
    Py_XDECREF(sink);
    Py_XDECREF(acc);
    Py_XDECREF(classes);
out:
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&sink_b);
    PyBuffer_Release(&acc_b);
    PyBuffer_Release(&cls_b);
    return result;
}

/* ------------------------------------------------------------ words without prefixes */

/* without_prefixes(sink, accepting, classes, prefixes, max_states): the minimal DFA of the
 * words of a minimal trimmed DFA (given in sink form: n + 1 rows of 256 int32, the sink n
 * last; its accepting flags, n bytes; its byte classes, 256 bytes) that start with none of
 * `prefixes` (a sequence of bytes), in the form of compile_program (status TOO_MANY_STATES
 * when the product has more than max_states states). The product of the DFA with the
 * prefixes' trie: a trie node pairs with the one state its path reaches, a word that
 * leaves the trie goes on in the DFA's own states, a word that completes a prefix dies.
 * The DFA's states are minimal already and the trie's are a tree above them, so the
 * product is minimized bottom-up: a node, once its children are, is the state with the
 * same row and acceptance if there is one (a DFA state, or a node met before), dead if
 * its row is (Myhill-Nerode, over successors that are all distinct classes). Numbered as
 * compile_program numbers (the same tables as building the difference from a regex;
 * gramgen.automata.dfa.without_prefixes, whose Python version minimizes as the builder
 * does). */
static PyObject *
without_prefixes(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer sink_b, acc_b, cls_b;
    PyObject *o_prefixes;
    int max_states;
    if (!PyArg_ParseTuple(args, "y*y*y*Oi", &sink_b, &acc_b, &cls_b, &o_prefixes, &max_states))
        return NULL;
    PyObject *result = NULL, *prefixes = NULL;
    int32_t *first_child = NULL, *next_sib = NULL, *node_f = NULL, *canon = NULL, *order = NULL;
    int32_t *rows = NULL, *accs = NULL, *key = NULL, *bid = NULL, *queue = NULL;
    uint8_t *byte_of = NULL, *terminal = NULL;
    SetTable seen;
    int seen_made = 0;
    Build b;
    memset(&b, 0, sizeof(b));
    const Py_ssize_t n = acc_b.len;
    if (sink_b.len != (n + 1) * 256 * 4 || cls_b.len != 256 || n > INT32_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "without_prefixes: expected a sink table of n + 1 rows and 256 classes");
        goto out;
    }
    if (!(prefixes = PySequence_Fast(o_prefixes, "prefixes")))
        goto out;
    const int32_t *F = sink_b.buf;
    const char *F_acc = acc_b.buf;
    const uint8_t *F_cls = cls_b.buf;
    /* the trie: node 0 the root; children as linked lists */
    Py_ssize_t cap = 1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(prefixes); i++) {
        PyObject *p = PySequence_Fast_GET_ITEM(prefixes, i);
        if (!PyBytes_Check(p)) {
            PyErr_SetString(PyExc_TypeError, "without_prefixes: the prefixes must be bytes");
            goto out;
        }
        cap += PyBytes_GET_SIZE(p);
    }
    if (cap > INT32_MAX / 4) {
        PyErr_SetString(PyExc_OverflowError, "without_prefixes: too many prefix bytes");
        goto out;
    }
    first_child = malloc((size_t)cap * sizeof(int32_t));
    next_sib = malloc((size_t)cap * sizeof(int32_t));
    node_f = malloc((size_t)cap * sizeof(int32_t));
    canon = malloc((size_t)cap * sizeof(int32_t));
    order = malloc((size_t)cap * sizeof(int32_t));
    byte_of = malloc((size_t)cap);
    terminal = calloc((size_t)cap, 1);
    if (!first_child || !next_sib || !node_f || !canon || !order || !byte_of || !terminal) {
        PyErr_NoMemory();
        goto out;
    }
    int32_t n_nodes = 1;
    first_child[0] = next_sib[0] = -1;
    int own[256] = {0};
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(prefixes); i++) {
        PyObject *p = PySequence_Fast_GET_ITEM(prefixes, i);
        const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(p);
        int32_t t = 0;
        for (Py_ssize_t j = 0; j < PyBytes_GET_SIZE(p); j++) {
            int32_t c = first_child[t];
            while (c >= 0 && byte_of[c] != d[j])
                c = next_sib[c];
            if (c < 0) {
                c = n_nodes++;
                byte_of[c] = d[j];
                first_child[c] = -1;
                next_sib[c] = first_child[t];
                first_child[t] = c;
                own[d[j]] = 1;
            }
            t = c;
        }
        terminal[t] = 1;
    }
    /* byte classes: the DFA's, each byte on a trie edge in a class of its own; numbered in
     * order of first byte (as compile_program numbers them) */
    int32_t class_of[256], rep[256], seen_cls[512];
    for (int x = 0; x < 512; x++)
        seen_cls[x] = -1;
    int32_t k = 0;
    for (int x = 0; x < 256; x++) {
        int kk = own[x] ? 256 + x : F_cls[x];
        if (seen_cls[kk] < 0) {
            seen_cls[kk] = k;
            rep[k++] = x;
        }
        class_of[x] = seen_cls[kk];
    }
    b.nfa.n_classes = k;
    /* the live trie nodes (not a complete prefix, the DFA alive on their path) in
     * depth-first order, each with its DFA state */
    int32_t m = 0, top = 0;
    if (!terminal[0] && n > 0) {   /* (with n == 0 the DFA is empty: state 0 is its sink) */
        node_f[0] = 0;
        order[top++] = 0;
    }
    {
        int32_t *stack = canon;   /* (free until the bottom-up pass) */
        int32_t sp = 0;
        if (top)
            stack[sp++] = order[--top];
        while (sp) {
            int32_t t = stack[--sp];
            order[m++] = t;
            for (int32_t c = first_child[t]; c >= 0; c = next_sib[c]) {
                int32_t f2 = F[(size_t)node_f[t] * 256 + byte_of[c]];
                if (f2 < 0 || f2 > n) {
                    PyErr_SetString(PyExc_ValueError, "without_prefixes: a state out of range");
                    goto out;
                }
                if (f2 != (int32_t)n && !terminal[c]) {
                    node_f[c] = f2;
                    stack[sp++] = c;
                }
            }
        }
    }
    if (m == 0) {   /* the empty prefix, or an empty DFA: nothing is left */
        result = dfa_result(&b, class_of);
        goto out;
    }
    if ((Py_ssize_t)m + n > max_states) {
        result = Py_BuildValue("(iOOOiO)", TOO_MANY_STATES, Py_None, Py_None, Py_None, 0, Py_None);
        goto out;
    }
    /* the classes of states: the DFA's first (rows over classes, -1 for the sink), then a
     * new one for each trie node not equal to one of them */
    const size_t W = (size_t)k + 1;
    rows = malloc(((size_t)n + m) * k * sizeof(int32_t));
    accs = malloc(((size_t)n + m) * sizeof(int32_t));
    key = malloc(W * sizeof(int32_t));
    if (!rows || !accs || !key || set_table_init(&seen)) {
        PyErr_NoMemory();
        goto out;
    }
    seen_made = 1;
    for (Py_ssize_t f = 0; f < n; f++) {
        int32_t *row = rows + (size_t)f * k;
        for (int32_t c = 0; c < k; c++) {
            int32_t f2 = F[(size_t)f * 256 + rep[c]];
            if (f2 < 0 || f2 > n) {
                PyErr_SetString(PyExc_ValueError, "without_prefixes: a state out of range");
                goto out;
            }
            row[c] = f2 == (int32_t)n ? -1 : f2;
        }
        accs[f] = F_acc[f] != 0;
        memcpy(key, row, (size_t)k * sizeof(int32_t));
        key[k] = accs[f];
        if (set_table_get(&seen, key, W) == -2 && set_table_put(&seen, key, W, (int32_t)f)) {
            PyErr_NoMemory();
            goto out;
        }
    }
    int32_t n_cls = (int32_t)n;
    for (int32_t i = m - 1; i >= 0; i--) {   /* children before their parent */
        int32_t t = order[i];
        memcpy(key, rows + (size_t)node_f[t] * k, (size_t)k * sizeof(int32_t));
        for (int32_t c = first_child[t]; c >= 0; c = next_sib[c]) {
            int32_t f2 = F[(size_t)node_f[t] * 256 + byte_of[c]];
            key[class_of[byte_of[c]]] = f2 == (int32_t)n || terminal[c] ? -1 : canon[c];
        }
        key[k] = accs[node_f[t]];
        int dead = !key[k];
        for (int32_t c = 0; c < k && dead; c++)
            dead = key[c] < 0;
        if (dead) {
            canon[t] = -1;
            continue;
        }
        int32_t found = set_table_get(&seen, key, W);
        if (found == -2) {
            found = n_cls++;
            memcpy(rows + (size_t)found * k, key, (size_t)k * sizeof(int32_t));
            accs[found] = key[k];
            if (set_table_put(&seen, key, W, found)) {
                PyErr_NoMemory();
                goto out;
            }
        }
        canon[t] = found;
    }
    if (canon[0] < 0) {   /* every word starts with a prefix */
        result = dfa_result(&b, class_of);
        goto out;
    }
    /* numbered breadth-first from the start in class order */
    bid = malloc((size_t)n_cls * sizeof(int32_t));
    queue = malloc((size_t)n_cls * sizeof(int32_t));
    if (!bid || !queue) {
        PyErr_NoMemory();
        goto out;
    }
    for (int32_t x = 0; x < n_cls; x++)
        bid[x] = -1;
    int32_t n_out = 0;
    bid[canon[0]] = n_out;
    queue[n_out++] = canon[0];
    for (int32_t i = 0; i < n_out; i++) {
        const int32_t *row = rows + (size_t)queue[i] * k;
        for (int32_t c = 0; c < k; c++)
            if (row[c] >= 0 && bid[row[c]] < 0) {
                bid[row[c]] = n_out;
                queue[n_out++] = row[c];
            }
    }
    b.trans.v = malloc((size_t)n_out * k * sizeof(int32_t) + 4);
    b.accepting.v = malloc((size_t)n_out * sizeof(int32_t) + 4);
    if (!b.trans.v || !b.accepting.v) {
        PyErr_NoMemory();
        goto out;
    }
    for (int32_t i = 0; i < n_out; i++) {
        const int32_t *row = rows + (size_t)queue[i] * k;
        for (int32_t c = 0; c < k; c++)
            b.trans.v[(size_t)i * k + c] = row[c] >= 0 ? bid[row[c]] : -1;
        b.accepting.v[i] = accs[queue[i]];
    }
    b.n_dfa = n_out;
    result = dfa_result(&b, class_of);
out:
    Py_XDECREF(prefixes);
    if (seen_made)
        set_table_free(&seen);
    free(first_child);
    free(next_sib);
    free(node_f);
    free(canon);
    free(order);
    free(byte_of);
    free(terminal);
    free(rows);
    free(accs);
    free(key);
    free(bid);
    free(queue);
    free(b.trans.v);
    free(b.accepting.v);
    PyBuffer_Release(&sink_b);
    PyBuffer_Release(&acc_b);
    PyBuffer_Release(&cls_b);
    return result;
}

/* --------------------------------------------------------------- regex encoding */

/* encode(rx, code, by_id, leaves, leaf, types) -> offset: the regex tree rooted at rx
 * appended to the int32 program `code` (an array('i')) as gramgen.automata.dfa._Program
 * encodes it (the same words; that class is the reference and the fallback). `by_id`
 * maps id(node) -> offset of the nodes encoded already (shared subtrees once), `leaves`
 * maps (kind, ranges) of a character or byte class -> offset (equal classes once),
 * `leaf(rx)` gives the words of a class (but an ASCII character class, written here),
 * `types` the node classes (Seq, CharRanges, ByteRanges, Alt, Repeat, Automaton).
 * RecursionError past Python's recursion limit (as the Python encoder). */

enum { T_SEQ, T_CHARS, T_BYTES, T_ALT, T_REPEAT, T_AUTOMATON, N_TYPES };

typedef struct {
    Vec out;             /* the words appended by this call */
    Py_ssize_t base;     /* offset of out[0] in the program */
    PyObject *by_id, *leaves, *leaf;
    PyObject *types[N_TYPES];
    PyObject *s_items, *s_item, *s_min, *s_max, *s_ranges, *s_n_states, *s_start, *s_edges, *s_accepting;
} Encoder;

static int
node_type(Encoder *e, PyObject *rx)
{
    PyTypeObject *tp = Py_TYPE(rx);
    for (int i = 0; i < N_TYPES; i++)
        if ((PyObject *)tp == e->types[i])
            return i;
    for (int i = 0; i < N_TYPES; i++) {
        int r = PyObject_IsInstance(rx, e->types[i]);
        if (r < 0)
            return -2;
        if (r)
            return i;
    }
    return -1;
}

static int
emit(Encoder *e, int32_t w)
{
    if (vec_push(&e->out, w) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* an int attribute (or item) as int32; -1 with an exception when it is not one */
static int
as_int32(PyObject *o, int32_t *out)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "regex field out of the int32 range");
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* attribute `name` of a node as a sequence of fixed length (a new reference); NULL with
 * an exception (`what`: the message when it is not a sequence) */
static PyObject *
fast_attr(PyObject *rx, PyObject *name, const char *what)
{
    PyObject *v = PyObject_GetAttr(rx, name);
    if (!v)
        return NULL;
    PyObject *fast = PySequence_Fast(v, what);
    Py_DECREF(v);
    return fast;
}

/* the UTF-8 bytes (1 to 4) of a class that matches exactly one character or byte, else 0 */
static int
single_literal(Encoder *e, PyObject *rx, int type, uint8_t *buf)
{
    int n = 0;
    PyObject *seq = fast_attr(rx, e->s_ranges, "ranges must be a sequence");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) == 1) {
        PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, 0), "a range must be a pair");
        if (!pair) {
            Py_DECREF(seq);
            return -1;
        }
        long lo = -1, hi = -2;
        if (PySequence_Fast_GET_SIZE(pair) == 2) {
            lo = PyLong_AsLong(PySequence_Fast_GET_ITEM(pair, 0));
            hi = PyLong_AsLong(PySequence_Fast_GET_ITEM(pair, 1));
        }
        Py_DECREF(pair);
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (lo == hi) {
            if (type == T_BYTES) {
                if (lo >= 0 && lo <= 255) {
                    buf[0] = (uint8_t)lo;
                    n = 1;
                }
            } else if (lo >= 0 && lo <= 0x10FFFF && !(lo >= 0xD800 && lo <= 0xDFFF)) {
                if (lo < 0x80) {
                    buf[0] = (uint8_t)lo;
                    n = 1;
                } else if (lo < 0x800) {
                    buf[0] = (uint8_t)(0xC0 | (lo >> 6));
                    buf[1] = (uint8_t)(0x80 | (lo & 0x3F));
                    n = 2;
                } else if (lo < 0x10000) {
                    buf[0] = (uint8_t)(0xE0 | (lo >> 12));
                    buf[1] = (uint8_t)(0x80 | ((lo >> 6) & 0x3F));
                    buf[2] = (uint8_t)(0x80 | (lo & 0x3F));
                    n = 3;
                } else {
                    buf[0] = (uint8_t)(0xF0 | (lo >> 18));
                    buf[1] = (uint8_t)(0x80 | ((lo >> 12) & 0x3F));
                    buf[2] = (uint8_t)(0x80 | ((lo >> 6) & 0x3F));
                    buf[3] = (uint8_t)(0x80 | (lo & 0x3F));
                    n = 4;
                }
            }
        }
    }
    Py_DECREF(seq);
    return n;
}

static Py_ssize_t encode_node(Encoder *e, PyObject *rx);

/* a node of `kind` followed by its n words (children's offsets, or bytes); its offset */
static Py_ssize_t
emit_counted(Encoder *e, int32_t kind, const Vec *words)
{
    Py_ssize_t at = e->base + (Py_ssize_t)e->out.n;
    if (emit(e, kind) || emit(e, (int32_t)words->n))
        return -1;
    for (size_t i = 0; i < words->n; i++)
        if (emit(e, words->v[i]))
            return -1;
    return at;
}

static Py_ssize_t
encode_seq(Encoder *e, PyObject *rx)
{
    PyObject *fast = fast_attr(rx, e->s_items, "Seq.items must be a sequence");
    if (!fast)
        return -1;
    Vec kids = {0}, run = {0};
    Py_ssize_t at = -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        int type = node_type(e, item);
        if (type == -2)
            goto done;
        if (type == T_CHARS || type == T_BYTES) {
            uint8_t buf[4];
            int k = single_literal(e, item, type, buf);
            if (k < 0)
                goto done;
            if (k > 0) {
                for (int j = 0; j < k; j++)
                    if (vec_push(&run, buf[j]) < 0)
                        goto nomem;
                continue;
            }
        }
        if (run.n) {
            Py_ssize_t s = emit_counted(e, K_STRING, &run);
            if (s < 0)
                goto done;
            run.n = 0;
            if (vec_push(&kids, (int32_t)s) < 0)
                goto nomem;
        }
        Py_ssize_t k = encode_node(e, item);
        if (k < 0)
            goto done;
        if (vec_push(&kids, (int32_t)k) < 0)
            goto nomem;
    }
    if (run.n || !kids.n) {
        Py_ssize_t s = emit_counted(e, K_STRING, &run);
        if (s < 0)
            goto done;
        if (vec_push(&kids, (int32_t)s) < 0)
            goto nomem;
    }
    at = kids.n == 1 ? kids.v[0] : emit_counted(e, K_SEQ, &kids);
    goto done;
nomem:
    PyErr_NoMemory();
    at = -1;
done:
    free(kids.v);
    free(run.v);
    Py_DECREF(fast);
    return at;
}

/* the words of an ASCII character class given normalized (a tuple of (lo, hi) int pairs,
 * ascending, disjoint, not adjacent, within 0..127): one state whose edges are the
 * ranges, as _Program._leaf_words gives them; 0 when `ranges` is not such a class */
static int
ascii_class_words(Encoder *e, PyObject *ranges, Py_ssize_t *at)
{
    if (!PyTuple_CheckExact(ranges))
        return 0;
    const Py_ssize_t n = PyTuple_GET_SIZE(ranges);
    long prev = -2;
    if (n == 0 || n > 64)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyTuple_GET_ITEM(ranges, i);
        if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2)
            return 0;
        PyObject *a = PyTuple_GET_ITEM(r, 0), *b = PyTuple_GET_ITEM(r, 1);
        if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b))
            return 0;
        int overflow = 0;
        long lo = PyLong_AsLongAndOverflow(a, &overflow), hi = overflow ? 0 : PyLong_AsLongAndOverflow(b, &overflow);
        if (overflow || lo < 0 || hi > 127 || hi < lo || lo <= prev + 1)
            return 0;
        prev = hi;
    }
    *at = e->base + (Py_ssize_t)e->out.n;
    if (emit(e, K_CHARS) || emit(e, 1) || emit(e, (int32_t)n))
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyTuple_GET_ITEM(ranges, i);
        if (emit(e, (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(r, 0))) || emit(e, (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(r, 1)))
            || emit(e, -1))
            return -1;
    }
    return 1;
}

/* A character or byte class: equal classes once. They are looked up by (kind, ranges),
 * hashed and compared in C (their own __hash__ and __eq__ are Python code), and an ASCII
 * character class is written here; the other classes' words come from `leaf`. */
static Py_ssize_t
encode_leaf(Encoder *e, PyObject *rx, int type)
{
    PyObject *ranges = PyObject_GetAttr(rx, e->s_ranges);
    if (!ranges)
        return -1;
    PyObject *key = Py_BuildValue("(iO)", type, ranges);
    Py_ssize_t at = -1;
    if (!key)
        goto done;
    PyObject *found = PyDict_GetItemWithError(e->leaves, key);  /* borrowed */
    if (found) {
        at = PyLong_AsSsize_t(found);
        goto done;
    }
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            goto done;
        PyErr_Clear();  /* ranges given as lists: not hashable, encoded each time */
        Py_CLEAR(key);
    }
    int fast = type == T_CHARS ? ascii_class_words(e, ranges, &at) : 0;
    if (fast < 0) {
        at = -1;
        goto done;
    }
    if (!fast) {
        PyObject *words = PyObject_CallOneArg(e->leaf, rx);
        if (!words)
            goto done;
        PyObject *seq = PySequence_Fast(words, "leaf() must give a sequence of ints");
        Py_DECREF(words);
        if (!seq)
            goto done;
        at = e->base + (Py_ssize_t)e->out.n;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            int32_t w;
            if (as_int32(PySequence_Fast_GET_ITEM(seq, i), &w) || emit(e, w)) {
                at = -1;
                break;
            }
        }
        Py_DECREF(seq);
        if (at < 0)
            goto done;
    }
    if (key) {
        PyObject *v = PyLong_FromSsize_t(at);
        if (!v || PyDict_SetItem(e->leaves, key, v) < 0)
            at = -1;
        Py_XDECREF(v);
    }
done:
    Py_XDECREF(key);
    Py_DECREF(ranges);
    return at;
}

static Py_ssize_t
encode_kids(Encoder *e, PyObject *rx, int32_t kind)
{
    PyObject *fast = fast_attr(rx, e->s_items, "Alt.items must be a sequence");
    if (!fast)
        return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    Vec kids = {0};
    Py_ssize_t at = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t k = encode_node(e, PySequence_Fast_GET_ITEM(fast, i));
        if (k < 0)
            goto done;
        if (vec_push(&kids, (int32_t)k) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    at = emit_counted(e, kind, &kids);
done:
    free(kids.v);
    Py_DECREF(fast);
    return at;
}

static Py_ssize_t
encode_repeat(Encoder *e, PyObject *rx)
{
    PyObject *item = PyObject_GetAttr(rx, e->s_item);
    if (!item)
        return -1;
    Py_ssize_t k = encode_node(e, item);
    Py_DECREF(item);
    if (k < 0)
        return -1;
    PyObject *lo = PyObject_GetAttr(rx, e->s_min), *hi = lo ? PyObject_GetAttr(rx, e->s_max) : NULL;
    int32_t vlo = 0, vhi = -1;
    int bad = !lo || !hi || as_int32(lo, &vlo) || (hi != Py_None && as_int32(hi, &vhi));
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    if (bad)
        return -1;
    Py_ssize_t at = e->base + (Py_ssize_t)e->out.n;
    if (emit(e, K_REPEAT) || emit(e, (int32_t)k) || emit(e, vlo) || emit(e, vhi))
        return -1;
    return at;
}

static Py_ssize_t
encode_automaton(Encoder *e, PyObject *rx)
{
    PyObject *n_states = PyObject_GetAttr(rx, e->s_n_states);
    PyObject *start = n_states ? PyObject_GetAttr(rx, e->s_start) : NULL;
    PyObject *fe = start ? fast_attr(rx, e->s_edges, "Automaton.edges must be a sequence") : NULL;
    PyObject *fa = fe ? fast_attr(rx, e->s_accepting, "Automaton.accepting must be a sequence") : NULL;
    Py_ssize_t at = -1;
    Vec labels = {0};
    int32_t ns = 0, st = 0;
    if (!fa || as_int32(n_states, &ns) || as_int32(start, &st))
        goto done;
    const Py_ssize_t n_edges = PySequence_Fast_GET_SIZE(fe), n_acc = PySequence_Fast_GET_SIZE(fa);
    for (Py_ssize_t i = 0; i < n_edges; i++) {
        PyObject *edge = PySequence_Fast(PySequence_Fast_GET_ITEM(fe, i), "an edge must be (src, regex, dst)");
        if (!edge)
            goto done;
        int32_t a = 0, b = 0;
        Py_ssize_t k = -1;
        if (PySequence_Fast_GET_SIZE(edge) != 3)
            PyErr_SetString(PyExc_ValueError, "an edge must be (src, regex, dst)");
        else if (!as_int32(PySequence_Fast_GET_ITEM(edge, 0), &a) && !as_int32(PySequence_Fast_GET_ITEM(edge, 2), &b))
            k = encode_node(e, PySequence_Fast_GET_ITEM(edge, 1));
        Py_DECREF(edge);
        if (k < 0)
            goto done;
        if (vec_push(&labels, a) < 0 || vec_push(&labels, (int32_t)k) < 0 || vec_push(&labels, b) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    at = e->base + (Py_ssize_t)e->out.n;
    if (emit(e, K_AUTOMATON) || emit(e, ns) || emit(e, st) || emit(e, (int32_t)n_acc)) {
        at = -1;
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_acc; i++) {
        int32_t q;
        if (as_int32(PySequence_Fast_GET_ITEM(fa, i), &q) || emit(e, q)) {
            at = -1;
            goto done;
        }
    }
    if (emit(e, (int32_t)n_edges)) {
        at = -1;
        goto done;
    }
    for (size_t i = 0; i < labels.n; i++)
        if (emit(e, labels.v[i])) {
            at = -1;
            goto done;
        }
done:
    free(labels.v);
    Py_XDECREF(n_states);
    Py_XDECREF(start);
    Py_XDECREF(fe);
    Py_XDECREF(fa);
    return at;
}

static Py_ssize_t
encode_node(Encoder *e, PyObject *rx)
{
    PyObject *key = PyLong_FromVoidPtr(rx);
    if (!key)
        return -1;
    PyObject *found = PyDict_GetItemWithError(e->by_id, key);  /* borrowed */
    if (found) {
        Py_DECREF(key);
        return PyLong_AsSsize_t(found);
    }
    Py_ssize_t at = -1;
    if (PyErr_Occurred())
        goto done;
    if (Py_EnterRecursiveCall(" while encoding a regex"))  /* Python's recursion limit */
        goto done;
    switch (node_type(e, rx)) {
    case T_SEQ:
        at = encode_seq(e, rx);
        break;
    case T_CHARS:
        at = encode_leaf(e, rx, T_CHARS);
        break;
    case T_BYTES:
        at = encode_leaf(e, rx, T_BYTES);
        break;
    case T_ALT:
        at = encode_kids(e, rx, K_ALT);
        break;
    case T_REPEAT:
        at = encode_repeat(e, rx);
        break;
    case T_AUTOMATON:
        at = encode_automaton(e, rx);
        break;
    case -1:
        PyErr_Format(PyExc_TypeError, "not a regex node: %R", rx);
        break;
    default:  /* -2: isinstance raised */
        break;
    }
    Py_LeaveRecursiveCall();
    if (at >= 0) {
        PyObject *v = PyLong_FromSsize_t(at);
        if (!v || PyDict_SetItem(e->by_id, key, v) < 0)
            at = -1;
        Py_XDECREF(v);
    }
done:
    Py_DECREF(key);
    return at;
}

static PyObject *
encode(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *rx, *code, *by_id, *leaves, *leaf, *types;
    if (!PyArg_ParseTuple(args, "OOO!O!OO!", &rx, &code, &PyDict_Type, &by_id, &PyDict_Type, &leaves, &leaf,
                          &PyTuple_Type, &types))
        return NULL;
    if (PyTuple_GET_SIZE(types) != N_TYPES) {
        PyErr_SetString(PyExc_ValueError, "types: (Seq, CharRanges, ByteRanges, Alt, Repeat, Automaton)");
        return NULL;
    }
    Py_ssize_t base = PyObject_Length(code);
    if (base < 0)
        return NULL;
    Encoder e;
    memset(&e, 0, sizeof(e));
    e.base = base;
    e.by_id = by_id;
    e.leaves = leaves;
    e.leaf = leaf;
    for (int i = 0; i < N_TYPES; i++)
        e.types[i] = PyTuple_GET_ITEM(types, i);
    PyObject *result = NULL;
    e.s_items = PyUnicode_InternFromString("items");
    e.s_item = PyUnicode_InternFromString("item");
    e.s_min = PyUnicode_InternFromString("min");
    e.s_max = PyUnicode_InternFromString("max");
    e.s_ranges = PyUnicode_InternFromString("ranges");
    e.s_n_states = PyUnicode_InternFromString("n_states");
    e.s_start = PyUnicode_InternFromString("start");
    e.s_edges = PyUnicode_InternFromString("edges");
    e.s_accepting = PyUnicode_InternFromString("accepting");
    if (e.s_items && e.s_item && e.s_min && e.s_max && e.s_ranges && e.s_n_states && e.s_start && e.s_edges
        && e.s_accepting) {
        Py_ssize_t at = encode_node(&e, rx);
        if (at >= 0) {
            /* the new words onto the program in one call */
            PyObject *data = PyBytes_FromStringAndSize((const char *)e.out.v, (Py_ssize_t)e.out.n * 4);
            PyObject *r = data ? PyObject_CallMethod(code, "frombytes", "O", data) : NULL;
            Py_XDECREF(data);
            if (r) {
                Py_DECREF(r);
                result = PyLong_FromSsize_t(at);
            }
        }
    }
    Py_XDECREF(e.s_items);
    Py_XDECREF(e.s_item);
    Py_XDECREF(e.s_min);
    Py_XDECREF(e.s_max);
    Py_XDECREF(e.s_ranges);
    Py_XDECREF(e.s_n_states);
    Py_XDECREF(e.s_start);
    Py_XDECREF(e.s_edges);
    Py_XDECREF(e.s_accepting);
    free(e.out.v);
    return result;
}

/* a character repeated more than this many times ends a literal run */
#define MAX_LITERAL_REPEAT 4096

/* literal_run(items, char_class, byte_class[, repeat]) -> (data, k): the UTF-8 bytes of the
 * longest run of single characters or bytes that starts `items` (a tuple of regex nodes:
 * exact instances of the two classes whose ranges are one (c, c) pair, a code point that
 * is not a surrogate, a byte within 0..255; and, given the repeat class, exact instances
 * of it that repeat one of those a fixed number of times, at most MAX_LITERAL_REPEAT),
 * and how many items that is; what gramgen.automata.dfa.literal_prefix reads in Python. */
static PyObject *
literal_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *items, *char_type, *byte_type, *repeat_type = NULL;
    if (!PyArg_ParseTuple(args, "O!OO|O", &PyTuple_Type, &items, &char_type, &byte_type, &repeat_type))
        return NULL;
    Encoder e;
    memset(&e, 0, sizeof(e));
    e.s_ranges = PyUnicode_InternFromString("ranges");
    e.s_item = PyUnicode_InternFromString("item");
    e.s_min = PyUnicode_InternFromString("min");
    e.s_max = PyUnicode_InternFromString("max");
    Vec data = {0};
    Py_ssize_t k = 0;
    PyObject *result = NULL;
    if (!e.s_ranges || !e.s_item || !e.s_min || !e.s_max)
        goto done;
    const Py_ssize_t n = PyTuple_GET_SIZE(items);
    for (; k < n; k++) {
        PyObject *item = PyTuple_GET_ITEM(items, k);
        long times = 1;
        if (repeat_type && (PyObject *)Py_TYPE(item) == repeat_type) {
            /* a character repeated a fixed number of times (``ll`` merged into l{2}) */
            PyObject *lo = PyObject_GetAttr(item, e.s_min), *hi = lo ? PyObject_GetAttr(item, e.s_max) : NULL;
            PyObject *inner = hi ? PyObject_GetAttr(item, e.s_item) : NULL;
            if (!inner) {
                Py_XDECREF(lo);
                Py_XDECREF(hi);
                goto done;
            }
            times = PyLong_CheckExact(lo) && PyLong_CheckExact(hi) ? PyLong_AsLong(lo) : -1;
            if (times != -1 && PyLong_AsLong(hi) != times)
                times = -1;
            Py_DECREF(lo);
            Py_DECREF(hi);
            Py_DECREF(inner);   /* (the repeat holds it) */
            if (PyErr_Occurred())
                PyErr_Clear();
            if (times < 1 || times > MAX_LITERAL_REPEAT)
                break;
            item = inner;
        }
        int type;
        if ((PyObject *)Py_TYPE(item) == char_type)
            type = T_CHARS;
        else if ((PyObject *)Py_TYPE(item) == byte_type)
            type = T_BYTES;
        else
            break;
        uint8_t buf[4];
        int got = single_literal(&e, item, type, buf);
        if (got < 0) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_OverflowError))
                goto done;
            PyErr_Clear();   /* (odd ranges: not a literal character) */
            break;
        }
        if (!got)
            break;
        for (long r = 0; r < times; r++)
            for (int i = 0; i < got; i++)
                if (vec_push(&data, buf[i])) {
                    PyErr_NoMemory();
                    goto done;
                }
    }
    {
        PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)data.n);
        if (!bytes)
            goto done;
        for (size_t i = 0; i < data.n; i++)
            PyBytes_AS_STRING(bytes)[i] = (char)data.v[i];
        result = Py_BuildValue("(Nn)", bytes, k);
    }
done:
    free(data.v);
    Py_XDECREF(e.s_ranges);
    Py_XDECREF(e.s_item);
    Py_XDECREF(e.s_min);
    Py_XDECREF(e.s_max);
    return result;
}

/* ------------------------------------------------------------- agreement depth */

/* The largest d <= cap such that state q1 of one DFA and state q2 of another (or the
 * same) agree on every byte string of length <= d: both dead or both alive after it, and
 * equally accepting when alive. The DFAs come in sink form (the sink is the last state,
 * never accepting). Breadth-first over the pairs of states that strings of each length
 * lead to; within one DFA a pair of equal states agrees on everything. After max_pairs
 * distinct pairs it stops and answers the depth verified so far. */
static PyObject *
agreement_depth(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer t1_b, a1_b, t2_b, a2_b, probe_b = {0};
    int q1, q2, cap, max_pairs;
    if (!PyArg_ParseTuple(args, "y*y*iy*y*iii|y*", &t1_b, &a1_b, &q1, &t2_b, &a2_b, &q2, &cap, &max_pairs,
                          &probe_b))
        return NULL;
    PyObject *result = NULL;
    /* the bytes to try: one per class of bytes that both tables treat alike (all 256
     * when not given) */
    uint8_t all_bytes[256];
    const uint8_t *probe = all_bytes;
    Py_ssize_t n_probe = 256;
    for (int x = 0; x < 256; x++)
        all_bytes[x] = (uint8_t)x;
    if (probe_b.obj) {
        if (probe_b.itemsize != 1 || probe_b.len < 1 || probe_b.len > 256) {
            PyErr_SetString(PyExc_ValueError, "agreement_depth: probe must be 1 to 256 bytes");
            goto done;
        }
        probe = probe_b.buf;
        n_probe = probe_b.len;
    }
    const Py_ssize_t n1 = t1_b.len / (256 * 4), n2 = t2_b.len / (256 * 4);
    if (t1_b.itemsize != 4 || t1_b.len % (256 * 4) || n1 < 1 || a1_b.len != n1
        || t2_b.itemsize != 4 || t2_b.len % (256 * 4) || n2 < 1 || a2_b.len != n2
        || q1 < 0 || q2 < 0 || q1 >= n1 - 1 || q2 >= n2 - 1 || cap < 0 || max_pairs < 1) {
        PyErr_SetString(PyExc_ValueError, "agreement_depth: inconsistent tables, flags or states");
        goto done;
    }
    const int32_t *T1 = t1_b.buf, *T2 = t2_b.buf;
    const uint8_t *A1 = a1_b.buf, *A2 = a2_b.buf;
    const int32_t sink1 = (int32_t)(n1 - 1), sink2 = (int32_t)(n2 - 1);
    const int same = T1 == T2 && n1 == n2 && A1 == A2;
    int depth = cap, status = OK;
    Py_BEGIN_ALLOW_THREADS
    SetTable seen;
    Vec frontier = {0}, next = {0};
    if (set_table_init(&seen) || vec_push(&frontier, q1) || vec_push(&frontier, q2)) {
        status = NO_MEMORY;
    } else if (!(same && q1 == q2)) {
        for (int level = 0; level < cap && frontier.n; level++) {
            next.n = 0;
            for (size_t i = 0; i < frontier.n && depth == cap; i += 2) {
                const int32_t *ra = T1 + (size_t)frontier.v[i] * 256, *rb = T2 + (size_t)frontier.v[i + 1] * 256;
                for (Py_ssize_t p = 0; p < n_probe; p++) {
                    int32_t a = ra[probe[p]], b = rb[probe[p]];
                    if (a < 0 || b < 0 || a > sink1 || b > sink2) {
                        status = BAD_INPUT;
                        depth = level;
                        break;
                    }
                    if (a == sink1 && b == sink2)
                        continue;  /* both dead */
                    if (same && a == b)
                        continue;  /* the same future */
                    if (a == sink1 || b == sink2 || A1[a] != A2[b]) {
                        depth = level;  /* a string of length level + 1 tells them apart */
                        break;
                    }
                    int32_t pair[2] = {a, b};
                    if (set_table_get(&seen, pair, 2) != -2)
                        continue;
                    if (set_table_put(&seen, pair, 2, 0) || vec_push(&next, a) || vec_push(&next, b)) {
                        status = NO_MEMORY;
                        depth = level;
                        break;
                    }
                }
            }
            if (depth != cap)
                break;
            if (seen.start.n > (size_t)max_pairs) {
                depth = level + 1;  /* verified up to here; stop exploring */
                break;
            }
            Vec swap = frontier;
            frontier = next;
            next = swap;
        }
    }
    set_table_free(&seen);
    free(frontier.v);
    free(next.v);
    Py_END_ALLOW_THREADS
    if (status == NO_MEMORY)
        PyErr_NoMemory();
    else if (status == BAD_INPUT)
        PyErr_SetString(PyExc_ValueError, "agreement_depth: table holds a state out of range");
    else
        result = PyLong_FromLong(depth);
done:
    PyBuffer_Release(&t1_b);
    PyBuffer_Release(&a1_b);
    PyBuffer_Release(&t2_b);
    PyBuffer_Release(&a2_b);
    if (probe_b.obj)
        PyBuffer_Release(&probe_b);
    return result;
}

/* canonical_form(table, acc, state, max_states) -> bytes or None: the part of a DFA (sink
 * form) reachable from `state`, numbered breadth-first from it (bytes in order), written
 * as one acceptance byte and 256 little-endian uint16 targets per state (0xFFFF: the
 * sink). Two states, of one DFA or of two, with equal forms have isomorphic futures, so
 * the same language: whatever depends only on that (a token classification) is shared.
 * For minimal DFAs the converse holds too. None when more than max_states states are
 * reachable. */
static PyObject *
canonical_form(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer t_b, a_b;
    int state, max_states;
    if (!PyArg_ParseTuple(args, "y*y*ii", &t_b, &a_b, &state, &max_states))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = t_b.len / (256 * 4);
    int32_t *number = NULL, *order = NULL;
    if (t_b.itemsize != 4 || t_b.len % (256 * 4) || n < 1 || a_b.len != n || state < 0 || state >= n - 1
        || max_states < 1 || max_states > 0xFFFE) {
        PyErr_SetString(PyExc_ValueError, "canonical_form: inconsistent table, flags, state or limit");
        goto done;
    }
    const int32_t *T = t_b.buf;
    const uint8_t *A = a_b.buf;
    const int32_t sink = (int32_t)(n - 1);
    number = malloc((size_t)n * sizeof(int32_t));
    order = malloc((size_t)max_states * sizeof(int32_t));
    if (!number || !order) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        number[i] = -1;
    int count = 1;
    number[state] = 0;
    order[0] = state;
    for (int i = 0; i < count; i++) {
        const int32_t *row = T + (size_t)order[i] * 256;
        for (int b = 0; b < 256; b++) {
            const int32_t t = row[b];
            if (t < 0 || t > sink) {
                PyErr_SetString(PyExc_ValueError, "canonical_form: table holds a state out of range");
                goto done;
            }
            if (t == sink || number[t] >= 0)
                continue;
            if (count == max_states) {
                result = Py_NewRef(Py_None);
                goto done;
            }
            number[t] = count;
            order[count++] = t;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 513);
    if (!result)
        goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    for (int i = 0; i < count; i++) {
        const int32_t *row = T + (size_t)order[i] * 256;
        *out++ = A[order[i]] ? 1 : 0;
        for (int b = 0; b < 256; b++) {
            const int32_t t = row[b];
            const uint16_t v = t == sink ? 0xFFFF : (uint16_t)number[t];
            *out++ = (uint8_t)(v & 0xFF);
            *out++ = (uint8_t)(v >> 8);
        }
    }
done:
    free(number);
    free(order);
    PyBuffer_Release(&t_b);
    PyBuffer_Release(&a_b);
    return result;
}

/* ------------------------------------------------------------- frozen keys */

/* frozen_key(rx, memo, base) -> what gramgen.grammar.ir.frozen_key(rx, memo) gives (equal
 * tuples): a regex tree as nested tuples of its class name and fields, for the caches
 * keyed by regexes. `base`: the Regex class (nodes are its instances); `memo`: None or a
 * dict by id() of subtrees already keyed (the caller keeps the trees alive). A tuple field
 * is rebuilt only where it holds nodes (a ranges tuple is kept as it is: equal either
 * way). TypeError when the key is unhashable (ranges given as lists). */
static PyObject *fk_fields;   /* type -> (class name, field names) */

static PyObject *fk_node(PyObject *rx, PyObject *memo, PyTypeObject *base);

static PyObject *
fk_value(PyObject *v, PyObject *memo, PyTypeObject *base)
{
    if (PyObject_TypeCheck(v, base))
        return fk_node(v, memo, base);
    if (!PyTuple_Check(v)) {
        Py_INCREF(v);
        return v;
    }
    const Py_ssize_t n = PyTuple_GET_SIZE(v);
    PyObject *out = NULL;
    if (!PyTuple_CheckExact(v) && !(out = PyTuple_New(n)))
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(v, i);
        PyObject *x = fk_value(item, memo, base);
        if (!x) {
            Py_XDECREF(out);
            return NULL;
        }
        if (!out && x == item) {
            Py_DECREF(x);
            continue;
        }
        if (!out) {
            if (!(out = PyTuple_New(n))) {
                Py_DECREF(x);
                return NULL;
            }
            for (Py_ssize_t j = 0; j < i; j++) {
                PyObject *same = PyTuple_GET_ITEM(v, j);
                Py_INCREF(same);
                PyTuple_SET_ITEM(out, j, same);
            }
        }
        PyTuple_SET_ITEM(out, i, x);
    }
    if (!out) {
        Py_INCREF(v);
        return v;
    }
    return out;
}

static PyObject *
fk_node(PyObject *rx, PyObject *memo, PyTypeObject *base)
{
    PyObject *id = NULL, *out = NULL;
    if (memo != Py_None) {
        if (!(id = PyLong_FromVoidPtr(rx)))
            return NULL;
        PyObject *found = PyDict_GetItemWithError(memo, id);  /* borrowed */
        if (found || PyErr_Occurred()) {
            Py_XINCREF(found);
            Py_DECREF(id);
            return found;
        }
    }
    PyObject *type = (PyObject *)Py_TYPE(rx);
    PyObject *spec = PyDict_GetItemWithError(fk_fields, type);  /* borrowed */
    if (!spec) {
        if (PyErr_Occurred())
            goto done;
        PyObject *name = PyObject_GetAttrString(type, "__name__");
        PyObject *fields = name ? PyObject_GetAttrString(type, "__dataclass_fields__") : NULL;
        PyObject *names = fields ? PySequence_Tuple(fields) : NULL;
        PyObject *made = names ? PyTuple_Pack(2, name, names) : NULL;
        Py_XDECREF(name);
        Py_XDECREF(fields);
        Py_XDECREF(names);
        if (!made)
            goto done;
        int bad = PyDict_SetItem(fk_fields, type, made);
        Py_DECREF(made);
        if (bad || !(spec = PyDict_GetItemWithError(fk_fields, type)))
            goto done;
    }
    PyObject *names = PyTuple_GET_ITEM(spec, 1);
    const Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (Py_EnterRecursiveCall(" while keying a regex"))
        goto done;
    out = PyTuple_New(n + 1);
    if (out) {
        PyObject *cls_name = PyTuple_GET_ITEM(spec, 0);
        Py_INCREF(cls_name);
        PyTuple_SET_ITEM(out, 0, cls_name);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyObject_GetAttr(rx, PyTuple_GET_ITEM(names, i));
            PyObject *x = v ? fk_value(v, memo, base) : NULL;
            Py_XDECREF(v);
            if (!x) {
                Py_CLEAR(out);
                break;
            }
            PyTuple_SET_ITEM(out, i + 1, x);
        }
    }
    Py_LeaveRecursiveCall();
    if (out && id && PyDict_SetItem(memo, id, out) < 0)
        Py_CLEAR(out);
done:
    Py_XDECREF(id);
    return out;
}

static PyObject *
frozen_key(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *rx, *memo, *base;
    if (!PyArg_ParseTuple(args, "OOO!", &rx, &memo, &PyType_Type, &base))
        return NULL;
    if (memo != Py_None && !PyDict_Check(memo)) {
        PyErr_SetString(PyExc_TypeError, "frozen_key: memo must be a dict or None");
        return NULL;
    }
    if (!PyObject_TypeCheck(rx, (PyTypeObject *)base)) {
        PyErr_Format(PyExc_TypeError, "not a regex node: %R", rx);
        return NULL;
    }
    if (!fk_fields && !(fk_fields = PyDict_New()))
        return NULL;
    PyObject *out = fk_node(rx, memo, (PyTypeObject *)base);
    if (out && PyObject_Hash(out) == -1)
        Py_CLEAR(out);
    return out;
}

/* untrack(roots, types) -> how many objects it took out of the cyclic collector's lists:
 * every object reachable from the items of the list roots through exact tuples and
 * instances of exactly one of the classes in the tuple types (immutable regex trees and
 * rules: they cannot form a reference cycle, so refcounting alone frees them, and a full
 * collection need not walk them). Other objects are neither untracked nor entered; what an
 * untracked object holds stays alive through its reference, as for any untracked holder. */
typedef struct {
    PyObject **items;
    Py_ssize_t n, cap;
    PyObject *types;
    int failed;
} untrack_stack;

static int
untrack_push(untrack_stack *st, PyObject *o)
{
    if (!PyObject_IS_GC(o) || !PyObject_GC_IsTracked(o))
        return 0;
    if (!PyTuple_CheckExact(o)) {
        Py_ssize_t k, nt = PyTuple_GET_SIZE(st->types);
        for (k = 0; k < nt; k++)
            if ((PyObject *)Py_TYPE(o) == PyTuple_GET_ITEM(st->types, k))
                break;
        if (k == nt)
            return 0;
    }
    if (st->n == st->cap) {
        Py_ssize_t cap = st->cap ? 2 * st->cap : 256;
        PyObject **items = PyMem_Realloc(st->items, (size_t)cap * sizeof(PyObject *));
        if (!items) {
            st->failed = 1;
            return -1;
        }
        st->items = items;
        st->cap = cap;
    }
    /* untracked when pushed: an object met again (a shared subtree) is not pushed twice */
    PyObject_GC_UnTrack(o);
    st->items[st->n++] = o;
    return 0;
}

static int
untrack_visit(PyObject *o, void *arg)
{
    return untrack_push((untrack_stack *)arg, o);
}

static PyObject *
untrack(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *roots, *types;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &roots, &PyTuple_Type, &types))
        return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(types); k++)
        if (!PyType_Check(PyTuple_GET_ITEM(types, k))) {
            PyErr_SetString(PyExc_TypeError, "untrack: types must be a tuple of classes");
            return NULL;
        }
    untrack_stack st = {NULL, 0, 0, types, 0};
    Py_ssize_t done = 0;
    /* (no Python code runs below: the roots keep every pushed object alive) */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(roots) && !st.failed; i++) {
        untrack_push(&st, PyList_GET_ITEM(roots, i));
        while (st.n > 0 && !st.failed) {
            PyObject *o = st.items[--st.n];
            done++;
            traverseproc traverse = Py_TYPE(o)->tp_traverse;
            if (traverse)
                traverse(o, untrack_visit, &st);
        }
    }
    PyMem_Free(st.items);
    if (st.failed)
        return PyErr_NoMemory();
    return PyLong_FromSsize_t(done);
}

static PyMethodDef methods[] = {
    {"frozen_key", frozen_key, METH_VARARGS,
     "frozen_key(rx, memo, base) -> gramgen.grammar.ir.frozen_key(rx, memo) (an equal tuple), in C;"
     " base is the Regex class. TypeError when unhashable."},
    {"canonical_form", canonical_form, METH_VARARGS,
     "canonical_form(table, acc, state, max_states) -> the future of state (reachable part, numbered"
     " breadth-first) as bytes, equal for states with isomorphic futures; None past max_states states."},
    {"agreement_depth", agreement_depth, METH_VARARGS,
     "agreement_depth(table1, acc1, q1, table2, acc2, q2, cap, max_pairs) -> the largest d <= cap such"
     " that q1 (of the first DFA, sink form) and q2 (of the second) agree (dead / alive and accepting)"
     " after every byte string of length <= d."},
    {"encode", encode, METH_VARARGS,
     "encode(rx, code, by_id, leaves, leaf, types) -> offset: the regex tree rx appended to the int32"
     " program code (array('i')) as gramgen.automata.dfa._Program.node encodes it; by_id (id -> offset)"
     " and leaves ((kind, ranges) -> offset) are the encoded nodes, leaf(rx) the words of a class, types"
     " the node classes (Seq, CharRanges, ByteRanges, Alt, Repeat, Automaton). RecursionError when nested"
     " too deeply."},
    {"literal_run", literal_run, METH_VARARGS,
     "literal_run(items, char_class, byte_class) -> (data, k): the UTF-8 bytes of the single characters"
     " or bytes that start the tuple items, and how many items they are."},
    {"untrack", untrack, METH_VARARGS,
     "untrack(roots, types) -> n: every object reachable from the items of the list roots through"
     " exact tuples and instances of exactly one of the classes in types, taken out of the cyclic"
     " garbage collector's lists (for immutable trees, which cannot form cycles); n of them."},
    {"without_prefixes", without_prefixes, METH_VARARGS,
     "without_prefixes(sink, accepting, classes, prefixes, max_states) -> the words of a DFA that start "
     "with none of the prefixes, as compile_program returns a DFA"},
    {"with_prefix", with_prefix, METH_VARARGS,
     "with_prefix(data, sink, accepting, classes, max_states) -> (table, sink table, accepting, n, classes):"
     " the minimal DFA of data followed by a minimal DFA's language (a chain of states before it); None"
     " where that chain is not minimal, the DFA is empty or the result has more than max_states states."},
    {"compile_program", compile_program, METH_VARARGS,
     "compile_program(program, root, nfa_budget, max_states, work_budget) -> (status, transitions,"
     " sink_transitions, accepting, n): the minimal trimmed DFA, numbered breadth-first, as bytes:"
     " int32 rows of 256 (-1: none), the same with a sink state n for -1 plus its row, and one byte"
     " per state for acceptance, the sink's (0) last; status 1: more than"
     " max_states, 2: work budget exceeded, 5: more than nfa_budget NFA states, 6: nested too deeply"
     " (then the other items are None)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_dfabuild", "Native DFA construction (see gramgen.automata.dfa).", -1, methods,
};

PyMODINIT_FUNC
PyInit__dfabuild(void)
{
    return PyModule_Create(&module);
}
