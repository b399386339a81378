/* Prints every CPU sample of chunk files, one line each: "weight stack_flags path:0xADDR;..."
 * (leaf first; ADDR is the ELF virtual address), for bench/cfi-vs-perf.py. Not a test. On
 * stderr, one summary line: the CPU samples' total weight against the process's CPU the
 * chunks report, and every drop counter (a CPU sample dropped loses its weight).
 *
 *   dump-stacks FILE.fpc... > ours.txt
 */
#include "cm/chunk.h"
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    unsigned long long n = 0, wsum = 0, pcpu = 0, acpu = 0, drops[64][CM_EV_COUNT + 1] = {{0}};
    for (int a = 1; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb"); if (!f) continue;
        fseek(f, 0, SEEK_END); long sz = ftell(f); fseek(f, 0, SEEK_SET);
        unsigned char *buf = malloc(sz); if (fread(buf, 1, sz, f) != (size_t)sz) return 1; fclose(f);
        cm_chunk_t *c; char err[256];
        if (cm_chunk_decode(buf, sz, &c, err, sizeof err) != 0) { fprintf(stderr, "%s: %s\n", argv[a], err); continue; }
        const cm_dict_t *d = &c->dict; const cm_samples_t *s = &c->samples[CM_EV_CPU];
        pcpu += c->header.process_cpu_ns; acpu += c->header.agent_cpu_ns;
        for (uint32_t i = 0; i < c->header.n_drops; i++)
            if (c->header.drops[i].reason < 64 && c->header.drops[i].type <= CM_EV_COUNT)
                drops[c->header.drops[i].reason][c->header.drops[i].type] += c->header.drops[i].count;
        for (uint32_t r = 0; r < s->n; r++) {
            uint32_t st = s->stack[r];
            n++; wsum += s->weight[r];
            printf("%llu %u ", (unsigned long long)s->weight[r], d->stack_flags ? d->stack_flags[st] : 0);
            for (uint32_t k = d->stack_off[st + 1]; k-- > d->stack_off[st];) {
                uint32_t loc = d->stack_frames[k], m = d->location_mapping[loc];
                const char *p = m && m < d->n_mappings ? d->strings[d->mappings[m].filename].ptr : "?";
                printf("%s:0x%llx%s", p, (unsigned long long)d->location_address[loc], k > d->stack_off[st] ? ";" : "");
            }
            printf("\n");
        }
        cm_chunk_free(c); free(buf);
    }
    fprintf(stderr, "ours: %llu CPU samples weighing %.3f s; chunks' process CPU %.3f s (agent %.3f s); drops:",
            n, wsum / 1e9, pcpu / 1e9, acpu / 1e9);
    for (int r = 0; r < 64; r++)
        for (int t = 0; t <= CM_EV_COUNT; t++)
            if (drops[r][t]) fprintf(stderr, " reason %d type %d: %llu", r, t, drops[r][t]);
    fprintf(stderr, "\n");
    return 0;
}
