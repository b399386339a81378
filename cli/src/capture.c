/* fleetprof capture: a manual incident capture of a service's processes (trigger "manual").
 *
 *   fleet:  POST /api/v1/captures on the aggregator, which publishes the command on the control
 *           topic; every collector sends it to its connected agents that match (service, host,
 *           pid). The CLI then polls GET /api/v1/incidents for --wait seconds and prints the
 *           manual incidents that arrive (one per process that took the command).
 *   local:  --collector SOCKET sends the command straight to this node's collector (its agents'
 *           socket, control hello; cm/wire.h), which answers how many agents it was sent to. No
 *           Kafka round trip; a user other than root or the collector's may capture only its own
 *           processes.
 *
 * Exit status: 0 the command went out (fleet: published; local: sent to at least one agent),
 * 1 it reached no process or was refused (the message says why), 2 usage error.
 * Threading: single-threaded. */
#include "cli.h"
#include "client.h"

#include "cm/error.h"
#include "cm/wire.h"

#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SERVER "http://127.0.0.1:9402"
#define CTL_TIMEOUT_MS 5000

typedef struct {
    const char *service, *host, *pid, *reason, *collector, *server, *token;
    double wait_s;
    int json;
    char requester[160];
} cap_opts_t;

static const char usage_text[] =
    "usage: fleetprof capture --service S [--host H] [--pid P] [--reason TEXT]\n"
    "           [--wait SECONDS (20; 0: do not wait)] [--json] [--server URL] [--token T]\n"
    "       fleetprof capture --collector SOCKET --service S [--pid P] [--reason TEXT]\n"
    "  A manual incident capture (trigger \"manual\") of every process of service S (on host H,\n"
    "  with pid P) whose agent runs the flight recorder (FLEETPROF_RECORDER=1) and is connected\n"
    "  to its collector; each process applies its cooldown and capture cap.\n"
    "  Through the aggregator (default): the command goes to every collector over Kafka; the\n"
    "  manual incidents that arrive within --wait seconds are listed.\n"
    "  --collector SOCKET: straight to this node's collector (e.g. "
    CM_DEFAULT_SOCKET "),\n"
    "  which says how many processes it sent the command to.\n";

static int put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return 4;
}

/* Writes all n bytes of p to fd. Returns 0 or -1. */
static int write_all(int fd, const void *p, size_t n) {
    for (const char *c = p; n;) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The command's text (cm/wire.h). */
static void command_text(const cap_opts_t *o, char *out, size_t size) {
    snprintf(out, size, "cmd=capture\nservice=%s\nhost=%s\n%s%s%sreason=%s\nrequester=%s\n",
             o->service, o->host ? o->host : "", o->pid ? "pid=" : "", o->pid ? o->pid : "",
             o->pid ? "\n" : "", o->reason ? o->reason : "", o->requester);
}

/* The local form: one command on the collector's socket, its answer read back (at most
 * CTL_TIMEOUT_MS). */
static int capture_local(const cap_opts_t *o) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(o->collector) >= sizeof sa.sun_path) {
        fprintf(stderr, "fleetprof capture: --collector '%s' is too long a socket path\n",
                o->collector);
        return 2;
    }
    strcpy(sa.sun_path, o->collector);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        fprintf(stderr, "fleetprof capture: cannot connect to the collector at %s: %m (is "
                        "fleetprof-collector running with socket=%s?)\n", o->collector,
                o->collector);
        if (fd >= 0)
            close(fd);
        return 1;
    }
    char text[1024];
    command_text(o, text, sizeof text);
    uint8_t msg[8 + 4 + sizeof text], ack[CM_SOCK_ACK_SIZE];
    size_t n = strlen(text), k = 0;
    memcpy(msg, CM_SOCK_CTL_MAGIC, 4);
    k = 4 + (size_t)put32(msg + 4, CM_SOCK_VERSION);
    k += (size_t)put32(msg + k, (uint32_t)n);
    memcpy(msg + k, text, n);
    size_t got = 0;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (!write_all(fd, msg, k + n))
        while (got < sizeof ack && poll(&pfd, 1, CTL_TIMEOUT_MS) == 1) {
            ssize_t r = recv(fd, ack + got, sizeof ack - got, 0);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
    close(fd);
    if (got < sizeof ack) {
        fprintf(stderr, "fleetprof capture: the collector at %s did not answer (an older "
                        "collector without capture commands closes the connection)\n",
                o->collector);
        return 1;
    }
    int32_t st = (int32_t)((uint32_t)ack[4] | (uint32_t)ack[5] << 8 | (uint32_t)ack[6] << 16 |
                           (uint32_t)ack[7] << 24);
    if (st < 0) {
        fprintf(stderr, "fleetprof capture: the collector refused the command: %s\n",
                cm_strerror(st));
        return 1;
    }
    if (o->json)
        printf("{\"sent_to\":%d}\n", st);
    else if (st == 0)
        fprintf(stderr, "fleetprof capture: no connected agent of service '%s'%s%s on this node "
                        "(an agent connects when it sends its first chunk, and only processes "
                        "of your own user unless you are root)\n",
                o->service, o->pid ? " with pid " : "", o->pid ? o->pid : "");
    else
        printf("capture command sent to %d process(es) of %s; their incidents (trigger manual) "
               "follow after FLEETPROF_RECORDER_AFTER\n", st, o->service);
    return st > 0 ? 0 : 1;
}

/* Appends "&key=escaped value" to q (size qsz) when v is set. */
static void qadd(char *q, size_t qsz, const char *key, const char *v) {
    if (!v)
        return;
    char *e = cli_url_escape(v);
    size_t n = strlen(q);
    snprintf(q + n, qsz - n, "%s%s=%s", strchr(q, '?') ? "&" : "?", key, e ? e : "");
    free(e);
}

/* The manual incidents of the service triggered since issued_ns (less a second of clock skew)
 * on the processes o names, printed; returns how many (-1: the API failed). */
static int incidents_since(const cap_opts_t *o, long long issued_ns, int quiet) {
    char path[1024] = "/api/v1/incidents";
    qadd(path, sizeof path, "service", o->service);
    cli_resp_t r;
    if (cli_http_get(o->server, o->token, path, &r) || r.status != 200) {
        cli_resp_free(&r);
        return -1;
    }
    json_t *root = json_loads(r.body, 0, NULL), *arr = json_object_get(root, "incidents"), *s;
    size_t i;
    int n = 0;
    json_array_foreach(arr, i, s) {
        const char *trig = json_string_value(json_object_get(s, "trigger"));
        const char *host = json_string_value(json_object_get(s, "host"));
        long long t = (long long)json_integer_value(json_object_get(s, "trigger_ns"));
        long long pid = (long long)json_integer_value(json_object_get(s, "pid"));
        if (!trig || strcmp(trig, "manual") || t < issued_ns - 1000000000LL ||
            (o->host && (!host || strcmp(host, o->host))) || (o->pid && pid != atoll(o->pid)))
            continue;
        n++;
        if (!quiet)
            printf("  incident %s  host %s  pid %lld\n",
                   json_string_value(json_object_get(s, "id")), host ? host : "?", pid);
    }
    json_decref(root);
    cli_resp_free(&r);
    return n;
}

/* 0 when the aggregator knows the service (it has its data), else 1 after a message. */
static int service_known(const cap_opts_t *o) {
    char path[512] = "/api/v1/services/", *e = cli_url_escape(o->service);
    snprintf(path + strlen(path), sizeof path - strlen(path), "%s/versions", e ? e : "");
    free(e);
    cli_resp_t r;
    int rc = cli_http_get(o->server, o->token, path, &r);
    if (rc)
        fprintf(stderr, "fleetprof capture: %s\n", r.err);
    else if (r.status == 404)
        fprintf(stderr, "fleetprof capture: unknown service '%s': the aggregator has no data of "
                        "it (`fleetprof services` lists the services; the name is the agents' "
                        "FLEETPROF_SERVICE)\n", o->service);
    else if (r.status != 200)
        fprintf(stderr, "fleetprof capture: the aggregator answered HTTP %ld: %.300s\n",
                r.status, r.body);
    rc = rc || r.status != 200;
    cli_resp_free(&r);
    return rc;
}

/* The fleet form: POST /api/v1/captures, then the incidents for o->wait_s seconds. */
static int capture_fleet(const cap_opts_t *o) {
    if (service_known(o))
        return 1;
    char path[2048] = "/api/v1/captures";
    qadd(path, sizeof path, "service", o->service);
    qadd(path, sizeof path, "host", o->host);
    qadd(path, sizeof path, "pid", o->pid);
    qadd(path, sizeof path, "reason", o->reason);
    qadd(path, sizeof path, "requester", o->requester);
    cli_resp_t r;
    if (cli_http_post(o->server, o->token, path, &r)) {
        fprintf(stderr, "fleetprof capture: %s\n", r.err);
        return 1;
    }
    json_t *root = json_loads(r.body, 0, NULL);
    if (r.status != 202) {
        const char *e = json_string_value(json_object_get(root, "error"));
        fprintf(stderr, "fleetprof capture: the aggregator refused the capture (HTTP %ld): %s\n",
                r.status, e ? e : r.body);
        json_decref(root);
        cli_resp_free(&r);
        return 1;
    }
    long long issued = (long long)json_integer_value(json_object_get(root, "issued_ns"));
    if (o->json)
        printf("%s\n", r.body);
    else
        printf("capture %s of %s published to every collector (topic %s)\n",
               json_string_value(json_object_get(root, "id")), o->service,
               json_string_value(json_object_get(root, "topic")));
    json_decref(root);
    cli_resp_free(&r);
    if (o->wait_s <= 0 || o->json)
        return 0;
    printf("waiting up to %.0f s for the manual incidents (each arrives after its burst, "
           "FLEETPROF_RECORDER_AFTER):\n", o->wait_s);
    fflush(stdout);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int n = 0;
    do {
        sleep(1);
        n = incidents_since(o, issued, 1);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (n <= 0 && (double)(now.tv_sec - t0.tv_sec) < o->wait_s);
    if (n > 0) {
        sleep(2); /* the other processes' incidents, usually a moment behind */
        n = incidents_since(o, issued, 0);
    }
    printf("%d process(es) captured%s\n", n > 0 ? n : 0,
           n > 0 ? "" : " so far (none connected with FLEETPROF_RECORDER=1, or in cooldown; "
                        "`fleetprof incidents` lists later arrivals)");
    return 0;
}

/* Parses the flags into o. Returns 0, or 2 after a usage message (-1: --help printed). */
static int parse(int argc, char **argv, cap_opts_t *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        static const char *const names[] = {"--service", "--host",   "--pid",   "--reason",
                                            "--collector", "--server", "--token", "--wait"};
        const char **dst[] = {&o->service, &o->host,   &o->pid,   &o->reason,
                              &o->collector, &o->server, &o->token, NULL};
        size_t k = 0;
        while (k < 8 && strcmp(a, names[k]))
            k++;
        if (k == 8 || i + 1 >= argc) {
            fprintf(stderr, "fleetprof capture: %s '%s'\n%s",
                    k == 8 ? "unknown flag" : "a value is missing after", a, usage_text);
            return 2;
        }
        if (dst[k])
            *dst[k] = argv[++i];
        else
            o->wait_s = atof(argv[++i]);
    }
    char *end = NULL;
    long pid = o->pid ? strtol(o->pid, &end, 10) : 1;
    if (!o->service || !*o->service || pid <= 0 || (end && *end)) {
        fprintf(stderr, "fleetprof capture: %s\n%s",
                !o->service || !*o->service ? "--service S is required"
                                            : "--pid must be a process id",
                usage_text);
        return 2;
    }
    return 0;
}

int cli_capture(int argc, char **argv) {
    cap_opts_t o = {.server = getenv("FLEETPROF_SERVER"), .token = getenv("FLEETPROF_TOKEN"),
                    .wait_s = 20};
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!o.server || !*o.server)
        o.server = DEFAULT_SERVER;
    char host[128] = "";
    const char *user = getenv("USER");
    gethostname(host, sizeof host - 1);
    snprintf(o.requester, sizeof o.requester, "%s@%s", user ? user : "?", host);
    return o.collector ? capture_local(&o) : capture_fleet(&o);
}
