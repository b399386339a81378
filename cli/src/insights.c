/* Tables of `fleetprof insights`, `kpm` and `search` (the queries are query_cmds.c's):
 * insights: per insight its title, score against threshold, the sentence with the figures,
 * the evidence (site, share, value) with the profile link, and what usually fixes it;
 * kpm: one line per interval (service) or process-interval (--by process) with the main KPMs,
 * or the one --kpm names; search: the ranked process-intervals with value, baseline and link.
 * Threading: single-threaded. */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *s_of(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static double d_of(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void print_score(json_t *x) {
    const char *unit = s_of(x, "unit");
    double sc = d_of(x, "score"), th = d_of(x, "threshold");
    if (!strcmp(unit, "share"))
        printf("  score %.1f%% (threshold %.1f%%)\n", sc * 100, th * 100);
    else if (!strcmp(unit, "bytes/s"))
        printf("  score %.0f KiB/s (threshold %.0f KiB/s)\n", sc / 1024, th / 1024);
    else
        printf("  score %.0f %s (threshold %.0f %s)\n", sc, unit, th, unit);
}

static void print_time(json_int_t s) {
    time_t t = (time_t)s;
    struct tm tm;
    char b[32] = "-";
    if (gmtime_r(&t, &tm))
        strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", &tm);
    printf("%-20s", b);
}

static void print_kpm(json_t *o) {
    static const char *const main_kpms[] = {"cpu_cores", "alloc_rate", "heap_live", "lock_wait",
                                            "io_bytes", "threads", NULL};
    const char *one[2] = {s_of(o, "kpm"), NULL};
    const char *const *cols = *one[0] ? one : main_kpms;
    int per = !strcmp(s_of(o, "by"), "process");
    json_t *x;
    size_t i;
    printf("%-20s %-24s", "INTERVAL (UTC)", per ? "HOST:PID" : "PROCESSES");
    for (int k = 0; cols[k]; k++)
        printf(" %14s", cols[k]);
    printf("\n");
    json_array_foreach(json_object_get(o, "points"), i, x) {
        print_time(json_integer_value(json_object_get(x, "bucket")));
        char who[160];
        if (per)
            snprintf(who, sizeof who, "%s:%lld", s_of(x, "host"),
                     (long long)json_integer_value(json_object_get(x, "pid")));
        else
            snprintf(who, sizeof who, "%lld",
                     (long long)json_integer_value(json_object_get(x, "processes")));
        printf(" %-24s", who);
        for (int k = 0; cols[k]; k++) {
            json_t *v = json_object_get(json_object_get(x, "values"), cols[k]);
            if (json_is_number(v))
                printf(" %14.6g", json_number_value(v));
            else
                printf(" %14s", "-");
        }
        printf("\n");
    }
}

static void print_search(json_t *o) {
    json_t *x;
    size_t i;
    printf("%s (%s), ranked by %s\n", s_of(o, "kpm"), s_of(o, "unit"), s_of(o, "ranked_by"));
    printf("%-4s %-20s %-24s %14s %14s  %s\n", "#", "INTERVAL (UTC)", "HOST:PID", "VALUE",
           "BASELINE", "PROFILE");
    json_array_foreach(json_object_get(o, "results"), i, x) {
        char who[160];
        snprintf(who, sizeof who, "%s:%lld", s_of(x, "host"),
                 (long long)json_integer_value(json_object_get(x, "pid")));
        printf("%-4zu ", i + 1);
        print_time(json_integer_value(json_object_get(x, "bucket")));
        printf(" %-24s %14.6g %14.6g  %s\n", who, d_of(x, "value"), d_of(x, "baseline"),
               s_of(x, "link"));
    }
    if (!json_array_size(json_object_get(o, "results")))
        printf("(no process-interval has that KPM in the range)\n");
}

void cli_print_insights(const char *what, json_t *o) {
    if (!strcmp(what, "kpm"))
        return print_kpm(o);
    if (!strcmp(what, "search"))
        return print_search(o);
    json_t *arr = json_object_get(o, "insights"), *x, *e;
    size_t i, k;
    const char *ver = s_of(o, "version");
    printf("service %s%s%s: %zu insight%s (%lld rules evaluated, %.0f process-seconds)\n",
           s_of(o, "service"), *ver ? " version " : "", ver, json_array_size(arr),
           json_array_size(arr) == 1 ? "" : "s", (long long)json_integer_value(
                                                     json_object_get(o, "evaluated")),
           d_of(o, "process_seconds"));
    json_array_foreach(arr, i, x) {
        printf("\n%zu. %s [%s]\n", i + 1, s_of(x, "title"), s_of(x, "rule"));
        print_score(x);
        printf("  %s\n", s_of(x, "summary"));
        json_array_foreach(json_object_get(x, "evidence"), k, e) {
            printf("    %-48s %6.1f%%  %.4g\n", s_of(e, "name"), d_of(e, "share") * 100,
                   d_of(e, "value"));
            if (*s_of(e, "link"))
                printf("      %s\n", s_of(e, "link"));
        }
        printf("  What it means: %s\n  Usual fix: %s\n", s_of(x, "explain"), s_of(x, "fix"));
    }
    if (!json_array_size(arr))
        printf("(nothing to report at the default thresholds)\n");
}
