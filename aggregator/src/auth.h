/* The API token check shared by the query API (api.c) and the web UI (ui.c): a request is
 * authorized by "Authorization: Bearer TOKEN" or, for the browser, by the cookie
 * "fleetprof_token=TOKEN" that the UI's login page sets (SameSite=Strict). Compared in constant
 * time in the token's content.
 *
 * Threading: call from an HTTP handler (it reads the request being handled, see http.h).
 */
#ifndef AGG_AUTH_H
#define AGG_AUTH_H

#define AGG_AUTH_COOKIE "fleetprof_token"

/* 1 when token is NULL/"" or the request carries it (header or cookie); else 0, and *why (when
 * not NULL) says what was wrong: "missing" (no credential at all) or "wrong". */
int agg_auth_ok(const char *token, const char **why);

/* Constant-time comparison of a given credential with the token (lengths may differ). */
int agg_auth_equal(const char *token, const char *given);

#endif
