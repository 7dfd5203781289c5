/* Fixed points over a grammar's rules, in C, for the native modules of both layers:
 * gramgen/grammar/_kernels.c (pruning a grammar's rules) and gramgen/automata/_earley.c
 * (the parser tables' productive rules, nullable symbols, follow sets). Included by each
 * (static functions: the two are separate extensions). */
#ifndef GRAMGEN_RULES_H
#define GRAMGEN_RULES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* edges (from, to) as CSR over n nodes */
static int
csr_of(int32_t n, const int32_t *from, const int32_t *to, int32_t m, int32_t **off_out, int32_t **tgt_out)
{
    int32_t *off = calloc((size_t)n + 1, sizeof(int32_t)), *tgt = malloc((size_t)m * sizeof(int32_t) + 4);
    int32_t *fill = malloc(((size_t)n + 1) * sizeof(int32_t));
    if (!off || !tgt || !fill) {
        free(off);
        free(tgt);
        free(fill);
        return -1;
    }
    for (int32_t e = 0; e < m; e++)
        off[from[e] + 1]++;
    for (int32_t x = 0; x < n; x++)
        off[x + 1] += off[x];
    memcpy(fill, off, ((size_t)n + 1) * sizeof(int32_t));
    for (int32_t e = 0; e < m; e++)
        tgt[fill[from[e]]++] = to[e];
    free(fill);
    *off_out = off;
    *tgt_out = tgt;
    return 0;
}

/* The least fixed point of "a rule's left-hand side is known once every symbol of its
 * body is" (productive symbols, nullable ones): rule r's body is body[at[r] .. end[r]),
 * its left-hand side lhs[r]; known (n_sym flags) holds what is known at the start and on
 * return all that follows; missing (n_rules, written) ends 0 for the rules whose every
 * symbol is known. Each rule counts its symbols not known (once per occurrence), each
 * symbol the rules waiting on it: one pass over the rules, not one per level. -1 when out
 * of memory. */
static int
close_rules(int32_t n_sym, int32_t n_rules, const int32_t *lhs, const int32_t *at, const int32_t *end,
            const int32_t *body, uint8_t *known, int32_t *missing)
{
    int32_t m = 0;
    for (int32_t r = 0; r < n_rules; r++) {
        missing[r] = 0;
        for (int32_t j = at[r]; j < end[r]; j++)
            missing[r] += !known[body[j]];
        m += missing[r];
    }
    int32_t *from = calloc((size_t)m + 1, sizeof(int32_t)), *to = calloc((size_t)m + 1, sizeof(int32_t));
    int32_t *work = malloc(((size_t)n_rules + 1) * sizeof(int32_t)), *off = NULL, *tgt = NULL;
    int status = -1;
    if (!from || !to || !work)
        goto done;
    m = 0;
    for (int32_t r = 0; r < n_rules; r++)
        for (int32_t j = at[r]; j < end[r]; j++)
            if (!known[body[j]]) {
                from[m] = body[j];
                to[m++] = r;
            }
    if (csr_of(n_sym, from, to, m, &off, &tgt))
        goto done;
    int32_t top = 0;
    for (int32_t r = 0; r < n_rules; r++)
        if (!missing[r])
            work[top++] = lhs[r];
    while (top) {
        int32_t s = work[--top];
        if (known[s])
            continue;
        known[s] = 1;
        for (int32_t e = off[s]; e < off[s + 1]; e++)
            if (!--missing[tgt[e]])
                work[top++] = lhs[tgt[e]];
    }
    status = 0;
done:
    free(from);
    free(to);
    free(work);
    free(off);
    free(tgt);
    return status;
}

#endif
