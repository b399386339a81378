/* fleetprof-aggregator: parses arguments, loads the configuration, starts the HTTP server
 * (/metrics, /healthz) and runs the consume loop until SIGTERM or SIGINT.
 * Threading: main thread runs the consume loop; libmicrohttpd runs its own thread. */
#include "api.h"
#include "auth.h"
#include "captures.h"
#include "webhook.h"
#include "store_pg.h"
#include "consume.h"
#include "dims.h"
#include "http.h"
#include "ui.h"
#include "metrics.h"
#include "pattern.h"
#include "reports.h"
#include "symbolizer.h"
#include "symstore.h"

#include "cm/chunk.h"
#include "cm/config.h"
#include "cm/error.h"
#include "cm/log.h"
#include "cm/wire.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *brokers, *group, *topic, *dlq_topic, *store_dir, *store, *client_id, *strategy;
    char *http_addr, *http_hosts, *log_level, *api_token, *api_token_file, *report_fold;
    int api_no_token;
    char *debuginfod_urls, *debuginfod_cache;
    int64_t debuginfod_timeout, debuginfod_retry, debuginfod_max_size, debuginfod_cache_size;
    int64_t report_min_samples, report_interval;
    int64_t http_port, http_header_timeout, http_per_address;
    int64_t api_workers, api_queue, api_queue_wait;
    int64_t batch_max_messages, batch_max_samples, batch_interval;
    int64_t fine_width, coarse_width, replicate_width, downsample_after, max_age, span_max_age, dedupe_window;
    int64_t retention_interval;
    int span_index, fn_stats;
    int64_t dim_limit, dim_target_limit;
    char *dimensions;
    char *control_topic, *webhooks;
    int64_t capture_rate, webhook_timeout;
} agg_cfg_t;

#define O(f) offsetof(agg_cfg_t, f)
#define DAY "86400"
static const cm_opt_t opts[] = {
    {"brokers", CM_OPT_STRING, "127.0.0.1:9092", O(brokers), 0, 0, "Kafka bootstrap servers"},
    {"group", CM_OPT_STRING, "fleetprof-aggregator", O(group), 0, 0, "Kafka consumer group"},
    {"topic", CM_OPT_STRING, CM_TOPIC_CHUNKS, O(topic), 0, 0, "topic of chunk frames"},
    {"dlq-topic", CM_OPT_STRING, CM_TOPIC_DLQ, O(dlq_topic), 0, 0,
     "dead-letter topic for messages that fail validation"},
    {"control-topic", CM_OPT_STRING, CM_TOPIC_CONTROL, O(control_topic), 0, 0,
     "topic of capture commands (POST /api/v1/captures, `fleetprof capture`), read by every "
     "collector; 'off' disables captures"},
    {"capture-rate", CM_OPT_INT, "30", O(capture_rate), 1, 100000,
     "capture commands accepted a minute, all clients together (beyond: 429)"},
    {"webhooks", CM_OPT_STRING, "", O(webhooks), 0, 0,
     "SERVICE=URL,...: each stored incident of SERVICE is POSTed as JSON to URL (* = every "
     "service); empty: none"},
    {"webhook-timeout", CM_OPT_DURATION, "5s", O(webhook_timeout), 100000000ll, 60000000000ll,
     "time for one webhook POST (3 attempts at most)"},
    {"store-dir", CM_OPT_STRING, "/var/lib/fleetprof/aggregator", O(store_dir), 0, 0,
     "directory of the per-partition SQLite stores, shared by the instances of the group"},
    {"store", CM_OPT_STRING, "", O(store), 0, 0,
     "empty: one SQLite file per partition in store-dir; postgres://USER@HOST:PORT/DB: one "
     "PostgreSQL database for every partition and instance (store-dir then holds only this "
     "instance's reports and caches)"},
    {"client-id", CM_OPT_STRING, "fleetprof-aggregator", O(client_id), 0, 0,
     "Kafka client id (shows in consumer-group tooling)"},
    {"assignment-strategy", CM_OPT_STRING, "cooperative-sticky", O(strategy), 0, 0,
     "partition.assignment.strategy: cooperative-sticky, range or roundrobin"},
    {"http-addr", CM_OPT_STRING, "127.0.0.1", O(http_addr), 0, 0,
     "HTTP listen address (IPv4); any other than loopback needs api-token or api-no-token"},
    {"http-port", CM_OPT_INT, "9402", O(http_port), 0, 65535, "HTTP port (0: any free port)"},
    {"http-allowed-hosts", CM_OPT_STRING, "", O(http_hosts), 0, 0,
     "Host names the HTTP server answers to besides IP addresses, localhost and *.localhost "
     "(comma-separated; '.example.com': it and its subdomains; '*': any); others get 403, "
     "a guard against DNS rebinding"},
    {"http-header-timeout", CM_OPT_DURATION, "10s", O(http_header_timeout), 100000000ll,
     600000000000ll, "longest a connection may take to send a request's whole header, from its "
     "accept or its previous answer (not reset by each byte); then it is closed"},
    {"http-max-per-address", CM_OPT_INT, "128", O(http_per_address), 1,
     AGG_HTTP_MAX_CONNECTIONS, "connections one client address may hold; at the cap its "
     "longest-idle one is closed to admit a new one"},
    {"api-token", CM_OPT_STRING, "", O(api_token), 0, 0,
     "token the query API and the web UI at / require ('Authorization: Bearer TOKEN' or the "
     "UI's login cookie; empty: no token); on the command line it shows in ps: prefer "
     "api-token-file or FLEETPROF_AGGREGATOR_API_TOKEN"},
    {"api-token-file", CM_OPT_STRING, "", O(api_token_file), 0, 0,
     "file holding the API token (its first line); instead of api-token"},
    {"api-no-token", CM_OPT_BOOL, "false", O(api_no_token), 0, 0,
     "serve the query API without a token on a non-loopback http-addr (refused otherwise)"},
    {"api-workers", CM_OPT_INT, "8", O(api_workers), 1, 256,
     "query API requests that run at once, each on its own read-only store handle"},
    {"api-queue", CM_OPT_INT, "64", O(api_queue), 0, 100000,
     "requests that may wait for a busy query worker; more are answered 503 at once"},
    {"api-queue-wait", CM_OPT_DURATION, "10s", O(api_queue_wait), 1000000ll, 600000000000ll,
     "longest a request waits for a query worker before it is answered 503"},
    {"report-min-samples", CM_OPT_INT, "0", O(report_min_samples), 0, 1000000000,
     "CPU samples the newest version of a service (and the previous one) need before the "
     "per-deploy regression report is computed; 0: what a new function taking 2 % of the CPU "
     "needs to be found with 90 % probability (about 900)"},
    {"report-fold", CM_OPT_STRING, "", O(report_fold), 0, 0,
     "extended regex of frames folded into their callers before a report's diff (a shared "
     "helper such as 'burn$' whose cost belongs to each caller); empty: none"},
    {"report-interval", CM_OPT_DURATION, "30s", O(report_interval), 0, 86400000000000ll,
     "how often to look for versions ready for a regression report (0: never)"},
    {"log-level", CM_OPT_STRING, "info", O(log_level), 0, 0, "debug, info, warn or error"},
    {"debuginfod-urls", CM_OPT_STRING, "", O(debuginfod_urls), 0, 0,
     "debuginfod servers (space-separated) that name frames which arrived unnamed, by build "
     "id, at their first query; empty: DEBUGINFOD_URLS, and off when that is unset too"},
    {"debuginfod-cache", CM_OPT_STRING, "", O(debuginfod_cache), 0, 0,
     "directory of downloaded debug files (empty: <store-dir>/debuginfod-cache)"},
    {"debuginfod-timeout", CM_OPT_DURATION, "5s", O(debuginfod_timeout), 100000000ll,
     600000000000ll, "longest one debug-file download may take, connecting included"},
    {"debuginfod-max-size", CM_OPT_SIZE, "512MiB", O(debuginfod_max_size), 1024, 1ll << 40,
     "largest debug file fetched (X-DEBUGINFOD-MAXSIZE header); larger ones are refused"},
    {"debuginfod-cache-size", CM_OPT_SIZE, "2GiB", O(debuginfod_cache_size), 1ll << 20, 1ll << 44,
     "debug files kept open (an fd and a mapping each) and in debuginfod-cache; past it the "
     "least recently used are closed and deleted"},
    {"debuginfod-retry", CM_OPT_DURATION, "1m", O(debuginfod_retry), 1000000000ll,
     86400000000000ll, "a build id no server could give is not asked again for this long"},
    {"batch-max-messages", CM_OPT_INT, "500", O(batch_max_messages), 1, 1000000,
     "write a partition's batch after this many messages"},
    {"batch-max-samples", CM_OPT_INT, "2000000", O(batch_max_samples), 1, 1000000000,
     "write a partition's batch after this many sample rows"},
    {"batch-interval", CM_OPT_DURATION, "1s", O(batch_interval), 1000000, 3600000000000ll,
     "write a partition's batch at most this long after its first message"},
    {"fine-width", CM_OPT_DURATION, "10s", O(fine_width), 1000000000ll, 86400000000000ll,
     "width of the fine time buckets"},
    {"coarse-width", CM_OPT_DURATION, "1h", O(coarse_width), 1000000000ll, 30 * 86400000000000ll,
     "width of the coarse (downsampled) buckets; a multiple of fine-width"},
    {"replicate-width", CM_OPT_DURATION, "0", O(replicate_width), 0, 86400000000000ll,
     "bucket width of the per-leaf rollup that diffs take their replicates from: a multiple "
     "of fine-width dividing coarse-width; 0: 1m when that fits, else fine-width"},
    {"downsample-after", CM_OPT_DURATION, "6h", O(downsample_after), 0, 3650 * 86400000000000ll,
     "age after which fine buckets are merged into coarse ones"},
    {"max-age", CM_OPT_DURATION, "30d", O(max_age), 0, 3650 * 86400000000000ll,
     "age after which rollups are deleted"},
    {"span-max-age", CM_OPT_DURATION, "1d", O(span_max_age), 0, 3650 * 86400000000000ll,
     "how long the span index keeps a span"},
    {"dedupe-window", CM_OPT_DURATION, "2d", O(dedupe_window), 60000000000ll,
     3650 * 86400000000000ll, "how long chunk ids are remembered to drop duplicates"},
    {"retention-interval", CM_OPT_DURATION, "1m", O(retention_interval), 0, 86400000000000ll,
     "how often the retention pass runs (0: never)"},
    {"span-index", CM_OPT_BOOL, "true", O(span_index), 0, 0,
     "index samples that carry a trace/span context"},
    {"fn-stats", CM_OPT_BOOL, "true", O(fn_stats), 0, 0,
     "keep per-function per-chunk share statistics for significance tests in diffs"},
    {"dimensions", CM_OPT_STRING, "all", O(dimensions), 0, 0,
     "dimensions stored with each sample row (comma-separated: host, node, pod, container, "
     "pid, uid, pid-claimed, io-target, fd-kind, lock; or all, none). Each one that differs between the "
     "processes of a service multiplies its rows (see README, Dimensions)"},
    {"dimension-limit", CM_OPT_INT, "1000", O(dim_limit), 1, 1000000,
     "distinct values of host, node, pod, container, pid, uid and pid-claimed kept per service and coarse "
     "bucket; later ones are stored as '(other)' and counted"},
    {"dimension-target-limit", CM_OPT_INT, "200", O(dim_target_limit), 1, 1000000,
     "distinct I/O targets (paths, peers) and lock addresses kept per service and coarse "
     "bucket; later ones are stored as '(other)' and counted"},
    {0},
};

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) {
    (void)sig;
    stop_flag = 1;
}

typedef struct {
    agg_metrics_t *metrics;
    agg_api_t *api;
    agg_http_t **http;
    agg_captures_t *captures;
    agg_webhook_t *webhook;
} metrics_src_t;

/* The symbol store's, the symbolizer's and the UI login's counters, appended to /metrics. */
static char *symbol_metrics(char *body) {
    agg_symstore_stats_t ss;
    agg_symbolizer_stats_t zs;
    agg_symstore_stats(&ss);
    agg_symbolizer_stats(&zs);
    const struct {
        const char *name, *help;
        uint64_t v;
    } c[] = {
        {"symbols_queued_total", "unnamed locations queued at ingest for the symbol store", ss.queued},
        {"symbols_dropped_total", "unnamed locations not queued (queue full; named at query)", ss.dropped},
        {"symbols_store_hits_total", "lookups answered by symbols.sqlite", ss.hits},
        {"symbols_store_misses_total", "lookups symbols.sqlite had no answer for", ss.misses},
        {"symbols_stored_total", "names written to symbols.sqlite", ss.stored},
        {"symbols_negative_total", "no-name answers written (no symbol, or no debug file)", ss.negatives},
        {"debuginfod_requests_total", "debug files asked from debuginfod", zs.fetches},
        {"debuginfod_failures_total", "debuginfod requests that failed", zs.fetch_fail},
        {"debuginfod_too_big_total", "debug files refused: over debuginfod-max-size", zs.too_big},
        {"debuginfod_evicted_total", "debug files closed and deleted for debuginfod-cache-size",
         zs.evicted},
        {"ui_login_failed_total", "GET /login with a wrong or missing token (each answered "
         "after 250 ms)", agg_ui_login_failures()},
    };
    size_t n = sizeof c / sizeof *c;
    size_t len = strlen(body), cap = len + 1 + n * 512; /* each entry < 512 bytes */
    char *nb = realloc(body, cap);
    if (!nb)
        return body;
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(nb + len, cap - len,
                                "# HELP fleetprof_aggregator_%s %s\n# TYPE fleetprof_aggregator_%s "
                                "counter\nfleetprof_aggregator_%s %llu\n",
                                c[i].name, c[i].help, c[i].name, c[i].name,
                                (unsigned long long)c[i].v);
    return nb;
}

static void h_metrics(void *arg, const char *url, const char *query, agg_http_reply_t *r) {
    (void)url;
    (void)query;
    metrics_src_t *src = arg;
    char *m = agg_metrics_render(src->metrics);
    char *more[] = {src->api ? agg_api_metrics(src->api) : NULL,
                    *src->http ? agg_http_metrics(*src->http) : NULL,
                    src->captures ? agg_captures_metrics(src->captures) : NULL,
                    agg_webhook_metrics(src->webhook)};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        char *a = more[i];
        if (m && a) {
            size_t lm = strlen(m), la = strlen(a);
            char *both = realloc(m, lm + la + 1);
            if (both) {
                memcpy(both + lm, a, la + 1);
                m = both;
            }
        }
        free(a);
    }
    r->body = m ? symbol_metrics(m) : NULL;
    r->len = r->body ? strlen(r->body) : 0;
    r->status = r->body ? 200 : 500;
    r->content_type = "text/plain; version=0.0.4";
}

static void h_healthz(void *arg, const char *url, const char *query, agg_http_reply_t *r) {
    (void)url;
    (void)query;
    char why[256];
    if (agg_metrics_healthy(arg, why, sizeof why))
        agg_http_reply_text(r, 200, "ok\n");
    else
        agg_http_reply_text(r, 503, why);
}

/* Loads the options (file, environment, command line) into cfg and kafka and sets the log
 * level. Returns -1 to go on, else main's exit code (0 after --help, 2 for a bad option). */
static int load_config(int argc, char **argv, agg_cfg_t *cfg, cm_kvlist_t *kafka) {
    char err[1024];
    int lr = cm_config_load(opts, cfg, "FLEETPROF_AGGREGATOR_", "kafka.", kafka, argc, argv, err,
                            sizeof err);
    if (lr == 1) {
        cm_config_help(opts, "FLEETPROF_AGGREGATOR_", "kafka.",
                       "fleetprof-aggregator [--config FILE] [--OPTION VALUE]... "
                       "[--kafka.PROPERTY=VALUE]...\n       fleetprof-aggregator --help | "
                       "--version",
                       stdout);
        return 0;
    }
    if (lr) {
        fprintf(stderr, "fleetprof-aggregator: %s\n", err);
        return 2;
    }
    cm_log_level_t level;
    if (cm_log_parse_level(cfg->log_level, &level)) {
        fprintf(stderr, "fleetprof-aggregator: log-level '%s' is not one of debug, info, warn, "
                "error\n", cfg->log_level);
        return 2;
    }
    cm_log_set_level(level);
    return -1;
}

/* The consume loop's configuration from cfg (kafka: its librdkafka properties), each value
 * checked: bucket widths, dimensions, retention, the replicate width. Returns 0, or 2 after a
 * message on stderr. */
static int consume_config(const agg_cfg_t *cfg, cm_kvlist_t *kafka, agg_consume_cfg_t *out) {
    char err[1024];
    const int64_t S = 1000000000;
    agg_consume_cfg_t cc = {
        .brokers = cfg->brokers,
        .group = cfg->group,
        .topic = cfg->topic,
        .dlq_topic = cfg->dlq_topic,
        .store_dir = cfg->store_dir,
        .store_url = cfg->store,
        .client_id = cfg->client_id,
        .assignment_strategy = cfg->strategy,
        .kafka_props = kafka,
        .batch_max_messages = cfg->batch_max_messages,
        .batch_max_samples = cfg->batch_max_samples,
        .batch_interval_ms = cfg->batch_interval / 1000000,
        .retention_interval_ms = cfg->retention_interval / 1000000,
        .dim_limit = (uint32_t)cfg->dim_limit,
        .dim_target_limit = (uint32_t)cfg->dim_target_limit,
        .rollup = {cfg->fine_width / S, cfg->coarse_width / S, cfg->span_index, cfg->fn_stats,
                   cfg->replicate_width / S},
        .retention = {cfg->fine_width / S, cfg->coarse_width / S, cfg->downsample_after / S,
                      cfg->max_age / S, cfg->span_max_age / S, cfg->dedupe_window / S},
    };
    if (cfg->fine_width % S || cfg->coarse_width % S) {
        fprintf(stderr, "fleetprof-aggregator: fine-width and coarse-width must be whole seconds "
                "(got %lld ns and %lld ns)\n", (long long)cfg->fine_width,
                (long long)cfg->coarse_width);
        return 2;
    }
    if (agg_dims_parse(cfg->dimensions, &cc.dim_mask, err, sizeof err) ||
        agg_retention_check(&cc.retention, err, sizeof err)) {
        fprintf(stderr, "fleetprof-aggregator: %s\n", err);
        return 2;
    }
    cc.dims_given = 1;
    int64_t f = cfg->fine_width / S, c = cfg->coarse_width / S, r = cfg->replicate_width / S;
    if (!cfg->replicate_width)
        r = 60 % f == 0 && c % 60 == 0 ? 60 : f;
    else if (cfg->replicate_width % S || r % f || c % r) {
        fprintf(stderr, "fleetprof-aggregator: replicate-width %llds must be whole seconds, a "
                "multiple of fine-width %llds and divide coarse-width %llds\n",
                (long long)r, (long long)f, (long long)c);
        return 2;
    }
    cc.rollup.replicate_width_s = r;
    *out = cc;
    return 0;
}

/* What must hold before the aggregator joins the group: report-fold compiles, a PostgreSQL
 * store is reachable (its schema migrated), store-dir is writable, the API token is set once
 * (read from api-token-file) and required off loopback. Returns 0, or 2 after a message on
 * stderr. */
static int check_setup(agg_cfg_t *cfg) {
    char err[1024];
    if (cfg->report_fold && *cfg->report_fold) {
        agg_pattern_t *re = NULL;
        char why[256];
        if (agg_pattern_compile(cfg->report_fold, &re, why, sizeof why)) {
            fprintf(stderr, "fleetprof-aggregator: report-fold '%s' is not an extended regular "
                    "expression (or too large for one): %s\n", cfg->report_fold, why);
            return 2;
        }
        agg_pattern_free(re);
    }
    if (cfg->store[0]) { /* PostgreSQL: reachable, schema migrated, before joining the group */
        agg_store_t *pg = NULL;
        if (!agg_store_is_pg(cfg->store)) {
            fprintf(stderr, "fleetprof-aggregator: store '%s' is not a postgres:// or "
                    "postgresql:// URL; leave it empty for SQLite files in store-dir\n",
                    cfg->store);
            return 2;
        }
        if (agg_store_pg_open(cfg->store, &pg, err, sizeof err)) {
            fprintf(stderr, "fleetprof-aggregator: %s\n", err);
            return 2;
        }
        agg_store_close(pg);
    }
    struct stat sb;
    if (stat(cfg->store_dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(cfg->store_dir, W_OK)) {
        fprintf(stderr, "fleetprof-aggregator: store-dir '%s' is not a writable directory (%s); "
                "create it or set --store-dir\n", cfg->store_dir,
                strerror(errno ? errno : ENOTDIR));
        return 2;
    }
    if (cfg->api_token_file[0]) {
        if (cfg->api_token[0]) {
            fprintf(stderr, "fleetprof-aggregator: api-token and api-token-file are both set; "
                    "keep one\n");
            return 2;
        }
        free(cfg->api_token);
        if (agg_auth_token_load(cfg->api_token_file, &cfg->api_token, err, sizeof err)) {
            fprintf(stderr, "fleetprof-aggregator: %s\n", err);
            return 2;
        }
    }
    /* No open API on the network by accident: a non-loopback address needs a token, or the
     * operator saying so (api-no-token). /metrics and /healthz never need the token. */
    if (!cfg->api_token[0] && !cfg->api_no_token && strncmp(cfg->http_addr, "127.", 4) != 0) {
        fprintf(stderr, "fleetprof-aggregator: http-addr '%s' is not loopback and api-token is "
                "empty: the query API would be open to the network; set api-token (or "
                "FLEETPROF_AGGREGATOR_API_TOKEN), or api-no-token = true to allow it\n",
                cfg->http_addr);
        return 2;
    }
    return 0;
}

/* Starts the symbolizer and its store (their failure is not fatal). */
static void start_symbols(const agg_cfg_t *cfg) {
    char err[1024];
    char symcache[4096];
    snprintf(symcache, sizeof symcache, "%s/debuginfod-cache", cfg->store_dir);
    agg_symbolizer_cfg_t scfg = {cfg->debuginfod_urls,
                                 cfg->debuginfod_cache[0] ? cfg->debuginfod_cache : symcache,
                                 (double)cfg->debuginfod_timeout / 1e9,
                                 (double)cfg->debuginfod_retry / 1e9,
                                 (uint64_t)cfg->debuginfod_max_size,
                                 (uint64_t)cfg->debuginfod_cache_size};
    agg_symbolizer_init(&scfg);
    if (agg_symstore_open(cfg->store_dir, scfg.retry_s, err, sizeof err)) /* not fatal */
        CM_WARN("%s: names found by the server are not kept", err);
}

/* The capture route's producer and the incident webhooks. Returns 0, or 1 (2 for a bad
 * webhooks value) after a message on stderr. */
static int start_incident_io(const agg_cfg_t *cfg, const cm_kvlist_t *kafka,
                             agg_captures_t **captures, agg_webhook_t **webhook) {
    char err[1024];
    agg_captures_cfg_t capcfg = {cfg->brokers, cfg->control_topic, kafka, cfg->api_token,
                                 cfg->capture_rate};
    if (agg_captures_new(&capcfg, captures, err, sizeof err)) {
        fprintf(stderr, "fleetprof-aggregator: %s\n", err);
        return 1;
    }
    if (agg_webhook_new(cfg->webhooks, cfg->webhook_timeout / 1000000, webhook, err,
                        sizeof err)) {
        fprintf(stderr, "fleetprof-aggregator: %s\n", err);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    agg_cfg_t cfg;
    cm_kvlist_t kafka = {0};
    char err[1024];
    agg_metrics_t metrics;
    agg_http_t *http = NULL;
    agg_api_t *api = NULL;
    agg_captures_t *captures = NULL;
    agg_webhook_t *webhook = NULL;
    agg_ui_t *ui = NULL;
    agg_reporter_t *reporter = NULL;
    agg_consumer_t *consumer = NULL;
    agg_consume_cfg_t cc;
    int rc = 1;
    memset(&cfg, 0, sizeof cfg);
    agg_metrics_init(&metrics);
    cm_log_init("aggregator", CM_LOG_INFO);
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("fleetprof-aggregator %s (chunk format %d.%d)\n", FLEETPROF_VERSION_STRING,
               CM_FORMAT_MAJOR, CM_FORMAT_MINOR);
        return 0;
    }
    int lr = load_config(argc, argv, &cfg, &kafka);
    if (lr >= 0) {
        rc = lr;
        goto out;
    }
    if ((rc = consume_config(&cfg, &kafka, &cc)) || (rc = check_setup(&cfg)))
        goto out;
    rc = 1;
    start_symbols(&cfg);
    agg_api_cfg_t acfg = {cfg.store_dir, cfg.api_token, (size_t)cfg.api_workers,
                          (size_t)cfg.api_queue, 1, cfg.api_queue_wait / 1000000, cfg.store,
                          cfg.report_min_samples};
    if (agg_api_new(&acfg, &api, err, sizeof err)) {
        fprintf(stderr, "fleetprof-aggregator: %s\n", err);
        goto out;
    }
    if ((rc = start_incident_io(&cfg, &kafka, &captures, &webhook)))
        goto out;
    rc = 1;
    cc.webhook = webhook;
    metrics_src_t msrc = {&metrics, api, &http, captures, webhook};
    agg_http_route_t routes[3 + AGG_API_ROUTES + 2] = {
        {"GET", "/metrics", h_metrics, &msrc},
        {"GET", "/healthz", h_healthz, &metrics},
        agg_captures_route(captures),
    };
    size_t nr = 3 + agg_api_routes(api, routes + 3, AGG_API_ROUTES);
    if (!(ui = agg_ui_new(cfg.api_token))) {
        fprintf(stderr, "fleetprof-aggregator: out of memory\n");
        goto out;
    }
    routes[nr] = agg_ui_route(ui); /* last: it matches every other path */
    agg_http_cfg_t hcfg = {cfg.http_addr, (int)cfg.http_port, cfg.http_hosts,
                           (int)(cfg.http_header_timeout / 1000000), (int)cfg.http_per_address};
    if (agg_http_start(&hcfg, routes, &http, err, sizeof err)) {
        fprintf(stderr, "fleetprof-aggregator: %s\n", err);
        goto out;
    }
    if (agg_consumer_new(&cc, &metrics, &consumer, err, sizeof err)) {
        fprintf(stderr, "fleetprof-aggregator: %s\n", err);
        rc = 2;
        goto out;
    }
    agg_reports_cfg_t rcfg = {cfg.store_dir, cfg.report_min_samples,
                              cfg.report_interval / 1000000, cfg.report_fold, cfg.store};
    if (agg_reports_start(&rcfg, &reporter, err, sizeof err)) {
        fprintf(stderr, "fleetprof-aggregator: %s\n", err);
        goto out;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    CM_INFO("consuming %s from %s as group %s; stores in %s; http on %s:%d", cfg.topic,
            cfg.brokers, cfg.group, cfg.store_dir, cfg.http_addr, agg_http_port(http));
    rc = agg_consumer_run(consumer, &stop_flag) ? 1 : 0;
out:
    agg_reports_stop(reporter);
    agg_consumer_free(consumer);
    agg_webhook_free(webhook); /* after the consumer: nothing stages any more */
    agg_http_stop(http);
    agg_api_free(api);
    agg_captures_free(captures);
    agg_ui_free(ui);
    agg_symstore_close();
    agg_symbolizer_shutdown();
    cm_config_free(opts, &cfg, &kafka);
    agg_metrics_destroy(&metrics);
    return rc;
}
