/* Fleet simulator (see fleetsim.h). Threading: one simulator per thread. */
#include "fleetsim.h"

#include "cm/chunk.h"
#include "cm/wire.h"
#include "support/chunkgen.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One template per service: the processes of a service run the same code, so they share
 * functions and stacks; each chunk re-draws a quarter of its rows' stacks (per-process
 * variation) and all weights. */
#define TEMPLATES 1
#define RESTACK_FRAC 4 /* 1 row in 4 gets another stack of the service */

struct fsim {
    fsim_params_t p;
    cm_chunk_t **tmpl; /* services x TEMPLATES */
    uint32_t **stack0; /* per template and type: the generated stack column */
    uint64_t rng;
    char (*svc_names)[48];
    char (*ver_names)[48]; /* services x versions */
    fsim_sums_t *truth;    /* services x versions x CM_EV_COUNT */
    int64_t *agent_cpu;    /* services x versions */
    int64_t *work;         /* services x versions: units of work (service 0 only counts any) */
    fsim_counts_t counts;
    /* position */
    uint64_t round, proc, nprocs;
    uint8_t *frame;
    size_t frame_len;
    uint8_t *dup_frame; /* a chunk to send again after the next one */
    size_t dup_len;
    char dup_key[48];
    int pending_bad;
    char key[48];
    char host[32], pod[48]; /* of the current chunk (headers) */
    fsim_sums_t *truth_host; /* services x versions x CM_EV_COUNT x hosts (p.hosts > 0) */
    cm_drop_t drops[2];
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

fsim_t *fsim_new(const fsim_params_t *params) {
    fsim_t *s = calloc(1, sizeof *s);
    s->p = *params;
    fsim_params_t *p = &s->p;
    if (!p->interval_ns)
        p->interval_ns = 10000000000ull;
    if (!p->types_mask)
        p->types_mask = 0x7e;
    if (!p->stacks)
        p->stacks = 200;
    if (!p->start_unix_ns)
        p->start_unix_ns = now_ns() - p->intervals * p->interval_ns;
    s->rng = p->seed * 0x9E3779B97F4A7C15ull + 7;
    s->nprocs = (uint64_t)p->services * p->versions * p->processes;
    s->tmpl = calloc((size_t)p->services * TEMPLATES, sizeof *s->tmpl);
    s->stack0 = calloc((size_t)p->services * TEMPLATES * CM_EV_COUNT, sizeof *s->stack0);
    s->svc_names = calloc(p->services, sizeof *s->svc_names);
    s->ver_names = calloc((size_t)p->services * p->versions, sizeof *s->ver_names);
    s->truth = calloc((size_t)p->services * p->versions * CM_EV_COUNT, sizeof *s->truth);
    s->agent_cpu = calloc((size_t)p->services * p->versions, sizeof *s->agent_cpu);
    s->work = calloc((size_t)p->services * p->versions, sizeof *s->work);
    if (p->hosts)
        s->truth_host = calloc((size_t)p->services * p->versions * CM_EV_COUNT * p->hosts,
                               sizeof *s->truth_host);
    for (uint32_t i = 0; i < p->services; i++) {
        snprintf(s->svc_names[i], 48, "svc-%03u", i);
        for (uint32_t v = 0; v < p->versions; v++)
            snprintf(s->ver_names[i * p->versions + v], 48, "1.%u.%u", v, i % 3);
        for (uint32_t t = 0; t < TEMPLATES; t++) {
            ts_gen_params_t gp = ts_gen_realistic();
            gp.samples = p->samples;
            gp.stacks = p->stacks;
            gp.functions = p->stacks + 100;
            gp.min_depth = 8;
            gp.max_depth = 30;
            gp.types_mask = p->types_mask;
            gp.label_sets = 3;
            gp.contexts = 50;
            gp.interval_ns = p->interval_ns;
            cm_chunk_t *c = ts_gen_chunk(&gp, p->seed * 1000003ull + i * 17 + t);
            s->tmpl[i * TEMPLATES + t] = c;
            for (uint32_t ty = 1; ty <= CM_EV_MAX; ty++) {
                uint32_t **keep = &s->stack0[(i * TEMPLATES + t) * CM_EV_COUNT + ty];
                *keep = malloc(4 * (c->samples[ty].n + 1));
                if (c->samples[ty].n) /* a type left out by types_mask has no column */
                    memcpy(*keep, c->samples[ty].stack, 4 * c->samples[ty].n);
            }
        }
    }
    return s;
}

void fsim_free(fsim_t *s) {
    if (!s)
        return;
    for (size_t i = 0; i < (size_t)s->p.services * TEMPLATES; i++)
        if (s->tmpl[i])
            ts_gen_free(s->tmpl[i]);
    for (size_t i = 0; i < (size_t)s->p.services * TEMPLATES * CM_EV_COUNT; i++)
        free(s->stack0[i]);
    free(s->stack0);
    free(s->tmpl);
    free(s->svc_names);
    free(s->ver_names);
    free(s->truth);
    free(s->truth_host);
    free(s->agent_cpu);
    free(s->work);
    free(s->frame);
    free(s->dup_frame);
    free(s);
}

/* Makes the chunk of process `proc` for interval `round`, encodes it into s->frame. */
static int make_chunk(fsim_t *s, uint64_t round, uint64_t proc) {
    fsim_params_t *p = &s->p;
    uint32_t per_svc = p->versions * p->processes;
    uint32_t si = (uint32_t)(proc / per_svc), vi = (uint32_t)(proc % per_svc / p->processes);
    size_t ti = si * TEMPLATES + (proc + round) % TEMPLATES;
    cm_chunk_t *c = s->tmpl[ti];
    cm_header_t *h = &c->header;
    uint64_t start = p->start_unix_ns + round * p->interval_ns + (proc % 1000) * 1000000ull;
    int64_t shift = (int64_t)(start - h->start_unix_ns);
    h->start_unix_ns = start;
    h->end_unix_ns = start + p->interval_ns;
    h->service = (cm_str_t){s->svc_names[si], (uint32_t)strlen(s->svc_names[si])};
    const char *vn = s->ver_names[si * p->versions + vi];
    h->version = (cm_str_t){vn, (uint32_t)strlen(vn)};
    /* processes are spread over p->hosts hosts (process i on host i % hosts), each its own pod */
    if (p->hosts)
        snprintf(s->host, sizeof s->host, "sim-host-%u", (unsigned)(proc % p->hosts));
    else
        snprintf(s->host, sizeof s->host, "sim-host");
    snprintf(s->pod, sizeof s->pod, "sim/%s-%u", s->svc_names[si], (unsigned)proc);
    h->host = (cm_str_t){s->host, (uint32_t)strlen(s->host)};
    h->pid = (uint32_t)(1000 + proc);
    h->process_start_unix_ns = p->start_unix_ns - 1000000000ull;
    h->sequence = round;
    for (unsigned k = 0; k < CM_CHUNK_ID_LEN; k += 8) {
        uint64_t r = ts_rand(&s->rng);
        memcpy(h->chunk_id + k, &r, 8);
    }
    h->agent_cpu_ns = 1000000 + ts_randn(&s->rng, 5000000);
    h->process_cpu_ns = 1000000000ull + ts_randn(&s->rng, 4000000000ull);
    /* service 0 counts requests (fleetprof_work_done), the others count nothing */
    h->work_units = si == 0 ? 400 + (round * 7 + proc * 13) % 200 : 0;
    s->drops[0] = (cm_drop_t){CM_DROP_RING_FULL, CM_EV_CPU, ts_randn(&s->rng, 5)};
    s->drops[1] = (cm_drop_t){CM_DROP_SUBSAMPLED, CM_EV_ALLOC, ts_randn(&s->rng, 50)};
    h->drops = s->drops;
    h->n_drops = 2;
    for (uint32_t i = 0; i < c->spans.n; i++) /* the spans (minor 2) move with the interval */
        c->spans.start_unix_ns[i] = (uint64_t)((int64_t)c->spans.start_unix_ns[i] + shift);
    /* fresh span contexts for this chunk */
    uint8_t *ctx = (uint8_t *)c->dict.contexts;
    for (size_t i = CM_CONTEXT_SIZE; i < (size_t)c->dict.n_contexts * CM_CONTEXT_SIZE; i++)
        ctx[i] = (uint8_t)ts_rand(&s->rng);
    fsim_sums_t *tr = &s->truth[((size_t)si * p->versions + vi) * CM_EV_COUNT];
    /* version skew: later versions spend more in a few stacks, like a regression */
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        cm_samples_t *sm = &c->samples[t];
        const uint32_t *st0 = s->stack0[ti * CM_EV_COUNT + t];
        for (uint32_t i = 0; i < sm->n; i++) {
            sm->time_ns[i] = (uint64_t)((int64_t)sm->time_ns[i] + shift);
            /* another row's stack: per-process variation with the service's popularity */
            sm->stack[i] = ts_randn(&s->rng, RESTACK_FRAC) == 0 ? st0[ts_randn(&s->rng, sm->n)]
                                                                 : st0[i];
            uint64_t w = t == CM_EV_CPU || t == CM_EV_WALL ? 10000000ull : 1 + ts_randn(&s->rng, 1 << 20);
            if (t == CM_EV_CPU && vi > 0 && sm->stack[i] % 7 == 0)
                w += 10000000ull * vi / 2;
            if (t >= CM_EV_LOCK)
                w = 10000000ull + ts_randn(&s->rng, 100000000ull);
            sm->weight[i] = w;
            tr[t].weight += (int64_t)w;
            tr[t].count += (int64_t)cm_samples_count(sm, i);
            tr[t].rows++;
            if (s->truth_host) {
                fsim_sums_t *th = &s->truth_host[(((size_t)si * p->versions + vi) * CM_EV_COUNT +
                                                  t) * p->hosts + proc % p->hosts];
                th->weight += (int64_t)w;
                th->count += (int64_t)cm_samples_count(sm, i);
                th->rows++;
            }
            s->counts.samples++;
        }
    }
    s->agent_cpu[si * p->versions + vi] += (int64_t)h->agent_cpu_ns;
    s->work[si * p->versions + vi] += (int64_t)h->work_units;
    free(s->frame);
    s->frame = NULL;
    char err[256];
    if (cm_chunk_encode(c, &s->frame, &s->frame_len, err, sizeof err)) {
        fprintf(stderr, "fleetsim: encode failed: %s\n", err);
        return -1;
    }
    snprintf(s->key, sizeof s->key, "%s", s->svc_names[si]);
    s->counts.chunks++;
    return 0;
}

/* Replaces s->frame with a malformed message of the next kind. */
static void make_bad(fsim_t *s) {
    fsim_bad_t kind = (fsim_bad_t)(s->counts.bad[0] + s->counts.bad[1] + s->counts.bad[2] +
                                   s->counts.bad[3]) % FSIM_BAD_N;
    s->counts.bad[kind]++;
    switch (kind) {
    case FSIM_BAD_RANDOM: {
        size_t n = 10 + ts_randn(&s->rng, 500);
        for (size_t i = 0; i < n && i < s->frame_len; i++)
            s->frame[i] = (uint8_t)ts_rand(&s->rng);
        s->frame_len = n < s->frame_len ? n : s->frame_len;
        break;
    }
    case FSIM_BAD_TRUNCATED:
        s->frame_len = CM_FRAME_HEADER_SIZE + ts_randn(&s->rng, s->frame_len - CM_FRAME_HEADER_SIZE);
        break;
    case FSIM_BAD_MAJOR:
        s->frame[4] = CM_FORMAT_MAJOR + 1;
        break;
    case FSIM_BAD_CORRUPT:
        s->frame[CM_FRAME_HEADER_SIZE + ts_randn(&s->rng, s->frame_len - CM_FRAME_HEADER_SIZE)] ^=
            0x5a;
        break;
    default:
        break;
    }
}

int fsim_next(fsim_t *s, const uint8_t **frame, size_t *len, const char **key) {
    fsim_params_t *p = &s->p;
    if (s->pending_bad) {
        /* a malformed copy of the last chunk: build it from a fresh chunk we do not count */
        s->pending_bad = 0;
        fsim_sums_t *save = s->truth;
        size_t tn = (size_t)p->services * p->versions * CM_EV_COUNT;
        fsim_sums_t *scratch = calloc(tn, sizeof *scratch);
        int64_t *save_cpu = s->agent_cpu, *scratch_cpu = calloc((size_t)p->services * p->versions, 8);
        int64_t *save_work = s->work, *scratch_work = calloc((size_t)p->services * p->versions, 8);
        fsim_counts_t cs = s->counts;
        fsim_sums_t *save_host = s->truth_host;
        s->truth_host = NULL;
        s->truth = scratch;
        s->agent_cpu = scratch_cpu;
        s->work = scratch_work;
        int rc = make_chunk(s, s->round, s->proc % s->nprocs);
        s->truth = save;
        s->truth_host = save_host;
        s->agent_cpu = save_cpu;
        s->work = save_work;
        free(scratch);
        free(scratch_cpu);
        free(scratch_work);
        s->counts.chunks = cs.chunks;
        s->counts.samples = cs.samples;
        if (rc)
            return 0;
        make_bad(s);
        s->counts.messages++;
        *frame = s->frame;
        *len = s->frame_len;
        *key = s->key;
        return 1;
    }
    if (s->dup_frame && (s->proc % 3 == 0 || s->round >= p->intervals)) {
        free(s->frame);
        s->frame = s->dup_frame;
        s->frame_len = s->dup_len;
        s->dup_frame = NULL;
        snprintf(s->key, sizeof s->key, "%s", s->dup_key);
        s->counts.duplicates++;
        s->counts.messages++;
        *frame = s->frame;
        *len = s->frame_len;
        *key = s->key;
        return 1;
    }
    if (s->round >= p->intervals)
        return 0;
    if (make_chunk(s, s->round, s->proc))
        return 0;
    uint64_t n = s->counts.chunks;
    if (p->duplicate_every && n % p->duplicate_every == 0 && !s->dup_frame) {
        s->dup_frame = malloc(s->frame_len);
        memcpy(s->dup_frame, s->frame, s->frame_len);
        s->dup_len = s->frame_len;
        snprintf(s->dup_key, sizeof s->dup_key, "%s", s->key);
    }
    if (p->malformed_every && n % p->malformed_every == 0)
        s->pending_bad = 1;
    if (++s->proc == s->nprocs) {
        s->proc = 0;
        s->round++;
    }
    s->counts.messages++;
    *frame = s->frame;
    *len = s->frame_len;
    *key = s->key;
    return 1;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int fsim_produce(fsim_t *s, rd_kafka_t *rk, const char *topic, double rate) {
    const uint8_t *f;
    size_t len;
    const char *key;
    double t0 = mono_s();
    uint64_t sent = 0;
    while (fsim_next(s, &f, &len, &key)) {
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
                RD_KAFKA_V_VALUE((void *)f, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_HEADER(CM_HDR_HOST, s->host, -1),
                RD_KAFKA_V_HEADER(CM_HDR_POD, s->pod, -1), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                rd_kafka_poll(rk, 50);
                continue;
            }
            if (e) {
                fprintf(stderr, "fleetsim: produce failed: %s\n", rd_kafka_err2str(e));
                return -1;
            }
            break;
        }
        rd_kafka_poll(rk, 0);
        sent++;
        if (rate > 0) {
            double ahead = sent / rate - (mono_s() - t0);
            if (ahead > 0) {
                struct timespec ts = {(time_t)ahead, (long)((ahead - (time_t)ahead) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
    }
    if (rd_kafka_flush(rk, 120000)) {
        fprintf(stderr, "fleetsim: flush timed out\n");
        return -1;
    }
    return 0;
}

const fsim_sums_t *fsim_truth_host(const fsim_t *s, uint32_t si, uint32_t vi, uint32_t t,
                                   uint32_t host) {
    static const fsim_sums_t none;
    if (!s->truth_host || host >= s->p.hosts)
        return &none;
    return &s->truth_host[(((size_t)si * s->p.versions + vi) * CM_EV_COUNT + t) * s->p.hosts +
                          host];
}

const fsim_counts_t *fsim_counts(const fsim_t *s) { return &s->counts; }
const fsim_params_t *fsim_params(const fsim_t *s) { return &s->p; }
const fsim_sums_t *fsim_truth(const fsim_t *s, uint32_t si, uint32_t vi, uint32_t t) {
    return &s->truth[((size_t)si * s->p.versions + vi) * CM_EV_COUNT + t];
}
const char *fsim_service_name(const fsim_t *s, uint32_t si) { return s->svc_names[si]; }
const char *fsim_version_name(const fsim_t *s, uint32_t si, uint32_t vi) {
    return s->ver_names[si * s->p.versions + vi];
}
int64_t fsim_truth_work(const fsim_t *s, uint32_t si, uint32_t vi) {
    return s->work[si * s->p.versions + vi];
}

int64_t fsim_truth_agent_cpu(const fsim_t *s, uint32_t si, uint32_t vi) {
    return s->agent_cpu[si * s->p.versions + vi];
}

int fsim_truth_write(const fsim_t *s, const char *path) {
    json_t *root = json_object(), *rows = json_array(), *bad = json_object();
    static const char *const bad_names[] = {"random", "truncated", "major", "corrupt"};
    json_object_set_new(root, "seed", json_integer((json_int_t)s->p.seed));
    json_object_set_new(root, "messages", json_integer((json_int_t)s->counts.messages));
    json_object_set_new(root, "chunks", json_integer((json_int_t)s->counts.chunks));
    json_object_set_new(root, "duplicates", json_integer((json_int_t)s->counts.duplicates));
    json_object_set_new(root, "samples", json_integer((json_int_t)s->counts.samples));
    for (int k = 0; k < FSIM_BAD_N; k++)
        json_object_set_new(bad, bad_names[k], json_integer((json_int_t)s->counts.bad[k]));
    json_object_set_new(root, "malformed", bad);
    for (uint32_t si = 0; si < s->p.services; si++)
        for (uint32_t vi = 0; vi < s->p.versions; vi++)
            for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
                const fsim_sums_t *x = fsim_truth(s, si, vi, t);
                if (!x->rows)
                    continue;
                json_array_append_new(
                    rows, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "service",
                                    s->svc_names[si], "version", fsim_version_name(s, si, vi),
                                    "type", cm_event_name(t), "weight", (json_int_t)x->weight,
                                    "count", (json_int_t)x->count, "rows", (json_int_t)x->rows));
            }
    json_object_set_new(root, "totals", rows);
    int rc = json_dump_file(root, path, JSON_INDENT(1)) ? -1 : 0;
    if (rc)
        fprintf(stderr, "fleetsim: cannot write %s\n", path);
    json_decref(root);
    return rc;
}
