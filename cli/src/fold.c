/* fleetprof fold: decodes chunk files (or every *.fpc file in a directory) and prints folded
 * stacks, "root;caller;leaf weight", one line per distinct stack, summed over all files, in the
 * event type's natural unit (ns for cpu, wall, lock, io; bytes for alloc, inuse). A corrupt
 * file is named with the reason on stderr and makes the exit status 1; the others still count. */
#include "cli.h"
#include "cm/error.h"
#include "cm/wire.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

typedef struct {
    char *key; /* folded stack, owned */
    uint64_t value;
} entry_t;

typedef struct {
    entry_t *tab;
    size_t cap, n;
} table_t;

static int table_add(table_t *t, const char *key, size_t len, uint64_t value) {
    if (2 * (t->n + 1) > t->cap) {
        size_t ncap = t->cap ? 2 * t->cap : 1024;
        entry_t *nt = calloc(ncap, sizeof *nt);
        if (!nt)
            return CM_ENOMEM;
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->tab[i].key)
                continue;
            size_t h = XXH3_64bits(t->tab[i].key, strlen(t->tab[i].key)) & (ncap - 1);
            while (nt[h].key)
                h = (h + 1) & (ncap - 1);
            nt[h] = t->tab[i];
        }
        free(t->tab);
        t->tab = nt;
        t->cap = ncap;
    }
    size_t h = XXH3_64bits(key, len) & (t->cap - 1);
    while (t->tab[h].key && strcmp(t->tab[h].key, key) != 0)
        h = (h + 1) & (t->cap - 1);
    if (!t->tab[h].key) {
        if (!(t->tab[h].key = strndup(key, len)))
            return CM_ENOMEM;
        t->n++;
    }
    t->tab[h].value += value;
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    const entry_t *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? 1 : -1;
    return strcmp(x->key, y->key);
}

static int read_file(const char *path, uint8_t **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size > (off_t)CM_SOCK_MAX_MSG) {
        fclose(f);
        return CM_ETOOBIG;
    }
    *buf = malloc((size_t)st.st_size + 1);
    *len = fread(*buf, 1, (size_t)st.st_size, f);
    fclose(f);
    return 0;
}

/* --group-by: a first frame "[DIM=value]" on every stack, so the folded output (and a flame
 * graph of it) splits by host, process, I/O target (path or peer), fd kind or lock address. */
typedef enum { GB_NONE, GB_HOST, GB_PID, GB_IO_TARGET, GB_FD_KIND, GB_LOCK } group_by_t;
static const char *const group_names[] = {"", "host", "pid", "io-target", "fd-kind", "lock"};

static size_t group_frame(const cm_chunk_t *c, const cm_samples_t *s, uint32_t i, group_by_t g,
                          char *out, size_t size) {
    static const char *const kinds[] = {"unknown", "file", "socket", "pipe", "other"};
    const cm_dict_t *d = &c->dict;
    int n = 0;
    switch (g) {
    case GB_NONE:
        return 0;
    case GB_HOST:
        n = snprintf(out, size, "[host=%s]", c->header.host.ptr ? c->header.host.ptr : "");
        break;
    case GB_PID:
        n = snprintf(out, size, "[pid=%u]", c->header.pid);
        break;
    case GB_IO_TARGET: {
        uint32_t ti = s->target ? s->target[i] : 0;
        const char *txt = ti && ti < d->n_strings ? d->strings[ti].ptr : "unknown";
        n = snprintf(out, size, "[io-target=%s]", txt && *txt ? txt : "unknown");
        break;
    }
    case GB_FD_KIND: {
        uint32_t k = s->fd_kind ? s->fd_kind[i] : 0;
        n = snprintf(out, size, "[fd-kind=%s]", kinds[k <= CM_FD_OTHER ? k : 0]);
        break;
    }
    case GB_LOCK:
        n = snprintf(out, size, "[lock=0x%llx]",
                     (unsigned long long)(s->address ? s->address[i] : 0));
        break;
    }
    if (n < 0)
        return 0;
    size_t len = (size_t)n < size ? (size_t)n : size - 1;
    for (size_t j = 0; j < len; j++) /* ';' and ' ' separate fields in folded output */
        if (out[j] == ';' || out[j] == ' ' || out[j] == '\n')
            out[j] = out[j] == ' ' ? '_' : ':';
    return len;
}

static int fold_file(const char *path, cm_event_type_t type, int counts, group_by_t group,
                     table_t *t) {
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[512] = "";
    int rc = read_file(path, &buf, &len);
    if (rc) {
        fprintf(stderr, "fleetprof fold: %s: %s\n", path, cm_strerror(rc));
        return 1;
    }
    cm_chunk_t *c = NULL;
    rc = cm_chunk_decode(buf, len, &c, err, sizeof err);
    free(buf);
    if (rc) {
        fprintf(stderr, "fleetprof fold: %s: %s: %s\n", path, cm_errname(rc), err);
        return 1;
    }
    const cm_samples_t *s = &c->samples[type];
    const cm_dict_t *d = &c->dict;
    size_t cap = 1 << 16;
    char *line = malloc(cap), name[CM_MAX_STRING_LEN + 64];
    for (uint32_t i = 0; i < s->n; i++) {
        char gf[512];
        size_t gl = group_frame(c, s, i, group, gf, sizeof gf);
        size_t pos = 0;
        uint32_t st = s->stack[i];
        for (uint32_t k = d->stack_off[st]; k < d->stack_off[st + 1]; k++) {
            cli_location_name(d, d->stack_frames[k], name, sizeof name);
            size_t nl = strlen(name);
            /* ';' separates frames; spaces stay (flame graph tools split the value off at
             * the last space of the line), line breaks become spaces */
            for (size_t j = 0; j < nl; j++)
                if (name[j] == ';' || name[j] == '\n' || name[j] == '\r')
                    name[j] = name[j] == ';' ? ':' : ' ';
            if (pos + nl + 2 >= cap) {
                cap *= 2;
                line = realloc(line, cap);
            }
            if (pos)
                line[pos++] = ';';
            memcpy(line + pos, name, nl);
            pos += nl;
        }
        if (d->stack_flags && (d->stack_flags[st] & CM_STF_TRUNCATED) && pos + 16 < cap) {
            memmove(line + 12, line, pos); /* mark the missing root frames */
            memcpy(line, "[truncated];", 12);
            pos += 12;
        } else if (d->stack_flags && (d->stack_flags[st] & CM_STF_INCOMPLETE) && pos + 16 < cap) {
            memmove(line + 13, line, pos); /* the unwind stopped before the root */
            memcpy(line, "[incomplete];", 13);
            pos += 13;
        }
        if (pos == 0) {
            memcpy(line, "[unknown]", 9);
            pos = 9;
        }
        if (gl) { /* the dimension as the root frame */
            if (pos + gl + 2 >= cap) {
                cap = pos + gl + 2;
                line = realloc(line, cap);
            }
            memmove(line + gl + 1, line, pos);
            memcpy(line, gf, gl);
            line[gl] = ';';
            pos += gl + 1;
        }
        line[pos] = '\0';
        table_add(t, line, pos, counts ? cm_samples_count(s, i) : s->weight[i]);
    }
    free(line);
    cm_chunk_free(c);
    return 0;
}

static int fold_path(const char *path, cm_event_type_t type, int counts, group_by_t group,
                     table_t *t) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fleetprof fold: %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode))
        return fold_file(path, type, counts, group, t);
    struct dirent **ents;
    int n = scandir(path, &ents, NULL, alphasort), bad = 0, found = 0;
    if (n < 0) {
        fprintf(stderr, "fleetprof fold: %s: %s\n", path, strerror(errno));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        size_t l = strlen(ents[i]->d_name), sl = strlen(CM_CHUNK_FILE_SUFFIX);
        if (l > sl && !strcmp(ents[i]->d_name + l - sl, CM_CHUNK_FILE_SUFFIX)) {
            char full[4096];
            snprintf(full, sizeof full, "%s/%s", path, ents[i]->d_name);
            bad |= fold_file(full, type, counts, group, t);
            found++;
        }
        free(ents[i]);
    }
    free(ents);
    if (!found) {
        fprintf(stderr, "fleetprof fold: %s: no chunk files (*%s) in this directory\n", path,
                CM_CHUNK_FILE_SUFFIX);
        return 1;
    }
    return bad;
}

static void fold_usage(FILE *out) {
    fprintf(out,
            "usage: fleetprof fold [--type TYPE] [--count] [--group-by DIM] FILE|DIR...\n"
            "  Decodes chunk files (a directory: its *.fpc files) and prints folded stacks,\n"
            "  'root;caller;leaf value', heaviest first, summed over all files.\n"
            "  --type TYPE  cpu (default), wall, alloc, inuse, lock or io\n"
            "  --count      print sample/event counts (milli-events / 1000) instead of weights\n"
            "  --group-by DIM  a root frame [DIM=value] splits the stacks: host, pid,\n"
            "               io-target (path or peer; --type io), fd-kind (--type io),\n"
            "               lock (lock address; --type lock)\n"
            "  Values are in the type's unit: ns for cpu, wall, lock, io; bytes for alloc, "
            "inuse.\n");
}

int cli_fold(int argc, char **argv) {
    cm_event_type_t type = CM_EV_CPU;
    int counts = 0;
    group_by_t group = GB_NONE;
    static const struct option opts[] = {{"type", required_argument, 0, 't'},
                                         {"group-by", required_argument, 0, 'g'},
                                         {"count", no_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "t:g:ch", opts, NULL)) != -1) {
        switch (ch) {
        case 'g': {
            int found = 0;
            for (int g = GB_HOST; g <= GB_LOCK; g++)
                if (!strcmp(optarg, group_names[g])) {
                    group = (group_by_t)g;
                    found = 1;
                }
            if (!found) {
                fprintf(stderr, "fleetprof fold: --group-by '%s' is not one of host, pid, "
                                "io-target, fd-kind, lock\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 't':
            if (cm_event_parse(optarg, &type) != 0) {
                fprintf(stderr, "fleetprof fold: --type '%s' is not one of cpu, wall, alloc, "
                                "inuse, lock, io\n",
                        optarg);
                return 2;
            }
            break;
        case 'c':
            counts = 1;
            break;
        case 'h':
            fold_usage(stdout);
            return 0;
        default:
            fold_usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "fleetprof fold: no chunk files given\n");
        fold_usage(stderr);
        return 2;
    }
    if (((group == GB_IO_TARGET || group == GB_FD_KIND) && type != CM_EV_IO) ||
        (group == GB_LOCK && type != CM_EV_LOCK)) {
        fprintf(stderr, "fleetprof fold: --group-by %s needs --type %s\n", group_names[group],
                group == GB_LOCK ? "lock" : "io");
        return 2;
    }
    table_t t = {0};
    int bad = 0;
    for (int i = optind; i < argc; i++)
        bad |= fold_path(argv[i], type, counts, group, &t);
    if (!bad && t.n == 0) { /* every file read, and nothing to print: say why */
        fprintf(stderr, "fleetprof fold: no %s samples in the chunk files given (--type names "
                        "another event type: cpu, wall, alloc, inuse, lock, io)\n",
                cm_event_name(type));
        bad = 1;
    }
    entry_t *all = malloc((t.n + 1) * sizeof *all);
    size_t k = 0;
    for (size_t i = 0; i < t.cap; i++)
        if (t.tab[i].key)
            all[k++] = t.tab[i];
    qsort(all, k, sizeof *all, cmp_entry);
    for (size_t i = 0; i < k; i++) {
        if (counts)
            printf("%s %" PRIu64 "\n", all[i].key, (all[i].value + CM_COUNT_ONE / 2) / CM_COUNT_ONE);
        else
            printf("%s %" PRIu64 "\n", all[i].key, all[i].value);
        free(all[i].key);
    }
    free(all);
    free(t.tab);
    return bad ? 1 : 0;
}
