/* fleetprof: the command-line tool. Parses the subcommand and hands over to its file. */
#include "cli.h"
#include "cm/log.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command_t;

static const command_t commands[] = {
    {"fold", cli_fold, "fold [--type TYPE] [--count] FILE|DIR...  chunk files to folded stacks"},
    {"run", cli_run, "run [--service S] [--output DIR] ... -- CMD ARGS  run CMD under the agent"},
    {"services", cli_query, "services                     services with data (query API)"},
    {"versions", cli_query, "versions SERVICE             versions of a service, first/last seen"},
    {"top", cli_query, "top --service S [--version V]  top functions (self, total)"},
    {"tree", cli_query, "tree --service S [--version V] call tree, truncated by --min-share"},
    {"diff", cli_query, "diff --service S --base A --test B [--fail-on-regression PCT]"},
    {"span", cli_query, "span --trace ID | --span ID  profile of one trace or span"},
    {"spans", cli_query, "spans --service S [--type T]  spans ranked by sampled cost"},
    {"export", cli_query, "export --service S --format pprof|folded|json -o FILE"},
    {"reports", cli_query, "reports [--service S]        per-deploy regression reports"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    fprintf(out, "usage: fleetprof COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %s\n", commands[i].help);
    fprintf(out, "\n`fleetprof COMMAND --help` describes each command.\n");
}

int main(int argc, char **argv) {
    cm_log_init("fleetprof", CM_LOG_WARN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("fleetprof %s (chunk format %d.%d)\n", FLEETPROF_VERSION_STRING, CM_FORMAT_MAJOR,
               CM_FORMAT_MINOR);
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "fleetprof: unknown command '%s' (see fleetprof --help)\n", argv[1]);
    return 2;
}
