/* Agent configuration from the environment (config.c). */
#ifndef AG_CONFIG_H
#define AG_CONFIG_H

#include "base.h"
#include "cm/chunk.h"
#include "incid_cfg.h"

/* FLEETPROF_WALL_HZ's default, read by config.c and by hooks.c (the wait hooks are on while
 * wall sampling is). 100 ms: see config.c. */
#define AG_WALL_HZ 10
#define AG_WALL_HZ_HELP "10 (ticks/s)"

typedef struct {
    int enabled;
    char service[CM_MAX_SERVICE_LEN + 1];
    char version[128];
    char collector[108];       /* sun_path size */
    char output[4096];         /* "" = no files */
    unsigned output_mode;      /* permission bits of chunk files (0600) */
    uint64_t interval_ns;      /* chunk interval */
    double cpu_rate;           /* target CPU samples per second, whole process; 0 = off */
    uint64_t cpu_period_ns;    /* initial/fixed CPU period per thread */
    double wall_hz;            /* wall ticker frequency; 0 = off (AG_WALL_HZ) */
    uint32_t wall_threads;     /* max threads signalled per wall tick */
    double cpu_budget;         /* fraction of process CPU the agent may use (0.01 = 1%) */
    int controller;            /* 0: fixed periods */
    int fork_follow;           /* 1: a fork child profiles itself; 0: it stops (FLEETPROF_FORK) */
    int log_level;
    ag_incid_cfg_t incid;      /* flight recorder and incident triggers (recorder/incid_cfg.h) */
} ag_config_t;

/* Reads the environment into cfg (defaults for anything unset). Invalid values print one
 * stderr line each (variable, value, default used). Never fails. app, constructor only. */
AG_HIDDEN void ag_config_load(ag_config_t *cfg);
/* config.c: the one reader of every agent knob (constructors only). */
AG_HIDDEN int ag_env_value(const char *var, char *buf, size_t size);
AG_HIDDEN int ag_env_double(const char *var, double lo, double hi, const char *dflt, double *out);
AG_HIDDEN int ag_env_bool(const char *var, int dflt);
AG_HIDDEN int ag_env_duration(const char *var, uint64_t lo_ns, uint64_t hi_ns, const char *dflt,
                              uint64_t *out);
AG_HIDDEN void ag_env_invalid(const char *var, const char *val, const char *why, const char *dflt);
/* Secure-execution mode (AT_SECURE; the first call prints the one line): 1 or 0. ag_getenv is
 * getenv with secure_getenv's semantics, the only way the agent reads a variable. */
AG_HIDDEN int ag_env_secure(void);
AG_HIDDEN const char *ag_getenv(const char *var);

#endif
