/* Levelled logging: formats into a stack buffer and emits it with a single write(2), so lines
 * from concurrent threads never interleave. No allocation. */
#include "cm/log.h"
#include "cm/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *g_component = "fleetprof";
static volatile int g_level = CM_LOG_INFO;

static const char *level_names[] = {"debug", "info", "warn", "error", "off"};

void cm_log_init(const char *component, cm_log_level_t level) {
    if (component)
        g_component = component;
    g_level = level;
}

void cm_log_set_level(cm_log_level_t level) { g_level = level; }
cm_log_level_t cm_log_get_level(void) { return (cm_log_level_t)g_level; }

int cm_log_parse_level(const char *s, cm_log_level_t *out) {
    for (int i = 0; i <= CM_LOG_OFF; i++) {
        if (s && strcasecmp(s, level_names[i]) == 0) {
            *out = (cm_log_level_t)i;
            return 0;
        }
    }
    return CM_EINVAL;
}

void cm_log(cm_log_level_t level, const char *fmt, ...) {
    if ((int)level < g_level)
        return;
    char buf[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(buf, sizeof buf, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s comp=%s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], g_component);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}

void cm_log_from_handler(const char *msg) {
    ssize_t w = write(STDERR_FILENO, msg, strlen(msg)); /* strlen is async-signal-safe */
    w = write(STDERR_FILENO, "\n", 1);
    (void)w;
}
