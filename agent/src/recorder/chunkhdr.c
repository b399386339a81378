/* A chunk header's identity, shared by the chunk cut (chunk.c) and the flight recorder's
 * segments (flightrec.c). Its own file: the recorder, linked into the in-process tests with
 * the wall sampler, must not pull the cut's dependencies (hooks, spans) in. bg thread. */
#include "chunk.h"
#include "agent.h"
#include "clock.h"

#include <string.h>
#include <sys/random.h>

void ag_chunk_header_ids(cm_header_t *h, uint64_t start, uint64_t end, uint64_t seq) {
    memset(h, 0, sizeof *h);
    h->service = (cm_str_t){ag.cfg.service, (uint32_t)strlen(ag.cfg.service)};
    h->version = (cm_str_t){ag.cfg.version, (uint32_t)strlen(ag.cfg.version)};
    h->host = (cm_str_t){ag.host, (uint32_t)strlen(ag.host)};
    h->agent_version =
        (cm_str_t){FLEETPROF_VERSION_STRING, (uint32_t)strlen(FLEETPROF_VERSION_STRING)};
    h->pid = (uint32_t)ag.pid;
    h->process_start_unix_ns = ag_process_start_ns();
    h->start_unix_ns = start;
    h->end_unix_ns = end;
    if (getrandom(h->chunk_id, sizeof h->chunk_id, GRND_NONBLOCK) != (ssize_t)sizeof h->chunk_id) {
        uint64_t x = end ^ ((uint64_t)ag.pid << 32) ^ seq;
        memcpy(h->chunk_id, &x, 8);
        x = x * 0x9e3779b97f4a7c15ull + ag_now_mono();
        memcpy(h->chunk_id + 8, &x, 8);
    }
    h->format_minor = CM_FORMAT_MINOR;
}
