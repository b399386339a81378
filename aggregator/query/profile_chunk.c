/* Fills a profile from decoded chunks: one chunk is one replicate (one process for one
 * interval), its work the interval in seconds. Handy for tests and a local-file CLI mode.
 * Threading: as profile.h (the profile is being built: one thread). */
#include "profile.h"

#include "cm/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *basename_of(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Interns the frame for chunk location loc (1-based; 0 = unknown). */
static int64_t chunk_frame(agg_profile_t *p, const cm_dict_t *d, uint32_t loc) {
    if (loc == 0 || loc >= d->n_locations)
        return agg_profile_frame(p, "[unknown]", NULL, NULL, 0);
    uint32_t f = d->location_function[loc], m = d->location_mapping[loc];
    uint64_t addr = d->location_address ? d->location_address[loc] : 0;
    const char *module = "";
    char bid[2 * CM_MAX_BUILD_ID + 1] = "";
    if (m && m < d->n_mappings) {
        const cm_mapping_t *mp = &d->mappings[m];
        if (mp->filename)
            module = basename_of(d->strings[mp->filename].ptr);
        if (mp->build_id_len && mp->build_id_len <= CM_MAX_BUILD_ID)
            cm_hex(mp->build_id, mp->build_id_len, bid);
    }
    char name[CM_MAX_STRING_LEN + 64];
    if (f && f < d->n_functions && d->function_name[f])
        snprintf(name, sizeof name, "%s", d->strings[d->function_name[f]].ptr);
    else if (module[0])
        snprintf(name, sizeof name, "%s+0x%" PRIx64, module, addr);
    else
        snprintf(name, sizeof name, "0x%" PRIx64, addr);
    int64_t fr = agg_profile_frame(p, name, module, bid, addr);
    if (fr >= 0 && f && f < d->n_functions && d->function_system_name)
        p->frames[fr].kind = agg_frame_kind(d->strings[d->function_system_name[f]].ptr);
    return fr;
}

int agg_profile_add_chunk(agg_profile_t *p, const cm_chunk_t *c) {
    uint64_t ns = c->header.end_unix_ns > c->header.start_unix_ns
                      ? c->header.end_unix_ns - c->header.start_unix_ns
                      : 0;
    return agg_profile_add_chunk_work(p, c, (double)ns / 1e9);
}

/* The bucket of a sample at time t in chunk c (0 without buckets; the last one takes what
 * lies past it). */
static uint32_t bucket_of(const cm_chunk_t *c, uint64_t bucket_ns, uint64_t t, uint32_t n) {
    uint64_t b = bucket_ns && t > c->header.start_unix_ns
                     ? (t - c->header.start_unix_ns) / bucket_ns
                     : 0;
    return b < n ? (uint32_t)b : n - 1;
}

/* Interns chunk c's replicate b of n: with bucket_ns, key "<chunk id>/<b>" and work the
 * bucket's seconds (the last bucket: the rest of the interval), else key the chunk id and
 * the work given. */
static int64_t bucket_rep(agg_profile_t *p, const cm_chunk_t *c, double work, uint64_t bucket_ns,
                          uint64_t len, uint32_t b, uint32_t n) {
    char key[2 * CM_CHUNK_ID_LEN + 16];
    cm_hex(c->header.chunk_id, CM_CHUNK_ID_LEN, key);
    if (bucket_ns) {
        uint64_t lo = (uint64_t)b * bucket_ns, hi = b + 1 == n ? len : lo + bucket_ns;
        snprintf(key + 2 * CM_CHUNK_ID_LEN, 16, "/%u", b);
        work = hi > lo ? (double)(hi - lo) / 1e9 : 0;
    }
    return agg_profile_replicate(p, key, work);
}

int agg_profile_add_chunk_work(agg_profile_t *p, const cm_chunk_t *c, double work) {
    return agg_profile_add_chunk_buckets(p, c, work, 0);
}

int agg_profile_add_chunk_buckets(agg_profile_t *p, const cm_chunk_t *c, double work,
                                  uint64_t bucket_ns) {
    const cm_samples_t *s = &c->samples[p->type];
    const cm_dict_t *d = &c->dict;
    int rc = 0;
    uint64_t len = c->header.end_unix_ns > c->header.start_unix_ns
                       ? c->header.end_unix_ns - c->header.start_unix_ns
                       : 0;
    if (!len || !s->time_ns)
        bucket_ns = 0;
    uint32_t n_reps = bucket_ns ? (uint32_t)((len + bucket_ns - 1) / bucket_ns) : 1;
    if (n_reps > AGG_CHUNK_BUCKETS_MAX) {
        n_reps = AGG_CHUNK_BUCKETS_MAX;
        bucket_ns = (len + n_reps - 1) / n_reps;
    }
    /* every bucket a replicate, samples or not (a bucket without any counts 0 for each) */
    uint32_t reps[AGG_CHUNK_BUCKETS_MAX];
    for (uint32_t b = 0; b < n_reps; b++) {
        int64_t r = bucket_rep(p, c, work, bucket_ns, len, b, n_reps);
        if (r < 0)
            return (int)r;
        reps[b] = (uint32_t)r;
    }
    if (c->header.start_unix_ns && (!p->time_start_ns || c->header.start_unix_ns < p->time_start_ns))
        p->time_start_ns = c->header.start_unix_ns;
    if (c->header.end_unix_ns > p->time_end_ns)
        p->time_end_ns = c->header.end_unix_ns;
    /* chunk stack id -> profile stack id, built on first use */
    uint32_t *map = malloc(((size_t)d->n_stacks + 1) * sizeof *map);
    uint32_t *frames = malloc(CM_MAX_STACK_DEPTH * sizeof *frames);
    if (!map || !frames) {
        rc = CM_ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < d->n_stacks; i++)
        map[i] = AGG_NONE;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t st = s->stack[i];
        if (st >= d->n_stacks) {
            rc = CM_ERANGE;
            goto out;
        }
        if (map[st] == AGG_NONE) {
            uint32_t n = 0;
            for (uint32_t k = d->stack_off[st]; k < d->stack_off[st + 1] && n < CM_MAX_STACK_DEPTH;
                 k++) {
                int64_t f = chunk_frame(p, d, d->stack_frames[k]);
                if (f < 0) {
                    rc = (int)f;
                    goto out;
                }
                frames[n++] = (uint32_t)f;
            }
            int64_t id = agg_profile_stack(p, frames, n);
            if (id < 0) {
                rc = (int)id;
                goto out;
            }
            map[st] = (uint32_t)id;
        }
        uint32_t ctx = 0;
        uint32_t ci = CM_COL(s, context, i);
        if (ci && ci < d->n_contexts) {
            const uint8_t *rec = d->contexts + (size_t)ci * CM_CONTEXT_SIZE;
            int64_t id = agg_profile_context(p, rec, rec + 16);
            if (id < 0) {
                rc = (int)id;
                goto out;
            }
            ctx = (uint32_t)id;
        }
        uint32_t rep = reps[bucket_of(c, bucket_ns, bucket_ns ? s->time_ns[i] : 0, n_reps)];
        if ((rc = agg_profile_add(p, map[st], s->weight[i], cm_samples_count(s, i), rep, ctx)))
            goto out;
    }
out:
    free(map);
    free(frames);
    return rc;
}
