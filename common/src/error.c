/* cm_strerror / cm_errname: static tables, safe from any thread or signal handler. */
#define _GNU_SOURCE
#include "cm/error.h"

#include <string.h>

const char *cm_strerror(int err) {
    switch (err) {
#define XX(code, msg)                                                                              \
    case CM_##code:                                                                                \
        return msg;
        CM_ERRNO_MAP(XX)
#undef XX
    case 0:
        return "success";
    default:
        break;
    }
    if (err < 0 && err > -4000)
        return strerror(-err); /* glibc returns static strings for known codes */
    return "unknown error";
}

const char *cm_errname(int err) {
    switch (err) {
#define XX(code, msg)                                                                              \
    case CM_##code:                                                                                \
        return #code;
        CM_ERRNO_MAP(XX)
#undef XX
    case 0:
        return "OK";
    default:
        break;
    }
    if (err < 0 && err > -4000) {
        const char *n = strerrorname_np(-err);
        if (n)
            return n;
    }
    return "EUNKNOWN";
}
