/* Resizing of plain heap arrays (the parallel arrays of a table that grows together). */
#ifndef CM_ARRAY_H
#define CM_ARRAY_H

#include "cm/error.h"

#include <stdlib.h>

/* Reallocates the array *pp (any pointer type) to n items of its type: 0, or CM_ENOMEM with
 * *pp unchanged. n * the item size must not overflow (the caller bounds n). */
#define CM_RESIZE(pp, n)                                                                           \
    __extension__({                                                                                \
        __typeof__(*(pp)) q_ = realloc(*(pp), (size_t)(n) * sizeof **(pp));                       \
        q_ ? (*(pp) = q_, 0) : CM_ENOMEM;                                                          \
    })

/* -1, 0 or 1 as a is below, equal to or above b: a qsort comparator's step for one key. */
#define CM_CMP(a, b) (((a) > (b)) - ((a) < (b)))

/* The number of items of arr[0, n), sorted by their field, whose field is <= k (a binary
 * search: the index of the first one above k). */
#define CM_COUNT_LE(arr, n, field, k)                                                              \
    __extension__({                                                                                \
        size_t lo_ = 0, hi_ = (n);                                                                 \
        while (lo_ < hi_) {                                                                        \
            size_t mid_ = lo_ + (hi_ - lo_) / 2;                                                   \
            if ((arr)[mid_].field <= (k))                                                          \
                lo_ = mid_ + 1;                                                                    \
            else                                                                                   \
                hi_ = mid_;                                                                        \
        }                                                                                          \
        lo_;                                                                                       \
    })

#endif
