/* libFuzzer target: the aggregator's query API parameters (parsing, validation, filters, the
 * queries they lead to and the rendering of the answer) on arbitrary arguments, against a
 * small real store (written once at start from the fleet simulator). Input: the first byte
 * picks the route; the rest is "key=value" pairs separated by '&' (keys and values arbitrary
 * bytes, as the HTTP server hands them over decoded); for /api/v1/services/ the first key is
 * the rest of the path. Must never crash or leak; every answer has a status and a body, and
 * only 200/400/404 are expected (a 500 is a finding). */
#include "api.h"
#include "dims.h"
#include "fleetsim.h"
#include "intern.h"
#include "rollup.h"
#include "store.h"

#include "cm/chunk.h"
#include "cm/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static agg_api_t *api;

static void write_store(const char *dir) {
    char path[256], err[512];
    agg_store_path(path, sizeof path, dir, "fleetprof.chunks", 0);
    agg_store_t *st;
    if (agg_store_sqlite_open(path, &st, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    agg_intern_t in;
    memset(&in, 0, sizeof in);
    agg_rollup_t r;
    agg_rollup_cfg_t rc = {10, 3600, 1, 1, 60};
    agg_rollup_init(&r, &rc);
    agg_dims_t dm; /* the rows carry dimensions (host, pid, I/O targets, ...) as ingest makes them */
    agg_dims_init(&dm, 3600, 0, 0);
    agg_batch_t b;
    agg_batch_init(&b);
    fsim_params_t sp = {.seed = 5, .services = 3, .versions = 2, .processes = 2, .intervals = 3,
                        .samples = 60, .stacks = 30};
    fsim_t *sim = fsim_new(&sp);
    const uint8_t *fr;
    size_t len;
    const char *key;
    int64_t off = 0;
    b.base_offset = -1;
    while (fsim_next(sim, &fr, &len, &key)) {
        cm_chunk_t *c;
        if (cm_chunk_decode(fr, len, &c, err, sizeof err))
            abort();
        agg_chunk_ids_t ids;
        agg_chunk_meta_t meta = {"", "node-1", "ns/pod-1", "", 0, 0, 0, 0};
        if (agg_intern_chunk(&in, &b, c, &ids) || agg_dims_chunk(&dm, &in, &b, c, &meta, &ids) ||
            agg_rollup_chunk(&r, &b, c, &ids))
            abort();
        b.next_offset = ++off;
        cm_chunk_free(c);
    }
    if (agg_store_batch_write(st, "fleetprof.chunks", 0, &b))
        abort();
    agg_batch_free(&b);
    agg_rollup_free(&r);
    agg_dims_free(&dm);
    agg_intern_free(&in);
    fsim_free(sim);
    agg_store_close(st);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/fuzz-api-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    cm_log_set_level(CM_LOG_OFF);
    write_store(dir);
    agg_api_cfg_t cfg = {.store_dir = dir, .token = NULL};
    char err[512];
    if (agg_api_new(&cfg, &api, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return 0;
}

static const char *const routes[] = {
    "/api/v1/services", "/api/v1/services/", "/api/v1/event-types", "/api/v1/profile",
    "/api/v1/timeseries", "/api/v1/diff", "/api/v1/reports", "/api/v1/spans",
    "/api/v1/span", "/api/v1/nothing", "/api/v1/endpoints", "/api/v1/endpoint",
    "/api/v1/requests", "/api/v1/endpoint-diff"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096)
        return 0;
    const char *route = routes[data[0] % (sizeof routes / sizeof *routes)];
    char *buf = malloc(size); /* the rest, NUL-terminated */
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    enum { MAXP = 80 }; /* past the API's own limit of 64 */
    const char *keys[MAXP], *vals[MAXP];
    size_t n = 0;
    char *p = buf;
    while (p && n < MAXP) {
        char *amp = memchr(p, '&', strlen(p));
        if (amp)
            *amp = 0;
        char *eq = strchr(p, '=');
        if (eq)
            *eq = 0;
        keys[n] = p;
        vals[n] = eq ? eq + 1 : "";
        n++;
        p = amp ? amp + 1 : NULL;
    }
    char url[4200];
    if (!strcmp(route, "/api/v1/services/"))
        snprintf(url, sizeof url, "%s%s", route, n ? keys[0] : "");
    else
        snprintf(url, sizeof url, "%s", route);
    agg_http_reply_t r = {.status = 200};
    agg_api_call(api, url, keys, vals, n, &r);
    if (!r.body || (r.status != 200 && r.status != 400 && r.status != 404)) {
        fprintf(stderr, "%s: status %d: %.*s\n", url, r.status, r.body ? (int)r.len : 6,
                r.body ? r.body : "(null)");
        abort();
    }
    free(r.body);
    free(buf);
    return 0;
}
