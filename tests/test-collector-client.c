/* Test client for the collector: agent protocol, collector process control, /metrics, Kafka
 * consumer. See test-collector-client.h. */
#define _GNU_SOURCE
#include "test-collector-client.h"

#include "cm/chunk.h"
#include "cm/wire.h"
#include "support/chunkgen.h"
#include "support/kafka.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t fnv(const char *s, uint64_t seq) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    for (int i = 0; i < 8; i++)
        h = (h ^ ((seq >> (8 * i)) & 0xff)) * 1099511628211ull;
    return h;
}

static void chunk_id(const char *service, uint64_t seq, uint8_t id[16]) {
    uint64_t a = fnv(service, seq), b = fnv(service, seq ^ 0x9e3779b97f4a7c15ull);
    memcpy(id, &a, 8);
    memcpy(id + 8, &b, 8);
}

void tc_chunk_id_hex(const char *service, uint64_t seq, char out[33]) {
    uint8_t id[16];
    chunk_id(service, seq, id);
    cm_hex(id, 16, out);
}

int tc_frame_make(const char *service, uint64_t seq, uint32_t samples, uint8_t **out,
                  size_t *len) {
    ts_gen_params_t p = ts_gen_realistic();
    if (samples < p.samples) {
        p.samples = samples;
        p.stacks = samples / 20 + 5;
    }
    cm_chunk_t *c = ts_gen_chunk(&p, seq * 7919 + (uint64_t)strlen(service));
    c->header.service = (cm_str_t){service, (uint32_t)strlen(service)};
    c->header.sequence = seq;
    chunk_id(service, seq, c->header.chunk_id);
    char err[256];
    int rc = cm_chunk_encode(c, out, len, err, sizeof err);
    if (rc)
        fprintf(stderr, "tc_frame_make: %s\n", err);
    ts_gen_free(c);
    return rc ? -1 : 0;
}

int tc_frame_make_big(const char *service, uint64_t seq, uint32_t stacks, uint32_t depth,
                      uint8_t **out, size_t *len) {
    ts_gen_params_t p = ts_gen_realistic();
    p.samples = stacks;
    p.stacks = stacks;
    p.min_depth = p.max_depth = depth;
    p.functions = stacks * 4;
    p.call_graph = 0; /* uniform random frames: compresses little */
    cm_chunk_t *c = ts_gen_chunk(&p, seq * 7919 + (uint64_t)strlen(service));
    c->header.service = (cm_str_t){service, (uint32_t)strlen(service)};
    c->header.sequence = seq;
    chunk_id(service, seq, c->header.chunk_id);
    char err[256];
    int rc = cm_chunk_encode(c, out, len, err, sizeof err);
    if (rc)
        fprintf(stderr, "tc_frame_make_big: %s\n", err);
    ts_gen_free(c);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ protocol */

static int write_all(int fd, const void *buf, size_t len) {
    const uint8_t *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int tc_connect(const char *path, int hello) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (hello) {
        uint8_t h[8] = {'F', 'P', 'R', 'H', CM_SOCK_VERSION, 0, 0, 0};
        if (write_all(fd, h, 8)) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

int tc_send(int fd, const uint8_t *msg, size_t len) {
    uint8_t l[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
    return write_all(fd, l, 4) || write_all(fd, msg, len) ? -1 : 0;
}

int tc_ack_read(int fd, uint32_t *msg_no, int32_t *status, int timeout_ms) {
    uint8_t a[8];
    size_t got = 0;
    double deadline = now_s() + timeout_ms / 1000.0;
    while (got < 8) {
        int left = (int)((deadline - now_s()) * 1000);
        if (left <= 0)
            return -1;
        struct pollfd pfd = {fd, POLLIN, 0};
        int r = poll(&pfd, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t n = read(fd, a + got, 8 - got);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return errno == ECONNRESET ? 0 : -1;
        }
        got += (size_t)n;
    }
    *msg_no = (uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 | (uint32_t)a[3] << 24;
    *status = (int32_t)((uint32_t)a[4] | (uint32_t)a[5] << 8 | (uint32_t)a[6] << 16 |
                        (uint32_t)a[7] << 24);
    return 1;
}

int32_t tc_send_acked(int fd, const uint8_t *msg, size_t len, uint32_t *no) {
    if (tc_send(fd, msg, len))
        return 99999;
    uint32_t got;
    int32_t st;
    if (tc_ack_read(fd, &got, &st, 10000) != 1)
        return 99998;
    if (got != ++*no) {
        fprintf(stderr, "tc_send_acked: ack for message %u, expected %u\n", got, *no);
        return 99996;
    }
    return st;
}

int tc_closed_within(int fd, double timeout_s) {
    double deadline = now_s() + timeout_s;
    char buf[4096];
    while (now_s() < deadline) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) > 0) {
            ssize_t r = read(fd, buf, sizeof buf);
            if (r == 0 || (r < 0 && errno == ECONNRESET))
                return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ process */

/* A TCP port of 127.0.0.1 that nothing listens on now (the kernel's pick), or -1. Another
 * process may take it before the collector binds it: collector_launch then says so. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t l = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int port = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                       getsockname(fd, (struct sockaddr *)&a, &l) == 0
                   ? ntohs(a.sin_port)
                   : -1;
    if (fd >= 0)
        close(fd);
    return port;
}

/* Did the collector's log, from byte off on, say its HTTP port was taken? */
static int log_says_port_in_use(const char *log, long off) {
    FILE *f = fopen(log, "r");
    char line[1024];
    int found = 0;
    if (!f)
        return 0;
    if (fseek(f, off, SEEK_SET) == 0)
        while (!found && fgets(line, sizeof line, f))
            found = strstr(line, "port in use?") != NULL;
    fclose(f);
    return found;
}

/* One start of the collector on c->http_port. Returns 0, -1, or 1 when it exited at start
 * because that port was taken. */
static int collector_launch(tc_collector_t *c, const char *bootstrap, const char *const *extra) {
    char exe[512], a_sock[400], a_spool[400], a_http[64], a_brokers[128];
    snprintf(exe, sizeof exe, "%s/collector/fleetprof-collector",
             getenv("FLEETPROF_BUILD") ? getenv("FLEETPROF_BUILD") : ".");
    snprintf(a_sock, sizeof a_sock, "--socket=%s", c->sock);
    snprintf(a_spool, sizeof a_spool, "--spool-dir=%s", c->spool);
    snprintf(a_http, sizeof a_http, "--http-listen=127.0.0.1:%d", c->http_port);
    snprintf(a_brokers, sizeof a_brokers, "--brokers=%s", bootstrap);
    const char *argv[64] = {exe, a_sock, a_spool, a_http, a_brokers, "--socket-mode=384"};
    int n = 6;
    for (int i = 0; extra && extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    struct stat lst;
    long log_off = stat(c->log, &lst) == 0 ? (long)lst.st_size : 0;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed CHECK must not leave a collector behind */
        int fd = open(c->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(exe, (char *const *)argv);
        perror("execv");
        _exit(127);
    }
    c->pid = pid;
    double deadline = now_s() + 15;
    while (now_s() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            c->pid = 0;
            if (log_says_port_in_use(c->log, log_off))
                return 1;
            fprintf(stderr, "collector exited at start (status %d); log %s\n", st, c->log);
            return -1;
        }
        int fd = tc_connect(c->sock, 0);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        usleep(20000);
    }
    fprintf(stderr, "collector socket %s not ready in 15 s\n", c->sock);
    return -1;
}

int tc_collector_start(tc_collector_t *c, const char *bootstrap, int http_port,
                       const char *const *extra) {
    if (!c->dir[0]) {
        snprintf(c->dir, sizeof c->dir, "/tmp/fp-col-test-XXXXXX");
        if (!mkdtemp(c->dir)) {
            perror("mkdtemp");
            return -1;
        }
    }
    snprintf(c->sock, sizeof c->sock, "%s/c.sock", c->dir);
    snprintf(c->spool, sizeof c->spool, "%s/spool", c->dir);
    snprintf(c->log, sizeof c->log, "%s/collector.log", c->dir);
    /* port 0: a free one, taken again if another process binds it first (a few times) */
    for (int attempt = 0; attempt < (http_port ? 1 : 8); attempt++) {
        c->http_port = http_port ? http_port : free_port();
        if (c->http_port <= 0) {
            fprintf(stderr, "no free TCP port on 127.0.0.1\n");
            return -1;
        }
        int rc = collector_launch(c, bootstrap, extra);
        if (rc <= 0)
            return rc;
        fprintf(stderr, "collector: HTTP port %d taken at start%s\n", c->http_port,
                http_port ? "" : ", another");
    }
    return -1;
}

int tc_collector_stop(tc_collector_t *c, int sig, int timeout_s) {
    if (c->pid <= 0)
        return -1;
    kill(c->pid, sig);
    double deadline = now_s() + timeout_s;
    int st = 0;
    while (now_s() < deadline) {
        if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
            c->pid = 0;
            return st;
        }
        usleep(20000);
    }
    kill(c->pid, SIGKILL);
    waitpid(c->pid, &st, 0);
    c->pid = 0;
    return -1;
}

void tc_cleanup(tc_collector_t *c) {
    char cmd[400];
    if (!c->dir[0] || strncmp(c->dir, "/tmp/fp-col-test-", 17) || getenv("TC_KEEP"))
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", c->dir);
}

int tc_http_get(int http_port, const char *path, char *body, size_t body_size) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
    if (write_all(fd, req, (size_t)n)) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    struct pollfd pfd = {fd, POLLIN, 0};
    while (len < cap - 1 && poll(&pfd, 1, 5000) > 0) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    int status = -1;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    char *b = strstr(buf, "\r\n\r\n");
    if (body && body_size)
        snprintf(body, body_size, "%s", b ? b + 4 : "");
    free(buf);
    return status;
}

double tc_metric(int http_port, const char *name) {
    size_t cap = 1 << 20;
    char *body = malloc(cap);
    double v = -1;
    if (tc_http_get(http_port, "/metrics", body, cap) == 200) {
        size_t nl = strlen(name);
        for (char *line = body; line && *line;) {
            char *next = strchr(line, '\n');
            if (!strncmp(line, name, nl) && line[nl] == ' ') {
                v = strtod(line + nl + 1, NULL);
                break;
            }
            line = next ? next + 1 : NULL;
        }
    }
    free(body);
    return v;
}

double tc_metric_wait_eq(int http_port, const char *name, double want, int timeout_s) {
    double deadline = now_s() + timeout_s, v = -1;
    while (now_s() < deadline) {
        v = tc_metric(http_port, name);
        if (v == want)
            break;
        usleep(50000);
    }
    return v;
}

double tc_metric_wait(int http_port, const char *name, double want, int timeout_s) {
    double deadline = now_s() + timeout_s, v = -1;
    while (now_s() < deadline) {
        v = tc_metric(http_port, name);
        if (v >= want)
            break;
        usleep(50000);
    }
    return v;
}

/* ------------------------------------------------------------------ consumer */

int tc_kafka_fresh(int port, int partitions, char *bootstrap, size_t size) {
    for (int attempt = 0; attempt < 2; attempt++) {
        ts_kafka_stop(port, 0);
        if (ts_kafka_start(port, partitions, NULL, bootstrap, size) == 0)
            return 0;
        fprintf(stderr, "broker on port %d did not start (attempt %d)\n", port, attempt + 1);
    }
    return -1;
}

int tc_consume(const char *bootstrap, const char *topic, size_t want, int timeout_s, int idle_s,
               tc_msg_t **out) {
    char err[512], group[64];
    snprintf(group, sizeof group, "tc-%d-%ld", getpid(), (long)time(NULL));
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err);
    rd_kafka_conf_set(conf, "group.id", group, err, sizeof err);
    rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
    rd_kafka_conf_set(conf, "isolation.level", "read_committed", err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "consumer: %s\n", err);
        return -1;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *tl = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(tl, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, tl);
    rd_kafka_topic_partition_list_destroy(tl);
    size_t n = 0, cap = want + 16;
    tc_msg_t *msgs = calloc(cap, sizeof *msgs);
    double deadline = now_s() + timeout_s, last = now_s();
    while (now_s() < deadline) {
        if (n >= want && now_s() - last > idle_s)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        last = now_s();
        if (n == cap) {
            cap *= 2;
            msgs = realloc(msgs, cap * sizeof *msgs);
        }
        tc_msg_t *t = &msgs[n];
        memset(t, 0, sizeof *t);
        snprintf(t->key, sizeof t->key, "%.*s", (int)m->key_len, (const char *)m->key);
        t->partition = m->partition;
        t->offset = m->offset;
        cm_chunk_t *c = NULL;
        char why[256];
        if (cm_chunk_decode(m->payload, m->len, &c, why, sizeof why) == 0) {
            cm_hex(c->header.chunk_id, 16, t->chunk_id);
            t->sequence = c->header.sequence;
            cm_chunk_free(c);
        } else {
            snprintf(t->chunk_id, sizeof t->chunk_id, "INVALID");
        }
        rd_kafka_headers_t *h;
        const void *v;
        size_t vl;
        if (rd_kafka_message_headers(m, &h) == 0) {
            if (rd_kafka_header_get_last(h, CM_HDR_HOST, &v, &vl) == 0)
                snprintf(t->host_hdr, sizeof t->host_hdr, "%.*s", (int)vl, (const char *)v);
            if (rd_kafka_header_get_last(h, CM_HDR_PEER_PID, &v, &vl) == 0)
                snprintf(t->peer_pid_hdr, sizeof t->peer_pid_hdr, "%.*s", (int)vl,
                         (const char *)v);
        }
        n++;
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    *out = msgs;
    return (int)n;
}
