/* Java frames of a HotSpot JVM: the JVMTI agent entry, AsyncGetCallTrace in the sampling
 * handler (jvm.c), jmethodIDs named on the background thread (jvmname.c). */
#ifndef AG_JVM_H
#define AG_JVM_H

#include <stdatomic.h>
#include <stdint.h>

/* A Java frame in a record's pcs: bits 62-63 = 01 (no user-space pc has bit 62, a Python frame
 * has bit 63), the jmethodID in bits 0-46 (a C-heap address), the bytecode index in bits 47-61
 * (AG_JAVA_NO_BCI: none, a native method or an index over the field). */
#define AG_JAVA_TAG (1ULL << 62)
#define AG_JAVA_IS(pc) (((uint64_t)(pc) >> 62) == 1)
#define AG_JAVA_MID_MASK ((1ULL << 47) - 1)
#define AG_JAVA_NO_BCI 0x7fffu
#define AG_JAVA_MID(w) ((uint64_t)(w) & AG_JAVA_MID_MASK)
#define AG_JAVA_BCI(w) ((uint32_t)(((uint64_t)(w) >> 47) & 0x7fff))

/* AsyncGetCallTrace's outcomes: index = -num_frames for its errors 0..-10, 11: other. */
#define AG_JVM_OUTCOMES 12
typedef struct {
    _Atomic uint64_t samples;            /* handler: Java threads' (AsyncGetCallTrace called) */
    _Atomic uint64_t merged;             /* of those, with Java frames */
    _Atomic uint64_t failed[AG_JVM_OUTCOMES]; /* no Java frames, by AsyncGetCallTrace's code */
    _Atomic uint64_t retried;            /* of merged, walked after moving the top frame */
    _Atomic uint64_t truncated;          /* Java frames cut at the depth limit */
    _Atomic uint64_t at_entry;           /* frames at a method's entry (bci -1): its first line */
    uint64_t named, unnamed;             /* bg: frames named; not (method gone, JVMTI error) */
} ag_jvm_stats_t;
extern ag_jvm_stats_t ag_jvm_stats __attribute__((visibility("hidden")));

typedef struct {
    char name[512]; /* "pkg.Class.method" */
    char file[512]; /* "pkg/Class.java" (the class's source file under its package), or "" */
    uint32_t line;  /* 0: unknown */
} ag_java_frame_t;

/* handler-safe: on a Java thread, for a signal's ucontext: keeps the native frames of pcs[0..n)
 * (leaf first) down to the first one in the JVM's generated code, then the thread's Java frames
 * from AsyncGetCallTrace (outermost: Thread.run, main); clears AG_UW_INCOMPLETE in *uw when the
 * Java stack is whole. stack_hi: the thread's stack top (0: unknown). Returns the new count
 * (<= max). Elsewhere: n, pcs untouched. */
__attribute__((visibility("hidden"))) uint32_t ag_jvm_merge(const void *uc, uintptr_t stack_hi,
                                                            uintptr_t *pcs, uint32_t n,
                                                            uint32_t max, uint32_t *uw);
/* bg: names a Java frame word. 0, or -1 (out named "[java?]", counted unnamed). */
__attribute__((visibility("hidden"))) int ag_jvm_name(uintptr_t word, ag_java_frame_t *out);
/* bg, jvm.c for jvmname.c: the JVMTI environment while the VM is live, entered (the caller
 * calls ag_jvm_leave after its JVMTI calls), and the bg thread's JNIEnv in *jni (attached as
 * a daemon thread on the first call); NULL: no JVM, not live, or not attachable. */
__attribute__((visibility("hidden"))) void *ag_jvm_enter(void **jni);
__attribute__((visibility("hidden"))) void ag_jvm_leave(void);

#endif
