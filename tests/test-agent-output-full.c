/* Every lost chunk counted (issue 13) on a real full file system: FLEETPROF_OUTPUT is a 1 MiB
 * tmpfs (in a private mount namespace: `unshare -m`, root) filled up before the program
 * starts; after ~1 s the filler is removed. Chunks cut while it is full are not written; each
 * is counted as output_failed, and the counts (with those the lost chunks themselves carried)
 * reach the next chunk written. Exact: chunks written + output_failed == chunks cut (the
 * agent's debug log has one line per cut), every sequence number is either a file or counted,
 * and stderr has exactly one line about it.
 * A second run has the collector as a second sink: then a file not written is not a lost
 * chunk (no count); the socket side's accounting is test-agent's. */
#include "agent-common.h"

static void test_output_full(void) {
    char tmp[] = "/tmp/fp-outfull-XXXXXX", cmd[16384], prog[2048], so[2048];
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(prog, sizeof prog, "%s/tests/fp-work", bdir());
    snprintf(so, sizeof so, "%s/agent/libfleetprof.so", bdir());
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/out %s/copy && unshare -m --propagation private sh -c '"
             "mount -t tmpfs -o size=1m fp-outfull %s/out || exit 9; "
             "head -c 4M /dev/zero > %s/out/filler 2>/dev/null; "
             "FLEETPROF_OUTPUT=%s/out FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=0.1 "
             "FLEETPROF_LOG_LEVEL=debug LD_PRELOAD=%s %s cpuwall 2.5 >/dev/null 2>%s/log & "
             "sleep 1.2; rm -f %s/out/filler; wait $!; rc=$?; cp %s/out/*.fpc %s/copy/; exit $rc'",
             tmp, tmp, tmp, tmp, tmp, so, prog, tmp, tmp, tmp, tmp);
    int st = system(cmd);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d (9: cannot mount a tmpfs: the test "
           "needs root for unshare -m): %s", st, cmd);
    char dir[600], out[64];
    snprintf(dir, sizeof dir, "%s/copy", tmp);
    chunks_t *cs = load(dir);
    uint64_t lost = drops(cs, CM_DROP_OUTPUT_FAILED);
    snprintf(cmd, sizeof cmd, "grep -c 'comp=fleetprof-agent chunk [0-9]*: agent cpu' %s/log", tmp);
    FILE *f = popen(cmd, "r");
    CHECK(f && fgets(out, sizeof out, f));
    pclose(f);
    uint64_t cut = strtoull(out, NULL, 10);
    snprintf(cmd, sizeof cmd, "grep -c 'cannot write chunk files' %s/log", tmp);
    f = popen(cmd, "r");
    CHECK(f && fgets(out, sizeof out, f));
    pclose(f);
    int warned = atoi(out);
    printf("# %llu chunks cut, %d written, %llu counted output_failed, %d warning lines\n",
           (unsigned long long)cut, cs->n, (unsigned long long)lost, warned);
    CHECKF(lost >= 3 && cs->n >= 3, "%d written, %llu lost: the disk was not full, or never "
           "freed", cs->n, (unsigned long long)lost);
    CHECKF((uint64_t)cs->n + lost == cut, "%d written + %llu counted != %llu cut", cs->n,
           (unsigned long long)lost, (unsigned long long)cut);
    /* the sequence numbers: written ones are distinct and below cut, so the rest are the lost */
    uint64_t maxseq = 0;
    for (int i = 0; i < cs->n; i++)
        if (cs->c[i]->header.sequence > maxseq)
            maxseq = cs->c[i]->header.sequence;
    CHECKF(maxseq + 1 == cut, "last sequence %llu, %llu cut", (unsigned long long)maxseq,
           (unsigned long long)cut);
    CHECKF(warned == 1, "%d stderr lines about the chunk files", warned);
    free_chunks(cs);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
}

/* Output of a shell command as a number. */
static uint64_t sh_num(const char *cmd) {
    char out[64] = "";
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    if (!fgets(out, sizeof out, f))
        out[0] = '\0';
    pclose(f);
    return strtoull(out, NULL, 10);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The collector's spool on a full tmpfs for 3.5 s (it answers "retry", the agent's queue of 16
 * fills and drops its oldest; the collector is killed at the end: its spool is the record): the chunks in the spool segments (distinct sequence numbers: a resent
 * chunk may be there twice) plus the drops they carry equal the chunks the agent cut. */
static void test_spool_full(void) {
    char tmp[] = "/tmp/fp-spoolfull-XXXXXX", cmd[16384], prog[2048], so[2048], col[2048];
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(prog, sizeof prog, "%s/tests/fp-work", bdir());
    snprintf(so, sizeof so, "%s/agent/libfleetprof.so", bdir());
    snprintf(col, sizeof col, "%s/collector/fleetprof-collector", bdir());
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/spool %s/copy && unshare -m --propagation private sh -c '"
             "mount -t tmpfs -o size=1m fp-spoolfull %s/spool || exit 9; "
             "%s --socket %s/c.sock --spool-dir %s/spool --brokers 127.0.0.1:9 "
             "--http-listen off --spool-fsync none >%s/col.log 2>&1 & c=$!; "
             "for i in $(seq 50); do [ -S %s/c.sock ] && break; sleep 0.1; done; "
             "head -c 4M /dev/zero > %s/spool/filler 2>/dev/null; "
             "FLEETPROF_COLLECTOR=%s/c.sock FLEETPROF_INTERVAL=0.1 FLEETPROF_LOG_LEVEL=debug "
             "LD_PRELOAD=%s %s cpuwall 6 >/dev/null 2>%s/log & a=$!; "
             "sleep 3.5; rm -f %s/spool/filler; wait $a; rc=$?; sleep 0.5; kill -9 $c; wait $c; "
             "cp %s/spool/*.seg %s/copy/; exit $rc'",
             tmp, tmp, tmp, col, tmp, tmp, tmp, tmp, tmp, tmp, so, prog, tmp, tmp, tmp, tmp);
    int st = system(cmd);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, cmd);
    snprintf(cmd, sizeof cmd, "grep -c 'comp=fleetprof-agent chunk [0-9]*: agent cpu' %s/log", tmp);
    uint64_t cut = sh_num(cmd);
    /* every record of every segment: u32 magic, u32 body_len, u64 hash, u64 received,
     * u16 key_len, u16 hdr_len, u32 frame_len | key | headers | frame */
    static uint8_t seen[4096];
    memset(seen, 0, sizeof seen);
    uint64_t distinct = 0, records = 0, lost = 0;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/copy", tmp);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strstr(e->d_name, ".seg"))
            continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        static uint8_t buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        for (size_t off = 16; off + 32 <= n;) {
            CHECKF(le32(buf + off) == 0x52535046u, "%s: bad record at %zu", path, off);
            uint32_t body = le32(buf + off + 4), flen = le32(buf + off + 28);
            size_t klen = (size_t)buf[off + 24] | (size_t)buf[off + 25] << 8;
            size_t hlen = (size_t)buf[off + 26] | (size_t)buf[off + 27] << 8;
            CHECK(off + 32 + body <= n && klen + hlen + flen == body);
            cm_chunk_t *c = NULL;
            char err[256];
            int rc = cm_chunk_decode(buf + off + 32 + klen + hlen, flen, &c, err, sizeof err);
            CHECKF(rc == 0, "record at %zu: %s", off, err);
            records++;
            uint64_t seq = c->header.sequence;
            CHECK(seq < sizeof seen);
            if (!seen[seq]++) {
                distinct++;
                for (uint32_t k = 0; k < c->header.n_drops; k++)
                    if (c->header.drops[k].reason == CM_DROP_CHUNK_QUEUE_FULL ||
                        c->header.drops[k].reason == CM_DROP_OUTPUT_FAILED)
                        lost += c->header.drops[k].count;
            }
            cm_chunk_free(c);
            off += 32 + body;
        }
    }
    closedir(d);
    printf("# %llu chunks cut, %llu in the spool (%llu records), %llu counted lost\n",
           (unsigned long long)cut, (unsigned long long)distinct, (unsigned long long)records,
           (unsigned long long)lost);
    CHECKF(lost >= 3, "%llu lost: the spool was not full long enough", (unsigned long long)lost);
    CHECKF(distinct + lost == cut, "%llu spooled + %llu counted != %llu cut",
           (unsigned long long)distinct, (unsigned long long)lost, (unsigned long long)cut);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
}

static const tr_test_t tests[] = {
    {"output_full", test_output_full},
    {"spool_full", test_spool_full},
    {NULL, NULL},
};

TR_MAIN(tests)
