/* Enrichment: who sent a chunk and where. Node identity once at start (host name, collector
 * id, Kubernetes node from NODE_NAME as set by the DaemonSet's downward API) and per
 * connection the peer's identity, from the collector's own view only (never from
 * the peer's environment, which any local user sets as they like): pid/uid from SO_PEERCRED,
 * the pid in the peer's own namespace (NSpid), container id and pod uid from
 * /proc/<pid>/cgroup, the pod's namespace/name from kubelet's /var/log/pods/<ns>_<name>_<uid>.
 * The values travel as Kafka headers; the chunk bytes are never re-encoded.
 *
 * Threading: loop thread only (reads small /proc files synchronously once per connection; the
 * pod names from a cache rescanned at most once a second). */
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cm/file.h"
#include "cm/wire.h"

/* Keeps header values printable: anything outside 0x21..0x7e becomes '_'. */
static void sanitize(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
            *s = '_';
}

int col_enrich_node(const col_config_t *cfg, col_node_ident_t *out, char *errbuf,
                    size_t errbuf_size) {
    memset(out, 0, sizeof *out);
    snprintf(out->host, sizeof out->host, "%s", cfg->host);
    out->pods_dir = cfg->pods_dir ? cfg->pods_dir : "";
    const char *node = getenv("NODE_NAME");
    if (node)
        snprintf(out->node, sizeof out->node, "%s", node);
    const char *pns = getenv("POD_NAMESPACE"), *pname = getenv("POD_NAME");
    if (cfg->sidecar && pname && *pname) /* a DaemonSet's own pod names none of its peers */
        snprintf(out->pod, sizeof out->pod, "%.60s/%.90s", pns ? pns : "", pname);
    if (cfg->id[0]) {
        snprintf(out->collector, sizeof out->collector, "%s", cfg->id);
    } else {
        /* A random id kept next to the spool, so it survives restarts with the spool. */
        char path[4096], buf[64];
        snprintf(path, sizeof path, "%s/collector-id", cfg->spool_dir);
        if (cm_read_file(path, buf, sizeof buf) >= 16) {
            buf[strcspn(buf, "\r\n")] = 0;
            snprintf(out->collector, sizeof out->collector, "%s", buf);
        } else {
            uint8_t rnd[8];
            if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
                snprintf(errbuf, errbuf_size, "getrandom failed: %s", strerror(errno));
                return -errno;
            }
            char hex[17];
            for (int i = 0; i < 8; i++)
                snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
            snprintf(out->collector, sizeof out->collector, "%.100s-%s", out->host, hex);
            char tmp[4200];
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            FILE *f = fopen(tmp, "w");
            if (!f || fprintf(f, "%s\n", out->collector) < 0 || fclose(f) || rename(tmp, path)) {
                snprintf(errbuf, errbuf_size,
                         "cannot write the collector id to %s: %s (check spool-dir permissions)",
                         path, strerror(errno));
                return -EIO;
            }
        }
    }
    sanitize(out->host);
    sanitize(out->node);
    sanitize(out->pod);
    sanitize(out->collector);
    return 0;
}

int col_enrich_container_id(const char *text, char *out, size_t out_size) {
    /* Look for the last run of exactly 64 hex digits: docker-<id>.scope, cri-containerd-<id>,
     * crio-<id>, /docker/<id>, /kubepods/.../<id>. */
    const char *best = NULL;
    for (const char *p = text; *p; p++) {
        if (!isxdigit((unsigned char)*p) || (p > text && isxdigit((unsigned char)p[-1])))
            continue;
        size_t n = 0;
        while (isxdigit((unsigned char)p[n]))
            n++;
        if (n == 64)
            best = p;
        p += n - 1;
    }
    if (!best || out_size < 65)
        return 0;
    memcpy(out, best, 64);
    out[64] = 0;
    return 1;
}

/* The pod uid in one cgroup path: "pod<uid>" as the first component after the kubepods root
 * (cgroupfs /kubepods[/<qos>]/pod<uid>/, systemd /kubepods.slice/[kubepods-<qos>.slice/]
 * kubepods[-<qos>]-pod<uid with _>.slice, kind's /kubelet.slice/kubelet-kubepods.slice/...).
 * Only components right under that root count: a pod<uid> cgroup a process created deeper (in
 * a delegated subtree) or under another root (a systemd user manager's) names nothing. */
static int path_pod_uid(const char *path, const char *end, char *out) {
    static const char *const roots[] = {"/kubepods/", "/kubepods.slice/",
                                        "/kubelet.slice/kubelet-kubepods.slice/", NULL};
    const char *p = NULL;
    for (int i = 0; roots[i] && !p; i++)
        if ((size_t)(end - path) > strlen(roots[i]) && !strncmp(path, roots[i], strlen(roots[i])))
            p = path + strlen(roots[i]);
    /* at most two components: the QoS class, then the pod */
    for (int depth = 0; p && p < end && depth < 2; depth++) {
        const char *ce = memchr(p, '/', (size_t)(end - p));
        if (!ce)
            ce = end;
        /* the component is "pod<uid>", or a slice "kubepods[-<qos>]-pod<uid>.slice" */
        const char *u = NULL;
        if ((size_t)(ce - p) >= 39 && !strncmp(p, "pod", 3))
            u = p + 3;
        else if ((size_t)(ce - p) > 45 && !strncmp(p, "kubepods-", 9) &&
                 !strncmp(ce - 6, ".slice", 6) && !strncmp(ce - 46, "-pod", 4))
            u = ce - 42;
        int ok = u != NULL && (u + 36 == ce || (u[36] == '.' && u + 42 == ce));
        for (int i = 0; i < 36 && ok; i++) {
            int dash = i == 8 || i == 13 || i == 18 || i == 23;
            ok = dash ? u[i] == '-' || u[i] == '_'
                      : isxdigit((unsigned char)u[i]) && !isupper((unsigned char)u[i]);
        }
        if (ok) {
            for (int i = 0; i < 36; i++)
                out[i] = u[i] == '_' ? '-' : u[i];
            out[36] = 0;
            return 1;
        }
        p = ce + 1;
    }
    return 0;
}

int col_enrich_pod_uid(const char *text, char *out, size_t out_size) {
    if (out_size < 37)
        return 0;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        if (!eol)
            eol = line + strlen(line);
        /* hierarchy-id:controllers:path */
        const char *c1 = memchr(line, ':', (size_t)(eol - line));
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(eol - c1 - 1)) : NULL;
        if (c2 && path_pod_uid(c2 + 1, eol, out))
            return 1;
        line = *eol ? eol + 1 : eol;
    }
    return 0;
}

int col_enrich_pod_name(const char *pods_dir, const char *uid, char *out, size_t out_size) {
    if (!pods_dir || !pods_dir[0])
        return 0;
    DIR *d = opendir(pods_dir);
    if (!d)
        return 0;
    size_t ul = strlen(uid);
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        /* <namespace>_<name>_<uid>: neither a namespace nor a pod name has a '_' */
        size_t n = strlen(e->d_name);
        const char *us = strchr(e->d_name, '_');
        const char *ue = us ? strchr(us + 1, '_') : NULL;
        if (!ue || n != (size_t)(ue + 1 - e->d_name) + ul || strcmp(ue + 1, uid) ||
            strchr(ue + 1, '_'))
            continue;
        int w = snprintf(out, out_size, "%.*s/%.*s", (int)(us - e->d_name), e->d_name,
                         (int)(ue - us - 1), us + 1);
        found = w > 0 && (size_t)w < out_size;
    }
    closedir(d);
    return found;
}

/* ---- pod uid -> namespace/name, cached (loop thread only) ----
 * A directory scan of pods_dir per connection cost ~100 readdir entries on the loop thread, for
 * every reconnect. The table below is rebuilt from one scan on a miss, at most once a second
 * (a pod started this second is named on its next connection, pod-<uid> until then). */
#define POD_CACHE_MAX 1024 /* pods one node runs: kubelet's default max-pods is 110 */
static struct {
    char dir[256]; /* the pods_dir the table holds */
    int64_t scanned_ns; /* CLOCK_MONOTONIC of the last scan; 0: never */
    int n;
    struct {
        char uid[37], name[160];
    } e[POD_CACHE_MAX];
    uint64_t scans; /* directory scans done (col_enrich_pod_scans) */
} pods;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void pods_scan(const char *pods_dir) {
    snprintf(pods.dir, sizeof pods.dir, "%s", pods_dir);
    pods.n = 0;
    pods.scanned_ns = mono_ns();
    pods.scans++;
    DIR *d = opendir(pods_dir);
    struct dirent *e;
    while (d && pods.n < POD_CACHE_MAX && (e = readdir(d))) {
        /* <namespace>_<name>_<uid>: neither a namespace nor a pod name has a '_' */
        const char *us = strchr(e->d_name, '_');
        const char *ue = us ? strchr(us + 1, '_') : NULL;
        if (!ue || strlen(ue + 1) != 36 || strchr(ue + 1, '_'))
            continue;
        int w = snprintf(pods.e[pods.n].name, sizeof pods.e[pods.n].name, "%.*s/%.*s",
                         (int)(us - e->d_name), e->d_name, (int)(ue - us - 1), us + 1);
        if (w <= 0 || (size_t)w >= sizeof pods.e[pods.n].name)
            continue;
        memcpy(pods.e[pods.n].uid, ue + 1, 37);
        pods.n++;
    }
    if (d)
        closedir(d);
}

static int pods_find(const char *uid, char *out, size_t out_size) {
    for (int i = 0; i < pods.n; i++)
        if (!strcmp(pods.e[i].uid, uid)) {
            int w = snprintf(out, out_size, "%s", pods.e[i].name);
            return w > 0 && (size_t)w < out_size;
        }
    return 0;
}

int col_enrich_pod_lookup(const char *pods_dir, const char *uid, char *out, size_t out_size) {
    if (!pods_dir || !pods_dir[0])
        return 0;
    int same_dir = !strcmp(pods.dir, pods_dir) && pods.scanned_ns;
    if (same_dir && pods_find(uid, out, out_size))
        return 1;
    if (same_dir && mono_ns() - pods.scanned_ns < 1000000000)
        return 0;
    pods_scan(pods_dir);
    return pods_find(uid, out, out_size);
}

uint64_t col_enrich_pod_scans(void) { return pods.scans; }

const char *col_hdrs_get(const col_hdrs_t *h, const char *name) {
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->name[i], name))
            return h->value[i];
    return NULL;
}

uint64_t col_budget_key(int uid, const char *container) {
    uint64_t k = 0xcbf29ce484222325ull; /* FNV-1a 64 over the uid's digits, ':' and the id */
    char num[16];
    snprintf(num, sizeof num, "%d:", uid);
    for (const char *p = num; *p; p++)
        k = (k ^ (uint8_t)*p) * 0x100000001b3ull;
    for (const char *p = container ? container : ""; *p; p++)
        k = (k ^ (uint8_t)*p) * 0x100000001b3ull;
    return k == COL_BUDGET_SHARED ? k - 1 : k;
}

static void add(col_hdrs_t *h, const char *name, const char *value) {
    if (h->n >= COL_MAX_HDRS || !value || !value[0])
        return;
    h->name[h->n] = name;
    snprintf(h->value[h->n], sizeof h->value[h->n], "%s", value);
    sanitize(h->value[h->n]);
    h->n++;
}

/* The pid of process pid in its own (innermost) pid namespace: the last NSpid field of
 * /proc/<pid>/status (Linux 4.1+). 0 if unknown. */
static int own_ns_pid(int pid) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    if (cm_read_file(path, buf, sizeof buf) <= 0)
        return 0;
    const char *p = strstr(buf, "\nNSpid:");
    if (!p)
        return 0;
    p += 7;
    long last = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p < '0' || *p > '9')
            break;
        char *end;
        last = strtol(p, &end, 10);
        p = end;
    }
    return last > 0 && last <= INT32_MAX ? (int)last : 0;
}

void col_enrich_peer(const col_node_ident_t *node, int pid, int uid, col_hdrs_t *out) {
    memset(out, 0, sizeof *out);
    char num[32], path[64];
    add(out, CM_HDR_HOST, node->host);
    add(out, CM_HDR_COLLECTOR, node->collector);
    add(out, CM_HDR_NODE, node->node);
    if (pid > 0) {
        snprintf(num, sizeof num, "%d", pid);
        add(out, CM_HDR_PEER_PID, num);
        /* in a container the agent knows itself by its namespace's pid: the aggregator
         * compares the chunk's pid with this one (absent: the same as fp-peer-pid) */
        int ns = own_ns_pid(pid);
        if (ns > 0 && ns != pid) {
            snprintf(num, sizeof num, "%d", ns);
            add(out, CM_HDR_PEER_NSPID, num);
        }
    }
    if (uid >= 0) {
        snprintf(num, sizeof num, "%d", uid);
        add(out, CM_HDR_PEER_UID, num);
    }
    if (pid <= 0)
        return;
    char buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
    char cid[80], puid[40], pod[160];
    snprintf(pod, sizeof pod, "%s", node->pod);
    if (cm_read_file(path, buf, sizeof buf) > 0) {
        if (col_enrich_container_id(buf, cid, sizeof cid))
            add(out, CM_HDR_CONTAINER, cid);
        if (col_enrich_pod_uid(buf, puid, sizeof puid) &&
            !col_enrich_pod_lookup(node->pods_dir, puid, pod, sizeof pod))
            snprintf(pod, sizeof pod, "pod-%s", puid);
    }
    add(out, CM_HDR_POD, pod);
}
