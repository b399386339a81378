/* DWARF call-frame information compiled into compact unwind rows (cfi.c), the per-process
 * table of them the signal handler reads (cfi_table.c), and the unwinder (unwind.c).
 *
 * A row says, for every address from its pc up to the next row's pc, how to find the caller:
 *   CFA = rsp + off | rbp + off | *(rbp + off) | the PLT rule; return address at CFA - 8;
 *   the caller's rbp at CFA + fp_off (fp_off != 0) or unchanged (fp_off == 0).
 * This is the shape async-profiler (FrameDesc) and the OpenTelemetry eBPF profiler (stack
 * deltas) compile .eh_frame into: x86-64 code only ever needs these few forms; anything else
 * (a CFA in another register, a DWARF expression other than the PLT and realigned-stack ones)
 * becomes an AG_CFI_FALLBACK row, counted, where the unwinder tries a frame-pointer step.
 * Rows are 12 bytes and sorted by pc; pcs are offsets from the object's first executable byte.
 *
 * The bucket index (ag_cfi_index_build, ag_cfi_find_idx): a binary search over a cold table of
 * 20k-60k rows misses the cache on most of its ~15 probes (~1 us a lookup in redis-server).
 * Like the OpenTelemetry eBPF profiler's and async-profiler's lookups, the text is cut into
 * buckets of 2^shift bytes and idx[k] counts the rows whose pc <= k << shift (so idx[k] - 1 is
 * the row covering the bucket's first byte); a pc in bucket k is then searched only among
 * rows[idx[k] .. idx[k + 1]]: one index cache line and one or two row lines. Built by the
 * background thread next to its rows, immutable, published and retired with them.
 */
#ifndef AG_CFI_H
#define AG_CFI_H

#include <stddef.h>
#include <stdint.h>

enum {
    AG_CFI_NONE = 0,     /* no FDE covers this range (gap): frame-pointer fallback */
    AG_CFI_RSP = 1,      /* CFA = rsp + cfa_off */
    AG_CFI_RBP = 2,      /* CFA = rbp + cfa_off */
    AG_CFI_DEREF = 3,    /* CFA = *(rbp + cfa_off) (main() realigning its stack) */
    AG_CFI_PLT = 4,      /* CFA = rsp + 8 + ((pc & 15) >= cfa_off ? 8 : 0) (lazy PLT stubs) */
    AG_CFI_SIGNAL = 5,   /* signal trampoline (__restore_rt): a ucontext_t at rsp */
    AG_CFI_END = 6,      /* return address undefined: the outermost frame (_start, clone3) */
    AG_CFI_FALLBACK = 7, /* a rule not compiled: frame-pointer fallback */
};

typedef struct {
    uint32_t pc;     /* offset from the object's text base */
    int32_t cfa_off;
    int16_t fp_off;  /* caller's rbp at CFA + fp_off; 0: unchanged */
    uint8_t kind;    /* AG_CFI_* */
    uint8_t pad;
} ag_cfi_row_t;

/* ---- cfi.c: the compiler (background thread or tests; allocates) ---- */
typedef struct ag_cfi_build ag_cfi_build_t;
typedef struct {
    uint64_t fdes, cies;
    uint64_t fallback_rows; /* rows with a rule not compiled */
    uint64_t bad;           /* malformed entries skipped */
} ag_cfi_stats_t;

ag_cfi_build_t *ag_cfi_build_new(void);
/* Parses one .eh_frame (debug = 0) or .debug_frame (debug = 1) section held in data[0..size),
 * whose first byte has ELF virtual address vaddr (pc-relative pointers need it). Returns 0, or
 * -1 when out of memory (what was parsed so far stays). Malformed entries are skipped and
 * counted. */
int ag_cfi_build_add(ag_cfi_build_t *b, const uint8_t *data, size_t size, uint64_t vaddr,
                     int debug);
/* Sorts the rows, keeps those in [text_lo, text_hi) (ELF vaddrs), makes pcs relative to text_lo
 * and frees b. *rows is malloc'ed (NULL when there is none). Returns 0 or -1 (no memory). */
int ag_cfi_build_finish(ag_cfi_build_t *b, uint64_t text_lo, uint64_t text_hi,
                        ag_cfi_row_t **rows, uint32_t *nrows, ag_cfi_stats_t *st);
void ag_cfi_build_free(ag_cfi_build_t *b);


/* Default bucket: 2^6 = 64 bytes of text. Measured (bench-cfi-index density, Debian's objects on
 * this machine): libc, python3 and redis-server hold one row per 49, 44 and 29 bytes of text.
 * A lookup then reads 2.28, 2.30 and 2.38 cache lines on average (index + rows; the floor is 2:
 * one index line, one row line) where the plain search reads 13.5-14.6; the index costs 4 bytes
 * per 64 of text, 26%, 23% and 15% of the rows' memory. 128-byte buckets halve that memory
 * for +0.10-0.17 lines a lookup (each line missed on a cold cache is ~100 ns, more with a TLB
 * miss); 32-byte buckets double it for -0.05-0.09 lines. The handler's cost is what issue 14
 * is short of, memory is not (python3's tables are ~3 MiB of a 16 MiB target). */
#define AG_CFI_IDX_SHIFT 6

/* Bucket index over rows[0..n) for a text of text_len bytes (pcs are offsets into it), with the
 * smallest shift >= min_shift (the agent: AG_CFI_IDX_SHIFT) whose index is no larger than the
 * rows (a sparse table, e.g. a big text with few FDEs, gets bigger buckets: the index stays
 * bounded by the rows, which the memory cap already bounds). Returns the
 * malloc'ed array of *nb + 1 entries (idx[k] = rows with pc <= k << *shift, k = 0..*nb), or
 * NULL (no rows, or no memory: the plain search then serves). Background thread only. */
uint32_t *ag_cfi_index_build(const ag_cfi_row_t *rows, uint32_t n, uint64_t text_len,
                             unsigned min_shift, uint32_t *nb, uint8_t *shift);

/* The row covering pc (an offset from the text base), or NULL, searching only the pc's bucket
 * when idx is not NULL (nb buckets of 2^shift bytes; a pc past the last bucket searches the rows
 * from idx[nb] on). Handler-safe: no calls, no stores. */
const ag_cfi_row_t *ag_cfi_find_idx(const ag_cfi_row_t *rows, uint32_t n, const uint32_t *idx,
                                    uint32_t nb, unsigned shift, uint64_t pc);

/* The row covering pc (an offset from the text base), or NULL: the plain binary search over
 * all the rows (no index). Handler-safe. */
static inline const ag_cfi_row_t *ag_cfi_find(const ag_cfi_row_t *rows, uint32_t n,
                                              uint64_t pc) {
    return ag_cfi_find_idx(rows, n, NULL, 0, 0, pc);
}

#endif
