/* ag_py_line (agent/src/bg/pyline.c, issue 34) against CPython's own co_lines(): every code object
 * of a few standard library modules (argparse, json.decoder, re._parser, dataclasses: long
 * functions, big line jumps, comprehensions, no-location entries), compiled by Debian's
 * /usr/bin/python3 (3.11), every instruction's line. Runs in the sanitizer builds too. */
#define _GNU_SOURCE /* mkstemps */
#include "../agent/src/handler/pyframes.h"
#include "support/runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char script[] =
    "import argparse, json.decoder, re._parser, dataclasses, sys\n"
    "def walk(co):\n"
    "    yield co\n"
    "    for c in co.co_consts:\n"
    "        if hasattr(c, 'co_lines'):\n"
    "            yield from walk(c)\n"
    "for m in (argparse, json.decoder, re._parser, dataclasses):\n"
    "    top = compile(open(m.__file__).read(), m.__file__, 'exec')\n"
    "    for co in walk(top):\n"
    "        print('C', co.co_firstlineno, co.co_linetable.hex() or '-')\n"
    "        for s, e, ln in co.co_lines():\n"
    "            print('R', s // 2, e // 2, -1 if ln is None else ln)\n";

static int unhex(const char *h, uint8_t *out, size_t cap) {
    size_t n = strlen(h) / 2;
    if (n > cap || !strcmp(h, "-"))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return (int)n;
}

int main(void) {
    char path[] = "/tmp/fp-pyline-XXXXXX.py", cmd[128];
    int fd = mkstemps(path, 3);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    CHECK(f != NULL);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s", path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    static char line[1 << 20];
    static uint8_t table[1 << 19];
    int len = 0, first = 0;
    uint64_t codes = 0, units = 0, bad = 0;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == 'C') {
            char *hex = strchr(line + 2, ' ');
            CHECK(hex != NULL);
            first = atoi(line + 2);
            len = unhex(hex + 1, table, sizeof table);
            CHECK(len >= 0);
            codes++;
            continue;
        }
        unsigned s, e;
        int want;
        CHECK(sscanf(line, "R %u %u %d", &s, &e, &want) == 3);
        for (unsigned u = s; u < e; u++) {
            int got = ag_py_line(table, (size_t)len, first, u);
            units++;
            if (got != want && bad++ < 5)
                printf("# first %d unit %u: %d, CPython %d\n", first, u, got, want);
        }
    }
    CHECK(pclose(p) == 0);
    remove(path);
    printf("# %llu code objects, %llu instructions, %llu lines differ\n",
           (unsigned long long)codes, (unsigned long long)units, (unsigned long long)bad);
    CHECK(codes > 100 && units > 10000);
    CHECK(bad == 0);
    /* a table cut short or not starting at an entry: -1, no read past its end */
    static const uint8_t cut[] = {0x80 | 14 << 3 /* code 14, 1 unit, its varint missing */};
    CHECK(ag_py_line(cut, 1, 10, 5) == -1);
    static const uint8_t junk[] = {0x12, 0x34};
    CHECK(ag_py_line(junk, 2, 10, 0) == -1);
    printf("ok pyline\n");
    return 0;
}
