/* Slow I/O: interposes read, write, pread(64), pwrite(64), readv, writev, recv, recvfrom,
 * recvmsg, send, sendto, sendmsg, connect, accept, accept4, fsync, fdatasync, open/openat
 * (and their 64 forms), the _FORTIFY_SOURCE variants (__read_chk, __pread(64)_chk,
 * __recv_chk, __recvfrom_chk, __open(64)_2, __openat(64)_2); and, for bookkeeping only,
 * close/dup/dup2/dup3/close_range/closefrom/socket/socketpair/pipe/pipe2/eventfd/fcntl(64)/
 * ioctl, which keep the fd description cache (fdinfo.c) and the non-blocking cache (fdnb.c)
 * true.
 *
 * Every call that can wait is timed: with rdtsc once hooks.c has calibrated an invariant TSC
 * (~10-20 ns a read), else with CLOCK_MONOTONIC through the vDSO (~20-30 ns a read); the
 * coarse clock resolves only ~4 ms, too coarse against a 10 ms threshold (bench/RESULTS.md).
 * Calls on a descriptor known non-blocking, and recv/send with MSG_DONTWAIT, cannot wait:
 * they are a plain forward, but for one call in ~AG_NB_CHECK on such a descriptor, timed with
 * weight AG_NB_CHECK (so that a descriptor made blocking behind our back is noticed: fdnb.c).
 * Calls >= FLEETPROF_IO_THRESHOLD (default 10 ms) are one IO event each (stack, duration,
 * bytes, io kind, fd kind, path or peer looked up now -- off the hot path -- and cached per
 * fd), subject to the flood cap. Calls between FLEETPROF_IO_FLOOR (default 50 us) and the
 * threshold are summed per stack (agg.c); shorter calls are not recorded (unwinding every
 * fast read would cost more than the read).
 *
 * Sub-threshold sampling: an aggregated call costs an unwind, a hash and the slot's atomics
 * (~1 us), so a thread doing thousands of them per second (a logger blocked on its pipe
 * between lines) would spend ~0.5% of a core on them. Each thread counts its sub-threshold
 * calls; every AG_IO_BLOCK of them it reads the clock and sets its spacing N for the next
 * block: the smallest power of two (1..AG_IO_NMAX) with rate / N <= AG_IO_AGG_RATE, rate being
 * the block's calls per second. So under AG_IO_AGG_RATE calls/s a thread's calls are all
 * recorded exactly (N = 1), and above it a thread unwinds at most ~AG_IO_AGG_RATE times a
 * second (until N reaches AG_IO_NMAX). With N > 1 every call is recorded with probability 1/N,
 * independently (a geometric countdown, redrawn when N changes: memoryless), and a recorded
 * call adds N x its ns, N x its bytes and N calls, so every stack's sums stay unbiased
 * (Horvitz-Thompson: E[N x 1{recorded}] = 1); a check on a non-blocking descriptor adds
 * another factor AG_NB_CHECK (its own inclusion probability), to aggregates and events
 * alike. Its row is flagged CM_SF_SUBSAMPLED and the calls not recorded are counted as
 * DROP_SUBSAMPLED of IO (flushed at the thread's next recorded call). The relative error of
 * a stack's count with n calls is sqrt((N - 1) / n): 5% for n = 3000 at N = 8. A skipped
 * call costs a TLS decrement and a branch.
 *
 * errno is preserved across the bookkeeping. Contract: no locks, no allocation; the guard
 * (agent threads, slow paths) and FLEETPROF_ENABLED=0 / FLEETPROF_IO=0 make a plain forward
 * (the bookkeeping-only hooks still keep the two caches true: a byte store or two).
 */
#include "hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include "fmath.h"
#include <stdarg.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static inline int io_on(void) {
    return AG_LIKELY(atomic_load_explicit(&ag_hooks_state, memory_order_relaxed) > 0) &&
           ag_hcfg.io_on && !ag_hook_guard;
}

#define AG_IO_BLOCK 64      /* sub-threshold calls between two spacing decisions */
#define AG_IO_AGG_RATE 64   /* recorded sub-threshold calls per second per thread, at most */
#define AG_IO_NMAX 64       /* largest spacing N */

static AG_TLS struct {
    int64_t left;     /* sub-threshold calls to the next recorded one (recorded when <= 0) */
    uint32_t n;       /* spacing N (0 before the first decision: 1) */
    uint32_t blk;     /* calls in the current block */
    uint64_t t0;      /* the block's start (ag_hook_clock) */
    uint64_t skipped; /* calls not recorded, not counted as DROP_SUBSAMPLED yet */
    uint32_t ln_n;    /* the N ln_q belongs to */
    double ln_q;      /* ln(1 - 1/N) */
} S;

/* Geometric countdown of mean n: 1 + floor(ln U / ln(1 - 1/n)), U uniform in (0, 1]. */
static int64_t io_draw(uint32_t n) {
    if (n <= 1)
        return 1;
    if (S.ln_n != n) {
        S.ln_q = ag_log1p(-1.0 / (double)n);
        S.ln_n = n;
    }
    double u = ((double)(ag_hook_rand() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double d = ag_log(u) / S.ln_q;
    return d > 1e9 ? 1000000000 : (int64_t)d + 1;
}

static __attribute__((noinline)) void io_block_end(void) {
    uint64_t now = ag_hook_clock(), dt = now - S.t0;
    uint32_t n = 1;
    if (S.t0) /* rate / n <= AG_IO_AGG_RATE  <=>  n x dt x AG_IO_AGG_RATE >= AG_IO_BLOCK s */
        while (n < AG_IO_NMAX && (double)n * (double)dt * AG_IO_AGG_RATE < AG_IO_BLOCK * 1e9)
            n <<= 1;
    S.t0 = now;
    S.blk = 0;
    if (n != (S.n ? S.n : 1u)) /* memoryless: a fresh draw for the new spacing */
        S.left = io_draw(n);
    S.n = n;
}

/* A sub-threshold call: returns N (> 0) when it is to be recorded for N calls, else 0. */
static inline uint32_t io_admit(void) {
    if (AG_UNLIKELY(++S.blk >= AG_IO_BLOCK))
        io_block_end();
    if (--S.left > 0) {
        S.skipped++;
        return 0;
    }
    uint32_t n = S.n ? S.n : 1;
    S.left = io_draw(n);
    return n;
}

/* A timed call of ns >= the floor. w: its weight, 1 or AG_NB_CHECK for a check on a
 * descriptor known non-blocking (fdnb.c), which took too long to trust the entry without
 * asking the kernel again (rate-limited: ag_fd_nb_recheck). */
static __attribute__((noinline)) void io_report(int fd, uint32_t kind, uint64_t ns,
                                                ssize_t bytes, uint32_t w) {
    int saved = errno;
    uint32_t n = 1;
    if (w > 1)
        ag_fd_nb_recheck(fd);
    if (ns < ag_hcfg.io_threshold_ns && !(n = io_admit())) {
        errno = saved;
        return; /* not recorded */
    }
    ag_thread_t *t = ag_hook_enter();
    if (!t) {
        errno = saved;
        return;
    }
    uint64_t b = bytes > 0 ? (uint64_t)bytes : 0;
    if (ns >= ag_hcfg.io_threshold_ns) {
        uint32_t m = ag_hook_admit(CM_EV_IO);
        if (m) {
            uint32_t fdk = CM_FD_OTHER, id = 0;
            if (fd >= 0)
                id = ag_fd_describe(fd, &fdk);
            ag_event_t ev = {.type = CM_EV_IO,
                             .flags = m > 1000 || w > 1 ? CM_SF_SUBSAMPLED : 0,
                             .weight = ns * m / 1000 * w,
                             .count = (uint64_t)m * w,
                             .size = b,
                             .address = id, /* description id, resolved by ag_hooks_bg_add */
                             .io_kind = kind,
                             .fd_kind = fdk};
            ag_hook_record(t, &ev);
        }
    } else {
        uint32_t fdk = fd >= 0 ? ag_fd_kind(fd) : CM_FD_OTHER;
        uintptr_t pcs[AG_MAX_DEPTH];
        uint32_t d = ag_hook_unwind(t, pcs, AG_MAX_DEPTH);
        n *= w;
        ag_agg_add_sub(CM_EV_IO, kind, fdk, pcs, d, ns * n, b * n, (uint64_t)CM_COUNT_ONE * n,
                       n > 1);
        if (S.skipped) {
            ag_drop_count(CM_EV_IO, CM_DROP_SUBSAMPLED, S.skipped);
            S.skipped = 0;
        }
    }
    ag_hook_leave();
    errno = saved;
}

/* _FORTIFY_SOURCE builds (Debian's default for packages) call these checked variants instead
 * of read/pread/recv/recvfrom/open when the buffer size is known at compile time. */
ssize_t __read_chk(int, void *, size_t, size_t);
ssize_t __pread_chk(int, void *, size_t, off_t, size_t);
ssize_t __pread64_chk(int, void *, size_t, off64_t, size_t);
ssize_t __recv_chk(int, void *, size_t, size_t, int);
ssize_t __recvfrom_chk(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
int __open_2(const char *, int);
int __open64_2(const char *, int);
int __openat_2(int, const char *, int);
int __openat64_2(int, const char *, int);

/* The real functions, looked up by the constructor below (hooks.h, AG_REAL_DECLARE): an
 * application's signal handler may call read, write, close or fcntl. */
#define IO_FUNCS(X)                                                                                \
    X(read) X(write) X(pread) X(pread64) X(pwrite) X(pwrite64) X(readv) X(writev) X(recv)         \
    X(recvfrom) X(recvmsg) X(send) X(sendto) X(sendmsg) X(connect) X(accept) X(accept4) X(fsync)  \
    X(fdatasync) X(__read_chk) X(__pread_chk) X(__pread64_chk) X(__recv_chk) X(__recvfrom_chk)    \
    X(open) X(open64) X(openat) X(openat64) X(__open_2) X(__open64_2) X(__openat_2)               \
    X(__openat64_2) X(close) X(dup2) X(dup3) X(dup) X(socket) X(socketpair) X(pipe) X(pipe2)      \
    X(eventfd) X(fcntl) X(ioctl)
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 28)
#define IO_FUNCS_228(X) X(fcntl64)
#else
#define IO_FUNCS_228(X)
#endif
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
#define IO_FUNCS_234(X) X(close_range) X(closefrom)
#else
#define IO_FUNCS_234(X)
#endif
IO_FUNCS(AG_REAL_DECLARE)
IO_FUNCS_228(AG_REAL_DECLARE)
IO_FUNCS_234(AG_REAL_DECLARE)
__attribute__((constructor(102))) static void io_init(void) {
    ag_hook_guard++;
    IO_FUNCS(AG_REAL_LOOKUP)
    IO_FUNCS_228(AG_REAL_LOOKUP)
    IO_FUNCS_234(AG_REAL_LOOKUP)
    ag_hook_guard--;
}

/* Times call (returning ret_t) on fd: a plain forward when off or when weight (evaluated
 * only when on) is 0; TSC ticks when calibrated. A timed call is marked as blocking for the
 * wall sampler (hooks.h) and what it records carries the weight; real is the resolved
 * function. The weights: NB(fd) skips calls on a descriptor known non-blocking but for one in
 * ~AG_NB_CHECK, timed with that weight (fdnb.c); calls with MSG_DONTWAIT are skipped too
 * (they cannot wait either: DATA_HOOK); fsync and fdatasync (files) are always timed (1). */
#define NB(fd) ag_fd_nb_weight(fd)
#define TIMED(ret_t, kind, fd, weight, call)                                                       \
    do {                                                                                           \
        if (!io_on())                                                                              \
            return call;                                                                           \
        uint32_t w_ = (weight);                                                                    \
        if (!w_)                                                                                   \
            return call;                                                                           \
        uint64_t sc_ = atomic_load_explicit(&ag_tsc_scale, memory_order_relaxed);                  \
        if (AG_LIKELY(sc_)) {                                                                      \
            ag_thread_t *bt_ = AG_BLK_BEGIN(real);                                                 \
            uint64_t t0_ = ag_tsc();                                                               \
            ret_t r_ = call;                                                                       \
            uint64_t d_ = ag_tsc() - t0_;                                                          \
            ag_blk_end(bt_);                                                                       \
            if (AG_UNLIKELY(d_ >= atomic_load_explicit(&ag_io_floor_ticks, memory_order_relaxed))) \
                io_report((fd), (kind), (uint64_t)((unsigned __int128)d_ * sc_ >> 32),             \
                          (ssize_t)r_, w_);                                                        \
            return r_;                                                                             \
        }                                                                                          \
        ag_thread_t *bt_ = AG_BLK_BEGIN(real);                                                     \
        uint64_t t0_ = ag_hook_clock();                                                            \
        ret_t r_ = call;                                                                           \
        uint64_t d_ = ag_hook_clock() - t0_;                                                       \
        ag_blk_end(bt_);                                                                           \
        if (AG_UNLIKELY(d_ >= ag_hcfg.io_floor_ns))                                                \
            io_report((fd), (kind), d_, (ssize_t)r_, w_);                                          \
        return r_;                                                                                 \
    } while (0)

/* A data call (read, write, send, recv and their kin): the exported function is the fast path
 * only -- I/O off, or a descriptor known non-blocking between two checks: a few loads, a TLS
 * decrement and a tail jump to the real function, with no frame (every other case is a tail
 * call to name_slow, so the compiler needs no prologue on the way through; redis makes one
 * read and one write per request). name_slow, reached by that tail jump, is the hook frame of
 * a timed call (AG_BLK_BEGIN's frame returns to the application); its symbol is "name.slow",
 * which symbols.c names as the real function, as GCC's "name.cold" parts. fl: the call's
 * flags (MSG_DONTWAIT: never timed), 0 for calls without. */
#define DATA_HOOK(name, kind, params, args, fl)                                                    \
    static ssize_t name##_slow params __asm__(#name ".slow");                                      \
    static __attribute__((noinline)) AG_NO_TSAN ssize_t name##_slow params {                       \
        AG_RESOLVE(real, name);                                                                    \
        TIMED(ssize_t, kind, fd, (fl) & MSG_DONTWAIT ? 0u : ag_fd_nb_weight_after(fd), real args); \
    }                                                                                              \
    AG_EXPORT AG_HOT AG_NO_TSAN ssize_t name params {                                              \
        __typeof__(name) *real = real_##name;                                                      \
        if (AG_LIKELY(real) && (!io_on() || ((fl) & MSG_DONTWAIT) || ag_fd_nb_pass(fd)))           \
            return real args;                                                                      \
        return name##_slow args;                                                                   \
    }

DATA_HOOK(read, CM_IO_READ, (int fd, void *buf, size_t n), (fd, buf, n), 0)
DATA_HOOK(write, CM_IO_WRITE, (int fd, const void *buf, size_t n), (fd, buf, n), 0)
DATA_HOOK(pread, CM_IO_READ, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off), 0)
DATA_HOOK(pread64, CM_IO_READ, (int fd, void *buf, size_t n, off64_t off), (fd, buf, n, off), 0)
DATA_HOOK(pwrite, CM_IO_WRITE, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off), 0)
DATA_HOOK(pwrite64, CM_IO_WRITE,
          (int fd, const void *buf, size_t n, off64_t off),
          (fd, buf, n, off), 0)
DATA_HOOK(readv, CM_IO_READ, (int fd, const struct iovec *iov, int n), (fd, iov, n), 0)
DATA_HOOK(writev, CM_IO_WRITE, (int fd, const struct iovec *iov, int n), (fd, iov, n), 0)
DATA_HOOK(recv, CM_IO_READ, (int fd, void *buf, size_t n, int fl), (fd, buf, n, fl), fl)
DATA_HOOK(recvfrom, CM_IO_READ,
          (int fd, void *buf, size_t n, int fl, struct sockaddr *a, socklen_t *al),
          (fd, buf, n, fl, a, al), fl)
DATA_HOOK(recvmsg, CM_IO_READ, (int fd, struct msghdr *m, int fl), (fd, m, fl), fl)
DATA_HOOK(send, CM_IO_WRITE, (int fd, const void *buf, size_t n, int fl), (fd, buf, n, fl), fl)
DATA_HOOK(sendto, CM_IO_WRITE,
          (int fd, const void *buf, size_t n, int fl, const struct sockaddr *a, socklen_t al),
          (fd, buf, n, fl, a, al), fl)
DATA_HOOK(sendmsg, CM_IO_WRITE, (int fd, const struct msghdr *m, int fl), (fd, m, fl), fl)
AG_EXPORT AG_NO_TSAN int connect(int fd, const struct sockaddr *a, socklen_t al) {
    AG_RESOLVE(real, connect);
    TIMED(int, CM_IO_CONNECT, fd, NB(fd), real(fd, a, al));
}
/* A descriptor made by a hooked call: its description cache entries (a closed fd's number
 * reused) are forgotten, its blocking state set (nonblocking: known from the call's flags)
 * or, with nonblocking < 0, left to be learnt at its first I/O call (fdnb.c). */
static inline void made(int fd, int nonblocking) {
    ag_fd_forget(fd);
    if (nonblocking < 0)
        ag_fd_nb_forget(fd);
    else
        ag_fd_nb_set(fd, nonblocking);
}
/* accept's result never inherits O_NONBLOCK (Linux); accept4's has it with SOCK_NONBLOCK */
static inline int accepted(int r, int nonblocking) {
    if (r >= 0)
        made(r, nonblocking);
    return r;
}
AG_EXPORT AG_NO_TSAN int accept(int fd, struct sockaddr *a, socklen_t *al) {
    AG_RESOLVE(real, accept);
    TIMED(int, CM_IO_ACCEPT, fd, NB(fd), accepted(real(fd, a, al), 0));
}
AG_EXPORT AG_NO_TSAN int accept4(int fd, struct sockaddr *a, socklen_t *al, int fl) {
    AG_RESOLVE(real, accept4);
    TIMED(int, CM_IO_ACCEPT, fd, NB(fd), accepted(real(fd, a, al, fl), (fl & SOCK_NONBLOCK) != 0));
}
AG_EXPORT AG_NO_TSAN int fsync(int fd) {
    AG_RESOLVE(real, fsync);
    TIMED(int, CM_IO_SYNC, fd, 1, real(fd));
}
AG_EXPORT AG_NO_TSAN int fdatasync(int fd) {
    AG_RESOLVE(real, fdatasync);
    TIMED(int, CM_IO_SYNC, fd, 1, real(fd));
}

/* _FORTIFY_SOURCE builds (Debian's default for packages) call the checked variants (declared
 * above) instead of read/pread/recv/recvfrom/open when the buffer size is known at compile
 * time. */

DATA_HOOK(__read_chk, CM_IO_READ, (int fd, void *buf, size_t n, size_t len), (fd, buf, n, len), 0)
DATA_HOOK(__pread_chk, CM_IO_READ,
          (int fd, void *buf, size_t n, off_t off, size_t len),
          (fd, buf, n, off, len), 0)
DATA_HOOK(__pread64_chk, CM_IO_READ,
          (int fd, void *buf, size_t n, off64_t off, size_t len),
          (fd, buf, n, off, len), 0)
DATA_HOOK(__recv_chk, CM_IO_READ,
          (int fd, void *buf, size_t n, size_t len, int fl),
          (fd, buf, n, len, fl), fl)
DATA_HOOK(__recvfrom_chk, CM_IO_READ,
          (int fd, void *buf, size_t n, size_t len, int fl, struct sockaddr *a, socklen_t *al),
          (fd, buf, n, len, fl, a, al), fl)

/* The variadic argument after last, of type. */
#define VA_NEXT(last, type)                                                                        \
    ({                                                                                             \
        va_list ap_;                                                                               \
        va_start(ap_, last);                                                                       \
        type v_ = va_arg(ap_, type);                                                               \
        va_end(ap_);                                                                               \
        v_;                                                                                        \
    })

/* open: the result is the fd (blocking unless opened O_NONBLOCK: then the file type decides,
 * fdnb.c); the event carries no fd (-1) and bytes 0. */
/* The mode argument of a variadic open after flags (0 when flags take none). */
#define OPEN_MODE(flags)                                                                           \
    (((flags) & O_CREAT) || ((flags) & __O_TMPFILE) == __O_TMPFILE ? (mode_t)VA_NEXT(flags, int)   \
                                                                   : 0)
#define OPEN_TIMED(call)                                                                           \
    do {                                                                                           \
        if (!io_on())                                                                              \
            return call;                                                                           \
        uint64_t t0_ = ag_hook_clock();                                                            \
        int r_ = call;                                                                             \
        uint64_t d_ = ag_hook_clock() - t0_;                                                       \
        if (r_ >= 0)                                                                               \
            made(r_, flags & O_NONBLOCK ? -1 : 0);                                                 \
        if (AG_UNLIKELY(d_ >= ag_hcfg.io_floor_ns))                                                \
            io_report(r_ >= 0 ? r_ : -1, CM_IO_OPEN, d_, 0, 1);                                    \
        return r_;                                                                                 \
    } while (0)

AG_EXPORT AG_NO_TSAN int open(const char *path, int flags, ...) {
    mode_t mode = OPEN_MODE(flags);
    AG_RESOLVE(real, open);
    OPEN_TIMED(real(path, flags, mode));
}
AG_EXPORT AG_NO_TSAN int open64(const char *path, int flags, ...) {
    mode_t mode = OPEN_MODE(flags);
    AG_RESOLVE(real, open64);
    OPEN_TIMED(real(path, flags, mode));
}
AG_EXPORT AG_NO_TSAN int openat(int dfd, const char *path, int flags, ...) {
    mode_t mode = OPEN_MODE(flags);
    AG_RESOLVE(real, openat);
    OPEN_TIMED(real(dfd, path, flags, mode));
}
AG_EXPORT AG_NO_TSAN int openat64(int dfd, const char *path, int flags, ...) {
    mode_t mode = OPEN_MODE(flags);
    AG_RESOLVE(real, openat64);
    OPEN_TIMED(real(dfd, path, flags, mode));
}

AG_EXPORT AG_NO_TSAN int __open_2(const char *path, int flags) {
    AG_RESOLVE(real, __open_2);
    OPEN_TIMED(real(path, flags));
}
AG_EXPORT AG_NO_TSAN int __open64_2(const char *path, int flags) {
    AG_RESOLVE(real, __open64_2);
    OPEN_TIMED(real(path, flags));
}
AG_EXPORT AG_NO_TSAN int __openat_2(int dfd, const char *path, int flags) {
    AG_RESOLVE(real, __openat_2);
    OPEN_TIMED(real(dfd, path, flags));
}
AG_EXPORT AG_NO_TSAN int __openat64_2(int dfd, const char *path, int flags) {
    AG_RESOLVE(real, __openat64_2);
    OPEN_TIMED(real(dfd, path, flags));
}

/* ---- descriptor bookkeeping only (no timing): the description cache (fdinfo.c) and the
 * blocking state (fdnb.c) of the numbers these calls make, close or change. Always done, also
 * with the hooks off or the guard set (a byte store or two): an entry must never outlive its
 * descriptor. errno is what the real call left. ---- */

AG_EXPORT AG_NO_TSAN int close(int fd) {
    AG_RESOLVE(real, close);
    ag_fd_forget(fd);
    int r = real(fd);
    ag_fd_nb_forget(fd); /* after: a learner racing the close would keep the old state */
    return r;
}
AG_EXPORT AG_NO_TSAN int dup2(int a, int b) {
    AG_RESOLVE(real, dup2);
    ag_fd_forget(b);
    int r = real(a, b);
    if (r >= 0)
        ag_fd_nb_forget(r);
    return r;
}
AG_EXPORT AG_NO_TSAN int dup3(int a, int b, int fl) {
    AG_RESOLVE(real, dup3);
    ag_fd_forget(b);
    int r = real(a, b, fl);
    if (r >= 0)
        ag_fd_nb_forget(r);
    return r;
}
AG_EXPORT AG_NO_TSAN int dup(int a) {
    AG_RESOLVE(real, dup);
    int r = real(a);
    if (r >= 0)
        made(r, -1);
    return r;
}
AG_EXPORT AG_NO_TSAN int socket(int domain, int type, int proto) {
    AG_RESOLVE(real, socket);
    int r = real(domain, type, proto);
    if (r >= 0)
        made(r, (type & SOCK_NONBLOCK) != 0);
    return r;
}
AG_EXPORT AG_NO_TSAN int socketpair(int domain, int type, int proto, int sv[2]) {
    AG_RESOLVE(real, socketpair);
    int r = real(domain, type, proto, sv);
    if (r == 0) {
        made(sv[0], (type & SOCK_NONBLOCK) != 0);
        made(sv[1], (type & SOCK_NONBLOCK) != 0);
    }
    return r;
}
AG_EXPORT AG_NO_TSAN int pipe(int p[2]) {
    AG_RESOLVE(real, pipe);
    int r = real(p);
    if (r == 0) {
        made(p[0], 0);
        made(p[1], 0);
    }
    return r;
}
AG_EXPORT AG_NO_TSAN int pipe2(int p[2], int fl) {
    AG_RESOLVE(real, pipe2);
    int r = real(p, fl);
    if (r == 0) {
        made(p[0], (fl & O_NONBLOCK) != 0);
        made(p[1], (fl & O_NONBLOCK) != 0);
    }
    return r;
}
AG_EXPORT AG_NO_TSAN int eventfd(unsigned count, int fl) {
    AG_RESOLVE(real, eventfd);
    int r = real(count, fl);
    if (r >= 0)
        made(r, (fl & EFD_NONBLOCK) != 0);
    return r;
}

/* fcntl: F_SETFL sets or clears O_NONBLOCK on the description; F_DUPFD* make a number. The
 * third argument is forwarded as glibc reads it (a pointer-sized va_arg, whatever cmd). */
static int fcntl_after(int fd, int cmd, void *arg, int r) {
    if (r < 0)
        return r;
    if (cmd == F_SETFL)
        ag_fd_nb_setfl(fd, ((int)(intptr_t)arg & O_NONBLOCK) != 0);
    else if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
        made(r, -1);
    return r;
}
AG_EXPORT AG_NO_TSAN int fcntl(int fd, int cmd, ...) {
    void *arg = VA_NEXT(cmd, void *);
    AG_RESOLVE(real, fcntl);
    return fcntl_after(fd, cmd, arg, real(fd, cmd, arg));
}
#ifdef __GLIBC__
#if __GLIBC_PREREQ(2, 28)
AG_EXPORT AG_NO_TSAN int fcntl64(int fd, int cmd, ...) {
    void *arg = VA_NEXT(cmd, void *);
    AG_RESOLVE(real, fcntl64);
    return fcntl_after(fd, cmd, arg, real(fd, cmd, arg));
}
#endif
#endif
/* ioctl: FIONBIO sets or clears O_NONBLOCK (libuv's way) */
AG_EXPORT AG_NO_TSAN int ioctl(int fd, unsigned long req, ...) {
    void *arg = VA_NEXT(req, void *);
    AG_RESOLVE(real, ioctl);
    int r = real(fd, req, arg);
    if (req == FIONBIO && r == 0 && arg)
        ag_fd_nb_setfl(fd, *(const int *)arg != 0);
    return r;
}

#ifdef __GLIBC__
#if __GLIBC_PREREQ(2, 34)
static void forget_from(unsigned lo, unsigned hi) {
    for (unsigned fd = lo; fd <= hi && fd < AG_NB_FDS; fd++)
        ag_fd_forget((int)fd);
    ag_fd_nb_forget_range(lo, hi);
}
AG_EXPORT AG_NO_TSAN int close_range(unsigned lo, unsigned hi, int fl) {
    AG_RESOLVE(real, close_range);
    int r = real(lo, hi, fl);
    if (r == 0 && !(fl & CLOSE_RANGE_CLOEXEC))
        forget_from(lo, hi);
    return r;
}
AG_EXPORT AG_NO_TSAN void closefrom(int lo) {
    AG_RESOLVE(real, closefrom);
    real(lo);
    if (lo >= 0)
        forget_from((unsigned)lo, ~0u);
}
#endif
#endif
