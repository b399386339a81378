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

/* The trie under construction, the nodes kept from it and their children. */
typedef struct {
    tnode_t *t;          /* trie nodes; 0 is the root */
    size_t n, cap;
    uint32_t *kept;      /* trie node -> output node, AGG_NONE = dropped */
    uint32_t *child_off; /* children lists (CSR) of kept nodes */
    uint32_t *child;
    size_t nk;           /* nodes kept */
} tbuild_t;

/* 1. The full trie of the profile's stacks, with totals. 0 or CM_ENOMEM. */
static int build_trie(tbuild_t *b, const agg_profile_t *p, const uint64_t *sw,
                      const uint64_t *sc) {
    size_t total_frames = p->stack_off[p->n_stacks];
    edge_map_t m = {NULL, NULL, 64};
    while (m.cap < 2 * (total_frames + 1))
        m.cap *= 2;
    m.key = calloc(m.cap, sizeof *m.key);
    m.val = malloc(m.cap * sizeof *m.val);
    int rc = CM_ENOMEM;
    if (!m.key || !m.val)
        goto out;
    tnode_t *t = b->t;
    t[0] = (tnode_t){AGG_NONE, AGG_NONE, 0, 0, 0, 0, 0};
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
                if (b->n == b->cap) {
                    tnode_t *nt = realloc(t, 2 * b->cap * sizeof *t);
                    if (!nt)
                        goto out;
                    b->t = t = nt;
                    b->cap *= 2;
                }
                t[b->n] = (tnode_t){p->stack_frames[k], cur, t[cur].depth + 1, 0, 0, 0, 0};
                m.key[slot] = key;
                m.val[slot] = (uint32_t)b->n++;
            }
            cur = m.val[slot];
            t[cur].total += sw[s];
            t[cur].count += sc[s];
        }
        t[cur].self += sw[s];
        t[cur].selfc += sc[s];
    }
    rc = 0;
out:
    free(m.key);
    free(m.val);
    return rc;
}

/* 2. Which nodes to keep: above the share, largest first, within the limit. A parent's
 * total is >= its child's and ties sort the shallower first, so any prefix is a tree.
 * Fills kept (0 for kept: the index is assigned on output) and the children lists. */
static int choose_kept(tbuild_t *b, double min_share, size_t max_nodes) {
    const tnode_t *t = b->t;
    size_t n = b->n;
    double threshold = min_share * (double)t[0].total;
    uint32_t *order = malloc(n * sizeof *order), *fill = calloc(n, sizeof *fill);
    b->kept = malloc(n * sizeof *b->kept);
    b->child_off = calloc(n + 1, sizeof *b->child_off);
    b->child = malloc(n * sizeof *b->child);
    int rc = CM_ENOMEM;
    if (!order || !fill || !b->kept || !b->child_off || !b->child)
        goto out;
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        b->kept[i] = AGG_NONE;
        if (i == 0 || ((double)t[i].total >= threshold && t[i].total > 0))
            order[nk++] = (uint32_t)i;
    }
    tl_nodes = t;
    qsort(order, nk, sizeof *order, cmp_keep);
    if (max_nodes && nk > max_nodes)
        nk = max_nodes;
    for (size_t i = 0; i < nk; i++)
        b->kept[order[i]] = 0;
    for (size_t i = 1; i < n; i++)
        if (b->kept[i] != AGG_NONE)
            b->child_off[t[i].parent + 1]++;
    for (size_t i = 0; i < n; i++)
        b->child_off[i + 1] += b->child_off[i];
    for (size_t i = 1; i < n; i++)
        if (b->kept[i] != AGG_NONE) {
            uint32_t par = t[i].parent;
            b->child[b->child_off[par] + fill[par]++] = (uint32_t)i;
        }
    b->nk = nk;
    rc = 0;
out:
    free(order);
    free(fill);
    return rc;
}

/* Appends output node no as the last child of parent, after sibling prev (AGG_NONE: first). */
static void link_child(agg_tree_node_t *o, uint32_t parent, uint32_t prev, uint32_t no) {
    if (prev == AGG_NONE)
        o[parent].first_child = no;
    else
        o[prev].next_sibling = no;
}

/* 3. Output, breadth first; at most one "(other)" per kept node. 0 or CM_ENOMEM. */
static int emit_tree(tbuild_t *b, agg_tree_t *out) {
    const tnode_t *t = b->t;
    uint32_t *kept = b->kept, *child = b->child;
    agg_tree_node_t *o = calloc(2 * b->nk + 1, sizeof *o);
    uint32_t *queue = malloc((b->nk + 1) * sizeof *queue);
    if (!o || !queue) {
        free(o);
        free(queue);
        return CM_ENOMEM;
    }
    size_t no = 1, qh = 0, qt = 0;
    o[0] = (agg_tree_node_t){AGG_NONE, AGG_NONE, AGG_NONE, AGG_NONE, t[0].total, t[0].self,
                             t[0].count};
    kept[0] = 0;
    queue[qt++] = 0;
    tl_nodes = t;
    while (qh < qt) {
        uint32_t ti = queue[qh++], oi = kept[ti];
        uint32_t a = b->child_off[ti], e = b->child_off[ti + 1];
        qsort(child + a, e - a, sizeof *child, cmp_child);
        uint64_t sum = 0, sumc = 0;
        uint32_t prev = AGG_NONE;
        for (uint32_t k = a; k < e; k++) {
            uint32_t ci = child[k];
            kept[ci] = (uint32_t)no;
            o[no] = (agg_tree_node_t){t[ci].frame, oi, AGG_NONE, AGG_NONE, t[ci].total,
                                      t[ci].self, t[ci].count};
            link_child(o, oi, prev, (uint32_t)no);
            prev = (uint32_t)no++;
            sum += t[ci].total;
            sumc += t[ci].count;
            queue[qt++] = ci;
        }
        uint64_t rest = t[ti].total - t[ti].self - sum;
        uint64_t restc = t[ti].count - t[ti].selfc - sumc;
        if (rest > 0) {
            o[no] = (agg_tree_node_t){AGG_TREE_OTHER, oi, AGG_NONE, AGG_NONE, rest, rest, restc};
            link_child(o, oi, prev, (uint32_t)no++);
        }
    }
    for (size_t i = 1; i < b->n; i++)
        if (kept[i] == AGG_NONE && kept[t[i].parent] != AGG_NONE)
            out->n_truncated++;
    free(queue);
    out->nodes = o;
    out->n = no;
    return 0;
}

int agg_tree_compute(const agg_profile_t *p, double min_share, size_t max_nodes, agg_tree_t *out) {
    memset(out, 0, sizeof *out);
    if (!(min_share >= 0 && min_share < 1))
        return CM_EINVAL;
    int rc = CM_ENOMEM;
    tbuild_t b = {.n = 1, .cap = 1024};
    b.t = malloc(b.cap * sizeof *b.t);
    uint64_t *sw = malloc(((size_t)p->n_stacks + 1) * sizeof *sw);
    uint64_t *sc = malloc(((size_t)p->n_stacks + 1) * sizeof *sc);
    if (b.t && sw && sc) {
        agg_profile_stack_sums(p, sw, sc);
        if (!(rc = build_trie(&b, p, sw, sc)) && !(rc = choose_kept(&b, min_share, max_nodes)))
            rc = emit_tree(&b, out);
    }
    free(b.t);
    free(sw);
    free(sc);
    free(b.kept);
    free(b.child_off);
    free(b.child);
    return rc;
}

void agg_tree_free(agg_tree_t *t) {
    free(t->nodes);
    memset(t, 0, sizeof *t);
}
