/* Error codes shared by every fleetprof component.
 *
 * Functions return 0 on success, a negative errno or a negative CM_E* code on failure
 * (libuv's convention). One X-macro table gives both the enum and cm_strerror().
 * Thread-safe, async-signal-safe (cm_strerror returns static strings).
 */
#ifndef CM_ERROR_H
#define CM_ERROR_H

#define CM_ERRNO_MAP(XX)                                                                           \
    XX(EMAGIC, "not a fleetprof chunk (bad magic)")                                              \
    XX(EVERSION, "unsupported chunk format major version")                                       \
    XX(ECHECKSUM, "chunk checksum mismatch")                                                     \
    XX(ETRUNCATED, "chunk truncated")                                                            \
    XX(ETOOBIG, "a length or count exceeds its limit")                                           \
    XX(EFORMAT, "malformed chunk")                                                               \
    XX(ERANGE, "an index or value is out of range")                                              \
    XX(ECOMPRESS, "compression or decompression failed")                                         \
    XX(ENOMEM, "out of memory or over the allocation budget")                                    \
    XX(EINVAL, "invalid argument")                                                               \
    XX(ECONFIG, "invalid configuration value")                                                   \
    XX(EIO, "input/output error")

/* Codes start far from errno values so both can share the negative range. */
typedef enum {
    CM__EBASE = 4000,
#define XX(code, _) CM_##code##_POS,
    CM_ERRNO_MAP(XX)
#undef XX
    CM__EEND /* one past the last code's position: CM__EEND - CM__EBASE - 1 codes */
} cm_errno_pos_t;

#define XX(code, _) enum { CM_##code = -(int)CM_##code##_POS };
CM_ERRNO_MAP(XX)
#undef XX

/* Returns a static description of a CM_E* code or a negative errno. Never NULL. */
const char *cm_strerror(int err);
/* Returns the symbolic name ("EFORMAT", "ENOENT" ...) of an error, for counters and logs. */
const char *cm_errname(int err);

#endif
