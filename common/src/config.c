/* Option-table configuration (see cm/config.h). Startup only; not thread-safe. */
#include "cm/config.h"
#include "cm/error.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int cm_parse_bool(const char *s, int *out) {
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = 1;
            return 0;
        }
        if (!strcasecmp(s, no[i])) {
            *out = 0;
            return 0;
        }
    }
    return CM_ECONFIG;
}

/* Parses a non-negative decimal number with optional fraction, then a unit from the table. */
static int parse_scaled(const char *s, const char *const *units, const double *scale,
                        int64_t *out) {
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || errno || v < 0 || !isdigit((unsigned char)s[0]))
        return CM_ECONFIG;
    while (*end == ' ')
        end++;
    for (int i = 0; units[i]; i++) {
        if (!strcmp(end, units[i])) {
            double r = v * scale[i];
            if (r > 9.2e18)
                return CM_ECONFIG;
            *out = (int64_t)(r + 0.5);
            return 0;
        }
    }
    return CM_ECONFIG;
}

int cm_parse_duration(const char *s, int64_t *ns) {
    static const char *const u[] = {"", "ns", "us", "ms", "s", "m", "h", "d", NULL};
    static const double k[] = {1e9, 1, 1e3, 1e6, 1e9, 60e9, 3600e9, 86400e9};
    return parse_scaled(s, u, k, ns);
}

int cm_parse_size(const char *s, int64_t *bytes) {
    static const char *const u[] = {"", "B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB",
                                    "k", "K", "M", "G", NULL};
    static const double k[] = {1,    1,    1024.0, 1048576.0, 1073741824.0, 1099511627776.0, 1e3,
                               1e6,  1e9,  1e12,   1024.0,    1024.0,       1048576.0,
                               1073741824.0};
    return parse_scaled(s, u, k, bytes);
}

static const char *type_hint(cm_opt_type_t t) {
    switch (t) {
    case CM_OPT_INT:
        return "an integer";
    case CM_OPT_BOOL:
        return "true or false";
    case CM_OPT_DURATION:
        return "a duration like 500ms, 10s, 5m";
    case CM_OPT_SIZE:
        return "a size like 512KiB, 64MiB, 2GiB";
    default:
        return "a string";
    }
}

/* Sets one option from text. `where` names the source for the error message. */
static int set_opt(const cm_opt_t *o, void *cfg, const char *value, const char *where,
                   char *errbuf, size_t errbuf_size) {
    char *field = (char *)cfg + o->offset;
    int64_t v = 0;
    int rc = 0;
    switch (o->type) {
    case CM_OPT_STRING: {
        char *dup = strdup(value);
        if (!dup)
            return CM_ENOMEM;
        free(*(char **)field);
        *(char **)field = dup;
        return 0;
    }
    case CM_OPT_BOOL: {
        int b;
        if ((rc = cm_parse_bool(value, &b)))
            break;
        *(int *)field = b;
        return 0;
    }
    case CM_OPT_INT: {
        errno = 0;
        char *end;
        long long ll = strtoll(value, &end, 10);
        if (end == value || *end || errno)
            rc = CM_ECONFIG;
        v = ll;
        break;
    }
    case CM_OPT_DURATION:
        rc = cm_parse_duration(value, &v);
        break;
    case CM_OPT_SIZE:
        rc = cm_parse_size(value, &v);
        break;
    }
    if (rc) {
        snprintf(errbuf, errbuf_size, "invalid value '%s' for %s (%s): expected %s", value,
                 o->name, where, type_hint(o->type));
        return CM_ECONFIG;
    }
    if ((o->min || o->max) && (v < o->min || v > o->max)) {
        snprintf(errbuf, errbuf_size, "value '%s' for %s (%s) is out of range [%lld, %lld]%s",
                 value, o->name, where, (long long)o->min, (long long)o->max,
                 o->type == CM_OPT_DURATION ? " ns" : o->type == CM_OPT_SIZE ? " bytes" : "");
        return CM_ECONFIG;
    }
    *(int64_t *)field = v;
    return 0;
}

/* "spool_max" and "spool-max" both match option "spool-max". */
static const cm_opt_t *find_opt(const cm_opt_t *opts, const char *key, size_t len) {
    for (const cm_opt_t *o = opts; o->name; o++) {
        if (strlen(o->name) != len)
            continue;
        size_t i = 0;
        for (; i < len; i++) {
            char a = key[i] == '_' ? '-' : key[i];
            if (a != o->name[i])
                break;
        }
        if (i == len)
            return o;
    }
    return NULL;
}

static int kv_add(cm_kvlist_t *l, const char *key, const char *value) {
    for (size_t i = 0; i < l->n; i++) { /* later sources override earlier ones */
        if (!strcmp(l->items[i].key, key)) {
            char *v = strdup(value);
            if (!v)
                return CM_ENOMEM;
            free(l->items[i].value);
            l->items[i].value = v;
            return 0;
        }
    }
    cm_kv_t *n = realloc(l->items, (l->n + 1) * sizeof *n);
    if (!n)
        return CM_ENOMEM;
    l->items = n;
    l->items[l->n].key = strdup(key);
    l->items[l->n].value = strdup(value);
    if (!l->items[l->n].key || !l->items[l->n].value)
        return CM_ENOMEM;
    l->n++;
    return 0;
}

typedef struct {
    const cm_opt_t *opts;
    void *cfg;
    const char *path, *pprefix;
    cm_kvlist_t *pass;
    char *errbuf;
    size_t errbuf_size;
    int rc;
    int lineno;
} file_ctx_t;

static int on_ini(void *user, const char *section, const char *name, const char *value
#if INI_HANDLER_LINENO
                  ,
                  int lineno
#endif
) {
    file_ctx_t *f = user;
    int line = 0;
#if INI_HANDLER_LINENO
    line = lineno;
#endif
    char where[600];
    if (line)
        snprintf(where, sizeof where, "%s:%d", f->path, line);
    else
        snprintf(where, sizeof where, "config file %s", f->path);
    char key[256];
    snprintf(key, sizeof key, "%s%s%s", section && *section ? section : "",
             section && *section ? "." : "", name);
    size_t pl = f->pprefix ? strlen(f->pprefix) : 0;
    if (pl && !strncmp(key, f->pprefix, pl)) {
        f->rc = kv_add(f->pass, key + pl, value);
        return f->rc == 0;
    }
    const cm_opt_t *o = find_opt(f->opts, key, strlen(key));
    if (!o) {
        snprintf(f->errbuf, f->errbuf_size, "unknown option '%s' in %s", key, where);
        f->rc = CM_ECONFIG;
        return 0;
    }
    f->rc = set_opt(o, f->cfg, value, where, f->errbuf, f->errbuf_size);
    return f->rc == 0;
}

int cm_config_load(const cm_opt_t *opts, void *cfg, const char *env_prefix,
                   const char *passthrough_prefix, cm_kvlist_t *passthrough, int argc,
                   char **argv, char *errbuf, size_t errbuf_size) {
    int rc;
    char where[512], var[256];
    size_t pl = passthrough_prefix ? strlen(passthrough_prefix) : 0;
    for (const cm_opt_t *o = opts; o->name; o++) {
        snprintf(where, sizeof where, "default");
        if ((rc = set_opt(o, cfg, o->def ? o->def : (o->type == CM_OPT_STRING ? "" : "0"), where,
                          errbuf, errbuf_size)))
            return rc;
    }
    /* --help and --config first: the file is the lowest-precedence explicit source */
    const char *file = NULL;
    snprintf(var, sizeof var, "%sCONFIG", env_prefix);
    if (getenv(var) && *getenv(var))
        file = getenv(var);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            file = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9))
            file = argv[i] + 9;
    }
    if (file) {
        file_ctx_t f = {opts, cfg, file, passthrough_prefix, passthrough, errbuf, errbuf_size, 0, 0};
        int r = ini_parse(file, on_ini, &f);
        if (r < 0) {
            snprintf(errbuf, errbuf_size, "cannot read config file '%s': %s", file,
                     r == -1 ? strerror(errno) : "out of memory");
            return CM_ECONFIG;
        }
        if (f.rc)
            return f.rc;
        if (r > 0) {
            snprintf(errbuf, errbuf_size, "config file '%s' line %d is not 'key = value'", file,
                     r);
            return CM_ECONFIG;
        }
    }
    for (const cm_opt_t *o = opts; o->name; o++) {
        size_t n = (size_t)snprintf(var, sizeof var, "%s", env_prefix);
        for (const char *p = o->name; *p && n + 1 < sizeof var; p++)
            var[n++] = *p == '-' || *p == '.' ? '_' : (char)toupper((unsigned char)*p);
        var[n] = '\0';
        const char *v = getenv(var);
        if (!v)
            continue;
        snprintf(where, sizeof where, "environment %s", var);
        if ((rc = set_opt(o, cfg, v, where, errbuf, errbuf_size)))
            return rc;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            snprintf(errbuf, errbuf_size, "unexpected argument '%s' (options start with --)", a);
            return CM_ECONFIG;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const char *value = eq ? eq + 1 : NULL;
        if (len == 6 && !strncmp(name, "config", 6)) {
            i += value ? 0 : 1;
            continue;
        }
        int is_pass = pl && len > pl && !strncmp(name, passthrough_prefix, pl);
        const cm_opt_t *o = is_pass ? NULL : find_opt(opts, name, len);
        if (!is_pass && !o) {
            snprintf(errbuf, errbuf_size, "unknown option '--%.*s' (see --help)", (int)len, name);
            return CM_ECONFIG;
        }
        if (!value) {
            if (o && o->type == CM_OPT_BOOL) {
                value = "true";
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                snprintf(errbuf, errbuf_size, "option '--%.*s' needs a value", (int)len, name);
                return CM_ECONFIG;
            }
        }
        if (is_pass) {
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(len - pl), name + pl);
            if ((rc = kv_add(passthrough, key, value)))
                return rc;
            continue;
        }
        snprintf(where, sizeof where, "flag --%s", o->name);
        if ((rc = set_opt(o, cfg, value, where, errbuf, errbuf_size)))
            return rc;
    }
    return 0;
}

void cm_config_help(const cm_opt_t *opts, const char *env_prefix, const char *passthrough_prefix,
                    const char *usage_line, FILE *out) {
    fprintf(out, "usage: %s\n\noptions (flag, environment variable, config file key):\n",
            usage_line);
    fprintf(out, "  --config FILE\n      %sCONFIG; INI file of 'key = value' lines\n",
            env_prefix);
    for (const cm_opt_t *o = opts; o->name; o++) {
        char var[256];
        size_t n = (size_t)snprintf(var, sizeof var, "%s", env_prefix);
        for (const char *p = o->name; *p && n + 1 < sizeof var; p++)
            var[n++] = *p == '-' || *p == '.' ? '_' : (char)toupper((unsigned char)*p);
        var[n] = '\0';
        fprintf(out, "  --%s %s\n      %s; %s (default: %s)\n", o->name,
                o->type == CM_OPT_BOOL ? "[true|false]" : "VALUE", var, o->help,
                o->def && *o->def ? o->def : "none");
    }
    if (passthrough_prefix)
        fprintf(out,
                "  --%sPROPERTY VALUE\n      passed through unchanged (file key %sPROPERTY)\n",
                passthrough_prefix, passthrough_prefix);
    fprintf(out, "\nPrecedence: flags > environment > config file > defaults.\n");
}

void cm_config_free(const cm_opt_t *opts, void *cfg, cm_kvlist_t *passthrough) {
    for (const cm_opt_t *o = opts; o->name; o++) {
        if (o->type == CM_OPT_STRING) {
            char **f = (char **)((char *)cfg + o->offset);
            free(*f);
            *f = NULL;
        }
    }
    if (passthrough) {
        for (size_t i = 0; i < passthrough->n; i++) {
            free(passthrough->items[i].key);
            free(passthrough->items[i].value);
        }
        free(passthrough->items);
        passthrough->items = NULL;
        passthrough->n = 0;
    }
}
