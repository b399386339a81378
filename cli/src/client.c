/* libcurl GET (and POST) for the query commands (see client.h). Threading: single-threaded use. */
#include "client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg) {
    cli_resp_t *r = arg;
    size_t n = size * nmemb;
    char *nb = realloc(r->body, r->len + n + 1);
    if (!nb)
        return 0;
    memcpy(nb + r->len, p, n);
    r->body = nb;
    r->len += n;
    nb[r->len] = 0;
    return n;
}

/* One request: method "GET" or "POST" (an empty body). */
static int request(const char *method, const char *server, const char *token, const char *path,
                   cli_resp_t *r) {
    static int inited;
    memset(r, 0, sizeof *r);
    if (!inited) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        inited = 1;
    }
    size_t sl = strlen(server);
    while (sl && server[sl - 1] == '/')
        sl--;
    char *url = malloc(sl + strlen(path) + 1);
    CURL *c = curl_easy_init();
    if (!url || !c) {
        snprintf(r->err, sizeof r->err, "out of memory");
        free(url);
        curl_easy_cleanup(c);
        return -1;
    }
    memcpy(url, server, sl);
    strcpy(url + sl, path);
    struct curl_slist *hdr = NULL;
    char auth[1024];
    if (token && *token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hdr = curl_slist_append(hdr, auth);
    }
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (!strcmp(method, "POST"))
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    int ret = 0;
    if (rc != CURLE_OK) {
        snprintf(r->err, sizeof r->err, "cannot reach the aggregator at %.*s: %s (start it, or "
                 "set --server / FLEETPROF_SERVER)", (int)sl, server,
                 cerr[0] ? cerr : curl_easy_strerror(rc));
        ret = -1;
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        if (!r->body)
            r->body = calloc(1, 1);
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    free(url);
    return ret;
}

int cli_http_get(const char *server, const char *token, const char *path, cli_resp_t *r) {
    return request("GET", server, token, path, r);
}

int cli_http_post(const char *server, const char *token, const char *path, cli_resp_t *r) {
    return request("POST", server, token, path, r);
}

void cli_resp_free(cli_resp_t *r) {
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

char *cli_url_escape(const char *s) {
    char *e = curl_easy_escape(NULL, s, 0);
    char *out = e ? strdup(e) : NULL;
    curl_free(e);
    return out;
}
