/* The consume loop (see consume.h): poll, decode, dedupe, roll up into the partition's batch,
 * write batches with their offsets, dead-letter bad messages, follow rebalances.
 *
 * Exactly once. A partition's data and its next offset are committed in one store transaction;
 * on assignment the partition is read from the stored offset. A chunk id seen in the store or
 * earlier in the batch is skipped (a collector may send a chunk twice). Dead-lettered messages
 * are flushed to Kafka before the transaction that moves the offset past them commits, so a
 * crash can duplicate a DLQ entry but never lose one (reject counts are stored with the data
 * and stay exact). Each store write is fenced on the offset the batch started from: if another
 * instance wrote the partition meanwhile (it was reassigned while we were slow), the write fails
 * with -ESTALE, the batch is dropped and we seek to the stored offset.
 *
 * Threading: one thread; rebalance callbacks run inside rd_kafka_consumer_poll on it.
 */
#include "webhook.h"
#include "consume.h"
#include "incidents.h"
#include "store_pg.h"

#include "dims.h"
#include "intern.h"
#include "store.h"

#include "cm/chunk.h"
#include "cm/error.h"
#include "cm/log.h"
#include "cm/wire.h"

#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int assigned;
    agg_store_t *store;
    agg_intern_t intern;
    agg_batch_t batch;
    int64_t committed; /* next offset stored in the store; -1: none */
    int dlq_pending;   /* messages of this batch were produced to the DLQ */
    int poisoned;      /* a chunk could not be checked: the batch must not commit */
    int fails;         /* store writes failed in a row (not fenced) */
    int64_t resume_ms; /* paused after a failed write until then (mono_ms); 0: not paused */
} part_t;

struct agg_consumer {
    agg_consume_cfg_t cfg;
    agg_metrics_t *m;
    rd_kafka_t *rk, *dlq;
    part_t *parts;
    int32_t nparts;
    agg_rollup_t rollup;
    agg_dims_t dims;
    int fatal;
    uint64_t dlq_failed; /* delivery failures reported by the DLQ producer */
    struct {
        int64_t offset, progress_ms;
    } group[AGG_METRICS_MAX_PARTITIONS]; /* group_check's memory */
    agg_store_t *pg_check; /* PostgreSQL: group_check's own connection (opened on first use) */
    volatile sig_atomic_t *stop; /* agg_consumer_run's flag: ends the wait for the database */
};

/* how long a partition assignment waits for an unreachable PostgreSQL store */
#define AGG_PG_WAIT_MS 120000

static int use_pg(const agg_consumer_t *c) {
    return c->cfg.store_url && *c->cfg.store_url;
}

static int64_t mono_ms(void) { return agg_mono_ns() / 1000000; }
static int64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static part_t *part_get(agg_consumer_t *c, int32_t p) {
    if (p < 0)
        return NULL;
    if (p >= c->nparts) {
        int32_t n = p + 1 > 2 * c->nparts ? p + 1 : 2 * c->nparts;
        part_t *np = realloc(c->parts, (size_t)n * sizeof *np);
        if (!np)
            return NULL;
        memset(np + c->nparts, 0, (size_t)(n - c->nparts) * sizeof *np);
        for (int32_t i = c->nparts; i < n; i++)
            agg_batch_init(&np[i].batch);
        c->parts = np;
        c->nparts = n;
    }
    return &c->parts[p];
}

static void dlq_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    agg_consumer_t *c = opaque;
    if (m->err) {
        c->dlq_failed++;
        CM_ERROR("dead-letter delivery to %s failed: %s", c->cfg.dlq_topic,
                 rd_kafka_err2str(m->err));
    }
}

/* Sends a bad message to the DLQ with its original key, value and headers, plus the reason. */
static void dlq_send(agg_consumer_t *c, part_t *p, const rd_kafka_message_t *m,
                     const char *reason) {
    rd_kafka_headers_t *src = NULL, *h;
    h = rd_kafka_message_headers(m, &src) == 0 ? rd_kafka_headers_copy(src)
                                               : rd_kafka_headers_new(2);
    char where[160];
    snprintf(where, sizeof where, "%s/%d/%lld", rd_kafka_topic_name(m->rkt), m->partition,
             (long long)m->offset);
    rd_kafka_header_add(h, CM_HDR_DLQ_REASON, -1, reason, -1);
    rd_kafka_header_add(h, "fp-dlq-source", -1, where, -1);
    rd_kafka_resp_err_t e = rd_kafka_producev(
        c->dlq, RD_KAFKA_V_TOPIC(c->cfg.dlq_topic), RD_KAFKA_V_KEY(m->key, m->key_len),
        RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
    if (e) {
        rd_kafka_headers_destroy(h);
        c->dlq_failed++;
        CM_ERROR("cannot queue message %s for the dead-letter topic %s: %s", where,
                 c->cfg.dlq_topic, rd_kafka_err2str(e));
    }
    p->dlq_pending = 1;
}

static void seek_to(agg_consumer_t *c, int32_t partition, int64_t offset) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, c->cfg.topic, partition)->offset =
        offset >= 0 ? offset : RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_error_t *e = rd_kafka_seek_partitions(c->rk, l, 10000);
    if (e) {
        CM_ERROR("seek of partition %d to %lld failed: %s", partition, (long long)offset,
                 rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* Pauses or resumes fetching one partition. */
static void set_paused(agg_consumer_t *c, int32_t partition, int pause) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, c->cfg.topic, partition);
    rd_kafka_resp_err_t e =
        pause ? rd_kafka_pause_partitions(c->rk, l) : rd_kafka_resume_partitions(c->rk, l);
    if (e)
        CM_ERROR("%s of partition %d failed: %s", pause ? "pause" : "resume", partition,
                 rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

/* After a failed store write the partition waits before it is consumed again: 100 ms doubling
 * to AGG_WRITE_BACKOFF_MAX_MS while the store keeps failing (a read-only or full store, a
 * database outage would otherwise be retried, and logged, dozens of times a second). */
#define AGG_WRITE_BACKOFF_MAX_MS 2000

static void backoff_start(agg_consumer_t *c, int32_t partition) {
    part_t *p = &c->parts[partition];
    int64_t ms = 100;
    for (int i = 1; i < p->fails && ms < AGG_WRITE_BACKOFF_MAX_MS; i++)
        ms *= 2;
    if (ms > AGG_WRITE_BACKOFF_MAX_MS)
        ms = AGG_WRITE_BACKOFF_MAX_MS;
    if (!p->resume_ms)
        set_paused(c, partition, 1);
    p->resume_ms = mono_ms() + ms;
}

static void backoff_end(agg_consumer_t *c, int32_t partition) {
    part_t *p = &c->parts[partition];
    if (p->resume_ms)
        set_paused(c, partition, 0);
    p->resume_ms = 0;
}

/* Writes p's batch. On a failed or fenced write, drops it and rewinds the partition; after a
 * failed (not fenced) one, the partition backs off before it is read again. */
static int flush_part(agg_consumer_t *c, int32_t partition, int rewind) {
    part_t *p = &c->parts[partition];
    agg_batch_t *b = &p->batch;
    int rc = 0;
    if (b->next_offset < 0)
        return 0;
    if (p->poisoned) {
        rc = CM_EIO;
        goto fail;
    }
    if (p->dlq_pending) {
        uint64_t before = c->dlq_failed;
        rd_kafka_resp_err_t fe = rd_kafka_flush(c->dlq, 30000);
        if (fe || c->dlq_failed != before) {
            CM_ERROR("dead-letter topic %s did not take every message (%s); not committing "
                     "partition %d, will consume it again",
                     c->cfg.dlq_topic, rd_kafka_err2str(fe), partition);
            rc = CM_EIO;
            goto fail;
        }
    }
    int64_t t0 = agg_mono_ns();
    rc = agg_store_batch_write(p->store, c->cfg.topic, partition, b);
    double dt = (agg_mono_ns() - t0) / 1e9;
    if (rc)
        goto fail;
    agg_metrics_observe_write(c->m, dt);
    pthread_mutex_lock(&c->m->mu);
    c->m->batches++;
    c->m->messages += b->messages;
    c->m->chunks += b->chunks;
    c->m->incident_chunks += b->incident_chunks;
    c->m->incidents += b->incidents;
    c->m->samples += b->samples;
    c->m->duplicates += b->duplicates;
    c->m->dlq_produced += b->rejects;
    c->m->store_ok = 1;
    if (partition < AGG_METRICS_MAX_PARTITIONS)
        c->m->part[partition].committed = b->next_offset;
    pthread_mutex_unlock(&c->m->mu);
    for (size_t i = 0; i < b->rej.n; i++) {
        const agg_rej_ent_t *e = agg_hmap_entry(&b->rej, i);
        agg_metrics_add_reject(c->m, e->k.reason, (uint64_t)e->count);
    }
    p->committed = b->next_offset;
    if (p->fails)
        CM_INFO("partition %d: the store takes writes again after %d failed ones", partition,
                p->fails);
    p->fails = 0;
    CM_DEBUG("partition %d: committed %llu messages, %llu chunks, %llu samples up to offset %lld "
             "in %.1f ms", partition, (unsigned long long)b->messages,
             (unsigned long long)b->chunks, (unsigned long long)b->samples,
             (long long)b->next_offset, dt * 1e3);
    /* for lag tooling only; the store is the source of truth */
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, c->cfg.topic, partition)->offset = b->next_offset;
    rd_kafka_commit(c->rk, l, 1);
    rd_kafka_topic_partition_list_destroy(l);
    agg_batch_clear(b);
    p->dlq_pending = 0;
    agg_webhook_commit(c->cfg.webhook, partition); /* its incidents are stored */
    return 0;
fail:
    agg_webhook_discard(c->cfg.webhook, partition); /* consumed again, staged again */
    agg_intern_forget(&p->intern);
    agg_batch_clear(b);
    p->dlq_pending = p->poisoned = 0;
    pthread_mutex_lock(&c->m->mu);
    if (rc == -ESTALE)
        c->m->stale_batches++;
    else {
        c->m->write_errors++;
        c->m->store_ok = 0;
    }
    pthread_mutex_unlock(&c->m->mu);
    if (rc != -ESTALE) {
        p->fails++;
        CM_ERROR("partition %d: store write failed: %s; the batch will be consumed again "
                 "(failure %d in a row)", partition, cm_strerror(rc), p->fails);
    }
    int64_t stored;
    if (agg_store_offset_get(p->store, c->cfg.topic, partition, &stored) == 0)
        p->committed = stored;
    if (rewind) {
        seek_to(c, partition, p->committed);
        if (rc != -ESTALE)
            backoff_start(c, partition);
    }
    return rc;
}

static void part_close(agg_consumer_t *c, int32_t partition) {
    part_t *p = &c->parts[partition];
    flush_part(c, partition, 0);
    backoff_end(c, partition);
    p->fails = 0;
    agg_store_close(p->store);
    p->store = NULL;
    agg_intern_free(&p->intern);
    agg_batch_clear(&p->batch);
    p->assigned = 0;
    pthread_mutex_lock(&c->m->mu);
    if (partition < AGG_METRICS_MAX_PARTITIONS)
        c->m->part[partition].assigned = 0;
    pthread_mutex_unlock(&c->m->mu);
}

static int part_open(agg_consumer_t *c, int32_t partition, int64_t *offset) {
    part_t *p = part_get(c, partition);
    char path[4096], err[512];
    if (!p)
        return CM_ENOMEM;
    if (p->assigned)
        part_close(c, partition);
    int rc;
    if (use_pg(c)) {
        /* the database may be down for a while (a restart, a failover): every partition needs
         * it, so wait for it here (the group's heartbeats go on in librdkafka's thread) rather
         * than leave the group */
        snprintf(path, sizeof path, "the PostgreSQL store");
        for (int64_t t0 = mono_ms(), said = 0;; ) {
            rc = agg_store_pg_open(c->cfg.store_url, &p->store, err, sizeof err);
            if (!rc && !(rc = agg_store_offset_get(p->store, c->cfg.topic, partition,
                                                   &p->committed)))
                break;
            agg_store_close(p->store);
            p->store = NULL;
            int64_t waited = mono_ms() - t0;
            if (rc == CM_ECONFIG || waited > AGG_PG_WAIT_MS)
                break;
            if (c->stop && *c->stop) { /* shutting down: nothing was read, nothing to lose */
                CM_INFO("partition %d: stopping while the PostgreSQL store is unreachable",
                        partition);
                return -ECANCELED;
            }
            if (waited >= said) {
                CM_WARN("partition %d: the PostgreSQL store is not reachable (%s); retrying "
                        "for up to %d s", partition, err, AGG_PG_WAIT_MS / 1000);
                said = waited + 10000;
            }
            usleep(500000);
        }
    } else {
        agg_store_path(path, sizeof path, c->cfg.store_dir, c->cfg.topic, partition);
        rc = agg_store_sqlite_open(path, &p->store, err, sizeof err);
    }
    if (rc) {
        CM_ERROR("partition %d: %s", partition, err);
        return rc;
    }
    if (!use_pg(c) &&
        (rc = agg_store_offset_get(p->store, c->cfg.topic, partition, &p->committed))) {
        CM_ERROR("partition %d: cannot read the stored offset from %s: %s", partition, path,
                 cm_strerror(rc));
        agg_store_close(p->store);
        p->store = NULL;
        return rc;
    }
    agg_batch_clear(&p->batch);
    p->assigned = 1;
    p->dlq_pending = p->poisoned = 0;
    *offset = p->committed >= 0 ? p->committed : RD_KAFKA_OFFSET_BEGINNING;
    if (p->committed >= 0)
        CM_INFO("partition %d assigned: store %s, resuming at offset %lld", partition, path,
                (long long)p->committed);
    else
        CM_INFO("partition %d assigned: store %s is new, reading from the beginning", partition,
                path);
    pthread_mutex_lock(&c->m->mu);
    c->m->rebalances++;
    if (partition < AGG_METRICS_MAX_PARTITIONS) {
        c->m->part[partition].assigned = 1;
        c->m->part[partition].committed = p->committed;
    }
    pthread_mutex_unlock(&c->m->mu);
    return 0;
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque) {
    agg_consumer_t *c = opaque;
    const char *proto = rd_kafka_rebalance_protocol(rk);
    int coop = proto && !strcmp(proto, "COOPERATIVE");
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        for (int i = 0; i < parts->cnt; i++) {
            rd_kafka_topic_partition_t *tp = &parts->elems[i];
            if (strcmp(tp->topic, c->cfg.topic))
                continue;
            int rc = part_open(c, tp->partition, &tp->offset);
            if (rc == -ECANCELED) { /* stopping: the partition is never consumed here */
                tp->offset = RD_KAFKA_OFFSET_END;
            } else if (rc) {
                CM_ERROR("cannot take partition %d (%s); stopping so that another instance can",
                         tp->partition, cm_strerror(rc));
                c->fatal = rc;
                tp->offset = RD_KAFKA_OFFSET_END; /* never consumed: we leave before writing */
            }
        }
        if (coop) {
            rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, parts);
            if (e) {
                CM_ERROR("incremental assign failed: %s", rd_kafka_error_string(e));
                rd_kafka_error_destroy(e);
            }
        } else {
            rd_kafka_assign(rk, parts);
        }
    } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        if (rd_kafka_assignment_lost(rk))
            CM_WARN("partitions lost (session timed out); fenced writes keep counts exact");
        for (int i = 0; i < parts->cnt; i++) {
            rd_kafka_topic_partition_t *tp = &parts->elems[i];
            if (strcmp(tp->topic, c->cfg.topic) || tp->partition >= c->nparts ||
                !c->parts[tp->partition].assigned)
                continue;
            part_close(c, tp->partition);
            CM_INFO("partition %d revoked", tp->partition);
        }
        if (coop) {
            rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, parts);
            if (e)
                rd_kafka_error_destroy(e);
        } else {
            rd_kafka_assign(rk, NULL);
        }
    } else {
        CM_ERROR("rebalance error: %s", rd_kafka_err2str(err));
        rd_kafka_assign(rk, NULL);
    }
}

/* The sender's identity from the collector's headers (collector/src/enrich.c). */
static void chunk_meta(const rd_kafka_message_t *m, agg_chunk_meta_t *meta) {
    memset(meta, 0, sizeof *meta);
    rd_kafka_headers_t *h = NULL;
    if (rd_kafka_message_headers(m, &h) || !h)
        return;
    struct {
        const char *name;
        char *out;
        size_t size;
    } want[] = {{CM_HDR_HOST, meta->host, sizeof meta->host},
                {CM_HDR_NODE, meta->node, sizeof meta->node},
                {CM_HDR_POD, meta->pod, sizeof meta->pod},
                {CM_HDR_CONTAINER, meta->container, sizeof meta->container}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const void *v;
        size_t vl;
        if (rd_kafka_header_get_last(h, want[i].name, &v, &vl) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            v && vl < want[i].size) {
            memcpy(want[i].out, v, vl);
            want[i].out[vl] = 0;
            want[i].out[strnlen(want[i].out, vl)] = 0;
        }
    }
    /* what the collector checked (SO_PEERCRED; the pid as the process sees it, NSpid) */
    struct {
        const char *name;
        uint32_t *out;
        int *set;
    } num[] = {{CM_HDR_PEER_PID, &meta->peer_pid, NULL},
               {CM_HDR_PEER_NSPID, &meta->peer_nspid, NULL},
               {CM_HDR_PEER_UID, &meta->peer_uid, &meta->has_peer_uid}};
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++) {
        const void *v;
        size_t vl;
        char buf[16];
        if (rd_kafka_header_get_last(h, num[i].name, &v, &vl) != RD_KAFKA_RESP_ERR_NO_ERROR ||
            !v || vl == 0 || vl >= sizeof buf)
            continue;
        memcpy(buf, v, vl);
        buf[vl] = 0;
        char *end;
        unsigned long n = strtoul(buf, &end, 10);
        if (*end || buf[0] == '-' || n > UINT32_MAX)
            continue;
        *num[i].out = (uint32_t)n;
        if (num[i].set)
            *num[i].set = 1;
    }
}

/* Decodes one message into its partition's batch. Returns 0 or a fatal code (ENOMEM). */
static int handle(agg_consumer_t *c, rd_kafka_message_t *m) {
    part_t *p = m->partition < c->nparts ? &c->parts[m->partition] : NULL;
    if (!p || !p->assigned || m->offset < p->committed)
        return 0; /* stale: revoked partition, or before the stored offset */
    agg_batch_t *b = &p->batch;
    if (b->next_offset < 0) {
        b->base_offset = p->committed;
        b->first_msg_ms = mono_ms();
    }
    b->next_offset = m->offset + 1;
    b->messages++;
    char err[512];
    int rc;
    if (!m->payload || !m->len) {
        dlq_send(c, p, m, "EEMPTY: message has no value; expected a chunk frame");
        return agg_batch_reject(b, "EEMPTY");
    }
    cm_chunk_t *ch = NULL;
    if ((rc = cm_chunk_decode(m->payload, m->len, &ch, err, sizeof err))) {
        if (rc == CM_ENOMEM && m->len < 64 * 1024 * 1024)
            CM_WARN("chunk at %d/%lld exceeds the decode budget", m->partition,
                    (long long)m->offset);
        char reason[600];
        snprintf(reason, sizeof reason, "%s: %s", cm_errname(rc), err);
        dlq_send(c, p, m, reason);
        return agg_batch_reject(b, cm_errname(rc));
    }
    agg_seen_key_t sk;
    memcpy(sk.id, ch->header.chunk_id, CM_CHUNK_ID_LEN);
    int seen = agg_hmap_find(&b->seen, &sk) != NULL;
    if (!seen && (rc = agg_store_chunk_seen(p->store, sk.id, &seen))) {
        CM_ERROR("partition %d: dedup lookup failed: %s", m->partition, cm_strerror(rc));
        p->poisoned = 1; /* the batch is dropped and consumed again */
        goto out;
    }
    if (seen) {
        b->duplicates++;
        rc = 0;
        goto out;
    }
    agg_seen_ent_t *se = agg_hmap_upsert(&b->seen, &sk, NULL);
    agg_chunk_ids_t ids = {0};
    agg_chunk_meta_t meta;
    chunk_meta(m, &meta);
    if (se && ch->incident.present) { /* a capture: its own tables (ingest/incidents.c) */
        rc = agg_ingest_incident(&p->intern, b, ch, m->payload, m->len);
        if (!rc) {
            se->ts_ns = wall_ns();
            b->incident_chunks++;
            b->incidents += ch->incident.part == 0;
            if (ch->incident.part == 0)
                agg_webhook_stage(c->cfg.webhook, m->partition, ch);
        }
        goto out;
    }
    if (!se || (rc = agg_intern_chunk(&p->intern, b, ch, &ids)) ||
        (rc = agg_dims_chunk(&c->dims, &p->intern, b, ch, &meta, &ids)) ||
        (rc = agg_rollup_chunk(&c->rollup, b, ch, &ids))) {
        rc = rc ? rc : CM_ENOMEM;
        goto out;
    }
    se->ts_ns = wall_ns();
out:
    cm_chunk_free(ch);
    return rc == CM_ENOMEM ? rc : 0;
}

/* Passthrough properties go to both clients, except the consumer-only ones (librdkafka would
 * warn about them on the DLQ producer). */
static int consumer_only(const char *key) {
    static const char *const pre[] = {"session.timeout.ms", "heartbeat.interval.ms",
                                      "max.poll.interval.ms", "group.", "fetch.",
                                      "auto.offset.reset", "partition.assignment.strategy",
                                      "isolation.level", "queued.", "enable.auto.",
                                      "check.crcs", NULL};
    for (int i = 0; pre[i]; i++)
        if (!strncmp(key, pre[i], strlen(pre[i])))
            return 1;
    return 0;
}

static rd_kafka_conf_t *base_conf(const agg_consume_cfg_t *cfg, int producer, char *err,
                                  size_t err_size) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char e[512];
    if (rd_kafka_conf_set(conf, "bootstrap.servers", cfg->brokers, e, sizeof e) ||
        rd_kafka_conf_set(conf, "client.id", cfg->client_id, e, sizeof e))
        goto fail;
    /* A member that dies (SIGKILL, a partitioned host) keeps its partitions until the broker
     * stops hearing from it: librdkafka's default session.timeout.ms (45 s) meant ~75 s without
     * ingest in practice. 6 s is the broker's default group.min.session.timeout.ms; heartbeats
     * every 1 s (under a third of it). A clean shutdown leaves the group at once
     * (rd_kafka_consumer_close). Both can be overridden with --kafka.PROPERTY. */
    if (!producer && (rd_kafka_conf_set(conf, "session.timeout.ms", "6000", e, sizeof e) ||
                      rd_kafka_conf_set(conf, "heartbeat.interval.ms", "1000", e, sizeof e)))
        goto fail;
    for (size_t i = 0; cfg->kafka_props && i < cfg->kafka_props->n; i++) {
        const cm_kv_t *kv = &cfg->kafka_props->items[i];
        if (producer && consumer_only(kv->key))
            continue;
        if (rd_kafka_conf_set(conf, kv->key, kv->value, e, sizeof e)) {
            snprintf(err, err_size, "kafka.%s = '%s' rejected by librdkafka: %s", kv->key,
                     kv->value, e);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    return conf;
fail:
    snprintf(err, err_size, "kafka configuration: %s", e);
    rd_kafka_conf_destroy(conf);
    return NULL;
}

/* Sets the n (property, value) pairs kv on *conf and creates the client of this type (what:
 * its name in messages) from it; *conf is then the client's (NULL). Returns the client, or
 * NULL with the reason in err (*conf left to the caller). */
static rd_kafka_t *kafka_new(rd_kafka_type_t type, rd_kafka_conf_t **conf,
                             const char *const (*kv)[2], size_t n, const char *what, char *err,
                             size_t err_size) {
    char e[512];
    for (size_t i = 0; i < n; i++)
        if (rd_kafka_conf_set(*conf, kv[i][0], kv[i][1], e, sizeof e)) {
            snprintf(err, err_size, "kafka %s configuration: %s",
                     type == RD_KAFKA_PRODUCER ? "producer" : "consumer", e);
            return NULL;
        }
    rd_kafka_t *rk = rd_kafka_new(type, *conf, e, sizeof e);
    if (!rk) {
        snprintf(err, err_size, "cannot create %s: %s", what, e);
        return NULL;
    }
    *conf = NULL;
    return rk;
}

int agg_consumer_new(const agg_consume_cfg_t *cfg, agg_metrics_t *metrics, agg_consumer_t **out,
                     char *err, size_t err_size) {
    agg_consumer_t *c = calloc(1, sizeof *c);
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_topic_partition_list_t *topics = NULL;
    int rc = CM_ECONFIG;
    if (!c)
        return CM_ENOMEM;
    c->cfg = *cfg;
    c->m = metrics;
    agg_rollup_init(&c->rollup, &cfg->rollup);
    agg_dims_init(&c->dims, c->rollup.cfg.coarse_width_s, cfg->dim_limit, cfg->dim_target_limit);
    if (cfg->dims_given)
        c->dims.enabled = cfg->dim_mask;

    if (!(conf = base_conf(cfg, 1, err, err_size)))
        goto out;
    rd_kafka_conf_set_dr_msg_cb(conf, dlq_dr);
    rd_kafka_conf_set_opaque(conf, c);
    const char *const producer[][2] = {
        {"enable.idempotence", "true"}, {"message.max.bytes", "20000000"}, {"linger.ms", "5"}};
    if (!(c->dlq = kafka_new(RD_KAFKA_PRODUCER, &conf, producer, 3, "the dead-letter producer",
                             err, err_size)))
        goto out;

    if (!(conf = base_conf(cfg, 0, err, err_size)))
        goto out;
    rd_kafka_conf_set_opaque(conf, c);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    const char *strategy = cfg->assignment_strategy && cfg->assignment_strategy[0]
                               ? cfg->assignment_strategy
                               : "cooperative-sticky";
    const char *const consumer[][2] = {{"group.id", cfg->group},
                                       {"enable.auto.commit", "false"},
                                       {"enable.auto.offset.store", "false"},
                                       {"auto.offset.reset", "earliest"},
                                       {"fetch.message.max.bytes", "20000000"},
                                       {"partition.assignment.strategy", strategy}};
    if (!(c->rk = kafka_new(RD_KAFKA_CONSUMER, &conf, consumer, 6, "the Kafka consumer", err,
                            err_size)))
        goto out;
    rd_kafka_poll_set_consumer(c->rk);
    topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, cfg->topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t se = rd_kafka_subscribe(c->rk, topics);
    if (se) {
        snprintf(err, err_size, "cannot subscribe to topic '%s': %s", cfg->topic,
                 rd_kafka_err2str(se));
        goto out;
    }
    rc = 0;
    *out = c;
out:
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (topics)
        rd_kafka_topic_partition_list_destroy(topics);
    if (rc)
        agg_consumer_free(c);
    return rc;
}

static void update_gauges(agg_consumer_t *c) {
    int64_t bytes = 0;
    int counted = 0; /* PostgreSQL: every partition's handle reaches the same database */
    pthread_mutex_lock(&c->m->mu);
    c->m->heartbeat_ns = agg_mono_ns();
    pthread_mutex_unlock(&c->m->mu);
    for (int32_t i = 0; i < c->nparts; i++) {
        part_t *p = &c->parts[i];
        if (!p->assigned)
            continue;
        int64_t lo = 0, hi = 0;
        rd_kafka_get_watermark_offsets(c->rk, c->cfg.topic, i, &lo, &hi);
        int64_t lag = hi - (p->committed >= 0 ? p->committed : lo);
        if (!use_pg(c) || !counted++) {
            int64_t n = agg_store_size_bytes(p->store);
            bytes += n > 0 ? n : 0;
        }
        pthread_mutex_lock(&c->m->mu);
        if (i < AGG_METRICS_MAX_PARTITIONS)
            c->m->part[i].lag = lag < 0 ? 0 : lag;
        pthread_mutex_unlock(&c->m->mu);
    }
    pthread_mutex_lock(&c->m->mu);
    c->m->store_bytes = bytes;
    for (int d = 0; d < AGG_DIM_COUNT; d++)
        c->m->dim_overflow[d] = c->dims.overflow[d];
    c->m->pid_mismatch = c->dims.pid_mismatch;
    pthread_mutex_unlock(&c->m->mu);
}

/* Next offset stored for a partition this instance does not own (-1: none). */
static int64_t stored_offset(agg_consumer_t *c, int32_t part) {
    char path[4096], err[256];
    int64_t off = -1;
    if (use_pg(c)) {
        if (!c->pg_check && agg_store_pg_open(c->cfg.store_url, &c->pg_check, err, sizeof err))
            return -1;
        if (agg_store_offset_get(c->pg_check, c->cfg.topic, part, &off))
            off = -1;
        return off;
    }
    agg_store_path(path, sizeof path, c->cfg.store_dir, c->cfg.topic, part);
    agg_store_t *st = NULL;
    if (access(path, F_OK) == 0 &&
        agg_store_sqlite_open_readonly(path, &st, err, sizeof err) == 0) {
        if (agg_store_offset_get(st, c->cfg.topic, part, &off))
            off = -1;
        agg_store_close(st);
    }
    return off;
}

/* Lag and progress of every partition of the topic, owned here or not (the store directory is
 * shared by the group): a partition that is behind and whose stored offset does not move has
 * no live consumer (a member died and the group has not reassigned it) or an owner that cannot
 * write. /healthz reports it (metrics.c). Blocking calls with 1 s timeouts, every 5 s. */
static void group_check(agg_consumer_t *c, int64_t now) {
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_topic_t *t = rd_kafka_topic_new(c->rk, c->cfg.topic, NULL);
    if (!t)
        return;
    int32_t n = -1;
    if (rd_kafka_metadata(c->rk, 0, t, &md, 1000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && !md->topics[0].err)
        n = md->topics[0].partition_cnt;
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    if (n < 0)
        return; /* broker unreachable: the loop's own health covers it */
    if (n > AGG_METRICS_MAX_PARTITIONS)
        n = AGG_METRICS_MAX_PARTITIONS;
    for (int32_t i = 0; i < n; i++) {
        int64_t off, lo = 0, hi = 0;
        if (i < c->nparts && c->parts[i].assigned) {
            off = c->parts[i].committed;
            if (rd_kafka_get_watermark_offsets(c->rk, c->cfg.topic, i, &lo, &hi))
                continue;
        } else {
            off = stored_offset(c, i);
            if (rd_kafka_query_watermark_offsets(c->rk, c->cfg.topic, i, &lo, &hi, 1000))
                continue;
        }
        int64_t lag = hi - (off >= 0 ? off : lo);
        if (lag < 0)
            lag = 0;
        if (c->group[i].progress_ms == 0 || lag == 0 || off != c->group[i].offset)
            c->group[i].progress_ms = now;
        c->group[i].offset = off;
        pthread_mutex_lock(&c->m->mu);
        c->m->group[i].lag = lag;
        c->m->group[i].stalled_ms = now - c->group[i].progress_ms;
        if (c->m->group_n < i + 1)
            c->m->group_n = i + 1;
        pthread_mutex_unlock(&c->m->mu);
    }
}

static void run_retention(agg_consumer_t *c) {
    for (int32_t i = 0; i < c->nparts; i++) {
        part_t *p = &c->parts[i];
        if (!p->assigned)
            continue;
        agg_retention_stats_t st = {0};
        int64_t t0 = agg_mono_ns();
        int rc = agg_retention_run(p->store, &c->cfg.retention, wall_ns(), &st);
        if (rc)
            CM_ERROR("partition %d: retention pass failed: %s", i, cm_strerror(rc));
        else if (st.rows_moved || st.rows_expired || st.spans_expired)
            CM_INFO("partition %d: retention downsampled %lld rows, expired %lld rows and %lld "
                    "spans in %.1f ms", i, (long long)st.rows_moved, (long long)st.rows_expired,
                    (long long)st.spans_expired, (agg_mono_ns() - t0) / 1e6);
        pthread_mutex_lock(&c->m->mu);
        c->m->retention_runs++;
        c->m->retention_rows_moved += (uint64_t)st.rows_moved;
        c->m->retention_rows_expired += (uint64_t)st.rows_expired;
        pthread_mutex_unlock(&c->m->mu);
    }
}

int agg_consumer_run(agg_consumer_t *c, volatile sig_atomic_t *stop) {
    int64_t last_gauge = 0, last_group = 0, last_retention = mono_ms();
    int rc = 0;
    int first_retention = 1;
    c->stop = stop;
    while (!*stop && !c->fatal) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, 50);
        if (m) {
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    CM_WARN("consumer: %s", rd_kafka_message_errstr(m));
            } else if ((rc = handle(c, m))) {
                rd_kafka_message_destroy(m);
                CM_ERROR("fatal: %s; exiting without committing the current batches",
                         cm_strerror(rc));
                return rc;
            } else {
                part_t *p = &c->parts[m->partition];
                if (p->assigned &&
                    ((int64_t)p->batch.messages >= c->cfg.batch_max_messages ||
                     (int64_t)p->batch.samples >= c->cfg.batch_max_samples))
                    flush_part(c, m->partition, 1);
            }
            rd_kafka_message_destroy(m);
        }
        rd_kafka_poll(c->dlq, 0);
        int64_t now = mono_ms();
        for (int32_t i = 0; i < c->nparts; i++) {
            part_t *p = &c->parts[i];
            if (p->assigned && p->resume_ms && now >= p->resume_ms)
                backoff_end(c, i);
            if (p->assigned && p->batch.next_offset >= 0 &&
                now - p->batch.first_msg_ms >= c->cfg.batch_interval_ms)
                flush_part(c, i, 1);
        }
        if (now - last_gauge >= 1000) {
            update_gauges(c);
            last_gauge = now;
        }
        if (now - last_group >= 5000) {
            group_check(c, now);
            last_group = now;
        }
        if (c->cfg.retention_interval_ms > 0 &&
            (now - last_retention >= c->cfg.retention_interval_ms ||
             (first_retention && now - last_retention >= 2000))) {
            run_retention(c);
            last_retention = now;
            first_retention = 0;
        }
    }
    for (int32_t i = 0; i < c->nparts; i++)
        if (c->parts[i].assigned)
            flush_part(c, i, 0);
    CM_INFO("leaving the consumer group");
    rd_kafka_consumer_close(c->rk); /* revokes: flushes and closes each partition */
    rd_kafka_flush(c->dlq, 10000);
    return c->fatal;
}

void agg_consumer_free(agg_consumer_t *c) {
    if (!c)
        return;
    for (int32_t i = 0; i < c->nparts; i++) {
        agg_store_close(c->parts[i].store);
        agg_intern_free(&c->parts[i].intern);
        agg_batch_free(&c->parts[i].batch);
    }
    free(c->parts);
    agg_store_close(c->pg_check);
    if (c->rk)
        rd_kafka_destroy(c->rk);
    if (c->dlq)
        rd_kafka_destroy(c->dlq);
    agg_rollup_free(&c->rollup);
    agg_dims_free(&c->dims);
    free(c);
}
