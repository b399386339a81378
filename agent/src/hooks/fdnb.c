/* Which descriptors are non-blocking, for the I/O hooks (hook_io.c): a call on a descriptor
 * whose open file description is O_NONBLOCK (a socket, pipe, FIFO, character device or
 * anonymous inode such as an eventfd) cannot wait -- it fails with EAGAIN instead -- so all
 * it costs is CPU, which the CPU sampler sees. Timing it (two clock reads, the wall
 * sampler's blocked mark: ~45 ns of a ~300 ns read on our VMs) is pure overhead, and event
 * loops (redis-server, nginx, libuv) do nearly all their I/O that way.
 *
 * State per fd < AG_NB_FDS, one byte: the low two bits AG_NB_UNKNOWN (0, the start),
 * AG_NB_BLOCKING or AG_NB_NONBLOCK, the high six a generation bumped by every forget. Larger
 * fds are always timed. The state comes from:
 *   - what the hooks see create a descriptor: socket/socketpair/accept4 with SOCK_NONBLOCK,
 *     pipe2 with O_NONBLOCK, eventfd with EFD_NONBLOCK (non-blocking); accept, pipe, open
 *     without O_NONBLOCK, and the same calls without the flag (blocking);
 *   - otherwise (UNKNOWN: open with O_NONBLOCK, dup, fcntl(F_SETFL), ioctl(FIONBIO), a number
 *     made by a call we do not interpose) one fcntl(F_GETFL) and one fstat at the first I/O
 *     call: NONBLOCK when O_NONBLOCK is set and the file type honours it, not for a regular
 *     file, block device or directory (there O_NONBLOCK does not stop a read from waiting for
 *     the disk).
 * Forgotten (UNKNOWN, generation + 1) by close/dup2/dup3/close_range/closefrom, and by
 * F_SETFL/FIONBIO on the fd; one that clears O_NONBLOCK on an fd not known blocking forgets
 * every non-blocking entry (a dup shares the description, so its flags changed too).
 * Learning stores with a CAS from the byte read before its system calls, so a forget in
 * between (another thread closed the number and made a new descriptor under it) wins.
 *
 * Never hiding a wait: the flags belong to the description, which another process (after
 * fork, or one sent over SCM_RIGHTS) or a raw system call can change behind our back, and a
 * number closed inside libc (fclose) may come back from a creator we do not interpose with a
 * stale entry. So a call on a NONBLOCK fd is still timed with probability 1/AG_NB_CHECK (a
 * per-thread geometric countdown: memoryless, like io_admit's), and what such a checked call
 * records carries weight AG_NB_CHECK, so I/O totals stay unbiased; a checked call that took
 * at least the I/O floor has the kernel asked again at once (ag_fd_nb_recheck from
 * io_report). A descriptor made blocking behind our back is therefore timed again after
 * ~AG_NB_CHECK of its calls that waited, and those waits are estimated by the checked call's
 * weight. Calls skipped this way are no drop (nearly all of them are far below the floor,
 * which records nothing anyway).
 * The re-asking is rate-limited per thread (AG_NB_RECHECK_NS): a non-blocking call exceeds
 * the floor without waiting whenever its thread is preempted or copies much, and on a shared
 * core that is most checks: redis-server beside another server on its core re-learnt (fcntl
 * + fstat) after ~1 in 18 of its reads and writes, 1/8 more system calls. A re-ask skipped
 * costs no bias (the checked calls keep their weight), only the delay before a descriptor
 * made blocking is timed in full again.
 *
 * Contract: app context and signal handlers (an application's handler may do I/O): relaxed
 * and CAS byte atomics, raw system calls, no lock, no allocation, errno preserved. No system
 * call once the program installs a seccomp filter (ag_sandboxed): UNKNOWN fds stay timed.
 */
#include "hooks.h"
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Atomic uint8_t ag_nb_map[AG_NB_FDS];
AG_TLS int32_t ag_nb_left;
static _Atomic int32_t g_hi = -1; /* largest fd ever marked NONBLOCK */

static inline uint8_t nb_byte(uint8_t old, uint8_t state) {
    return (uint8_t)(((old + 4u) & ~3u) | state);
}

/* g_hi = max(g_hi, fd): the range nb_cleared scans */
static void nb_raise_hi(int fd) {
    int32_t hi = atomic_load_explicit(&g_hi, memory_order_relaxed);
    while (fd > hi && !atomic_compare_exchange_weak_explicit(&g_hi, &hi, fd, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

/* Sets fd's state, bumping the generation (a learner that read the old byte loses). */
static void nb_store(int fd, uint8_t state) {
    if ((unsigned)fd >= AG_NB_FDS)
        return;
    if (state == AG_NB_NONBLOCK)
        nb_raise_hi(fd);
    uint8_t old = atomic_load_explicit(&ag_nb_map[fd], memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&ag_nb_map[fd], &old, nb_byte(old, state),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void ag_fd_nb_set(int fd, int nonblocking) {
    nb_store(fd, nonblocking ? AG_NB_NONBLOCK : AG_NB_BLOCKING);
}

void ag_fd_nb_forget(int fd) { nb_store(fd, AG_NB_UNKNOWN); }

void ag_fd_nb_forget_range(unsigned lo, unsigned hi) {
    if (hi >= AG_NB_FDS)
        hi = AG_NB_FDS - 1;
    for (unsigned fd = lo; fd <= hi; fd++)
        if (atomic_load_explicit(&ag_nb_map[fd], memory_order_relaxed) & 3)
            nb_store((int)fd, AG_NB_UNKNOWN);
}

/* Some description lost O_NONBLOCK: no NONBLOCK entry can be trusted (dups share it), and
 * UNKNOWN ones are bumped too (a learner may have read the old flags). */
static void nb_cleared(void) {
    int32_t hi = atomic_load_explicit(&g_hi, memory_order_relaxed);
    for (int32_t fd = 0; fd <= hi && fd < AG_NB_FDS; fd++)
        if ((atomic_load_explicit(&ag_nb_map[fd], memory_order_relaxed) & 3) != AG_NB_BLOCKING)
            nb_store(fd, AG_NB_UNKNOWN);
}

void ag_fd_nb_setfl(int fd, int nonblocking) {
    if (!nonblocking && ((unsigned)fd >= AG_NB_FDS ||
                         (atomic_load_explicit(&ag_nb_map[fd], memory_order_relaxed) & 3) !=
                             AG_NB_BLOCKING))
        nb_cleared();
    if (nonblocking)
        nb_store(fd, AG_NB_UNKNOWN); /* the file type decides: learnt at the next call */
    else
        nb_store(fd, AG_NB_BLOCKING);
}

uint32_t ag_fd_nb_learn(int fd) {
    if ((unsigned)fd >= AG_NB_FDS)
        return AG_NB_BLOCKING;
    int saved = errno;
    uint8_t old = atomic_load_explicit(&ag_nb_map[fd], memory_order_relaxed);
    if (old & 3) {
        errno = saved;
        return old & 3u;
    }
    /* a seccomp filter may forbid both calls (sandbox.c): timed, as before any learning */
    if (atomic_load_explicit(&ag_sandboxed, memory_order_relaxed)) {
        errno = saved;
        return AG_NB_UNKNOWN;
    }
    uint8_t state = AG_NB_BLOCKING;
    long fl = syscall(SYS_fcntl, fd, F_GETFL);
    if (fl < 0) { /* not open (EBADF): the call fails as well; ask again next time */
        errno = saved;
        return AG_NB_UNKNOWN;
    }
    struct stat st;
    if ((fl & O_NONBLOCK) && fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) &&
        !S_ISBLK(st.st_mode) && !S_ISDIR(st.st_mode))
        state = AG_NB_NONBLOCK;
    errno = saved;
    if (state == AG_NB_NONBLOCK)
        nb_raise_hi(fd);
    /* same generation, state set; a forget since our read wins */
    if (atomic_compare_exchange_strong_explicit(&ag_nb_map[fd], &old, (uint8_t)(old | state),
                                                memory_order_relaxed, memory_order_relaxed))
        return state;
    return AG_NB_UNKNOWN; /* timed: the safe answer */
}

/* Geometric gap of mean AG_NB_CHECK = 16, exactly and without a logarithm: each 4-bit nibble
 * of a random word is one trial that succeeds (is 0) with probability 1/16; the gap is the
 * index of the first zero nibble (the lowest flag of the classic has-zero test is exact:
 * borrows only run upwards from a zero nibble), 16 more for every word without one. */
_Static_assert(AG_NB_CHECK == 16, "nb_draw draws nibbles: AG_NB_CHECK must be 16");
static int32_t nb_draw(void) {
    for (int32_t k = 1;; k += 16) {
        uint64_t x = ag_hook_rand();
        uint64_t z = (x - 0x1111111111111111ull) & ~x & 0x8888888888888888ull;
        if (z)
            return k + (int32_t)(__builtin_ctzll(z) >> 2);
        if (k > 1000000000)
            return k;
    }
}

#define AG_NB_RECHECK_NS 50000000ull /* a thread re-asks at most 20 times a second */
static AG_TLS uint64_t t_recheck_ns;

void ag_fd_nb_recheck(int fd) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no system call, errno untouched */
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (t_recheck_ns && now - t_recheck_ns < AG_NB_RECHECK_NS)
        return;
    t_recheck_ns = now;
    ag_fd_nb_forget(fd);
    ag_fd_nb_learn(fd);
}

uint32_t ag_fd_nb_weight_after(int fd) {
    if ((unsigned)fd >= AG_NB_FDS)
        return 1;
    uint32_t s = atomic_load_explicit(&ag_nb_map[fd], memory_order_relaxed) & 3u;
    if (s == AG_NB_UNKNOWN) { /* the pass did not count this call down */
        s = ag_fd_nb_learn(fd);
        if (s == AG_NB_NONBLOCK && --ag_nb_left > 0)
            return 0;
    }
    if (s != AG_NB_NONBLOCK)
        return 1;
    /* NONBLOCK: counted down to 0 (or another thread made fd NONBLOCK after the pass looked,
     * with the countdown still running) */
    return ag_nb_left > 0 ? 0 : ag_fd_nb_due();
}

uint32_t ag_fd_nb_due(void) {
    if (ag_nb_left < 0) { /* the thread's first call on a NONBLOCK fd: the start of a gap */
        int32_t d = nb_draw();
        if (d > 1) {
            ag_nb_left = d - 1;
            return 0;
        }
    }
    ag_nb_left = nb_draw();
    return AG_NB_CHECK;
}
