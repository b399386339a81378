/* Every internal interface of the agent at once, for a file that has not listed the module
 * headers it uses (each module's header sits next to its code: agent/README.md has the map).
 * Nothing here is exported.
 *
 * Folders, by where the code runs (agent/README.md, "Source layout"):
 *   handler/  the sampling signal handler and what it calls: signal, record, ring, unwind,
 *             cfi_table (+ cfi.h), defer, context, spans, pyframes
 *   hooks/    interposers and their tables: hook_alloc/lock/io/wait/exec, creds, sandbox,
 *             hooks (common machinery, own header hooks.h), heap, agg, fdinfo, fdnb, bypass,
 *             mutex_layout
 *   bg/       the background thread: bgthread (loop), wall, chunk, builder, symbols, sender,
 *             controller, cpuacct, procstat, cfi (compiler), pyline
 *   runtime/  start-up and shared pieces: agent (constructor), thread, ag_alloc, config,
 *             loader_gate, dwlib + pblib (lazylibs.h), sigroom, sysfile, base.h, clock.h,
 *             fmath.h
 *   Hook records pass through ag_hooks_bg_add (hooks.c, from the bg drain), which strips the
 *   hook's own frames and reads two producer-private fields: an ALLOC record's io_kind/fd_kind
 *   carry its live-heap record id, an IO record's address carries its fd-description id.
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
