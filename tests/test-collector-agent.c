/* End to end with the real agent: programs under `fleetprof run` (libfleetprof.so preloaded)
 * -> fleetprof-collector -> Kafka; a consumer reads back exactly the chunks the agents wrote to
 * FLEETPROF_OUTPUT (same chunk ids, per service in sequence order). In sanitizer builds a
 * sanitized libfleetprof.so cannot be preloaded, so the workload linked to the agent
 * (fp-work-linked) is run with the same FLEETPROF_* environment instead. If the agent is not
 * built, the test FAILS with "agent not built" (it never passes vacuously).
 * Broker 19402; HTTP 19457. */
#define _GNU_SOURCE
#include "cm/chunk.h"
#include "cm/wire.h"
#include "support/kafka.h"
#include "support/runner.h"
#include "test-collector-client.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PORT 19402
#define HTTP 19457
#define NSVC 3

typedef struct {
    char id[33];
    uint64_t seq;
    int found;
} want_t;

static int exists(const char *p) { return access(p, R_OK) == 0; }

/* Reads every chunk file of dir: chunk ids and sequences. */
static int load_dir(const char *dir, want_t **out) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0, cap = 64;
    want_t *w = calloc((size_t)cap, sizeof *w);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 4, CM_CHUNK_FILE_SUFFIX))
            continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        static uint8_t buf[32 << 20];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        cm_chunk_t *c;
        char err[256];
        CHECKF(cm_chunk_decode(buf, len, &c, err, sizeof err) == 0, "%s: %s", path, err);
        if (n == cap)
            w = realloc(w, (size_t)(cap *= 2) * sizeof *w);
        cm_hex(c->header.chunk_id, 16, w[n].id);
        w[n].seq = c->header.sequence;
        w[n].found = 0;
        n++;
        cm_chunk_free(c);
    }
    closedir(d);
    *out = w;
    return n;
}

static void test_agents_through_collector_to_kafka(void) {
    const char *b = getenv("FLEETPROF_BUILD");
    CHECKF(b != NULL, "FLEETPROF_BUILD not set (run through ctest)");
    char cli[4200], lib[4200], work[4200], linked[4200];
    snprintf(cli, sizeof cli, "%s/cli/fleetprof", b);
    snprintf(lib, sizeof lib, "%s/agent/libfleetprof.so", b);
    snprintf(work, sizeof work, "%s/tests/fp-work", b);
    snprintf(linked, sizeof linked, "%s/tests/fp-work-linked", b);
#ifdef FP_SANITIZED
    int sanitized = 1;
#else
    int sanitized = 0;
#endif
    CHECKF(exists(lib) && exists(cli) && exists(work) && exists(linked),
           "agent not built: need %s, %s (with `run`), %s and %s", lib, cli, work, linked);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "'%s' run --help 2>&1 | grep -q 'fleetprof run'", cli);
    CHECKF(system(cmd) == 0, "agent not built: %s has no `run` command", cli);

    char bootstrap[64];
    CHECK(tc_kafka_fresh(PORT, 3, bootstrap, sizeof bootstrap) == 0);
    tc_collector_t c = {0};
    CHECK(tc_collector_start(&c, bootstrap, HTTP, NULL) == 0);

    const char *svc[NSVC] = {"e2e-checkout", "e2e-search", "e2e-billing"};
    char dirs[NSVC][300];
    pid_t pids[NSVC];
    for (int i = 0; i < NSVC; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/out-%d", c.dir, i);
        CHECK(mkdir(dirs[i], 0755) == 0);
        if ((pids[i] = fork()) == 0) {
            int fd = open("/dev/null", O_WRONLY);
            dup2(fd, 1);
            if (sanitized) {
                setenv("FLEETPROF_SERVICE", svc[i], 1);
                setenv("FLEETPROF_OUTPUT", dirs[i], 1);
                setenv("FLEETPROF_COLLECTOR", c.sock, 1);
                setenv("FLEETPROF_INTERVAL", "1", 1);
                execl(linked, linked, "threads", "2", "4", (char *)NULL);
            } else {
                execl(cli, cli, "run", "--service", svc[i], "--output", dirs[i], "--collector",
                      c.sock, "--interval", "1", "--", work, "threads", "2", "4", (char *)NULL);
            }
            _exit(127);
        }
    }
    for (int i = 0; i < NSVC; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "agent %s: status %d", svc[i], st);
    }
    want_t *w[NSVC];
    int nw[NSVC], total = 0;
    for (int i = 0; i < NSVC; i++) {
        nw[i] = load_dir(dirs[i], &w[i]);
        CHECKF(nw[i] >= 3, "%s wrote only %d chunks", svc[i], nw[i]);
        total += nw[i];
    }
    CHECK_EQ(tc_metric_wait(HTTP, "fleetprof_collector_chunks_delivered_total", total, 60),
             total);
    tc_msg_t *m;
    int got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, (size_t)total, 90, 3, &m);
    CHECKF(got >= total, "consumed %d of %d", got, total);
    for (int k = 0; k < got; k++) {
        int s = -1;
        for (int i = 0; i < NSVC; i++)
            if (!strcmp(m[k].key, svc[i]))
                s = i;
        CHECKF(s >= 0, "unexpected key '%s'", m[k].key);
        int hit = 0;
        for (int j = 0; j < nw[s]; j++)
            if (!strcmp(w[s][j].id, m[k].chunk_id)) {
                hit = 1;
                w[s][j].found++;
            }
        CHECKF(hit, "%s: chunk %s was not written by the agent", svc[s], m[k].chunk_id);
    }
    for (int i = 0; i < NSVC; i++) {
        for (int j = 0; j < nw[i]; j++)
            CHECKF(w[i][j].found >= 1, "%s: chunk %s (seq %llu) never reached Kafka", svc[i],
                   w[i][j].id, (unsigned long long)w[i][j].seq);
        /* In order per service. */
        uint64_t last = 0;
        int first = 1;
        for (int k = 0; k < got; k++) {
            if (strcmp(m[k].key, svc[i]))
                continue;
            CHECKF(first || m[k].sequence > last, "%s: seq %llu after %llu", svc[i],
                   (unsigned long long)m[k].sequence, (unsigned long long)last);
            last = m[k].sequence;
            first = 0;
        }
        free(w[i]);
    }
    CHECK_EQ(got, total); /* healthy broker, no restarts: no duplicates either */
    printf("%d chunks from %d agents, all in Kafka\n", total, NSVC);
    free(m);
    int st = tc_collector_stop(&c, SIGTERM, 20);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "collector status %d", st);
    CHECK(ts_kafka_stop(PORT, 0) == 0);
    tc_cleanup(&c);
}

static const tr_test_t tests[] = {
    {"agents_through_collector_to_kafka", test_agents_through_collector_to_kafka},
    {0, 0},
};
TR_MAIN(tests)
