/* Ingest: the unix-socket server the agents talk to (protocol in cm/wire.h). Per connection:
 * hello, then u32-length-framed chunk frames; each frame is validated with the common codec
 * (cm_chunk_decode), appended to the spool and only then acked with status 0; an invalid one
 * gets a negative CM_E* ack and is counted by reason; a frame that cannot be taken now gets
 * CM_SOCK_RETRY (the agent keeps it).
 *
 * Hostile or broken clients are disconnected without harming others: a bad hello, a frame
 * length of 0 or above max-msg, a hello or frame left half-sent longer than frame-timeout
 * (slowloris), or acks left unread beyond max-write-queue. Buffers are per connection and
 * bounded all together by ingest-memory: a frame that does not fit is read into a scratch
 * buffer, discarded and answered with retry. libuv serves ready connections round-robin, one
 * read (at most 256 KiB) per connection per turn, so a flooding client cannot starve others.
 *
 * Per peer uid and container (the socket is 0666 by default, so any local user can
 * connect; review finding 6: keyed by uid alone, every root pod of a node shared one budget):
 * at most uid-max-clients connections (one user cannot take every max-clients slot), chunk
 * bytes at most uid-max-bytes-rate per second, and a share of the spool (an even share among
 * the budgets holding chunks, and at most uid-spool-share: a flood is told to retry instead of
 * pushing out other services' chunks). A budget is a (uid, container id) pair (budget_t). A connection that sends nothing for idle-timeout after
 * its hello is closed (the agent reconnects when it next sends).
 *
 * Threading: loop thread only. Peer pid/uid come from SO_PEERCRED at accept. */
#define _GNU_SOURCE
#include "internal.h"

#include "cm/chunk.h"
#include "cm/error.h"
#include "cm/log.h"
#include "cm/wire.h"

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define INITIAL_BUF (16u << 10)
#define READ_CHUNK (256u << 10)
#define SCRATCH (64u << 10)

/* One budget of the per-uid limits: what a (peer uid, container) holds, its connections and
 * its bytes/s bucket. Keyed by col_budget_key: the uid alone would put every root pod of a
 * DaemonSet node under one budget. Entries are chained in budget_heads; at most BUDGETS_MAX,
 * past it new keys share in->shared; the sweep frees those with no connection, no spooled
 * bytes and a full bucket. */
#define BUDGETS_MAX 4096
#define BUDGET_HEADS 1024 /* power of two */
typedef struct budget {
    uint64_t key; /* col_budget_key(uid, container), or COL_BUDGET_SHARED */
    int uid;      /* for logs (the shared one: the uid that first overflowed) */
    uint32_t conns;
    double tokens; /* bytes; may go negative by one frame */
    uint64_t tokens_ms;
    struct budget *next;
} budget_t;

typedef struct conn {
    uv_pipe_t pipe; /* first: the handle pointer is the conn pointer */
    col_ingest_t *in;
    struct conn *prev, *next;
    int pid, uid;
    budget_t *budget;         /* its (uid, container) budget, conns counted; NULL: none */
    uint64_t active_ms;       /* loop clock of the hello or the last whole message */
    col_hdrs_t hdrs;
    uint8_t *buf;
    size_t len, cap;
    int hello_done, closing;
    uint32_t msg_no;          /* messages received on this connection */
    uint64_t discard;         /* bytes of a shed frame still to skip */
    uint64_t partial_since;   /* ms (loop clock) when the pending hello/frame started; 0: none */
    double tokens;            /* client-max-rate bucket */
    uint64_t tokens_ms;
    col_acks_t acks;          /* acks gathered during one read callback */
    int control;              /* a control client (CM_SOCK_CTL_MAGIC), not an agent */
    char service[128];        /* from the last chunk accepted ("": none yet) */
    int agent_pid;            /* the pid the last chunk carries (its own namespace's) */
} conn_t;

struct col_ingest {
    uv_loop_t *loop;
    const col_config_t *cfg;
    const col_node_ident_t *node;
    col_spool_t *spool;
    col_producer_t *producer;
    uv_pipe_t server;
    dev_t dev; /* the socket's file (ino 0: unknown): stop removes the path only while */
    ino_t ino; /* it is still this one */
    uv_timer_t sweep;
    conn_t *conns;
    uint64_t n_conns;
    uint64_t mem_used; /* sum of connection buffer capacities */
    budget_t *budget_heads[BUDGET_HEADS]; /* the budgets by key (hash chains) */
    size_t n_budgets;                     /* entries in budget_heads (not counting shared) */
    budget_t shared;                      /* every key past BUDGETS_MAX */
    double tokens;     /* max-rate bucket */
    uint64_t tokens_ms;
    uint8_t scratch[SCRATCH];
    double log_tokens; /* rate limit of reject log lines */
    uint64_t log_ms, log_suppressed;
    int draining;
};

typedef struct {
    uv_write_t req;
    uv_buf_t buf;
    uint8_t data[];
} wreq_t;

/* ------------------------------------------------------------------ helpers */

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Token bucket: rate per second, burst tokens at most. Returns 1 if a token was taken. */
static int bucket_take(double *tokens, uint64_t *last_ms, int64_t rate, double burst,
                       uint64_t now_ms) {
    if (rate <= 0)
        return 1;
    if (*last_ms == 0)
        *tokens = burst;
    else
        *tokens += (double)(now_ms - *last_ms) * (double)rate / 1000.0;
    if (*tokens > burst)
        *tokens = burst;
    *last_ms = now_ms;
    if (*tokens < 1.0)
        return 0;
    *tokens -= 1.0;
    return 1;
}

/* At most 10 reject lines at once, then one per second; the rest are counted and reported. */
static int log_allowed(col_ingest_t *in) {
    uint64_t now = uv_now(in->loop);
    if (!bucket_take(&in->log_tokens, &in->log_ms, 1, 10, now ? now : 1)) {
        in->log_suppressed++;
        return 0;
    }
    return 1;
}

/* The budget of key (uid's, with its container), created on first use; past BUDGETS_MAX
 * entries (or on ENOMEM) the shared one. */
static budget_t *budget_get(col_ingest_t *in, uint64_t key, int uid) {
    budget_t **head = &in->budget_heads[(key ^ key >> 29) & (BUDGET_HEADS - 1)];
    for (budget_t *b = *head; b; b = b->next)
        if (b->key == key)
            return b;
    budget_t *b = in->n_budgets < BUDGETS_MAX ? calloc(1, sizeof *b) : NULL;
    if (!b) {
        col_count(&col_metrics.budget_shared_total, 1);
        if (in->shared.uid < 0)
            in->shared.uid = uid;
        return &in->shared;
    }
    b->key = key;
    b->uid = uid;
    b->next = *head;
    *head = b;
    in->n_budgets++;
    col_gauge_set(&col_metrics.budgets, in->n_budgets);
    return b;
}

/* Frees the budgets that hold nothing: no connection, no bytes in the spool, and a bucket
 * full again (so closing every connection and reconnecting gains no bytes). */
static void budget_sweep(col_ingest_t *in, uint64_t now_ms) {
    for (size_t i = 0; i < BUDGET_HEADS; i++)
        for (budget_t **pb = &in->budget_heads[i], *b; (b = *pb);) {
            if (b->conns || (b->tokens_ms && now_ms - b->tokens_ms < 1000) ||
                col_spool_uid_bytes(in->spool, b->key, NULL)) {
                pb = &b->next;
                continue;
            }
            *pb = b->next;
            free(b);
            in->n_budgets--;
        }
    col_gauge_set(&col_metrics.budgets, in->n_budgets);
}

/* uid-max-bytes-rate: a frame of n bytes passes while the uid's bucket is positive (so a frame
 * larger than a second's worth still passes, then that uid waits); burst: one second. */
static int uid_bytes_take(col_ingest_t *in, budget_t *u, size_t n, uint64_t now_ms) {
    int64_t rate = in->cfg->uid_max_bytes_rate;
    if (rate <= 0 || !u)
        return 1;
    if (u->tokens_ms == 0)
        u->tokens = (double)rate;
    else
        u->tokens += (double)(now_ms - u->tokens_ms) * (double)rate / 1000.0;
    if (u->tokens > (double)rate)
        u->tokens = (double)rate;
    u->tokens_ms = now_ms;
    if (u->tokens <= 0)
        return 0;
    u->tokens -= (double)n;
    return 1;
}

/* 1 when a record of need bytes from uid may be spooled: the uid then holds at most an even
 * share of spool-max among the uids holding chunks (all of it when alone: a full spool then
 * pushes out its own oldest chunks, as before), and at most uid-spool-share percent. So one
 * uid's flood stops at its share and the room left is the others'. */
static int uid_spool_ok(col_ingest_t *in, const budget_t *u, uint64_t need) {
    if (!u)
        return 1;
    uint64_t uids, held = col_spool_uid_bytes(in->spool, u->key, &uids);
    uint64_t max = (uint64_t)in->cfg->spool_max;
    uint64_t others = held ? uids - 1 : uids; /* uids holding chunks besides this one */
    uint64_t cap = others ? max / (others + 1) : UINT64_MAX; /* alone: may push out its own */
    if (in->cfg->uid_spool_share < 100 && cap > max / 100 * (uint64_t)in->cfg->uid_spool_share)
        cap = max / 100 * (uint64_t)in->cfg->uid_spool_share;
    return held + need <= cap;
}

static void on_closed(uv_handle_t *h) {
    conn_t *c = (conn_t *)h;
    col_ingest_t *in = c->in;
    if (c->budget && c->budget->conns)
        c->budget->conns--;
    if (c->prev)
        c->prev->next = c->next;
    else
        in->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    in->mem_used -= c->cap;
    in->n_conns--;
    col_gauge_set(&col_metrics.connected, in->n_conns);
    free(c->buf);
    col_acks_free(&c->acks);
    free(c);
}

static void conn_close(conn_t *c, col_disc_t why) {
    if (c->closing)
        return;
    c->closing = 1;
    col_count(&col_metrics.disconnects[why], 1);
    if (why == COL_DISC_IDLE) /* routine for agents with long intervals: debug only */
        CM_DEBUG("msg=\"disconnecting idle agent\" pid=%d uid=%d messages=%u", c->pid, c->uid,
                 c->msg_no);
    else if (why != COL_DISC_EOF && why != COL_DISC_SHUTDOWN)
        CM_INFO("msg=\"disconnecting agent\" reason=%s pid=%d uid=%d messages=%u",
                why == COL_DISC_BAD_HELLO   ? "bad_hello"
                : why == COL_DISC_OVERSIZED ? "oversized_frame"
                : why == COL_DISC_SLOW      ? "frame_timeout"
                : why == COL_DISC_NOT_READING ? "acks_not_read"
                : why == COL_DISC_TOO_MANY  ? "too_many_clients"
                : why == COL_DISC_UID_TOO_MANY ? "uid_too_many_clients"
                                            : "socket_error",
                c->pid, c->uid, c->msg_no);
    uv_read_stop((uv_stream_t *)&c->pipe);
    uv_close((uv_handle_t *)&c->pipe, on_closed);
}

static void on_written(uv_write_t *req, int status) { free(req); }

long col_acks_alloc_budget = -1;

int col_acks_add(col_acks_t *a, uint32_t msg_no, int32_t status) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        if (col_acks_alloc_budget == 0)
            return -ENOMEM;
        if (col_acks_alloc_budget > 0)
            col_acks_alloc_budget--;
        uint32_t *nn = malloc(nc * sizeof *nn);
        int32_t *ns = malloc(nc * sizeof *ns);
        if (!nn || !ns) {
            free(nn);
            free(ns);
            return -ENOMEM;
        }
        if (a->n) {
            memcpy(nn, a->no, a->n * sizeof *nn);
            memcpy(ns, a->status, a->n * sizeof *ns);
        }
        free(a->no);
        free(a->status);
        a->no = nn;
        a->status = ns;
        a->cap = nc;
    }
    a->no[a->n] = msg_no;
    a->status[a->n++] = status;
    return 0;
}

void col_acks_free(col_acks_t *a) {
    free(a->no);
    free(a->status);
    memset(a, 0, sizeof *a);
}

/* Sends the acks gathered during this read callback in one write. */
static void acks_flush(conn_t *c) {
    if (!c->acks.n || c->closing)
        goto out;
    wreq_t *w = malloc(sizeof *w + c->acks.n * CM_SOCK_ACK_SIZE);
    if (!w) { /* the agent resends its unacked chunks after reconnecting */
        conn_close(c, COL_DISC_ERROR);
        goto out;
    }
    for (size_t i = 0; i < c->acks.n; i++) {
        put32(w->data + i * 8, c->acks.no[i]);
        put32(w->data + i * 8 + 4, (uint32_t)c->acks.status[i]);
    }
    w->buf = uv_buf_init((char *)w->data, (unsigned)(c->acks.n * CM_SOCK_ACK_SIZE));
    if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &w->buf, 1, on_written)) {
        free(w);
        conn_close(c, COL_DISC_ERROR);
        goto out;
    }
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe);
    if (queued > (size_t)c->in->cfg->max_write_queue)
        conn_close(c, COL_DISC_NOT_READING);
out:
    c->acks.n = 0;
}

/* Queues the ack of message c->msg_no. When it cannot be stored, the acks gathered so far are
 * sent now (each with its own number) and this one goes into the freed list; with no list at
 * all the connection is closed: the agent resends what was not acked (chunk ids make a resent
 * accepted chunk count once downstream). */
static void ack_add(conn_t *c, int32_t status) {
    if (col_acks_add(&c->acks, c->msg_no, status) == 0)
        return;
    acks_flush(c);
    if (c->closing || col_acks_add(&c->acks, c->msg_no, status) != 0)
        conn_close(c, COL_DISC_ERROR);
}

/* Grows c->buf to at least need bytes within the memory budget. Returns 0 or -ENOMEM. */
static int buf_reserve(conn_t *c, size_t need) {
    if (c->cap >= need)
        return 0;
    size_t ncap = c->cap ? c->cap : INITIAL_BUF;
    while (ncap < need)
        ncap *= 2;
    if (c->in->mem_used - c->cap + ncap > (uint64_t)c->in->cfg->ingest_memory)
        return -ENOMEM;
    uint8_t *nb = realloc(c->buf, ncap);
    if (!nb)
        return -ENOMEM;
    c->in->mem_used += ncap - c->cap;
    c->buf = nb;
    c->cap = ncap;
    return 0;
}

/* ------------------------------------------------------------------ one frame */

static int32_t frame_handle(conn_t *c, const uint8_t *frame, size_t n) {
    col_ingest_t *in = c->in;
    col_count(&col_metrics.chunks_in, 1);
    col_count(&col_metrics.bytes_in, n);
    uint64_t now_ms = uv_now(in->loop);
    if (in->draining) {
        col_count(&col_metrics.shed[COL_SHED_DRAINING], 1);
        return CM_SOCK_RETRY;
    }
    if (!bucket_take(&c->tokens, &c->tokens_ms, in->cfg->client_max_rate,
                     (double)in->cfg->client_max_rate, now_ms ? now_ms : 1)) {
        col_count(&col_metrics.shed[COL_SHED_CLIENT_RATE], 1);
        return CM_SOCK_RETRY;
    }
    if (!bucket_take(&in->tokens, &in->tokens_ms, in->cfg->max_rate, (double)in->cfg->max_rate,
                     now_ms ? now_ms : 1)) {
        col_count(&col_metrics.shed[COL_SHED_RATE], 1);
        return CM_SOCK_RETRY;
    }
    if (!uid_bytes_take(in, c->budget, n, now_ms ? now_ms : 1)) {
        col_count(&col_metrics.shed[COL_SHED_UID_RATE], 1);
        return CM_SOCK_RETRY;
    }
    char err[256];
    cm_chunk_t *chunk = NULL;
    int rc = cm_chunk_decode(frame, n, &chunk, err, sizeof err);
    if (rc) {
        col_metrics_reject(rc);
        if (log_allowed(in)) {
            CM_WARN("msg=\"rejected an invalid chunk\" reason=%s detail=\"%s\" pid=%d uid=%d "
                    "bytes=%zu suppressed_lines=%" PRIu64,
                    cm_errname(rc), err, c->pid, c->uid, n, in->log_suppressed);
            in->log_suppressed = 0;
        }
        return rc < 0 && rc > -(int)CM__EBASE ? CM_EFORMAT : rc; /* ENOMEM etc.: a CM code */
    }
    char key[256];
    snprintf(key, sizeof key, "%s", chunk->header.service.ptr ? chunk->header.service.ptr : "");
    int agent_pid = (int)chunk->header.pid;
    cm_chunk_free(chunk);
    /* The Kafka record this chunk becomes must fit the topic's max.message.bytes, or the broker
     * refuses it after we acked it (lost, and the agent never resends). Refuse it now: the
     * agent counts the rejection (and should split what it sends). */
    int64_t rec = (int64_t)n + (int64_t)strlen(key) + (int64_t)strlen(CM_HDR_RECEIVED) + 24;
    for (int i = 0; i < c->hdrs.n; i++)
        rec += (int64_t)strlen(c->hdrs.name[i]) + (int64_t)strlen(c->hdrs.value[i]) + 4;
    int64_t max_rec = col_producer_max_record(in->producer);
    if (rec > max_rec) {
        col_metrics_reject(CM_ETOOBIG);
        col_count(&col_metrics.over_kafka_limit, 1);
        if (log_allowed(in)) {
            CM_WARN("msg=\"rejected a chunk too big for Kafka: its record would pass the topic's "
                    "max.message.bytes\" reason=ETOOBIG bytes=%zu record_bytes=%lld "
                    "max_record_bytes=%lld service=\"%s\" pid=%d suppressed_lines=%" PRIu64,
                    n, (long long)rec, (long long)max_rec, key, c->pid, in->log_suppressed);
            in->log_suppressed = 0;
        }
        return CM_ETOOBIG;
    }
    if (!uid_spool_ok(in, c->budget, col_spool_record_size(key, &c->hdrs, n))) {
        col_count(&col_metrics.shed[COL_SHED_UID_SPOOL], 1);
        if (log_allowed(in)) {
            CM_WARN("msg=\"a uid holds its share of the spool: its agents are told to retry\" "
                    "uid=%d pid=%d service=\"%s\" suppressed_lines=%" PRIu64,
                    c->uid, c->pid, key, in->log_suppressed);
            in->log_suppressed = 0;
        }
        return CM_SOCK_RETRY;
    }
    rc = col_spool_append(in->spool, c->budget ? c->budget->key : col_budget_key(c->uid, NULL),
                          key, &c->hdrs, col_now_ns(), frame, n);
    if (rc) {
        col_count(&col_metrics.shed[COL_SHED_SPOOL], 1);
        if (log_allowed(in))
            CM_ERROR("msg=\"cannot write the spool; agents are told to retry\" err=\"%s\" "
                     "spool_dir=%s",
                     strerror(-rc), in->cfg->spool_dir);
        return CM_SOCK_RETRY;
    }
    col_count(&col_metrics.chunks_accepted, 1);
    col_count(&col_metrics.bytes_accepted, n);
    snprintf(c->service, sizeof c->service, "%s", key); /* for capture commands */
    c->agent_pid = agent_pid;
    return 0;
}

/* ------------------------------------------------------------------ capture commands */

/* Writes the capture command record down agent connection a. Returns 0 or a libuv error. */
static int command_write(conn_t *a) {
    wreq_t *w = malloc(sizeof *w + CM_SOCK_ACK_SIZE);
    if (!w)
        return UV_ENOMEM;
    put32(w->data, CM_SOCK_CMD_NO);
    put32(w->data + 4, CM_SOCK_CMD_CAPTURE);
    w->buf = uv_buf_init((char *)w->data, CM_SOCK_ACK_SIZE);
    int rc = uv_write(&w->req, (uv_stream_t *)&a->pipe, &w->buf, 1, on_written);
    if (rc)
        free(w);
    return rc;
}

int col_ingest_command(col_ingest_t *in, const col_cmd_t *cmd, int from_uid) {
    int sent = 0, refused = 0;
    for (conn_t *a = in->conns; a; a = a->next) {
        col_cmd_agent_t ag = {a->service[0] ? a->service : NULL, a->pid, a->agent_pid};
        if (a->control || a->closing || !col_cmd_match(cmd, in->node->host, &ag))
            continue;
        if (from_uid >= 0 && a->uid != from_uid) {
            col_count(&col_metrics.commands_dropped[COL_CMD_NOT_PERMITTED], 1);
            refused++;
            continue;
        }
        if (command_write(a)) {
            col_count(&col_metrics.commands_dropped[COL_CMD_WRITE_FAILED], 1);
            continue;
        }
        col_count(&col_metrics.commands_sent, 1);
        sent++;
    }
    if (!sent && !refused)
        col_count(&col_metrics.commands_dropped[COL_CMD_NO_AGENT], 1);
    CM_INFO("msg=\"capture command\" id=\"%s\" service=\"%s\" host=\"%s\" pid=%d "
            "reason=\"%s\" requester=\"%s\" sent_to=%d not_permitted=%d",
            cmd->id, cmd->service, cmd->host, cmd->pid, cmd->reason, cmd->requester, sent,
            refused);
    return sent;
}

/* A control client's message: one capture command. Root and the collector's own user may
 * target any agent, another user only its own processes (as kill(2) would let it). Returns
 * the count of agents it was sent to, or a negative CM_E* code. */
static int32_t control_handle(conn_t *c, const uint8_t *msg, size_t n) {
    col_cmd_t cmd;
    char err[256];
    col_count(&col_metrics.commands_in[0], 1);
    if (c->msg_no > 1) /* one command per connection */
        return CM_EINVAL;
    int rc = col_cmd_parse((const char *)msg, n, &cmd, err, sizeof err);
    if (rc) {
        col_count(&col_metrics.commands_dropped[COL_CMD_MALFORMED], 1);
        CM_INFO("msg=\"refused a capture command\" err=\"%s\" uid=%d", err, c->uid);
        return rc;
    }
    if (!cmd.requester[0])
        snprintf(cmd.requester, sizeof cmd.requester, "uid:%d", c->uid);
    int any = c->uid == 0 || (uid_t)c->uid == geteuid();
    return col_ingest_command(c->in, &cmd, any ? -1 : c->uid);
}

/* Consumes whole messages from c->buf. */
static void conn_process(conn_t *c) {
    col_ingest_t *in = c->in;
    size_t pos = 0;
    int progress = 0; /* a hello or a message completed: the frame-timeout clock restarts */
    while (!c->closing) {
        size_t avail = c->len - pos;
        const uint8_t *p = c->buf + pos;
        if (!c->hello_done) {
            if (avail < CM_SOCK_HELLO_SIZE)
                break;
            c->control = !memcmp(p, CM_SOCK_CTL_MAGIC, 4);
            if ((memcmp(p, CM_SOCK_HELLO_MAGIC, 4) && !c->control) ||
                get32(p + 4) != CM_SOCK_VERSION) {
                if (log_allowed(in))
                    CM_WARN("msg=\"bad hello: not a fleetprof agent or another protocol "
                            "version\" pid=%d uid=%d version=%u expected=%d",
                            c->pid, c->uid, get32(p + 4), CM_SOCK_VERSION);
                conn_close(c, COL_DISC_BAD_HELLO);
                break;
            }
            c->hello_done = 1;
            pos += CM_SOCK_HELLO_SIZE;
            progress = 1;
            c->active_ms = uv_now(in->loop);
            continue;
        }
        if (avail < 4)
            break;
        uint32_t n = get32(p);
        if (n == 0 || n > (c->control ? CM_SOCK_CTL_MAX_MSG : (uint64_t)in->cfg->max_msg)) {
            c->msg_no++;
            col_count(&col_metrics.chunks_in, 1);
            col_metrics_reject(CM_ETOOBIG);
            ack_add(c, CM_ETOOBIG);
            acks_flush(c);
            if (log_allowed(in))
                CM_WARN("msg=\"frame length out of bounds\" length=%u max_msg=%lld pid=%d",
                        n, (long long)in->cfg->max_msg, c->pid);
            conn_close(c, COL_DISC_OVERSIZED);
            break;
        }
        if (avail < 4 + (size_t)n) {
            /* Make room for the whole frame now, or shed it. */
            if (pos) {
                memmove(c->buf, c->buf + pos, avail);
                c->len = avail;
                pos = 0;
            }
            if (buf_reserve(c, 4 + (size_t)n)) {
                c->msg_no++;
                col_count(&col_metrics.chunks_in, 1);
                col_count(&col_metrics.shed[COL_SHED_MEMORY], 1);
                ack_add(c, CM_SOCK_RETRY);
                c->discard = 4 + (uint64_t)n - avail;
                c->len = 0;
            }
            break;
        }
        c->msg_no++;
        ack_add(c, c->control ? control_handle(c, p + 4, n) : frame_handle(c, p + 4, n));
        pos += 4 + (size_t)n;
        progress = 1;
        c->active_ms = uv_now(in->loop);
    }
    if (c->closing)
        return;
    if (pos) {
        memmove(c->buf, c->buf + pos, c->len - pos);
        c->len -= pos;
    }
    /* The deadline is per frame: a client streaming frames back to back always has a partial
     * one at the end of a read, but each of them completes in time. */
    if (c->len == 0 && c->discard == 0)
        c->partial_since = 0;
    else if (progress || !c->partial_since)
        c->partial_since = uv_now(in->loop) ? uv_now(in->loop) : 1;
    if (c->len == 0 && c->cap > 4 * INITIAL_BUF) { /* give a large frame's memory back */
        free(c->buf);
        in->mem_used -= c->cap;
        c->buf = NULL;
        c->cap = 0;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    conn_t *c = (conn_t *)h;
    if (c->discard) {
        size_t n = c->discard < SCRATCH ? (size_t)c->discard : SCRATCH;
        *buf = uv_buf_init((char *)c->in->scratch, (unsigned)n);
        return;
    }
    size_t want = c->len + 4096;
    if (buf_reserve(c, want) && c->cap - c->len == 0) {
        *buf = uv_buf_init(NULL, 0); /* UV_ENOBUFS: handled in on_read */
        return;
    }
    size_t room = c->cap - c->len;
    if (room > READ_CHUNK)
        room = READ_CHUNK;
    *buf = uv_buf_init((char *)c->buf + c->len, (unsigned)room);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    conn_t *c = (conn_t *)s;
    col_ingest_t *in = c->in;
    if (nread < 0) {
        /* An exiting agent writes its last chunks and closes without reading their acks
         * (agent sender.c, ag_sender_exit): the unread acks make the kernel reset the
         * connection. A reset between frames is that normal end, as EOF is; one in the middle
         * of a frame is not. */
        int between = c->len == 0 && c->discard == 0 && c->hello_done;
        int normal = nread == UV_EOF || ((nread == UV_ECONNRESET || nread == UV_EPIPE) && between);
        conn_close(c, normal ? COL_DISC_EOF : COL_DISC_ERROR);
        return;
    }
    if (nread == 0)
        return;
    if (buf->base == (char *)in->scratch) {
        c->discard -= (uint64_t)nread;
        if (c->discard == 0) {
            acks_flush(c);
            c->partial_since = 0;
            c->active_ms = uv_now(in->loop);
        }
        return;
    }
    c->len += (size_t)nread;
    conn_process(c);
    acks_flush(c);
    col_producer_kick(in->producer);
}

/* ------------------------------------------------------------------ accept, sweep */

static void on_connection(uv_stream_t *server, int status) {
    col_ingest_t *in = server->data;
    if (status < 0) {
        CM_WARN("msg=\"accept failed\" err=\"%s\"", uv_strerror(status));
        return;
    }
    conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->in = in;
    c->pid = c->uid = -1;
    uv_pipe_init(in->loop, &c->pipe, 0);
    if (uv_accept(server, (uv_stream_t *)&c->pipe)) {
        uv_close((uv_handle_t *)&c->pipe, (uv_close_cb)free);
        return;
    }
    c->next = in->conns;
    if (in->conns)
        in->conns->prev = c;
    in->conns = c;
    in->n_conns++;
    col_count(&col_metrics.connections_total, 1);
    col_gauge_set(&col_metrics.connected, in->n_conns);
    if (in->n_conns > (uint64_t)in->cfg->max_clients || in->draining) {
        conn_close(c, in->draining ? COL_DISC_SHUTDOWN : COL_DISC_TOO_MANY);
        return;
    }
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
        c->pid = cred.pid;
        c->uid = (int)cred.uid;
    }
    col_enrich_peer(in->node, c->pid, c->uid, &c->hdrs);
    budget_t *u = budget_get(in, col_budget_key(c->uid, col_hdrs_get(&c->hdrs, CM_HDR_CONTAINER)),
                             c->uid);
    if (in->cfg->uid_max_clients > 0 && u->conns >= (uint64_t)in->cfg->uid_max_clients) {
        conn_close(c, COL_DISC_UID_TOO_MANY); /* logged there with pid and uid */
        return;
    }
    u->conns++;
    c->budget = u;
    c->partial_since = uv_now(in->loop) ? uv_now(in->loop) : 1; /* the hello is due */
    uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
}

static void on_sweep(uv_timer_t *t) {
    col_ingest_t *in = t->data;
    uint64_t now = uv_now(in->loop), limit = (uint64_t)(in->cfg->frame_timeout / 1000000);
    uint64_t idle = (uint64_t)(in->cfg->idle_timeout / 1000000);
    for (conn_t *c = in->conns, *next; c; c = next) {
        next = c->next;
        if (!c->closing && c->partial_since && now - c->partial_since > limit)
            conn_close(c, COL_DISC_SLOW);
        else if (!c->closing && idle && c->hello_done && !c->partial_since &&
                 now - c->active_ms > idle)
            conn_close(c, COL_DISC_IDLE);
    }
    budget_sweep(in, now);
}

/* socket-group: the socket's group becomes GROUP (a name or a number), so socket-mode 0660
 * admits exactly its members. Without CAP_CHOWN the collector must itself be a member. */
static int give_group(const char *path, const char *shown, const char *group, char *errbuf,
                      size_t errbuf_size) {
    char *end;
    long n = strtol(group, &end, 10);
    gid_t gid;
    if (*group && !*end && n >= 0) {
        gid = (gid_t)n;
    } else {
        struct group *gr = getgrnam(group);
        if (!gr) {
            snprintf(errbuf, errbuf_size, "socket-group '%s' is not a group on this machine",
                     group);
            return -EINVAL;
        }
        gid = gr->gr_gid;
    }
    if (chown(path, (uid_t)-1, gid)) {
        int e = errno;
        snprintf(errbuf, errbuf_size,
                 "cannot give socket '%s' to socket-group '%s' (gid %u): %s (the collector "
                 "must be a member of the group: SupplementaryGroups= in its unit)",
                 shown, group, (unsigned)gid, strerror(e));
        return -e;
    }
    return 0;
}

/* Removes a stale socket file; refuses if a collector still answers on it. */
static int prepare_path(const char *path, char *errbuf, size_t errbuf_size) {
    struct stat st;
    if (lstat(path, &st))
        return 0;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(errbuf, errbuf_size, "socket='%s' exists and is not a socket: remove it or "
                 "choose another path", path);
        return -EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int live = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    if (live) {
        snprintf(errbuf, errbuf_size, "socket='%s' is in use by a running collector: stop it "
                 "or choose another path", path);
        return -EADDRINUSE;
    }
    unlink(path);
    return 0;
}

/* A temporary name for the socket beside its path: random, so that collectors in other pid
 * namespaces (each its own pid 1) sharing the directory never pick the same one. 0 if there
 * is no room for the suffix in sun_path. */
static int temp_name(char *tmp, size_t size, const char *path) {
    uint32_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = (uint32_t)getpid() * 2654435761u ^ (uint32_t)ts.tv_nsec;
    }
    int n = snprintf(tmp, size, "%s.%08x.tmp", path, (unsigned)r);
    return n > 0 && (size_t)n < size;
}

/* Binds and listens on socket=, with its socket-mode and socket-group. The socket is made
 * under a temporary name in the same directory and linked into place, so nothing can see or
 * connect to it half-made; a path with no room for the suffix is bound in place. The
 * socket file's identity goes to *dev, *ino (0: unknown). */
static int open_socket(uv_pipe_t *server, const col_config_t *cfg, dev_t *dev, ino_t *ino,
                       char *errbuf, size_t errbuf_size) {
    char tmp[sizeof ((struct sockaddr_un *)0)->sun_path];
    if (errbuf_size)
        errbuf[0] = '\0';
    const char *at = cfg->socket;
    int rc = UV_EADDRINUSE;
    mode_t old = umask(0177); /* the socket is born 0600, then opened up to socket-mode */
    for (int i = 0; i < 4 && rc == UV_EADDRINUSE && temp_name(tmp, sizeof tmp, cfg->socket); i++)
        rc = uv_pipe_bind(server, at = tmp);
    if (at == cfg->socket)
        rc = uv_pipe_bind(server, at);
    umask(old);
    if (rc == 0 && chmod(at, (mode_t)cfg->socket_mode)) {
        rc = -errno;
        snprintf(errbuf, errbuf_size, "cannot set socket-mode %o on socket '%s': %s",
                 (unsigned)cfg->socket_mode, cfg->socket, strerror(-rc));
    }
    if (rc == 0 && cfg->socket_group && cfg->socket_group[0])
        rc = give_group(at, cfg->socket, cfg->socket_group, errbuf, errbuf_size);
    if (rc == 0 && (rc = uv_listen((uv_stream_t *)server, 1024, on_connection)) != 0)
        snprintf(errbuf, errbuf_size, "cannot listen on socket='%s': %s", cfg->socket,
                 uv_strerror(rc));
    struct stat st;
    if (rc == 0 && lstat(at, &st) == 0) {
        *dev = st.st_dev;
        *ino = st.st_ino;
    }
    /* link, not rename: a collector that made the path meanwhile keeps it (EEXIST) */
    if (rc == 0 && at == tmp && link(tmp, cfg->socket)) {
        rc = -errno;
        if (rc == -EEXIST)
            snprintf(errbuf, errbuf_size,
                     "socket='%s' was made by another process while this collector started "
                     "(another collector on the same path?)",
                     cfg->socket);
        else
            snprintf(errbuf, errbuf_size, "cannot link the socket into place at '%s': %s",
                     cfg->socket, strerror(-rc));
    }
    if (at == tmp && rc != UV_EADDRINUSE)
        unlink(tmp); /* bound by us (an EADDRINUSE from bind: another's, left alone) */
    if (rc && !errbuf[0])
        snprintf(errbuf, errbuf_size,
                 "cannot bind socket='%s': %s (does the directory exist and is it writable?)",
                 cfg->socket, uv_strerror(rc));
    return rc;
}

int col_ingest_start(uv_loop_t *loop, const col_config_t *cfg, const col_node_ident_t *node,
                     col_spool_t *spool, col_producer_t *producer, col_ingest_t **out,
                     char *errbuf, size_t errbuf_size) {
    int rc;
    *out = NULL;
    col_ingest_t *in = calloc(1, sizeof *in);
    if (!in)
        return -ENOMEM;
    in->loop = loop;
    in->cfg = cfg;
    in->node = node;
    in->spool = spool;
    in->shared.key = COL_BUDGET_SHARED;
    in->shared.uid = -1;
    in->producer = producer;
    if ((rc = prepare_path(cfg->socket, errbuf, errbuf_size))) {
        free(in);
        return rc;
    }
    uv_pipe_init(loop, &in->server, 0);
    in->server.data = in;
    if ((rc = open_socket(&in->server, cfg, &in->dev, &in->ino, errbuf, errbuf_size))) {
        uv_close((uv_handle_t *)&in->server, NULL);
        uv_run(loop, UV_RUN_NOWAIT);
        free(in);
        return rc;
    }
    uv_timer_init(loop, &in->sweep);
    in->sweep.data = in;
    int64_t shortest = cfg->idle_timeout > 0 && cfg->idle_timeout < cfg->frame_timeout
                           ? cfg->idle_timeout
                           : cfg->frame_timeout;
    uint64_t every = (uint64_t)(shortest / 4000000);
    uv_timer_start(&in->sweep, on_sweep, every ? every : 1, every ? every : 1);
    *out = in;
    return 0;
}

void col_ingest_drain(col_ingest_t *in) {
    if (in)
        in->draining = 1;
}

void col_ingest_stop(col_ingest_t *in) {
    if (!in)
        return;
    in->draining = 1;
    /* The path goes first, and only while it is still our socket: a collector started
     * meanwhile (ours refusing connections while it drains) may have put its own there. */
    struct stat st;
    if (in->ino && !lstat(in->cfg->socket, &st) && st.st_dev == in->dev && st.st_ino == in->ino)
        unlink(in->cfg->socket);
    uv_close((uv_handle_t *)&in->server, NULL);
    uv_close((uv_handle_t *)&in->sweep, NULL);
    for (conn_t *c = in->conns; c; c = c->next)
        conn_close(c, COL_DISC_SHUTDOWN);
    while (in->conns)
        uv_run(in->loop, UV_RUN_ONCE);
    uv_run(in->loop, UV_RUN_NOWAIT);
    for (size_t i = 0; i < BUDGET_HEADS; i++)
        for (budget_t *b = in->budget_heads[i], *next; b; b = next) {
            next = b->next;
            free(b);
        }
    free(in);
}
