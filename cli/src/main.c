/* fleetprof: the command-line tool. Parses the global flags and the subcommand, and hands over
 * to the subcommand's file. Grammar: fleetprof [--server URL] [--token T] COMMAND [FLAGS];
 * the global flags may also follow the command. */
#include "cli.h"
#include "cm/log.h"

#include <stdio.h>
#include <stdlib.h>
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
    {"versions", cli_query, "versions --service S         versions of a service, first/last seen"},
    {"top", cli_query, "top --service S [--version V]  top functions (self, total)"},
    {"tree", cli_query, "tree --service S [--version V] call tree, truncated by --min-share"},
    {"diff", cli_query, "diff --service S --base A --test B [--fail-on-regression PCT]"},
    {"span", cli_query, "span --trace ID | --span ID [--service S]  one trace or span"},
    {"spans", cli_query, "spans --service S [--type T]  spans ranked by sampled cost"},
    {"endpoints", cli_query, "endpoints --service S  calls, p50/p90/p99, cost per call"},
    {"endpoint", cli_query, "endpoint --service S --endpoint NAME  profile of its requests"},
    {"endpoint-diff", cli_query, "endpoint-diff --service S --base A --test B  per endpoint"},
    {"insights", cli_query, "insights --service S [--version V]  what to fix (rules)"},
    {"kpm", cli_query, "kpm --service S [--by process]  key performance metrics over time"},
    {"search", cli_query, "search --service S --kpm NAME  worst process-intervals, linked"},
    {"requests", cli_query, "requests --service S [--endpoint E] [--stuck]  slowest / stuck"},
    {"export", cli_query, "export --service S --format pprof|folded|json -o FILE|-"},
    {"reports", cli_query, "reports [--service S]        per-deploy regression reports"},
    {"incidents", cli_query, "incidents --service S        incidents (flight-recorder captures)"},
    {"incident", cli_query, "incident --id ID             trigger, timeline, diff, stuck requests"},
    {"capture", cli_capture, "capture --service S [--host H] [--pid P] [--reason T] [--collector "
                             "SOCK]  manual incident capture"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    fprintf(out, "usage: fleetprof [--server URL] [--token T] COMMAND [ARGS]\n"
                 "       fleetprof --help | --version\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %s\n", commands[i].help);
    fprintf(out, "\nglobal flags (before or after the command): --server URL (the aggregator, env "
                 "FLEETPROF_SERVER,\n  default http://127.0.0.1:9402), --token T (env "
                 "FLEETPROF_TOKEN). Tables show s/ms/MB; --json\n  gives the exact values.\n"
                 "`fleetprof COMMAND --help` describes each command.\n");
}

int main(int argc, char **argv) {
    cm_log_init("fleetprof", CM_LOG_WARN);
    /* global flags before the command: they set what the commands read from the environment */
    while (argc >= 2 && (!strncmp(argv[1], "--server", 8) || !strncmp(argv[1], "--token", 7))) {
        int is_server = argv[1][2] == 's';
        const char *flag = is_server ? "--server" : "--token", *val;
        size_t fl = strlen(flag);
        if (argv[1][fl] == '=') {
            val = argv[1] + fl + 1;
        } else if (argv[1][fl] == '\0' && argc >= 3) {
            val = argv[2];
            argc--;
            argv++;
        } else if (argv[1][fl] == '\0') {
            fprintf(stderr, "fleetprof: %s needs a value\n", flag);
            return 2;
        } else {
            break; /* --serverx: unknown, said below */
        }
        setenv(is_server ? "FLEETPROF_SERVER" : "FLEETPROF_TOKEN", val, 1);
        argc--;
        argv++;
    }
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
    if (argv[1][0] == '-')
        fprintf(stderr, "fleetprof: unknown flag '%s' before the command (global flags: --server "
                        "URL, --token T; see fleetprof --help)\n", argv[1]);
    else
        fprintf(stderr, "fleetprof: unknown command '%s' (see fleetprof --help)\n", argv[1]);
    return 2;
}
