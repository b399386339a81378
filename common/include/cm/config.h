/* Daemon configuration from one option table: command-line flags, environment variables and
 * an INI-style config file (`key = value`, '#' comments; parsed by inih), with precedence
 * flags > environment > file > default. Every value is validated; an error names the option,
 * where it came from (flag, variable, file:line), the value, and what was expected.
 *
 * An option named "spool-max" is the flag --spool-max (or --spool-max=V), the file key
 * spool-max (or spool_max), and the variable <PREFIX>SPOOL_MAX. Keys that start with the
 * passthrough prefix (e.g. "kafka.") are collected as-is for a library (librdkafka properties),
 * from flags (--kafka.security.protocol=SSL), the file, and <PREFIX>KAFKA_<PROP> variables
 * are NOT mapped (dots are not valid in variable names; use the file or flags).
 * Not thread-safe; call at startup.
 */
#ifndef CM_CONFIG_H
#define CM_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CM_OPT_STRING,   /* char * (malloc'ed, owned by the config struct) */
    CM_OPT_INT,      /* int64_t */
    CM_OPT_BOOL,     /* int: true/false, yes/no, on/off, 1/0 */
    CM_OPT_DURATION, /* int64_t ns: "250ms", "10s", "5m", "1h", "2d"; a bare number is seconds */
    CM_OPT_SIZE,     /* int64_t bytes: "512", "64KiB", "10MiB", "2GiB", "1GB" */
} cm_opt_type_t;

typedef struct {
    const char *name;
    cm_opt_type_t type;
    const char *def;  /* default as text; NULL: empty string / 0 */
    size_t offset;    /* offsetof(your_config_t, field) */
    int64_t min, max; /* numeric bounds, inclusive; min == max == 0: unbounded */
    const char *help;
} cm_opt_t;

typedef struct {
    char *key; /* without the prefix, e.g. "security.protocol" */
    char *value;
} cm_kv_t;

typedef struct {
    cm_kv_t *items;
    size_t n;
} cm_kvlist_t;

/* Fills cfg from defaults, the config file (--config FILE or <PREFIX>CONFIG), the environment
 * and argv. Returns 0; 1 if --help was asked (print cm_config_help); CM_ECONFIG with errbuf
 * set on any invalid or unknown option. argv[0] is skipped; non-option arguments are errors.
 * passthrough may be NULL when passthrough_prefix is NULL. */
int cm_config_load(const cm_opt_t *opts, void *cfg, const char *env_prefix,
                   const char *passthrough_prefix, cm_kvlist_t *passthrough, int argc,
                   char **argv, char *errbuf, size_t errbuf_size);
/* Prints usage: every option with its flag, variable, default and help. */
void cm_config_help(const cm_opt_t *opts, const char *env_prefix, const char *passthrough_prefix,
                    const char *usage_line, FILE *out);
/* Frees strings and the passthrough list. */
void cm_config_free(const cm_opt_t *opts, void *cfg, cm_kvlist_t *passthrough);

/* Parsers, exposed for other uses and tests. Return 0 or CM_ECONFIG. */
int cm_parse_duration(const char *s, int64_t *ns);
int cm_parse_size(const char *s, int64_t *bytes);
int cm_parse_bool(const char *s, int *out);

#endif
