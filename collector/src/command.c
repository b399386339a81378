/* Capture commands (`fleetprof capture`): their text form and which connected agents one
 * targets. A command arrives from a local control client on the agents' socket (ingest.c) or
 * from the control topic (control.c); ingest.c sends CM_SOCK_CMD_CAPTURE down the connection
 * of every agent col_cmd_match accepts (protocol in cm/wire.h).
 *
 * Text form: lines key=value (cmd, service, host, pid, reason, requester, id, issued_ns); an
 * unknown key is ignored (a newer sender), a value is cut at its field's size.
 * Threading: pure functions; the loop thread calls them. */
#include "internal.h"

#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const drop_names[COL_CMD_DROP_MAX] = {"malformed", "stale", "no_agent",
                                                         "not_permitted", "write_failed"};

const char *col_cmd_drop_name(col_cmd_drop_t why) { return drop_names[why]; }

/* Copies the n bytes at v into dst (size cap), cut to fit. */
static void field(char *dst, size_t cap, const char *v, size_t n) {
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

/* A decimal u64 of n bytes at v; 0 on success, -1 when not a number. */
static int number(const char *v, size_t n, uint64_t *out) {
    char tmp[24];
    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, v, n);
    tmp[n] = 0;
    char *end;
    unsigned long long x = strtoull(tmp, &end, 10);
    if (*end || tmp[0] == '-')
        return -1;
    *out = x;
    return 0;
}

/* Stores one key=value line. Returns 0, or -1 (err set) for a bad number. */
static int line(col_cmd_t *c, const char *k, size_t kn, const char *v, size_t vn, char *err,
                size_t err_size) {
#define KEY(s) (kn == sizeof(s) - 1 && !memcmp(k, s, kn))
    uint64_t x;
    if (KEY("cmd"))
        field(c->cmd, sizeof c->cmd, v, vn);
    else if (KEY("service"))
        field(c->service, sizeof c->service, v, vn);
    else if (KEY("host"))
        field(c->host, sizeof c->host, v, vn);
    else if (KEY("reason"))
        field(c->reason, sizeof c->reason, v, vn);
    else if (KEY("requester"))
        field(c->requester, sizeof c->requester, v, vn);
    else if (KEY("id"))
        field(c->id, sizeof c->id, v, vn);
    else if (KEY("pid") || KEY("issued_ns")) {
        if (number(v, vn, &x) || (KEY("pid") && (x == 0 || x > 0x7fffffff))) {
            snprintf(err, err_size, "%.*s='%.*s' is not a %s", (int)kn, k, (int)(vn > 32 ? 32 : vn),
                     v, KEY("pid") ? "process id" : "time in unix ns");
            return -1;
        }
        if (KEY("pid"))
            c->pid = (int)x;
        else
            c->issued_ns = x;
    }
#undef KEY
    return 0;
}

int col_cmd_parse(const char *text, size_t len, col_cmd_t *c, char *err, size_t err_size) {
    memset(c, 0, sizeof *c);
    for (size_t pos = 0; pos < len;) {
        const char *l = text + pos, *nl = memchr(l, '\n', len - pos);
        size_t ln = nl ? (size_t)(nl - l) : len - pos;
        pos += ln + 1;
        const char *eq = memchr(l, '=', ln);
        if (!ln)
            continue;
        if (!eq) {
            snprintf(err, err_size, "line '%.*s' is not key=value", (int)(ln > 40 ? 40 : ln), l);
            return CM_EFORMAT;
        }
        if (line(c, l, (size_t)(eq - l), eq + 1, ln - (size_t)(eq - l) - 1, err, err_size))
            return CM_EFORMAT;
    }
    if (strcmp(c->cmd, "capture")) {
        snprintf(err, err_size, "cmd='%s': the only command is 'capture'", c->cmd);
        return CM_EFORMAT;
    }
    if (!c->service[0]) {
        snprintf(err, err_size, "a capture needs service=NAME");
        return CM_EINVAL;
    }
    return 0;
}

int col_cmd_match(const col_cmd_t *c, const char *node_host, const col_cmd_agent_t *a) {
    if (!a->service || strcmp(c->service, a->service))
        return 0;
    if (c->host[0] && strcmp(c->host, node_host))
        return 0;
    return !c->pid || c->pid == a->peer_pid || c->pid == a->pid;
}

_Static_assert(sizeof col_metrics.commands_dropped / sizeof col_metrics.commands_dropped[0] ==
                   COL_CMD_DROP_MAX,
               "one counter per col_cmd_drop_t");
