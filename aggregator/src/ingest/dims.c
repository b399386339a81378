/* Dimensions as labels, their cardinality bound, and the filter SQL (see dims.h).
 * Threading: an agg_dims_t belongs to the consume thread; the SQL helpers are pure. */
#include "dims.h"
#include "qexec.h"

#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const agg_dim_names[AGG_DIM_COUNT] = {
    [AGG_DIM_HOST] = "host",           [AGG_DIM_NODE] = "node",         [AGG_DIM_POD] = "pod",
    [AGG_DIM_CONTAINER] = "container", [AGG_DIM_PID] = "pid",           [AGG_DIM_UID] = "uid",
    [AGG_DIM_PID_CLAIMED] = "pid-claimed", [AGG_DIM_IO_TARGET] = "io-target",
    [AGG_DIM_FD_KIND] = "fd-kind",     [AGG_DIM_LOCK] = "lock"};

int agg_dim_by_name(const char *name) {
    for (int i = 0; name && i < AGG_DIM_COUNT; i++)
        if (!strcmp(agg_dim_names[i], name))
            return i;
    return -1;
}

typedef struct {
    uint64_t service, dim, value;
} seen_key_t;
typedef struct {
    seen_key_t k;
} seen_ent_t;
typedef struct {
    uint64_t service, dim;
} count_key_t;
typedef struct {
    count_key_t k;
    uint64_t n;
} count_ent_t;
typedef struct {
    uint64_t set, target, address; /* set: the row's own label set index; target: string index */
    uint32_t type, fd;
} cache_key_t;
typedef struct {
    cache_key_t k;
    uint64_t id;
} cache_ent_t;

int agg_dims_parse(const char *list, uint32_t *mask, char *err, size_t err_size) {
    *mask = 0;
    if (!list || !strcmp(list, "all")) {
        *mask = AGG_DIM_ALL;
        return 0;
    }
    if (!strcmp(list, "none") || !*list)
        return 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        int d = agg_dim_by_name(t);
        if (d < 0) {
            snprintf(err, err_size, "dimensions: '%s' is not one of host, node, pod, container, "
                     "pid, uid, pid-claimed, io-target, fd-kind, lock (or all, none)", t);
            return CM_ECONFIG;
        }
        *mask |= 1u << d;
    }
    return 0;
}

void agg_dims_init(agg_dims_t *d, int64_t window_s, uint32_t process_limit,
                   uint32_t target_limit) {
    memset(d, 0, sizeof *d);
    d->enabled = AGG_DIM_ALL;
    d->window_s = window_s > 0 ? window_s : 3600;
    uint32_t pl = process_limit ? process_limit : AGG_DIM_LIMIT_PROCESS;
    uint32_t tl = target_limit ? target_limit : AGG_DIM_LIMIT_TARGET;
    for (int i = 0; i < AGG_DIM_COUNT; i++)
        d->limit[i] = i == AGG_DIM_IO_TARGET || i == AGG_DIM_LOCK ? tl : pl;
    d->limit[AGG_DIM_FD_KIND] = 8;
    d->max_entries = AGG_DIM_MAX_ENTRIES;
    agg_hmap_init(&d->seen, sizeof(seen_key_t), sizeof(seen_ent_t));
    agg_hmap_init(&d->count, sizeof(count_key_t), sizeof(count_ent_t));
    agg_hmap_init(&d->cache, sizeof(cache_key_t), sizeof(cache_ent_t));
}

void agg_dims_free(agg_dims_t *d) {
    agg_hmap_free(&d->seen);
    agg_hmap_free(&d->count);
    agg_hmap_free(&d->cache);
    for (int t = 0; t <= CM_EV_MAX; t++)
        free(d->rows[t]);
    memset(d, 0, sizeof *d);
}

int agg_dims_admit(agg_dims_t *d, uint64_t service, agg_dim_t dim, uint64_t value,
                   uint64_t start_ns) {
    uint64_t w = start_ns / 1000000000ull / (uint64_t)d->window_s;
    if (w > d->window) { /* a new window: every bound starts again */
        agg_hmap_clear(&d->seen);
        agg_hmap_clear(&d->count);
        d->window = w;
    }
    seen_key_t sk = {service, (uint64_t)dim, value};
    if (agg_hmap_find(&d->seen, &sk))
        return 1;
    count_key_t ck = {service, (uint64_t)dim};
    count_ent_t *ce = agg_hmap_upsert(&d->count, &ck, NULL);
    if (!ce)
        return CM_ENOMEM;
    if (ce->n >= d->limit[dim] || d->seen.n >= d->max_entries) {
        d->overflow[dim]++;
        return 0;
    }
    if (!agg_hmap_upsert(&d->seen, &sk, NULL))
        return CM_ENOMEM;
    ce->n++;
    return 1;
}

/* Appends (key, value) of dimension dim to kv after the bound; value "" adds nothing. */
static int add_dim(agg_dims_t *d, agg_intern_t *in, agg_batch_t *b, uint64_t service,
                   uint64_t start_ns, agg_dim_t dim, const char *value, size_t len, uint64_t *kv,
                   uint32_t *n) {
    if (!len || !(d->enabled & (1u << dim)))
        return 0;
    uint64_t vid = agg_intern_string_id(value, len);
    int ok = agg_dims_admit(d, service, dim, vid, start_ns);
    if (ok < 0)
        return ok;
    if (!ok) {
        value = AGG_DIM_OTHER;
        len = strlen(AGG_DIM_OTHER);
    }
    int rc;
    const char *key = agg_dim_names[dim];
    if ((rc = agg_intern_str(in, b, key, strlen(key), &kv[2 * *n])) ||
        (rc = agg_intern_str(in, b, value, len, &kv[2 * *n + 1])))
        return rc;
    (*n)++;
    return 0;
}

#define MAX_KV (CM_MAX_LABELS_PER_SET + AGG_DIM_COUNT)

/* The process dimensions of chunk c (host, node, pod, container, pid, uid, pid-claimed) as
 * admitted (key, value) pairs into pkv (*np pairs). */
static int process_dims(agg_dims_t *d, agg_intern_t *in, agg_batch_t *b, const cm_chunk_t *c,
                        const agg_chunk_meta_t *meta, const agg_chunk_ids_t *ids, uint64_t *pkv,
                        uint32_t *np) {
    const cm_header_t *h = &c->header;
    int rc;
    char pid[16], uid[16] = "", claimed[16] = "";
    const char *host = meta && meta->host[0] ? meta->host : h->host.ptr ? h->host.ptr : "";
    /* The pid is the one the collector checked (SO_PEERCRED) when there is one; a chunk that
     * claims another (the agent's own pid is its namespace's: NSpid when the collector knew
     * it) keeps its claim in pid-claimed and is counted. */
    uint32_t p = h->pid;
    if (meta && meta->peer_pid) {
        uint32_t own = meta->peer_nspid ? meta->peer_nspid : meta->peer_pid;
        if (h->pid != own) {
            snprintf(claimed, sizeof claimed, "%u", h->pid);
            d->pid_mismatch++;
        }
        p = meta->peer_pid;
    }
    snprintf(pid, sizeof pid, "%u", p);
    if (meta && meta->has_peer_uid)
        snprintf(uid, sizeof uid, "%u", meta->peer_uid);
    const char *pv[AGG_DIM_PID_CLAIMED + 1] = {[AGG_DIM_HOST] = host,
                                               [AGG_DIM_NODE] = meta ? meta->node : "",
                                               [AGG_DIM_POD] = meta ? meta->pod : "",
                                               [AGG_DIM_CONTAINER] = meta ? meta->container : "",
                                               [AGG_DIM_PID] = p ? pid : "",
                                               [AGG_DIM_UID] = uid,
                                               [AGG_DIM_PID_CLAIMED] = claimed};
    for (int k = 0; k <= AGG_DIM_PID_CLAIMED; k++)
        if ((rc = add_dim(d, in, b, ids->service, h->start_unix_ns, (agg_dim_t)k, pv[k],
                          strlen(pv[k]), pkv, np)))
            return rc;
    return 0;
}

/* The label set of the rows of key ck (label set ls of the chunk): its application labels less
 * the keys the dimensions own (dimkey), the process pairs pkv[0..np), and the row's I/O target,
 * fd kind or lock address; into *id, with the set's base labels recorded when they differ. */
static int row_labelset(agg_dims_t *d, agg_intern_t *in, agg_batch_t *b, const cm_chunk_t *c,
                        const agg_chunk_ids_t *ids, const cache_key_t *ck, uint32_t ls,
                        const uint64_t *dimkey, const uint64_t *pkv, uint32_t np, uint64_t *id) {
    static const char *const kinds[] = {"", "file", "socket", "pipe", "other"};
    const cm_header_t *h = &c->header;
    uint64_t kv[2 * MAX_KV];
    uint32_t n = 0;
    int rc;
    /* the row's application labels, less the keys the dimensions own */
    if (ls && ls < in->n_sets)
        for (uint32_t j = ids->label_off[ls]; j < ids->label_off[ls + 1]; j++) {
            uint64_t key = ids->label_kv[2 * j];
            int owned = 0;
            for (int k = 0; k < AGG_DIM_COUNT; k++)
                owned |= key == dimkey[k];
            if (!owned && n < CM_MAX_LABELS_PER_SET) {
                kv[2 * n] = key;
                kv[2 * n + 1] = ids->label_kv[2 * j + 1];
                n++;
            }
        }
    memcpy(kv + 2 * n, pkv, 2 * np * sizeof *pkv);
    n += np;
    if (ck->target) {
        const cm_str_t *ts = &c->dict.strings[ck->target];
        if ((rc = add_dim(d, in, b, ids->service, h->start_unix_ns, AGG_DIM_IO_TARGET, ts->ptr,
                          ts->len, kv, &n)))
            return rc;
    }
    if (ck->fd && (rc = add_dim(d, in, b, ids->service, h->start_unix_ns, AGG_DIM_FD_KIND,
                                kinds[ck->fd], strlen(kinds[ck->fd]), kv, &n)))
        return rc;
    if (ck->address) {
        char a[24];
        int al = snprintf(a, sizeof a, "0x%llx", (unsigned long long)ck->address);
        if ((rc = add_dim(d, in, b, ids->service, h->start_unix_ns, AGG_DIM_LOCK, a, (size_t)al,
                          kv, &n)))
            return rc;
    }
    if ((rc = agg_intern_labelset(in, b, kv, n, id)))
        return rc;
    uint64_t base = ls && ls < in->n_sets ? ids->labels[ls] : 0;
    if (*id != base) { /* the tiers and the per-leaf rollup are keyed by base */
        agg_new_label_t *lb = AGG_VEC_PUSH(b->labelbase);
        if (!lb)
            return CM_ENOMEM;
        *lb = (agg_new_label_t){.set = *id, .value = base};
    }
    return 0;
}

int agg_dims_chunk(agg_dims_t *d, agg_intern_t *in, agg_batch_t *b, const cm_chunk_t *c,
                   const agg_chunk_meta_t *meta, agg_chunk_ids_t *ids) {
    const cm_dict_t *dc = &c->dict;
    uint64_t pkv[2 * AGG_DIM_COUNT], dimkey[AGG_DIM_COUNT];
    uint32_t np = 0;
    int rc;
    if ((rc = process_dims(d, in, b, c, meta, ids, pkv, &np)))
        return rc;
    for (int k = 0; k < AGG_DIM_COUNT; k++)
        dimkey[k] = agg_intern_string_id(agg_dim_names[k], strlen(agg_dim_names[k]));
    agg_hmap_clear(&d->cache);
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        const cm_samples_t *s = &c->samples[t];
        d->row_ptr[t] = NULL;
        if (!s->n)
            continue;
        if (s->n > d->rows_cap[t]) {
            uint64_t *r = realloc(d->rows[t], s->n * sizeof *r);
            if (!r)
                return CM_ENOMEM;
            d->rows[t] = r;
            d->rows_cap[t] = s->n;
        }
        int per_row = t == CM_EV_IO || t == CM_EV_LOCK;
        for (uint32_t i = 0; i < s->n; i++) {
            uint32_t ls = s->labels ? s->labels[i] : 0;
            cache_key_t ck = {ls, 0, 0, per_row ? t : 0, 0};
            if (t == CM_EV_IO) {
                ck.target = s->target ? s->target[i] : 0;
                ck.fd = s->fd_kind ? s->fd_kind[i] : 0;
                if (ck.target >= dc->n_strings)
                    ck.target = 0;
                if (ck.fd > CM_FD_OTHER)
                    ck.fd = 0;
            } else if (t == CM_EV_LOCK) {
                ck.address = s->address ? s->address[i] : 0;
            }
            int fresh;
            cache_ent_t *ce = agg_hmap_upsert(&d->cache, &ck, &fresh);
            if (!ce)
                return CM_ENOMEM;
            if (fresh) {
                uint64_t id;
                if ((rc = row_labelset(d, in, b, c, ids, &ck, ls, dimkey, pkv, np, &id)))
                    return rc;
                /* the entry pointer may move while interning: look it up again */
                ce = agg_hmap_find(&d->cache, &ck);
                ce->id = id;
            }
            d->rows[t][i] = ce->id;
        }
        d->row_ptr[t] = d->rows[t];
    }
    ids->row_labels = d->row_ptr;
    return 0;
}

int agg_dims_filtered(const char *label_key, const agg_qfilter_t *f, size_t n) {
    int any = label_key && agg_dim_by_name(label_key) >= 0;
    for (size_t i = 0; i < n; i++)
        any |= agg_dim_by_name(f[i].key) >= 0;
    return any;
}

int agg_dims_filter_sql(char *sql, size_t size, const char *col, const agg_qfilter_t *f,
                        size_t n, int first_param) {
    size_t len = 0;
    if (size)
        sql[0] = 0;
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(sql + len, size - len,
                         " AND %s IN (SELECT labelset FROM labels WHERE key=?%d AND value=?%d)",
                         col, first_param + 2 * (int)i, first_param + 2 * (int)i + 1);
        if (w < 0 || (size_t)w >= size - len)
            return -1;
        len += (size_t)w;
    }
    return (int)len;
}

void agg_dims_filter_bind(agg_qxst_t *st, const agg_qfilter_t *f, size_t n, int first_param) {
    for (size_t i = 0; i < n; i++) {
        agg_qx_bind_int64(st, first_param + 2 * (int)i,
                          (int64_t)agg_intern_string_id(f[i].key, strlen(f[i].key)));
        agg_qx_bind_int64(st, first_param + 2 * (int)i + 1,
                          (int64_t)agg_intern_string_id(f[i].value, strlen(f[i].value)));
    }
}
