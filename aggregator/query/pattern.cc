// Filter patterns on RE2 (see pattern.h): the only C++ of the aggregator, a thin C API.
// Threading: RE2 objects are safe to match from several threads at once.
#include "pattern.h"

#include "cm/error.h"

#include <re2/re2.h>

#include <cstdio>
#include <cstring>
#include <new>

struct agg_pattern {
    re2::RE2 *re;
};

// No C++ exception may leave these functions: one crossing the extern "C" boundary ends the
// aggregator in std::terminate. RE2 allocates with plain new inside (its nothrow new covers
// only the object itself), so std::bad_alloc is caught here and becomes CM_ENOMEM.
static int compile(const char *src, agg_pattern_t **out, char *err, size_t err_size) {
    size_t n = strlen(src);
    if (n > AGG_PATTERN_MAX_LEN) {
        snprintf(err, err_size, "is %zu bytes long; at most %d", n, AGG_PATTERN_MAX_LEN);
        return CM_EINVAL;
    }
    re2::RE2::Options o;
    o.set_posix_syntax(true);  // POSIX ERE, as regcomp(REG_EXTENDED) took them
    o.set_longest_match(true); // POSIX leftmost-longest
    o.set_perl_classes(true);  // \d \s \w, which glibc accepted too
    o.set_word_boundary(true); // \b \B
    o.set_one_line(true);      // ^ and $ at the subject's ends, as regexec without REG_NEWLINE
    o.set_log_errors(false);
    o.set_max_mem(AGG_PATTERN_MAX_MEM);
    agg_pattern_t *p = new (std::nothrow) agg_pattern_t;
    if (!p)
        return CM_ENOMEM;
    try {
        p->re = new (std::nothrow) re2::RE2(re2::StringPiece(src, n), o);
    } catch (...) { // thrown by RE2's parser or compiler: p must not leak
        delete p;
        throw;
    }
    if (!p->re) {
        delete p;
        return CM_ENOMEM;
    }
    if (!p->re->ok()) {
        const char *why = p->re->error_code() == re2::RE2::ErrorRepeatSize
                              ? "its counted repetitions ({m,n}) multiply past 1000"
                          : p->re->error_code() == re2::RE2::ErrorPatternTooLarge
                              ? "it is too large once compiled"
                              : p->re->error().c_str();
        snprintf(err, err_size, "%s", why);
        agg_pattern_free(p);
        return CM_EINVAL;
    }
    *out = p;
    return 0;
}

extern "C" int agg_pattern_compile(const char *src, agg_pattern_t **out, char *err,
                                   size_t err_size) {
    *out = nullptr;
    try {
        return compile(src, out, err, err_size);
    } catch (const std::bad_alloc &) {
        snprintf(err, err_size, "out of memory compiling it");
    } catch (...) {
        snprintf(err, err_size, "the regular expression library failed on it");
    }
    agg_pattern_free(*out); // compile sets *out only on success, as its last step
    *out = nullptr;
    return CM_ENOMEM;
}

extern "C" int agg_pattern_match(const agg_pattern_t *p, const char *s) {
    try {
        return re2::RE2::PartialMatch(s, *p->re) ? 1 : 0;
    } catch (...) { // out of memory in the matcher: counted as no match, never a crash
        return 0;
    }
}

extern "C" void agg_pattern_free(agg_pattern_t *p) {
    if (!p)
        return;
    delete p->re;
    delete p;
}
