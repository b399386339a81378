/* Compiles DWARF call-frame information (.eh_frame, .debug_frame) into unwind rows (cfi.h).
 *
 * Thread contract: background thread (or a test) only; allocates; never called from a
 * handler except ag_cfi_find_idx (and ag_cfi_find, the same without an index), searches over
 * immutable arrays. The bucket
 * index over a table (ag_cfi_index_build) is built here too, by the same thread.
 *
 * Every CIE/FDE is run through a small CFA-program interpreter that tracks only what an x86-64
 * stack walk needs: the CFA rule, the rule of rbp (DWARF register 6) and of the return address
 * (16). Other registers' rules are ignored (a DW_CFA_expression for r12 costs nothing). Two
 * DWARF expressions are common enough to get their own row kinds: the lazy-binding PLT rule
 * (breg7 8; breg16 0; lit15; and; lit11|lit10; ge; lit3; shl; plus) and the realigned stack of
 * main() (breg6 off; deref). A CIE with the 'S' augmentation (the signal trampoline) makes
 * every row of its FDEs AG_CFI_SIGNAL. Anything else not understood ends in an
 * AG_CFI_FALLBACK row, counted in ag_cfi_stats_t.fallback_rows. A malformed entry (a length or
 * pointer outside the section, an unknown opcode) is skipped and counted as bad.
 *
 * Rows of all FDEs are sorted by pc; each FDE's end gets an AG_CFI_NONE row unless another FDE
 * starts there, and consecutive rows with the same rule are merged.
 */
#include "cfi.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t pc;
    uint32_t seq;
    uint8_t marker; /* an FDE's end: loses against a real row at the same pc */
    ag_cfi_row_t row;
} tmp_row_t;

typedef struct {
    uint64_t off; /* CIE's offset in its section */
    const uint8_t *data; /* its section */
    uint64_t code_align;
    int64_t data_align;
    uint32_t ra_reg;
    uint8_t fde_enc, signal, z, version;
    const uint8_t *insns, *insns_end;
} cie_t;

typedef struct {
    uint64_t pc;
    size_t start, n; /* its rows (with its end marker) in rows[] */
} fde_span_t;

struct ag_cfi_build {
    tmp_row_t *rows;
    size_t n, cap;
    fde_span_t *fdes;
    size_t nf, capf;
    uint32_t seq;
    ag_cfi_stats_t st;
    cie_t cies[16]; /* small cache: objects have a handful of CIEs */
    uint32_t ncies, cie_next;
};

typedef struct {
    const uint8_t *p, *end, *base; /* base: section start */
    uint64_t vaddr;                /* vaddr of base */
    int err;
} rd_t;

static uint64_t rd_bytes(rd_t *r, int n) {
    if (r->err || r->end - r->p < n) {
        r->err = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

static uint64_t rd_uleb(rd_t *r) {
    uint64_t v = 0;
    unsigned shift = 0;
    for (;;) {
        if (r->p >= r->end) {
            r->err = 1;
            return 0;
        }
        uint8_t b = *r->p++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80))
            return v;
    }
}

static int64_t rd_sleb(rd_t *r) {
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        if (r->p >= r->end) {
            r->err = 1;
            return 0;
        }
        b = *r->p++;
        if (shift < 64)
            v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
        shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40))
        v |= -(int64_t)((uint64_t)1 << shift);
    return v;
}

/* DW_EH_PE_* encoded pointer. Indirect and data/text/func-relative forms are not needed for
 * FDE addresses (GCC and clang emit pcrel|sdata4) and make the entry bad. */
static uint64_t rd_ptr(rd_t *r, uint8_t enc) {
    if (enc == 0xff)
        return 0;
    uint64_t here = r->vaddr + (uint64_t)(r->p - r->base);
    uint64_t v;
    switch (enc & 0x0f) {
    case 0x00: v = rd_bytes(r, 8); break;
    case 0x01: v = rd_uleb(r); break;
    case 0x02: v = rd_bytes(r, 2); break;
    case 0x03: v = rd_bytes(r, 4); break;
    case 0x04: v = rd_bytes(r, 8); break;
    case 0x09: v = (uint64_t)rd_sleb(r); break;
    case 0x0a: v = (uint64_t)(int64_t)(int16_t)rd_bytes(r, 2); break;
    case 0x0b: v = (uint64_t)(int64_t)(int32_t)rd_bytes(r, 4); break;
    case 0x0c: v = rd_bytes(r, 8); break;
    default: r->err = 1; return 0;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += here; break;
    default: r->err = 1; return 0;
    }
    if (enc & 0x80)
        r->err = 1;
    return v;
}

/* ---- interpreter state ---- */
enum { CFA_REG = 0, CFA_PLT, CFA_DEREF, CFA_OTHER };
enum { R_SAME = 0, R_OFFSET, R_UNDEF, R_OTHER };

typedef struct {
    uint8_t cfa_kind, cfa_reg;
    int64_t cfa_off;
    uint8_t fp_rule, ra_rule;
    int64_t fp_off, ra_off;
} state_t;

/* Room for one more element in the array arr of n used and cap allocated: cap doubles (from
 * first). 0, or -1 out of memory (arr unchanged). */
#define GROW(arr, n, cap, first)                                                                   \
    ({                                                                                             \
        int rc_ = 0;                                                                               \
        if ((n) == (cap)) {                                                                        \
            size_t nc_ = (cap) ? 2 * (cap) : (first);                                              \
            __typeof__(arr) na_ = realloc((arr), nc_ * sizeof *(arr));                             \
            if (na_) {                                                                             \
                (arr) = na_;                                                                       \
                (cap) = nc_;                                                                       \
            } else {                                                                               \
                rc_ = -1;                                                                          \
            }                                                                                      \
        }                                                                                          \
        rc_;                                                                                       \
    })

static int emit(ag_cfi_build_t *b, uint64_t pc, uint8_t marker, const ag_cfi_row_t *row) {
    if (GROW(b->rows, b->n, b->cap, 1024) != 0)
        return -1;
    tmp_row_t *t = &b->rows[b->n++];
    t->pc = pc;
    t->seq = b->seq++;
    t->marker = marker;
    t->row = *row;
    return 0;
}

static void compile(const state_t *s, int signal, ag_cfi_build_t *b, ag_cfi_row_t *row) {
    memset(row, 0, sizeof *row);
    if (signal) {
        row->kind = AG_CFI_SIGNAL;
        return;
    }
    if (s->ra_rule == R_UNDEF) {
        row->kind = AG_CFI_END;
        return;
    }
    int ok = s->ra_rule == R_OFFSET && s->ra_off == -8 &&
             (s->fp_rule == R_SAME || (s->fp_rule == R_OFFSET && s->fp_off >= -32768 &&
                                       s->fp_off <= 32767 && s->fp_off != 0)) &&
             s->cfa_off >= INT32_MIN && s->cfa_off <= INT32_MAX;
    if (ok) {
        if (s->cfa_kind == CFA_REG && s->cfa_reg == 7)
            row->kind = AG_CFI_RSP;
        else if (s->cfa_kind == CFA_REG && s->cfa_reg == 6)
            row->kind = AG_CFI_RBP;
        else if (s->cfa_kind == CFA_PLT)
            row->kind = AG_CFI_PLT;
        else if (s->cfa_kind == CFA_DEREF)
            row->kind = AG_CFI_DEREF;
    }
    if (!row->kind) {
        row->kind = AG_CFI_FALLBACK;
        b->st.fallback_rows++;
        return;
    }
    row->cfa_off = (int32_t)s->cfa_off;
    row->fp_off = s->fp_rule == R_OFFSET ? (int16_t)s->fp_off : 0;
}

/* A DW_CFA_def_cfa_expression block: the PLT rule, *(rbp + off), or other. */
static void cfa_expr(state_t *s, const uint8_t *e, uint64_t len) {
    static const uint8_t plt[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a};
    if (len == 11 && !memcmp(e, plt, sizeof plt) && (e[6] == 0x3b || e[6] == 0x3a) &&
        e[7] == 0x2a && e[8] == 0x33 && e[9] == 0x24 && e[10] == 0x22) {
        s->cfa_kind = CFA_PLT;
        s->cfa_off = e[6] - 0x30; /* lit11 -> 11 */
        return;
    }
    if (len >= 3 && e[0] == 0x76 && e[len - 1] == 0x06) { /* breg6 sleb; deref */
        rd_t r = {e + 1, e + len - 1, e, 0, 0};
        int64_t off = rd_sleb(&r);
        if (!r.err && r.p == e + len - 1) {
            s->cfa_kind = CFA_DEREF;
            s->cfa_off = off;
            return;
        }
    }
    s->cfa_kind = CFA_OTHER;
}

/* What one CFA instruction asks of a register's rule, and how far it moves the location. */
enum { OP_NONE, OP_OFFSET, OP_RESTORE };
typedef struct {
    int kind;     /* OP_*: the register's rule is an offset from the CFA, or the CIE's again */
    uint64_t reg;
    int64_t off;
    uint64_t adv; /* bytes the location advances */
} insn_t;

/* DW_CFA_remember_state's stack. */
typedef struct {
    state_t st[16];
    int n;
} state_stack_t;

/* A register's rule the rows cannot express. */
static void rule_other(state_t *s, uint64_t reg) {
    if (reg == 6)
        s->fp_rule = R_OTHER;
    if (reg == 16)
        s->ra_rule = R_OTHER;
}

/* The CFA-defining instructions (def_cfa, def_cfa_register/offset/expression, their _sf
 * forms); 0 if op is none of them. */
static int cfa_op(const cie_t *c, rd_t *r, state_t *s, uint8_t op) {
    switch (op) {
    case 0x0c:
        s->cfa_kind = CFA_REG;
        s->cfa_reg = (uint8_t)rd_uleb(r);
        s->cfa_off = (int64_t)rd_uleb(r);
        return 1;
    case 0x0d:
        s->cfa_reg = (uint8_t)rd_uleb(r);
        if (s->cfa_kind != CFA_REG)
            s->cfa_kind = CFA_OTHER;
        return 1;
    case 0x0e: s->cfa_off = (int64_t)rd_uleb(r); return 1;
    case 0x0f: {
        uint64_t len = rd_uleb(r);
        if (len > (uint64_t)(r->end - r->p)) {
            r->err = 1;
            return 1;
        }
        cfa_expr(s, r->p, len);
        r->p += len;
        return 1;
    }
    case 0x12:
        s->cfa_kind = CFA_REG;
        s->cfa_reg = (uint8_t)rd_uleb(r);
        s->cfa_off = rd_sleb(r) * c->data_align;
        return 1;
    case 0x13: s->cfa_off = rd_sleb(r) * c->data_align; return 1;
    }
    return 0;
}

/* The instructions without their operand in the opcode (all but advance_loc, offset and
 * restore): what they do to the CFA, the rules and the state stack is done here, a register
 * rule's offset or restore and an advance are left in *in. -1: an unknown instruction. */
static int decode_ext(const cie_t *c, rd_t *r, state_t *s, state_stack_t *stk, uint64_t pc,
                      uint8_t op, insn_t *in) {
    if (cfa_op(c, r, s, op))
        return 0;
    switch (op) {
    case 0x00: break;
    case 0x01: {
        uint64_t np = rd_ptr(r, c->fde_enc);
        in->adv = np > pc ? np - pc : 0;
        break;
    }
    case 0x02: in->adv = rd_bytes(r, 1) * c->code_align; break;
    case 0x03: in->adv = rd_bytes(r, 2) * c->code_align; break;
    case 0x04: in->adv = rd_bytes(r, 4) * c->code_align; break;
    case 0x05:
        in->reg = rd_uleb(r);
        in->off = (int64_t)rd_uleb(r) * c->data_align;
        in->kind = OP_OFFSET;
        break;
    case 0x06:
        in->reg = rd_uleb(r);
        in->kind = OP_RESTORE;
        break;
    case 0x07:
    case 0x08:
    case 0x09: {
        uint64_t reg = rd_uleb(r);
        if (op == 0x09)
            rd_uleb(r);
        if (reg == 6)
            s->fp_rule = op == 0x08 ? R_SAME : R_OTHER;
        if (reg == 16)
            s->ra_rule = op == 0x07 ? R_UNDEF : R_OTHER;
        break;
    }
    case 0x0a:
        if (stk->n < (int)(sizeof stk->st / sizeof stk->st[0]))
            stk->st[stk->n++] = *s;
        break;
    case 0x0b:
        if (stk->n > 0)
            *s = stk->st[--stk->n];
        break;
    case 0x10:
    case 0x16: {
        uint64_t reg = rd_uleb(r), len = rd_uleb(r);
        if (len > (uint64_t)(r->end - r->p)) {
            r->err = 1;
            break;
        }
        r->p += len;
        rule_other(s, reg);
        break;
    }
    case 0x11:
        in->reg = rd_uleb(r);
        in->off = rd_sleb(r) * c->data_align;
        in->kind = OP_OFFSET;
        break;
    case 0x14:
    case 0x15: {
        uint64_t reg = rd_uleb(r);
        if (op == 0x14)
            rd_uleb(r);
        else
            rd_sleb(r);
        rule_other(s, reg);
        break;
    }
    case 0x2e: rd_uleb(r); break; /* GNU_args_size */
    case 0x2f:
        in->reg = rd_uleb(r);
        in->off = -(int64_t)rd_uleb(r) * c->data_align;
        in->kind = OP_OFFSET;
        break;
    default: return -1;
    }
    return 0;
}

/* Decodes the instruction at r->p (at location pc) into *in. -1: an unknown instruction. */
static int decode(const cie_t *c, rd_t *r, state_t *s, state_stack_t *stk, uint64_t pc,
                  insn_t *in) {
    uint8_t op = *r->p++;
    uint8_t hi = op & 0xc0, lo = op & 0x3f;
    memset(in, 0, sizeof *in);
    if (hi == 0x40) {
        in->adv = lo * c->code_align;
    } else if (hi == 0x80) {
        in->reg = lo;
        in->off = (int64_t)rd_uleb(r) * c->data_align;
        in->kind = OP_OFFSET;
    } else if (hi == 0xc0) {
        in->reg = lo;
        in->kind = OP_RESTORE;
    } else {
        return decode_ext(c, r, s, stk, pc, op, in);
    }
    return 0;
}

/* A register rule set by an instruction: an offset from the CFA, or the CIE's rule again. */
static void apply(state_t *s, const state_t *init, const insn_t *in) {
    if (in->kind == OP_OFFSET) {
        if (in->reg == 6) {
            s->fp_rule = R_OFFSET;
            s->fp_off = in->off;
        } else if (in->reg == 16) {
            s->ra_rule = R_OFFSET;
            s->ra_off = in->off;
        }
    } else if (in->kind == OP_RESTORE) {
        if (init && in->reg == 6) {
            s->fp_rule = init->fp_rule;
            s->fp_off = init->fp_off;
        } else if (init && in->reg == 16) {
            s->ra_rule = init->ra_rule;
            s->ra_off = init->ra_off;
        }
    }
}

/* Runs a CFA program. With b == NULL it only sets up the initial state (CIE). Returns 0, -1 on
 * a malformed program, -2 when out of memory. */
static int run(ag_cfi_build_t *b, const cie_t *c, const state_t *init, state_t *s,
               const uint8_t *p, const uint8_t *end, uint64_t pc, uint64_t pc_end, rd_t *base) {
    state_stack_t stk = {.n = 0};
    rd_t r = *base;
    r.p = p;
    r.end = end;
    ag_cfi_row_t row;
    while (r.p < r.end && !r.err) {
        insn_t in;
        if (decode(c, &r, s, &stk, pc, &in) != 0)
            return -1;
        apply(s, init, &in);
        if (in.adv && b) {
            compile(s, c->signal, b, &row);
            if (emit(b, pc, 0, &row) != 0)
                return -2;
            pc += in.adv;
            if (pc >= pc_end)
                return 0;
        }
    }
    if (r.err)
        return -1;
    if (b && pc < pc_end) {
        compile(s, c->signal, b, &row);
        if (emit(b, pc, 0, &row) != 0)
            return -2;
    }
    return 0;
}

/* Parses the CIE at section offset off. Returns it (cached) or NULL. */
static const cie_t *get_cie(ag_cfi_build_t *b, const rd_t *sec, uint64_t off, int debug) {
    for (uint32_t i = 0; i < b->ncies; i++)
        if (b->cies[i].off == off && b->cies[i].data == sec->base)
            return &b->cies[i];
    rd_t r = *sec;
    if (off >= (uint64_t)(sec->end - sec->base))
        return NULL;
    r.p = sec->base + off;
    uint64_t len = rd_bytes(&r, 4);
    int w64 = len == 0xffffffffu;
    if (w64)
        len = rd_bytes(&r, 8);
    if (r.err || len > (uint64_t)(r.end - r.p))
        return NULL;
    r.end = r.p + len;
    uint64_t id = rd_bytes(&r, w64 ? 8 : 4);
    if (id != (debug ? (w64 ? ~0ull : 0xffffffffull) : 0))
        return NULL;
    cie_t c;
    memset(&c, 0, sizeof c);
    c.off = off;
    c.data = sec->base;
    c.version = (uint8_t)rd_bytes(&r, 1);
    const char *aug = (const char *)r.p;
    while (r.p < r.end && *r.p)
        r.p++;
    if (r.p >= r.end)
        return NULL;
    size_t auglen = (size_t)((const char *)r.p - aug);
    r.p++;
    if (auglen >= 2 && aug[0] == 'e' && aug[1] == 'h')
        rd_bytes(&r, 8); /* old GCC eh data */
    if (c.version >= 4)
        rd_bytes(&r, 2); /* address size, segment size */
    c.code_align = rd_uleb(&r);
    c.data_align = rd_sleb(&r);
    c.ra_reg = c.version == 1 ? (uint32_t)rd_bytes(&r, 1) : (uint32_t)rd_uleb(&r);
    c.fde_enc = 0; /* absptr */
    if (auglen && aug[0] == 'z') {
        c.z = 1;
        uint64_t alen = rd_uleb(&r);
        const uint8_t *aend = r.p + alen;
        if (r.err || alen > (uint64_t)(r.end - r.p))
            return NULL;
        for (size_t i = 1; i < auglen && !r.err; i++) {
            switch (aug[i]) {
            case 'L': rd_bytes(&r, 1); break;
            case 'R': c.fde_enc = (uint8_t)rd_bytes(&r, 1); break;
            case 'P': {
                uint8_t enc = (uint8_t)rd_bytes(&r, 1);
                rd_t tmp = r;
                rd_ptr(&tmp, enc & 0x7f); /* indirect personality: the pointer's size only */
                r.p = tmp.p;
                r.err |= tmp.err;
                break;
            }
            case 'S': c.signal = 1; break;
            default: i = auglen; break; /* 'B', 'G'...: the rest is skipped by alen */
            }
        }
        r.p = aend;
    }
    if (r.err || c.ra_reg != 16)
        return NULL;
    c.insns = r.p;
    c.insns_end = r.end;
    uint32_t slot = b->ncies < 16 ? b->ncies++ : (b->cie_next++ & 15);
    b->cies[slot] = c;
    b->st.cies++;
    return &b->cies[slot];
}

ag_cfi_build_t *ag_cfi_build_new(void) { return calloc(1, sizeof(ag_cfi_build_t)); }

void ag_cfi_build_free(ag_cfi_build_t *b) {
    if (b) {
        free(b->fdes);
        free(b->rows);
        free(b);
    }
}

int ag_cfi_build_add(ag_cfi_build_t *b, const uint8_t *data, size_t size, uint64_t vaddr,
                     int debug) {
    rd_t sec = {data, data + size, data, vaddr, 0};
    b->ncies = 0; /* the cache is per section */
    const uint8_t *p = data;
    while ((size_t)(data + size - p) >= 4) {
        rd_t r = sec;
        r.p = p;
        uint64_t len = rd_bytes(&r, 4);
        if (len == 0) {
            if (!debug)
                break; /* .eh_frame terminator */
            p += 4;
            continue;
        }
        int w64 = len == 0xffffffffu;
        if (w64)
            len = rd_bytes(&r, 8);
        if (r.err || len > (uint64_t)(r.end - r.p)) {
            b->st.bad++;
            break;
        }
        const uint8_t *next = r.p + len;
        r.end = next;
        const uint8_t *idp = r.p;
        uint64_t id = rd_bytes(&r, w64 ? 8 : 4);
        p = next;
        int is_cie = debug ? id == (w64 ? ~0ull : 0xffffffffull) : id == 0;
        if (r.err || is_cie)
            continue;
        uint64_t cie_off = debug ? id : (uint64_t)(idp - data) - id;
        if (!debug && id > (uint64_t)(idp - data)) {
            b->st.bad++;
            continue;
        }
        const cie_t *c = get_cie(b, &sec, cie_off, debug);
        if (!c) {
            b->st.bad++;
            continue;
        }
        uint64_t pc, range;
        if (debug) {
            pc = rd_bytes(&r, 8);
            range = rd_bytes(&r, 8);
        } else {
            pc = rd_ptr(&r, c->fde_enc);
            range = rd_ptr(&r, c->fde_enc & 0x0f);
        }
        if (c->z) {
            uint64_t alen = rd_uleb(&r);
            if (alen > (uint64_t)(r.end - r.p))
                r.err = 1;
            else
                r.p += alen;
        }
        if (r.err || range == 0 || pc + range < pc) {
            if (r.err)
                b->st.bad++;
            continue;
        }
        b->st.fdes++;
        state_t init, s;
        memset(&init, 0, sizeof init);
        init.cfa_kind = CFA_OTHER;
        if (run(NULL, c, NULL, &init, c->insns, c->insns_end, pc, pc + range, &sec) != 0) {
            b->st.bad++;
            continue;
        }
        s = init;
        size_t mark = b->n;
        int rc = run(b, c, &init, &s, r.p, r.end, pc, pc + range, &sec);
        if (rc == -2)
            return -1;
        if (rc != 0) {
            b->n = mark; /* drop the partial FDE: its pcs get a fallback row */
            ag_cfi_row_t fb = {0, 0, 0, AG_CFI_FALLBACK, 0};
            b->st.bad++;
            b->st.fallback_rows++;
            if (emit(b, pc, 0, &fb) != 0)
                return -1;
        }
        ag_cfi_row_t none = {0, 0, 0, AG_CFI_NONE, 0};
        if (emit(b, pc + range, 1, &none) != 0)
            return -1;
        if (GROW(b->fdes, b->nf, b->capf, 256) != 0)
            return -1;
        b->fdes[b->nf++] = (fde_span_t){pc, mark, b->n - mark};
    }
    return 0;
}

static int cmp_tmp(const void *a, const void *b) {
    const tmp_row_t *x = a, *y = b;
    if (x->pc != y->pc)
        return x->pc < y->pc ? -1 : 1;
    if (x->marker != y->marker)
        return x->marker ? -1 : 1; /* markers first: the real row at that pc wins */
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_fde(const void *a, const void *b) {
    const fde_span_t *x = a, *y = b;
    if (x->pc != y->pc)
        return x->pc < y->pc ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

int ag_cfi_build_finish(ag_cfi_build_t *b, uint64_t text_lo, uint64_t text_hi,
                        ag_cfi_row_t **rows, uint32_t *nrows, ag_cfi_stats_t *st) {
    *rows = NULL;
    *nrows = 0;
    if (st)
        *st = b->st;
    /* FDEs usually come in address order (the linker keeps .eh_frame in text order): sort
     * only when needed (the sort was 3/4 of the compile time of python3's table) */
    size_t unsorted = 0;
    for (size_t i = 1; i < b->n && !unsorted; i++)
        unsorted = cmp_tmp(&b->rows[i - 1], &b->rows[i]) > 0;
    if (unsorted && b->nf) { /* order whole FDEs (each one's rows are in order already) */
        qsort(b->fdes, b->nf, sizeof *b->fdes, cmp_fde);
        tmp_row_t *o = malloc(b->n * sizeof *o);
        if (o) {
            size_t k = 0;
            for (size_t f = 0; f < b->nf; f++) {
                memcpy(o + k, b->rows + b->fdes[f].start, b->fdes[f].n * sizeof *o);
                k += b->fdes[f].n;
            }
            if (k == b->n) {
                free(b->rows);
                b->rows = o;
                unsorted = 0;
                for (size_t i = 1; i < b->n && !unsorted; i++)
                    unsorted = cmp_tmp(&b->rows[i - 1], &b->rows[i]) > 0;
            } else {
                free(o);
            }
        }
    }
    if (unsorted) /* overlapping FDEs */
        qsort(b->rows, b->n, sizeof *b->rows, cmp_tmp);
    ag_cfi_row_t *out = b->n ? malloc(b->n * sizeof *out) : NULL;
    if (b->n && !out) {
        ag_cfi_build_free(b);
        return -1;
    }
    uint32_t m = 0;
    for (size_t i = 0; i < b->n; i++) {
        const tmp_row_t *t = &b->rows[i];
        if (i + 1 < b->n && b->rows[i + 1].pc == t->pc)
            continue; /* the last row at a pc wins */
        if (t->pc < text_lo || t->pc > text_hi || t->pc - text_lo > UINT32_MAX)
            continue;
        ag_cfi_row_t r = t->row;
        r.pc = (uint32_t)(t->pc - text_lo);
        if (m && out[m - 1].kind == r.kind && out[m - 1].cfa_off == r.cfa_off &&
            out[m - 1].fp_off == r.fp_off)
            continue;
        if (m == 0 && r.kind == AG_CFI_NONE)
            continue;
        out[m++] = r;
    }
    ag_cfi_build_free(b);
    if (m == 0) {
        free(out);
        return 0;
    }
    ag_cfi_row_t *shrunk = realloc(out, m * sizeof *out);
    *rows = shrunk ? shrunk : out;
    *nrows = m;
    return 0;
}

uint32_t *ag_cfi_index_build(const ag_cfi_row_t *rows, uint32_t n, uint64_t text_len,
                             unsigned min_shift, uint32_t *nb, uint8_t *shift) {
    *nb = 0;
    *shift = 0;
    if (n == 0)
        return NULL;
    /* rows past the text (an FDE's end marker at text_len) are found from idx[nb] on */
    unsigned s = min_shift ? min_shift : 1;
    uint64_t k_max;
    for (;; s++) {
        k_max = (text_len + ((uint64_t)1 << s) - 1) >> s;
        if (s >= 32 || (k_max + 1) * sizeof(uint32_t) <= (uint64_t)n * sizeof(ag_cfi_row_t))
            break;
    }
    if (k_max >= UINT32_MAX)
        return NULL;
    uint32_t *idx = malloc((size_t)(k_max + 1) * sizeof *idx);
    if (!idx)
        return NULL;
    uint32_t j = 0;
    for (uint64_t k = 0; k <= k_max; k++) {
        uint64_t start = k << s;
        while (j < n && rows[j].pc <= start)
            j++;
        idx[k] = j;
    }
    *nb = (uint32_t)k_max;
    *shift = (uint8_t)s;
    return idx;
}

__attribute__((no_sanitize("address", "thread", "undefined"))) const ag_cfi_row_t *
ag_cfi_find_idx(const ag_cfi_row_t *rows, uint32_t n, const uint32_t *idx, uint32_t nb,
                unsigned shift, uint64_t pc) {
    uint32_t l = 0, h = n;
    if (idx) {
        /* rows[0 .. idx[k]) start at or before the bucket's first byte <= pc; rows from
         * idx[k + 1] on start after its last byte >= pc: the answer's successor is between */
        uint64_t k = pc >> shift;
        if (k < nb) {
            l = idx[k];
            h = idx[k + 1];
        } else {
            l = idx[nb];
        }
    }
    while (l < h) { /* first row with pc > target */
        uint32_t mid = l + (h - l) / 2;
        if (rows[mid].pc <= pc)
            l = mid + 1;
        else
            h = mid;
    }
    return l > 0 ? &rows[l - 1] : NULL;
}
