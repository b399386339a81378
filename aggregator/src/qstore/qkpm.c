/* KPM sums per process-interval from every store (qkpm.h). Host names come from the strings
 * the host dimension interned (else "host#<id>").
 * Threading: the handle's thread. */
#include "qkpm.h"

#include "batch.h"
#include "qstore_int.h"

#include "cm/array.h"
#include "cm/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define KPM_SUMS                                                                                   \
    "SUM(chunks), SUM(duration_ns), SUM(cpu_ns), SUM(agent_cpu_ns), SUM(cpu_sampled_ns), "         \
    "SUM(cpu_alloc_ns), SUM(cpu_kernel_ns), SUM(cpu_copy_ns), SUM(cpu_unwind_ns), "                \
    "SUM(cpu_agent_ns), SUM(alloc_bytes), SUM(alloc_count), SUM(inuse_bytes), "                    \
    "SUM(lock_wait_ns), SUM(lock_count), SUM(io_wait_ns), SUM(io_bytes), SUM(io_count), "          \
    "SUM(threads), SUM(dropped)"

static int cmp_pt(const void *a, const void *b) {
    const agg_kpm_point_t *x = a, *y = b;
    int c = strcmp(x->host, y->host);
    if (!c)
        c = CM_CMP(x->pid, y->pid);
    return c ? c : CM_CMP(x->bucket, y->bucket);
}

static void fill(agg_qxst_t *st, agg_kpm_point_t *p) {
    memset(p, 0, sizeof *p);
    p->bucket = agg_qx_int64(st, 0);
    p->width = agg_qx_int64(st, 1);
    const char *h = agg_qx_text(st, 2), *v = agg_qx_text(st, 5);
    if (h)
        snprintf(p->host, sizeof p->host, "%s", h);
    else
        snprintf(p->host, sizeof p->host, "host#%016" PRIx64, (uint64_t)agg_qx_int64(st, 3));
    p->pid = agg_qx_int64(st, 4);
    snprintf(p->version, sizeof p->version, "%s", v ? v : "");
    int64_t *s = (int64_t *)&p->s;
    for (size_t i = 0; i < sizeof p->s / sizeof(int64_t); i++)
        s[i] = agg_qx_int64(st, 6 + (int)i);
    agg_kpm_values(&p->s, p->v);
}

typedef AGG_VEC(agg_kpm_point_t) points_t;

static int read_one(qdb_t *d, const agg_kpmq_t *q, points_t *v) {
    agg_qxst_t *st;
    int rc = agg_qs_prep(d,
                         "SELECT k.bucket, k.width, h.s, k.host, k.pid, w.s, " KPM_SUMS
                         " FROM kpm k LEFT JOIN strings h ON h.id=k.host LEFT JOIN strings w ON "
                         "w.id=k.version WHERE k.service=?1 AND (?2=0 OR k.version=?2) AND "
                         "(?3=0 OR k.host=?3) AND (?4=0 OR k.pid=?4) AND k.bucket>=?5 AND "
                         "k.bucket<?6 GROUP BY k.bucket, k.width, h.s, k.host, k.pid, w.s",
                         &st);
    if (rc)
        return rc;
    B64(st, 1, agg_qs_sid(q->service));
    B64(st, 2, q->version ? agg_qs_sid(q->version) : 0);
    B64(st, 3, q->host ? agg_qs_sid(q->host) : 0);
    B64(st, 4, q->pid);
    B64(st, 5, q->from_s);
    B64(st, 6, q->to_s);
    int s;
    while ((s = agg_qx_step(st)) == 1) {
        agg_kpm_point_t *p = AGG_VEC_PUSH(*v);
        if (!p) {
            rc = CM_ENOMEM;
            break;
        }
        fill(st, p);
    }
    return agg_qs_end(st, s, rc);
}

int agg_qstore_kpm(agg_qstore_t *qs, const agg_kpmq_t *q, agg_kpm_point_t **out, size_t *n) {
    points_t v = {0};
    int rc = agg_qs_refresh(qs);
    for (size_t i = 0; !rc && i < qs->n; i++)
        rc = read_one(&qs->dbs[i], q, &v);
    if (rc) {
        free(v.v);
        return rc;
    }
    if (v.n)
        qsort(v.v, v.n, sizeof *v.v, cmp_pt);
    agg_kpm_growth(v.v, v.n);
    *out = v.v;
    *n = v.n;
    return 0;
}
