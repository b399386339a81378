/* Structured, levelled logging to stderr: one line per event, `ts=... level=... comp=... msg`.
 *
 * Thread-safe (one write(2) per line). NOT async-signal-safe: from a signal handler use
 * cm_log_from_handler(), which writes a preformatted constant string.
 * The agent keeps the level at CM_LOG_WARN (silent by default: it lives in someone else's
 * process); daemons default to CM_LOG_INFO.
 */
#ifndef CM_LOG_H
#define CM_LOG_H

#include <stddef.h>

typedef enum { CM_LOG_DEBUG = 0, CM_LOG_INFO, CM_LOG_WARN, CM_LOG_ERROR, CM_LOG_OFF } cm_log_level_t;

void cm_log_init(const char *component, cm_log_level_t level);
void cm_log_set_level(cm_log_level_t level);
cm_log_level_t cm_log_get_level(void);
/* Parses "debug", "info", "warn", "error", "off". Returns 0 or CM_EINVAL. */
int cm_log_parse_level(const char *s, cm_log_level_t *out);
void cm_log(cm_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Async-signal-safe: writes msg (a NUL-terminated constant) and a newline with write(2). */
void cm_log_from_handler(const char *msg);

#define CM_DEBUG(...) cm_log(CM_LOG_DEBUG, __VA_ARGS__)
#define CM_INFO(...) cm_log(CM_LOG_INFO, __VA_ARGS__)
#define CM_WARN(...) cm_log(CM_LOG_WARN, __VA_ARGS__)
#define CM_ERROR(...) cm_log(CM_LOG_ERROR, __VA_ARGS__)

#endif
