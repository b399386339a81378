/* cm/config.h: precedence flags > environment > file > defaults, validation messages that name
 * the option, its source and the value, passthrough properties, and the unit parsers. */
#include "cm/config.h"
#include "cm/error.h"
#include "support/runner.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *topic;
    int64_t port, spool_max, interval;
    int verbose;
} cfg_t;

static const cm_opt_t opts[] = {
    {"topic", CM_OPT_STRING, "fleetprof.chunks", offsetof(cfg_t, topic), 0, 0, "Kafka topic"},
    {"port", CM_OPT_INT, "9400", offsetof(cfg_t, port), 1, 65535, "HTTP port"},
    {"spool-max", CM_OPT_SIZE, "1GiB", offsetof(cfg_t, spool_max), 1 << 20, 0x7fffffffffffll,
     "spool bound"},
    {"interval", CM_OPT_DURATION, "10s", offsetof(cfg_t, interval), 0, 0, "flush interval"},
    {"verbose", CM_OPT_BOOL, "false", offsetof(cfg_t, verbose), 0, 0, "more logs"},
    {0},
};

static int load(cfg_t *c, cm_kvlist_t *kv, char *err, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    memset(kv, 0, sizeof *kv);
    return cm_config_load(opts, c, "FPT_", "kafka.", kv, argc, argv, err, 256);
}

static void test_defaults_and_precedence(void) {
    cfg_t c;
    cm_kvlist_t kv;
    char err[256];
    char *a0[] = {"prog"};
    CHECK(load(&c, &kv, err, 1, a0) == 0);
    CHECK(!strcmp(c.topic, "fleetprof.chunks") && c.port == 9400 && c.spool_max == 1ll << 30 &&
          c.interval == 10000000000ll && c.verbose == 0);
    cm_config_free(opts, &c, &kv);
    FILE *f = fopen("/tmp/fpt.conf", "w");
    fputs("# comment\ntopic = from-file\nport = 1000\nspool_max = 64MiB\n"
          "kafka.security.protocol = SSL\nkafka.acks = all\n", f);
    fclose(f);
    setenv("FPT_CONFIG", "/tmp/fpt.conf", 1);
    setenv("FPT_PORT", "2000", 1);
    char *a1[] = {"prog", "--interval", "250ms", "--verbose", "--kafka.acks=1", "--port=3000"};
    CHECKF(load(&c, &kv, err, 6, a1) == 0, "%s", err);
    CHECK(!strcmp(c.topic, "from-file")); /* file over default */
    CHECK(c.spool_max == 64ll << 20);
    CHECK(c.port == 3000);                /* flag over env over file */
    CHECK(c.interval == 250000000ll && c.verbose == 1);
    CHECK_EQ(kv.n, 2);
    CHECK(!strcmp(kv.items[0].key, "security.protocol") && !strcmp(kv.items[0].value, "SSL"));
    CHECK(!strcmp(kv.items[1].key, "acks") && !strcmp(kv.items[1].value, "1")); /* flag wins */
    cm_config_free(opts, &c, &kv);
    char *a2[] = {"prog"};
    CHECK(load(&c, &kv, err, 1, a2) == 0);
    CHECK(c.port == 2000); /* env over file */
    cm_config_free(opts, &c, &kv);
}

static void test_errors_name_the_option(void) {
    cfg_t c;
    cm_kvlist_t kv;
    char err[256];
    char *a1[] = {"prog", "--port", "70000"};
    CHECK(load(&c, &kv, err, 3, a1) == CM_ECONFIG);
    CHECKF(strstr(err, "'70000'") && strstr(err, "port") && strstr(err, "flag --port") &&
               strstr(err, "[1, 65535]"),
           "%s", err);
    char *a2[] = {"prog", "--spool-max", "lots"};
    CHECK(load(&c, &kv, err, 3, a2) == CM_ECONFIG);
    CHECKF(strstr(err, "'lots'") && strstr(err, "a size like"), "%s", err);
    char *a3[] = {"prog", "--nope", "1"};
    CHECK(load(&c, &kv, err, 3, a3) == CM_ECONFIG);
    CHECKF(strstr(err, "unknown option '--nope'"), "%s", err);
    char *a4[] = {"prog", "--interval"};
    CHECK(load(&c, &kv, err, 2, a4) == CM_ECONFIG);
    CHECKF(strstr(err, "needs a value"), "%s", err);
    setenv("FPT_VERBOSE", "maybe", 1);
    char *a5[] = {"prog"};
    CHECK(load(&c, &kv, err, 1, a5) == CM_ECONFIG);
    CHECKF(strstr(err, "environment FPT_VERBOSE") && strstr(err, "'maybe'"), "%s", err);
    unsetenv("FPT_VERBOSE");
    FILE *f = fopen("/tmp/fpt-bad.conf", "w");
    fputs("colour = blue\n", f);
    fclose(f);
    char *a6[] = {"prog", "--config", "/tmp/fpt-bad.conf"};
    CHECK(load(&c, &kv, err, 3, a6) == CM_ECONFIG);
    CHECKF(strstr(err, "unknown option 'colour'") && strstr(err, "fpt-bad.conf"), "%s", err);
    char *a7[] = {"prog", "--config", "/nonexistent.conf"};
    CHECK(load(&c, &kv, err, 3, a7) == CM_ECONFIG);
    CHECKF(strstr(err, "/nonexistent.conf"), "%s", err);
    char *a8[] = {"prog", "--help"};
    CHECK(load(&c, &kv, err, 2, a8) == 1);
}

static void test_parsers(void) {
    int64_t v;
    CHECK(cm_parse_duration("1.5s", &v) == 0 && v == 1500000000ll);
    CHECK(cm_parse_duration("5m", &v) == 0 && v == 300000000000ll);
    CHECK(cm_parse_duration("30", &v) == 0 && v == 30000000000ll);
    CHECK(cm_parse_duration("-1s", &v) == CM_ECONFIG);
    CHECK(cm_parse_duration("10 parsecs", &v) == CM_ECONFIG);
    CHECK(cm_parse_size("2GiB", &v) == 0 && v == 2ll << 30);
    CHECK(cm_parse_size("1GB", &v) == 0 && v == 1000000000ll);
    CHECK(cm_parse_size("12", &v) == 0 && v == 12);
    CHECK(cm_parse_size("1e30", &v) == CM_ECONFIG);
    int b;
    CHECK(cm_parse_bool("On", &b) == 0 && b == 1);
    CHECK(cm_parse_bool("nah", &b) == CM_ECONFIG);
}

static const tr_test_t tests[] = {
    {"defaults_and_precedence", test_defaults_and_precedence},
    {"errors_name_the_option", test_errors_name_the_option},
    {"parsers", test_parsers},
    {0, 0},
};
TR_MAIN(tests)
