/* libprotobuf-c, loaded on the first chunk encode rather than linked (issue 13).
 *
 * Every program a profiled process execs inherits LD_PRELOAD and would open, map and relocate
 * each library in the agent's NEEDED list before its main (bench-spawn: ~0.08 ms of CPU per
 * exec of /bin/true for libprotobuf-c). Debian ships no PIC archive of it to link in, and only
 * the chunk encoder (fp_common's chunk_encode.c, through the generated fp_proto code) calls
 * it, on the background thread, once there is a chunk to send. So the agent defines the
 * entry points that code references, hidden (the program's own libprotobuf-c, if it has one,
 * is never interposed), as trampolines: the first call dlopens libprotobuf-c.so.1 with
 * RTLD_LOCAL and resolves the five functions once. protobuf_c_empty_string (the default value
 * the generated descriptors point at) is our own empty string: the library never refers to
 * its own copy (it compares string members with the descriptor's default_value only).
 *
 * If it cannot be loaded: one stderr line; get_packed_size reports SIZE_MAX, which the encoder
 * refuses (CM_ETOOBIG), so every chunk counts as DROP_ENCODE_FAILED (chunk.c warns once);
 * unpack returns NULL; pack and free do nothing.
 *
 * Threads: the background thread (encoder); the pointers are atomics, so a decode from
 * another thread is safe too. Never from a signal handler.
 */
#include "lazylibs.h"
#include "loader_gate.h"

#include "cm/log.h"

#include <dlfcn.h>
#include <protobuf-c/protobuf-c.h>
#include <stdint.h>

#define PB_HIDDEN __attribute__((visibility("hidden")))

PB_HIDDEN const char protobuf_c_empty_string[] = "";

typedef size_t (*size_fn)(const ProtobufCMessage *);
typedef size_t (*pack_fn)(const ProtobufCMessage *, uint8_t *);
typedef size_t (*pack_buf_fn)(const ProtobufCMessage *, ProtobufCBuffer *);
typedef ProtobufCMessage *(*unpack_fn)(const ProtobufCMessageDescriptor *, ProtobufCAllocator *,
                                       size_t, const uint8_t *);
typedef void (*free_fn)(ProtobufCMessage *, ProtobufCAllocator *);

static struct {
    _Atomic int state; /* 0: not tried, 1: loaded, -1: unavailable */
    _Atomic(size_fn) size;
    _Atomic(pack_fn) pack;
    _Atomic(pack_buf_fn) pack_buf;
    _Atomic(unpack_fn) unpack;
    _Atomic(free_fn) free_unpacked;
} P;

static int pb_load_gated(void);

static int pb_load(void) {
    int st0 = atomic_load(&P.state);
    /* dlopen and dlsym take ld.so's locks: through the loader gate (loader_gate.c) */
    return st0 ? st0 > 0 : ag_loader_call(pb_load_gated);
}

static int pb_load_gated(void) {
    int st = atomic_load(&P.state);
    if (st)
        return st > 0;
    void *h = dlopen("libprotobuf-c.so.1", RTLD_NOW | RTLD_LOCAL);
    void *s = h ? dlsym(h, "protobuf_c_message_get_packed_size") : NULL;
    void *p = h ? dlsym(h, "protobuf_c_message_pack") : NULL;
    void *b = h ? dlsym(h, "protobuf_c_message_pack_to_buffer") : NULL;
    void *u = h ? dlsym(h, "protobuf_c_message_unpack") : NULL;
    void *f = h ? dlsym(h, "protobuf_c_message_free_unpacked") : NULL;
    if (!s || !p || !b || !u || !f) {
        const char *e = dlerror();
        int expected = 0;
        if (atomic_compare_exchange_strong(&P.state, &expected, -1))
            CM_WARN("cannot load libprotobuf-c (%s): no chunk can be encoded",
                    e ? e : "a function is missing");
        return 0;
    }
    atomic_store(&P.size, (size_fn)s);
    atomic_store(&P.pack, (pack_fn)p);
    atomic_store(&P.pack_buf, (pack_buf_fn)b);
    atomic_store(&P.unpack, (unpack_fn)u);
    atomic_store(&P.free_unpacked, (free_fn)f);
    atomic_store(&P.state, 1);
    return 1;
}

void ag_pblib_preload(void) { (void)pb_load(); }

PB_HIDDEN size_t protobuf_c_message_get_packed_size(const ProtobufCMessage *m) {
    return pb_load() ? atomic_load(&P.size)(m) : SIZE_MAX;
}

PB_HIDDEN size_t protobuf_c_message_pack(const ProtobufCMessage *m, uint8_t *out) {
    return pb_load() ? atomic_load(&P.pack)(m, out) : 0;
}

PB_HIDDEN size_t protobuf_c_message_pack_to_buffer(const ProtobufCMessage *m,
                                                   ProtobufCBuffer *buf) {
    return pb_load() ? atomic_load(&P.pack_buf)(m, buf) : 0;
}

PB_HIDDEN ProtobufCMessage *protobuf_c_message_unpack(const ProtobufCMessageDescriptor *d,
                                                      ProtobufCAllocator *a, size_t len,
                                                      const uint8_t *data) {
    return pb_load() ? atomic_load(&P.unpack)(d, a, len, data) : NULL;
}

PB_HIDDEN void protobuf_c_message_free_unpacked(ProtobufCMessage *m, ProtobufCAllocator *a) {
    if (pb_load())
        atomic_load(&P.free_unpacked)(m, a);
}
