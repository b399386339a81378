/* Java frames named on the bg thread (jvm.c tags them): the method's declaring class and name
 * through JVMTI, its source file under the class's package, the line of the frame's bytecode
 * index from the method's line table. A method of an unloaded class (its jmethodID cleared:
 * JVMTI answers an error, never a fault), or a VM no longer live, gives "[java?]".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "jvm.h"

#include <jvmti.h>
#include <stdio.h>
#include <string.h>

/* "Ljava/lang/Thread;" -> "java.lang.Thread" (dots: as Java sources write it); pkg gets
 * "java/lang/" (the source file's directory). A hidden class's address suffix
 * ("LWork$$Lambda$1.0x00007f92e4000a08;", "/0x" in some JDKs) is left out: the name is then
 * the same in every process. */
static void class_name(const char *sig, char *out, size_t size, char *pkg, size_t psize) {
    size_t n = strlen(sig);
    if (n >= 2 && sig[0] == 'L' && sig[n - 1] == ';')
        sig++, n -= 2;
    const char *hidden = memmem(sig, n, ".0x", 3);
    if (!hidden)
        hidden = memmem(sig, n, "/0x", 3);
    if (hidden)
        n = (size_t)(hidden - sig);
    if (n >= size)
        n = size - 1;
    size_t slash = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = sig[i] == '/' ? '.' : sig[i];
        if (sig[i] == '/')
            slash = i + 1;
    }
    out[n] = 0;
    if (slash >= psize)
        slash = 0;
    memcpy(pkg, sig, slash);
    pkg[slash] = 0;
}

/* The line of bytecode index bci: the entry with the greatest start at or before it. */
static uint32_t method_line(jvmtiEnv *jvmti, jmethodID m, uint32_t bci) {
    jint n = 0;
    jvmtiLineNumberEntry *t = NULL;
    if (bci == AG_JAVA_NO_BCI || (*jvmti)->GetLineNumberTable(jvmti, m, &n, &t) != JVMTI_ERROR_NONE)
        return 0;
    uint32_t line = 0;
    jlocation best = -1;
    for (jint i = 0; i < n; i++)
        if (t[i].start_location <= (jlocation)bci && t[i].start_location > best) {
            best = t[i].start_location;
            line = t[i].line_number > 0 ? (uint32_t)t[i].line_number : 0;
        }
    (*jvmti)->Deallocate(jvmti, (unsigned char *)t);
    return line;
}

static int name_method(jvmtiEnv *jvmti, JNIEnv *jni, jmethodID m, uint32_t bci,
                       ag_java_frame_t *out) {
    char *mname = NULL, *csig = NULL, *src = NULL;
    jclass klass = NULL;
    if ((*jvmti)->GetMethodName(jvmti, m, &mname, NULL, NULL) != JVMTI_ERROR_NONE)
        return -1;
    int rc = -1;
    if ((*jvmti)->GetMethodDeclaringClass(jvmti, m, &klass) == JVMTI_ERROR_NONE &&
        (*jvmti)->GetClassSignature(jvmti, klass, &csig, NULL) == JVMTI_ERROR_NONE) {
        char cls[384], pkg[256];
        class_name(csig, cls, sizeof cls, pkg, sizeof pkg);
        snprintf(out->name, sizeof out->name, "%s.%s", cls, mname);
        if ((*jvmti)->GetSourceFileName(jvmti, klass, &src) == JVMTI_ERROR_NONE)
            snprintf(out->file, sizeof out->file, "%s%s", pkg, src);
        out->line = method_line(jvmti, m, bci);
        rc = 0;
    }
    (*jvmti)->Deallocate(jvmti, (unsigned char *)mname);
    if (csig)
        (*jvmti)->Deallocate(jvmti, (unsigned char *)csig);
    if (src)
        (*jvmti)->Deallocate(jvmti, (unsigned char *)src);
    /* a local reference: the bg thread never returns to Java to free its local frame */
    if (klass)
        (*jni)->DeleteLocalRef(jni, klass);
    return rc;
}

int ag_jvm_name(uintptr_t word, ag_java_frame_t *out) {
    memset(out, 0, sizeof *out);
    void *jni = NULL;
    jvmtiEnv *jvmti = ag_jvm_enter(&jni);
    int rc = -1;
    if (jvmti) {
        jmethodID m = (jmethodID)(uintptr_t)AG_JAVA_MID(word);
        rc = name_method(jvmti, jni, m, AG_JAVA_BCI(word), out);
        ag_jvm_leave();
    }
    if (rc != 0) {
        snprintf(out->name, sizeof out->name, "[java?]");
        ag_jvm_stats.unnamed++;
        return -1;
    }
    ag_jvm_stats.named++;
    return 0;
}
