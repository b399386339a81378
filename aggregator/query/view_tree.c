/* Call tree (top-down) with truncation: nodes under a minimum share of the total, or beyond the
 * node limit, are folded into one "(other)" node per parent, so totals are conserved.
 * Threading: reads the profile only. */
#include "views.h"

#include "cm/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t frame, parent, depth;
    uint64_t total, self, count, selfc;
} tnode_t;

typedef struct {
    uint64_t *key; /* (parent + 1) << 32 | frame; 0 = empty */
    uint32_t *val;
    size_t cap;
} edge_map_t;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* Returns the slot of key (inserting nothing). cap is a power of two, never full. */
static size_t edge_slot(const edge_map_t *m, uint64_t key) {
    size_t i = mix(key) & (m->cap - 1);
    while (m->key[i] && m->key[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static _Thread_local const tnode_t *tl_nodes;

static int cmp_keep(const void *a, const void *b) {
    const tnode_t *x = &tl_nodes[*(const uint32_t *)a], *y = &tl_nodes[*(const uint32_t *)b];
    if (x->total != y->total)
        return x->total < y->total ? 1 : -1;
    if (x->depth != y->depth)
        return x->depth < y->depth ? -1 : 1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static int cmp_child(const void *a, const void *b) {
    const tnode_t *x = &tl_nodes[*(const uint32_t *)a], *y = &tl_nodes[*(const uint32_t *)b];
    if (x->total != y->total)
        return x->total < y->total ? 1 : -1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

int agg_tree_compute(const agg_profile_t *p, double min_share, size_t max_nodes, agg_tree_t *out) {
    memset(out, 0, sizeof *out);
    if (!(min_share >= 0 && min_share < 1))
        return CM_EINVAL;
    int rc = CM_ENOMEM;
    size_t n = 1, cap = 1024;
    tnode_t *t = malloc(cap * sizeof *t);
    uint64_t *sw = malloc(((size_t)p->n_stacks + 1) * sizeof *sw);
    uint64_t *sc = malloc(((size_t)p->n_stacks + 1) * sizeof *sc);
    edge_map_t m = {NULL, NULL, 0};
    uint32_t *order = NULL, *kept = NULL, *child_off = NULL, *child = NULL, *queue = NULL;
    agg_tree_node_t *o = NULL;
    size_t total_frames = p->stack_off[p->n_stacks];
    m.cap = 64;
    while (m.cap < 2 * (total_frames + 1))
        m.cap *= 2;
    m.key = calloc(m.cap, sizeof *m.key);
    m.val = malloc(m.cap * sizeof *m.val);
    if (!t || !sw || !sc || !m.key || !m.val)
        goto out;
    agg_profile_stack_sums(p, sw, sc);
    t[0] = (tnode_t){AGG_NONE, AGG_NONE, 0, 0, 0, 0, 0};
    /* 1. the full trie */
    for (uint32_t s = 0; s < p->n_stacks; s++) {
        if (!sw[s] && !sc[s])
            continue;
        uint32_t cur = 0;
        t[0].total += sw[s];
        t[0].count += sc[s];
        for (uint32_t k = p->stack_off[s]; k < p->stack_off[s + 1]; k++) {
            uint64_t key = ((uint64_t)cur + 1) << 32 | p->stack_frames[k];
            size_t slot = edge_slot(&m, key);
            if (!m.key[slot]) {
                if (n == cap) {
                    tnode_t *nt = realloc(t, 2 * cap * sizeof *t);
                    if (!nt)
                        goto out;
                    t = nt;
                    cap *= 2;
                }
                t[n] = (tnode_t){p->stack_frames[k], cur, t[cur].depth + 1, 0, 0, 0, 0};
                m.key[slot] = key;
                m.val[slot] = (uint32_t)n++;
            }
            cur = m.val[slot];
            t[cur].total += sw[s];
            t[cur].count += sc[s];
        }
        t[cur].self += sw[s];
        t[cur].selfc += sc[s];
    }
    /* 2. which nodes to keep: above the share, largest first, within the limit. A parent's
     * total is >= its child's and ties sort the shallower first, so any prefix is a tree. */
    double threshold = min_share * (double)t[0].total;
    order = malloc(n * sizeof *order);
    kept = malloc(n * sizeof *kept); /* trie node -> output node, AGG_NONE = dropped */
    child_off = calloc(n + 1, sizeof *child_off);
    child = malloc(n * sizeof *child);
    if (!order || !kept || !child_off || !child)
        goto out;
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        kept[i] = AGG_NONE;
        if (i == 0 || ((double)t[i].total >= threshold && t[i].total > 0))
            order[nk++] = (uint32_t)i;
    }
    tl_nodes = t;
    qsort(order, nk, sizeof *order, cmp_keep);
    if (max_nodes && nk > max_nodes)
        nk = max_nodes;
    for (size_t i = 0; i < nk; i++)
        kept[order[i]] = 0; /* index assigned below */
    /* children lists (CSR) of kept nodes */
    for (size_t i = 1; i < n; i++)
        if (kept[i] != AGG_NONE)
            child_off[t[i].parent + 1]++;
    for (size_t i = 0; i < n; i++)
        child_off[i + 1] += child_off[i];
    {
        uint32_t *fill = calloc(n, sizeof *fill);
        if (!fill)
            goto out;
        for (size_t i = 1; i < n; i++)
            if (kept[i] != AGG_NONE) {
                uint32_t par = t[i].parent;
                child[child_off[par] + fill[par]++] = (uint32_t)i;
            }
        free(fill);
    }
    /* 3. output, breadth first; at most one "(other)" per kept node */
    o = calloc(2 * nk + 1, sizeof *o);
    queue = malloc((nk + 1) * sizeof *queue);
    if (!o || !queue)
        goto out;
    size_t no = 1, qh = 0, qt = 0;
    o[0] = (agg_tree_node_t){AGG_NONE, AGG_NONE, AGG_NONE, AGG_NONE, t[0].total, t[0].self,
                             t[0].count};
    kept[0] = 0;
    queue[qt++] = 0;
    while (qh < qt) {
        uint32_t ti = queue[qh++], oi = kept[ti];
        uint32_t a = child_off[ti], b = child_off[ti + 1];
        qsort(child + a, b - a, sizeof *child, cmp_child);
        uint64_t sum = 0, sumc = 0;
        uint32_t prev = AGG_NONE;
        for (uint32_t k = a; k < b; k++) {
            uint32_t ci = child[k];
            kept[ci] = (uint32_t)no;
            o[no] = (agg_tree_node_t){t[ci].frame, oi, AGG_NONE, AGG_NONE, t[ci].total,
                                      t[ci].self, t[ci].count};
            if (prev == AGG_NONE)
                o[oi].first_child = (uint32_t)no;
            else
                o[prev].next_sibling = (uint32_t)no;
            prev = (uint32_t)no++;
            sum += t[ci].total;
            sumc += t[ci].count;
            queue[qt++] = ci;
        }
        uint64_t rest = t[ti].total - t[ti].self - sum;
        uint64_t restc = t[ti].count - t[ti].selfc - sumc;
        if (rest > 0) {
            o[no] = (agg_tree_node_t){AGG_TREE_OTHER, oi, AGG_NONE, AGG_NONE, rest, rest, restc};
            if (prev == AGG_NONE)
                o[oi].first_child = (uint32_t)no;
            else
                o[prev].next_sibling = (uint32_t)no;
            no++;
        }
    }
    for (size_t i = 1; i < n; i++)
        if (kept[i] == AGG_NONE && kept[t[i].parent] != AGG_NONE)
            out->n_truncated++;
    out->nodes = o;
    out->n = no;
    o = NULL;
    rc = 0;
out:
    free(t);
    free(sw);
    free(sc);
    free(m.key);
    free(m.val);
    free(order);
    free(kept);
    free(child_off);
    free(child);
    free(queue);
    free(o);
    return rc;
}

void agg_tree_free(agg_tree_t *t) {
    free(t->nodes);
    memset(t, 0, sizeof *t);
}
