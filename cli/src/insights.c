/* `fleetprof insights`: the table of the insights GET /api/v1/insights answered (the query
 * itself is query_cmds.c's): per insight its title, score against threshold, the sentence with
 * the figures, the evidence (site, share, value) with the profile link, and what usually fixes
 * it. Threading: single-threaded. */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

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

void cli_print_insights(json_t *o) {
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
