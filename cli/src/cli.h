/* Subcommands of the fleetprof CLI. Each returns the process exit status:
 * 0 success, 1 failure of the operation (bad input file, server error), 2 usage error. */
#ifndef CLI_H
#define CLI_H

#include "cm/chunk.h"

#include <stddef.h>

int cli_fold(int argc, char **argv);
int cli_run(int argc, char **argv);
/* fleetprof capture: a manual incident capture through the aggregator or a collector
 * (capture.c). */
int cli_capture(int argc, char **argv);
/* The query commands (query_cmds.c): argv[0] names the command; 3 = deploy gate failed. */
int cli_query(int argc, char **argv);

/* Prints the JSON of GET /api/v1/insights, /api/v1/kpm or /api/v1/search (command `what`)
 * as a table (insights.c). */
struct json_t;
void cli_print_insights(const char *what, struct json_t *o);

/* Writes a printable name for location `loc` of d into buf: the function name, or
 * "<mapping file basename>+0x<addr>", or "0x<addr>". Returns buf. */
const char *cli_location_name(const cm_dict_t *d, uint32_t loc, char *buf, size_t size);

#endif
