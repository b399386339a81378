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
#include <sys/prctl.h>
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

static uint64_t g_queue_drops; /* CM_DROP_CHUNK_QUEUE_FULL reported in the files read */

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
        for (uint32_t k = 0; k < c->header.n_drops; k++)
            if (c->header.drops[k].reason == CM_DROP_CHUNK_QUEUE_FULL)
                g_queue_drops += c->header.drops[k].count;
        cm_chunk_free(c);
    }
    closedir(d);
    *out = w;
    return n;
}

typedef struct {
    char cli[4200], work[4200], linked[4200];
    int sanitized;
} agent_bin_t;

/* Finds the agent pieces or fails with "agent not built". */
static void agent_bins(agent_bin_t *a) {
    const char *b = getenv("FLEETPROF_BUILD");
    CHECKF(b != NULL, "FLEETPROF_BUILD not set (run through ctest)");
    char lib[4200];
    snprintf(a->cli, sizeof a->cli, "%s/cli/fleetprof", b);
    snprintf(lib, sizeof lib, "%s/agent/libfleetprof.so", b);
    snprintf(a->work, sizeof a->work, "%s/tests/fp-work", b);
    snprintf(a->linked, sizeof a->linked, "%s/tests/fp-work-linked", b);
#ifdef FP_SANITIZED
    a->sanitized = 1;
#else
    a->sanitized = 0;
#endif
    CHECKF(exists(lib) && exists(a->cli) && exists(a->work) && exists(a->linked),
           "agent not built: need %s, %s (with `run`), %s and %s", lib, a->cli, a->work,
           a->linked);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "'%s' run --help 2>&1 | grep -q 'fleetprof run'", a->cli);
    CHECKF(system(cmd) == 0, "agent not built: %s has no `run` command", a->cli);
}

/* Starts `fp-work threads 2 SECS` under the agent for service, sending to sock. */
static pid_t agent_start(const agent_bin_t *a, const char *service, const char *dir,
                         const char *sock, const char *secs) {
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        if (a->sanitized) {
            setenv("FLEETPROF_SERVICE", service, 1);
            setenv("FLEETPROF_OUTPUT", dir, 1);
            setenv("FLEETPROF_COLLECTOR", sock, 1);
            setenv("FLEETPROF_INTERVAL", "1", 1);
            execl(a->linked, a->linked, "threads", "2", secs, (char *)NULL);
        } else {
            execl(a->cli, a->cli, "run", "--service", service, "--output", dir, "--collector",
                  sock, "--interval", "1", "--", a->work, "threads", "2", secs, (char *)NULL);
        }
        _exit(127);
    }
    return pid;
}

/* Waits for an agent's workload (a few seconds of work) with a deadline: a hung agent fails
 * the test with its name instead of eating the test's whole time limit. */
static void agent_wait(pid_t pid, const char *service) {
    int st = 0;
    for (int i = 0; i < 1200; i++) { /* 60 s */
        if (waitpid(pid, &st, WNOHANG) == pid) {
            CHECKF(!(WIFEXITED(st) && WEXITSTATUS(st) == 66),
                   "agent %s exited 66: the sanitizer reported errors in the agent", service);
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "agent %s: status %d", service, st);
            return;
        }
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    CHECKF(0, "agent %s (pid %d) still running after 60 s: the agent hung", service, (int)pid);
}

static void test_agents_through_collector_to_kafka(void) {
    agent_bin_t a;
    agent_bins(&a);
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
        pids[i] = agent_start(&a, svc[i], dirs[i], c.sock, "4");
    }
    for (int i = 0; i < NSVC; i++)
        agent_wait(pids[i], svc[i]);
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

/* The collector is SIGKILLed while agents run and restarted a second later: every chunk the
 * agents wrote reaches Kafka (the spool replays what the collector had accepted, the agents
 * resend what was not acked), except chunks the agents themselves dropped and counted. */
static void test_agents_survive_collector_sigkill(void) {
    agent_bin_t a;
    agent_bins(&a);
    char bootstrap[64];
    CHECK(tc_kafka_fresh(PORT, 3, bootstrap, sizeof bootstrap) == 0);
    tc_collector_t c = {0};
    CHECK(tc_collector_start(&c, bootstrap, HTTP, NULL) == 0);
    const char *svc[2] = {"kill-a", "kill-b"};
    char dirs[2][300];
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/out-%d", c.dir, i);
        CHECK(mkdir(dirs[i], 0755) == 0);
        pids[i] = agent_start(&a, svc[i], dirs[i], c.sock, "7");
    }
    CHECK(tc_metric_wait(HTTP, "fleetprof_collector_chunks_accepted_total", 2, 20) >= 2);
    CHECK(tc_collector_stop(&c, SIGKILL, 10) >= 0);
    sleep(1);
    CHECK(tc_collector_start(&c, bootstrap, HTTP, NULL) == 0);
    for (int i = 0; i < 2; i++)
        agent_wait(pids[i], svc[i]);
    g_queue_drops = 0;
    want_t *w[2];
    int nw[2], total = 0;
    for (int i = 0; i < 2; i++) {
        nw[i] = load_dir(dirs[i], &w[i]);
        CHECKF(nw[i] >= 5, "%s wrote only %d chunks", svc[i], nw[i]);
        total += nw[i];
    }
    tc_msg_t *m;
    int got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, (size_t)total, 90, 5, &m);
    int missing = 0, dups = 0;
    for (int k = 0; k < got; k++) {
        int hit = 0;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < nw[i]; j++)
                if (!strcmp(m[k].key, svc[i]) && !strcmp(w[i][j].id, m[k].chunk_id))
                    dups += w[i][j].found++ > 0, hit = 1;
        CHECKF(hit, "chunk %s (%s) was not written by an agent", m[k].chunk_id, m[k].key);
    }
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < nw[i]; j++)
            missing += w[i][j].found == 0;
        free(w[i]);
    }
    printf("%d chunks written, %d consumed (%d duplicates), %d missing, agents counted %llu "
           "queue-full drops\n",
           total, got, dups, missing, (unsigned long long)g_queue_drops);
    CHECKF((uint64_t)missing <= g_queue_drops, "%d chunks missing, agents counted only %llu drops",
           missing, (unsigned long long)g_queue_drops);
    free(m);
    int st = tc_collector_stop(&c, SIGTERM, 20);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "collector status %d", st);
    CHECK(ts_kafka_stop(PORT, 0) == 0);
    tc_cleanup(&c);
}

static const tr_test_t tests[] = {
    {"agents_through_collector_to_kafka", test_agents_through_collector_to_kafka},
    {"agents_survive_collector_sigkill", test_agents_survive_collector_sigkill},
    {0, 0},
};
TR_MAIN(tests)
