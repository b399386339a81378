/* The flight recorder's and the incident triggers' configuration (FLEETPROF_RECORDER*,
 * FLEETPROF_TRIGGER_*, FLEETPROF_SLOW_MS_BY_ENDPOINT, FLEETPROF_CAPTURE_MAX; agent/README.md, "Incidents"). Read once by the
 * constructor (config.c calls ag_incid_config_load); plain values after that. */
#ifndef AG_INCID_CFG_H
#define AG_INCID_CFG_H

#include <stdint.h>

#define AG_INCID_SLOW_BY_MAX 32 /* endpoints with a slow threshold of their own */
#define AG_INCID_NAME_MAX 128   /* bytes of a span name kept (spans.c: AG_SPAN_NAME_MAX) */
#define AG_INCID_NAMES 1024     /* span names interned at most (spans.c: AG_SPAN_NAMES) */

typedef struct {
    int on;                  /* FLEETPROF_RECORDER: 0 off (default), 1 on */
    uint64_t window_ns;      /* seconds of samples kept in memory (30 s) */
    uint64_t max_bytes;      /* encoded bytes kept at most (4 MiB) */
    uint64_t after_ns;       /* burst recorded after a trigger before the capture is sent (5 s) */
    double density;          /* FLEETPROF_RECORDER_DENSITY: samples x the stream's (4) */
    double budget;           /* FLEETPROF_RECORDER_BUDGET: its extra work's share of the
                              * process's CPU (0.0005) */
    double cpu_share;        /* cpu trigger: share of the cores (0.9; 0 off) ... */
    uint64_t cpu_for_ns;     /* ... held this long (10 s); only for a process without spans */
    uint64_t slow_ns;        /* a request at least this long (ended or still active) is slow */
    double slow_ratio;       /* overload trigger: slow share of the last second's requests ... */
    double overload_cpu;     /* ... while the process uses this share of its cores */
    uint64_t hang_ns;        /* hang trigger: a request active this long (10 s; 0 off) */
    uint32_t growing_ticks;  /* growing trigger: active requests rose at this many ticks in a
                              * row (FLEETPROF_TRIGGER_GROWING 2 s = 8 ticks; 0 off) ... */
    uint32_t growing_min;    /* ... to at least this many, and twice the count before (8) */
    uint32_t n_slow_by;      /* FLEETPROF_SLOW_MS_BY_ENDPOINT: entries */
    struct {
        char name[AG_INCID_NAME_MAX + 1]; /* an endpoint (span name), cut as spans cut it */
        uint64_t slow_ns;                 /* its slow threshold (instead of slow_ns) */
    } slow_by[AG_INCID_SLOW_BY_MAX];
    uint64_t cooldown_ns;    /* no capture within this time after the last one began (60 s) */
    uint32_t max_captures;   /* per process (10) */
    int capture_signal;      /* FLEETPROF_CAPTURE_SIGNAL: a capture on this signal (0: none) */
    double baseline_k;       /* alloc/lock/io trigger: k x the rate's own baseline (0: off) */
} ag_incid_cfg_t;

/* config.c (constructor): fills cfg from the environment; invalid values: one line each. */
void ag_incid_config_load(ag_incid_cfg_t *cfg);

#endif
