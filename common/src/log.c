/* Levelled logging: formats into a stack buffer and emits it with a single write(2), so lines
 * from concurrent threads never interleave. No allocation: the UTC time is computed here, not
 * with gmtime_r, whose first call in a process loads the time zone (glibc's __tzfile_read,
 * through malloc; the agent may not call a program's malloc from its thread, issue 13). */
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

/* UTC calendar date of a day count since 1970-01-01 (H. Hinnant's days_from_civil inverse). */
static void civil_from_days(long long z, int *y, int *m, int *d) {
    z += 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

void cm_log(cm_log_level_t level, const char *fmt, ...) {
    if ((int)level < g_level)
        return;
    char buf[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long secs = (long long)ts.tv_sec, days = secs / 86400, rem = secs % 86400;
    if (rem < 0)
        rem += 86400, days--;
    int y, mo, d;
    civil_from_days(days, &y, &mo, &d);
    int n = snprintf(buf, sizeof buf, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s comp=%s ",
                     y, mo, d, (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60),
                     ts.tv_nsec / 1000000, level_names[level], g_component);
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
