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
#include <string.h>

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

/* The trie arrays' header, checked before a walk: first_start (ranks of each first byte,
 * 257 non-decreasing offsets within the ranks) and a positive max_len. */
static int
check_trie(const int64_t *first_start, Py_ssize_t n_ranks, Py_ssize_t max_len)
{
    for (int b = 0; b < 257; b++) {
        if (first_start[b] < 0 || first_start[b] > n_ranks || (b && first_start[b] < first_start[b - 1])) {
            PyErr_SetString(PyExc_ValueError, "first_start is inconsistent");
            return -1;
        }
    }
    if (max_len < 1) {
        PyErr_SetString(PyExc_ValueError, "max_len must be positive");
        return -1;
    }
    return 0;
}

/* Chain shortcut (classify): a token whose characters after its first one each move the
 * DFA one step along a chain of states that all take the same bytes to the next one (a
 * string body loops on one state; a counted string's body advances its counter) is
 * inside, without walking those bytes, when the chain is at least that many characters
 * long. The token table gives, per rank, the length of its first character (char_len: 2
 * to 4 for a UTF-8 lead byte, else 1), the ASCII bytes of the rest as a 128-bit set
 * (rest: bit b for byte b in 1..127; bit 0 for a NUL or any byte >= 0x80), whether the
 * rest's non-ASCII bytes are whole well-formed UTF-8 characters (rest_utf8; never with a
 * NUL), and how many characters the rest has (rest_chars). Per DFA state, computed on
 * first use: its step, the state most ASCII bytes lead to; the ASCII bytes that lead
 * there; whether every well-formed UTF-8 character leads there too; and how many steps
 * the chain of such states goes on with the same bytes (chain; max_len when it loops).
 * Most tokens of a vocabulary are a first character and a rest of letters, digits and
 * punctuation: in a string body they cost a few loads instead of a DFA step per byte. */
/* What the chain shortcut knows of one DFA state. A caller may keep an array of these
 * per DFA across calls (they depend only on the table and the longest token), and
 * threads may fill it at once: each field is written only with its one final value, and
 * `info` and `chain` are published after the fields they summarize. */
typedef struct {
    uint64_t bytes[2];  /* the ASCII bytes that lead to its step (bit 0 never) */
    int32_t step;       /* the state most ASCII bytes lead to (the sink: none) */
    int32_t chain;      /* chain length plus one; 0 until known */
    uint8_t info;       /* 0 not computed, 1 computed, 2 also every UTF-8 character steps */
    uint8_t pad[7];
} StateInfo;

/* A chain that does not loop is followed this many steps at most (each new state costs
 * a scan of its row and of the UTF-8 characters): a longer one counts as this long, and a
 * token with more characters after its first is walked. */
#define CHAIN_STEPS 24

static inline uint8_t
info_of(const StateInfo *si)
{
    return __atomic_load_n(&si->info, __ATOMIC_ACQUIRE);
}

static inline int32_t
chain_of(const StateInfo *si)
{
    return __atomic_load_n(&si->chain, __ATOMIC_ACQUIRE) - 1;
}

static inline void
set_chain(StateInfo *si, int32_t chain)
{
    __atomic_store_n(&si->chain, chain + 1, __ATOMIC_RELEASE);
}

typedef struct {
    const uint8_t *char_len;
    const uint64_t *rest;
    const uint8_t *rest_utf8;
    const uint16_t *rest_chars;
    int32_t cap;        /* the longest token: a chain this long takes every rest */
    StateInfo *states;  /* per DFA state, filled on first use (see StateInfo) */
    int32_t path[CHAIN_STEPS + 2];  /* scratch */
} Rests;

/* The well-formed UTF-8 sequences (Unicode table 3-7): per row, its length and the byte
 * range of each position. */
static const uint8_t UTF8_ROWS[8][9] = {
    {2, 0xC2, 0xDF, 0x80, 0xBF},
    {3, 0xE0, 0xE0, 0xA0, 0xBF, 0x80, 0xBF},
    {3, 0xE1, 0xEC, 0x80, 0xBF, 0x80, 0xBF},
    {3, 0xED, 0xED, 0x80, 0x9F, 0x80, 0xBF},
    {3, 0xEE, 0xEF, 0x80, 0xBF, 0x80, 0xBF},
    {4, 0xF0, 0xF0, 0x90, 0xBF, 0x80, 0xBF, 0x80, 0xBF},
    {4, 0xF1, 0xF3, 0x80, 0xBF, 0x80, 0xBF, 0x80, 0xBF},
    {4, 0xF4, 0xF4, 0x80, 0x8F, 0x80, 0xBF, 0x80, 0xBF},
};

/* Whether every well-formed UTF-8 character leads from state s to state t: the set of
 * states after each byte position, kept while it has at most 32 states (more: no, which
 * only forgoes the shortcut). */
static int
utf8_steps(const int32_t *table, int32_t sink, int32_t s, int32_t t)
{
    int32_t set[32], next[32];
    for (int row = 0; row < 8; row++) {
        const uint8_t *spec = UTF8_ROWS[row];
        int n = 1;
        set[0] = s;
        for (int pos = 0; pos < spec[0]; pos++) {
            const int last = pos + 1 == spec[0];
            int m = 0;
            for (int i = 0; i < n; i++) {
                for (int b = spec[1 + 2 * pos]; b <= spec[2 + 2 * pos]; b++) {
                    const int32_t u = table[(int64_t)set[i] * 256 + b];
                    if (u < 0 || u >= sink || (last && u != t))
                        return 0;  /* dies (or an out-of-range entry: no shortcut) */
                    if (last)
                        continue;
                    int j = 0;
                    while (j < m && next[j] != u)
                        j++;
                    if (j == m) {
                        if (m == 32)
                            return 0;
                        next[m++] = u;
                    }
                }
            }
            for (int i = 0; i < m; i++)
                set[i] = next[i];
            n = m;
        }
    }
    return 1;
}

/* Fills the step, its bytes and its UTF-8 flag of state s (alive) on first use. */
static void
state_step(Rests *x, const int32_t *table, int32_t sink, int32_t s)
{
    StateInfo *si = x->states + s;
    if (info_of(si))
        return;
    const int32_t *row = table + (int64_t)s * 256;
    int32_t cand[8];
    int count[8], n = 0, best = -1;
    for (int b = 1; b < 128; b++) {
        const int32_t u = row[b];
        if (u < 0 || u >= sink)
            continue;  /* dies, or an out-of-range entry the walk reports */
        int j = 0;
        while (j < n && cand[j] != u)
            j++;
        if (j == n) {
            if (n == 8)
                continue;  /* a ninth target: rare, and missing it only forgoes the shortcut */
            cand[n] = u;
            count[n++] = 0;
        }
        count[j]++;
        if (best < 0 || count[j] > count[best])
            best = j;
    }
    const int32_t t = best < 0 ? sink : cand[best];
    uint64_t w[2] = {0, 0};
    if (t != sink)
        for (int b = 1; b < 128; b++)
            if (row[b] == t)
                w[b >> 6] |= (uint64_t)1 << (b & 63);
    si->bytes[0] = w[0];
    si->bytes[1] = w[1];
    si->step = t;
    __atomic_store_n(&si->info, (uint8_t)(1 + (t != sink && utf8_steps(table, sink, s, t))), __ATOMIC_RELEASE);
}

/* The chain length of state s (alive): 0 when no byte steps; the cap when it loops;
 * else one more than its step's when the step takes the same bytes the same way, else 1
 * (at most CHAIN_STEPS, or the cap, when that long). Iterative, filled backwards. */
static int32_t
chain_len(Rests *x, const int32_t *table, int32_t sink, int32_t s)
{
    StateInfo *const si = x->states;
    if (chain_of(si + s) >= 0)
        return chain_of(si + s);
    int n = 0;
    int32_t cur = s, last;
    for (;;) {
        state_step(x, table, sink, cur);
        x->path[n++] = cur;
        const int32_t t = si[cur].step;
        if (t == sink) {
            last = 0;
            break;
        }
        if (t == cur) {
            last = x->cap;
            break;
        }
        if (n > CHAIN_STEPS) {  /* s's chain is longer: CHAIN_STEPS stands for it */
            set_chain(si + s, CHAIN_STEPS);
            return CHAIN_STEPS;
        }
        state_step(x, table, sink, t);
        if (si[t].bytes[0] != si[cur].bytes[0] || si[t].bytes[1] != si[cur].bytes[1]
            || info_of(si + t) != info_of(si + cur)) {
            last = 1;
            break;
        }
        if (chain_of(si + t) >= 0) {
            last = chain_of(si + t) + 1 < x->cap ? chain_of(si + t) + 1 : x->cap;
            break;
        }
        cur = t;
    }
    /* path[n - 1] gets `last`, each earlier state one more (up to the cap) */
    for (int i = n - 1; i >= 0; i--) {
        if (chain_of(si + x->path[i]) < 0)
            set_chain(si + x->path[i], last);
        last = last + 1 < x->cap ? last + 1 : x->cap;
    }
    return chain_of(si + s);
}

/* Whether the rest of token r takes state s (alive) along its chain, staying alive. */
static inline int
rest_steps(Rests *x, const int32_t *table, int32_t sink, int32_t s, int64_t r)
{
    const int32_t chain = chain_len(x, table, sink, s);
    const uint64_t *w = x->states[s].bytes;
    uint64_t m0 = x->rest[2 * r] & ~w[0];
    const uint64_t m1 = x->rest[2 * r + 1] & ~w[1];
    if (m0 == 1 && x->rest_utf8[r] && info_of(x->states + s) == 2)
        m0 = 0;
    return !(m0 | m1) && x->rest_chars[r] <= chain;
}

/* The run of tokens from rank r (below hi) whose first character is one byte, leading to
 * state s1 (chain length chain1, known), that the chain shortcut takes: their inside bits
 * are set. Returns the first rank not taken, or -1 for a token id out of range. Its own
 * function, so that the few values of the loop stay in registers. */
static int64_t
fast_run(const Rests *x, int64_t r, int64_t hi, int32_t s1, int32_t chain1, const int64_t *restrict rank_to_id,
         int64_t n_inside_bits, uint32_t *restrict inside)
{
    const uint64_t g0 = x->states[s1].bytes[0], g1 = x->states[s1].bytes[1];
    const int utf8 = info_of(x->states + s1) == 2, counted = chain1 < x->cap;
    const uint8_t *restrict char_len = x->char_len, *restrict rest_utf8 = x->rest_utf8;
    const uint64_t *restrict rest = x->rest;
    const uint16_t *restrict rest_chars = x->rest_chars;
    for (; r < hi && char_len[r] == 1; r++) {
        uint64_t m0 = rest[2 * r] & ~g0;
        const uint64_t m1 = rest[2 * r + 1] & ~g1;
        if (m0 == 1 && utf8 && rest_utf8[r])
            m0 = 0;
        if ((m0 | m1) || (counted && rest_chars[r] > chain1))
            break;
        const int64_t id = rank_to_id[r];
        if (id < 0 || id >= n_inside_bits)
            return -1;
        inside[id >> 5] |= (uint32_t)1 << (id & 31);
    }
    return r;
}

/* The rank after the run of tokens from r on (r < hi, token r at least d bytes long) that
 * share token r's first d bytes: byte-sorted, they follow r, each with lcp >= d. A few lcp
 * reads settle a short run; a long one (a dead first byte or two, say a blank, ahead of
 * half the vocabulary) is found by galloping and bisecting on those d bytes, not token by
 * token. -1: an offset out of range. */
static int64_t
run_end(const uint8_t *blob, int64_t blob_len, const int64_t *offsets, const int32_t *lcp,
        int64_t r, int64_t hi, int64_t d)
{
    int64_t a = r + 1;
    for (int i = 0; i < 8; i++, a++)
        if (a >= hi || lcp[a] < d)
            return a;
    if (offsets[r] < 0 || offsets[r] + d > blob_len)
        return -1;
    const uint8_t *p = blob + offsets[r];
    int64_t b = hi;
#define SHARES_PREFIX(x) (offsets[(x)] >= 0 && offsets[(x) + 1] <= blob_len \
                          && offsets[(x) + 1] - offsets[(x)] >= d && memcmp(blob + offsets[(x)], p, (size_t)d) == 0)
    for (int64_t step = 1; a + step - 1 < b; step *= 2) {
        const int64_t probe = a + step - 1;
        if (!SHARES_PREFIX(probe)) {
            b = probe;
            break;
        }
        a = probe + 1;
    }
    while (a < b) {
        const int64_t mid = a + (b - a) / 2;
        if (SHARES_PREFIX(mid))
            a = mid + 1;
        else
            b = mid;
    }
#undef SHARES_PREFIX
    return a;
}

/* bits [lo, hi) of a uint32 bit array set */
static void
set_bits32(uint32_t *bits, int64_t lo, int64_t hi)
{
    for (; lo < hi && (lo & 31); lo++)
        bits[lo >> 5] |= (uint32_t)1 << (lo & 31);
    for (; lo + 32 <= hi; lo += 32)
        bits[lo >> 5] = ~(uint32_t)0;
    for (; lo < hi; lo++)
        bits[lo >> 5] |= (uint32_t)1 << (lo & 31);
}

/* Exception path (classify): when most first characters lead from the start state to one
 * state m (its step), whose chain takes all but a few tokens whole (a string body: every
 * token without a quote, a backslash, a control byte or broken UTF-8, and not longer than
 * a counted string's room; a key automaton past the first letters of the names it
 * excludes), those few (and the tokens whose first character leads elsewhere) are the only
 * ones walked and all others are inside at once. The token table lists, per ASCII
 * byte c, the ranks of the tokens that contain it (start[c] .. start[c + 1] in ranks; 128:
 * any byte >= 0x80; 129: bytes >= 0x80 that are not whole well-formed UTF-8 characters),
 * the ranks by character count, most first (by_chars; more_chars[L] of them have more
 * than L characters) and the ids that have a rank (real_ids, by id). A token whose first
 * character leads to m, outside the lists of the bytes m's chain does not take and with no
 * more characters than the chain has room for, has every character on the way: alive at
 * its end. */
typedef struct {
    const int64_t *start;
    const int32_t *ranks;
    const int32_t *by_chars;
    const int64_t *more_chars;
    const uint32_t *real_ids;
    /* row L (0 <= L < long_rows) of each: the tokens with more than L characters, packed
     * by id (n_inside_words per row) and by rank ((n_ranks + 31) / 32 words per row) */
    const uint32_t *long_ids;
    const uint32_t *long_ranks;
    int64_t long_rows;
} Rare;

/* How the tokens with more characters than the room of m's chain end, when the walk need
 * not be asked one by one (see classify_excepted): 1, every such token made only of
 * characters the chain takes ends the lexeme (an exit); 2, every such token dies without
 * the lexeme ending in it; 0, neither holds for sure (they are walked). `steps`: the
 * chain's length from m (its room less the first character); `utf8`: every well-formed
 * UTF-8 character steps along the chain too. Such a token follows the chain to its end E
 * after room characters, and the next character starts with one of the chain's bytes
 * (or a UTF-8 lead byte). */
static int
long_fate(Rests *x, const int32_t *table, int32_t sink, const uint8_t *acc, const uint8_t *follow,
          int32_t m, int32_t steps, int utf8)
{
    const uint64_t *w = x->states[m].bytes;
    int any_acc = acc[m] != 0;
    int32_t e = m;
    for (int32_t i = 0; i < steps; i++) {
        state_step(x, table, sink, e);
        e = x->states[e].step;
        if (e < 0 || e >= sink)
            return 0;
        any_acc |= acc[e] != 0;
    }
    const int32_t *row = table + (int64_t)e * 256;
    int all_follow = 1, plain_follow = 0, high_follow = 0;
    for (int b = 1; b < 128; b++) {
        if (!((w[b >> 6] >> (b & 63)) & 1))
            continue;
        if (row[b] != sink)
            return 0;  /* the chain goes on (longer than counted), or E takes it elsewhere */
        all_follow &= follow[b] != 0;
        plain_follow |= follow[b] != 0;
    }
    for (int b = 0x80; b < 256; b++)
        high_follow |= follow[b] != 0;
    if (utf8)
        for (int b = 0xC2; b <= 0xF4; b++) {
            if (row[b] != sink)
                return 0;
            all_follow &= follow[b] != 0;
        }
    /* exits: E accepts and the byte that kills the token may follow the lexeme there */
    if (acc[e] && all_follow)
        return 1;
    /* dead: no state on the way may end the lexeme before a byte such a token holds (its
     * bytes after the first are the chain's, and UTF-8 bytes when utf8: those may stand
     * mid-character, in states not on the chain, so none of them may follow at all) */
    if ((utf8 && high_follow) || (any_acc && plain_follow))
        return 0;
    return 2;
}

/* The exception path is taken when the tokens to walk are at most 1 / EXCEPTED_SHARE of
 * all (more: the trie walk, with its own chain shortcut, costs less) */
#define EXCEPTED_SHARE 8

/* Marks the ranks of one list in `mark`; -1 for a rank out of range. */
static int
mark_ranks(uint64_t *mark, const int32_t *ranks, int64_t lo, int64_t hi, int64_t n_ranks)
{
    for (int64_t i = lo; i < hi; i++) {
        const int32_t r = ranks[i];
        if (r < 0 || r >= n_ranks)
            return -1;
        mark[r >> 6] |= (uint64_t)1 << (r & 63);
    }
    return 0;
}

/* Marks the ranks lo .. hi - 1. */
static void
mark_range(uint64_t *mark, int64_t lo, int64_t hi)
{
    for (; lo < hi && (lo & 63); lo++)
        mark[lo >> 6] |= (uint64_t)1 << (lo & 63);
    for (; lo + 64 <= hi; lo += 64)
        mark[lo >> 6] = ~(uint64_t)0;
    for (; lo < hi; lo++)
        mark[lo >> 6] |= (uint64_t)1 << (lo & 63);
}

/* classify() by the exception path from `state`: 1 done, 0 the state does not qualify
 * (nothing written), -1 an inconsistent table, -2 out of memory. */
static int
classify_excepted(Rests *x, const Rare *rare, const int32_t *table, int32_t sink, const uint8_t *acc,
                  const uint8_t *follow, int32_t state, const uint8_t *blob, int64_t blob_len,
                  const int64_t *offsets, const int64_t *fs, int64_t n_ranks, int64_t max_len, const int64_t *rank_to_id,
                  uint32_t *inside, int64_t n_inside_words, uint32_t *exits, long *n_exits, int32_t *st,
                  uint8_t *may_end)
{
    /* first characters: those the state's step takes lead to m; the rest from there */
    state_step(x, table, sink, state);
    const int32_t m = x->states[state].step;
    if (m == sink)
        return 0;
    const uint64_t *first = x->states[state].bytes, *w = x->states[m].bytes;
    int32_t room = chain_len(x, table, sink, m) + 1;  /* characters, the first included */
    if (room > max_len)
        room = (int32_t)max_len;  /* (a chain longer than any token) */
    const int other = info_of(x->states + m) == 2 ? 129 : 128;
    /* the tokens longer than the room: settled at once when they all end alike (and the
     * bitmaps cover the room), else walked */
    const int bulk = room < rare->long_rows && rare->more_chars[room] > 0
                     ? long_fate(x, table, sink, acc, follow, m, room - 1, other == 129) : 0;
    int64_t total = rare->start[other + 1] - rare->start[other] + (bulk ? 0 : rare->more_chars[room]);
    if (info_of(x->states + state) != 2)
        total += fs[256] - fs[128];
    for (int c = 0; c < 128; c++) {
        if (!((first[c >> 6] >> (c & 63)) & 1))
            total += fs[c + 1] - fs[c];
        if (!((w[c >> 6] >> (c & 63)) & 1))
            total += rare->start[c + 1] - rare->start[c];
    }
    if (total * EXCEPTED_SHARE > n_ranks)
        return 0;
    uint64_t *mark = calloc((size_t)(n_ranks + 63) / 64 + 1, sizeof(uint64_t));
    if (!mark)
        return -2;
    int bad = mark_ranks(mark, rare->ranks, rare->start[other], rare->start[other + 1], n_ranks)
              || (!bulk && mark_ranks(mark, rare->by_chars, 0, rare->more_chars[room], n_ranks));
    if (info_of(x->states + state) != 2)
        mark_range(mark, fs[128], fs[256]);
    for (int c = 0; c < 128 && !bad; c++) {
        if (!((first[c >> 6] >> (c & 63)) & 1))
            mark_range(mark, fs[c], fs[c + 1]);
        if (!((w[c >> 6] >> (c & 63)) & 1))
            bad = mark_ranks(mark, rare->ranks, rare->start[c], rare->start[c + 1], n_ranks);
    }
    if (bad) {
        free(mark);
        return -1;
    }
    memcpy(inside, rare->real_ids, (size_t)n_inside_words * sizeof(uint32_t));
    if (bulk) {
        /* the long tokens not marked: out of inside, and exits when they end the lexeme
         * (the marked ones are walked below, which sets their bits itself) */
        const uint32_t *long_ids = rare->long_ids + (int64_t)room * n_inside_words;
        for (int64_t i = 0; i < n_inside_words; i++)
            inside[i] &= ~long_ids[i];
        if (bulk == 1) {
            const int64_t n_rank_words = (n_ranks + 31) / 32;
            const uint32_t *long_ranks = rare->long_ranks + (int64_t)room * n_rank_words;
            for (int64_t i = 0; i < n_rank_words; i++) {
                const uint32_t marked = (uint32_t)(mark[i >> 1] >> (32 * (i & 1)));
                const uint32_t ex = long_ranks[i] & ~marked;
                exits[i] |= ex;
                if (ex)
                    *n_exits += __builtin_popcount(ex);
            }
        }
    }
    /* the marked tokens in rank order, each walked from the bytes it shares with the
     * last one walked (st and may_end hold that walk up to `valid`) */
    const uint8_t *prev = NULL;
    int64_t valid = 0;
    st[0] = state;
    may_end[0] = 0;
    for (int64_t i = 0; i < (n_ranks + 63) / 64; i++) {
        for (uint64_t bits = mark[i]; bits; bits &= bits - 1) {
            const int64_t r = i * 64 + __builtin_ctzll(bits);
            const int64_t len = offsets[r + 1] - offsets[r], id = rank_to_id[r];
            if (len < 1 || len > max_len || offsets[r] < 0 || offsets[r + 1] > blob_len || id < 0
                || id >= n_inside_words * 32) {
                free(mark);
                return -1;
            }
            const uint8_t *tok = blob + offsets[r];
            inside[id >> 5] &= ~((uint32_t)1 << (id & 31));
            int64_t d = 0;
            const int64_t lim = valid < len ? valid : len;  /* (valid <= prev_len) */
            while (d < lim && tok[d] == prev[d])
                d++;
            int32_t q = st[d];
            uint8_t e = may_end[d];
            while (q != sink && d < len) {
                if (d && !e && acc[q] && follow[tok[d]])
                    e = 1;
                q = table[(int64_t)q * 256 + tok[d]];
                if ((uint32_t)q > (uint32_t)sink) {
                    free(mark);
                    return -1;
                }
                d++;
                st[d] = q;
                may_end[d] = e;
            }
            valid = d;
            prev = tok;
            if (q != sink) {
                inside[id >> 5] |= (uint32_t)1 << (id & 31);
            } else if (e) {
                exits[r >> 5] |= (uint32_t)1 << (r & 31);
                (*n_exits)++;
            }
        }
    }
    free(mark);
    return 1;
}

static PyObject *
classify(PyObject *self, PyObject *args)
{
    Py_buffer table_b, acc_b, follow_b, blob_b, offsets_b, lcp_b, first_b, ids_b, inside_b, exits_b;
    /* optional: the chain shortcut's fields, then the exception path's */
    Py_buffer opt[11] = {{0}};
    Py_buffer *clen_b = &opt[0], *rest_b = &opt[1], *utf8_b = &opt[2], *chars_b = &opt[3];
    Py_buffer *rstart_b = &opt[4], *rranks_b = &opt[5], *bychars_b = &opt[6], *more_b = &opt[7], *real_b = &opt[8];
    Py_buffer *longid_b = &opt[9], *longrank_b = &opt[10];
    Py_buffer memo_b = {0};
    int state, only_excepted = 0;
    Py_ssize_t max_len;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*iy*y*y*ny*y*w*w*|y*y*y*y*y*y*y*y*y*y*y*pw*", &table_b, &acc_b, &follow_b,
                          &state, &blob_b, &offsets_b, &lcp_b, &max_len, &first_b, &ids_b, &inside_b, &exits_b,
                          clen_b, rest_b, utf8_b, chars_b, rstart_b, rranks_b, bychars_b, more_b, real_b,
                          longid_b, longrank_b, &only_excepted, &memo_b))
        return NULL;
    const int shortcut = clen_b->buf != NULL, excepted = rstart_b->buf != NULL;

    const Py_ssize_t n_rows = table_b.len / (256 * 4);  /* DFA states plus the sink (last) */
    const Py_ssize_t n_ranks = lcp_b.len / 4;
    if (check_buffer(&table_b, 4, 256, "table") || table_b.len % (256 * 4) != 0
        || check_buffer(&acc_b, 1, n_rows, "acc") || check_buffer(&follow_b, 1, 256, "follow")
        || check_buffer(&offsets_b, 8, n_ranks + 1, "offsets") || check_buffer(&lcp_b, 4, 0, "lcp")
        || check_buffer(&first_b, 8, 257, "first_start") || check_buffer(&ids_b, 8, n_ranks, "rank_to_id")
        || check_buffer(&inside_b, 4, 0, "inside") || check_buffer(&exits_b, 4, (n_ranks + 31) / 32, "exits"))
        goto done;
    if (shortcut && (!rest_b->buf || !utf8_b->buf || !chars_b->buf || check_buffer(clen_b, 1, n_ranks, "char_len")
                     || check_buffer(rest_b, 8, 2 * n_ranks, "rest") || check_buffer(utf8_b, 1, n_ranks, "rest_utf8")
                     || check_buffer(chars_b, 2, n_ranks, "rest_chars"))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "char_len, rest, rest_utf8 and rest_chars come together");
        goto done;
    }
    if (memo_b.buf && (!excepted || memo_b.len != n_rows * (Py_ssize_t)sizeof(StateInfo)
                       || ((uintptr_t)memo_b.buf & 7))) {
        PyErr_Format(PyExc_ValueError, "memo: expected %zd bytes (8-aligned) with the exception path's fields",
                     n_rows * (Py_ssize_t)sizeof(StateInfo));
        goto done;
    }
    if (only_excepted && !excepted) {
        PyErr_SetString(PyExc_ValueError, "only_excepted needs the exception path's fields");
        goto done;
    }
    const Py_ssize_t n_rank_words = (n_ranks + 31) / 32;
    if (excepted && (!shortcut || !rranks_b->buf || !bychars_b->buf || !more_b->buf || !real_b->buf
                     || !longid_b->buf || !longrank_b->buf
                     || check_buffer(rstart_b, 8, 131, "rare_start") || check_buffer(rranks_b, 4, 0, "rare_ranks")
                     || check_buffer(bychars_b, 4, n_ranks, "by_chars")
                     || check_buffer(more_b, 8, max_len + 1, "more_chars")
                     || check_buffer(real_b, 4, inside_b.len / 4, "real_ids") || real_b->len != inside_b.len
                     || check_buffer(longid_b, 4, 0, "long_ids") || check_buffer(longrank_b, 4, 0, "long_ranks")
                     || !inside_b.len || longid_b->len % inside_b.len
                     || (n_rank_words && longrank_b->len != longid_b->len / inside_b.len * n_rank_words * 4))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "the exception path's seven fields come after the chain shortcut's, "
                                              "together; real_ids is as long as inside, and long_ids and "
                                              "long_ranks have as many rows, as wide as inside and exits");
        goto done;
    }
    if (excepted) {
        const int64_t *rs = rstart_b->buf, *more = more_b->buf;
        for (int c = 0; c < 131; c++)
            if (rs[c] < 0 || rs[c] > rranks_b->len / 4 || (c && rs[c] < rs[c - 1])) {
                PyErr_SetString(PyExc_ValueError, "rare_start is inconsistent");
                goto done;
            }
        for (Py_ssize_t L = 0; L <= max_len; L++)
            if (more[L] < 0 || more[L] > n_ranks) {
                PyErr_SetString(PyExc_ValueError, "more_chars is out of range");
                goto done;
            }
    }
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
    if (check_trie(first_start, n_ranks, max_len))
        goto done;
    int32_t *st = calloc((size_t)max_len + 1, sizeof(int32_t));
    uint8_t *may_end = calloc((size_t)max_len + 1, 1);
    Rests x = {clen_b->buf, rest_b->buf, utf8_b->buf, chars_b->buf, (int32_t)max_len, NULL, {0}};
    StateInfo *own = NULL;  /* the states' chain facts, when the caller keeps none */
    if (shortcut)
        x.states = memo_b.buf ? (StateInfo *)memo_b.buf : (own = calloc((size_t)n_rows, sizeof(StateInfo)));
    if (!st || !may_end || (shortcut && !x.states)) {
        free(st);
        free(may_end);
        free(own);
        PyErr_NoMemory();
        goto done;
    }
    long n_exits = 0;
    int bad = 0, nomem = 0;
    const int64_t blob_len = blob_b.len;
    Py_BEGIN_ALLOW_THREADS
    if (excepted) {
        const Rare rare = {rstart_b->buf, rranks_b->buf, bychars_b->buf, more_b->buf, real_b->buf,
                           longid_b->buf, longrank_b->buf, longid_b->len / inside_b.len};
        const int done = classify_excepted(&x, &rare, table, sink, acc, follow, state, blob, blob_len, offsets,
                                           first_start, n_ranks, max_len, rank_to_id, inside, inside_b.len / 4, exits, &n_exits,
                                           st, may_end);
        bad = done == -1;
        nomem = done == -2;
        if (done || only_excepted) {
            n_exits = done ? n_exits : -1;
            goto walked;
        }
    }
    for (int b = 0; b < 256; b++) {
        const int32_t s1 = table[(int64_t)state * 256 + b];
        if (s1 == sink)
            continue;
        int64_t r = first_start[b], hi = first_start[b + 1];
        /* st[d]: the state after d bytes of the current token; may_end[d]: the lexeme may
         * end after some p in [1, d - 1] bytes, before byte p (which may follow it). Valid
         * for d up to the depth the previous token reached, and shared through lcp. */
        st[0] = state;
        may_end[0] = 0;
        st[1] = s1;
        may_end[1] = 0;
        /* d0: where the walk of token r starts, the bytes it shares with the last token
         * walked (valid: how deep that walk filled st and may_end; depth 1 always is) */
        int64_t d0 = 0, valid = 1;
        /* the tokens of this first byte whose first character is that byte: the loop
         * shortcut from s1 in a tight loop, before any walk */
        const int fast = shortcut && (s1 >= 0 && s1 < sink);
        const int32_t chain1 = fast ? chain_len(&x, table, sink, s1) : 0;
        while (r < hi) {
            if (fast && x.char_len[r] == 1) {
                const int64_t r0 = r;
                r = fast_run(&x, r, hi, s1, chain1, rank_to_id, n_inside_bits, inside);
                if (r < 0) {
                    bad = 1;
                    goto walked;
                }
                if (r > r0) {
                    valid = 1;
                    if (r >= hi)
                        break;
                    d0 = lcp[r] < 1 ? lcp[r] : 1;
                }
            }
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
            /* the chain shortcut is tried once the walk has passed the first character
             * (tried above already for a one-byte first character) */
            int64_t k1 = shortcut ? x.char_len[r] : len;
            if (k1 < 1 || k1 >= len || (fast && k1 == 1))
                k1 = len;
            while (d < len) {
                if (d >= k1) {
                    if (st[k1] != sink && rest_steps(&x, table, sink, st[k1], r))
                        break;
                    k1 = len;
                }
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
            valid = d;
            if (q != sink) {  /* alive at its last byte, or kept alive by the rest (shortcut) */
                int64_t id = rank_to_id[r];
                inside[id >> 5] |= (uint32_t)1 << (id & 31);
                r++;
                d0 = r < hi ? (lcp[r] < valid ? lcp[r] : valid) : 0;
                continue;
            }
            /* dead after d bytes: so is every following token sharing those d bytes */
            const int64_t end = run_end(blob, blob_len, offsets, lcp, r, hi, d);
            if (end < 0) {
                bad = 1;
                goto walked;
            }
            if (e) {
                set_bits32(exits, r, end);
                n_exits += (long)(end - r);
            }
            r = end;
            d0 = r < hi ? lcp[r] : 0;
        }
    }
walked:
    Py_END_ALLOW_THREADS
    free(st);
    free(may_end);
    free(own);
    if (nomem)
        PyErr_NoMemory();
    else if (bad)
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
    for (int i = 0; i < 11; i++)
        PyBuffer_Release(&opt[i]);  /* (one never filled has no object: a no-op) */
    PyBuffer_Release(&memo_b);
    return result;
}

/* classify_pair(table, acc, follow, state, state2, blob, offsets, lcp, max_len, first_start,
 *               rank_to_id, inside, exits)
 *
 * classify() for `state` given the classes of `state2` (another state of the same DFA),
 * which `inside` and `exits` hold on entry. Each token is walked from both states in
 * step. While both stay alive with the same acceptance and may-end flag, the two agree so
 * far; once both reach the same state, or both die at the same byte, they agree on the
 * token and on every token sharing those bytes, which keep their bits. A token that tells
 * the two apart is walked on from `state` alone and its bits are rewritten. Same checks
 * and trie walk as classify(); two states of a lexeme that differ only within a few bytes
 * (a key automaton inside one of its excluded names, and one past them) meet again after
 * those bytes on almost every token. */
static PyObject *
classify_pair(PyObject *self, PyObject *args)
{
    Py_buffer table_b, acc_b, follow_b, blob_b, offsets_b, lcp_b, first_b, ids_b, inside_b, exits_b;
    int state, state2;
    Py_ssize_t max_len;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*iiy*y*y*ny*y*w*w*", &table_b, &acc_b, &follow_b, &state, &state2,
                          &blob_b, &offsets_b, &lcp_b, &max_len, &first_b, &ids_b, &inside_b, &exits_b))
        return NULL;
    const Py_ssize_t n_rows = table_b.len / (256 * 4);
    const Py_ssize_t n_ranks = lcp_b.len / 4;
    if (check_buffer(&table_b, 4, 256, "table") || table_b.len % (256 * 4) != 0
        || check_buffer(&acc_b, 1, n_rows, "acc") || check_buffer(&follow_b, 1, 256, "follow")
        || check_buffer(&offsets_b, 8, n_ranks + 1, "offsets") || check_buffer(&lcp_b, 4, 0, "lcp")
        || check_buffer(&first_b, 8, 257, "first_start") || check_buffer(&ids_b, 8, n_ranks, "rank_to_id")
        || check_buffer(&inside_b, 4, 0, "inside") || check_buffer(&exits_b, 4, (n_ranks + 31) / 32, "exits"))
        goto done;
    if (state < 0 || state >= n_rows - 1 || state2 < 0 || state2 >= n_rows - 1) {
        PyErr_Format(PyExc_ValueError, "state %d or %d is not a state of the table", state, state2);
        goto done;
    }
    const int32_t *T = table_b.buf;
    const uint8_t *A = acc_b.buf, *follow = follow_b.buf, *blob = blob_b.buf;
    const int64_t *offsets = offsets_b.buf, *first_start = first_b.buf, *rank_to_id = ids_b.buf;
    const int32_t *lcp = lcp_b.buf;
    uint32_t *inside = inside_b.buf, *exits = exits_b.buf;
    const int64_t n_inside_bits = (int64_t)(inside_b.len / 4) * 32, blob_len = blob_b.len;
    const int32_t sink = (int32_t)(n_rows - 1);
    if (check_trie(first_start, n_ranks, max_len))
        goto done;
    /* per depth along the current token: both states, both may-end flags, and whether
     * the walk still follows both (1) or `state` alone (0) */
    int32_t *st1 = calloc((size_t)max_len + 1, sizeof(int32_t)), *st2 = calloc((size_t)max_len + 1, sizeof(int32_t));
    uint8_t *e1 = calloc((size_t)max_len + 1, 1), *e2 = calloc((size_t)max_len + 1, 1);
    uint8_t *pair = calloc((size_t)max_len + 1, 1);
    if (!st1 || !st2 || !e1 || !e2 || !pair) {
        PyErr_NoMemory();
        goto freed;
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int b = 0; b < 256 && !bad; b++) {
        int64_t r = first_start[b], hi = first_start[b + 1];
        if (r >= hi || (T[(int64_t)state * 256 + b] == sink && T[(int64_t)state2 * 256 + b] == sink))
            continue;  /* both die at the first byte: no bits either way */
        st1[0] = state;
        st2[0] = state2;
        e1[0] = e2[0] = 0;
        pair[0] = 1;
        int64_t d0 = 0;
        while (r < hi) {
            const int64_t len = offsets[r + 1] - offsets[r];
            if (len < 1 || len > max_len || offsets[r] < 0 || offsets[r + 1] > blob_len || d0 > len
                || rank_to_id[r] < 0 || rank_to_id[r] >= n_inside_bits) {
                bad = 1;
                break;
            }
            const uint8_t *tok = blob + offsets[r];
            int64_t d = d0;
            int32_t q1 = st1[d], q2 = st2[d];
            uint8_t x1 = e1[d], x2 = e2[d], both = pair[d];
            int agreed = 0;
            while (d < len) {
                const uint8_t byte = tok[d];
                if (d && !x1 && A[q1] && follow[byte])
                    x1 = 1;
                q1 = T[(int64_t)q1 * 256 + byte];
                if ((uint32_t)q1 > (uint32_t)sink) {
                    bad = 1;
                    break;
                }
                if (both) {
                    if (d && !x2 && A[q2] && follow[byte])
                        x2 = 1;
                    q2 = T[(int64_t)q2 * 256 + byte];
                    if ((uint32_t)q2 > (uint32_t)sink) {
                        bad = 1;
                        break;
                    }
                    const int dead1 = q1 == sink, dead2 = q2 == sink;
                    if (x1 != x2 || dead1 != dead2 || (!dead1 && A[q1] != A[q2]))
                        both = 0;
                    else if (q1 == q2)  /* the same state, or both dead */
                        agreed = 1;
                }
                d++;
                st1[d] = q1;
                st2[d] = q2;
                e1[d] = x1;
                e2[d] = x2;
                pair[d] = both;
                if (agreed || q1 == sink)
                    break;
            }
            if (bad)
                break;
            if (agreed) {  /* this token and the next ones sharing its first d bytes keep their bits */
                r = run_end(blob, blob_len, offsets, lcp, r, hi, d);
                if (r < 0) {
                    bad = 1;
                    break;
                }
                d0 = r < hi ? lcp[r] : 0;
                continue;
            }
            if (q1 != sink) {  /* alive at its last byte: inside */
                int64_t id = rank_to_id[r];
                inside[id >> 5] |= (uint32_t)1 << (id & 31);
                exits[r >> 5] &= ~((uint32_t)1 << (r & 31));
                r++;
                d0 = r < hi ? lcp[r] : 0;
                continue;
            }
            /* dead after d bytes: so is every next token sharing them, an exit or not alike */
            do {
                if (rank_to_id[r] < 0 || rank_to_id[r] >= n_inside_bits) {
                    bad = 1;
                    break;
                }
                int64_t id = rank_to_id[r];
                inside[id >> 5] &= ~((uint32_t)1 << (id & 31));
                if (x1)
                    exits[r >> 5] |= (uint32_t)1 << (r & 31);
                else
                    exits[r >> 5] &= ~((uint32_t)1 << (r & 31));
                r++;
            } while (r < hi && lcp[r] >= d);
            d0 = r < hi ? lcp[r] : 0;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad)
        PyErr_SetString(PyExc_ValueError, "inconsistent token table or DFA table");
    else {
        result = Py_None;
        Py_INCREF(result);
    }
freed:
    free(st1);
    free(st2);
    free(e1);
    free(e2);
    free(pair);
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

/* Buffers of one token subset: ranks and the token table's blob and offsets, checked. */
typedef struct {
    Py_buffer ranks, blob, offsets;
    Py_ssize_t n, n_ranks;
} Tokens;

static void
tokens_release(Tokens *t)
{
    PyBuffer_Release(&t->ranks);
    PyBuffer_Release(&t->blob);
    PyBuffer_Release(&t->offsets);
}

static int
tokens_ok(Tokens *t)
{
    if (check_buffer(&t->ranks, 8, 0, "ranks") || check_buffer(&t->offsets, 8, 1, "offsets"))
        return -1;
    t->n = t->ranks.len / 8;
    t->n_ranks = t->offsets.len / 8 - 1;
    const int64_t *ranks = (const int64_t *)t->ranks.buf, *offsets = (const int64_t *)t->offsets.buf;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        int64_t r = ranks[i];
        if (r < 0 || r >= t->n_ranks || offsets[r] < 0 || offsets[r] > offsets[r + 1]
            || offsets[r + 1] > t->blob.len) {
            PyErr_SetString(PyExc_ValueError, "ranks or offsets inconsistent with the token table");
            return -1;
        }
    }
    return 0;
}

static PyObject *
run_suffixes(PyObject *self, PyObject *args)
{
    /* run_suffixes(table, acc, follow, state, ranks, depth, blob, offsets, alive_end, may_end):
     * one DFA from ``state`` over bytes depth: of each token (all longer than depth);
     * alive_end[i]: alive at the token's end; may_end[i]: accepting after some byte p with
     * depth < p + 1 < len, before a byte that may follow the lexeme. Sets bytes of the
     * two uint8 outputs (zeroed by the caller). */
    Py_buffer table_b, acc_b, follow_b, alive_b, may_b;
    Tokens t;
    int state;
    Py_ssize_t depth;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*iy*ny*y*w*w*", &table_b, &acc_b, &follow_b, &state, &t.ranks,
                          &depth, &t.blob, &t.offsets, &alive_b, &may_b))
        return NULL;
    const Py_ssize_t n_rows = table_b.len / (256 * 4);
    if (check_buffer(&table_b, 4, 256, "table") || table_b.len % (256 * 4) != 0 || tokens_ok(&t)
        || check_buffer(&acc_b, 1, n_rows, "acc") || check_buffer(&follow_b, 1, 256, "follow")
        || check_buffer(&alive_b, 1, t.n, "alive_end") || check_buffer(&may_b, 1, t.n, "may_end"))
        goto done;
    if (state < 0 || state >= n_rows - 1 || depth < 0) {
        PyErr_SetString(PyExc_ValueError, "state or depth out of range");
        goto done;
    }
    const int32_t *table = (const int32_t *)table_b.buf;
    const uint8_t *acc = (const uint8_t *)acc_b.buf, *follow = (const uint8_t *)follow_b.buf;
    const uint8_t *blob = (const uint8_t *)t.blob.buf;
    const int64_t *ranks = (const int64_t *)t.ranks.buf, *offsets = (const int64_t *)t.offsets.buf;
    uint8_t *alive_end = (uint8_t *)alive_b.buf, *may_end = (uint8_t *)may_b.buf;
    const int32_t sink = (int32_t)(n_rows - 1);
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < t.n && !bad; i++) {
        const uint8_t *tok = blob + offsets[ranks[i]];
        const int64_t len = offsets[ranks[i] + 1] - offsets[ranks[i]];
        int32_t q = state;
        int64_t p;
        for (p = depth; p < len; p++) {
            q = table[(int64_t)q * 256 + tok[p]];
            if ((uint32_t)q > (uint32_t)sink) {
                bad = 1;
                break;
            }
            if (q == sink)
                break;
            if (p + 1 < len && acc[q] && follow[tok[p + 1]])
                may_end[i] = 1;
        }
        if (p == len && len > depth)
            alive_end[i] = 1;
    }
    Py_END_ALLOW_THREADS
    if (bad)
        PyErr_SetString(PyExc_ValueError, "table holds a state out of range");
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&table_b);
    PyBuffer_Release(&acc_b);
    PyBuffer_Release(&follow_b);
    tokens_release(&t);
    PyBuffer_Release(&alive_b);
    PyBuffer_Release(&may_b);
    return result;
}

/* Several DFAs side by side: tables[i] (sink last) and acc[i], with optional follow[i]
 * (256 bytes each), from tuples of buffers. */
typedef struct {
    Py_ssize_t m, n_views;
    Py_buffer *views;
    const int32_t **tabs;
    const uint8_t **accs, **follows;
    int32_t *sinks, *cur, *nxt;
} Dfas;

static void
dfas_release(Dfas *d)
{
    for (Py_ssize_t i = 0; i < d->n_views; i++)
        PyBuffer_Release(&d->views[i]);
    PyMem_Free(d->views);
    PyMem_Free(d->tabs);
    PyMem_Free(d->accs);
    PyMem_Free(d->follows);
    PyMem_Free(d->sinks);
    PyMem_Free(d->cur);
    PyMem_Free(d->nxt);
}

/* Fills d from the tuples (follows_o may be NULL) and checks each start state (an
 * int32 buffer of m states) is a state of its table; -1 with an exception set. */
static int
dfas_get(Dfas *d, PyObject *tables_o, PyObject *accs_o, PyObject *follows_o, const Py_buffer *starts_b)
{
    const Py_ssize_t m = PyTuple_GET_SIZE(tables_o);
    memset(d, 0, sizeof(*d));
    d->m = m;
    d->views = PyMem_Calloc((size_t)(3 * m + 1), sizeof(Py_buffer));
    d->tabs = PyMem_Calloc((size_t)m + 1, sizeof(int32_t *));
    d->accs = PyMem_Calloc((size_t)m + 1, sizeof(uint8_t *));
    d->follows = PyMem_Calloc((size_t)m + 1, sizeof(uint8_t *));
    d->sinks = PyMem_Calloc((size_t)m + 1, sizeof(int32_t));
    d->cur = PyMem_Calloc((size_t)m + 1, sizeof(int32_t));
    d->nxt = PyMem_Calloc((size_t)m + 1, sizeof(int32_t));
    if (!d->views || !d->tabs || !d->accs || !d->follows || !d->sinks || !d->cur || !d->nxt) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyTuple_GET_SIZE(accs_o) != m || (follows_o && PyTuple_GET_SIZE(follows_o) != m)) {
        PyErr_SetString(PyExc_ValueError, "tables, accs (and follows) differ in length");
        return -1;
    }
    if (check_buffer(starts_b, 4, m, "starts"))
        return -1;
    const int32_t *starts = (const int32_t *)starts_b->buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_buffer *tv = &d->views[d->n_views];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(tables_o, i), tv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return -1;
        d->n_views++;
        Py_buffer *av = &d->views[d->n_views];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(accs_o, i), av, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return -1;
        d->n_views++;
        const Py_ssize_t rows = tv->len / (256 * 4);
        if (check_buffer(tv, 4, 256, "table") || tv->len % (256 * 4) != 0 || check_buffer(av, 1, rows, "acc"))
            return -1;
        if (follows_o) {
            Py_buffer *fv = &d->views[d->n_views];
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(follows_o, i), fv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
                return -1;
            d->n_views++;
            if (check_buffer(fv, 1, 256, "follow"))
                return -1;
            d->follows[i] = (const uint8_t *)fv->buf;
        }
        if (starts[i] < 0 || starts[i] >= rows - 1) {
            PyErr_SetString(PyExc_ValueError, "a start state is out of range");
            return -1;
        }
        d->tabs[i] = (const int32_t *)tv->buf;
        d->accs[i] = (const uint8_t *)av->buf;
        d->sinks[i] = (int32_t)(rows - 1);
    }
    return 0;
}

/* The DFAs of d side by side from starts over bytes depth: of tok: the first position
 * whose byte takes one of them to an accepting state, with d->cur holding each DFA's
 * state before that byte and d->nxt after it (the sink: dead); -1 when none does before
 * the token ends or all die; -2 for a table entry out of range. */
static int64_t
first_end(Dfas *d, const int32_t *starts, const uint8_t *tok, int64_t len, int64_t depth)
{
    for (Py_ssize_t i = 0; i < d->m; i++)
        d->cur[i] = starts[i];
    for (int64_t p = depth; p < len; p++) {
        int live = 0, done = 0;
        for (Py_ssize_t i = 0; i < d->m; i++) {
            const int32_t q = d->tabs[i][(int64_t)d->cur[i] * 256 + tok[p]];
            if ((uint32_t)q > (uint32_t)d->sinks[i])
                return -2;
            d->nxt[i] = q;
            if (q != d->sinks[i]) {
                live = 1;
                done |= d->accs[i][q];
            }
        }
        if (!live)
            return -1;
        if (done)
            return p;
        for (Py_ssize_t i = 0; i < d->m; i++)
            d->cur[i] = d->nxt[i];
    }
    return -1;
}

static PyObject *
first_ends(PyObject *self, PyObject *args)
{
    /* first_ends(tables, accs, starts, ranks, depth, blob, offsets, pos_out, before_out):
     * m DFAs (tables[i] with its sink last, accs[i]) run side by side from starts[i] over
     * bytes depth: of each token; pos_out[j] is the first position p whose byte takes
     * some DFA to an accepting state (-1: none before the token ends or all DFAs die),
     * and before_out[j * m + i] the state of DFA i before that byte (-1: dead). */
    PyObject *tables_o, *accs_o;
    Py_buffer starts_b, pos_b, before_b;
    Tokens t;
    Py_ssize_t depth;
    PyObject *result = NULL;
    Dfas d;
    if (!PyArg_ParseTuple(args, "O!O!y*y*ny*y*w*w*", &PyTuple_Type, &tables_o, &PyTuple_Type, &accs_o,
                          &starts_b, &t.ranks, &depth, &t.blob, &t.offsets, &pos_b, &before_b))
        return NULL;
    if (dfas_get(&d, tables_o, accs_o, NULL, &starts_b) || tokens_ok(&t)
        || check_buffer(&pos_b, 8, t.n, "pos_out") || check_buffer(&before_b, 4, t.n * d.m, "before_out"))
        goto done;
    const Py_ssize_t m = d.m;
    const int32_t *starts = (const int32_t *)starts_b.buf;
    const uint8_t *blob = (const uint8_t *)t.blob.buf;
    const int64_t *ranks = (const int64_t *)t.ranks.buf, *offsets = (const int64_t *)t.offsets.buf;
    int64_t *pos_out = (int64_t *)pos_b.buf;
    int32_t *before_out = (int32_t *)before_b.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < t.n && !bad; j++) {
        const int64_t p = first_end(&d, starts, blob + offsets[ranks[j]], offsets[ranks[j] + 1] - offsets[ranks[j]],
                                    depth);
        bad = p == -2;
        pos_out[j] = p < 0 ? -1 : p;
        if (p >= 0)
            for (Py_ssize_t i = 0; i < m; i++)
                before_out[j * m + i] = d.cur[i] == d.sinks[i] ? -1 : d.cur[i];
    }
    Py_END_ALLOW_THREADS
    if (bad)
        PyErr_SetString(PyExc_ValueError, "a table holds a state out of range");
    else
        result = Py_NewRef(Py_None);
done:
    dfas_release(&d);
    PyBuffer_Release(&starts_b);
    tokens_release(&t);
    PyBuffer_Release(&pos_b);
    PyBuffer_Release(&before_b);
    return result;
}

static PyObject *
pass_split(PyObject *self, PyObject *args)
{
    /* pass_split(tables, accs, follows, starts, ranks, depth, blob, offsets) -> (inside,
     * rest): m lexeme DFAs from starts[i] over bytes depth: of each token of `ranks` (a
     * list or tuple of ints). `inside`: the tokens no longer than depth, and those that keep some
     * DFA alive to their end; `rest`: the others that may end some lexeme before a byte
     * that may follow it (accepting after byte p, depth <= p < len - 1, and follows[i]
     * takes byte p + 1). Both lists keep the order of `ranks`. */
    PyObject *tables_o, *accs_o, *follows_o, *ranks_o;
    Py_buffer starts_b, blob_b, offsets_b;
    Py_ssize_t depth;
    PyObject *result = NULL, *inside = NULL, *rest = NULL;
    Dfas d;
    if (!PyArg_ParseTuple(args, "O!O!O!y*Ony*y*", &PyTuple_Type, &tables_o, &PyTuple_Type, &accs_o,
                          &PyTuple_Type, &follows_o, &starts_b, &ranks_o, &depth, &blob_b, &offsets_b))
        return NULL;
    PyObject *seq = PySequence_Fast(ranks_o, "ranks must be a list or tuple of ints");
    if (!seq) {
        PyBuffer_Release(&starts_b);
        PyBuffer_Release(&blob_b);
        PyBuffer_Release(&offsets_b);
        return NULL;
    }
    if (dfas_get(&d, tables_o, accs_o, follows_o, &starts_b) || check_buffer(&offsets_b, 8, 1, "offsets"))
        goto done;
    if (depth < 0) {
        PyErr_SetString(PyExc_ValueError, "depth out of range");
        goto done;
    }
    inside = PyList_New(0);
    rest = PyList_New(0);
    if (!inside || !rest)
        goto done;
    const int32_t *starts = (const int32_t *)starts_b.buf;
    const uint8_t *blob = (const uint8_t *)blob_b.buf;
    const int64_t *offsets = (const int64_t *)offsets_b.buf;
    const int64_t n_ranks = offsets_b.len / 8 - 1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, j);
        const long long r = PyLong_AsLongLong(item);
        if (r == -1 && PyErr_Occurred())
            goto done;
        if (r < 0 || r >= n_ranks || offsets[r] < 0 || offsets[r] > offsets[r + 1] || offsets[r + 1] > blob_b.len) {
            PyErr_SetString(PyExc_ValueError, "ranks or offsets inconsistent with the token table");
            goto done;
        }
        const uint8_t *tok = blob + offsets[r];
        const int64_t len = offsets[r + 1] - offsets[r];
        int alive = len <= depth, may = 0;
        for (Py_ssize_t i = 0; i < d.m && !alive; i++) {
            const int32_t *tab = d.tabs[i], sink = d.sinks[i];
            const uint8_t *acc = d.accs[i], *follow = d.follows[i];
            int32_t q = starts[i];
            int64_t p;
            for (p = depth; p < len; p++) {
                q = tab[(int64_t)q * 256 + tok[p]];
                if ((uint32_t)q > (uint32_t)sink) {
                    PyErr_SetString(PyExc_ValueError, "a table holds a state out of range");
                    goto done;
                }
                if (q == sink)
                    break;
                if (p + 1 < len && acc[q] && follow[tok[p + 1]])
                    may = 1;
            }
            alive = p == len;
        }
        if ((alive || may) && PyList_Append(alive ? inside : rest, item) < 0)
            goto done;
    }
    result = PyTuple_Pack(2, inside, rest);
done:
    Py_DECREF(seq);
    Py_XDECREF(inside);
    Py_XDECREF(rest);
    dfas_release(&d);
    PyBuffer_Release(&starts_b);
    PyBuffer_Release(&blob_b);
    PyBuffer_Release(&offsets_b);
    return result;
}

/* A stable merge sort of n indices by cmp(ctx, a, b) (scratch: n more). */
typedef int (*IndexCmp)(const void *ctx, int64_t a, int64_t b);

static void
sort_indices(int64_t *idx, int64_t *scratch, int64_t n, IndexCmp cmp, const void *ctx)
{
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                scratch[k++] = cmp(ctx, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
            while (i < mid)
                scratch[k++] = idx[i++];
            while (j < hi)
                scratch[k++] = idx[j++];
        }
        memcpy(idx, scratch, (size_t)n * sizeof(int64_t));
    }
}

typedef struct {
    const int32_t *codes;  /* per token: position, then the state of each DFA after its byte */
    Py_ssize_t width;
    const uint8_t *blob;
    const int64_t *offsets, *ranks, *pos;
} PlanCtx;

static int
by_code(const void *ctx, int64_t a, int64_t b)
{
    const PlanCtx *c = ctx;
    const int32_t *x = c->codes + a * c->width, *y = c->codes + b * c->width;
    for (Py_ssize_t i = 0; i < c->width; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* by the bytes after the completing one (tokens of one group share its position) */
static int
by_rest(const void *ctx, int64_t a, int64_t b)
{
    const PlanCtx *c = ctx;
    const int64_t skip = c->pos[a] + 1;
    const int64_t la = c->offsets[c->ranks[a] + 1] - c->offsets[c->ranks[a]] - skip;
    const int64_t lb = c->offsets[c->ranks[b] + 1] - c->offsets[c->ranks[b]] - skip;
    const int d = memcmp(c->blob + c->offsets[c->ranks[a]] + skip, c->blob + c->offsets[c->ranks[b]] + skip,
                         (size_t)(la < lb ? la : lb));
    if (d)
        return d;
    return la < lb ? -1 : la > lb;
}

static PyObject *
jump_plan(PyObject *self, PyObject *args)
{
    /* jump_plan(tables, accs, starts, ranks, depth, blob, offsets) -> tuple of (position,
     * states before (tuple; -1 dead), byte, ranks (tuple)): the m DFAs run side by side from
     * starts over bytes depth: of each token (first_ends); the tokens where one accepts
     * are grouped by that position and the state of each DFA after its byte (-1 dead), in
     * ascending order of those; each group's tokens sorted by their bytes after that byte
     * (ties in the order given), with the states before it and the byte of its first
     * token in the order given. */
    PyObject *tables_o, *accs_o, *ranks_o;
    Py_buffer starts_b, blob_b, offsets_b;
    Py_ssize_t depth;
    PyObject *result = NULL, *seq = NULL;
    int64_t *ranks = NULL, *pos = NULL, *idx = NULL, *scratch = NULL;
    int32_t *codes = NULL, *before = NULL;
    Dfas d;
    if (!PyArg_ParseTuple(args, "O!O!y*Ony*y*", &PyTuple_Type, &tables_o, &PyTuple_Type, &accs_o, &starts_b,
                          &ranks_o, &depth, &blob_b, &offsets_b))
        return NULL;
    if (dfas_get(&d, tables_o, accs_o, NULL, &starts_b) || check_buffer(&offsets_b, 8, 1, "offsets"))
        goto done;
    seq = PySequence_Fast(ranks_o, "ranks must be a list or tuple of ints");
    if (!seq)
        goto done;
    if (depth < 0) {
        PyErr_SetString(PyExc_ValueError, "depth out of range");
        goto done;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), m = d.m, width = m + 1;
    const uint8_t *blob = (const uint8_t *)blob_b.buf;
    const int64_t *offsets = (const int64_t *)offsets_b.buf;
    const int64_t n_ranks = offsets_b.len / 8 - 1;
    const int32_t *starts = (const int32_t *)starts_b.buf;
    ranks = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
    pos = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
    idx = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
    scratch = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
    codes = PyMem_Malloc(((size_t)n * width + 1) * sizeof(int32_t));
    before = PyMem_Malloc(((size_t)n * m + 1) * sizeof(int32_t));
    if (!ranks || !pos || !idx || !scratch || !codes || !before) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t n_sel = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        const long long r = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, j));
        if (r == -1 && PyErr_Occurred())
            goto done;
        if (r < 0 || r >= n_ranks || offsets[r] < 0 || offsets[r] > offsets[r + 1] || offsets[r + 1] > blob_b.len) {
            PyErr_SetString(PyExc_ValueError, "ranks or offsets inconsistent with the token table");
            goto done;
        }
        ranks[j] = r;
        pos[j] = first_end(&d, starts, blob + offsets[r], offsets[r + 1] - offsets[r], depth);
        if (pos[j] == -2) {
            PyErr_SetString(PyExc_ValueError, "a table holds a state out of range");
            goto done;
        }
        if (pos[j] >= 0) {
            codes[j * width] = (int32_t)pos[j];
            for (Py_ssize_t i = 0; i < m; i++) {
                before[j * m + i] = d.cur[i] == d.sinks[i] ? -1 : d.cur[i];
                codes[j * width + 1 + i] = d.nxt[i] == d.sinks[i] ? -1 : d.nxt[i];
            }
            idx[n_sel++] = j;
        }
    }
    const PlanCtx ctx = {codes, width, blob, offsets, ranks, pos};
    sort_indices(idx, scratch, n_sel, by_code, &ctx);
    PyObject *plan = PyList_New(0);
    if (!plan)
        goto done;
    for (int64_t lo = 0, hi; lo < n_sel; lo = hi) {
        hi = lo + 1;
        while (hi < n_sel && by_code(&ctx, idx[lo], idx[hi]) == 0)
            hi++;
        const int64_t first = idx[lo];  /* (the first in the order given) */
        sort_indices(idx + lo, scratch, hi - lo, by_rest, &ctx);
        PyObject *bef = PyTuple_New(m), *members = PyTuple_New(hi - lo), *entry = NULL;
        if (bef && members) {
            for (Py_ssize_t i = 0; i < m; i++)
                PyTuple_SET_ITEM(bef, i, PyLong_FromLong(before[first * m + i]));
            for (int64_t k = lo; k < hi; k++)
                PyTuple_SET_ITEM(members, k - lo, PyLong_FromLongLong(ranks[idx[k]]));
            entry = Py_BuildValue("(LOiO)", (long long)pos[first], bef,
                                  (int)blob[offsets[ranks[first]] + pos[first]], members);
        }
        Py_XDECREF(bef);
        Py_XDECREF(members);
        if (!entry || PyList_Append(plan, entry) < 0) {
            Py_XDECREF(entry);
            Py_DECREF(plan);
            goto done;
        }
        Py_DECREF(entry);
    }
    result = PyList_AsTuple(plan);
    Py_DECREF(plan);
done:
    Py_XDECREF(seq);
    PyMem_Free(ranks);
    PyMem_Free(pos);
    PyMem_Free(idx);
    PyMem_Free(scratch);
    PyMem_Free(codes);
    PyMem_Free(before);
    dfas_release(&d);
    PyBuffer_Release(&starts_b);
    PyBuffer_Release(&blob_b);
    PyBuffer_Release(&offsets_b);
    return result;
}

static PyObject *
lazy_walk(PyObject *self, PyObject *args)
{
    /* lazy_walk(table, state, ranks, depth, blob, offsets, ok_out, stuck_out): a DFA whose
     * table is filled on demand (-1: dead, -2: not computed yet) over bytes depth: of each
     * token. ok_out[i] = 1 where it is alive at the token's end; stuck_out[i] = state * 256
     * + byte of the first transition not computed yet on the way (-1: none), for the
     * caller to fill before running those tokens again. */
    Py_buffer table_b, ok_b, stuck_b;
    Tokens t;
    int state;
    Py_ssize_t depth;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*iy*ny*y*w*w*", &table_b, &state, &t.ranks, &depth, &t.blob, &t.offsets,
                          &ok_b, &stuck_b))
        return NULL;
    const Py_ssize_t n_rows = table_b.len / (256 * 4);
    if (check_buffer(&table_b, 4, 256, "table") || table_b.len % (256 * 4) != 0 || tokens_ok(&t)
        || check_buffer(&ok_b, 1, t.n, "ok_out") || check_buffer(&stuck_b, 8, t.n, "stuck_out"))
        goto done;
    if (state < 0 || state >= n_rows || depth < 0) {
        PyErr_SetString(PyExc_ValueError, "state or depth out of range");
        goto done;
    }
    const int32_t *table = (const int32_t *)table_b.buf;
    const uint8_t *blob = (const uint8_t *)t.blob.buf;
    const int64_t *ranks = (const int64_t *)t.ranks.buf, *offsets = (const int64_t *)t.offsets.buf;
    uint8_t *ok = (uint8_t *)ok_b.buf;
    int64_t *stuck = (int64_t *)stuck_b.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < t.n; i++) {
        const uint8_t *tok = blob + offsets[ranks[i]];
        const int64_t len = offsets[ranks[i] + 1] - offsets[ranks[i]];
        int32_t q = state;
        int64_t p;
        stuck[i] = -1;
        ok[i] = 0;
        for (p = depth; p < len; p++) {
            int32_t nx = table[(int64_t)q * 256 + tok[p]];
            if (nx == -2) {
                stuck[i] = (int64_t)q * 256 + tok[p];
                break;
            }
            if (nx == -1)
                break;
            if (nx < 0 || nx >= n_rows) {
                bad = 1;
                break;
            }
            q = nx;
        }
        if (p >= len)
            ok[i] = 1;
    }
    Py_END_ALLOW_THREADS
    if (bad)
        PyErr_SetString(PyExc_ValueError, "table holds a state out of range");
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&table_b);
    tokens_release(&t);
    PyBuffer_Release(&ok_b);
    PyBuffer_Release(&stuck_b);
    return result;
}

/* The length of the UTF-8 character a lead byte starts (1 for ASCII), 0 for a byte that
 * cannot start one. */
static inline int
utf8_len(uint8_t b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 0;
}

static PyObject *
label_walk(PyObject *self, PyObject *args)
{
    /* label_walk(edge_start, edge_label, edge_target, labels, label_start, final, state,
     * ranks, blob, offsets, out): an automaton whose edges are labelled by small DFAs that
     * each read one character (edge_start: int64 per state + 1, CSR over edge_label and
     * edge_target, int32; labels: the labels' DFAs stacked, int32 rows of 256, absolute
     * row numbers, -1 dead; label_start: int32, each label's start row; final: uint8 per
     * row, 1 where a label has read a whole character: accepting, with no way on) run over
     * each token from state, character by character. out[i]: 1 alive at the token's end,
     * 0 dead on the way, 2 undecided: a byte that starts no character, a character cut
     * off by the token's end, or one that a label of the state reads as the start of more
     * (an escape). Raises ValueError where two labels of a state read one character. */
    Py_buffer es_b, el_b, et_b, lab_b, ls_b, fin_b, out_b;
    Tokens t;
    int state;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*iy*y*y*w*", &es_b, &el_b, &et_b, &lab_b, &ls_b, &fin_b, &state,
                          &t.ranks, &t.blob, &t.offsets, &out_b))
        return NULL;
    if (check_buffer(&es_b, 8, 2, "edge_start") || check_buffer(&el_b, 4, 0, "edge_label")
        || check_buffer(&et_b, 4, 0, "edge_target") || el_b.len != et_b.len || check_buffer(&lab_b, 4, 256, "labels")
        || lab_b.len % (256 * 4) != 0 || check_buffer(&ls_b, 4, 0, "label_start") || tokens_ok(&t)
        || check_buffer(&out_b, 1, t.n, "out"))
        goto done;
    const int64_t n_states = es_b.len / 8 - 1, n_edges = el_b.len / 4, n_rows = lab_b.len / (256 * 4);
    const int64_t n_labels = ls_b.len / 4;
    const int64_t *es = (const int64_t *)es_b.buf;
    const int32_t *el = (const int32_t *)el_b.buf, *et = (const int32_t *)et_b.buf;
    const int32_t *lab = (const int32_t *)lab_b.buf, *ls = (const int32_t *)ls_b.buf;
    const uint8_t *fin = (const uint8_t *)fin_b.buf;
    int bad = state < 0 || state >= n_states || fin_b.len != n_rows || es[0] != 0 || es[n_states] != n_edges;
    for (int64_t q = 0; q < n_states && !bad; q++)
        bad = es[q] > es[q + 1];
    for (int64_t e = 0; e < n_edges && !bad; e++)
        bad = el[e] < 0 || el[e] >= n_labels || et[e] < 0 || et[e] >= n_states;
    for (int64_t k = 0; k < n_labels && !bad; k++)
        bad = ls[k] < 0 || ls[k] >= n_rows;
    for (int64_t i = 0; i < n_rows * 256 && !bad; i++)
        bad = lab[i] < -1 || lab[i] >= n_rows;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "label_walk: inconsistent automaton");
        goto done;
    }
    const uint8_t *blob = (const uint8_t *)t.blob.buf;
    const int64_t *ranks = (const int64_t *)t.ranks.buf, *offsets = (const int64_t *)t.offsets.buf;
    uint8_t *out = (uint8_t *)out_b.buf;
    int64_t longest = 0;
    for (Py_ssize_t i = 0; i < t.n; i++)
        if (offsets[ranks[i] + 1] - offsets[ranks[i]] > longest)
            longest = offsets[ranks[i] + 1] - offsets[ranks[i]];
    /* what the token before left, for the next one that shares its first bytes (tokens
     * in byte order share long prefixes): the state at each character boundary it
     * reached (at[p], boundary[p]), up to `reached`; and where its walk stopped for good,
     * a character ending at fail_end (-1: none) with result fail_r */
    int32_t *at = PyMem_Malloc((size_t)(longest + 1) * sizeof(int32_t));
    uint8_t *boundary = PyMem_Calloc((size_t)(longest + 1), 1);
    /* per label and ASCII byte: 0 it does not read it, 1 it reads it as a whole
     * character, 2 as the start of more */
    uint8_t *ascii = PyMem_Malloc((size_t)(n_labels * 128 + 1));
    if (!at || !boundary || !ascii) {
        PyMem_Free(at);
        PyMem_Free(boundary);
        PyMem_Free(ascii);
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t k = 0; k < n_labels; k++)
        for (int b = 0; b < 128; b++) {
            const int32_t row = lab[(int64_t)ls[k] * 256 + b];
            ascii[k * 128 + b] = row < 0 ? 0 : fin[row] ? 1 : 2;
        }
    int overlap = 0;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *prev = NULL;
    int64_t prev_len = 0, reached = 0, fail_end = -1;
    uint8_t fail_r = 0;
    at[0] = state;
    boundary[0] = 1;
    for (Py_ssize_t i = 0; i < t.n && !overlap; i++) {
        const uint8_t *tok = blob + offsets[ranks[i]];
        const int64_t len = offsets[ranks[i] + 1] - offsets[ranks[i]];
        int64_t common = 0;
        if (prev) {
            const int64_t m = len < prev_len ? len : prev_len;
            while (common < m && tok[common] == prev[common])
                common++;
        }
        prev = tok;
        prev_len = len;
        if (fail_end >= 0 && fail_end <= common) {
            out[i] = fail_r;   /* it stops at the same character */
            continue;
        }
        int64_t p = common < reached ? common : reached;
        while (!boundary[p])
            p--;
        int32_t q = at[p];
        uint8_t r = 1;
        fail_end = -1;
        while (p < len) {
            const int n = utf8_len(tok[p]);
            if (n == 0 || p + n > len) {
                r = 2;
                fail_end = n == 0 ? p + 1 : -1;   /* a cut-off character is this token's own */
                break;
            }
            int32_t next = -1;
            if (n == 1) {
                const uint8_t b = tok[p];
                for (int64_t e = es[q]; e < es[q + 1]; e++) {
                    const uint8_t how = ascii[el[e] * 128 + b];
                    if (how == 1) {
                        if (next >= 0) {
                            overlap = 1;
                            break;
                        }
                        next = et[e];
                    } else if (how == 2) {
                        r = 2;
                        break;
                    }
                }
            } else
            for (int64_t e = es[q]; e < es[q + 1]; e++) {
                int32_t row = ls[el[e]];
                for (int k = 0; k < n && row >= 0; k++)
                    row = lab[(int64_t)row * 256 + tok[p + k]];
                if (row < 0)
                    continue;
                if (!fin[row]) {
                    r = 2;
                    break;
                }
                if (next >= 0) {
                    overlap = 1;
                    break;
                }
                next = et[e];
            }
            if (overlap)
                break;
            if (r == 1 && next < 0)
                r = 0;
            if (r != 1) {
                fail_end = p + n;
                break;
            }
            for (int k = 1; k < n; k++)
                boundary[p + k] = 0;
            p += n;
            q = next;
            at[p] = q;
            boundary[p] = 1;
        }
        reached = p;
        fail_r = r;
        out[i] = r;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(at);
    PyMem_Free(boundary);
    PyMem_Free(ascii);
    if (overlap)
        PyErr_SetString(PyExc_ValueError, "label_walk: two labels of a state read one character");
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&es_b);
    PyBuffer_Release(&el_b);
    PyBuffer_Release(&et_b);
    PyBuffer_Release(&lab_b);
    PyBuffer_Release(&ls_b);
    PyBuffer_Release(&fin_b);
    tokens_release(&t);
    PyBuffer_Release(&out_b);
    return result;
}

static PyObject *
single_chain(PyObject *self, PyObject *args)
{
    /* single_chain(table, acc, state, max_len) -> (bytes, end): the string a DFA (int32
     * rows of 256, its sink last) reads from state while each state on the way takes a
     * single byte and does not accept, at most max_len bytes, and the state after it. */
    Py_buffer table_b, acc_b;
    int state;
    Py_ssize_t max_len;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*in", &table_b, &acc_b, &state, &max_len))
        return NULL;
    const Py_ssize_t n_rows = table_b.len / (256 * 4);
    if (check_buffer(&table_b, 4, 256, "table") || table_b.len % (256 * 4) != 0
        || check_buffer(&acc_b, 1, n_rows, "acc"))
        goto done;
    if (state < 0 || state >= n_rows || max_len < 0 || max_len > 4096) {
        PyErr_SetString(PyExc_ValueError, "state or max_len out of range");
        goto done;
    }
    const int32_t *table = (const int32_t *)table_b.buf;
    const uint8_t *acc = (const uint8_t *)acc_b.buf;
    const int32_t sink = (int32_t)(n_rows - 1);
    unsigned char buf[4096];
    Py_ssize_t n = 0;
    int32_t q = state;
    while (n < max_len && q != sink && !acc[q]) {
        const int32_t *row = table + (int64_t)q * 256;
        /* how many bytes leave the sink, counted without branches: the compiler
         * vectorizes it, and the row is read in order (a scan that stopped at the second
         * live byte went byte by byte) */
        int live = 0;
        for (int b = 0; b < 256; b++)
            live += row[b] != sink;
        if (live != 1)
            break;
        int only = 0;
        while (row[only] == sink)
            only++;
        const int32_t nx = row[only];
        if (nx < 0 || nx > sink) {
            PyErr_SetString(PyExc_ValueError, "table holds a state out of range");
            goto done;
        }
        buf[n++] = (unsigned char)only;
        q = nx;
    }
    result = Py_BuildValue("(y#i)", (const char *)buf, n, (int)q);
done:
    PyBuffer_Release(&table_b);
    PyBuffer_Release(&acc_b);
    return result;
}

static PyObject *
memo_size(PyObject *self, PyObject *args)
{
    Py_ssize_t n_rows;
    if (!PyArg_ParseTuple(args, "n", &n_rows))
        return NULL;
    return PyLong_FromSsize_t(n_rows * (Py_ssize_t)sizeof(StateInfo));
}

/* first_tokens(table, state, first_start) -> how many tokens start with a byte that state
 * `state` of `table` (a DFA with its sink state last) does not send to the sink: the
 * tokens a walk from it visits at all (TokenClasses._classify, once per new state). */
static PyObject *
first_tokens(PyObject *self, PyObject *args)
{
    Py_buffer table_b, first_b;
    int state;
    if (!PyArg_ParseTuple(args, "y*iy*", &table_b, &state, &first_b))
        return NULL;
    PyObject *out = NULL;
    const Py_ssize_t n_rows = table_b.len / (256 * 4);
    if (check_buffer(&table_b, 4, 256, "table") || table_b.len % (256 * 4) != 0
        || check_buffer(&first_b, 8, 257, "first_start"))
        goto done;
    if (state < 0 || state >= n_rows - 1) {
        PyErr_Format(PyExc_ValueError, "state %d is not a state of the table", state);
        goto done;
    }
    const int32_t *row = (const int32_t *)table_b.buf + (int64_t)state * 256;
    const int64_t *fs = (const int64_t *)first_b.buf;
    const int32_t sink = (int32_t)(n_rows - 1);
    int64_t n = 0;
    for (int b = 0; b < 256; b++)
        if (row[b] != sink)
            n += fs[b + 1] - fs[b];
    out = PyLong_FromLongLong(n);
done:
    PyBuffer_Release(&table_b);
    PyBuffer_Release(&first_b);
    return out;
}

/* The byte of token r at position p in the byte-sorted order, -1 past its end (a shorter
 * token sorts before every longer one that it starts). */
static inline int
byte_at(const uint8_t *blob, const int64_t *off, int64_t r, Py_ssize_t p)
{
    return off[r + 1] - off[r] > p ? blob[off[r] + p] : -1;
}

/* Whether token r's span lies in the blob (checked for each token a descent reads, not
 * for the whole table on every call). */
static inline int
span_ok(const int64_t *off, int64_t r, Py_ssize_t blob_len)
{
    return off[r] >= 0 && off[r] <= off[r + 1] && off[r + 1] <= blob_len;
}

/* The first rank in [lo, hi) whose byte p is at least c (ranks in [lo, hi) share their
 * first p bytes, so byte p does not decrease over them); -1 when a token read lies
 * outside the blob. */
static int64_t
first_byte_at_least(const uint8_t *blob, const int64_t *off, Py_ssize_t blob_len,
                    int64_t lo, int64_t hi, Py_ssize_t p, int c)
{
    while (lo < hi) {
        const int64_t m = lo + (hi - lo) / 2;
        if (!span_ok(off, m, blob_len))
            return -1;
        if (byte_at(blob, off, m, p) < c)
            lo = m + 1;
        else
            hi = m;
    }
    return lo;
}

/* prefix_span(blob, offsets, data, rank_to_id) -> (ids, lo, hi): the ids of the tokens
 * whose bytes are a prefix of data (data itself included), ascending, as int64 bytes; and
 * the ranks [lo, hi) of the tokens that start with data and are longer. One descent
 * through the byte-sorted tokens: the tokens that start with data[:n] are contiguous, so
 * each byte narrows the range by two bisections over that byte's column, and the tokens
 * equal to data[:n] open the narrowed range (a key chain's classes, chain_tokens). */
static PyObject *
prefix_span(PyObject *self, PyObject *args)
{
    Py_buffer blob_b, off_b, data_b, ids_b;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &blob_b, &off_b, &data_b, &ids_b))
        return NULL;
    PyObject *result = NULL;
    int64_t *found = NULL;
    if (check_buffer(&blob_b, 1, 0, "blob") || check_buffer(&off_b, 8, 1, "offsets")
        || check_buffer(&data_b, 1, 0, "data") || check_buffer(&ids_b, 8, off_b.len / 8 - 1, "rank_to_id"))
        goto done;
    const uint8_t *blob = (const uint8_t *)blob_b.buf, *data = (const uint8_t *)data_b.buf;
    const int64_t *off = (const int64_t *)off_b.buf, *rank_to_id = (const int64_t *)ids_b.buf;
    const int64_t n_ranks = off_b.len / 8 - 1;
    const Py_ssize_t n_data = data_b.len;
    const Py_ssize_t blob_len = blob_b.len;
    size_t n_found = 0, cap = 16;
    found = malloc(cap * sizeof(int64_t));
    if (!found) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t lo = 0, hi = n_ranks;
    for (Py_ssize_t p = 0; p < n_data && lo < hi; p++) {
        const int c = data[p];
        const int64_t a = first_byte_at_least(blob, off, blob_len, lo, hi, p, c);
        const int64_t e = a < 0 ? -1 : first_byte_at_least(blob, off, blob_len, a, hi, p, c + 1);
        if (e < 0 || (a < e && !span_ok(off, a, blob_len))) {
            PyErr_SetString(PyExc_ValueError, "offsets inconsistent with the blob");
            goto done;
        }
        lo = a;
        hi = e;
        /* the tokens equal to data[:p + 1] come first */
        while (lo < hi && off[lo + 1] - off[lo] == p + 1) {
            if (n_found == cap) {
                int64_t *more = realloc(found, 2 * cap * sizeof(int64_t));
                if (!more) {
                    PyErr_NoMemory();
                    goto done;
                }
                found = more;
                cap *= 2;
            }
            found[n_found++] = rank_to_id[lo];
            lo++;
        }
    }
    /* ascending ids (a handful: insertion sort) */
    for (size_t i = 1; i < n_found; i++) {
        int64_t x = found[i];
        size_t j = i;
        while (j && found[j - 1] > x) {
            found[j] = found[j - 1];
            j--;
        }
        found[j] = x;
    }
    result = Py_BuildValue("(y#LL)", (const char *)found, (Py_ssize_t)(n_found * sizeof(int64_t)),
                           (long long)lo, (long long)hi);
done:
    free(found);
    PyBuffer_Release(&blob_b);
    PyBuffer_Release(&off_b);
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&ids_b);
    return result;
}

static PyMethodDef methods[] = {
    {"classify", classify, METH_VARARGS,
     "classify(table, acc, follow, state, blob, offsets, lcp, max_len, first_start, rank_to_id, inside, exits"
     "[, char_len, rest, rest_utf8, rest_chars[, rare_start, rare_ranks, by_chars, more_chars, real_ids,"
     " long_ids, long_ranks[, only_excepted[, memo]]]]) -> number of exit tokens; sets the bits of inside (by token id) and exits (by rank)."
     " char_len .. rest_chars (TokenTable fields of those names; rest_bits for rest) turn the chain shortcut on,"
     " rare_start .. long_ranks the exception path; only_excepted: -1, nothing written, when the state does not"
     " qualify for it; memo: a zeroed writable buffer of memo_size(table) bytes kept per DFA table (and vocabulary)"
     " across calls, where the chain facts of its states are kept."},
    {"first_tokens", first_tokens, METH_VARARGS,
     "first_tokens(table, state, first_start) -> the tokens whose first byte state does not send to the sink"
     " (table: int32 rows of 256, the sink last)"},
    {"memo_size", memo_size, METH_VARARGS, "memo_size(n_rows) -> bytes of classify()'s memo for a table of n_rows"},
    {"classify_pair", classify_pair, METH_VARARGS,
     "classify_pair(table, acc, follow, state, state2, blob, offsets, lcp, max_len, first_start, rank_to_id,"
     " inside, exits): classify() from the classes of state2 (of the same DFA), held by inside and exits on"
     " entry."},
    {"run_suffixes", run_suffixes, METH_VARARGS,
     "run_suffixes(table, acc, follow, state, ranks, depth, blob, offsets, alive_end, may_end)"},
    {"first_ends", first_ends, METH_VARARGS,
     "first_ends(tables, accs, starts, ranks, depth, blob, offsets, pos_out, before_out)"},
    {"pass_split", pass_split, METH_VARARGS,
     "pass_split(tables, accs, follows, starts, ranks, depth, blob, offsets) -> (inside, rest)"},
    {"jump_plan", jump_plan, METH_VARARGS,
     "jump_plan(tables, accs, starts, ranks, depth, blob, offsets) -> ((position, before, byte, ranks), ...)"},
    {"lazy_walk", lazy_walk, METH_VARARGS,
     "lazy_walk(table, state, ranks, depth, blob, offsets, ok_out, stuck_out)"},
    {"single_chain", single_chain, METH_VARARGS,
     "single_chain(table, acc, state, max_len) -> (bytes, end): the string read through states of one byte each"},
    {"prefix_span", prefix_span, METH_VARARGS,
     "prefix_span(blob, offsets, data, rank_to_id) -> (ids, lo, hi): the ids of the tokens that are a prefix of"
     " data (int64 bytes, ascending), and the ranks [lo, hi) of the longer tokens that start with data"},
    {"label_walk", label_walk, METH_VARARGS,
     "label_walk(edge_start, edge_label, edge_target, labels, label_start, final, state, ranks, blob, offsets,"
     " out): 1 alive, 0 dead, 2 undecided"},
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
