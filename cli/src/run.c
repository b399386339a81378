/* fleetprof run: starts a program under the agent. Finds libfleetprof.so, adds it to
 * LD_PRELOAD (after any existing entries), sets the FLEETPROF_* environment from the flags and
 * execs the command, which keeps its pid, stdio and exit status.
 *
 * Library search order: $FLEETPROF_AGENT_LIB; next to this binary's build tree
 * (<dir>/../agent/libfleetprof.so); <dir>/../lib/libfleetprof.so and
 * <dir>/../lib/fleetprof/libfleetprof.so and <dir>/../<libdir>/libfleetprof.so (installed,
 * libdir from GNUInstallDirs); /usr/local/lib, /usr/lib.
 */
#include "cli.h"

#include "cm/config.h"

#ifndef FLEETPROF_INSTALL_LIBDIR
#define FLEETPROF_INSTALL_LIBDIR "lib"
#endif

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void run_usage(FILE *out) {
    fprintf(out,
            "usage: fleetprof run [--service S] [--version V] [--output DIR] [--collector PATH]\n"
            "                     [--interval DURATION] -- COMMAND [ARGS...]\n"
            "  Runs COMMAND with the fleetprof agent preloaded. Flags set FLEETPROF_SERVICE,\n"
            "  FLEETPROF_VERSION, FLEETPROF_OUTPUT, FLEETPROF_COLLECTOR, FLEETPROF_INTERVAL;\n"
            "  other FLEETPROF_* variables in the environment pass through. The agent library\n"
            "  is $FLEETPROF_AGENT_LIB or found next to this program. --output DIR is created\n"
            "  (with its parents) if missing; --interval takes 10, 10s, 500ms, 5m.\n");
}

/* mkdir -p: creates dir and its missing parents (mode 0777 & ~umask). Returns 0, or -1 with
 * errno set (an existing non-directory: ENOTDIR). */
static int mkdir_p(const char *dir) {
    char path[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return -1;
        if (stat(path, &st) != 0)
            return -1;
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
        *p = c;
        if (c == '\0')
            return 0;
    }
}

static int readable(const char *p) { return access(p, R_OK) == 0; }

static int find_agent(char *out, size_t size) {
    const char *env = getenv("FLEETPROF_AGENT_LIB");
    if (env && *env) {
        if (!readable(env)) {
            fprintf(stderr, "fleetprof run: FLEETPROF_AGENT_LIB=%s: %s\n", env, strerror(errno));
            return -1;
        }
        snprintf(out, size, "%s", env);
        return 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = '\0';
        static const char *rel[] = {"/../agent/libfleetprof.so", "/../lib/libfleetprof.so",
                                    "/../lib/fleetprof/libfleetprof.so",
                                    "/../" FLEETPROF_INSTALL_LIBDIR "/libfleetprof.so"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            char cand[PATH_MAX + 64];
            snprintf(cand, sizeof cand, "%s%s", self, rel[i]);
            char real[PATH_MAX];
            if (readable(cand) && realpath(cand, real)) {
                snprintf(out, size, "%s", real);
                return 0;
            }
        }
    }
    static const char *sys[] = {"/usr/local/lib/libfleetprof.so", "/usr/lib/libfleetprof.so"};
    for (size_t i = 0; i < sizeof sys / sizeof sys[0]; i++)
        if (readable(sys[i])) {
            snprintf(out, size, "%s", sys[i]);
            return 0;
        }
    fprintf(stderr, "fleetprof run: cannot find libfleetprof.so; set FLEETPROF_AGENT_LIB\n");
    return -1;
}

int cli_run(int argc, char **argv) {
    static const struct option opts[] = {{"service", required_argument, 0, 's'},
                                         {"version", required_argument, 0, 'v'},
                                         {"output", required_argument, 0, 'o'},
                                         {"collector", required_argument, 0, 'c'},
                                         {"interval", required_argument, 0, 'i'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *service = NULL, *version = NULL, *output = NULL, *collector = NULL,
               *interval = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+s:v:o:c:i:h", opts, NULL)) != -1) {
        switch (ch) {
        case 's': service = optarg; break;
        case 'v': version = optarg; break;
        case 'o': output = optarg; break;
        case 'c': collector = optarg; break;
        case 'i': {
            int64_t ns;
            if (cm_parse_duration(optarg, &ns) != 0 || ns < 100000000 ||
                ns > 3600000000000ll) {
                fprintf(stderr, "fleetprof run: --interval '%s' is not a duration between "
                                "100ms and 1h (e.g. 10, 10s, 500ms)\n", optarg);
                return 2;
            }
            interval = optarg;
            break;
        }
        case 'h': run_usage(stdout); return 0;
        default: run_usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "fleetprof run: no command given (fleetprof run [FLAGS] -- COMMAND)\n");
        return 2;
    }
    if (output && (mkdir_p(output) != 0 || access(output, W_OK) != 0)) {
        fprintf(stderr, "fleetprof run: --output %s: %s\n", output, strerror(errno));
        return 2;
    }
    char lib[PATH_MAX];
    if (find_agent(lib, sizeof lib) != 0)
        return 1;
    const char *pre = getenv("LD_PRELOAD");
    size_t len = strlen(lib) + (pre ? strlen(pre) : 0) + 2;
    char *val = malloc(len);
    if (!val)
        return 1;
    if (pre && *pre && !strstr(pre, lib))
        snprintf(val, len, "%s:%s", pre, lib);
    else
        snprintf(val, len, "%s", pre && *pre ? pre : lib);
    setenv("LD_PRELOAD", val, 1);
    free(val);
    if (service)
        setenv("FLEETPROF_SERVICE", service, 1);
    if (version)
        setenv("FLEETPROF_VERSION", version, 1);
    if (output)
        setenv("FLEETPROF_OUTPUT", output, 1);
    if (collector)
        setenv("FLEETPROF_COLLECTOR", collector, 1);
    if (interval)
        setenv("FLEETPROF_INTERVAL", interval, 1);
    execvp(argv[optind], argv + optind);
    int e = errno;
    fprintf(stderr, "fleetprof run: %s: %s\n", argv[optind], strerror(e));
    return e == ENOENT ? 127 : 126;
}
