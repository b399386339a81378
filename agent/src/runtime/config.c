/* Agent configuration from the environment.
 *
 * Runs once in the constructor (app context, before any agent thread exists). Every invalid
 * value prints exactly one stderr line naming the variable, the value and the default used,
 * whatever the log level: a misconfiguration must be visible, everything else stays silent.
 * The readers here (ag_env_value, ag_env_double, ag_env_bool, ag_env_invalid) are the only
 * ones: hooks.c's constructor reads its knobs with them too, so every knob is parsed the same
 * way (blanks around a value ignored) and a bad value is reported once even when both read it.
 *
 * Secure-execution mode: in a setuid/setgid program, one with file capabilities,
 * or one an LSM marks (the kernel's AT_SECURE), the environment belongs to a less privileged
 * caller. Every variable is then read with secure_getenv's semantics (as unset): no
 * FLEETPROF_LIBDW (dlopened with the program's privileges), no FLEETPROF_OUTPUT (files
 * written with them), no FLEETPROF_DEBUG_DIRS, the default collector socket only, and every
 * other knob at its default. One stderr line says so when any such variable was set (a
 * setuid program started without them, the common case under /etc/ld.so.preload, stays
 * silent).
 */
#include "config.h"

#include "cm/config.h"
#include "cm/log.h"
#include "cm/wire.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <unistd.h>

/* Variables already reported: one line per bad value, whichever constructor reads it first
 * (hooks.c's runs before agent.c's, and both look at FLEETPROF_ENABLED and _WALL_HZ).
 * Constructors only (single-threaded). */
static const char *g_reported[64];
static unsigned g_n_reported;

void ag_env_invalid(const char *var, const char *val, const char *why, const char *dflt) {
    for (unsigned i = 0; i < g_n_reported; i++)
        if (!strcmp(g_reported[i], var))
            return;
    if (g_n_reported < sizeof g_reported / sizeof g_reported[0])
        g_reported[g_n_reported++] = var;
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "fleetprof: invalid %s='%.128s' (%s); using the default %s\n", var, val, why,
                     dflt);
    if (n > 0) {
        ssize_t w = write(STDERR_FILENO, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
        (void)w;
    }
}
#define invalid ag_env_invalid

extern char **environ;

/* Whether a variable is one of ours (the agent's knobs and the OpenTelemetry names it reads). */
static int our_var(const char *e) {
    return !strncmp(e, "FLEETPROF_", 10) || !strncmp(e, "OTEL_SERVICE_NAME=", 18) ||
           !strncmp(e, "OTEL_RESOURCE_ATTRIBUTES=", 25);
}

/* 1 in secure-execution mode (AT_SECURE). The first call (a constructor: single-threaded)
 * decides and prints the one line naming the variables ignored, if any. */
int ag_env_secure(void) {
    static int secure = -1;
    if (secure >= 0)
        return secure;
    secure = getauxval(AT_SECURE) != 0;
    if (!secure)
        return 0;
    char names[256] = "";
    size_t len = 0;
    int n = 0;
    for (char **e = environ; e && *e; e++) {
        if (!our_var(*e))
            continue;
        size_t nl = strcspn(*e, "=");
        if (n++ < 8 && len + nl + 2 < sizeof names) {
            memcpy(names + len, *e, nl);
            len += nl;
            names[len++] = ' ';
            names[len] = '\0';
        }
    }
    if (!n)
        return 1;
    if (len)
        names[len - 1] = '\0';
    char buf[512];
    int w = snprintf(buf, sizeof buf,
                     "fleetprof: secure-execution mode (setuid, setgid or file capabilities): "
                     "%d variable(s) ignored (%s%s); no FLEETPROF_LIBDW, FLEETPROF_OUTPUT or "
                     "FLEETPROF_DEBUG_DIRS, chunks go to the default collector socket %s only\n",
                     n, names, n > 8 ? " ..." : "", CM_DEFAULT_SOCKET);
    if (w > 0) {
        ssize_t r = write(STDERR_FILENO, buf, (size_t)w < sizeof buf ? (size_t)w : sizeof buf - 1);
        (void)r;
    }
    return 1;
}

const char *ag_getenv(const char *var) { return ag_env_secure() ? NULL : getenv(var); }

/* The one way every agent knob is read: leading and trailing blanks (space, tab, newline)
 * are ignored, for numbers, durations, switches and words alike. Returns 1 with the trimmed
 * value in buf, 0 when unset or blank (or longer than buf: reported, default kept). */
int ag_env_value(const char *var, char *buf, size_t size) {
    const char *v = ag_getenv(var);
    if (!v)
        return 0;
    while (*v == ' ' || *v == '\t' || *v == '\n')
        v++;
    size_t len = strlen(v);
    while (len && (v[len - 1] == ' ' || v[len - 1] == '\t' || v[len - 1] == '\n'))
        len--;
    if (!len)
        return 0;
    if (len >= size) {
        invalid(var, v, "too long", "");
        return 0;
    }
    memcpy(buf, v, len);
    buf[len] = '\0';
    return 1;
}

int ag_env_double(const char *var, double lo, double hi, const char *dflt, double *out) {
    char v[128];
    if (!ag_env_value(var, v, sizeof v))
        return 0;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end) {
        invalid(var, v, "not a number", dflt);
        return 0;
    }
    if (!(d >= lo && d <= hi)) {
        char why[96];
        snprintf(why, sizeof why, "must be between %g and %g", lo, hi);
        invalid(var, v, why, dflt);
        return 0;
    }
    *out = d;
    return 1;
}

int ag_env_bool(const char *var, int dflt) {
    char v[16];
    if (!ag_env_value(var, v, sizeof v))
        return dflt;
    if (!strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "no"))
        return 0;
    if (!strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "yes"))
        return 1;
    invalid(var, v, "not one of 1/on/true/yes or 0/off/false/no", dflt ? "1 (on)" : "0 (off)");
    return dflt;
}

#define env_double ag_env_double

/* Parses a duration in [lo_ns, hi_ns] with cm_parse_duration: "5s", "500ms", "2m", or a bare
 * number of seconds ("10", "0.5"). Same contract as env_double. */
#define env_duration ag_env_duration
int ag_env_duration(const char *var, uint64_t lo_ns, uint64_t hi_ns, const char *dflt,
                    uint64_t *out) {
    char v[128];
    if (!ag_env_value(var, v, sizeof v))
        return 0;
    int64_t ns;
    if (cm_parse_duration(v, &ns) != 0) {
        invalid(var, v, "not a duration like 10, 10s, 500ms or 5m", dflt);
        return 0;
    }
    if (ns < 0 || (uint64_t)ns < lo_ns || (uint64_t)ns > hi_ns) {
        char why[96];
        snprintf(why, sizeof why, "must be between %gs and %gs", (double)lo_ns / 1e9,
                 (double)hi_ns / 1e9);
        invalid(var, v, why, dflt);
        return 0;
    }
    *out = (uint64_t)ns;
    return 1;
}

static void env_string(const char *var, char *dst, size_t size) {
    char v[4096];
    if (!ag_env_value(var, v, sizeof v))
        return;
    if (strlen(v) >= size) {
        char why[64];
        snprintf(why, sizeof why, "longer than %zu bytes", size - 1);
        invalid(var, v, why, dst[0] ? dst : "(none)");
        return;
    }
    memcpy(dst, v, strlen(v) + 1);
}

/* Finds key=value in an OTEL_RESOURCE_ATTRIBUTES list ("a=b,service.version=1.2"). */
static int otel_attr(const char *list, const char *key, char *dst, size_t size) {
    size_t kl = strlen(key);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len > kl && !strncmp(p, key, kl) && p[kl] == '=') {
            size_t vl = len - kl - 1;
            if (vl == 0 || vl >= size)
                return 0;
            memcpy(dst, p + kl + 1, vl);
            dst[vl] = '\0';
            return 1;
        }
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* The process's comm (what /proc/self/comm says) without opening a file: PR_GET_NAME of the
 * calling thread, which is the main thread in the constructor (dlopen from another thread:
 * that thread's name). */
static void program_name(char *dst, size_t size) {
    char buf[17] = "";
    if (prctl(PR_GET_NAME, buf, 0, 0, 0) != 0)
        buf[0] = '\0';
    snprintf(dst, size, "%s", buf[0] ? buf : "unknown");
}

void ag_config_load(ag_config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->enabled = 1;
    cfg->interval_ns = 10ull * 1000000000ull;
    cfg->cpu_rate = 100;
    cfg->cpu_period_ns = 10000000; /* 100 Hz per thread until the controller says otherwise */
    /* 100 ms: 20 Hz (async-profiler's 50 ms, where wall time is the profile asked for) cost
     * redis-server 0.20-0.24% of its CPU per request on top of CPU sampling, the background
     * thread's wakeups most of it (bench/RESULTS.md, issue 14 session 14) */
    cfg->wall_hz = AG_WALL_HZ;
    cfg->wall_threads = 8;
    cfg->cpu_budget = 0.01;
    cfg->controller = 1;
    cfg->fork_follow = 1;
    cfg->log_level = CM_LOG_WARN;
    snprintf(cfg->collector, sizeof cfg->collector, "%s", CM_DEFAULT_SOCKET);

    char v[64];
    if (ag_env_value("FLEETPROF_LOG_LEVEL", v, sizeof v)) {
        cm_log_level_t lvl;
        if (cm_log_parse_level(v, &lvl) == 0)
            cfg->log_level = lvl;
        else
            invalid("FLEETPROF_LOG_LEVEL", v, "not one of debug, info, warn, error, off", "warn");
    }
    cfg->enabled = ag_env_bool("FLEETPROF_ENABLED", 1);

    /* Service and version: FLEETPROF_*, then OpenTelemetry's variables, then the program. */
    const char *otel = ag_getenv("OTEL_RESOURCE_ATTRIBUTES");
    env_string("OTEL_SERVICE_NAME", cfg->service, sizeof cfg->service);
    if (!cfg->service[0] && otel)
        otel_attr(otel, "service.name", cfg->service, sizeof cfg->service);
    env_string("FLEETPROF_SERVICE", cfg->service, sizeof cfg->service);
    if (!cfg->service[0])
        program_name(cfg->service, sizeof cfg->service);
    if (otel)
        otel_attr(otel, "service.version", cfg->version, sizeof cfg->version);
    env_string("FLEETPROF_VERSION", cfg->version, sizeof cfg->version);
    if (!cfg->version[0])
        snprintf(cfg->version, sizeof cfg->version, "unknown");
    /* File names are built from the service: keep it to a safe alphabet. */
    for (char *p = cfg->service; *p; p++)
        if (*p == '/' || *p < ' ')
            *p = '_';

    env_string("FLEETPROF_COLLECTOR", cfg->collector, sizeof cfg->collector);
    env_string("FLEETPROF_OUTPUT", cfg->output, sizeof cfg->output);
    /* Chunk files hold stacks, paths and peers: readable by their owner only unless asked. */
    cfg->output_mode = 0600;
    if (ag_env_value("FLEETPROF_OUTPUT_MODE", v, sizeof v)) {
        char *end;
        unsigned long m = strtoul(v, &end, 8);
        if (*end || end == v || m > 0666 || !(m & 0600))
            invalid("FLEETPROF_OUTPUT_MODE", v,
                    "not octal permission bits between 0600 and 0666 (e.g. 0640)", "0600");
        else
            cfg->output_mode = (unsigned)m;
    }

    double d;
    env_duration("FLEETPROF_INTERVAL", 100000000ull, 3600000000000ull, "10s",
                 &cfg->interval_ns);
    if (env_double("FLEETPROF_CPU_RATE", 0, 10000, "100 (samples/s)", &d))
        cfg->cpu_rate = d;
    if (env_double("FLEETPROF_CPU_HZ", 1, 1000, "100 (Hz per thread)", &d))
        cfg->cpu_period_ns = (uint64_t)(1e9 / d);
    if (env_double("FLEETPROF_WALL_HZ", 0, 1000, AG_WALL_HZ_HELP, &d))
        cfg->wall_hz = d;
    if (env_double("FLEETPROF_WALL_THREADS", 1, 1024, "8 (threads per tick)", &d))
        cfg->wall_threads = (uint32_t)d;
    if (env_double("FLEETPROF_CPU_BUDGET", 0.01, 100, "1 (percent)", &d))
        cfg->cpu_budget = d / 100.0;
    if (ag_env_value("FLEETPROF_FORK", v, sizeof v)) {
        if (!strcmp(v, "stop"))
            cfg->fork_follow = 0;
        else if (strcmp(v, "follow"))
            invalid("FLEETPROF_FORK", v, "not 'follow' or 'stop'", "follow");
    }
    cfg->controller = ag_env_bool("FLEETPROF_CONTROLLER", 1);
    ag_incid_config_load(&cfg->incid); /* flight recorder and triggers (recorder/triggers.c) */
}
