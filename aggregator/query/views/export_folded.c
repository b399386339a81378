/* Folded-stack export ("root;caller;leaf value"), as `fleetprof fold` prints it.
 * Threading: reads the profile only. */
#include "export.h"

#include "cm/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *text;
    uint64_t value;
} line_t;

static int cmp_line(const void *a, const void *b) {
    const line_t *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? 1 : -1;
    return strcmp(x->text, y->text);
}

static int cmp_text(const void *a, const void *b) {
    return strcmp(((const line_t *)a)->text, ((const line_t *)b)->text);
}

/* Appends a frame name with ';' -> ':' and line breaks -> ' '. Spaces stay as they are
 * ("std::vector<int, std::allocator<int> >::push_back(int const&)"): flame graph tools take
 * the last space of a line as the separator before the value. */
static void put_name(char **pos, const char *name) {
    char *w = *pos;
    for (const char *c = name; *c; c++)
        *w++ = *c == ';' ? ':' : (*c == '\n' || *c == '\r' || *c == '\t') ? ' ' : *c;
    *pos = w;
}

int agg_export_folded(const agg_profile_t *p, int counts, char **out, size_t *out_len) {
    int rc = CM_ENOMEM;
    uint64_t *sw = malloc(((size_t)p->n_stacks + 1) * sizeof *sw);
    uint64_t *sc = malloc(((size_t)p->n_stacks + 1) * sizeof *sc);
    line_t *lines = calloc((size_t)p->n_stacks + 1, sizeof *lines);
    char *res = NULL;
    size_t n = 0, total = 0;
    if (!sw || !sc || !lines)
        goto out;
    agg_profile_stack_sums(p, sw, sc);
    /* the empty stack and a stack made of the same names may fold to the same text: merged */
    for (uint32_t s = 0; s < p->n_stacks; s++) {
        uint64_t v = counts ? sc[s] / CM_COUNT_ONE : sw[s];
        if (!v)
            continue;
        size_t len = 16;
        for (uint32_t k = p->stack_off[s]; k < p->stack_off[s + 1]; k++)
            len += strlen(p->frames[p->stack_frames[k]].name) + 1;
        char *t = malloc(len), *w = t;
        if (!t)
            goto out;
        if (p->stack_off[s] == p->stack_off[s + 1])
            put_name(&w, "[unknown]");
        for (uint32_t k = p->stack_off[s]; k < p->stack_off[s + 1]; k++) {
            if (w != t)
                *w++ = ';';
            put_name(&w, p->frames[p->stack_frames[k]].name);
        }
        *w = '\0';
        lines[n++] = (line_t){t, v};
    }
    /* merge equal texts (different frames with one name, e.g. two modules) */
    qsort(lines, n, sizeof *lines, cmp_text);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && strcmp(lines[m - 1].text, lines[i].text) == 0) {
            lines[m - 1].value += lines[i].value;
            free(lines[i].text);
        } else {
            lines[m++] = lines[i];
        }
    }
    n = m;
    qsort(lines, n, sizeof *lines, cmp_line);
    for (size_t i = 0; i < n; i++)
        total += strlen(lines[i].text) + 24;
    if (!(res = malloc(total + 1)))
        goto out;
    size_t pos = 0;
    for (size_t i = 0; i < n; i++)
        pos += (size_t)sprintf(res + pos, "%s %" PRIu64 "\n", lines[i].text, lines[i].value);
    res[pos] = '\0';
    *out = res;
    *out_len = pos;
    res = NULL;
    rc = 0;
out:
    for (size_t i = 0; i < n; i++)
        free(lines[i].text);
    free(lines);
    free(sw);
    free(sc);
    free(res);
    return rc;
}
