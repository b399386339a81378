/* Incident webhooks (see webhook.h). */
#include "webhook.h"
#include "metrics.h"

#include "cm/log.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WH_ATTEMPTS 3
#define WH_MAX_ROUTES 64

enum { WH_SENT, WH_RETRIED, WH_FAILED, WH_DROPPED, WH_N };
static const char *const wh_names[WH_N] = {"sent", "retried", "failed", "dropped"};

typedef struct post {
    char *url, *body;
    int32_t partition; /* staged: its batch's partition */
    struct post *next;
} post_t;

struct agg_webhook {
    char *service[WH_MAX_ROUTES], *url[WH_MAX_ROUTES];
    size_t n;
    int64_t timeout_ms;
    post_t *staged;            /* consumer thread only */
    pthread_mutex_t mu;        /* the queue, stop, counters */
    pthread_cond_t cv;
    post_t *head, *tail;
    size_t queued;
    int stop;
    uint64_t count[WH_N];
    pthread_t thread;
};

static void post_free(post_t *p) {
    free(p->url);
    free(p->body);
    free(p);
}

static void count(agg_webhook_t *w, int what) {
    pthread_mutex_lock(&w->mu);
    w->count[what]++;
    pthread_mutex_unlock(&w->mu);
}

/* One POST; 0 when the receiver answered 2xx. */
static int post_once(const agg_webhook_t *w, const post_t *p) {
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, p->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, p->body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)w->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    long status = 0;
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    return rc == CURLE_OK && status >= 200 && status < 300 ? 0 : -1;
}

static int stopping(agg_webhook_t *w) {
    pthread_mutex_lock(&w->mu);
    int s = w->stop;
    pthread_mutex_unlock(&w->mu);
    return s;
}

static void *worker(void *arg) {
    agg_webhook_t *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        post_t *p = w->head;
        int stop = w->stop;
        if (p) {
            w->head = p->next;
            w->tail = w->head ? w->tail : NULL;
            w->queued--;
        }
        if (stop && p)
            w->count[WH_DROPPED]++; /* shutting down: what is still queued is not posted */
        pthread_mutex_unlock(&w->mu);
        if (stop && p) {
            post_free(p);
            continue;
        }
        if (!p)
            return NULL; /* stopping, queue empty */
        int ok = 0;
        for (int i = 0; i < WH_ATTEMPTS && !ok && (!i || !stopping(w)); i++) {
            if (i) {
                count(w, WH_RETRIED);
                struct timespec ts = {i, 0}; /* 1 s, then 2 s */
                nanosleep(&ts, NULL);
            }
            ok = post_once(w, p) == 0;
        }
        count(w, ok ? WH_SENT : WH_FAILED);
        if (!ok)
            CM_WARN("incident webhook %s failed %d times; the incident is not posted", p->url,
                    WH_ATTEMPTS);
        post_free(p);
    }
}

/* Parses "SERVICE=URL,..." into w. Returns 0 or -1 with err set. */
static int parse(agg_webhook_t *w, const char *spec, char *err, size_t err_size) {
    char *copy = strdup(spec), *save = NULL;
    int rc = copy ? 0 : -1;
    for (char *e = copy ? strtok_r(copy, ", ", &save) : NULL; e && !rc;
         e = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(e, '=');
        if (!eq || eq == e || (strncmp(eq + 1, "http://", 7) && strncmp(eq + 1, "https://", 8)) ||
            w->n == WH_MAX_ROUTES) {
            snprintf(err, err_size, "webhooks entry '%s' is not SERVICE=http(s)://HOST/PATH "
                     "(at most %d entries; SERVICE * for every service)", e, WH_MAX_ROUTES);
            rc = -1;
            break;
        }
        *eq = 0;
        w->service[w->n] = strdup(e);
        w->url[w->n++] = strdup(eq + 1);
    }
    free(copy);
    return rc;
}

int agg_webhook_new(const char *spec, int64_t timeout_ms, agg_webhook_t **out, char *err,
                    size_t err_size) {
    *out = NULL;
    if (!spec || !*spec)
        return 0;
    agg_webhook_t *w = calloc(1, sizeof *w);
    if (!w)
        return -1;
    w->timeout_ms = timeout_ms;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (parse(w, spec, err, err_size)) {
        agg_webhook_free(w);
        return -1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (pthread_create(&w->thread, NULL, worker, w)) {
        snprintf(err, err_size, "cannot start the webhook thread");
        w->n = 0;
        agg_webhook_free(w);
        return -1;
    }
    *out = w;
    return 0;
}

void agg_webhook_free(agg_webhook_t *w) {
    if (!w)
        return;
    if (w->n) { /* the thread runs: it ends its post in progress, drops the rest (counted) */
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    for (post_t *p = w->staged, *n; p; p = n) {
        n = p->next;
        post_free(p);
    }
    for (size_t i = 0; i < w->n; i++) {
        free(w->service[i]);
        free(w->url[i]);
    }
    free(w);
}

/* The incident's row as the incidents API gives it (id, service, version, host, pid, trigger,
 * threshold, value, trigger_ns, parts). malloc'ed; NULL when out of memory. */
static char *incident_json(const cm_chunk_t *c) {
    const cm_incident_t *i = &c->incident;
    const cm_header_t *h = &c->header;
    char id[2 * CM_INCIDENT_ID_LEN + 1];
    for (size_t k = 0; k < CM_INCIDENT_ID_LEN; k++)
        snprintf(id + 2 * k, 3, "%02x", i->id[k]);
    json_t *o = json_pack("{s:s, s:s%, s:s%, s:s%, s:I, s:s%, s:f, s:f, s:I, s:I}", "id", id,
                          "service", h->service.ptr ? h->service.ptr : "",
                          (size_t)h->service.len, "version", h->version.ptr ? h->version.ptr : "",
                          (size_t)h->version.len, "host", h->host.ptr ? h->host.ptr : "",
                          (size_t)h->host.len, "pid", (json_int_t)h->pid, "trigger",
                          i->trigger.ptr ? i->trigger.ptr : "", (size_t)i->trigger.len,
                          "threshold", (double)i->threshold_milli / 1000, "value",
                          (double)i->value_milli / 1000, "trigger_ns",
                          (json_int_t)i->trigger_unix_ns, "parts", (json_int_t)i->parts);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

void agg_webhook_stage(agg_webhook_t *w, int32_t partition, const cm_chunk_t *c) {
    if (!w)
        return;
    const char *url = NULL;
    for (size_t i = 0; i < w->n && !url; i++)
        if (!strcmp(w->service[i], "*") ||
            (strlen(w->service[i]) == c->header.service.len &&
             !memcmp(w->service[i], c->header.service.ptr, c->header.service.len)))
            url = w->url[i];
    post_t *p = url ? calloc(1, sizeof *p) : NULL;
    if (!p)
        return;
    p->partition = partition;
    p->url = strdup(url);
    p->body = incident_json(c);
    if (!p->url || !p->body) {
        count(w, WH_DROPPED);
        post_free(p);
        return;
    }
    p->next = w->staged;
    w->staged = p;
}

/* Takes the staged posts of partition out of the list; queues them (commit) or frees them. */
static void release(agg_webhook_t *w, int32_t partition, int queue) {
    if (!w)
        return;
    for (post_t **pp = &w->staged, *p; (p = *pp);) {
        if (p->partition != partition) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        p->next = NULL;
        pthread_mutex_lock(&w->mu);
        int room = queue && w->queued < AGG_WEBHOOK_QUEUE;
        if (room) {
            if (w->tail)
                w->tail->next = p;
            else
                w->head = p;
            w->tail = p;
            w->queued++;
            pthread_cond_signal(&w->cv);
        } else if (queue) {
            w->count[WH_DROPPED]++;
        }
        pthread_mutex_unlock(&w->mu);
        if (!room)
            post_free(p);
    }
}

void agg_webhook_commit(agg_webhook_t *w, int32_t partition) { release(w, partition, 1); }
void agg_webhook_discard(agg_webhook_t *w, int32_t partition) { release(w, partition, 0); }

char *agg_webhook_metrics(agg_webhook_t *w) {
    if (!w)
        return NULL;
    uint64_t v[WH_N];
    pthread_mutex_lock(&w->mu);
    memcpy(v, w->count, sizeof v);
    pthread_mutex_unlock(&w->mu);
    return agg_metrics_labelled("fleetprof_aggregator_webhook_total",
                                "incident webhook posts, by outcome", "outcome", wh_names, v,
                                WH_N);
}
