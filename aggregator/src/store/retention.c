/* Retention pass: downsample, expire (see retention.h). Threading: store owner's thread. */
#include "retention.h"

#include "cm/error.h"

#include <stdio.h>
#include <string.h>

int agg_retention_check(const agg_retention_cfg_t *c, char *err, size_t err_size) {
    if (c->fine_s <= 0 || c->coarse_s <= 0 || c->coarse_s % c->fine_s) {
        snprintf(err, err_size, "coarse-width %llds must be a positive multiple of fine-width %llds",
                 (long long)c->coarse_s, (long long)c->fine_s);
        return CM_ECONFIG;
    }
    if (c->max_age_s < c->downsample_after_s) {
        snprintf(err, err_size, "max-age %llds is shorter than downsample-after %llds; raise "
                 "max-age", (long long)c->max_age_s, (long long)c->downsample_after_s);
        return CM_ECONFIG;
    }
    return 0;
}

int agg_retention_run(agg_store_t *st, const agg_retention_cfg_t *c, int64_t now_ns,
                      agg_retention_stats_t *stats) {
    int64_t now_s = now_ns / 1000000000;
    int64_t ds = now_s - c->downsample_after_s;
    ds -= ((ds % c->coarse_s) + c->coarse_s) % c->coarse_s;
    int64_t exp = now_s - c->max_age_s;
    exp -= ((exp % c->coarse_s) + c->coarse_s) % c->coarse_s;
    int rc = st->vt->compact ? st->vt->compact(st, c->fine_s, now_s) : 0;
    if (rc)
        return rc;
    rc = agg_store_downsample(st, c->fine_s, c->coarse_s, ds, stats);
    if (rc)
        return rc;
    return agg_store_expire(st, exp, now_ns - c->span_max_age_s * 1000000000,
                            now_ns - c->dedupe_window_s * 1000000000, stats);
}
