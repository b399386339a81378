/* The query store's listings (query_store.h), part 3: versions of a service, time series of
 * totals (or of the per-stack rows under a label filter), spans ranked by cost, the profile of
 * one trace or span, and the rejected messages by reason.
 * Threading: a handle is used by one thread at a time. */
#define _GNU_SOURCE
#include "qstore_int.h"

#include "cm/error.h"
#include "cm/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- versions ---- */

void agg_qversions_free(agg_qversion_t *v, size_t n) {
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].service);
        free(v[i].version);
    }
    free(v);
}

static int cmp_version(const void *a, const void *b) {
    const agg_qversion_t *x = a, *y = b;
    int c = strcmp(x->service, y->service);
    if (c)
        return c;
    if (x->first_ns != y->first_ns)
        return x->first_ns < y->first_ns ? -1 : 1;
    return strcmp(x->version, y->version);
}

int agg_qstore_versions(agg_qstore_t *qs, const char *service, agg_qversion_t **out, size_t *n) {
    agg_qversion_t *v = NULL;
    size_t nv = 0, cap = 0;
    int rc = agg_qs_refresh(qs);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        qdb_t *d = &qs->dbs[i];
        agg_qxst_t *st = NULL, *tot = NULL, *iv = NULL;
        if ((rc = agg_qs_prep(d,
                       "SELECT v.service, v.version, a.s, b.s, first_ns, last_ns, chunks FROM "
                       "versions v LEFT JOIN strings a ON a.id=v.service LEFT JOIN strings b ON "
                       "b.id=v.version WHERE ?1=0 OR v.service=?1",
                       &st)) ||
            (rc = agg_qs_prep(d,
                       "SELECT type, SUM(weight), SUM(count), SUM(rows) FROM totals WHERE service=?1 AND "
                       "version=?2 GROUP BY type",
                       &tot)) ||
            (rc = agg_qs_prep(d,
                       !strcmp(agg_qs_work_units_col(d), "0")
                           ? "SELECT SUM(duration_ns), 0 FROM intervals WHERE service=?1 AND "
                             "version=?2"
                           : "SELECT SUM(duration_ns), SUM(work_units) FROM intervals WHERE "
                             "service=?1 AND version=?2",
                       &iv))) {
            agg_qx_finalize(st);
            agg_qx_finalize(tot);
            break;
        }
        B64(st, 1, service ? agg_qs_sid(service) : 0);
        int s;
        while ((s = agg_qx_step(st)) == 1) {
            const char *sn = agg_qx_text(st, 2);
            const char *vn = agg_qx_text(st, 3);
            sn = sn ? sn : "";
            vn = vn ? vn : "";
            agg_qversion_t *e = NULL;
            for (size_t k = 0; k < nv && !e; k++)
                if (!strcmp(v[k].service, sn) && !strcmp(v[k].version, vn))
                    e = &v[k];
            if (!e) {
                if (nv == cap && agg_vec_grow((void **)&v, &cap, sizeof *v)) {
                    rc = CM_ENOMEM;
                    break;
                }
                e = &v[nv++];
                memset(e, 0, sizeof *e);
                e->service = strdup(sn);
                e->version = strdup(vn);
                e->first_ns = agg_qx_int64(st, 4);
                if (!e->service || !e->version) {
                    rc = CM_ENOMEM;
                    break;
                }
            }
            int64_t f = agg_qx_int64(st, 4), l = agg_qx_int64(st, 5);
            if (f < e->first_ns)
                e->first_ns = f;
            if (l > e->last_ns)
                e->last_ns = l;
            e->chunks += agg_qx_int64(st, 6);
            agg_qx_reset(tot);
            B64(tot, 1, agg_qx_int64(st, 0));
            B64(tot, 2, agg_qx_int64(st, 1));
            while (agg_qx_step(tot) == 1) {
                int64_t t = agg_qx_int64(tot, 0);
                if (t > 0 && t < CM_EV_COUNT) {
                    e->weight[t] += (uint64_t)agg_qx_int64(tot, 1);
                    e->samples[t] += (uint64_t)agg_qx_int64(tot, 2) / CM_COUNT_ONE;
                    e->count[t] += (uint64_t)agg_qx_int64(tot, 2);
                    e->rows[t] += (uint64_t)agg_qx_int64(tot, 3);
                }
            }
            agg_qx_reset(iv);
            B64(iv, 1, agg_qx_int64(st, 0));
            B64(iv, 2, agg_qx_int64(st, 1));
            if (agg_qx_step(iv) == 1) {
                e->process_seconds += (double)agg_qx_int64(iv, 0) / 1e9;
                e->work_units += (uint64_t)agg_qx_int64(iv, 1);
            }
        }
        agg_qx_finalize(tot);
        agg_qx_finalize(iv);
        rc = agg_qs_end(st, s, rc);
    }
    if (rc) {
        agg_qversions_free(v, nv);
        return rc;
    }
    if (nv)
        qsort(v, nv, sizeof *v, cmp_version);
    *out = v;
    *n = nv;
    return 0;
}


/* ---- time series ---- */

void agg_qseries_free(agg_qseries_t *s) {
    for (size_t i = 0; i < s->n_strings; i++)
        free(s->strings[i]);
    free(s->strings);
    free(s->points);
    memset(s, 0, sizeof *s);
}

static const char *series_string(agg_qseries_t *s, const char *v) {
    for (size_t i = 0; i < s->n_strings; i++)
        if (!strcmp(s->strings[i], v))
            return s->strings[i];
    char **ns = realloc(s->strings, (s->n_strings + 1) * sizeof *ns);
    if (!ns)
        return NULL;
    s->strings = ns;
    if (!(ns[s->n_strings] = strdup(v)))
        return NULL;
    return ns[s->n_strings++];
}

static int cmp_point(const void *a, const void *b) {
    const agg_qpoint_t *x = a, *y = b;
    int c = strcmp(x->version, y->version);
    if (c)
        return c;
    if (x->bucket != y->bucket)
        return x->bucket < y->bucket ? -1 : 1;
    return x->width < y->width ? -1 : x->width > y->width;
}

int agg_qstore_timeseries(agg_qstore_t *qs, const char *service, cm_event_type_t type,
                          int64_t from_s, int64_t to_s, agg_qseries_t *out) {
    return agg_qstore_timeseries_label(qs, service, type, from_s, to_s, NULL, NULL, NULL, 0, out);
}

int agg_qstore_timeseries_label(agg_qstore_t *qs, const char *service, cm_event_type_t type,
                                int64_t from_s, int64_t to_s, const char *label_key,
                                const char *label_value, const agg_qfilter_t *filters,
                                size_t n_filters, agg_qseries_t *out) {
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    int rc = agg_qs_refresh(qs);
    agg_qfilter_t f[AGG_QMAX_FILTERS + 1];
    size_t nf = 0;
    char fsql[AGG_QMAX_FILTERS * 100 + 100], sql[sizeof fsql + 512];
    if (label_key && label_value)
        f[nf++] = (agg_qfilter_t){label_key, label_value};
    for (size_t i = 0; i < n_filters && nf <= AGG_QMAX_FILTERS; i++)
        f[nf++] = filters[i];
    if (n_filters > AGG_QMAX_FILTERS ||
        agg_dims_filter_sql(fsql, sizeof fsql, "t.labels", f, nf, QFILTER_PARAM) < 0)
        return CM_EINVAL;
    /* with a label or dimension: the per-stack rows (each sample is in exactly one profile row,
     * fine or downsampled) of the label sets holding them, summed per bucket */
    snprintf(sql, sizeof sql,
             nf ? "SELECT b.s, t.bucket, t.width, SUM(t.weight), SUM(t.count) FROM profile t "
                  "LEFT JOIN strings b ON b.id=t.version WHERE t.service=?1 AND t.type=?2 AND "
                  "t.bucket>=?3 AND t.bucket<?4%s GROUP BY t.version, b.s, t.width, t.bucket"
                : "SELECT b.s, t.bucket, t.width, t.weight, t.count FROM totals t LEFT JOIN "
                  "strings b ON b.id=t.version WHERE t.service=?1 AND t.type=?2 AND "
                  "t.bucket>=?3 AND t.bucket<?4%s",
             fsql);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        agg_qxst_t *st;
        if ((rc = agg_qs_prep(&qs->dbs[i], sql, &st)))
            break;
        B64(st, 1, agg_qs_sid(service));
        B64(st, 2, type);
        B64(st, 3, from_s);
        B64(st, 4, to_s);
        agg_dims_filter_bind(st, f, nf, QFILTER_PARAM);
        int s;
        while ((s = agg_qx_step(st)) == 1) {
            const char *v = agg_qx_text(st, 0);
            if (out->n == cap && agg_vec_grow((void **)&out->points, &cap, sizeof *out->points)) {
                rc = CM_ENOMEM;
                break;
            }
            agg_qpoint_t *pt = &out->points[out->n];
            if (!(pt->version = series_string(out, v ? v : ""))) {
                rc = CM_ENOMEM;
                break;
            }
            pt->bucket = agg_qx_int64(st, 1);
            pt->width = agg_qx_int64(st, 2);
            pt->weight = (uint64_t)agg_qx_int64(st, 3);
            pt->count = (uint64_t)agg_qx_int64(st, 4);
            out->n++;
        }
        rc = agg_qs_end(st, s, rc);
    }
    if (rc) {
        agg_qseries_free(out);
        return rc;
    }
    if (out->n)
        qsort(out->points, out->n, sizeof *out->points, cmp_point);
    return 0;
}

/* ---- spans ---- */

int agg_qstore_spans(agg_qstore_t *qs, const char *service, int64_t from_ns, int64_t to_ns,
                     cm_event_type_t type, size_t limit, agg_span_cost_t **out, size_t *n) {
    static const char *const col[] = {"rows", "cpu", "wall", "alloc", "inuse", "lock", "io"};
    agg_span_cost_t *v = NULL;
    size_t nv = 0, cap = 0;
    int rc = agg_qs_refresh(qs);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT trace, span, first_ns, last_ns, cpu, wall, alloc, inuse, lock, io, rows "
                 "FROM spans WHERE service=?1 AND last_ns>=?2 AND first_ns<?3 ORDER BY %s DESC, "
                 "trace, span LIMIT ?4", /* a total order: ties cut alike by every backend */
                 col[(unsigned)type < CM_EV_COUNT ? type : 0]);
        agg_qxst_t *st;
        if ((rc = agg_qs_prep(&qs->dbs[i], sql, &st)))
            break;
        B64(st, 1, agg_qs_sid(service));
        B64(st, 2, from_ns);
        B64(st, 3, to_ns);
        B64(st, 4, limit ? (int64_t)limit : -1);
        int s;
        while ((s = agg_qx_step(st)) == 1) {
            if (nv == cap && agg_vec_grow((void **)&v, &cap, sizeof *v)) {
                rc = CM_ENOMEM;
                break;
            }
            agg_span_cost_t *c = &v[nv++];
            memset(c, 0, sizeof *c);
            agg_qs_col_ids(st, 0, c->trace_id, c->span_id);
            c->start_ns = (uint64_t)agg_qx_int64(st, 2);
            c->end_ns = (uint64_t)agg_qx_int64(st, 3);
            for (int t = 1; t <= CM_EV_MAX; t++)
                c->value[t] = (uint64_t)agg_qx_int64(st, 3 + t);
            c->count[0] = (uint64_t)agg_qx_int64(st, 10) * CM_COUNT_ONE;
        }
        rc = agg_qs_end(st, s, rc);
    }
    if (rc) {
        free(v);
        return rc;
    }
    size_t k = nv ? agg_span_rank(v, nv, type, limit) : 0;
    *out = v;
    *n = k;
    return 0;
}

int agg_qstore_span_profile(agg_qstore_t *qs, const uint8_t *trace, const uint8_t *span,
                            cm_event_type_t type, agg_profile_t **out, int *found) {
    return agg_qstore_span_profile_of(qs, NULL, trace, span, type, out, found);
}

int agg_qstore_span_profile_of(agg_qstore_t *qs, const char *service, const uint8_t *trace,
                               const uint8_t *span, cm_event_type_t type, agg_profile_t **out,
                               int *found) {
    *found = 0;
    if (!trace && !span)
        return CM_EINVAL;
    agg_profile_t *p;
    int64_t rep;
    int rc = agg_qs_profile_begin(qs, type, "span", &p, &rep);
    if (rc)
        return rc;
    for (size_t i = 0; !rc && i < qs->n; i++) {
        qdb_t *d = &qs->dbs[i];
        agg_qxst_t *ids = NULL, *st = NULL;
        /* the service's parameter takes the first free number: a backend numbers them all */
        const char *q =
            trace && span ? (service ? "SELECT trace, span FROM spans WHERE trace=?1 AND span=?2 "
                                       "AND service=?3"
                                     : "SELECT trace, span FROM spans WHERE trace=?1 AND span=?2")
            : trace ? (service ? "SELECT trace, span FROM spans WHERE trace=?1 AND service=?2"
                               : "SELECT trace, span FROM spans WHERE trace=?1")
                    : (service ? "SELECT trace, span FROM spans WHERE service=?1 AND span=?2"
                               : "SELECT trace, span FROM spans WHERE span=?2");
        if ((rc = agg_qs_prep(d, q, &ids)))
            break;
        if (service)
            B64(ids, trace && span ? 3 : trace ? 2 : 1, agg_qs_sid(service));
        if ((rc = agg_qs_prep(d,
                       "SELECT stack, SUM(weight), SUM(count) FROM span_stacks WHERE trace=?1 AND "
                       "span=?2 AND type=?3 GROUP BY stack ORDER BY stack",
                       &st))) {
            agg_qx_finalize(ids);
            break;
        }
        if (trace)
            agg_qx_bind_blob(ids, 1, trace, 16);
        if (span)
            agg_qx_bind_blob(ids, 2, span, 8);
        int s;
        while (!rc && (s = agg_qx_step(ids)) == 1) {
            size_t tl = 0, sl = 0;
            const void *tb = agg_qx_blob(ids, 0, &tl), *sb = agg_qx_blob(ids, 1, &sl);
            if (!tb || !sb || tl != 16 || sl != 8)
                continue;
            *found = 1;
            uint8_t tr[16], sp[8];
            memcpy(tr, tb, 16);
            memcpy(sp, sb, 8);
            int64_t ctx = agg_profile_context(p, tr, sp);
            if (ctx < 0) {
                rc = (int)ctx;
                break;
            }
            agg_qx_reset(st);
            agg_qx_bind_blob(st, 1, tr, 16);
            agg_qx_bind_blob(st, 2, sp, 8);
            B64(st, 3, type);
            rc = agg_qs_add_stack_rows(d, p, st, (uint32_t)rep, (uint32_t)ctx);
        }
        agg_qx_finalize(st);
        agg_qx_finalize(ids);
    }
    return agg_qs_profile_end(p, rc, out);
}


void agg_qrejects_free(agg_qreject_t *r, size_t n) {
    for (size_t i = 0; r && i < n; i++)
        free(r[i].reason);
    free(r);
}

static int cmp_reject(const void *a, const void *b) {
    return strcmp(((const agg_qreject_t *)a)->reason, ((const agg_qreject_t *)b)->reason);
}

int agg_qstore_rejects(agg_qstore_t *qs, agg_qreject_t **out, size_t *n) {
    agg_qreject_t *r = NULL;
    size_t nr = 0, cap = 0;
    int rc = agg_qs_refresh(qs);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        agg_qxst_t *st = NULL;
        if ((rc = agg_qs_prep(&qs->dbs[i], "SELECT reason, count FROM rejects", &st)))
            break;
        int s = 0;
        while (!rc && (s = agg_qx_step(st)) == 1) {
            const char *why = agg_qx_text(st, 0);
            why = why ? why : "";
            agg_qreject_t *e = NULL;
            for (size_t k = 0; k < nr && !e; k++)
                if (!strcmp(r[k].reason, why))
                    e = &r[k];
            if (!e) {
                if (nr == cap && agg_vec_grow((void **)&r, &cap, sizeof *r)) {
                    rc = CM_ENOMEM;
                    break;
                }
                e = &r[nr];
                if (!(e->reason = strdup(why))) {
                    rc = CM_ENOMEM;
                    break;
                }
                e->count = 0;
                nr++;
            }
            e->count += (uint64_t)agg_qx_int64(st, 1);
        }
        rc = agg_qs_end(st, s, rc);
    }
    if (rc) {
        agg_qrejects_free(r, nr);
        return rc;
    }
    if (nr)
        qsort(r, nr, sizeof *r, cmp_reject);
    *out = r;
    *n = nr;
    return 0;
}

