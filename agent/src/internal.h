/* Every internal interface of the agent at once, for a file that has not listed the module
 * headers it uses (each module's header sits next to its code: agent/README.md has the map).
 * Nothing here is exported.
 *
 * Module map (one concern per file):
 *   agent.c      constructor/destructor, global state, fork and exit handling, public flush
 *   config.c     environment parsing (one stderr line per invalid value)
 *   thread.c     thread registry: slots, stack bounds, pthread_create wrapper, /proc scan
 *   signal.c     choice of the sampling signal, handler, sigaction/signal interposition
 *   unwind.c     the unwinder: compiled CFI, frame pointers as fallback (async-signal-safe)
 *   pyframes.c   CPython 3.11 frames merged into native stacks (pyframes.h; pyline.c lines)
 *   cfi.c, cfi_table.c  CFI compiler; per-object tables published for the handler (bg)
 *   defer.c      stack copies of samples taken before the first tables or on threads without
 *                stack bounds, unwound later by the bg thread
 *   ring.c       per-thread single-producer/single-consumer record ring
 *   record.c     the generic sample record path: stack + weight + count + attrs + context
 *   context.c    per-thread span context and labels (public API), label interning
 *   controller.c per-event-type rate controller and CPU budget
 *   symbols.c    loaded objects, ELF symbol tables, demangling (background thread only)
 *   hook_exec.c  exec interposers: no signal of ours pending across an exec
 *   dwlib.c      elfutils (libdw, libelf) loaded on the first symbol lookup (background thread)
 *   builder.c    aggregation of records into a cm_chunk_t (background thread only)
 *   sender.c     collector connection, unacked-chunk queue, output files (background only)
 *   bgthread.c   the background thread loop: wall ticks, drain, control, chunks, sending
 *   issue 4 hooks (their own header hooks.h): hooks.c (config, guard, flood cap, bg side),
 *   hook_alloc.c (malloc family, C++ new/delete), heap.c (live-heap table, INUSE rows),
 *   hook_lock.c, hook_io.c, fdinfo.c (fd kind, path/peer), fdnb.c (which fds are
 *   non-blocking: their calls are not timed), agg.c (sub-threshold aggregates).
 *   Their ring records pass through ag_hooks_bg_add (bgthread.c), which strips the hook's own
 *   frames and reads two producer-private fields: an ALLOC record's io_kind/fd_kind carry its
 *   live-heap record id, an IO record's address carries its fd-description id.
 *
 * Threads and signals:
 *   - "handler" code runs in the sampling signal handler on an application thread. It may only
 *     use the thread's own slot, its ring, its TLS context and relaxed atomics.
 *   - "bg" code runs on the agent's background thread only (builder, symbols, sender).
 *   - "app" code runs on application threads outside handlers (registration, context API).
 */
#ifndef AG_INTERNAL_H
#define AG_INTERNAL_H

#include "base.h"
#include "config.h"
#include "sysfile.h"
#include "clock.h"
#include "mutex_layout.h"
#include "ring.h"
#include "thread.h"
#include "ag_signal.h"
#include "cfi_table.h"
#include "ag_unwind.h"
#include "record.h"
#include "defer.h"
#include "context.h"
#include "spans.h"
#include "controller.h"
#include "symbols.h"
#include "lazylibs.h"
#include "builder.h"
#include "sender.h"
#include "agent.h"
#include "bgthread.h"
#include "sandbox.h"
#include "sigroom.h"
#include "creds.h"

#endif
