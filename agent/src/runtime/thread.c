/* Thread registry: one slot per sampled thread (tid, stack bounds, ring, CPU-time timer).
 *
 * How threads get in:
 *   - the thread itself (constructor for the main thread; the pthread_create wrapper below for
 *     new threads; any public API call): exact stack bounds from pthread_getattr_np, a TLS
 *     pointer for the handler, and a pthread key whose destructor retires the slot at exit;
 *   - the background thread's scan of /proc/self/task (threads that existed before the agent
 *     was loaded, or were created where our pthread_create is not the one called, e.g. under
 *     sanitizers whose runtimes intercept it first): these "foreign" slots start without stack
 *     bounds; the handler reports the sp it saw and the scan looks it up in /proc/self/maps.
 *     Until then their samples are unwound later from a copy of their stack (defer.c).
 *
 * Locking: registry changes take g_lock (app and bg contexts only). The handler never locks:
 * it reads its slot through TLS, or searches slots by tid with atomic loads. Slots are reused
 * only after the thread is gone and its ring was drained (ag_thread_reap), and rings are never
 * unmapped while their thread can still run a handler.
 * fork: agent.c holds g_lock across fork (pthread_atfork) and the child reinitialises it.
 */
#include "sysfile.h"
#include "clock.h"
#include "ag_signal.h"
#include "record.h"
#include "context.h"
#include "agent.h"
#include "sandbox.h"
#include "sigroom.h"
#include "hooks.h"

#include "cm/log.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TLS __thread __attribute__((tls_model("initial-exec")))

ag_thread_t ag_threads[AG_MAX_THREADS];
static _Atomic uint32_t g_hw; /* slots in use are all below g_hw */
/* Slots claimed so far (written under g_lock): a scan retires only slots claimed before it
 * listed /proc/self/task, as a thread missing from an older list may just have started. */
static _Atomic uint64_t g_claims;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t g_key;
static int g_key_ok;
TLS ag_thread_t *ag_t_self;
#define t_self ag_t_self

/* AG_NO_TSAN: ag_thread_current calls it from the signal handler, possibly on a thread whose
 * TSan state is already gone (its exit path): instrumented code there reads a null pointer. */
AG_NO_TSAN static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

void ag_thread_lock(void) { pthread_mutex_lock(&g_lock); }

/* On an application thread (its start, its exit): a wait for the registry lock is the agent's
 * own, not the program's lock contention, so the lock hooks do not record it (1,100 threads
 * starting at once once showed as a 40 % lock-wait hotspot at start_thread). */
static void lock_on_app_thread(void) {
    ag_hook_guard++;
    pthread_mutex_lock(&g_lock);
    ag_hook_guard--;
}
void ag_thread_unlock(void) { pthread_mutex_unlock(&g_lock); }

static void thread_exit(void *arg);

void ag_thread_module_init(void) {
    if (!g_key_ok && pthread_key_create(&g_key, thread_exit) == 0)
        g_key_ok = 1;
}

static clockid_t tid_cpu_clock(pid_t tid) {
    /* The kernel's per-thread CPU clock id: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), the
     * same value pthread_getcpuclockid() returns, usable for threads we hold no pthread_t of. */
    return (clockid_t)(((unsigned)~tid << 3) | 4 /* per thread */ | 2 /* sched */);
}

/* (Re)arms t's CPU timer. Unbiased across period changes: the CPU the thread already spent
 * toward its next sample (old period - remaining) counts toward the new period, so the next
 * sample's weight (the new period) covers exactly the CPU since the previous sample. */
uint64_t ag_thread_cpu_ns(pid_t tid) {
    struct timespec ts;
    if (clock_gettime(tid_cpu_clock(tid), &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void arm_now(ag_thread_t *t, uint64_t period_ns);

static void arm(ag_thread_t *t, uint64_t period_ns) {
    if (!t->has_timer)
        return;
    /* Not a thread that blocks our signal (signal.c): it sets sig_blocked, then waits for
     * arming to drop (both seq_cst) before it disarms: an arm either ends before, or sees it. */
    atomic_store(&t->arming, 1);
    if (atomic_load(&t->sig_blocked)) {
        atomic_store(&t->arming, 0);
        return;
    }
    arm_now(t, period_ns);
    atomic_store(&t->arming, 0);
}

static void arm_now(ag_thread_t *t, uint64_t period_ns) {
    uint64_t old = atomic_load(&t->cpu_period_ns), value = period_ns;
    struct itimerspec cur;
    if (old && period_ns && timer_gettime(t->timer, &cur) == 0) {
        uint64_t rem = (uint64_t)cur.it_value.tv_sec * 1000000000u + (uint64_t)cur.it_value.tv_nsec;
        uint64_t spent = rem < old ? old - rem : 0;
        value = period_ns > spent + 1000 ? period_ns - spent : 1000;
    }
    struct itimerspec its;
    its.it_interval.tv_sec = (time_t)(period_ns / 1000000000u);
    its.it_interval.tv_nsec = (long)(period_ns % 1000000000u);
    its.it_value.tv_sec = (time_t)(value / 1000000000u);
    its.it_value.tv_nsec = (long)(value % 1000000000u);
    atomic_store(&t->cpu_period_ns, period_ns);
    timer_settime(t->timer, 0, &its, NULL);
}

/* The calling thread has just blocked (1) or unblocked (0) our signal (signal.c's mask
 * interposers): its timer is stopped, or started again at the period in force. Only system
 * calls and atomics: async-signal-safe. */
void ag_thread_sig_blocked(ag_thread_t *t, int blocked) {
    if (blocked) {
        atomic_store(&t->sig_blocked, 1);
        while (atomic_load(&t->arming))
            sched_yield();
        struct itimerspec off, left;
        memset(&off, 0, sizeof off);
        if (t->has_timer && timer_settime(t->timer, 0, &off, &left) == 0)
            t->blocked_left_ns = (uint64_t)left.it_value.tv_sec * 1000000000u +
                                 (uint64_t)left.it_value.tv_nsec;
        return;
    }
    atomic_store(&t->sig_blocked, 0);
    uint64_t p = atomic_load(&t->cpu_period_ns);
    if (!p) { /* never armed: it was born blocking ours */
        p = atomic_load_explicit(&ag.cpu_period_ns, memory_order_relaxed);
        atomic_store(&t->cpu_period_ns, p);
    }
    if (t->has_timer && p && ag.cfg.cpu_rate > 0) {
        /* where it stopped: a program (or a sanitizer runtime, around each signal it
         * delivers) that blocks every signal for a moment, often, loses no sample */
        uint64_t v = t->blocked_left_ns && t->blocked_left_ns <= p ? t->blocked_left_ns : p;
        struct itimerspec its;
        its.it_interval.tv_sec = (time_t)(p / 1000000000u);
        its.it_interval.tv_nsec = (long)(p % 1000000000u);
        its.it_value.tv_sec = (time_t)(v / 1000000000u);
        its.it_value.tv_nsec = (long)(v % 1000000000u);
        timer_settime(t->timer, 0, &its, NULL);
    }
}

static void timer_drop(ag_thread_t *t) {
    if (t->has_timer) {
        timer_delete(t->timer);
        ag_sigroom_give_timer();
    }
    t->has_timer = 0;
}

/* Whether the bg thread's first /proc scan is done: threads it finds later were created while
 * the agent ran (where a sanitizer's pthread_create runs instead of our wrapper), so all of
 * their CPU counts toward their first sample; the first scan's threads predate the agent. */
static int g_scanned_once;

static void timer_setup(ag_thread_t *t, pid_t tid, int from_thread_start) {
    if (!ag_sig)
        return;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev._sigev_un._tid = tid;
    sev.sigev_signo = ag_sig;
    sev.sigev_value.sival_ptr = AG_CPU_VALUE(t - ag_threads);
    /* Start of the CPU the first sample's weight covers (see the handler in signal.c). */
    atomic_store(&t->cpu_last_ns, from_thread_start ? 1 : ag_thread_cpu_ns(tid));
    if (!ag_sigroom_take_timer())
        return; /* RLIMIT_SIGPENDING: the room is the program's (sigroom.c) */
    if (timer_create(tid_cpu_clock(tid), &sev, &t->timer) != 0)
        ag_sigroom_give_timer();
    else {
        t->has_timer = 1;
        uint64_t p = atomic_load_explicit(&ag.cpu_period_ns, memory_order_relaxed);
        if (p && ag.cfg.cpu_rate > 0)
            arm(t, p);
    }
}

/* Under g_lock. Returns a slot claimed for tid, or NULL (DROP_THREAD_LIMIT counted). */
static ag_thread_t *slot_claim(pid_t tid) {
    for (uint32_t i = 0; i < AG_MAX_THREADS; i++) {
        ag_thread_t *t = &ag_threads[i];
        if (atomic_load(&t->state) != AG_TS_FREE)
            continue;
        if (!t->ring.buf && ag_ring_init(&t->ring, AG_RING_SIZE) != 0)
            return NULL;
        atomic_store(&t->tid, tid);
        atomic_store(&t->stack_lo, 0);
        atomic_store(&t->stack_hi, 0);
        atomic_store(&t->seen_sp, 0);
        atomic_store(&t->cpu_period_ns, 0);
        atomic_store(&t->cpu_last_ns, 0);
        t->busy = 0;
        t->handler_n = 0;
        t->has_timer = 0;
        t->self_registered = 0;
        atomic_store(&t->walking, 0);
        atomic_store(&t->wall_pending, 0);
        atomic_store(&t->foreign_tls, 0);
        atomic_store(&t->sig_blocked, 0);
        t->blocked_left_ns = 0;
        atomic_store(&t->exec_pending, 0);
        t->wall_last_ns = ag_now_mono();
        atomic_store(&t->wall_cpu_after, 0);
        t->wall_cpu_prev = 0;
        t->rd_acc = t->rd_phase = t->rd_wall_cpu = t->rd_wall_w = 0;
        t->rd_wall_last = t->wall_last_ns;
        t->chunk_seq = UINT64_MAX;
        atomic_store(&t->blk_seq, 0);
        t->ctx_addr = 0;
        t->claim_seq = atomic_fetch_add(&g_claims, 1) + 1;
        atomic_store(&t->state, AG_TS_CLAIMED);
        if (i + 1 > atomic_load(&g_hw))
            atomic_store(&g_hw, i + 1);
        return t;
    }
    ag_drop_count(0, CM_DROP_THREAD_LIMIT, 1);
    return NULL;
}

/* Under g_lock: the active slot of tid or NULL. */
static ag_thread_t *slot_find(pid_t tid) {
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *t = &ag_threads[i];
        int st = atomic_load(&t->state);
        if ((st == AG_TS_ACTIVE || st == AG_TS_CLAIMED) && atomic_load(&t->tid) == tid)
            return t;
    }
    return NULL;
}

/* ---- alternate signal stacks ----
 * Our handlers run with SA_ONSTACK. A thread that registers itself and has no alternate
 * stack gets one of ours (AG_ALTSTACK bytes above a guard page, mmap'ed: only the pages a
 * handler touches are ever committed), so a sample never lands on a thread's own stack: the
 * kernel's signal frame alone takes AT_MINSIGSTKSZ (3,632 bytes with AVX-512 here), more
 * than a thread with 2-3 KiB of stack left has. The application does not see it
 * (signal.c's sigaltstack interposer reports "disabled" while ours is installed) and replaces
 * it freely; released (disabled first, if still installed) when the thread exits. */
#define AG_ALTSTACK (32u << 10)

/* The kernel's sigaltstack, not the interposer (which hides ours from the application). */
static int altstack_sys(const stack_t *ss, stack_t *old) {
    return (int)syscall(SYS_sigaltstack, ss, old);
}

/* The calling thread's alternate stack of ours: its own TLS, not its registry slot, so that
 * only the thread that mapped it ever unmaps it, whatever becomes of the slot (a slot handed
 * to another thread while this one still ran on its stack cost a JVM a SIGSEGV). */
static TLS void *t_altstack;

static void altstack_setup(void) {
    stack_t cur;
    if (t_altstack || altstack_sys(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE))
        return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *m = mmap(NULL, AG_ALTSTACK + page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return;
    mprotect(m, page, PROT_NONE); /* guard: an overflow faults instead of writing below */
    stack_t ss = {.ss_sp = m + page, .ss_size = AG_ALTSTACK, .ss_flags = 0};
    if (altstack_sys(&ss, NULL) != 0) {
        munmap(m, AG_ALTSTACK + page);
        return;
    }
    t_altstack = m;
}

static void altstack_release(void) {
    if (!t_altstack)
        return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    stack_t cur;
    if (altstack_sys(NULL, &cur) != 0)
        return; /* cannot tell whether it is installed: keep it mapped */
    if (cur.ss_sp == (uint8_t *)t_altstack + page && !(cur.ss_flags & SS_DISABLE)) {
        if (cur.ss_flags & SS_ONSTACK)
            return; /* never: a thread does not exit from our handler; keep it mapped */
        stack_t off = {.ss_flags = SS_DISABLE};
        if (altstack_sys(&off, NULL) != 0)
            return;
    }
    munmap(t_altstack, AG_ALTSTACK + page);
    t_altstack = NULL;
}

/* Is sp on the calling thread's own alternate stack of ours? (signal.c's interposer) */
int ag_thread_altstack_is_ours(const void *sp) {
    return t_altstack && (const uint8_t *)sp == (uint8_t *)t_altstack +
                                                    (size_t)sysconf(_SC_PAGESIZE);
}

extern void *__libc_stack_end; /* ld.so: the main thread's stack end at process start */

/* The main thread's stack as pthread_getattr_np reports it, without its read and parse of the
 * whole /proc/self/maps (0.13 ms of CPU in every exec'd /bin/true under LD_PRELOAD,
 * bench-spawn): the top is the page above __libc_stack_end (as glibc says); the bottom is
 * RLIMIT_STACK below the end of the stack mapping (glibc: the same, or the end of the mapping
 * below if that is higher), and that end is right above the exec'd file's name
 * (AT_EXECFN) and one word, where the kernel copied them first. -1 (pthread_getattr_np then):
 * not the main thread's stack, an unlimited stack, any layout but that one. */
static int main_stack(pid_t tid, uintptr_t *lo, uintptr_t *hi) {
    const char *fn = (const char *)getauxval(AT_EXECFN);
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0), end = (uintptr_t)__libc_stack_end;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct rlimit rl;
    if (tid != getpid() || !fn || !end || getrlimit(RLIMIT_STACK, &rl) != 0 ||
        rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur < page)
        return -1;
    uintptr_t top = (uintptr_t)fn + strlen(fn) + 1 + sizeof(void *);
    uintptr_t h = (end & ~(page - 1)) + page, lim = (uintptr_t)rl.rlim_cur & ~(page - 1);
    if ((top & (page - 1)) || h > top || sp >= h || top - sp > lim)
        return -1;
    *lo = top - lim;
    *hi = h;
    return 0;
}

ag_thread_t *ag_thread_register_self(void) {
    if (t_self)
        return t_self;
    if (!atomic_load(&ag.running) || ag_unseen_child())
        return NULL;
    pid_t tid = gettid_();
    uintptr_t lo = 0, hi = 0;
    pthread_attr_t attr;
    if (main_stack(tid, &lo, &hi) == 0) {
        /* lo, hi set */
    } else if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *addr;
        size_t size;
        if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
            lo = (uintptr_t)addr;
            hi = lo + size;
        }
        pthread_attr_destroy(&attr);
    }
    lock_on_app_thread();
    ag_thread_t *t = slot_find(tid); /* maybe registered by the scan already */
    if (!t && (t = slot_claim(tid)) != NULL) {
        atomic_store(&t->sig_blocked, ag_signal_blocked_here()); /* an inherited mask */
        timer_setup(t, tid, 0);
    }
    if (t) {
        atomic_store(&t->stack_lo, lo);
        atomic_store(&t->stack_hi, hi);
        t->ctx_addr = ag_context_addr();
        t->self_registered = 1;
        altstack_setup();
        atomic_store(&t->state, AG_TS_ACTIVE);
        t_self = t;
        if (g_key_ok)
            pthread_setspecific(g_key, t);
    }
    pthread_mutex_unlock(&g_lock);
    return t;
}

/* pthread key destructor: the thread is exiting. */
static void thread_exit(void *arg) {
    ag_thread_t *t = arg;
    if (atomic_load(&ag_sandboxed) || /* a seccomp filter may forbid any syscall of ours */
        ag_unseen_child()) {          /* a child without our atfork: no lock of ours */
        t_self = NULL;
        return;
    }
    altstack_release();
    t_self = NULL;
    lock_on_app_thread();
    if (atomic_load(&t->tid) == gettid_() && atomic_load(&t->state) == AG_TS_ACTIVE) {
        timer_drop(t);
        atomic_store(&t->state, AG_TS_EXITED);
    }
    pthread_mutex_unlock(&g_lock);
    /* The bg thread may be reading this stack in place (wall.c: wall_from_blocked); it
     * saw EXITED or set walking first (both seq_cst), so once walking is 0 it has let go. */
    while (atomic_load(&t->walking))
        sched_yield();
}

AG_NO_TSAN ag_thread_t *ag_thread_current(void) {
    ag_thread_t *t = t_self;
    if (t)
        return t;
    pid_t tid = gettid_();
    uint32_t hw = atomic_load_explicit(&g_hw, memory_order_acquire);
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *s = &ag_threads[i];
        if (atomic_load_explicit(&s->tid, memory_order_relaxed) == tid &&
            atomic_load_explicit(&s->state, memory_order_acquire) == AG_TS_ACTIVE) {
            t_self = s; /* this thread's own TLS: valid until it exits */
            return s;
        }
    }
    return NULL;
}

typedef struct {
    uintptr_t sp, lo, hi;
    int found;
} map_find_t;

static int map_line(char *line, void *arg) {
    map_find_t *m = arg;
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx", &a, &b) == 2 && m->sp >= a && m->sp < b) {
        m->lo = a;
        m->hi = b;
        m->found = 1;
        return 1;
    }
    return 0;
}

static int find_stack_mapping(uintptr_t sp, uintptr_t *lo, uintptr_t *hi) {
    map_find_t m = {sp, 0, 0, 0};
    if (ag_read_lines("/proc/self/maps", map_line, &m) != 0 || !m.found)
        return -1;
    *lo = m.lo;
    *hi = m.hi;
    return 0;
}

typedef struct {
    pid_t *live;
    uint32_t n;
} task_list_t;

static int task_entry(const char *name, void *arg) {
    task_list_t *l = arg;
    if (name[0] >= '0' && name[0] <= '9')
        l->live[l->n++] = (pid_t)atoi(name);
    return l->n >= AG_MAX_THREADS;
}

int ag_thread_scan(int *registered) {
    int unresolved = 0;
    *registered = 0;
    pid_t live[AG_MAX_THREADS];
    task_list_t tl = {live, 0};
    /* Before the listing: a thread started after it, that registered itself before we take
     * g_lock, is alive though not listed (retired, its slot went to another thread while it
     * kept the slot in its TLS and ran on the slot's alternate stack). */
    uint64_t listed = atomic_load(&g_claims);
    if (ag_dir_each("/proc/self/task", task_entry, &tl) != 0)
        return 0;
    uint32_t nlive = tl.n;
    pid_t self = gettid_();
    pthread_mutex_lock(&g_lock);
    for (uint32_t i = 0; i < nlive; i++) {
        if (live[i] == self || slot_find(live[i]))
            continue; /* the agent's own thread is never sampled */
        ag_thread_t *t = slot_claim(live[i]);
        if (!t)
            break;
        timer_setup(t, live[i], g_scanned_once);
        atomic_store(&t->state, AG_TS_ACTIVE);
        ++*registered;
    }
    g_scanned_once = 1;
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *t = &ag_threads[i];
        if (atomic_load(&t->state) != AG_TS_ACTIVE)
            continue;
        pid_t tid = atomic_load(&t->tid);
        int alive = 0;
        for (uint32_t k = 0; k < nlive && !alive; k++)
            alive = live[k] == tid;
        if (!alive && t->claim_seq <= listed) {
            timer_drop(t);
            atomic_store(&t->state, AG_TS_EXITED);
            continue;
        }
        if (!alive)
            continue; /* claimed after the listing: the next scan decides */
        uintptr_t sp = atomic_load(&t->seen_sp), lo, hi;
        if (sp && !atomic_load(&t->stack_hi) && find_stack_mapping(sp, &lo, &hi) == 0) {
            atomic_store(&t->stack_lo, lo);
            atomic_store(&t->stack_hi, hi);
        }
        unresolved += !atomic_load(&t->stack_hi);
    }
    pthread_mutex_unlock(&g_lock);
    return unresolved;
}

/* A thread without stack bounds that has had a sample since (its sp recorded): a scan can
 * resolve it now. Lock-free reads of the slots' atomics, no system call: the bg thread asks
 * this on every wakeup instead of rescanning /proc for threads that never run. */
int ag_thread_resolvable(void) {
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *t = &ag_threads[i];
        if (atomic_load(&t->state) == AG_TS_ACTIVE && !atomic_load(&t->stack_hi) &&
            atomic_load(&t->seen_sp))
            return 1;
    }
    return 0;
}

void ag_thread_reap(void) {
    pthread_mutex_lock(&g_lock);
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *t = &ag_threads[i];
        if (atomic_load(&t->state) == AG_TS_EXITED && !ag_ring_peek(&t->ring)) {
            if (t->wall_rec) /* bg-owned; the lock orders this before the slot's next claim */
                t->wall_rec->len = 0;
            if (t->cpu_rec)
                t->cpu_rec->len = 0;
            atomic_store(&t->tid, 0);
            atomic_store(&t->state, AG_TS_FREE); /* ring kept mapped for the next thread */
        }
    }
    pthread_mutex_unlock(&g_lock);
}

uint32_t ag_thread_hw(void) { return atomic_load(&g_hw); }

int ag_thread_count(void) {
    int n = 0;
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++)
        n += atomic_load(&ag_threads[i].state) == AG_TS_ACTIVE;
    return n;
}

void ag_thread_set_cpu_period(uint64_t period_ns) {
    pthread_mutex_lock(&g_lock);
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++)
        if (atomic_load(&ag_threads[i].state) == AG_TS_ACTIVE)
            arm(&ag_threads[i], period_ns);
    pthread_mutex_unlock(&g_lock);
}

void ag_thread_disarm(ag_thread_t *t) {
    pthread_mutex_lock(&g_lock);
    timer_drop(t);
    pthread_mutex_unlock(&g_lock);
}

void ag_thread_stop_all(void) {
    pthread_mutex_lock(&g_lock);
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *t = &ag_threads[i];
        timer_drop(t);
    }
    pthread_mutex_unlock(&g_lock);
}

void ag_thread_stop_all_try(void) {
    if (pthread_mutex_trylock(&g_lock) != 0)
        return; /* a give-up from a handler on its holder: the handlers forward (not running) */
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++)
        timer_drop(&ag_threads[i]);
    pthread_mutex_unlock(&g_lock);
}

void ag_thread_after_fork_child(void) {
    pthread_mutex_init(&g_lock, NULL);
    ag_sigroom_fork_child();
    /* Timers are not inherited; the parent's other threads do not exist here; undrained
     * records belong to the parent's profile (the parent ships them). */
    pid_t tid = gettid_();
    uint32_t hw = atomic_load(&g_hw);
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *t = &ag_threads[i];
        t->has_timer = 0;
        atomic_store(&t->cpu_period_ns, 0);
        atomic_store(&t->ring.head, 0);
        atomic_store(&t->ring.tail, 0);
        if (t != t_self) { /* (its altstack, the parent's thread's TLS: stays mapped here) */
            atomic_store(&t->tid, 0);
            atomic_store(&t->state, AG_TS_FREE);
        }
    }
    if (t_self) {
        atomic_store(&t_self->tid, tid);
        t_self->wall_last_ns = t_self->rd_wall_last = ag_now_mono();
        if (atomic_load(&ag.running))
            timer_setup(t_self, tid, 0);
    }
}

/* ---- pthread_create wrapper ---- */

typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *),
                                 void *);

typedef struct {
    void *(*fn)(void *);
    void *arg;
} trampoline_t;

static void *trampoline(void *p) {
    trampoline_t tr = *(trampoline_t *)p;
    free(p);
    ag_thread_register_self();
    return tr.fn(tr.arg);
}

/* Interposes libc's pthread_create (LD_PRELOAD, or linked ahead of libc) so new threads
 * register themselves with exact stack bounds before running any code of theirs. */
AG_NO_TSAN static pthread_create_fn real_create(void) {
    return AG_NEXT_FN(pthread_create_fn, "pthread_create");
}

static TLS int t_raw_create;

extern int ag_pthread_create_self(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)
    __attribute__((alias("pthread_create"), AG_COPY_ATTRS(pthread_create) visibility("hidden")));

/* Is our wrapper the pthread_create programs call? Not when a sanitizer runtime intercepts
 * first: its thread start routine must run before any instrumented code of ours, so we pass
 * through and the bg thread's /proc scan registers those threads instead. */
AG_NO_TSAN static int wrapper_in_front(void) {
    static _Atomic int front = -1;
    int f = atomic_load(&front);
    if (f < 0) {
        f = dlsym(RTLD_DEFAULT, "pthread_create") == (void *)ag_pthread_create_self;
        atomic_store(&front, f);
    }
    return f;
}

/* Both lookups at load time, not on the first pthread_create: a child made by _Fork (no atfork
 * handlers) inherits ld.so's lock as the fork found it, possibly held by the bg thread's
 * dl_iterate_phdr, and a dlsym there waited forever (hostile.raw_fork, 1 hang in 15 runs). */
__attribute__((constructor(102))) static void create_init(void) {
    real_create();
    wrapper_in_front();
}

/* Goes through the global pthread_create (a sanitizer's interceptor must see the thread),
 * which may be our wrapper: t_raw_create tells it not to register the new thread. */
int ag_thread_create_raw(pthread_t *th, void *(*fn)(void *), void *arg) {
    /* Born with every signal blocked but ours (glibc keeps its own SIGCANCEL and SIGSETXID
     * deliverable whatever the mask): a process-directed signal is the application's and must
     * never run on our thread, not even before the thread could block it itself. */
    sigset_t all, prev;
    sigfillset(&all);
    if (ag_sig)
        sigdelset(&all, ag_sig); /* the bg thread's signal-cost calibration signals itself */
    pthread_sigmask(SIG_SETMASK, &all, &prev);
    t_raw_create = 1;
    int rc = pthread_create(th, NULL, fn, arg);
    t_raw_create = 0;
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    return rc;
}

AG_NO_TSAN __attribute__((visibility("default"))) int pthread_create(pthread_t *th,
                                                          const pthread_attr_t *attr,
                                                          void *(*fn)(void *), void *arg) {
    pthread_create_fn r = real_create();
    if (!r)
        return EAGAIN;
    if (!atomic_load(&ag.running) || t_raw_create || !wrapper_in_front())
        return r(th, attr, fn, arg);
    trampoline_t *tr = malloc(sizeof *tr);
    if (!tr)
        return r(th, attr, fn, arg);
    tr->fn = fn;
    tr->arg = arg;
    int rc = r(th, attr, trampoline, tr);
    if (rc)
        free(tr);
    return rc;
}
