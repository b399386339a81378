/* Java frames of a HotSpot JVM (OpenJDK 17 and later): the JVMTI mode of libfleetprof.so.
 *
 * Entry: the JVM calls Agent_OnLoad when the library is named by -agentpath (on the command
 * line or in JAVA_TOOL_OPTIONS). With the library also preloaded (LD_PRELOAD, the way every
 * other service runs it) the JVM's dlopen finds the loaded copy: one agent, whose constructor
 * already started sampling. Agent_OnLoad asks JVMTI for what AsyncGetCallTrace needs, as
 * async-profiler does: ClassLoad events enabled (AsyncGetCallTrace refuses to walk otherwise),
 * every class's jmethodIDs made at ClassPrepare and for the classes loaded before VMInit (a
 * frame whose method has none yet cannot be reported), CompiledMethodLoad enabled (HotSpot
 * then records debug information at every instruction of compiled code, not only at
 * safepoints: inlined frames are attributed where they run). HotSpot's structure table
 * (gHotSpotVMStructs, exported by libjvm for its serviceability agent) gives the code cache's
 * bounds (interpreter, stubs, compiled methods: one reservation), the boundary between native
 * and Java frames, widened by CompiledMethodLoad and DynamicCodeGenerated; and the offsets of a
 * thread's state and last-Java-frame anchor (walk_anchor).
 *
 * Handler (ag_jvm_merge, async-signal-safe): a thread the JVM announced (ThreadStart, or the
 * main thread at VMStart and VMInit) has its JNIEnv in initial-exec TLS. For such a thread the
 * record's native frames are kept from the leaf down to the first one in generated code, then
 * AsyncGetCallTrace (looked up at Agent_OnLoad, never in the handler) walks the Java frames
 * from the signal's ucontext to the thread's outermost Java frame (Thread.run, main). Native
 * frames under the Java ones (the JVM's thread start) are left out, as async-profiler does.
 * AsyncGetCallTrace reads only the interrupted thread's own stack and takes no lock; HotSpot
 * guards it against faults itself (the JVM's SIGSEGV handler: the agent never touches SIGSEGV
 * or SIGBUS, which the JVM uses for null checks and safepoint polls). Its failures (GC
 * running, a state it cannot walk) leave the native frames only, counted by code.
 *
 * Naming: jvmname.c, on the bg thread, attached to the JVM as a daemon thread while the VM is
 * live. At VMDeath the last chunk is cut while names can still be read, then the handler stops
 * calling AsyncGetCallTrace and the bg thread stops calling JVMTI (ag_jvm_enter).
 *
 * Knob: FLEETPROF_JAVA=0 makes Agent_OnLoad do nothing (native frames only).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ag_unwind.h"
#include "config.h"
#include "jvm.h"
#include "fleetprof.h"

#include "cm/log.h"

#include <dlfcn.h>
#include <jvmti.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#pragma weak fleetprof_flush

#define NO_SAN __attribute__((no_sanitize("address", "thread", "undefined")))
#define VM_DEATH_WAIT_MS 2000 /* VMDeath waits for the bg thread's JVMTI calls to end */

typedef struct {
    jint lineno; /* bytecode index; -3: a native method */
    jmethodID method_id;
} asgct_frame_t;
typedef struct {
    JNIEnv *env_id;
    jint num_frames; /* > 0: frames; <= 0: why none */
    asgct_frame_t *frames;
} asgct_trace_t;
typedef void (*asgct_fn)(asgct_trace_t *, jint, void *);

ag_jvm_stats_t ag_jvm_stats;

static JavaVM *g_vm;
static jvmtiEnv *g_jvmti;
static asgct_fn g_asgct;
static _Atomic int g_walk;                   /* handler: VMStart seen, VMDeath not */
static _Atomic int g_live;                   /* bg: VMInit seen, VMDeath not */
static _Atomic int g_users;                  /* bg: inside ag_jvm_enter/leave */
static _Atomic uintptr_t g_code_lo = UINTPTR_MAX, g_code_hi; /* generated code seen so far */
static __thread __attribute__((tls_model("initial-exec"))) JNIEnv *g_env; /* a Java thread's */
static JNIEnv *g_bg_env;                     /* bg: attached */
/* HotSpot's last Java frame anchor of a thread (gHotSpotVMStructs) and where a JavaThread's
 * JNIEnv lies in it (VMInit); 0: unknown, code -3 is not retried */
static long g_anchor_sp, g_anchor_pc, g_thread_state;
static intptr_t g_env_off;
/* CodeCache::_low_bound and _high_bound: the code cache's reservation, set up after
 * Agent_OnLoad (read at VMStart). CompiledMethodLoad comes after a method's code runs. */
static void *const *g_cc_low, *const *g_cc_high;
static int g_bg_attach_failed;               /* bg */

/* ---- handler ---- */

NO_SAN static int in_code(uintptr_t pc, uintptr_t lo, uintptr_t hi) {
    return pc >= lo && pc < hi;
}

/* One walk's inputs: the trace, the depth asked, the signal's context, the code cache's bounds,
 * the native unwinder's frames from the first one in generated code (cand[0..ncand)) and the
 * thread's stack top (0: unknown). */
typedef struct {
    asgct_trace_t tr;
    jint want;
    ucontext_t *uc;
    uintptr_t lo, hi;
    const uintptr_t *cand;
    uint32_t ncand;
    uintptr_t stack_hi;
} walk_t;

/* Codes -3 and -4, a thread in the VM (JavaThread::_thread_state, _thread_in_vm: no other
 * thread walks its stack meanwhile) called from generated code, as async-profiler does:
 * -3: the anchor's sp is set but not its pc (HotSpot fills it in lazily, from the word under
 * that sp): that word, when it is a return address into generated code, written for one walk.
 * -4 (or -3 still): the anchor's frame is a runtime stub's that cannot be walked (its frame not
 * "complete" at that pc): the anchor moved to the stub's caller, a return address into
 * generated code above the anchor's sp: within SCAN_NEAR words (C2's stubs), or one the native
 * unwinder found (C1's stubs save every register: hundreds of bytes), within SCAN_FAR words
 * and the thread's stack. The anchor is restored after. */
#define THREAD_IN_VM 6
#define SCAN_NEAR 8
#define SCAN_FAR 256
NO_SAN static jint anchor_try(walk_t *w, volatile uintptr_t *asp, volatile uintptr_t *apc,
                              uintptr_t sp, uintptr_t pc) {
    uintptr_t sp0 = *asp, pc0 = *apc;
    *apc = pc;
    *asp = sp;
    atomic_signal_fence(memory_order_seq_cst);
    g_asgct(&w->tr, w->want, w->uc);
    atomic_signal_fence(memory_order_seq_cst);
    *asp = sp0;
    *apc = pc0;
    return w->tr.num_frames;
}

NO_SAN static int unwound(const walk_t *w, uintptr_t v) {
    for (uint32_t i = 0; i < w->ncand; i++)
        if (w->cand[i] == v)
            return 1;
    return 0;
}

NO_SAN static jint walk_anchor(walk_t *w) {
    if (!g_env_off)
        return w->tr.num_frames;
    char *jt = (char *)w->tr.env_id - g_env_off;
    if (*(volatile int *)(jt + g_thread_state) != THREAD_IN_VM)
        return w->tr.num_frames;
    volatile uintptr_t *asp = (volatile uintptr_t *)(jt + g_anchor_sp);
    volatile uintptr_t *apc = (volatile uintptr_t *)(jt + g_anchor_pc);
    uintptr_t sp = *asp;
    if (!sp || sp % sizeof(uintptr_t))
        return w->tr.num_frames;
    const uintptr_t *word = (const uintptr_t *)sp;
    uintptr_t words = w->stack_hi > sp ? (w->stack_hi - sp) / sizeof(uintptr_t) : SCAN_NEAR;
    if (words > SCAN_FAR)
        words = SCAN_FAR;
    jint rc = w->tr.num_frames;
    if (rc == -3 && !*apc && in_code(word[-1], w->lo, w->hi))
        rc = anchor_try(w, asp, apc, sp, word[-1]);
    for (uintptr_t k = 0; k < words && rc <= 0; k++)
        if (in_code(word[k], w->lo, w->hi) && (k < SCAN_NEAR || unwound(w, word[k])))
            rc = anchor_try(w, asp, apc, (uintptr_t)(word + k + 1), word[k]);
    if (rc > 0)
        atomic_fetch_add_explicit(&ag_jvm_stats.retried, 1, memory_order_relaxed);
    return rc;
}

/* AsyncGetCallTrace, and when it finds the top frame unwalkable (code -5, -6: a frame not fully
 * built, values pushed above its sp, a prologue, an epilogue or a stub; JDK-8178287) again from
 * moved starting points, as async-profiler does: the same pc one and two stack slots up, then
 * a return address into generated code among the top four slots as the pc (the top frame is
 * then left out: its caller is the innermost frame). The interrupted thread's own stack is
 * read, a few words above its sp. The ucontext is restored before returning. */
NO_SAN static jint walk(walk_t *w) {
    g_asgct(&w->tr, w->want, w->uc);
    if (w->tr.num_frames == -3 || w->tr.num_frames == -4)
        return walk_anchor(w);
    if (w->tr.num_frames != -5 && w->tr.num_frames != -6)
        return w->tr.num_frames;
    greg_t *g = w->uc->uc_mcontext.gregs, pc = g[REG_RIP], sp = g[REG_RSP];
    const uintptr_t *top = (const uintptr_t *)(uintptr_t)sp;
    for (int k = 1; k <= 2 && w->tr.num_frames <= 0; k++) {
        g[REG_RSP] = sp + k * (greg_t)sizeof(uintptr_t);
        g_asgct(&w->tr, w->want, w->uc);
    }
    for (int k = 0; k < 4 && w->tr.num_frames <= 0; k++) {
        if (!in_code(top[k], w->lo, w->hi))
            continue;
        g[REG_RIP] = (greg_t)top[k];
        g[REG_RSP] = sp + (k + 1) * (greg_t)sizeof(uintptr_t);
        g_asgct(&w->tr, w->want, w->uc);
    }
    g[REG_RIP] = pc;
    g[REG_RSP] = sp;
    if (w->tr.num_frames > 0)
        atomic_fetch_add_explicit(&ag_jvm_stats.retried, 1, memory_order_relaxed);
    return w->tr.num_frames;
}

NO_SAN uint32_t ag_jvm_merge(const void *uc, uintptr_t stack_hi, uintptr_t *pcs, uint32_t n,
                             uint32_t max, uint32_t *uw) {
    JNIEnv *env = g_env;
    if (!env || !uc || !atomic_load_explicit(&g_walk, memory_order_acquire))
        return n;
    uintptr_t lo = atomic_load_explicit(&g_code_lo, memory_order_relaxed);
    uintptr_t hi = atomic_load_explicit(&g_code_hi, memory_order_relaxed);
    uint32_t k = 0; /* native frames kept: down to the first in generated code */
    while (k < n && !in_code(pcs[k], lo, hi))
        k++;
    if (k >= max)
        return n;
    asgct_frame_t fr[AG_MAX_DEPTH];
    uint32_t want = max - k > AG_MAX_DEPTH ? AG_MAX_DEPTH : max - k;
    walk_t w = {{env, 0, fr}, (jint)want, (ucontext_t *)uc, lo, hi, pcs + k, n - k, stack_hi};
    atomic_fetch_add_explicit(&ag_jvm_stats.samples, 1, memory_order_relaxed);
    if (walk(&w) <= 0) {
        uint32_t why = w.tr.num_frames >= -10 ? (uint32_t)-w.tr.num_frames : 11;
        atomic_fetch_add_explicit(&ag_jvm_stats.failed[why], 1, memory_order_relaxed);
        return n;
    }
    uint32_t m = (uint32_t)w.tr.num_frames > want ? want : (uint32_t)w.tr.num_frames;
    for (uint32_t i = 0; i < m; i++) {
        uint64_t mid = (uint64_t)(uintptr_t)fr[i].method_id;
        if (mid > AG_JAVA_MID_MASK)
            mid = 0; /* not a C-heap address: kept as a frame named "[java?]" */
        /* lineno is the bytecode index; -1 is HotSpot's method entry (InvocationEntryBci: a
         * compiled frame in its prologue, or an interpreted one whose bcp is not set yet),
         * the method's first bytecode; -3 a native method: no line */
        jint ln = fr[i].lineno;
        if (ln == -1)
            atomic_fetch_add_explicit(&ag_jvm_stats.at_entry, 1, memory_order_relaxed);
        uint64_t bci = ln == -1                                  ? 0
                       : ln >= 0 && ln < (jint)AG_JAVA_NO_BCI ? (uint64_t)ln
                                                                : AG_JAVA_NO_BCI;
        pcs[k + i] = (uintptr_t)(AG_JAVA_TAG | bci << 47 | mid);
    }
    atomic_fetch_add_explicit(&ag_jvm_stats.merged, 1, memory_order_relaxed);
    /* Whole when the native frames reached generated code (else frames between them and the
     * Java ones are missing) and the Java stack was not cut at the depth asked for. */
    uint32_t keep = *uw & AG_UW_FP;
    if (m == want) {
        keep |= AG_UW_DEPTH | AG_UW_INCOMPLETE;
        atomic_fetch_add_explicit(&ag_jvm_stats.truncated, 1, memory_order_relaxed);
    } else if (k == n) {
        keep |= *uw & AG_UW_INCOMPLETE;
    }
    *uw = keep;
    return k + m;
}

/* ---- JVMTI callbacks (Java threads) ---- */

static void code_seen(const void *addr, size_t len) {
    uintptr_t a = (uintptr_t)addr, b = a + len;
    uintptr_t cur = atomic_load(&g_code_lo);
    while (a < cur && !atomic_compare_exchange_weak(&g_code_lo, &cur, a))
        ;
    cur = atomic_load(&g_code_hi);
    while (b > cur && !atomic_compare_exchange_weak(&g_code_hi, &cur, b))
        ;
}

static void JNICALL on_code(jvmtiEnv *jvmti, const char *name, const void *addr, jint len) {
    (void)jvmti, (void)name;
    code_seen(addr, len > 0 ? (size_t)len : 0);
}

static void JNICALL on_compiled(jvmtiEnv *jvmti, jmethodID m, jint size, const void *addr,
                                jint map_len, const jvmtiAddrLocationMap *map,
                                const void *info) {
    (void)jvmti, (void)m, (void)map_len, (void)map, (void)info;
    code_seen(addr, size > 0 ? (size_t)size : 0);
}

/* The class's jmethodIDs exist from now on (AsyncGetCallTrace reports only existing ones). */
static void method_ids(jvmtiEnv *jvmti, jclass klass) {
    jint n = 0;
    jmethodID *ms = NULL;
    if ((*jvmti)->GetClassMethods(jvmti, klass, &n, &ms) == JVMTI_ERROR_NONE)
        (*jvmti)->Deallocate(jvmti, (unsigned char *)ms);
}

static void JNICALL on_class_load(jvmtiEnv *jvmti, JNIEnv *jni, jthread th, jclass klass) {
    (void)jvmti, (void)jni, (void)th, (void)klass; /* enabled for AsyncGetCallTrace */
}

static void JNICALL on_class_prepare(jvmtiEnv *jvmti, JNIEnv *jni, jthread th, jclass klass) {
    (void)jni, (void)th;
    method_ids(jvmti, klass);
}

static void JNICALL on_thread_start(jvmtiEnv *jvmti, JNIEnv *jni, jthread th) {
    (void)jvmti, (void)th;
    g_env = jni;
}

static void JNICALL on_thread_end(jvmtiEnv *jvmti, JNIEnv *jni, jthread th) {
    (void)jvmti, (void)jni, (void)th;
    g_env = NULL;
}

/* Where a JavaThread's JNIEnv lies in it: java.lang.Thread.eetop holds the JavaThread. */
static void env_offset(JNIEnv *jni, jthread th) {
    if (!g_anchor_sp)
        return;
    jclass tc = (*jni)->FindClass(jni, "java/lang/Thread");
    jfieldID eetop = tc ? (*jni)->GetFieldID(jni, tc, "eetop", "J") : NULL;
    jlong jt = eetop ? (*jni)->GetLongField(jni, th, eetop) : 0;
    (*jni)->ExceptionClear(jni);
    intptr_t off = (intptr_t)jni - (intptr_t)jt;
    if (jt && off > 0 && off < 65536)
        g_env_off = off;
    else
        CM_INFO("java: no JavaThread layout (eetop): samples in the VM keep native frames only");
}

static void JNICALL on_vm_init(jvmtiEnv *jvmti, JNIEnv *jni, jthread th) {
    (void)th;
    jint n = 0;
    jclass *cs = NULL;
    if ((*jvmti)->GetLoadedClasses(jvmti, &n, &cs) == JVMTI_ERROR_NONE) {
        for (jint i = 0; i < n; i++)
            method_ids(jvmti, cs[i]);
        (*jvmti)->Deallocate(jvmti, (unsigned char *)cs);
    }
    (*jvmti)->GenerateEvents(jvmti, JVMTI_EVENT_DYNAMIC_CODE_GENERATED);
    env_offset(jni, th);
    g_env = jni;
    atomic_store_explicit(&g_live, 1, memory_order_release);
    CM_INFO("java frames on: %d classes loaded at VMInit", (int)n);
}

/* The main thread runs the JDK's start-up (module system, class loaders) from here on: its
 * Java frames are walked already (methods of classes loaded before this point have no
 * jmethodID yet: "[java?]" frames), and named from VMInit on. */
static void JNICALL on_vm_start(jvmtiEnv *jvmti, JNIEnv *jni) {
    (void)jvmti;
    if (g_cc_low && g_cc_high && *g_cc_low && *g_cc_high > *g_cc_low)
        code_seen(*g_cc_low, (size_t)((const char *)*g_cc_high - (const char *)*g_cc_low));
    g_env = jni;
    atomic_store_explicit(&g_walk, 1, memory_order_release);
}

static void JNICALL on_vm_death(jvmtiEnv *jvmti, JNIEnv *jni) {
    (void)jvmti, (void)jni;
    if (fleetprof_flush)   /* runtime/agent.c: in libfleetprof.so, not in fp_agent_core */
        fleetprof_flush(); /* the last chunk with Java names, while they can be read */
    const ag_jvm_stats_t *s = &ag_jvm_stats;
    char why[256];
    size_t at = 0;
    for (int i = 0; i < AG_JVM_OUTCOMES && at < sizeof why; i++)
        if (s->failed[i])
            at += (size_t)snprintf(why + at, sizeof why - at, " %d:%llu", -i,
                                   (unsigned long long)s->failed[i]);
    why[at < sizeof why ? at : sizeof why - 1] = 0;
    CM_INFO("java frames: %llu samples of Java threads, %llu with Java frames (%llu after a "
            "retry, %llu cut at the depth limit); none, by AsyncGetCallTrace code:%s; %llu "
            "frames named, %llu not; %llu frames at a method's entry",
            (unsigned long long)s->samples, (unsigned long long)s->merged,
            (unsigned long long)s->retried, (unsigned long long)s->truncated,
            at ? why : " -", (unsigned long long)s->named, (unsigned long long)s->unnamed,
            (unsigned long long)s->at_entry);
    atomic_store(&g_walk, 0);
    atomic_store(&g_live, 0);
    for (int i = 0; i < VM_DEATH_WAIT_MS && atomic_load(&g_users); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

/* ---- bg ---- */

void *ag_jvm_enter(void **jni) {
    if (!g_jvmti || !atomic_load(&g_live))
        return NULL;
    atomic_fetch_add(&g_users, 1);
    if (!atomic_load(&g_live) || g_bg_attach_failed) {
        atomic_fetch_sub(&g_users, 1);
        return NULL;
    }
    if (!g_bg_env) {
        JavaVMAttachArgs args = {JNI_VERSION_1_6, (char *)"fleetprof", NULL};
        if ((*g_vm)->AttachCurrentThreadAsDaemon(g_vm, (void **)&g_bg_env, &args) != JNI_OK) {
            CM_WARN("java: cannot attach the background thread to the JVM: Java frames "
                    "unnamed");
            g_bg_attach_failed = 1;
            atomic_fetch_sub(&g_users, 1);
            return NULL;
        }
    }
    *jni = g_bg_env;
    return g_jvmti;
}

void ag_jvm_leave(void) { atomic_fetch_sub(&g_users, 1); }

/* ---- entry ---- */

/* HotSpot's own table of its structures' fields (what the serviceability agent reads). */
static long vm_long(void *jvm, const char *sym) {
    const uint64_t *p = dlsym(jvm, sym);
    return p ? (long)*p : -1;
}

static void vm_structs(void *jvm) {
    char *const *table = dlsym(jvm, "gHotSpotVMStructs");
    long tn = vm_long(jvm, "gHotSpotVMStructEntryTypeNameOffset");
    long fn = vm_long(jvm, "gHotSpotVMStructEntryFieldNameOffset");
    long off = vm_long(jvm, "gHotSpotVMStructEntryOffsetOffset");
    long addr = vm_long(jvm, "gHotSpotVMStructEntryAddressOffset");
    long stride = vm_long(jvm, "gHotSpotVMStructEntryArrayStride");
    if (!table || !*table || tn < 0 || fn < 0 || off < 0 || addr < 0 || stride <= 0)
        return;
    long anchor = -1, sp = -1, pc = -1, state = -1;
    for (const char *e = *table;; e += stride) {
        const char *t = *(const char *const *)(e + tn), *f = *(const char *const *)(e + fn);
        if (!t)
            break;
        if (!f)
            continue;
        long v = (long)*(const uint64_t *)(e + off);
        if (!strcmp(t, "JavaThread") && !strcmp(f, "_anchor"))
            anchor = v;
        else if (!strcmp(t, "JavaThread") && !strcmp(f, "_thread_state"))
            state = v;
        else if (!strcmp(t, "JavaFrameAnchor") && !strcmp(f, "_last_Java_sp"))
            sp = v;
        else if (!strcmp(t, "JavaFrameAnchor") && !strcmp(f, "_last_Java_pc"))
            pc = v;
        else if (!strcmp(t, "CodeCache") && !strcmp(f, "_low_bound"))
            g_cc_low = *(void *const *const *)(e + addr);
        else if (!strcmp(t, "CodeCache") && !strcmp(f, "_high_bound"))
            g_cc_high = *(void *const *const *)(e + addr);
    }
    if (anchor > 0 && sp >= 0 && pc >= 0 && state > 0) {
        g_thread_state = state;
        g_anchor_sp = anchor + sp;
        g_anchor_pc = anchor + pc;
    }
}

static int jvmti_setup(jvmtiEnv *jvmti) {
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_get_source_file_name = 1;
    caps.can_get_line_numbers = 1;
    caps.can_generate_compiled_method_load_events = 1;
    if ((*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE)
        return -1;
    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.VMStart = on_vm_start;
    cb.VMInit = on_vm_init;
    cb.VMDeath = on_vm_death;
    cb.ClassLoad = on_class_load;
    cb.ClassPrepare = on_class_prepare;
    cb.ThreadStart = on_thread_start;
    cb.ThreadEnd = on_thread_end;
    cb.CompiledMethodLoad = on_compiled;
    cb.DynamicCodeGenerated = on_code;
    if ((*jvmti)->SetEventCallbacks(jvmti, &cb, sizeof cb) != JVMTI_ERROR_NONE)
        return -1;
    static const jvmtiEvent ev[] = {JVMTI_EVENT_VM_START, JVMTI_EVENT_VM_INIT,
                                    JVMTI_EVENT_VM_DEATH,
                                    JVMTI_EVENT_CLASS_LOAD, JVMTI_EVENT_CLASS_PREPARE,
                                    JVMTI_EVENT_THREAD_START, JVMTI_EVENT_THREAD_END,
                                    JVMTI_EVENT_COMPILED_METHOD_LOAD,
                                    JVMTI_EVENT_DYNAMIC_CODE_GENERATED};
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
        if ((*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, ev[i], NULL) !=
            JVMTI_ERROR_NONE)
            return -1;
    return 0;
}

__attribute__((visibility("default"))) JNIEXPORT jint JNICALL
Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    (void)options, (void)reserved;
    if (!ag_env_bool("FLEETPROF_JAVA", 1) || g_jvmti)
        return 0;
    void *jvm = dlopen("libjvm.so", RTLD_LAZY | RTLD_NOLOAD);
    g_asgct = (asgct_fn)dlsym(jvm ? jvm : RTLD_DEFAULT, "AsyncGetCallTrace");
    vm_structs(jvm ? jvm : RTLD_DEFAULT);
    if (jvm)
        dlclose(jvm); /* NOLOAD: only the reference it took */
    jvmtiEnv *jvmti = NULL;
    if (!g_asgct) {
        CM_WARN("java frames off: the JVM has no AsyncGetCallTrace (native frames only)");
        return 0;
    }
    if ((*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_1_2) != JNI_OK ||
        jvmti_setup(jvmti) != 0) {
        CM_WARN("java frames off: JVMTI refused the agent's capabilities or events "
                "(native frames only)");
        return 0;
    }
    g_vm = vm;
    g_jvmti = jvmti;
    return 0;
}
