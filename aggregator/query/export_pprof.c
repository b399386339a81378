/* pprof export: builds a perftools.profiles.Profile with protobuf-c and gzips it with zlib.
 * Threading: reads the profile only. */
#include "export.h"

#include "cm/error.h"
#include "profile.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zlib.h>

#define HEX_SPAN 33 /* offset of the span id in a context's label strings (after the trace id) */

void agg_pprof_sample_types(cm_event_type_t type, const char *names[2], const char *units[2]) {
    units[0] = "count";
    units[1] = "nanoseconds";
    switch (type) {
    case CM_EV_CPU:
        names[0] = "samples", names[1] = "cpu";
        break;
    case CM_EV_WALL:
        names[0] = "samples", names[1] = "wall";
        break;
    case CM_EV_ALLOC:
        names[0] = "alloc_objects", names[1] = "alloc_space", units[1] = "bytes";
        break;
    case CM_EV_INUSE:
        names[0] = "inuse_objects", names[1] = "inuse_space", units[1] = "bytes";
        break;
    case CM_EV_LOCK:
        names[0] = "contentions", names[1] = "delay";
        break;
    case CM_EV_IO:
        names[0] = "io_ops", names[1] = "io_time";
        break;
    default:
        names[0] = "samples", names[1] = "value", units[1] = "count";
        break;
    }
}

/* The string table: index 0 is "" as pprof requires. Strings point into the profile (or are
 * static), so the table stores pointers only. */
typedef struct {
    char **s;
    size_t n, cap;
    uint64_t *hkey;
    uint32_t *hval; /* index + 1 */
    size_t hcap;
} strtab_t;

static int64_t strtab_get(strtab_t *t, const char *str) {
    size_t len = strlen(str);
    uint64_t h = XXH3_64bits(str, len);
    if (2 * (t->n + 1) > t->hcap) {
        size_t ncap = t->hcap ? 2 * t->hcap : 1024;
        uint64_t *nk = calloc(ncap, sizeof *nk);
        uint32_t *nv = calloc(ncap, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return CM_ENOMEM;
        }
        for (size_t i = 0; i < t->hcap; i++) {
            if (!t->hval[i])
                continue;
            size_t j = t->hkey[i] & (ncap - 1);
            while (nv[j])
                j = (j + 1) & (ncap - 1);
            nk[j] = t->hkey[i];
            nv[j] = t->hval[i];
        }
        free(t->hkey);
        free(t->hval);
        t->hkey = nk;
        t->hval = nv;
        t->hcap = ncap;
    }
    size_t j = h & (t->hcap - 1);
    for (; t->hval[j]; j = (j + 1) & (t->hcap - 1))
        if (t->hkey[j] == h && strcmp(t->s[t->hval[j] - 1], str) == 0)
            return t->hval[j] - 1;
    if (t->n == t->cap) {
        size_t ncap = t->cap ? 2 * t->cap : 256;
        char **ns = realloc(t->s, ncap * sizeof *ns);
        if (!ns)
            return CM_ENOMEM;
        t->s = ns;
        t->cap = ncap;
    }
    t->s[t->n] = (char *)str;
    t->hkey[j] = h;
    t->hval[j] = (uint32_t)(t->n + 1);
    return (int64_t)t->n++;
}

/* A frame that arrived without a function name and was not named since: its name is the one
 * the store gives it, "module+0xADDR" or "0xADDR" with its own address. */
static int frame_unnamed(const agg_frame_t *f) {
    char buf[320];
    if (f->module[0])
        snprintf(buf, sizeof buf, "%s+0x%llx", f->module, (unsigned long long)f->address);
    else
        snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)f->address);
    return strcmp(buf, f->name) == 0;
}

static _Thread_local const agg_row_t *tl_rows;

static int cmp_row(const void *a, const void *b) {
    const agg_row_t *x = &tl_rows[*(const size_t *)a], *y = &tl_rows[*(const size_t *)b];
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    return x->context < y->context ? -1 : x->context > y->context;
}

static int gzip_buf(const uint8_t *in, size_t len, uint8_t **out, size_t *out_len) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return CM_ECOMPRESS;
    size_t cap = deflateBound(&zs, len) + 64;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        deflateEnd(&zs);
        return CM_ENOMEM;
    }
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)len;
    zs.next_out = buf;
    zs.avail_out = (uInt)cap;
    int zr = deflate(&zs, Z_FINISH);
    *out_len = zs.total_out;
    deflateEnd(&zs);
    if (zr != Z_STREAM_END) {
        free(buf);
        return CM_ECOMPRESS;
    }
    *out = buf;
    return 0;
}

int agg_export_pprof(const agg_profile_t *p, uint8_t **out, size_t *out_len) {
    typedef Perftools__Profiles__Profile Profile;
    typedef Perftools__Profiles__ValueType ValueType;
    typedef Perftools__Profiles__Sample Sample;
    typedef Perftools__Profiles__Label Label;
    typedef Perftools__Profiles__Mapping Mapping;
    typedef Perftools__Profiles__Location Location;
    typedef Perftools__Profiles__Line Line;
    typedef Perftools__Profiles__Function Function;
    int rc = CM_ENOMEM;
    strtab_t st = {0};
    Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
    ValueType vt[3] = {PERFTOOLS__PROFILES__VALUE_TYPE__INIT, PERFTOOLS__PROFILES__VALUE_TYPE__INIT,
                       PERFTOOLS__PROFILES__VALUE_TYPE__INIT};
    ValueType *vtp[2] = {&vt[0], &vt[1]};
    size_t nf = p->n_frames, nr = p->n_rows;
    /* locations: one per run of frames at one address (a frame and the frames inlined into
     * it), at most one per frame of a stack; lines: one per frame of a location */
    size_t nsf = (size_t)p->stack_off[p->n_stacks] + nf + 1;
    Function *fn = calloc(nf + 1, sizeof *fn);
    Function **fnp = calloc(nf + 1, sizeof *fnp);
    Location *loc = calloc(nsf, sizeof *loc);
    Location **locp = calloc(nsf, sizeof *locp);
    Line *line = calloc(nsf, sizeof *line);
    Line **linep = calloc(nsf, sizeof *linep);
    uint32_t *fnid = calloc(nf + 1, sizeof *fnid);    /* frame -> function id, 0: unnamed */
    uint32_t *runs = malloc(nsf * sizeof *runs);       /* locations' frames, root-first */
    size_t *runoff = malloc((nsf + 1) * sizeof *runoff); /* location i: runs[off[i]..off[i+1]) */
    size_t lhcap = 16;
    while (lhcap < 2 * nsf)
        lhcap *= 2;
    uint32_t *lhash = calloc(lhcap, sizeof *lhash); /* run -> location index + 1 */
    uint64_t *fhkey = calloc(lhcap, sizeof *fhkey);  /* (name, file) string ids -> function */
    uint32_t *fhval = calloc(lhcap, sizeof *fhval);
    Mapping *map = calloc(nf + 1, sizeof *map);
    Mapping **mapp = calloc(nf + 1, sizeof *mapp);
    uint32_t *frame_map = calloc(nf + 1, sizeof *frame_map); /* frame -> mapping id, 0 none */
    size_t *order = malloc((nr + 1) * sizeof *order);
    size_t nsmax = nr + p->n_stacks + 1;
    Sample *smp = calloc(nsmax, sizeof *smp);
    Sample **smpp = calloc(nsmax, sizeof *smpp);
    int64_t *vals = calloc(2 * nsmax, sizeof *vals);
    uint64_t *sw0 = calloc((size_t)p->n_stacks + 1, sizeof *sw0);
    uint64_t *sc0 = calloc((size_t)p->n_stacks + 1, sizeof *sc0);
    Label *lab = calloc(2 * nr + 2, sizeof *lab);
    Label **labp = calloc(2 * nr + 2, sizeof *labp);
    uint64_t *locids = malloc(((size_t)p->stack_off[p->n_stacks] + 1) * sizeof *locids);
    uint32_t *nlocs_of = calloc((size_t)p->n_stacks + 1, sizeof *nlocs_of); /* per stack */
    /* per context: trace id (32 hex + NUL) at 0, span id (16 hex + NUL) at HEX_SPAN */
    char (*hex)[HEX_SPAN + 17] = calloc((size_t)p->n_contexts + 1, sizeof *hex);
    uint8_t *raw = NULL;
    if (!fn || !fnp || !loc || !locp || !line || !linep || !fnid || !runs || !runoff || !lhash ||
        !fhkey || !fhval || !map || !mapp || !frame_map ||
        !order || !smp || !smpp || !vals || !lab || !labp || !locids || !nlocs_of || !hex || !sw0 ||
        !sc0)
        goto out;
    if (strtab_get(&st, "") != 0)
        goto out;
#define S(str)                                                                                     \
    ({                                                                                             \
        int64_t i_ = strtab_get(&st, (str));                                                       \
        if (i_ < 0)                                                                                \
            goto out;                                                                              \
        i_;                                                                                        \
    })
    const char *names[2], *units[2];
    agg_pprof_sample_types(p->type, names, units);
    vt[0].type = S(names[0]);
    vt[0].unit = S(units[0]);
    vt[1].type = S(names[1]);
    vt[1].unit = S(units[1]);
    vt[2].type = vt[1].type;
    vt[2].unit = vt[1].unit;
    prof.n_sample_type = 2;
    prof.sample_type = vtp;
    prof.period_type = &vt[2];
    prof.default_sample_type = vt[1].type;
    prof.time_nanos = (int64_t)p->time_start_ns;
    prof.duration_nanos =
        p->time_end_ns > p->time_start_ns ? (int64_t)(p->time_end_ns - p->time_start_ns) : 0;
    /* mappings: one per distinct (module, build id) of frames with a module. Addresses are the
     * binary's own (ELF vaddrs, what the store keeps), so each mapping spans the whole address
     * space from 0 with offset 0: pprof then symbolizes an address as it is (elfexec.GetBase's
     * "already adjusted" case), whether the binary is PIE, a library or fixed-address. A
     * mapping with an unnamed frame says has_functions = 0 so that pprof symbolizes it. */
    size_t nmap = 0;
    for (size_t f = 0; f < nf; f++) {
        const agg_frame_t *fr = &p->frames[f];
        if (!fr->module[0])
            continue;
        size_t m;
        for (m = 0; m < nmap; m++) /* few mappings per profile: linear search is fine */
            if (strcmp(st.s[map[m].filename], fr->module) == 0 &&
                strcmp(st.s[map[m].build_id], fr->build_id) == 0)
                break;
        if (m == nmap) {
            Mapping init = PERFTOOLS__PROFILES__MAPPING__INIT;
            map[m] = init;
            map[m].id = m + 1;
            map[m].filename = S(fr->module);
            map[m].build_id = S(fr->build_id);
            map[m].memory_start = 0;
            map[m].memory_limit = UINT64_MAX;
            map[m].file_offset = 0;
            map[m].has_functions = 1;
            mapp[m] = &map[m];
            nmap++;
        }
        if (frame_unnamed(fr))
            map[m].has_functions = 0;
        frame_map[f] = (uint32_t)(m + 1);
    }
    /* pprof takes the first mapping for the main program (`pprof BINARY PROFILE` applies
     * BINARY to it): move the first one that is not a shared library ("*.so*") there */
    for (size_t k = 1; k < nmap; k++) {
        if (!strstr(st.s[map[0].filename], ".so") || strstr(st.s[map[k].filename], ".so"))
            continue;
        Mapping t = map[0];
        map[0] = map[k];
        map[k] = t;
        map[0].id = 1;
        map[k].id = k + 1;
        for (size_t f = 0; f < nf; f++)
            frame_map[f] = frame_map[f] == 1 ? (uint32_t)(k + 1)
                           : frame_map[f] == k + 1 ? 1u : frame_map[f];
        break;
    }
    /* functions: one per (function, source file) of the named frames */
    size_t nfn = 0;
    for (size_t f = 0; f < nf; f++) {
        const agg_frame_t *fr = &p->frames[f];
        if (frame_unnamed(fr))
            continue; /* an address with its mapping (build id): no function, no line */
        int64_t ni = S(fr->function ? fr->function : fr->name), fi = S(fr->file ? fr->file : "");
        uint64_t key = ((uint64_t)ni << 32) | (uint64_t)fi;
        size_t j = (size_t)XXH3_64bits(&key, sizeof key) & (lhcap - 1);
        while (fhval[j] && fhkey[j] != key)
            j = (j + 1) & (lhcap - 1);
        if (!fhval[j]) {
            Function fi0 = PERFTOOLS__PROFILES__FUNCTION__INIT;
            fn[nfn] = fi0;
            fn[nfn].id = nfn + 1;
            fn[nfn].name = fn[nfn].system_name = ni;
            fn[nfn].filename = fi;
            fnp[nfn] = &fn[nfn];
            fhkey[j] = key;
            fhval[j] = (uint32_t)++nfn;
        }
        fnid[f] = fhval[j];
    }
    /* locations, and the location ids of each stack, leaf first: a frame and the frames
     * inlined into it (root-first: those after it with `inlined`) are one location whose lines
     * list the innermost first, as pprof wants */
    size_t nloc = 0, nline = 0;
    runoff[0] = 0;
    for (uint32_t s = 0; s < p->n_stacks; s++) {
        uint32_t a = p->stack_off[s], b = p->stack_off[s + 1], nl = 0;
        for (uint32_t k = a; k < b;) {
            uint32_t e = k + 1;
            while (e < b && (p->frames[p->stack_frames[e]].inlined & AGG_FRAME_INLINED) &&
                   fnid[p->stack_frames[e]] && fnid[p->stack_frames[k]])
                e++;
            const uint32_t *run = p->stack_frames + k;
            size_t rl = e - k;
            size_t j = (size_t)XXH3_64bits(run, rl * sizeof *run) & (lhcap - 1);
            for (; lhash[j]; j = (j + 1) & (lhcap - 1)) {
                size_t li = lhash[j] - 1;
                if (runoff[li + 1] - runoff[li] == rl &&
                    !memcmp(runs + runoff[li], run, rl * sizeof *run))
                    break;
            }
            if (!lhash[j]) { /* a new location */
                memcpy(runs + runoff[nloc], run, rl * sizeof *run);
                runoff[nloc + 1] = runoff[nloc] + rl;
                const agg_frame_t *inner = &p->frames[run[rl - 1]];
                Location li = PERFTOOLS__PROFILES__LOCATION__INIT;
                loc[nloc] = li;
                loc[nloc].id = nloc + 1;
                loc[nloc].mapping_id = frame_map[run[0]];
                loc[nloc].address = inner->address;
                locp[nloc] = &loc[nloc];
                if (fnid[run[0]]) {
                    loc[nloc].n_line = rl;
                    loc[nloc].line = &linep[nline];
                    for (size_t q = 0; q < rl; q++) {
                        const agg_frame_t *fr = &p->frames[run[rl - 1 - q]];
                        Line ln = PERFTOOLS__PROFILES__LINE__INIT;
                        line[nline] = ln;
                        line[nline].function_id = fnid[run[rl - 1 - q]];
                        line[nline].line = fr->line;
                        linep[nline] = &line[nline];
                        nline++;
                    }
                }
                lhash[j] = (uint32_t)++nloc;
            }
            locids[a + nl++] = lhash[j]; /* root-first for now */
            k = e;
        }
        for (uint32_t x = 0, y = nl ? nl - 1 : 0; x < y; x++, y--) { /* leaf first */
            uint64_t t = locids[a + x];
            locids[a + x] = locids[a + y];
            locids[a + y] = t;
        }
        nlocs_of[s] = nl;
    }
    int64_t k_trace = S("trace_id"), k_span = S("span_id");
    for (uint32_t c = 1; c < p->n_contexts; c++) {
        cm_hex(p->contexts[c].trace_id, 16, hex[c]);
        cm_hex(p->contexts[c].span_id, 8, hex[c] + HEX_SPAN);
    }
    /* samples: rows merged by (stack, context). Rows without a context are summed per stack
     * (an array); only rows with a context are sorted. */
    size_t nctx = 0;
    for (size_t i = 0; i < nr; i++) {
        const agg_row_t *r = &p->rows[i];
        if (r->context)
            order[nctx++] = i;
        else {
            sw0[r->stack] += r->weight;
            sc0[r->stack] += r->count;
        }
    }
    tl_rows = p->rows;
    qsort(order, nctx, sizeof *order, cmp_row);
    size_t ns = 0, nl = 0;
    for (uint32_t s = 0; s < p->n_stacks; s++) {
        if (!sw0[s] && !sc0[s])
            continue;
        Sample si = PERFTOOLS__PROFILES__SAMPLE__INIT;
        Sample *sm = &smp[ns];
        *sm = si;
        sm->n_location_id = nlocs_of[s];
        sm->location_id = locids + p->stack_off[s];
        sm->n_value = 2;
        sm->value = vals + 2 * ns;
        sm->value[0] = (int64_t)((sc0[s] + CM_COUNT_ONE / 2) / CM_COUNT_ONE);
        sm->value[1] = (int64_t)sw0[s];
        smpp[ns++] = sm;
    }
    for (size_t i = 0; i < nctx;) {
        const agg_row_t *r = &p->rows[order[i]];
        uint64_t w = 0, c = 0;
        size_t j = i;
        for (; j < nctx && p->rows[order[j]].stack == r->stack &&
               p->rows[order[j]].context == r->context;
             j++) {
            w += p->rows[order[j]].weight;
            c += p->rows[order[j]].count;
        }
        i = j;
        if (!w && !c)
            continue;
        Sample si = PERFTOOLS__PROFILES__SAMPLE__INIT;
        Sample *sm = &smp[ns];
        *sm = si;
        sm->n_location_id = nlocs_of[r->stack];
        sm->location_id = locids + p->stack_off[r->stack];
        sm->n_value = 2;
        sm->value = vals + 2 * ns;
        sm->value[0] = (int64_t)((c + CM_COUNT_ONE / 2) / CM_COUNT_ONE);
        sm->value[1] = (int64_t)w;
        Label li = PERFTOOLS__PROFILES__LABEL__INIT;
        lab[nl] = li;
        lab[nl].key = k_trace;
        lab[nl].str = S(hex[r->context]);
        lab[nl + 1] = li;
        lab[nl + 1].key = k_span;
        lab[nl + 1].str = S(hex[r->context] + HEX_SPAN);
        labp[nl] = &lab[nl];
        labp[nl + 1] = &lab[nl + 1];
        sm->n_label = 2;
        sm->label = &labp[nl];
        nl += 2;
        smpp[ns++] = sm;
    }
#undef S
    prof.n_sample = ns;
    prof.sample = smpp;
    prof.n_mapping = nmap;
    prof.mapping = mapp;
    prof.n_location = nloc;
    prof.location = locp;
    prof.n_function = nfn;
    prof.function = fnp;
    prof.n_string_table = st.n;
    prof.string_table = st.s;
    size_t len = perftools__profiles__profile__get_packed_size(&prof);
    if (!(raw = malloc(len + 1)))
        goto out;
    perftools__profiles__profile__pack(&prof, raw);
    rc = gzip_buf(raw, len, out, out_len);
out:
    free(st.s);
    free(st.hkey);
    free(st.hval);
    free(fn);
    free(fnp);
    free(loc);
    free(locp);
    free(line);
    free(linep);
    free(map);
    free(mapp);
    free(frame_map);
    free(order);
    free(smp);
    free(smpp);
    free(vals);
    free(lab);
    free(labp);
    free(locids);
    free(nlocs_of);
    free(fnid);
    free(runs);
    free(runoff);
    free(lhash);
    free(fhkey);
    free(fhval);
    free(hex);
    free(sw0);
    free(sc0);
    free(raw);
    return rc;
}
