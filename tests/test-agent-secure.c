/* The agent in programs that run with more privileges than their caller (issue 28).
 *
 *   setuid          a root-owned mode-4755 copy of fp-work-linked (linked to the agent), run as
 *                   nobody with FLEETPROF_LIBDW=<a library whose constructor writes a marker>
 *                   and FLEETPROF_OUTPUT=<a directory nobody cannot write>: the library is never
 *                   loaded, nothing is written there, and stderr has exactly one line saying
 *                   that the environment was ignored (secure-execution mode)
 *
 * Needs root (a setuid-root program, setpriv to nobody): otherwise each test fails saying so.
 * nosan: a sanitized agent cannot run setuid (the sanitizer runtimes refuse AT_SECURE tricks)
 * and fp-work is not instrumented. */
#include "agent-common.h"


#define NOBODY 65534

static void need_root(void) {
    CHECKF(geteuid() == 0, "these tests make a setuid-root program and run it as uid %d: run "
                           "as root", NOBODY);
}

/* Copies src to dst with mode (owner root). */
static void copy_file(const char *src, const char *dst, mode_t mode) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    CHECKF(in >= 0, "%s: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECKF(out >= 0, "%s: %s", dst, strerror(errno));
    char buf[65536];
    ssize_t r;
    while ((r = read(in, buf, sizeof buf)) > 0)
        CHECK(write(out, buf, (size_t)r) == r);
    CHECK(r == 0);
    close(in);
    CHECK(fchown(out, 0, 0) == 0);
    CHECK(fchmod(out, mode) == 0); /* after fchown, which clears set-user-ID */
    close(out);
}

/* Entries of dir other than . and .. (names into list, up to max). */
static int dir_entries(const char *dir, char list[][256], int max) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            if (n < max)
                snprintf(list[n], 256, "%s", e->d_name);
            n++;
        }
    closedir(d);
    return n;
}

/* Runs argv (argv[0] an absolute path) with env, stderr into errbuf; returns the status. */
static int run_err(const char *const *env, const char *const *argv, char *out, size_t outsize,
                   char *errbuf, size_t errsize) {
    char errfile[] = "/tmp/fp-secure-err-XXXXXX";
    int efd = mkstemp(errfile);
    CHECK(efd >= 0);
    int saved = dup(2);
    dup2(efd, 2);
    int st = run(env, argv, 60, out, outsize);
    dup2(saved, 2);
    close(saved);
    lseek(efd, 0, SEEK_SET);
    ssize_t r = read(efd, errbuf, errsize - 1);
    errbuf[r > 0 ? r : 0] = '\0';
    close(efd);
    unlink(errfile);
    return st;
}

static void test_setuid(void) {
    need_root();
    char *d = mkout();
    CHECK(chmod(d, 0755) == 0);
    char prog[4096], work[4200], lib[4096], evil[4200], mdir[4200], marker[4300], outd[4200];
    prog_path("fp-work-linked", prog, sizeof prog);
    snprintf(work, sizeof work, "%s/suid-work", d);
    copy_file(prog, work, 04755);
    snprintf(lib, sizeof lib, "%s/tests/libsecure_evil.so", bdir());
    snprintf(evil, sizeof evil, "%s/evil.so", d);
    copy_file(lib, evil, 0644);
    snprintf(mdir, sizeof mdir, "%s/m", d);
    CHECK(mkdir(mdir, 0777) == 0 && chmod(mdir, 01777) == 0);
    snprintf(marker, sizeof marker, "%s/ran", mdir);
    snprintf(outd, sizeof outd, "%s/out", d);
    CHECK(mkdir(outd, 0700) == 0); /* root's: nobody cannot write (nor enter) it */
    struct stat st;
    CHECK(stat(work, &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 04755);

    /* The caller's environment, as nobody would set it. */
    char e_libdw[4300], e_out[4300], e_marker[4400];
    snprintf(e_libdw, sizeof e_libdw, "FLEETPROF_LIBDW=%s", evil);
    snprintf(e_out, sizeof e_out, "FLEETPROF_OUTPUT=%s", outd);
    snprintf(e_marker, sizeof e_marker, "FP_EVIL_MARKER=%s", marker);
    const char *env[] = {e_libdw, e_out, e_marker, "FLEETPROF_INTERVAL=0.2",
                         "FLEETPROF_DEBUG_DIRS=/nonexistent", NULL};
    const char *argv[] = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                          "--clear-groups", "--", work, "cpu", "1.2", NULL};
    char out[4096], err[8192];
    int status = run_err(env, argv, out, sizeof out, err, sizeof err);
    printf("setuid: status=%d stderr:\n%s", status, err);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the program failed (status %d)",
           status);
    char names[8][256];
    int n_out = dir_entries(outd, names, 8);
    int ran = access(marker, F_OK) == 0;
    char m[64] = "";
    if (ran) {
        FILE *f = fopen(marker, "r");
        if (f) {
            if (!fgets(m, sizeof m, f))
                m[0] = '\0';
            fclose(f);
            m[strcspn(m, "\n")] = '\0';
        }
    }
    printf("setuid: FLEETPROF_LIBDW constructor ran: %s%s; files in FLEETPROF_OUTPUT: %d%s%s\n",
           ran ? "yes, " : "no", m, n_out, n_out ? ", first " : "", n_out ? names[0] : "");
    CHECKF(!ran, "the library named by FLEETPROF_LIBDW was loaded into a setuid program (%s)",
           m);
    CHECKF(n_out == 0, "%d files written into a directory the caller cannot write", n_out);
    int lines = 0;
    const char *line = NULL;
    for (const char *p = err; (p = strstr(p, "secure-execution mode")); p++, lines++)
        line = p;
    CHECKF(lines == 1, "%d stderr lines about secure-execution mode, expected 1", lines);
    CHECK(strstr(line, "FLEETPROF_LIBDW") && strstr(line, "FLEETPROF_OUTPUT") &&
          strstr(line, CM_DEFAULT_SOCKET));
    rmrf(d);
    free(d);
}

static const tr_test_t tests[] = {{"setuid", test_setuid},
                                  {0}};
TR_MAIN(tests)
