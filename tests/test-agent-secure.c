/* The agent in programs that run with more privileges than their caller (issue 28).
 *
 *   setuid          a root-owned mode-4755 copy of fp-work-linked (linked to the agent), run as
 *                   nobody with FLEETPROF_LIBDW=<a library whose constructor writes a marker>
 *                   and FLEETPROF_OUTPUT=<a directory nobody cannot write>: the library is never
 *                   loaded, nothing is written there, and stderr has exactly one line saying
 *                   that the environment was ignored (secure-execution mode)
 *   output_symlink  FLEETPROF_OUTPUT a world-writable directory where the temporary names the
 *                   agent will use are symlinks to a root-owned file: the file is untouched,
 *                   the chunks are written anyway (as files of their own, mode 0600), and
 *                   FLEETPROF_OUTPUT_MODE=0640 gives 0640
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

/* Runs fp-work cpu SECS with FLEETPROF_OUTPUT=dir (service "sym"), after planting a symlink to
 * victim at every temporary name of its first 32 chunks (the pid is known before it execs). */
static int run_planted(const char *dir, const char *victim, const char *mode_env) {
    char prog[4096], pre[4300], e_out[4200];
    prog_path("fp-work", prog, sizeof prog);
    snprintf(e_out, sizeof e_out, "FLEETPROF_OUTPUT=%s", dir);
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        char c;
        if (read(go[0], &c, 1) != 1)
            _exit(126);
        unsetenv("FLEETPROF_OUTPUT_MODE");
        setenv("FLEETPROF_COLLECTOR", "none", 1);
        putenv(e_out);
        putenv((char *)preload(pre, sizeof pre));
        putenv("FLEETPROF_SERVICE=sym");
        putenv("FLEETPROF_INTERVAL=0.2");
        if (mode_env)
            putenv((char *)mode_env);
        execl(prog, prog, "cpu", "0.8", (char *)NULL);
        _exit(127);
    }
    close(go[0]);
    for (int seq = 0; seq < 32; seq++) {
        char link[4400];
        snprintf(link, sizeof link, "%s/.sym-%d-%08d%s.tmp", dir, (int)pid, seq,
                 CM_CHUNK_FILE_SUFFIX);
        CHECK(symlink(victim, link) == 0);
    }
    CHECK(write(go[1], "g", 1) == 1);
    close(go[1]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    return st;
}

/* Chunk files in dir (their mode into *mode, all equal), after removing the symlinks left. */
static int chunk_files(const char *dir, unsigned *mode) {
    char names[64][256];
    int n = dir_entries(dir, names, 64), files = 0;
    *mode = 0;
    for (int i = 0; i < n && i < 64; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%.255s", dir, names[i]);
        struct stat st;
        CHECK(lstat(path, &st) == 0);
        if (S_ISLNK(st.st_mode)) {
            CHECK(unlink(path) == 0);
            continue;
        }
        CHECKF(S_ISREG(st.st_mode) && strstr(names[i], CM_CHUNK_FILE_SUFFIX) &&
                   names[i][0] != '.',
               "unexpected entry %s", names[i]);
        CHECKF(!*mode || *mode == (st.st_mode & 07777), "%s: mode %o, others %o", names[i],
               st.st_mode & 07777, *mode);
        *mode = st.st_mode & 07777;
        files++;
    }
    return files;
}

static void test_output_symlink(void) {
    need_root();
    char *d = mkout();
    CHECK(chmod(d, 0755) == 0);
    char shared[4200], victim[4200];
    snprintf(shared, sizeof shared, "%s/shared", d);
    CHECK(mkdir(shared, 0777) == 0 && chmod(shared, 01777) == 0);
    snprintf(victim, sizeof victim, "%s/victim", d);
    static const char content[] = "root's file: must stay as it is\n";
    int fd = open(victim, O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0 && write(fd, content, sizeof content - 1) == (ssize_t)sizeof content - 1);
    close(fd);

    int st = run_planted(shared, victim, NULL);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fp-work failed (status %d)", st);
    char buf[256] = "";
    fd = open(victim, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[r > 0 ? r : 0] = '\0';
    struct stat vs;
    CHECK(stat(victim, &vs) == 0);
    unsigned mode;
    int files = chunk_files(shared, &mode);
    printf("output_symlink: victim %s (%lld bytes); %d chunk files, mode %o\n",
           strcmp(buf, content) ? "OVERWRITTEN" : "untouched", (long long)vs.st_size, files,
           mode);
    CHECKF(!strcmp(buf, content), "the file behind a planted symlink was written: '%.60s'", buf);
    CHECKF(files >= 3, "only %d chunk files written", files);
    CHECKF(mode == 0600, "chunk files have mode %o, expected 0600", mode);

    char other[4200];
    snprintf(other, sizeof other, "%s/mode", d);
    CHECK(mkdir(other, 0777) == 0 && chmod(other, 01777) == 0);
    st = run_planted(other, victim, "FLEETPROF_OUTPUT_MODE=0640");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    files = chunk_files(other, &mode);
    printf("output_symlink: FLEETPROF_OUTPUT_MODE=0640: %d chunk files, mode %o\n", files, mode);
    CHECK(files >= 3 && mode == 0640);
    rmrf(d);
    free(d);
}

static const tr_test_t tests[] = {{"setuid", test_setuid},
                                  {"output_symlink", test_output_symlink},
                                  {0}};
TR_MAIN(tests)
