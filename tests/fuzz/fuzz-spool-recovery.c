/* libFuzzer target: the collector's spool recovery and reader on arbitrary segment files (a
 * spool survives crashes, disk errors and other processes: its files are input from outside
 * the process). The input is one segment file: with the first byte even, a valid segment
 * header is written in front of the rest (so the fuzzer works on records); odd, the rest is
 * the whole file. Bit 1 of the first byte adds a commit file pointing into the segment at the
 * offset in the next two bytes. The spool is opened (recovery scan), every record read, more
 * appended and read back, and closed. Must never crash, hang or allocate without bound; every
 * record read must lie inside the file. */
#include "internal.h"

#include "cm/log.h"
#include "cm/wire.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];
static uv_loop_t loop;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    snprintf(dir, sizeof dir, "/tmp/fuzz-spool-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    uv_loop_init(&loop);
    cm_log_set_level(CM_LOG_OFF); /* quiet: every corrupt record is logged */
    return 0;
}

static void clean(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    clean();
    char path[512];
    snprintf(path, sizeof path, "%s/0000000000000001.seg", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (!(data[0] & 1)) {
        uint8_t hdr[16];
        memcpy(hdr, "FPSPOOL1", 8);
        uint64_t id = 1;
        memcpy(hdr + 8, &id, 8);
        fwrite(hdr, 1, 16, f);
    }
    size_t skip = (data[0] & 2) && size >= 3 ? 3 : 1;
    fwrite(data + skip, 1, size - skip, f);
    fclose(f);
    if (skip == 3) {
        snprintf(path, sizeof path, "%s/commit", dir);
        f = fopen(path, "w");
        fprintf(f, "0000000000000001 %u\n", (unsigned)(data[1] | data[2] << 8));
        fclose(f);
    }
    col_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.spool_dir = dir;
    cfg.spool_max = 1 << 20;
    cfg.segment_size = 64 << 10;
    cfg.fsync_mode = COL_FSYNC_NONE;
    cfg.fsync_interval = 1000000000;
    cfg.max_msg = 256 << 10;
    char err[256];
    col_spool_t *s = NULL;
    if (col_spool_open(&loop, &cfg, &s, err, sizeof err) != 0)
        return 0;
    col_record_t r;
    int rc, n = 0;
    uint64_t file = size + 16;
    while ((rc = col_spool_read(s, &r)) == 1) {
        if (r.frame_len > (uint64_t)cfg.max_msg || r.next_offset > file + (1 << 20))
            abort();
        free(r.frame);
        if (++n > 100000)
            abort(); /* more records than the file can hold: a loop */
    }
    /* the spool goes on working after whatever it found */
    col_hdrs_t h = {0};
    uint8_t frame[64] = {1, 2, 3};
    if (col_spool_append(s, 0, "svc", &h, 1, frame, sizeof frame) == 0) {
        int found = 0;
        while ((rc = col_spool_read(s, &r)) == 1) {
            found += r.frame_len == sizeof frame && !memcmp(r.frame, frame, sizeof frame);
            free(r.frame);
        }
        if (!found)
            abort(); /* an appended record must be readable */
    }
    col_spool_close(s);
    uv_run(&loop, UV_RUN_NOWAIT);
    return 0;
}
