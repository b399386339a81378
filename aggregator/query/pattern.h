/* Patterns of the query filters (include, exclude, fold, group) and of the aggregator's
 * report-fold: POSIX extended regular expressions, matched by RE2 (Debian's libre2), whose
 * matching time is linear in the subject and whose compiled size is bounded. A backtracking or
 * expanding engine (glibc's regcomp) let one 27-byte pattern such as
 * ((a{1,100}){1,100}){1,100} take over a second and a gigabyte per request; RE2 refuses it.
 *
 * Bounds, per pattern: at most AGG_PATTERN_MAX_LEN bytes; counted repetitions whose nested
 * counts multiply past 1000 are refused (RE2's own rule); the compiled program and the
 * matcher's caches together stay within AGG_PATTERN_MAX_MEM (a pattern needing more is
 * refused). The syntax is POSIX ERE plus \d \s \w \b; ^ and $ match at the subject's ends
 * only; no back-references.
 *
 * Threading: a compiled pattern may be matched from several threads at once. */
#ifndef AGG_PATTERN_H
#define AGG_PATTERN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AGG_PATTERN_MAX_LEN 512
#define AGG_PATTERN_MAX_MEM (1 << 20) /* bytes per pattern: program and matching caches */

typedef struct agg_pattern agg_pattern_t;

/* Compiles src into *out. Returns 0, CM_EINVAL with err saying what is wrong with it (too
 * long, bad syntax, too large once compiled), or CM_ENOMEM (err says so: RE2's std::bad_alloc
 * is caught, never thrown across this C API). */
int agg_pattern_compile(const char *src, agg_pattern_t **out, char *err, size_t err_size);

/* 1 when the pattern matches somewhere in s (NUL-terminated), else 0 (also when RE2 runs out
 * of memory: no C++ exception leaves these functions). */
int agg_pattern_match(const agg_pattern_t *p, const char *s);

void agg_pattern_free(agg_pattern_t *p);

#ifdef __cplusplus
}
#endif

#endif
