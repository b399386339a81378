/* The server: opens the spool, the producer, the HTTP endpoints and the ingest socket on one
 * libuv loop, runs it, and drains on SIGTERM/SIGINT: stop taking chunks (agents keep what is
 * not acked), keep delivering from the spool until it is empty or drain-timeout has passed,
 * then close (undelivered records stay in the spool for the next start).
 *
 * Threading: runs on the thread that calls col_server_run; see internal.h for the others. */
#include "internal.h"

#include "cm/error.h"
#include "cm/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
    uv_loop_t loop;
    const col_config_t *cfg;
    col_spool_t *spool;
    col_producer_t *producer;
    col_ingest_t *ingest;
    col_control_t *control;
    uv_signal_t sigterm, sigint;
    uv_timer_t heartbeat, drain;
    uint64_t drain_deadline;
    int draining;
} server_t;

static void beat(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    col_gauge_set(&col_metrics.heartbeat_ms,
                  (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
}

static void on_heartbeat(uv_timer_t *t) { beat(); }

static void on_drain_tick(uv_timer_t *t) {
    server_t *s = t->data;
    if (col_producer_idle(s->producer) || uv_now(&s->loop) >= s->drain_deadline)
        uv_stop(&s->loop);
}

static void on_signal(uv_signal_t *h, int signum) {
    server_t *s = h->data;
    if (s->draining) {
        CM_WARN("msg=\"second signal: exiting now; undelivered chunks stay in the spool\"");
        uv_stop(&s->loop);
        return;
    }
    s->draining = 1;
    col_gauge_set(&col_metrics.draining, 1);
    CM_INFO("msg=\"draining\" signal=%s inflight=%llu drain_timeout_ms=%lld", strsignal(signum),
            (unsigned long long)col_producer_inflight(s->producer),
            (long long)(s->cfg->drain_timeout / 1000000));
    col_control_attach(s->control, NULL);
    col_ingest_stop(s->ingest);
    s->ingest = NULL;
    s->drain_deadline = uv_now(&s->loop) + (uint64_t)(s->cfg->drain_timeout / 1000000);
    uv_timer_start(&s->drain, on_drain_tick, 0, 20);
}

static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int col_server_run(const col_config_t *cfg, const cm_kvlist_t *kafka) {
    int code = 1, rc;
    char err[1024] = "";
    server_t s = {.cfg = cfg};
    col_http_t *http = NULL;
    col_node_ident_t node;
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    beat();
    uv_loop_init(&s.loop);
    if ((rc = col_spool_open(&s.loop, cfg, &s.spool, err, sizeof err)))
        goto out;
    if ((rc = col_enrich_node(cfg, &node, err, sizeof err)))
        goto out;
    if ((rc = col_producer_open(&s.loop, cfg, kafka, s.spool, &s.producer, err, sizeof err)))
        goto out;
    if ((rc = col_http_start(cfg, &http, err, sizeof err)))
        goto out;
    /* before the socket: once it accepts, a SIGTERM may come (the signal handlers follow) */
    if ((rc = col_control_open(&s.loop, cfg, kafka, node.collector, &s.control, err,
                               sizeof err)))
        goto out;
    if ((rc = col_ingest_start(&s.loop, cfg, &node, s.spool, s.producer, &s.ingest, err,
                               sizeof err)))
        goto out;
    col_control_attach(s.control, s.ingest);
    uv_signal_init(&s.loop, &s.sigterm);
    uv_signal_init(&s.loop, &s.sigint);
    s.sigterm.data = s.sigint.data = &s;
    uv_signal_start(&s.sigterm, on_signal, SIGTERM);
    uv_signal_start(&s.sigint, on_signal, SIGINT);
    uv_timer_init(&s.loop, &s.heartbeat);
    uv_timer_start(&s.heartbeat, on_heartbeat, 1000, 1000);
    uv_timer_init(&s.loop, &s.drain);
    s.drain.data = &s;
    CM_INFO("msg=\"collector started\" socket=%s spool_dir=%s brokers=%s topic=%s "
            "control_topic=%s id=%s http=%s version=%s",
            cfg->socket, cfg->spool_dir, cfg->brokers, cfg->topic, cfg->control_topic,
            node.collector, cfg->http_listen, FLEETPROF_VERSION_STRING);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    code = s.draining ? 0 : 70; /* stopped without a signal: fatal Kafka error */
    CM_INFO("msg=\"collector stopped\" delivered=%llu undelivered_in_spool=%llu",
            (unsigned long long)atomic_load(&col_metrics.chunks_out),
            (unsigned long long)atomic_load(&col_metrics.spool_pending));
    uv_close((uv_handle_t *)&s.sigterm, NULL);
    uv_close((uv_handle_t *)&s.sigint, NULL);
    uv_close((uv_handle_t *)&s.heartbeat, NULL);
    uv_close((uv_handle_t *)&s.drain, NULL);
out:
    if (rc)
        CM_ERROR("msg=\"cannot start\" err=\"%s\"", err[0] ? err : cm_strerror(rc));
    col_control_close(s.control);
    col_ingest_stop(s.ingest);
    col_http_stop(http);
    col_producer_close(s.producer);
    col_spool_close(s.spool);
    uv_run(&s.loop, UV_RUN_NOWAIT);
    if (uv_loop_close(&s.loop))
        CM_DEBUG("msg=\"loop closed with open handles\"");
    return code;
}
