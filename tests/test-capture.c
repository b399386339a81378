/* `fleetprof capture` end to end, with real parts: demo-service processes under `fleetprof run`
 * (the agent preloaded, flight recorder on) -> fleetprof-collector -> a real Kafka broker (port
 * 19630) -> fleetprof-aggregator; the CLI asks for captures through the aggregator (POST
 * /api/v1/captures -> topic fleetprof.control -> the collector -> the agent's connection) and
 * straight to the collector (--collector SOCKET).
 *
 * Processes: capsvc A and capsvc B (one service, two pids) and othersvc C (at most 180 s each).
 *   refused      an unknown service through the aggregator and through the collector: exit 1
 *                and a message saying so; no --service: exit 2
 *   fleet_pid    capture --service capsvc --pid A: one manual incident of A within 40 s, none
 *                of B or C; the aggregator's webhook for capsvc posts it (a receiver thread)
 *   local_pid    capture --collector SOCK --service capsvc --pid B: sent to 1 process; one
 *                manual incident of B, still one of A, none of C
 * The collector's counters say what each hop did (commands received by source, sent, dropped).
 *
 * Labels: pipeline, kafka, nosan (it preloads the agent into an uninstrumented program). */
#define _GNU_SOURCE
#include "aggtest.h"
#include "support/pipeline.h"
#include "support/runner.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#define KPORT 19630
#define COL_HTTP 19631
#define AGG_HTTP 19632
#define HOOK_PORT 19633 /* the incident webhook's receiver (aggregator --webhooks capsvc=...) */
#define RUN_S "180" /* killed when the cases end */

static ts_pipeline_t pl;
static const char *cli = pl.cli;
static const tc_collector_t *col = &pl.col;
static pid_t procs[3]; /* capsvc A, capsvc B, othersvc C */

/* Runs a shell command line with FLEETPROF_SERVER set; its stdout and stderr together in out. */
static int sh(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh(char *out, size_t size, const char *fmt, ...) {
    char args[2048], cmd[2400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "FLEETPROF_SERVER=%s %s 2>&1", pl.server, args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, size - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    printf("$ %s\n%s", args, out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The webhook receiver (a thread of main): each POST's body, one line each, to hooks_path. */
static char hooks_path[128];

static void *hook_server(void *arg) {
    int ls = *(int *)arg;
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0)
            continue;
        char req[16384];
        size_t n = 0;
        const char *body = NULL;
        long len = -1;
        for (ssize_t r; n < sizeof req - 1 && (r = read(fd, req + n, sizeof req - 1 - n)) > 0;) {
            n += (size_t)r;
            req[n] = 0;
            const char *cl = strcasestr(req, "Content-Length:");
            body = strstr(req, "\r\n\r\n");
            len = cl ? atol(cl + 15) : -1;
            if (body && len >= 0 && (size_t)(body + 4 - req) + (size_t)len <= n)
                break;
        }
        FILE *f = fopen(hooks_path, "a");
        if (f && body && len >= 0) {
            fprintf(f, "%.*s\n", (int)len, body + 4);
            fclose(f);
        } else if (f) {
            fclose(f);
        }
        const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        if (write(fd, ok, sizeof ok - 1) < 0)
            perror("webhook receiver");
        close(fd);
    }
    return NULL;
}

static int hook_start(void) {
    static int ls;
    static pthread_t t;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(HOOK_PORT)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ls = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 16))
        return -1;
    snprintf(hooks_path, sizeof hooks_path, "%s/webhooks.jsonl", pl.dir);
    return pthread_create(&t, NULL, hook_server, &ls);
}

/* Waits (at most timeout_s) for a webhook post of a manual incident of pid. Returns 1 if seen. */
static int wait_hook(pid_t pid, int timeout_s) {
    char want[64];
    snprintf(want, sizeof want, "\"pid\":%d,", (int)pid);
    for (double end = at_now() + timeout_s; at_now() < end; at_sleep_ms(500)) {
        FILE *f = fopen(hooks_path, "r");
        char line[4096];
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, want) && strstr(line, "\"trigger\":\"manual\"") &&
                strstr(line, "\"service\":\"capsvc\"")) {
                fclose(f);
                printf("webhook: %s", line);
                return 1;
            }
        if (f)
            fclose(f);
    }
    return 0;
}

/* Manual incidents of service with this pid (pid 0: any), from the incidents API. */
static int manual_incidents(const char *service, pid_t pid) {
    char out[65536];
    CHECK(sh(out, sizeof out, "%s incidents --service %s --json", cli, service) == 0);
    json_t *o = json_loads(out, 0, NULL), *e;
    CHECKF(o, "not JSON: %.200s", out);
    size_t i;
    int n = 0;
    json_array_foreach(json_object_get(o, "incidents"), i, e) {
        const char *t = json_string_value(json_object_get(e, "trigger"));
        n += t && !strcmp(t, "manual") &&
             (!pid || json_integer_value(json_object_get(e, "pid")) == pid);
    }
    json_decref(o);
    return n;
}

/* Waits (at most timeout_s) for n manual incidents of service's pid. Returns the count seen. */
static int wait_manual(const char *service, pid_t pid, int n, int timeout_s) {
    double end = at_now() + timeout_s;
    int got;
    while ((got = manual_incidents(service, pid)) < n && at_now() < end)
        at_sleep_ms(1000);
    return got;
}

static void test_refused(void) {
    char out[4096];
    CHECK_EQ(sh(out, sizeof out, "%s capture --service nosuch --wait 0", cli), 1);
    CHECKF(strstr(out, "unknown service 'nosuch'"), "%s", out);
    CHECK_EQ(sh(out, sizeof out, "%s capture --collector %s --service nosuch", cli, col->sock), 1);
    CHECKF(strstr(out, "no connected agent of service 'nosuch'"), "%s", out);
    CHECK_EQ(sh(out, sizeof out, "%s capture --pid 1", cli), 2);
    CHECKF(strstr(out, "--service S is required"), "%s", out);
    CHECK(tc_metric(COL_HTTP, "fleetprof_collector_capture_commands_dropped_total"
                              "{reason=\"no_agent\"}") >= 1);
}

static void test_fleet_pid(void) {
    char out[8192];
    double t0 = at_now();
    CHECK_EQ(sh(out, sizeof out, "%s capture --service capsvc --pid %d --reason 'test fleet' "
                                 "--wait 40", cli, (int)procs[0]), 0);
    CHECKF(strstr(out, "1 process(es) captured"), "%s", out);
    printf("incident listed %.1f s after the request\n", at_now() - t0);
    CHECK_EQ(manual_incidents("capsvc", procs[0]), 1);
    CHECK_EQ(manual_incidents("capsvc", procs[1]), 0);
    CHECK_EQ(manual_incidents("othersvc", 0), 0);
    CHECK(tc_metric(COL_HTTP, "fleetprof_collector_capture_commands_total{source=\"topic\"}") >= 1);
    CHECKF(wait_hook(procs[0], 20), "no webhook post of the incident in %s", hooks_path);
    CHECK(tc_metric(COL_HTTP, "fleetprof_collector_capture_commands_sent_total") >= 1);
}

static void test_local_pid(void) {
    char out[4096];
    double sent0 = tc_metric(COL_HTTP, "fleetprof_collector_capture_commands_sent_total");
    CHECK_EQ(sh(out, sizeof out, "%s capture --collector %s --service capsvc --pid %d", cli,
                col->sock, (int)procs[1]), 0);
    CHECKF(strstr(out, "sent to 1 process(es)"), "%s", out);
    CHECK_EQ(tc_metric(COL_HTTP, "fleetprof_collector_capture_commands_sent_total"), sent0 + 1);
    CHECK_EQ(wait_manual("capsvc", procs[1], 1, 40), 1);
    CHECK_EQ(manual_incidents("capsvc", procs[0]), 1);
    CHECK_EQ(manual_incidents("othersvc", 0), 0);
}

static const tr_test_t tests[] = {
    {"refused", test_refused},
    {"fleet_pid", test_fleet_pid},
    {"local_pid", test_local_pid},
    {0},
};

static pid_t start_demo(const char *service) {
    static const char *const env[] = {"FLEETPROF_RECORDER=1", "FLEETPROF_RECORDER_AFTER=1s",
                                      NULL};
    static const char *const args[] = {"--threads", "1", "--rate", "200", "--seconds", RUN_S,
                                       "--quiet", NULL};
    return ts_pipeline_demo(&pl, service, "v1", "1", env, args);
}

/* Waits until the aggregator lists both services (their agents' chunks went the whole way). */
static int wait_services(void) {
    double end = at_now() + 60;
    char out[8192];
    while (at_now() < end) {
        if (sh(out, sizeof out, "%s services", cli) == 0 && strstr(out, "capsvc") &&
            strstr(out, "othersvc"))
            return 0;
        at_sleep_ms(1000);
    }
    return -1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    char hook[64];
    snprintf(hook, sizeof hook, "capsvc=http://127.0.0.1:%d/hook", HOOK_PORT);
    const char *extra[] = {"--fine-width", "2s", "--batch-interval", "500ms", "--webhooks", hook,
                           NULL};
    int rc = 1;
    if (ts_pipeline_start(&pl, KPORT, COL_HTTP, AGG_HTTP, "capture", extra))
        goto out;
    if (hook_start()) {
        printf("the webhook receiver cannot listen on port %d\n", HOOK_PORT);
        goto out;
    }
    procs[0] = start_demo("capsvc");
    procs[1] = start_demo("capsvc");
    procs[2] = start_demo("othersvc");
    printf("capsvc pids %d %d, othersvc pid %d\n", (int)procs[0], (int)procs[1], (int)procs[2]);
    if (wait_services()) {
        printf("the services did not reach the aggregator; see %s and %s\n", pl.log, col->log);
        goto out;
    }
    rc = tr_main(tests, argc, argv);
    if (rc)
        printf("logs: %s, %s\n", pl.log, col->log);
out:
    for (int i = 0; i < 3; i++)
        if (procs[i] > 0)
            kill(procs[i], SIGTERM);
    ts_pipeline_stop(&pl);
    return rc;
}
