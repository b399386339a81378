/* The profile model's builder: interning of strings, frames, stacks, replicates and contexts,
 * and row storage. See profile.h. Threading: one thread builds a profile; reads are free. */
#include "internal.h"

#include "cm/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static void unseal(agg_profile_t *p);

typedef int (*eq_fn)(const agg_profile_t *p, uint32_t id, const void *key);

static agg_idtab_t *idtab_new(void) { return calloc(1, sizeof(agg_idtab_t)); }

static void idtab_free(agg_idtab_t *t) {
    if (!t)
        return;
    free(t->hash);
    free(t->id);
    free(t);
}

/* Returns the id stored for key, or AGG_NONE. */
static uint32_t idtab_find(const agg_idtab_t *t, const agg_profile_t *p, uint64_t h, eq_fn eq,
                           const void *key) {
    if (!t->cap)
        return AGG_NONE;
    for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (!t->id[i])
            return AGG_NONE;
        if (t->hash[i] == h && eq(p, t->id[i] - 1, key))
            return t->id[i] - 1;
    }
}

int agg_idtab_insert(agg_idtab_t *t, uint64_t h, uint32_t id) {
    if (2 * (t->n + 1) > t->cap) {
        size_t ncap = t->cap ? 2 * t->cap : 256;
        uint64_t *nh = calloc(ncap, sizeof *nh);
        uint32_t *ni = calloc(ncap, sizeof *ni);
        if (!nh || !ni) {
            free(nh);
            free(ni);
            return CM_ENOMEM;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->id[i])
                continue;
            size_t j = t->hash[i] & (ncap - 1);
            while (ni[j])
                j = (j + 1) & (ncap - 1);
            ni[j] = t->id[i];
            nh[j] = t->hash[i];
        }
        free(t->hash);
        free(t->id);
        t->hash = nh;
        t->id = ni;
        t->cap = ncap;
    }
    size_t j = h & (t->cap - 1);
    while (t->id[j])
        j = (j + 1) & (t->cap - 1);
    t->id[j] = id + 1;
    t->hash[j] = h;
    t->n++;
    return 0;
}

/* Grows *arr (element size sz) so that it holds need elements. */
static int grow(void **arr, size_t sz, size_t *cap, size_t need) {
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 64;
    while (ncap < need)
        ncap *= 2;
    void *n = realloc(*arr, ncap * sz);
    if (!n)
        return CM_ENOMEM;
    *arr = n;
    *cap = ncap;
    return 0;
}

static int grow32(void **arr, size_t sz, uint32_t *cap, size_t need) {
    size_t c = *cap;
    int rc = grow(arr, sz, &c, need);
    *cap = (uint32_t)c;
    return rc;
}

agg_profile_t *agg_profile_new(cm_event_type_t type) {
    agg_profile_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->type = type;
    p->tab_strings = idtab_new();
    p->tab_frames = idtab_new();
    p->tab_stacks = idtab_new();
    p->tab_replicates = idtab_new();
    p->tab_contexts = idtab_new();
    p->stack_off = calloc(1, sizeof *p->stack_off);
    p->cap_stacks = 0;
    p->contexts = calloc(1, sizeof *p->contexts);
    p->n_contexts = 1;
    p->cap_contexts = 1;
    if (!p->tab_strings || !p->tab_frames || !p->tab_stacks || !p->tab_replicates ||
        !p->tab_contexts || !p->stack_off || !p->contexts) {
        agg_profile_free(p);
        return NULL;
    }
    return p;
}

void agg_profile_free(agg_profile_t *p) {
    if (!p)
        return;
    for (uint32_t i = 0; i < p->n_strings; i++)
        free(p->strings[i]);
    free(p->strings);
    free(p->frames);
    free(p->stack_off);
    free(p->stack_frames);
    free(p->rows);
    free(p->leaf_rows);
    free(p->stack_weight);
    free(p->stack_count);
    free(p->replicates);
    free(p->contexts);
    idtab_free(p->tab_strings);
    idtab_free(p->tab_frames);
    idtab_free(p->tab_stacks);
    idtab_free(p->tab_replicates);
    idtab_free(p->tab_contexts);
    free(p);
}

static int str_eq(const agg_profile_t *p, uint32_t id, const void *key) {
    return strcmp(p->strings[id], key) == 0;
}

/* Interns a string; returns the profile-owned copy or NULL when out of memory. */
static const char *intern(agg_profile_t *p, const char *s) {
    uint64_t h = XXH3_64bits(s, strlen(s));
    uint32_t id = idtab_find(p->tab_strings, p, h, str_eq, s);
    if (id != AGG_NONE)
        return p->strings[id];
    if (grow32((void **)&p->strings, sizeof *p->strings, &p->cap_strings, p->n_strings + 1))
        return NULL;
    char *copy = strdup(s);
    if (!copy)
        return NULL;
    if (agg_idtab_insert(p->tab_strings, h, p->n_strings)) {
        free(copy);
        return NULL;
    }
    p->strings[p->n_strings++] = copy;
    return copy;
}

typedef struct {
    const char *name, *module; /* interned: compared by pointer */
    uint8_t inlined;           /* AGG_FRAME_* flags */
    uint64_t address;          /* part of the key with AGG_FRAME_BY_ADDRESS */
} frame_key_t;

static int frame_eq(const agg_profile_t *p, uint32_t id, const void *key) {
    const frame_key_t *k = key;
    const agg_frame_t *f = &p->frames[id];
    return f->name == k->name && f->module == k->module && f->inlined == k->inlined &&
           (!(k->inlined & AGG_FRAME_BY_ADDRESS) || f->address == k->address);
}

int64_t agg_profile_frame(agg_profile_t *p, const char *name, const char *module,
                          const char *build_id, uint64_t address) {
    return agg_profile_frame_src(p, name, module, build_id, address, NULL, NULL, 0, 0);
}

int64_t agg_profile_frame_src(agg_profile_t *p, const char *name, const char *module,
                              const char *build_id, uint64_t address, const char *function,
                              const char *file, uint32_t line, int inlined) {
    /* one function, one frame: stored names may carry a symbol version (libc's .symtab says
     * clock_gettime@@GLIBC_2.17 where .dynsym says clock_gettime; agents before issue 35 and
     * debug files named by the aggregator's symbolizer) */
    char uname[1024], ufn[1024];
    if (name && strchr(name, '@') && strlen(name) < sizeof uname) {
        cm_name_unversioned(name, uname, sizeof uname);
        name = uname;
    }
    if (function && strchr(function, '@') && strlen(function) < sizeof ufn) {
        cm_name_unversioned(function, ufn, sizeof ufn);
        function = ufn;
    }
    frame_key_t k = {intern(p, name && *name ? name : "[unknown]"), intern(p, module ? module : ""),
                     (uint8_t)(inlined & (AGG_FRAME_INLINED | AGG_FRAME_BY_ADDRESS)),
                     inlined & AGG_FRAME_BY_ADDRESS ? address : 0};
    if (!k.name || !k.module)
        return CM_ENOMEM;
    uint64_t key[4] = {(uint64_t)(uintptr_t)k.name, (uint64_t)(uintptr_t)k.module, k.inlined,
                       k.address};
    uint64_t h = XXH3_64bits(key, k.inlined ? sizeof key : 2 * sizeof key[0]);
    uint32_t id = idtab_find(p->tab_frames, p, h, frame_eq, &k);
    if (id != AGG_NONE)
        return id;
    const char *bid = intern(p, build_id ? build_id : "");
    const char *fn = function && *function ? intern(p, function) : k.name;
    const char *fl = intern(p, file ? file : "");
    if (!bid || !fn || !fl ||
        grow32((void **)&p->frames, sizeof *p->frames, &p->cap_frames, p->n_frames + 1) ||
        agg_idtab_insert(p->tab_frames, h, p->n_frames))
        return CM_ENOMEM;
    p->frames[p->n_frames] =
        (agg_frame_t){k.name, k.module, bid, address, fn, fl, line, k.inlined, AGG_KIND_NATIVE};
    return p->n_frames++;
}

static const char *const kind_prefix[] = {"", "kernel:", "python:", "js:", "java:"};

uint8_t agg_frame_kind(const char *system_name) {
    for (uint8_t k = AGG_KIND_KERNEL; system_name && k <= AGG_KIND_JAVA; k++)
        if (!strncmp(system_name, kind_prefix[k], strlen(kind_prefix[k])))
            return k;
    return AGG_KIND_NATIVE;
}

const char *agg_kind_name(uint8_t kind) {
    static const char *const names[] = {"native", "kernel", "python", "js", "java"};
    return kind <= AGG_KIND_JAVA ? names[kind] : names[0];
}

typedef struct {
    const uint32_t *frames;
    uint32_t n;
} stack_key_t;

static int stack_eq(const agg_profile_t *p, uint32_t id, const void *key) {
    const stack_key_t *k = key;
    uint32_t n = p->stack_off[id + 1] - p->stack_off[id];
    return n == k->n && memcmp(p->stack_frames + p->stack_off[id], k->frames, n * 4) == 0;
}

int64_t agg_profile_stack(agg_profile_t *p, const uint32_t *frames, uint32_t n) {
    if (n > CM_MAX_STACK_DEPTH)
        return CM_ERANGE;
    for (uint32_t i = 0; i < n; i++)
        if (frames[i] >= p->n_frames)
            return CM_ERANGE;
    stack_key_t k = {frames, n};
    uint64_t h = XXH3_64bits(frames, (size_t)n * 4);
    uint32_t id = idtab_find(p->tab_stacks, p, h, stack_eq, &k);
    if (id != AGG_NONE)
        return id;
    if (p->stack_weight)
        unseal(p);
    size_t used = p->stack_off[p->n_stacks];
    if (grow32((void **)&p->stack_off, 4, &p->cap_stacks, (size_t)p->n_stacks + 2) ||
        grow32((void **)&p->stack_frames, 4, &p->cap_stack_frames, used + n + 1) ||
        agg_idtab_insert(p->tab_stacks, h, p->n_stacks))
        return CM_ENOMEM;
    if (n)
        memcpy(p->stack_frames + used, frames, (size_t)n * 4);
    p->stack_off[p->n_stacks + 1] = (uint32_t)(used + n);
    return p->n_stacks++;
}

static int rep_eq(const agg_profile_t *p, uint32_t id, const void *key) {
    return p->replicates[id].key == key;
}

int64_t agg_profile_replicate(agg_profile_t *p, const char *key, double work) {
    if (!(work >= 0) || !isfinite(work))
        return CM_EINVAL;
    const char *k = intern(p, key ? key : "");
    if (!k)
        return CM_ENOMEM;
    uint64_t h = XXH3_64bits(&k, sizeof k);
    uint32_t id = idtab_find(p->tab_replicates, p, h, rep_eq, k);
    if (id != AGG_NONE) {
        p->replicates[id].work += work;
        return id;
    }
    if (grow32((void **)&p->replicates, sizeof *p->replicates, &p->cap_replicates,
               p->n_replicates + 1) ||
        agg_idtab_insert(p->tab_replicates, h, p->n_replicates))
        return CM_ENOMEM;
    p->replicates[p->n_replicates] = (agg_replicate_t){k, work, AGG_NONE};
    return p->n_replicates++;
}

int agg_profile_replicate_group(agg_profile_t *p, uint32_t rep, uint32_t group) {
    if (rep >= p->n_replicates)
        return CM_ERANGE;
    p->replicates[rep].group = group;
    return 0;
}

static int ctx_eq(const agg_profile_t *p, uint32_t id, const void *key) {
    return memcmp(&p->contexts[id], key, sizeof(agg_context_t)) == 0;
}

int64_t agg_profile_context(agg_profile_t *p, const uint8_t trace_id[16], const uint8_t span_id[8]) {
    agg_context_t c;
    memcpy(c.trace_id, trace_id, 16);
    memcpy(c.span_id, span_id, 8);
    static const agg_context_t zero;
    if (memcmp(&c, &zero, sizeof c) == 0)
        return 0;
    uint64_t h = XXH3_64bits(&c, sizeof c);
    uint32_t id = idtab_find(p->tab_contexts, p, h, ctx_eq, &c);
    if (id != AGG_NONE)
        return id;
    if (grow32((void **)&p->contexts, sizeof *p->contexts, &p->cap_contexts, p->n_contexts + 1) ||
        agg_idtab_insert(p->tab_contexts, h, p->n_contexts))
        return CM_ENOMEM;
    p->contexts[p->n_contexts] = c;
    return p->n_contexts++;
}

static void unseal(agg_profile_t *p) {
    free(p->stack_weight);
    free(p->stack_count);
    p->stack_weight = p->stack_count = NULL;
}

int agg_profile_seal(agg_profile_t *p) {
    unseal(p);
    uint64_t *w = malloc(((size_t)p->n_stacks + 1) * sizeof *w);
    uint64_t *c = malloc(((size_t)p->n_stacks + 1) * sizeof *c);
    if (!w || !c) {
        free(w);
        free(c);
        return CM_ENOMEM;
    }
    agg_profile_stack_sums(p, w, c);
    p->stack_weight = w;
    p->stack_count = c;
    return 0;
}

void agg_profile_use_leaf_replicates(agg_profile_t *p) { p->leaf_replicates = 1; }

int agg_profile_add_leaf(agg_profile_t *p, uint32_t frame, uint64_t weight, uint64_t count,
                         uint32_t replicate) {
    if (!p->leaf_replicates)
        return CM_EINVAL;
    if (frame >= p->n_frames || replicate >= p->n_replicates)
        return CM_ERANGE;
    if (grow((void **)&p->leaf_rows, sizeof *p->leaf_rows, &p->cap_leaf_rows,
             p->n_leaf_rows + 1))
        return CM_ENOMEM;
    p->leaf_rows[p->n_leaf_rows++] = (agg_leaf_row_t){frame, replicate, weight, count};
    return 0;
}

int agg_profile_add(agg_profile_t *p, uint32_t stack, uint64_t weight, uint64_t count,
                    uint32_t replicate, uint32_t context) {
    if (p->stack_weight)
        unseal(p);
    if (stack >= p->n_stacks || replicate >= p->n_replicates || context >= p->n_contexts)
        return CM_ERANGE;
    if (grow((void **)&p->rows, sizeof *p->rows, &p->cap_rows, p->n_rows + 1))
        return CM_ENOMEM;
    p->rows[p->n_rows++] = (agg_row_t){stack, replicate, context, weight, count};
    return 0;
}

void agg_profile_totals(const agg_profile_t *p, uint64_t *weight, uint64_t *count, double *work) {
    uint64_t w = 0, c = 0;
    double k = 0;
    for (size_t i = 0; i < p->n_rows; i++) {
        w += p->rows[i].weight;
        c += p->rows[i].count;
    }
    for (uint32_t i = 0; i < p->n_replicates; i++)
        k += p->replicates[i].work;
    if (weight)
        *weight = w;
    if (count)
        *count = c;
    if (work)
        *work = k;
}

void agg_profile_stack_sums(const agg_profile_t *p, uint64_t *weight, uint64_t *count) {
    if (p->stack_weight) {
        if (weight)
            memcpy(weight, p->stack_weight, (size_t)p->n_stacks * sizeof *weight);
        if (count)
            memcpy(count, p->stack_count, (size_t)p->n_stacks * sizeof *count);
        return;
    }
    if (weight)
        memset(weight, 0, (size_t)p->n_stacks * sizeof *weight);
    if (count)
        memset(count, 0, (size_t)p->n_stacks * sizeof *count);
    for (size_t i = 0; i < p->n_rows; i++) {
        if (weight)
            weight[p->rows[i].stack] += p->rows[i].weight;
        if (count)
            count[p->rows[i].stack] += p->rows[i].count;
    }
}

void agg_frame_label(const agg_frame_t *f, char *buf, size_t size) {
    if (f->module[0] && strcmp(f->module, f->name) != 0)
        snprintf(buf, size, "%s!%s", f->module, f->name);
    else
        snprintf(buf, size, "%s", f->name);
}

/* Copies frames, stacks and replicates of in into a new profile with the same ids (used by
 * the filters that keep the frame table). */
int agg_profile_copy_tables(const agg_profile_t *in, agg_profile_t **out) {
    agg_profile_t *p = agg_profile_new(in->type);
    int rc = CM_ENOMEM;
    if (!p)
        goto out;
    for (uint32_t i = 0; i < in->n_frames; i++) {
        const agg_frame_t *f = &in->frames[i];
        int64_t id = agg_profile_frame_src(p, f->name, f->module, f->build_id, f->address,
                                           f->function, f->file, f->line, f->inlined);
        if (id < 0)
            goto out;
    }
    for (uint32_t i = 0; i < in->n_stacks; i++)
        if (agg_profile_stack(p, in->stack_frames + in->stack_off[i],
                              in->stack_off[i + 1] - in->stack_off[i]) < 0)
            goto out;
    for (uint32_t i = 0; i < in->n_replicates; i++)
        if (agg_profile_replicate(p, in->replicates[i].key, in->replicates[i].work) < 0 ||
            agg_profile_replicate_group(p, i, in->replicates[i].group))
            goto out;
    for (uint32_t i = 1; i < in->n_contexts; i++)
        if (agg_profile_context(p, in->contexts[i].trace_id, in->contexts[i].span_id) < 0)
            goto out;
    p->time_start_ns = in->time_start_ns;
    p->time_end_ns = in->time_end_ns;
    *out = p;
    p = NULL;
    rc = 0;
out:
    agg_profile_free(p);
    return rc;
}

int agg_profile_select_context(const agg_profile_t *in, const uint8_t *trace_id,
                               const uint8_t *span_id, agg_profile_t **out) {
    agg_profile_t *p = NULL;
    int rc = agg_profile_copy_tables(in, &p);
    if (rc)
        return rc;
    for (size_t i = 0; i < in->n_rows; i++) {
        const agg_row_t *r = &in->rows[i];
        if (r->context == 0)
            continue;
        const agg_context_t *c = &in->contexts[r->context];
        if (trace_id && memcmp(c->trace_id, trace_id, 16) != 0)
            continue;
        if (span_id && memcmp(c->span_id, span_id, 8) != 0)
            continue;
        if ((rc = agg_profile_add(p, r->stack, r->weight, r->count, r->replicate, r->context)))
            goto out;
    }
    *out = p;
    p = NULL;
out:
    agg_profile_free(p);
    return rc;
}
