/* Enrichment: who sent a chunk and where. Node identity once at start (host name, collector
 * id, Kubernetes node from NODE_NAME as set by the DaemonSet's downward API) and per
 * connection the peer's identity, from the collector's own view only (issue 28: never from
 * the peer's environment, which any local user sets as they like): pid/uid from SO_PEERCRED,
 * the pid in the peer's own namespace (NSpid), container id and pod uid from
 * /proc/<pid>/cgroup, the pod's namespace/name from kubelet's /var/log/pods/<ns>_<name>_<uid>.
 * The values travel as Kafka headers; the chunk bytes are never re-encoded.
 *
 * Threading: loop thread only (reads small /proc files synchronously once per connection). */
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
    if (pname && *pname)
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

int col_enrich_pod_uid(const char *text, char *out, size_t out_size) {
    /* kubepods/burstable/pod0f1e...-.../<cid>, kubepods-besteffort-pod0f1e..._....slice */
    for (const char *p = strstr(text, "pod"); p; p = strstr(p + 3, "pod")) {
        const char *u = p + 3;
        int ok = 1;
        for (int i = 0; i < 36 && ok; i++) {
            int dash = i == 8 || i == 13 || i == 18 || i == 23;
            ok = dash ? u[i] == '-' || u[i] == '_'
                      : isxdigit((unsigned char)u[i]) && !isupper((unsigned char)u[i]);
        }
        if (!ok || isxdigit((unsigned char)u[36]) || out_size < 37)
            continue;
        for (int i = 0; i < 36; i++)
            out[i] = u[i] == '_' ? '-' : u[i];
        out[36] = 0;
        return 1;
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
            !col_enrich_pod_name(node->pods_dir, puid, pod, sizeof pod))
            snprintf(pod, sizeof pod, "pod-%s", puid);
    }
    add(out, CM_HDR_POD, pod);
}
