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

/* The row covering pc (an offset from the text base), or NULL. Handler-safe. */
const ag_cfi_row_t *ag_cfi_find(const ag_cfi_row_t *rows, uint32_t n, uint64_t pc);

#endif
