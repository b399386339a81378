/* API token check: Bearer header or the UI's cookie (see auth.h); the cookie the server sets
 * for the UI; the token read from a file. Threading: reads the current request only (http.h's
 * thread-local connection). */
#define _GNU_SOURCE
#include "auth.h"

#include "http.h"

#include "cm/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int agg_auth_equal(const char *token, const char *given) {
    size_t lt = strlen(token), lg = strlen(given);
    /* always compare lt bytes: the time does not depend on where the first difference is */
    unsigned char diff = (unsigned char)(lt != lg);
    for (size_t i = 0; i < lt; i++)
        diff |= (unsigned char)(token[i] ^ (i < lg ? given[i] : 0));
    return diff == 0;
}

/* Decodes %XX escapes of a cookie value (the UI stores encodeURIComponent(token)) into out. */
static void cookie_value(const char *cookies, char *out, size_t size) {
    out[0] = 0;
    size_t nl = strlen(AGG_AUTH_COOKIE);
    for (const char *c = cookies; c && *c;) {
        while (*c == ' ' || *c == ';')
            c++;
        if (!strncmp(c, AGG_AUTH_COOKIE, nl) && c[nl] == '=') {
            const char *v = c + nl + 1;
            size_t n = 0;
            while (*v && *v != ';' && n + 1 < size) {
                unsigned x;
                if (*v == '%' && sscanf(v + 1, "%2x", &x) == 1) {
                    out[n++] = (char)x;
                    v += 3;
                } else {
                    out[n++] = *v++;
                }
            }
            out[n] = 0;
            return;
        }
        c = strchr(c, ';');
    }
}

int agg_auth_ok(const char *token, const char **why) {
    if (!token || !*token)
        return 1;
    const char *h = agg_http_request_header("Authorization");
    const char *cookies = agg_http_request_header("Cookie");
    char cv[512];
    cookie_value(cookies, cv, sizeof cv);
    int have_header = h && !strncasecmp(h, "Bearer ", 7);
    if (have_header && agg_auth_equal(token, h + 7))
        return 1;
    if (cv[0] && agg_auth_equal(token, cv))
        return 1;
    if (why)
        *why = have_header || cv[0] || h ? "wrong" : "missing";
    return 0;
}

char *agg_auth_set_cookie(const char *token) {
    size_t n = strlen(token);
    char *enc = malloc(3 * n + 1), *out = NULL;
    if (!enc)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) { /* what encodeURIComponent leaves alone stays */
        unsigned char c = (unsigned char)token[i];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            strchr("-_.!~*'()", c))
            enc[k++] = (char)c;
        else
            k += (size_t)sprintf(enc + k, "%%%02X", c);
    }
    enc[k] = 0;
    const char *proto = agg_http_request_header("X-Forwarded-Proto");
    int secure = proto && !strncasecmp(proto, "https", 5);
    if (asprintf(&out, "Set-Cookie: " AGG_AUTH_COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict%s\n"
                 "Cache-Control: no-store\n", enc, secure ? "; Secure" : "") < 0)
        out = NULL;
    free(enc);
    return out;
}

int agg_auth_token_load(const char *path, char **out, char *err, size_t err_size) {
    *out = NULL;
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, err_size, "api-token-file '%s' cannot be read: %s", path, strerror(errno));
        return CM_ECONFIG;
    }
    char line[AGG_AUTH_MAX_TOKEN + 2];
    int rc = 0;
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    size_t n = strcspn(line, "\r\n");
    if (n > AGG_AUTH_MAX_TOKEN) {
        snprintf(err, err_size, "api-token-file '%s': the token is longer than %d bytes", path,
                 AGG_AUTH_MAX_TOKEN);
        rc = CM_ECONFIG;
    } else if (!n) {
        snprintf(err, err_size, "api-token-file '%s' is empty: put the token on its first line",
                 path);
        rc = CM_ECONFIG;
    } else if (!(*out = strndup(line, n))) {
        rc = CM_ENOMEM;
    }
    fclose(f);
    return rc;
}
