/* The CLI's query commands: services, versions, top, tree, diff, span, spans, export, reports.
 * Each turns its flags into a query of the aggregator's HTTP API (/api/v1/..., client.c) and
 * prints a table (default) or the JSON (--json). Flags map to API parameters by name
 * (--min-share -> min_share); repeatable flags repeat the parameter.
 *
 * Exit status: 0 ok, 1 the query failed (unknown service or version, no data, server
 * unreachable, server error: the message says which), 2 usage error, 3 `diff
 * --fail-on-regression PCT` found a significant regression of at least PCT % of the base.
 * Threading: single-threaded.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "client.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_SERVER "http://127.0.0.1:9402"

typedef struct {
    const char *name;
    const char *path;     /* API path */
    const char *flags;    /* allowed value flags, space-separated, with spaces around */
    const char *bools;    /* allowed boolean flags */
    const char *positional; /* parameter a positional argument fills, or NULL */
    const char *usage;
} qcmd_t;

#define PROFILE_FLAGS                                                                              \
    " service version type from to label include exclude fold group limit min-share function "     \
    "sort host node pod container pid io-target fd-kind lock endpoint "

static const qcmd_t qcmds[] = {
    {"services", "/api/v1/services", " ", " ", NULL, "services [--json]"},
    {"versions", "/api/v1/services/", " service ", " ", "service",
     "versions --service S [--json]   (or: versions S)"},
    {"top", "/api/v1/profile", PROFILE_FLAGS " group-by group-limit ", " by-module lines ", NULL,
     "top --service S [--version V]... [--type T] [--from T] [--to T] [--label K:V]\n"
     "      [--host H] [--node N] [--pod NS/POD] [--container ID] [--pid P]\n"
     "      [--io-target PATH|PEER] [--fd-kind K] [--lock 0xADDR]\n"
     "      [--group-by host|node|pod|container|pid|io-target|fd-kind|lock|label:KEY\n"
     "       [--group-limit N] (per group: the top --limit functions, default 5)]\n"
     "      [--include RE] [--exclude RE] [--fold RE] [--group RE->NAME] [--by-module]\n"
     "      [--lines (source file:line, inlined functions as frames: recorded when the program\n"
     "       ran with FLEETPROF_LINES=1, or from its debug file via --debuginfod-urls)]\n"
     "      [--limit N] [--sort self|total] [--function F (callers and callees)] [--json]\n"
     "      [--endpoint NAME (only the samples of its requests; not with --label, dimensions\n"
     "       or --group-by)]"},
    {"tree", "/api/v1/profile", PROFILE_FLAGS, " by-module lines ", NULL,
     "tree --service S [--version V]... [--min-share F] [--limit NODES] [filters as top] [--json]"},
    {"diff", "/api/v1/diff",
     " service base test type from to base-from base-to test-from test-to version label include "
     "exclude fold group limit fail-on-regression q per host node pod container pid io-target "
     "fd-kind lock endpoint ",
     " by-module inclusive ", NULL,
     "diff --service S --base V1 --test V2 [--type T] [--fail-on-regression PCT] [filters]\n"
     "      [--base-from T --base-to T --test-from T --test-to T] [--per second|request]\n"
     "      [--host H] [--pod NS/POD] [--pid P] [--io-target T] ... (dimension filters)\n"
     "      [--endpoint NAME (only its requests' samples, per call)] [--limit N] [--json]"},
    {"span", "/api/v1/span",
     " service trace span type include exclude fold group limit min-share sort view function ",
     " by-module ", NULL,
     "span (--trace ID | --span ID) [--service S (only its spans)] [--type T] [--json]"},
    {"spans", "/api/v1/spans", " service type from to limit ", " ", NULL,
     "spans --service S [--type cpu|wall|alloc|lock|io] [--from T] [--to T] [--limit N] [--json]"},
    {"endpoints", "/api/v1/endpoints", " service version from to ", " ", NULL,
     "endpoints --service S [--version V] [--from T] [--to T] [--json]\n"
     "      (named spans: calls, latency, cost per call; --version: one version's, to compare)"},
    {"endpoint-diff", "/api/v1/endpoint-diff", " service base test from to q min-change ", " ",
     NULL,
     "endpoint-diff --service S --base V1 --test V2 [--from T] [--to T] [--q 0.01]\n"
     "      [--min-change 0.05] [--json]\n"
     "      (per endpoint: calls, p50/p99 and cost per call of both versions; latency tested\n"
     "       by a rank test on durations, costs per call by Welch's t; REG: flagged)"},
    {"endpoint", "/api/v1/endpoint",
     " service version endpoint type from to include exclude fold group limit min-share sort "
     "view function ",
     " by-module ", NULL,
     "endpoint --service S --endpoint NAME [--type T] [--from T] [--to T] [--json]\n"
     "      (the profile of every request of the endpoint, merged)"},
    {"requests", "/api/v1/requests", " service version endpoint from to limit min seen ", " stuck ",
     NULL,
     "requests --service S [--endpoint NAME] [--from T] [--to T] [--limit N] [--json]\n"
     "      (slowest first)  or  requests --service S --stuck [--min 10s] [--seen 30s]\n"
     "      (not ended, running at least --min, seen active in the last --seen)"},
    {"export", "/api/v1/profile", PROFILE_FLAGS " trace span output ", " by-module counts lines ",
     NULL,
     "export --service S [--version V]... --format pprof|folded|json -o FILE|- [filters]\n"
     "      (-o - writes to stdout)\n"
     "      (or --trace ID / --span ID --type T for one span)"},
    {"reports", "/api/v1/reports", " service limit ", " ", NULL, "reports [--service S] [--json]"},
    {"kpm", "/api/v1/kpm", " service version host pid from to by kpm ", " ", NULL,
     "kpm --service S [--version V] [--host H] [--pid P] [--by service|process] [--kpm NAME]\n"
     "      [--from T] [--to T] [--json]   (key performance metrics over time; default: the last\n"
     "       hour; names and units: --json's kpms, aggregator/README.md)"},
    {"search", "/api/v1/search", " service version host pid from to kpm top ", " rise ", NULL,
     "search --service S --kpm NAME [--top N] [--rise] [--from T] [--to T] [--json]\n"
     "      (the process-intervals where the KPM is highest, or with --rise rose most over the\n"
     "       process's median; each with the link to its profile)"},
    {"insights", "/api/v1/insights", " service version from to ", " ", NULL,
     "insights --service S [--version V] [--from T] [--to T] [--json]\n"
     "      (automated analysis: lock contention, allocation churn, leaks, small I/O, ...;\n"
     "       default window: the last hour)"},
    {"incidents", "/api/v1/incidents", " service from to limit ", " ", NULL,
     "incidents --service S [--from T] [--to T] [--limit N] [--json]\n"
     "      (incidents the agents' flight recorders captured, newest first)"},
    {"incident", "/api/v1/incident", " id type limit ", " ", NULL,
     "incident --id ID [--type cpu|wall] [--limit N] [--json]\n"
     "      (one incident: trigger, timeline, diff against the seconds before, the capture's\n"
     "       top functions (--json: its call tree, the flame graph), stuck requests)"},
};

static void usage_of(const qcmd_t *c, FILE *f) {
    fprintf(f, "usage: fleetprof [--server URL] [--token T] %s\n  common (before or after the "
               "command): [--server URL (env FLEETPROF_SERVER, default %s)]\n    [--token T (env "
               "FLEETPROF_TOKEN)] [--json (exact values; tables show them in s/ms/MB...)]\n"
               "  times: unix seconds, 'now' or -DURATION (-1h, -30m)\n",
            c->usage, DEFAULT_SERVER);
}

/* Whether the command reads one service's data (and so needs --service). */
static int needs_service(const qcmd_t *c) {
    return !strcmp(c->name, "top") || !strcmp(c->name, "tree") || !strcmp(c->name, "diff") ||
           !strcmp(c->name, "spans") || !strcmp(c->name, "export") ||
           !strcmp(c->name, "endpoints") || !strcmp(c->name, "endpoint") ||
           !strcmp(c->name, "requests") || !strcmp(c->name, "endpoint-diff") ||
           !strcmp(c->name, "insights") || !strcmp(c->name, "kpm") || !strcmp(c->name, "search") ||
           !strcmp(c->name, "incidents");
}

/* The server's error message in the CLI's terms: API routes and parameters become the
 * commands and flags a user types ("see /api/v1/services" -> "see `fleetprof services`",
 * "parameter 'min_share'" -> "--min-share", and param, the parameter the error is about, at
 * the start of the message: "min_share '7' is not..." -> "--min-share '7' is not..."). */
static void humanize(const char *msg, const char *param, char *out, size_t size) {
    static const char routes[] = "/api/v1/services/", list[] = "/api/v1/services";
    size_t o = 0;
    const char *p = msg;
    size_t pl = param ? strlen(param) : 0;
    if (pl && !strncmp(msg, param, pl) && msg[pl] == ' ') {
        o += (size_t)snprintf(out, size, "--");
        for (; *p && p < msg + pl && o + 1 < size; p++)
            out[o++] = *p == '_' ? '-' : *p;
    }
    while (*p && o + 1 < size) {
        const char *end;
        if (!strncmp(p, "GET ", 4) && !strncmp(p + 4, "/api/", 5)) {
            p += 4; /* "with GET /api/..." reads "with `fleetprof ...`" */
            continue;
        }
        if (!strncmp(p, routes, sizeof routes - 1) && (end = strstr(p, "/versions")) &&
            !memchr(p + sizeof routes - 1, ' ', (size_t)(end - p) - (sizeof routes - 1))) {
            const char *svc = p + sizeof routes - 1;
            o += (size_t)snprintf(out + o, size - o, "`fleetprof versions --service %.*s`",
                                  (int)(end - svc), svc);
            p = end + strlen("/versions");
        } else if (!strncmp(p, list, sizeof list - 1)) {
            o += (size_t)snprintf(out + o, size - o, "`fleetprof services`");
            p += sizeof list - 1;
        } else if (!strncmp(p, "parameter '", 11) && (end = strchr(p + 11, '\''))) {
            o += (size_t)snprintf(out + o, size - o, "--");
            for (const char *q = p + 11; q < end && o + 1 < size; q++)
                out[o++] = *q == '_' ? '-' : *q;
            p = end + 1;
        } else {
            out[o++] = *p++;
        }
        if (o >= size)
            o = size - 1;
    }
    out[o] = '\0';
}

static int has_word(const char *list, const char *w) {
    char pat[128];
    snprintf(pat, sizeof pat, " %s ", w);
    return strstr(list, pat) != NULL;
}

typedef struct {
    char *q;
    size_t len;
    FILE *f;
} qbuf_t;

static void qadd(qbuf_t *b, const char *key, const char *val) {
    char *e = cli_url_escape(val);
    fprintf(b->f, "%s%s=%s", ftell(b->f) ? "&" : "", key, e ? e : "");
    free(e);
}

static void fmt_time(int64_t ns, char *buf, size_t size) {
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    if (ns <= 0 || !gmtime_r(&t, &tm))
        snprintf(buf, size, "-");
    else
        strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm);
}

static json_int_t jint(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : (json_int_t)json_number_value(v);
}

static const char *jstr(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* top --group-by: one line per group (value, weight, share, samples), then its top functions. */
static void print_groups(json_t *o) {
    json_t *arr = json_object_get(o, "groups"), *g;
    size_t i;
    char head[64];
    snprintf(head, sizeof head, "%s", jstr(o, "group_by"));
    for (char *p = head; *p; p++)
        *p = (char)toupper((unsigned char)*p);
    cm_event_type_t type = CM_EV_CPU;
    cm_event_parse(jstr(o, "event_type"), &type);
    char w[32];
    cm_format_weight(type, (double)jint(o, "total"), w, sizeof w);
    printf("%s samples of %s split by %s: total %s\n", jstr(o, "event_type"), jstr(o, "service"),
           jstr(o, "group_by"), w);
    printf("%-40s %10s %7s %12s\n", head, "WEIGHT", "SHARE", "SAMPLES");
    json_array_foreach(arr, i, g) {
        const char *v = json_string_value(json_object_get(g, "value"));
        cm_format_weight(type, (double)jint(g, "weight"), w, sizeof w);
        printf("%-40s %10s %6.2f%% %12.0f\n", v ? v : "(none)", w,
               100 * json_number_value(json_object_get(g, "share")),
               json_number_value(json_object_get(g, "samples")));
        json_t *fns = json_object_get(g, "top"), *f;
        size_t j;
        json_array_foreach(fns, j, f)
            printf("    %6.2f%% self %6.2f%% total  %s\n",
                   100 * json_number_value(json_object_get(f, "self_share")),
                   100 * json_number_value(json_object_get(f, "total_share")), jstr(f, "name"));
    }
    if (jint(o, "truncated"))
        printf("(%lld more groups not shown; --group-limit N shows more)\n",
               (long long)jint(o, "truncated"));
}

static void print_endpoints(json_t *o) {
    json_t *arr = json_object_get(o, "endpoints"), *e;
    size_t i;
    printf("%-32s %8s %10s %10s %10s %10s %10s %10s %6s\n", "ENDPOINT", "CALLS", "P50", "P90",
           "P99", "CPU/CALL", "WALL/CALL", "ALLOC/CALL", "CPU%");
    json_array_foreach(arr, i, e) {
        char q[3][32], c[3][32];
        static const char *const qs[] = {"p50_ns", "p90_ns", "p99_ns"};
        for (int k = 0; k < 3; k++)
            cm_format_weight(CM_EV_WALL, (double)jint(e, qs[k]), q[k], sizeof q[k]);
        cm_format_weight(CM_EV_CPU, json_number_value(json_object_get(e, "cpu_per_call_ns")),
                         c[0], sizeof c[0]);
        cm_format_weight(CM_EV_WALL, json_number_value(json_object_get(e, "wall_per_call_ns")),
                         c[1], sizeof c[1]);
        cm_format_weight(CM_EV_ALLOC,
                         json_number_value(json_object_get(e, "alloc_per_call_bytes")), c[2],
                         sizeof c[2]);
        const char *n = jstr(e, "name");
        printf("%-32s %8lld %10s %10s %10s %10s %10s %10s %5.1f%%\n", *n ? n : "(unnamed)",
               (long long)jint(e, "calls"), q[0], q[1], q[2], c[0], c[1], c[2],
               100 * json_number_value(json_object_get(e, "cpu_share")));
    }
    if (!json_array_size(arr))
        printf("(no endpoints: an endpoint is the name given to fleetprof_span_begin(); see "
               "agent/README.md)\n");
}

static void print_requests(json_t *o) {
    json_t *arr = json_object_get(o, "requests"), *s;
    size_t i;
    printf("%-32s %-16s %-24s %10s %10s %10s %-7s\n", "TRACE", "SPAN", "ENDPOINT", "DURATION",
           "ON-CPU", "OFF-CPU", "STATE");
    json_array_foreach(arr, i, s) {
        char d[32], on[32], off[32];
        cm_format_weight(CM_EV_WALL, (double)jint(s, "duration_ns"), d, sizeof d);
        cm_format_weight(CM_EV_CPU, (double)jint(s, "on_cpu_ns"), on, sizeof on);
        cm_format_weight(CM_EV_WALL, (double)jint(s, "off_cpu_ns"), off, sizeof off);
        printf("%-32s %-16s %-24s %10s %10s %10s %-7s\n", jstr(s, "trace_id"),
               jstr(s, "span_id"), jstr(s, "name"), d, on, off,
               json_is_true(json_object_get(s, "ended")) ? "ended" : "running");
    }
    int stuck = json_is_true(json_object_get(o, "stuck"));
    if (json_is_true(json_object_get(o, "more")))
        printf("(%zu requests; more not shown: --limit N shows more)\n", json_array_size(arr));
    else
        printf("(%zu %srequests)\n", json_array_size(arr), stuck ? "stuck " : "");
}

static void print_incidents(json_t *o) {
    json_t *arr = json_object_get(o, "incidents"), *s;
    size_t i;
    printf("%-32s %-8s %9s %9s %-20s %-16s %7s %6s\n", "ID", "TRIGGER", "VALUE", "THRESHOLD",
           "WHEN (UTC)", "HOST", "PID", "WINDOW");
    json_array_foreach(arr, i, s) {
        char a[32];
        fmt_time(jint(s, "trigger_ns"), a, sizeof a);
        printf("%-32s %-8s %9.3f %9.3f %-20s %-16s %7lld %5.1fs%s\n", jstr(s, "id"),
               jstr(s, "trigger"), json_number_value(json_object_get(s, "value")),
               json_number_value(json_object_get(s, "threshold")), a, jstr(s, "host"),
               (long long)jint(s, "pid"),
               (double)(jint(s, "end_ns") - jint(s, "start_ns")) / 1e9,
               json_is_true(json_object_get(s, "complete")) ? "" : " (incomplete)");
    }
    if (!json_array_size(arr))
        printf("(no incidents: the agent's flight recorder is off unless FLEETPROF_RECORDER=1; "
               "see agent/README.md, \"Incidents\")\n");
}

static void print_incident(json_t *o) {
    char a[32], w[32], x[32];
    fmt_time(jint(o, "trigger_ns"), a, sizeof a);
    printf("incident %s: %s of %s %s on %s pid %lld\n  trigger %s: value %.3f, threshold %.3f, at "
           "%s UTC; captured %.1f s (%lld of %lld chunks)\n",
           jstr(o, "id"), jstr(o, "trigger"), jstr(o, "service"), jstr(o, "version"),
           jstr(o, "host"), (long long)jint(o, "pid"), jstr(o, "trigger"),
           json_number_value(json_object_get(o, "value")),
           json_number_value(json_object_get(o, "threshold")), a,
           (double)(jint(o, "end_ns") - jint(o, "start_ns")) / 1e9, (long long)jint(o, "chunks"),
           (long long)jint(o, "parts"));
    cm_event_type_t type = CM_EV_CPU;
    cm_event_parse(jstr(o, "event_type"), &type);
    json_t *arr = json_object_get(o, "timeline"), *e;
    size_t i;
    printf("\ntimeline (%s, s from the trigger):\n", jstr(o, "event_type"));
    json_array_foreach(arr, i, e) {
        cm_format_weight(type, (double)jint(e, "weight"), w, sizeof w);
        printf("  %+6.1f .. %+6.1f %8lld samples %10s%s\n",
               (double)(jint(e, "start_ns") - jint(o, "trigger_ns")) / 1e9,
               (double)(jint(e, "end_ns") - jint(o, "trigger_ns")) / 1e9,
               (long long)jint(e, "samples"), w,
               jint(e, "end_ns") > jint(o, "trigger_ns") &&
                       jint(e, "start_ns") <= jint(o, "trigger_ns")
                   ? "  <- trigger"
                   : "");
    }
    json_t *d = json_object_get(o, "diff");
    printf("\ndiff, after the trigger against the seconds before (per %s): %lld regressions, "
           "%lld improvements\n", jstr(d, "per"), (long long)jint(d, "regressions"),
           (long long)jint(d, "improvements"));
    const char *hint = json_string_value(json_object_get(d, "hint"));
    if (hint && *hint) /* e.g. a callee folded into the spike's function */
        printf("  (%s)\n", hint);
    json_array_foreach(json_object_get(d, "entries"), i, e) {
        if (i >= 10)
            break;
        cm_format_weight(type, json_number_value(json_object_get(e, "base_total")), w, sizeof w);
        cm_format_weight(type, json_number_value(json_object_get(e, "test_total")), x, sizeof x);
        printf("  %-40s %-11s %10s -> %10s\n", jstr(e, "name"), jstr(e, "class"), w, x);
    }
    printf("\ntop functions of the capture (self):\n");
    json_array_foreach(json_object_get(json_object_get(o, "top"), "functions"), i, e) {
        if (i >= 10)
            break;
        cm_format_weight(type, (double)jint(e, "self"), w, sizeof w);
        printf("  %-40s %10s\n", jstr(e, "name"), w);
    }
    arr = json_object_get(o, "stuck_requests");
    printf("\nrequests active at the trigger for 1 s or more: %zu\n", json_array_size(arr));
    json_array_foreach(arr, i, e) {
        cm_format_weight(CM_EV_WALL, (double)(jint(o, "trigger_ns") - jint(e, "start_ns")), w,
                         sizeof w);
        printf("  %-32s %-16s %-24s running %s at the trigger%s\n", jstr(e, "trace"),
               jstr(e, "span"), jstr(e, "name"), w,
               json_is_true(json_object_get(e, "ended")) ? "" : " (not ended)");
    }
}

static void print_table(const qcmd_t *c, json_t *o) {
    char a[32], b[32];
    if (!strcmp(c->name, "insights") || !strcmp(c->name, "kpm") || !strcmp(c->name, "search")) {
        cli_print_insights(c->name, o);
        return;
    }
    if (!strcmp(c->name, "services")) {
        json_t *arr = json_object_get(o, "services"), *s;
        size_t i;
        printf("%-24s %8s %-16s %12s %-20s\n", "SERVICE", "VERSIONS", "LATEST", "CPU-SAMPLES",
               "LAST-SEEN (UTC)");
        json_array_foreach(arr, i, s) {
            fmt_time(jint(s, "last_ns"), a, sizeof a);
            printf("%-24s %8lld %-16s %12lld %-20s\n", jstr(s, "name"),
                   (long long)jint(s, "versions"), jstr(s, "latest_version"),
                   (long long)jint(json_object_get(s, "samples"), "cpu"), a);
        }
        if (!json_array_size(arr))
            printf("(no services yet)\n");
    } else if (!strcmp(c->name, "versions")) {
        json_t *arr = json_object_get(o, "versions"), *s;
        size_t i;
        printf("%-16s %-20s %-20s %8s %12s %12s %12s\n", "VERSION", "FIRST-SEEN (UTC)",
               "LAST-SEEN", "CHUNKS", "PROC-SECONDS", "WORK-UNITS", "CPU-SAMPLES");
        json_array_foreach(arr, i, s) {
            fmt_time(jint(s, "first_ns"), a, sizeof a);
            fmt_time(jint(s, "last_ns"), b, sizeof b);
            printf("%-16s %-20s %-20s %8lld %12.1f %12lld %12lld\n", jstr(s, "version"), a, b,
                   (long long)jint(s, "chunks"),
                   json_number_value(json_object_get(s, "process_seconds")),
                   (long long)jint(s, "work_units"),
                   (long long)jint(json_object_get(s, "samples"), "cpu"));
        }
    } else if (!strcmp(c->name, "spans")) {
        json_t *arr = json_object_get(o, "spans"), *s;
        size_t i;
        const char *by = jstr(o, "ranked_by");
        printf("%-32s %-16s %10s %10s %10s\n", "TRACE", "SPAN", "CPU", "WALL", "ALLOC");
        json_array_foreach(arr, i, s) {
            json_t *cost = json_object_get(s, "cost");
            char cpu[32], wall[32], alloc[32];
            cm_format_weight(CM_EV_CPU, (double)jint(cost, "cpu"), cpu, sizeof cpu);
            cm_format_weight(CM_EV_WALL, (double)jint(cost, "wall"), wall, sizeof wall);
            cm_format_weight(CM_EV_ALLOC, (double)jint(cost, "alloc"), alloc, sizeof alloc);
            printf("%-32s %-16s %10s %10s %10s\n", jstr(s, "trace_id"), jstr(s, "span_id"), cpu,
                   wall, alloc);
        }
        if (json_is_true(json_object_get(o, "more")))
            printf("(%zu spans, ranked by %s; more not shown: --limit N shows more)\n",
                   json_array_size(arr), by);
        else
            printf("(%zu spans, ranked by %s)\n", json_array_size(arr), by);
        if (!json_array_size(arr))
            printf("(no spans: a span's samples are those taken while a thread had a span set "
                   "with fleetprof_span_set() from the traceparent of the request it serves; see "
                   "agent/README.md)\n");
    } else if (!strcmp(c->name, "endpoints")) {
        print_endpoints(o);
    } else if (!strcmp(c->name, "requests")) {
        print_requests(o);
    } else if (!strcmp(c->name, "incidents")) {
        print_incidents(o);
    } else if (!strcmp(c->name, "incident")) {
        print_incident(o);
    } else if (!strcmp(c->name, "reports")) {
        json_t *arr = json_object_get(o, "reports"), *s;
        size_t i;
        printf("%-20s %-12s %-12s %-20s %5s %5s %10s %10s  %s\n", "SERVICE", "BASE", "TEST",
               "CREATED (UTC)", "REGR", "IMPR", "BASE-SMPL", "TEST-SMPL", "TOP REGRESSION");
        json_array_foreach(arr, i, s) {
            fmt_time(jint(s, "created_ns"), a, sizeof a);
            json_t *ents = json_object_get(json_object_get(s, "diff"), "entries");
            json_t *e0 = json_array_get(ents, 0);
            const char *top = e0 && !strcmp(jstr(e0, "class"), "regression") ? jstr(e0, "name")
                                                                              : "-";
            printf("%-20s %-12s %-12s %-20s %5lld %5lld %10lld %10lld  %s\n", jstr(s, "service"),
                   jstr(s, "base"), jstr(s, "test"), a, (long long)jint(s, "regressions"),
                   (long long)jint(s, "improvements"), (long long)jint(s, "base_samples"),
                   (long long)jint(s, "test_samples"), top);
        }
        if (!json_array_size(arr))
            printf("(no reports yet: a report is made once a new version has enough samples)\n");
    }
}

/* What a command's flags asked for, beside the API parameters they add to qb. */
typedef struct {
    const char *server, *token, *output, *format, *gate, *positional;
    int json, grouped, have_service, span_args;
    qbuf_t qb;
} qargs_t;

/* The value of flag --key: after '=' (eq) or the next argument. NULL (said on stderr) when
 * there is none. */
static const char *flag_value(const qcmd_t *c, const char *key, const char *eq, int argc,
                              char **argv, int *i) {
    if (eq)
        return eq + 1;
    if (*i + 1 < argc)
        return argv[++*i];
    fprintf(stderr, "fleetprof %s: --%s needs a value\n", c->name, key);
    return NULL;
}

/* Keeps a flag's value: the client's own flags in q, the others as an API parameter. */
static void record_flag(qargs_t *q, const char *key, const char *val) {
    if (!strcmp(key, "server"))
        q->server = val;
    else if (!strcmp(key, "token"))
        q->token = val;
    else if (!strcmp(key, "format"))
        q->format = val;
    else if (!strcmp(key, "output"))
        q->output = val;
    else {
        if (!strcmp(key, "fail-on-regression"))
            q->gate = val;
        if (!strcmp(key, "service") && *val)
            q->have_service = 1;
        if (!strcmp(key, "trace") || !strcmp(key, "span"))
            q->span_args = 1;
        char pk[64];
        snprintf(pk, sizeof pk, "%s", key);
        for (char *p = pk; *p; p++)
            if (*p == '-')
                *p = '_';
        qadd(&q->qb, pk, val);
    }
}

/* Reads argv into q. Returns 0, 1 after --help, -1 on a usage error (said on stderr). */
static int parse_args(const qcmd_t *c, int argc, char **argv, qargs_t *q) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_of(c, stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            q->json = 1;
            continue;
        }
        if (strncmp(a, "--", 2) && strcmp(a, "-o")) {
            if (c->positional && !q->positional) {
                q->positional = a;
                continue;
            }
            fprintf(stderr, "fleetprof %s: unexpected argument '%s'\n", c->name, a);
            usage_of(c, stderr);
            return -1;
        }
        const char *name = !strcmp(a, "-o") ? "output" : a + 2;
        char key[64];
        const char *val = NULL;
        const char *eq = strchr(name, '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq ? (size_t)(eq - name) : strlen(name)), name);
        if (c->positional && !strcmp(key, c->positional)) { /* versions --service S */
            if (!(q->positional = flag_value(c, key, eq, argc, argv, &i)))
                return -1;
            continue;
        }
        if (has_word(c->bools, key) && !eq) {
            val = "1";
        } else if (!strcmp(key, "server") || !strcmp(key, "token") || !strcmp(key, "format") ||
                   has_word(c->flags, key)) {
            if (!(val = flag_value(c, key, eq, argc, argv, &i)))
                return -1;
        } else {
            fprintf(stderr, "fleetprof %s: unknown flag '%s'\n", c->name, a);
            usage_of(c, stderr);
            return -1;
        }
        record_flag(q, key, val);
    }
    return 0;
}

/* Checks what the command requires and adds the parameters it implies (format, view).
 * Returns 0, or -1 on a usage error (said on stderr). */
static int complete_args(const qcmd_t *c, qargs_t *q) {
    if (c->positional && !q->positional) {
        fprintf(stderr, "fleetprof %s: missing service: --service S (`fleetprof services` lists "
                        "them)\n", c->name);
        return -1;
    }
    if (needs_service(c) && !q->have_service && !q->span_args) {
        fprintf(stderr, "fleetprof %s: --service S is required (`fleetprof services` lists "
                        "them)\n", c->name);
        return -1;
    }
    if (!strcmp(c->name, "export")) {
        if (!q->format || (strcmp(q->format, "pprof") && strcmp(q->format, "folded") &&
                           strcmp(q->format, "json"))) {
            fprintf(stderr, "fleetprof export: --format must be pprof, folded or json (got '%s')\n",
                    q->format ? q->format : "");
            return -1;
        }
        if (!q->output) {
            fprintf(stderr, "fleetprof export: -o FILE is required (- for stdout)\n");
            return -1;
        }
        qadd(&q->qb, "format", q->format);
    } else if (q->format) {
        fprintf(stderr, "fleetprof %s: --format is for export; use --json for JSON\n", c->name);
        return -1;
    } else if (!strcmp(c->name, "top") || !strcmp(c->name, "tree") || !strcmp(c->name, "diff") ||
               !strcmp(c->name, "span") || !strcmp(c->name, "endpoint") ||
               !strcmp(c->name, "endpoint-diff")) {
        fflush(q->qb.f);
        q->grouped = !strcmp(c->name, "top") && q->qb.q && strstr(q->qb.q, "group_by=");
        qadd(&q->qb, "format", q->json || q->grouped ? "json" : "text");
    }
    if (!strcmp(c->name, "tree"))
        qadd(&q->qb, "view", "tree");
    fflush(q->qb.f);
    if (!strcmp(c->name, "top") && strstr(q->qb.q ? q->qb.q : "", "function="))
        qadd(&q->qb, "view", "callers");
    fflush(q->qb.f);
    if (!q->server || !*q->server)
        q->server = DEFAULT_SERVER;
    return 0;
}

/* The API path and query string (malloc'd), or NULL when out of memory. */
static char *request_path(const qcmd_t *c, const qargs_t *q) {
    char *path = NULL;
    const char *api = c->path, *qs = q->qb.q;
    if (!strcmp(c->name, "export") && (strstr(qs, "trace=") || strstr(qs, "span=")))
        api = "/api/v1/span";
    if (c->positional) {
        char *e = cli_url_escape(q->positional);
        if (asprintf(&path, "%s%s/versions", api, e ? e : "") < 0)
            path = NULL;
        free(e);
    } else if (asprintf(&path, "%s%s%s", api, q->qb.len ? "?" : "", qs ? qs : "") < 0) {
        path = NULL;
    }
    return path;
}

/* Says why the server answered resp.status != 200, in the user's terms. */
static void report_http_error(const qcmd_t *c, const cli_resp_t *resp, const char *server) {
    json_t *e = json_loads(resp->body, 0, NULL);
    const char *msg = json_string_value(json_object_get(e, "error"));
    char human[1024];
    if (msg)
        humanize(msg, json_string_value(json_object_get(e, "parameter")), human, sizeof human);
    if (msg && resp->status >= 400 && resp->status < 500 && resp->status != 401 &&
        resp->status != 403)
        fprintf(stderr, "fleetprof %s: %s\n", c->name, human);
    else /* the server's own failure, or authentication: the status says which */
        fprintf(stderr, "fleetprof %s: %s (HTTP %ld from %s)\n", c->name,
                msg ? human : resp->status == 401 || resp->status == 403
                                  ? "the aggregator refused the token (--token T, env "
                                    "FLEETPROF_TOKEN)"
                                  : "server error",
                resp->status, server);
    json_decref(e);
}

/* export: the answer's bytes into output ("-": stdout). Returns the exit status. */
static int write_export(const char *output, const cli_resp_t *resp) {
    FILE *f = strcmp(output, "-") ? fopen(output, "wb") : stdout;
    if (!f || fwrite(resp->body, 1, resp->len, f) != resp->len) {
        fprintf(stderr, "fleetprof export: cannot write '%s': %m\n", output);
        if (f && f != stdout)
            fclose(f);
        return 1;
    }
    if (f != stdout && fclose(f)) {
        fprintf(stderr, "fleetprof export: cannot write '%s': %m\n", output);
        return 1;
    }
    if (f != stdout)
        fprintf(stderr, "fleetprof export: wrote %zu bytes to %s\n", resp->len, output);
    return 0;
}

/* Prints the answer as JSON, a grouped table, the server's text or a table. Returns the
 * exit status: 0, 1 (not JSON where JSON was due) or 3 (the regression gate failed). */
static int print_answer(const qcmd_t *c, const qargs_t *q, const cli_resp_t *resp) {
    int gate_failed = 0;
    if (q->json) {
        fwrite(resp->body, 1, resp->len, stdout);
        putchar('\n');
        if (q->gate) {
            json_t *o = json_loads(resp->body, 0, NULL);
            json_t *g = json_object_get(o, "gate");
            gate_failed = json_is_true(json_object_get(g, "failed"));
            if (gate_failed)
                fprintf(stderr, "fleetprof diff: regression gate failed: %s\n", jstr(g, "why"));
            json_decref(o);
        }
    } else if (!q->grouped && (!strcmp(c->name, "top") || !strcmp(c->name, "tree") ||
                               !strcmp(c->name, "diff") || !strcmp(c->name, "span") ||
                               !strcmp(c->name, "endpoint") ||
                               !strcmp(c->name, "endpoint-diff"))) {
        fwrite(resp->body, 1, resp->len, stdout);
        const char *g = strstr(resp->body, "GATE FAILED: ");
        if (q->gate && g) {
            gate_failed = 1;
            fprintf(stderr, "fleetprof diff: regression gate failed: %s", g + 13);
        }
    } else {
        json_t *o = json_loads(resp->body, 0, NULL);
        if (!o) {
            fprintf(stderr, "fleetprof %s: the server's answer is not JSON\n", c->name);
            return 1;
        }
        if (q->grouped)
            print_groups(o);
        else
            print_table(c, o);
        json_decref(o);
    }
    return gate_failed ? 3 : 0;
}

/* Sends the query and shows or writes its answer. Returns the exit status. */
static int run_query(const qcmd_t *c, const qargs_t *q) {
    char *path = request_path(c, q);
    if (!path)
        return 1;
    int rc = 1;
    cli_resp_t resp = {0};
    if (cli_http_get(q->server, q->token, path, &resp))
        fprintf(stderr, "fleetprof %s: %s\n", c->name, resp.err);
    else if (resp.status != 200)
        report_http_error(c, &resp, q->server);
    else if (!strcmp(c->name, "export"))
        rc = write_export(q->output, &resp);
    else
        rc = print_answer(c, q, &resp);
    free(path);
    cli_resp_free(&resp);
    return rc;
}

static int query_main(const qcmd_t *c, int argc, char **argv) {
    qargs_t q = {.server = getenv("FLEETPROF_SERVER"), .token = getenv("FLEETPROF_TOKEN")};
    q.qb.f = open_memstream(&q.qb.q, &q.qb.len);
    int rc = parse_args(c, argc, argv, &q);
    if (rc == 0 && complete_args(c, &q))
        rc = -1;
    rc = rc > 0 ? 0 : rc < 0 ? 2 : run_query(c, &q);
    if (q.qb.f)
        fclose(q.qb.f);
    free(q.qb.q);
    return rc;
}

int cli_query(int argc, char **argv) {
    for (size_t i = 0; i < sizeof qcmds / sizeof qcmds[0]; i++)
        if (!strcmp(argv[0], qcmds[i].name))
            return query_main(&qcmds[i], argc, argv);
    return 2;
}
