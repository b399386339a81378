/* Enrichment: who sent a chunk and where. Node identity once at start (host name, collector
 * id, Kubernetes node from NODE_NAME as set by the DaemonSet's downward API) and per
 * connection the peer's identity (pid/uid from SO_PEERCRED; container id from
 * /proc/<pid>/cgroup; namespace/pod from POD_NAMESPACE/POD_NAME in /proc/<pid>/environ when
 * readable). The values travel as Kafka headers; the chunk bytes are never re-encoded.
 *
 * Threading: loop thread only (reads small /proc files synchronously once per connection). */
#include "internal.h"

#include <ctype.h>
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
    const char *node = getenv("NODE_NAME");
    if (node)
        snprintf(out->node, sizeof out->node, "%s", node);
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

/* Finds NAME=value in a NUL-separated environ block. */
static const char *env_find(const char *env, size_t len, const char *name) {
    size_t nl = strlen(name);
    for (size_t i = 0; i < len;) {
        const char *e = env + i;
        size_t el = strnlen(e, len - i);
        if (el > nl && !strncmp(e, name, nl) && e[nl] == '=')
            return e + nl + 1;
        i += el + 1;
    }
    return NULL;
}

static void add(col_hdrs_t *h, const char *name, const char *value) {
    if (h->n >= COL_MAX_HDRS || !value || !value[0])
        return;
    h->name[h->n] = name;
    snprintf(h->value[h->n], sizeof h->value[h->n], "%s", value);
    sanitize(h->value[h->n]);
    h->n++;
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
    }
    if (uid >= 0) {
        snprintf(num, sizeof num, "%d", uid);
        add(out, CM_HDR_PEER_UID, num);
    }
    if (pid <= 0)
        return;
    char buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
    char cid[80];
    if (cm_read_file(path, buf, sizeof buf) > 0 && col_enrich_container_id(buf, cid, sizeof cid))
        add(out, CM_HDR_CONTAINER, cid);
    snprintf(path, sizeof path, "/proc/%d/environ", pid);
    ssize_t n = cm_read_file(path, buf, sizeof buf);
    if (n > 0) {
        const char *ns = env_find(buf, (size_t)n, "POD_NAMESPACE");
        const char *pod = env_find(buf, (size_t)n, "POD_NAME");
        if (pod) {
            char v[160];
            snprintf(v, sizeof v, "%.60s/%.90s", ns ? ns : "", pod);
            add(out, CM_HDR_POD, v);
        }
    }
}
