/* The flight recorder: the last seconds of samples, kept in memory, sent only for an incident.
 *
 * Every CPU and wall record the background thread drains goes, with FLEETPROF_RECORDER=1, to a
 * second builder (at the recorder's own density, density.c; the always-on chunk gets the
 * stream's share), cut every second into a segment: a chunk encoded like any other
 * (dictionary, columns, LZ4) and kept in a ring bounded by time
 * (FLEETPROF_RECORDER_WINDOW) and bytes (FLEETPROF_RECORDER_MIB). Nothing of it leaves the
 * process until a trigger (triggers.c) calls ag_fr_capture: the ring stops ageing out, the
 * recorder keeps cutting for FLEETPROF_RECORDER_AFTER, then every segment held becomes one chunk
 * of the capture (cm_frame_add_incident: the Incident message with the id, trigger, threshold,
 * value, part of parts) and is handed to the sender a few at a time, so that the always-on
 * chunks never find its queue full. The ring is then emptied. A trigger within
 * FLEETPROF_TRIGGER_COOLDOWN of the last capture, or past FLEETPROF_CAPTURE_MAX captures, is
 * counted (drop reasons incident_cooldown, incident_cap), as is a captured segment the byte
 * bound pushed out (incident_lost). When the process exits (or dies of SIGTERM) during a
 * capture, its burst ends there and the capture goes out before the last always-on chunk
 * (ag_fr_exit): every chunk to the files; to the collector as many as its queue holds (the
 * newest seconds, as one complete capture), the rest counted incident_lost.
 * Background thread only, under ag_work_mu; nothing here runs in a signal handler.
 */
#include "recorder/incid.h"
#include "chunk.h"

#include "cm/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define AG_FR_SEG_NS 1000000000ull
#define AG_FR_SEGS 512 /* ring slots: a 300 s window plus a 60 s burst fits */
/* capture chunks in the sender's queue at most, leaving the rest to the always-on chunks */
#define AG_FR_QUEUE_SHARE (AG_QUEUE_MAX / 2)
/* file names of capture chunks: <service>-<pid>-<AG_FR_SEQ0 + capture x 1000 + part>.fpc */
#define AG_FR_SEQ0 1000000000000ull

typedef struct {
    uint8_t *frame;
    size_t len;
    uint64_t start, end;
} seg_t;

static struct {
    ag_builder_t *b;
    uint64_t seg_start, next_cut, cpu0, seg_seq, ended0;
    seg_t segs[AG_FR_SEGS]; /* oldest at head */
    uint32_t head, n;
    uint64_t bytes;
    uint32_t captures;
    uint64_t last_capture; /* mono time the last capture began, 0: none yet */
    int capturing;
    uint64_t until;
    cm_incident_t inc;
    char trigger[CM_MAX_TRIGGER_LEN + 1];
    seg_t *out; /* capture chunks not yet handed to the sender */
    uint32_t out_n, out_i;
} R;

static uint64_t process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Capture chunks not handed to the sender are lost (counted incident_lost). */
static void out_free(void) {
    if (R.out_n > R.out_i)
        ag_drop_count(0, CM_DROP_INCIDENT_LOST, R.out_n - R.out_i);
    for (uint32_t i = R.out_i; i < R.out_n; i++)
        free(R.out[i].frame);
    free(R.out);
    R.out = NULL;
    R.out_n = R.out_i = 0;
}

static void seg_drop_oldest(void) {
    seg_t *s = &R.segs[R.head];
    R.bytes -= s->len;
    free(s->frame);
    *s = (seg_t){0};
    R.head = (R.head + 1) % AG_FR_SEGS;
    R.n--;
}

void ag_fr_stop(void) {
    while (R.n)
        seg_drop_oldest();
    out_free();
    if (R.b)
        ag_builder_free(R.b);
    memset(&R, 0, sizeof R);
}

void ag_fr_start(uint64_t now_real) {
    ag_fr_stop(); /* a fork child's copy of its parent's state */
    if (!ag.cfg.incid.on)
        return;
    R.b = ag_builder_new();
    ag_rd_reset();
    R.seg_start = now_real;
    R.next_cut = ag_now_mono() + AG_FR_SEG_NS;
    R.cpu0 = process_cpu();
    ag_trig_reset(ag_now_mono());
    R.ended0 = ag_trig_requests_ended();
}

int ag_fr_capturing(void) { return R.capturing; }

int ag_fr_on(void) { return R.b != NULL; }

void ag_fr_add(const ag_thread_t *t, pid_t tid, const ag_rec_t *r) {
    if (!R.b)
        return;
    if (r->type == CM_EV_CPU || r->type == CM_EV_WALL)
        ag_builder_add(R.b, t, tid, r);
    else
        ag_trig_add_weight(r->type, r->weight); /* the baseline triggers' rates */
}

static void header(cm_header_t *h, uint64_t end, cm_sampling_t samp[2]) {
    ag_chunk_header_ids(h, R.seg_start, end, R.seg_seq);
    h->sequence = R.seg_seq++;
    uint32_t ns = 0;
    double d = ag_rd_split() ? ag_rd_density() : 1; /* the recorder's own density (density.c) */
    if (ag.cfg.cpu_rate > 0)
        samp[ns++] = (cm_sampling_t){CM_EV_CPU, (uint64_t)(ag.ctl[CM_EV_CPU].period / d), 0,
                                     (uint32_t)(ag.ctl[CM_EV_CPU].target * d + 0.5), 0,
                                     ag_builder_samples(R.b, CM_EV_CPU)};
    if (ag.cfg.wall_hz > 0)
        samp[ns++] = (cm_sampling_t){CM_EV_WALL, (uint64_t)(1e9 / ag.cfg.wall_hz), 0,
                                     (uint32_t)(ag.cfg.wall_hz * ag.cfg.wall_threads + 0.5), 0,
                                     ag_builder_samples(R.b, CM_EV_WALL)};
    h->sampling = samp;
    h->n_sampling = ns;
}

/* Encodes what the recorder holds since the last cut as one segment and ages the ring. */
static void cut_segment(void) {
    uint64_t end = ag_now_real(), cpu = process_cpu(), ended = ag_trig_requests_ended();
    if (end <= R.seg_start)
        end = R.seg_start + 1;
    const ag_incid_cfg_t *c = &ag.cfg.incid;
    if (ag_builder_samples(R.b, CM_EV_CPU) + ag_builder_samples(R.b, CM_EV_WALL)) {
        cm_header_t h;
        cm_sampling_t samp[2];
        header(&h, end, samp);
        h.process_cpu_ns = cpu - R.cpu0;
        h.work_units = ended - R.ended0; /* requests that ended in it */
        uint8_t *frame = NULL;
        size_t len = 0;
        char err[256] = "";
        if (ag_builder_finish(R.b, &h, &frame, &len, err, sizeof err) == 0) {
            if (R.n == AG_FR_SEGS)
                seg_drop_oldest();
            R.segs[(R.head + R.n) % AG_FR_SEGS] = (seg_t){frame, len, R.seg_start, end};
            R.n++;
            R.bytes += len;
        } else {
            CM_DEBUG("flight recorder: segment not encoded: %s", err);
        }
    }
    R.seg_start = end;
    R.cpu0 = cpu;
    R.ended0 = ended;
    while (R.n > 1 && (R.bytes > c->max_bytes ||
                       (!R.capturing && R.segs[R.head].end + c->window_ns < end))) {
        if (R.capturing)
            ag_drop_count(0, CM_DROP_INCIDENT_LOST, 1);
        seg_drop_oldest();
    }
}

int ag_fr_capture(const char *trigger, double threshold, double value) {
    if (!R.b)
        return -1;
    const ag_incid_cfg_t *c = &ag.cfg.incid;
    uint64_t now = ag_now_mono();
    int reason = 0;
    if (R.capturing || (R.last_capture && now - R.last_capture < c->cooldown_ns))
        reason = CM_DROP_INCIDENT_COOLDOWN;
    else if (R.captures >= c->max_captures)
        reason = CM_DROP_INCIDENT_CAP;
    if (reason) {
        ag_drop_count(0, (uint32_t)reason, 1);
        CM_DEBUG("incident trigger %s (%.3f, threshold %.3f) suppressed: %s", trigger, value,
                 threshold, cm_drop_reason_name((uint32_t)reason));
        return reason;
    }
    memset(&R.inc, 0, sizeof R.inc);
    if (getrandom(R.inc.id, sizeof R.inc.id, GRND_NONBLOCK) != (ssize_t)sizeof R.inc.id) {
        uint64_t x = now ^ ((uint64_t)ag.pid << 32) ^ R.captures;
        memcpy(R.inc.id, &x, 8);
        memcpy(R.inc.id + 8, &now, 8);
    }
    snprintf(R.trigger, sizeof R.trigger, "%s", trigger);
    R.inc.trigger = (cm_str_t){R.trigger, (uint32_t)strlen(R.trigger)};
    R.inc.threshold_milli = (uint64_t)(threshold * 1000 + 0.5);
    R.inc.value_milli = (uint64_t)(value * 1000 + 0.5);
    R.inc.trigger_unix_ns = ag_now_real();
    R.capturing = 1;
    R.until = now + c->after_ns;
    R.last_capture = now;
    R.captures++;
    CM_INFO("incident: trigger %s fired (value %.3f, threshold %.3f); capturing %.1f s before "
            "and %.1f s after", trigger, value, threshold,
            R.n ? (double)(R.inc.trigger_unix_ns - R.segs[R.head].start) / 1e9 : 0.0,
            (double)c->after_ns / 1e9);
    return 0;
}

/* The burst is over: every segment held, the newest max_parts at most (the older ones counted
 * incident_lost), becomes a chunk of the capture. */
static void finish_capture(uint32_t max_parts) {
    cut_segment();
    R.capturing = 0;
    out_free(); /* a capture still going out when the next ends: the rest is dropped */
    for (; R.n > max_parts && R.n > 1; seg_drop_oldest())
        ag_drop_count(0, CM_DROP_INCIDENT_LOST, 1);
    if (!R.n || !(R.out = calloc(R.n, sizeof *R.out)))
        return;
    R.inc.parts = R.n;
    R.inc.capture_start_unix_ns = R.segs[R.head].start;
    R.inc.capture_end_unix_ns = R.segs[(R.head + R.n - 1) % AG_FR_SEGS].end;
    for (uint32_t i = 0; R.n; i++) {
        seg_t *s = &R.segs[R.head];
        R.inc.part = i;
        char err[256] = "";
        seg_t o = {NULL, 0, s->start, s->end};
        if (cm_frame_add_incident(s->frame, s->len, &R.inc, &o.frame, &o.len, err, sizeof err)) {
            ag_drop_count(0, CM_DROP_INCIDENT_LOST, 1);
            CM_DEBUG("incident chunk %u not built: %s", i, err);
        } else {
            R.out[R.out_n++] = o;
        }
        seg_drop_oldest();
    }
}

/* Hands capture chunks to the sender while its queue is less than half full. */
static void send_some(void) {
    while (R.out_i < R.out_n && ag_sender_queued() < AG_FR_QUEUE_SHARE) {
        seg_t *o = &R.out[R.out_i++];
        ag_sender_submit(o->frame, o->len, AG_FR_SEQ0 + (uint64_t)R.captures * 1000u + R.out_i,
                         NULL, 0);
        o->frame = NULL;
    }
    if (R.out && R.out_i == R.out_n)
        out_free();
}

void ag_fr_tick(uint64_t now) {
    if (!R.b)
        return;
    ag_trig_eval(now);
    if (now >= R.next_cut) {
        uint64_t cpu0 = ag_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        cut_segment();
        ag_rd_charge(ag_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0); /* the recorder's budget */
        R.next_cut += AG_FR_SEG_NS;
        if (R.next_cut <= now)
            R.next_cut = now + AG_FR_SEG_NS;
    }
    if (R.capturing && now >= R.until)
        finish_capture(UINT32_MAX);
    send_some();
}

void ag_fr_exit(void) {
    if (!R.b)
        return;
    /* room left in the sender's queue, one slot kept for the last always-on chunk (cut after
     * this: it carries the counts of what did not fit) */
    uint32_t room = UINT32_MAX;
    if (ag_sender_uses_socket()) {
        uint32_t q = ag_sender_queued();
        room = q + 1 < AG_QUEUE_MAX ? AG_QUEUE_MAX - 1 - q : 0;
    }
    if (R.capturing) {
        CM_INFO("incident: the process exits during a capture's burst: sending what it holds");
        finish_capture(room);
    }
    for (; R.out_i < R.out_n && room; room--) {
        seg_t *o = &R.out[R.out_i++];
        ag_sender_submit(o->frame, o->len, AG_FR_SEQ0 + (uint64_t)R.captures * 1000u + R.out_i,
                         NULL, 0);
        o->frame = NULL;
    }
    out_free(); /* what did not fit: counted */
}
