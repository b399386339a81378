/* The API token check shared by the query API (api.c) and the web UI (ui.c): a request is
 * authorized by "Authorization: Bearer TOKEN" or, for the browser, by the cookie
 * "fleetprof_token=TOKEN" that the server sets (HttpOnly; SameSite=Strict; Secure behind an
 * https proxy) when the UI's login page sends the token in the header (GET /login): page
 * scripts never see it. Compared in constant time in the token's content.
 *
 * Threading: call from an HTTP handler (it reads the request being handled, see http.h).
 */
#ifndef AGG_AUTH_H
#define AGG_AUTH_H

#include <stddef.h>

#define AGG_AUTH_COOKIE "fleetprof_token"
#define AGG_AUTH_MAX_TOKEN 500 /* bytes; longer ones could not come back in the cookie */

/* 1 when token is NULL/"" or the request carries it (header or cookie); else 0, and *why (when
 * not NULL) says what was wrong: "missing" (no credential at all) or "wrong". */
int agg_auth_ok(const char *token, const char **why);

/* Constant-time comparison of a given credential with the token (lengths may differ). */
int agg_auth_equal(const char *token, const char *given);

/* The reply header lines that set the UI's cookie to token (URL-encoded): HttpOnly,
 * SameSite=Strict, Path=/, Secure when the request came through an https proxy
 * (X-Forwarded-Proto), and Cache-Control: no-store. malloc'ed; NULL when out of memory. */
char *agg_auth_set_cookie(const char *token);

/* Reads the token from the first line of path into *out (malloc'ed). Returns 0, or
 * CM_ECONFIG with err saying what is wrong (unreadable, empty, too long). */
int agg_auth_token_load(const char *path, char **out, char *err, size_t err_size);

#endif
