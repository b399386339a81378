/* The perf map reader (agent/src/lang/perfmap.c) on files written here: names and their
 * JavaScript parts, malformed and over-long lines skipped and counted, a line being written
 * left for the next refresh, growth read incrementally, a range at the same start replaced,
 * overlapping ranges (the newest wins), a file replaced by a shorter one read again from its
 * start. In-process (fp_agent_core); runs in the sanitizer builds too. */
#include "../agent/src/lang/perfmap.h"
#include "support/runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];

static void put(const char *mode, const char *text) {
    FILE *f = fopen(path, mode);
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* pc's name ("" when none) and, for a JavaScript function, its file and line. */
static const char *name_of(uintptr_t pc, ag_jitsym_t *j) {
    memset(j, 0, sizeof *j);
    return ag_perfmap_lookup(pc, j) ? j->name : "";
}

static void names_and_errors(void) {
    static char longline[6000];
    memset(longline, 'x', sizeof longline - 2);
    memcpy(longline, "7000 10 ", 8);
    longline[sizeof longline - 2] = '\n';
    put("w", "1000 100 Builtin:ArrayPush\n"
             "2000 40 JS:*fib /srv/app.js:12:3\n"
             "zz 10 not hex\n"
             "3000 0 JS:~zero /srv/app.js:1:1\n"
             "4000 20\n"
             "5000 30 JS:~ /srv/a:b.js:7:9\n");
    put("a", longline);
    put("a", "6000 10 LazyCompile:~old file:///srv/x.js:3:1\n"
             "8000 10 JS:^part");
    ag_perfmap_use(path);
    ag_perfmap_refresh();
    ag_perfmap_stats_t st;
    ag_perfmap_stats(&st);
    CHECK_EQ(st.lines, 4);
    CHECK_EQ(st.malformed, 4); /* zz, size 0, no name, the 6000-byte line */
    CHECK_EQ(st.entries, 4);
    ag_jitsym_t j;
    CHECK(!strcmp(name_of(0x1000, &j), "Builtin:ArrayPush") && !strcmp(j.sysname, j.name) &&
          j.file == NULL);
    CHECK(!strcmp(name_of(0x10ff, &j), "Builtin:ArrayPush"));
    CHECK(!strcmp(name_of(0x1100, &j), ""));
    CHECK(!strcmp(name_of(0x2020, &j), "fib") && !strcmp(j.file, "/srv/app.js") && j.line == 12);
    CHECK(!strcmp(j.sysname, "js:fib /srv/app.js:12:3"));
    uint64_t fib_key = j.key;
    CHECK(!strcmp(name_of(0x5000, &j), "(anonymous)") && !strcmp(j.file, "/srv/a:b.js") &&
          j.line == 7);
    CHECK(!strcmp(name_of(0x6005, &j), "old") && !strcmp(j.file, "file:///srv/x.js") &&
          j.line == 3);
    CHECK(!strcmp(name_of(0x7005, &j), ""));
    CHECK(!strcmp(name_of(0x8005, &j), "")); /* being written */
    /* the line completes, a new tier of fib replaces its range, another overlaps it */
    put("a", " /srv/app.js:20:1\n"
             "2000 40 JS:^fib /srv/app.js:12:3\n"
             "1f00 200 JS:*big /srv/app.js:30:1\n");
    usleep(2000);
    CHECK(!strcmp(name_of(0x8005, &j), "part") && j.line == 20); /* a miss refreshes */
    ag_perfmap_refresh();
    CHECK(!strcmp(name_of(0x1f10, &j), "big"));
    CHECK(!strcmp(name_of(0x2010, &j), "big")); /* newer than both fib lines */
    CHECK(!strcmp(name_of(0x2080, &j), "big"));
    ag_perfmap_stats(&st);
    CHECK_EQ(st.lines, 7);
    CHECK_EQ(st.entries, 6); /* the second fib replaced the first */
    /* a new file, shorter: read from its start, the old names gone */
    put("w", "9000 10 JS:*fib /srv/app.js:12:3\n");
    ag_perfmap_refresh();
    CHECK(!strcmp(name_of(0x9000, &j), "fib") && j.key == fib_key); /* tiers share the key */
    CHECK(!strcmp(name_of(0x1000, &j), ""));
    ag_perfmap_stats(&st);
    CHECK_EQ(st.restarts, 1);
    CHECK_EQ(st.entries, 1);
    printf("# %llu lines, %llu malformed, %llu restarts\n", (unsigned long long)st.lines,
           (unsigned long long)st.malformed, (unsigned long long)st.restarts);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/fp-perfmap-test-%d.map", (int)getpid());
    names_and_errors();
    unlink(path);
    printf("ok names_and_errors\n");
    return 0;
}
