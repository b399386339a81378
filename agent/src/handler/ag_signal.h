/* The sampling signal: choice, handler, wall requests, SIGTERM flush (signal.c). */
#ifndef AG_SIGNAL_H
#define AG_SIGNAL_H

#include "base.h"
#include <signal.h>
#include <sys/types.h>

/* The sigev_value of a CPU timer: "FPCP" in the low 32 bits, the thread's slot above; a wall
 * request's si_value: AG_WALL_MAGIC in the top 16 bits, bit 0 on-CPU, bits 1-10 the slot,
 * bits 11-47 the weight in µs. The slot tells the handler whose signal it is without trusting
 * TLS (raw clone() threads share their parent's). */
#define AG_TAG_CPU32 0x46504350u
#define AG_CPU_VALUE(slot) ((void *)((uintptr_t)(slot) << 32 | AG_TAG_CPU32))
#define AG_WALL_MAGIC 0x4657ull
#define AG_WALL_SLOT_BITS 10 /* AG_MAX_THREADS = 1 << 10 */
AG_HIDDEN extern int ag_sig;                     /* sampling signal number, 0 if none */
/* Picks a free real-time signal and installs the handler. Returns 0 or -EBUSY. */
AG_HIDDEN int ag_signal_init(void);
/* bg: sends a wall sample request to thread tid. weight_ns: wall time it stands for. */
AG_HIDDEN int ag_signal_wall(pid_t tid, uint32_t slot, uint64_t weight_ns, int on_cpu);
AG_HIDDEN int ag_signal_is_ours(const siginfo_t *si); /* handler's classification */
/* Installs the SIGTERM flush handler if SIGTERM is at its default disposition, and the
 * capture signal's (FLEETPROF_CAPTURE_SIGNAL, recorder on) if that one is; restore: both back
 * to what the application set. */
AG_HIDDEN void ag_signal_sigterm_install(void);
AG_HIDDEN void ag_signal_sigterm_restore(void);
/* bg: the last chunk after a SIGTERM is out; the waiting handler lets the process die. */
AG_HIDDEN void ag_signal_sigterm_done(void);
/* Async-signal-safe: the last chunk out (bg), waited for at most 2 s; the agent then stops. */
AG_HIDDEN void ag_signal_last_chunk(void);
/* bg: measures the kernel cost of delivering one sampling signal (ns). */
AG_HIDDEN uint64_t ag_signal_calibrate(void);
/* signal.c: does the calling thread block our signal? (one system call) */
AG_HIDDEN int ag_signal_blocked_here(void);

#endif
