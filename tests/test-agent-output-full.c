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

static const tr_test_t tests[] = {
    {"output_full", test_output_full},
    {NULL, NULL},
};

TR_MAIN(tests)
