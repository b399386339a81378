/* HTTP client of the CLI's query commands (libcurl): GET a path of the aggregator's query API
 * with the optional bearer token, and keep the whole response in memory.
 * Threading: one request at a time per process (libcurl's global init happens once). */
#ifndef CLI_CLIENT_H
#define CLI_CLIENT_H

#include <stddef.h>

typedef struct {
    long status;     /* HTTP status; 0 when no response */
    char *body;      /* NUL-terminated, malloc'ed */
    size_t len;
    char err[512];   /* why no response came (names the URL) */
} cli_resp_t;

/* GETs server + path ("/api/v1/..."; the caller escapes the query). Returns 0 when a response
 * arrived (any status), -1 when the server could not be reached (err says why). */
int cli_http_get(const char *server, const char *token, const char *path, cli_resp_t *r);
/* The same as a POST with an empty body (the parameters in path's query string). */
int cli_http_post(const char *server, const char *token, const char *path, cli_resp_t *r);
void cli_resp_free(cli_resp_t *r);

/* URL-escapes s (malloc'ed result, NULL when out of memory). */
char *cli_url_escape(const char *s);

#endif
