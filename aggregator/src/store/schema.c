/* The store's schema, described once (tables[], indexes[]) and written as DDL for SQLite and
 * PostgreSQL (schema.h); the batch's merge rules (store/load) come from the same description.
 *
 * SQLite: every table and index created if absent at open (a single integer primary key is a
 * rowid table, every other table WITHOUT ROWID); a column marked late was added after schema
 * version 1 and is added to older files with ALTER TABLE.
 * PostgreSQL: one database for every partition; versioned migrations, applied in order at open,
 * each in its own transaction under an advisory lock so that instances starting at once apply
 * each exactly once (the version applied is in `fleetprof_schema`). Migration v creates the
 * tables and indexes of `since` v: a new table or index is one with a new version (never a
 * change to an applied one). Dictionaries are content-addressed (shared by partitions), rollups
 * are sums, offsets are keyed by (topic, partition); 64-bit ids are bigint (two's complement of
 * the uint64).
 * Threading: called by the thread that owns the connection. */
#include "schema.h"

#include "store_pg.h"

#include "cm/error.h"
#include "cm/log.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define I11 "iiiiiiiiiii"
#define SUM4 "++++"

/* name, columns, column types (schema.h), primary key columns (the first ones), merge rules
 * of the others (NULL: a dictionary, rows inserted once), PostgreSQL migration */
const agg_schema_table_t agg_schema_tables[] = {
    {"meta", "key,value", "ta", 1, NULL, 1},
    {"offsets", "topic,part,next_offset,updated_ns", "tnii", 2, NULL, 1},
    {"seen_chunks", "chunk_id,ts_ns", "bi", 1, NULL, 1},
    {"strings", "id,s", "iT", 1, NULL, 1},
    {"mappings", "id,filename,build_id", "iib", 1, NULL, 1},
    {"functions", "id,name,system_name,filename", "iiii", 1, NULL, 1},
    {"locations", "id,function,mapping,address,line", "iiiii", 1, NULL, 1},
    {"stacks", "id,parent,location,depth", "iiii", 1, NULL, 1},
    {"labelsets", "id", "i", 1, NULL, 1},
    {"labels", "key,value,labelset", "iii", 3, NULL, 1},
    /* a label set with dimensions (dims.h) -> the same without them: the key of the derived
     * rows (tiers, per-leaf), which do not keep the dimensions */
    {"labelset_base", "labelset,base", "ii", 1, NULL, 2},
    {"profile", "service,version,type,width,bucket,labels,stack,weight,count,rows,chunks", I11,
     7, SUM4, 1},
    {"profile_coarse", "service,version,type,width,bucket,labels,stack,weight,count,rows,chunks",
     I11, 7, SUM4, 1},
    {"profile_leaf", "service,version,type,width,bucket,labels,leaf,weight,count,rows,chunks",
     I11, 7, SUM4, 1},
    {"totals", "service,version,type,width,bucket,weight,count,rows,chunks", "iiiiiiiii", 5, SUM4,
     1},
    {"intervals", "service,version,width,bucket,chunks,duration_ns,agent_cpu_ns,process_cpu_ns,"
     "dropped,work_units", "iiiiiiiiiz", 4, "++++++", 1},
    {"drops", "service,version,width,bucket,reason,type,count", "iiiiiii", 6, "+", 1},
    /* key performance metrics' sums per process (host, pid) and fine bucket (ingest/kpm.c) */
    {"kpm", "service,version,width,bucket,host,pid,chunks,duration_ns,cpu_ns,agent_cpu_ns,"
     "cpu_sampled_ns,cpu_alloc_ns,cpu_kernel_ns,cpu_copy_ns,cpu_unwind_ns,cpu_agent_ns,"
     "alloc_bytes,alloc_count,inuse_bytes,lock_wait_ns,lock_count,io_wait_ns,io_bytes,io_count,"
     "threads,dropped", "iiiiiiiiiiiiiiiiiiiiiiiiii", 6, "++++++++++++++++++++", 5},
    {"versions", "service,version,first_ns,last_ns,chunks,rows", "iiiiii", 2, "<>++", 1},
    {"fn_stats", "service,version,type,width,bucket,function,chunks,incl,incl2,self,self2",
     "iiiiiiiffff", 6, "+++++", 1},
    {"spans", "trace,span,service,version,first_ns,last_ns,cpu,wall,alloc,inuse,lock,io,rows",
     "bbiiiiiiiiiii", 2, "==<>+++++++", 1},
    {"span_stacks", "trace,span,type,stack,weight,count,rows", "bbiiiii", 4, "+++", 1},
    /* minor 2: requests (spans the application named, with their real start and end); the
     * records of one span (ended, or active at successive cuts) merge by max: its end grows
     * while it runs, `ended` turns 1 when it ends */
    {"requests", "trace,span,service,version,name,start_ns,end_ns,ended,tid",
     "bbiiiiiii", 2, "==>>>>>", 4},
    {"rejects", "reason,count", "ti", 1, "+", 1},
    /* minor 3: incidents (an agent's flight-recorder captures), one row per incident id; its
     * chunks merge: the captured window grows to the first start and the last end */
    {"incidents", "id,service,version,host,pid,trig,threshold,value,trigger_ns,start_ns,end_ns,"
     "parts,chunks", "biiiiiiiiiiii", 1, "========<>=+", 6},
    /* the capture's chunks as they arrived (frames): its profile and diff are built from
     * them on demand, never added to the service's profile (the always-on chunks have them) */
    {"incident_chunks", "id,part,frame", "bib", 2, NULL, 6},
    {NULL, NULL, NULL, 0, NULL, 0},
};

/* name, table(columns), PostgreSQL migration (0: SQLite only), SQLite too */
static const struct {
    const char *name, *on;
    int since, sqlite;
} indexes[] = {
    {"seen_chunks_ts", "seen_chunks(ts_ns)", 1, 1},
    {"functions_name", "functions(name)", 1, 1},
    {"spans_service", "spans(service, last_ns)", 1, 1},
    {"spans_span", "spans(span)", 1, 1},
    /* the read side: the split of a profile by a label joins each row's label set to its label
     * of one key (labels' primary key starts with the key and value); the diff's replicates
     * per process do on both databases (without it SQLite scans every pid label per row) */
    {"labels_labelset", "labels(labelset, key)", 3, 1},
    /* endpoints and slow requests of a service in a window; stuck ones (not ended) */
    {"requests_service", "requests(service, end_ns)", 4, 1},
    /* incidents of a service in a window */
    {"incidents_service", "incidents(service, trigger_ns)", 6, 1},
};

/* PostgreSQL only: tables stored packed from migration `since` on, one row per group (the key
 * without its last column: a profile row's process, type and bucket; a span_stacks row's span
 * and type) with the last key column and the sums as arrays in `<name>_packed` (no unique
 * key: a group stored by several batches has a row, a part, from each), read through a view
 * named as the table that unnests them: one row per part and stack, readers sum. A COPY of
 * one row per group instead of a row and an index entry per stack is the ingest's largest
 * saving on PostgreSQL (bench/RESULTS.md). The migration moves the rows of a database
 * written before it. */
static const struct {
    const char *name;
    int since;
    const char *phys, *index; /* the packed table, its index's columns */
} packed[] = {
    {"profile", 7, "profile_packed", "service, version, type, width, bucket"},
    {"profile_leaf", 7, "profile_leaf_packed", "service, version, type, width, bucket"},
    {"span_stacks", 7, "span_stacks_packed", "trace, span"},
};

const char *agg_schema_packed(const char *name) {
    for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++)
        if (!strcmp(packed[i].name, name))
            return packed[i].phys;
    return NULL;
}

const agg_schema_table_t *agg_schema_table(const char *name) {
    for (const agg_schema_table_t *t = agg_schema_tables; t->name; t++)
        if (!strcmp(t->name, name))
            return t;
    return NULL;
}

/* The type of a column in each dialect: i bigint, n integer, f double, b bytes, t text,
 * T text not null, a any (SQLite untyped, PostgreSQL text), z bigint not null default 0 (a
 * late column: SQLite files of version 1 get it with ALTER TABLE). */
static const char *col_type(char c, int pg) {
    static const struct {
        char c;
        const char *pg, *sqlite;
    } types[] = {
        {'n', "integer", "INTEGER"},
        {'f', "double precision", "REAL"},
        {'b', "bytea", "BLOB"},
        {'t', "text", "TEXT"},
        {'T', "text NOT NULL", "TEXT NOT NULL"},
        {'a', "text", ""},
        {'z', "bigint NOT NULL DEFAULT 0", "INTEGER NOT NULL DEFAULT 0"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].c == c)
            return pg ? types[i].pg : types[i].sqlite;
    return pg ? "bigint" : "INTEGER";
}

#define APPEND(...)                                                                                \
    do {                                                                                           \
        if (o < size)                                                                              \
            o += (size_t)snprintf(buf + o, size - o, __VA_ARGS__);                                 \
    } while (0)

/* CREATE TABLE of t into buf at o; returns the new o. */
static size_t create_table(const agg_schema_table_t *t, int pg, char *buf, size_t size, size_t o) {
    char cols[512];
    snprintf(cols, sizeof cols, "%s", t->cols);
    int rowid = !pg && t->nkey == 1 && (t->types[0] == 'i' || t->types[0] == 'n');
    APPEND("CREATE TABLE IF NOT EXISTS %s(", t->name);
    int i = 0;
    char keys[256] = "";
    for (char *save = NULL, *c = strtok_r(cols, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
        const char *ty = col_type(t->types[i], pg);
        APPEND("%s%s%s%s%s", i ? ", " : "", c, *ty ? " " : "", ty,
               rowid && i == 0 ? " PRIMARY KEY" : "");
        if (i < t->nkey)
            snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", i ? ", " : "", c);
        i++;
    }
    if (!rowid)
        APPEND(", PRIMARY KEY(%s))%s;", keys, pg ? "" : " WITHOUT ROWID");
    else
        APPEND(");");
    return o;
}

int agg_schema_pack_insert(const char *name, const char *from, char *buf, size_t size) {
    const agg_schema_table_t *t = agg_schema_table(name);
    const char *phys = agg_schema_packed(name), *last = NULL;
    char cols[512], group[256] = "", aggs[512] = "";
    if (!t || !phys)
        return CM_EINVAL;
    snprintf(cols, sizeof cols, "%s", t->cols);
    int i = 0;
    for (char *save = NULL, *c = strtok_r(cols, ",", &save); c;
         c = strtok_r(NULL, ",", &save), i++) {
        size_t ng = strlen(group), na = strlen(aggs);
        if (i < t->nkey - 1) {
            snprintf(group + ng, sizeof group - ng, "%s%s", ng ? ", " : "", c);
            continue;
        }
        last = last ? last : c;
        snprintf(aggs + na, sizeof aggs - na, ", array_agg(%s::bigint ORDER BY %s)", c, last);
    }
    size_t o = 0;
    APPEND("INSERT INTO %s SELECT %s%s FROM %s GROUP BY %s", phys, group, aggs, from, group);
    return o < size ? 0 : CM_EINVAL;
}

/* PostgreSQL: table t (created by an earlier migration) replaced by its packed form, its
 * rows moved there, and the view named t; into buf at o, returns the new o. */
static size_t pack_table(const agg_schema_table_t *t, const char *index, char *buf, size_t size,
                         size_t o) {
    char cols[512], group[256] = "", arrays[256] = "", un[256] = "";
    snprintf(cols, sizeof cols, "%s", t->cols);
    const char *phys = agg_schema_packed(t->name);
    APPEND("CREATE TABLE %s(", phys);
    int i = 0;
    for (char *save = NULL, *c = strtok_r(cols, ",", &save); c;
         c = strtok_r(NULL, ",", &save), i++) {
        int g = i < t->nkey - 1;
        APPEND("%s%s %s", i ? ", " : "", c, g ? col_type(t->types[i], 1) : "bigint[]");
        size_t ng = strlen(group), na = strlen(arrays), nu = strlen(un);
        if (g)
            snprintf(group + ng, sizeof group - ng, "%sp.%s", ng ? ", " : "", c);
        else {
            snprintf(arrays + na, sizeof arrays - na, "%s%s", na ? ", " : "", c);
            snprintf(un + nu, sizeof un - nu, "%su.%s", nu ? ", " : "", c);
        }
    }
    APPEND("); CREATE INDEX %s_group ON %s(%s);", phys, phys, index);
    if (o < size && !agg_schema_pack_insert(t->name, t->name, buf + o, size - o))
        o += strlen(buf + o);
    APPEND(";DROP TABLE %s;", t->name);
    APPEND("CREATE VIEW %s AS SELECT %s, %s FROM %s p CROSS JOIN LATERAL unnest(%s) AS u(%s);",
           t->name, group, un, phys, arrays, arrays);
    return o;
}

int agg_schema_ddl(int pg, int since, char *buf, size_t size) {
    size_t o = 0;
    buf[0] = 0;
    for (const agg_schema_table_t *t = agg_schema_tables; t->name; t++)
        if (!since || t->since == since)
            o = create_table(t, pg, buf, size, o);
    for (size_t i = 0; i < sizeof indexes / sizeof indexes[0]; i++)
        if (pg ? indexes[i].since && (!since || indexes[i].since == since) : indexes[i].sqlite)
            APPEND("CREATE INDEX IF NOT EXISTS %s ON %s;", indexes[i].name, indexes[i].on);
    for (size_t i = 0; pg && i < sizeof packed / sizeof packed[0]; i++)
        if (!since || packed[i].since == since)
            o = pack_table(agg_schema_table(packed[i].name), packed[i].index, buf, size, o);
    if (!pg)
        APPEND("INSERT OR IGNORE INTO meta VALUES('schema_version', 1);");
    return o < size ? 0 : CM_EINVAL;
}

int agg_schema_late_columns(char *buf, size_t size) {
    size_t o = 0;
    buf[0] = 0;
    for (const agg_schema_table_t *t = agg_schema_tables; t->name; t++) {
        char cols[512];
        snprintf(cols, sizeof cols, "%s", t->cols);
        int i = 0;
        for (char *save = NULL, *c = strtok_r(cols, ",", &save); c;
             c = strtok_r(NULL, ",", &save), i++)
            if (t->types[i] == 'z')
                APPEND("ALTER TABLE %s ADD COLUMN %s %s;", t->name, c, col_type('z', 0));
    }
    return o < size ? 0 : CM_EINVAL;
}

int agg_schema_upsert(const agg_schema_table_t *t, const char *src, char *buf, size_t size) {
    size_t o = 0;
    char cols[512];
    snprintf(cols, sizeof cols, "%s", t->cols);
    APPEND("INSERT INTO %s %s ON CONFLICT ", t->name, src);
    if (!t->merge) {
        APPEND("DO NOTHING");
        return o < size ? 0 : CM_EINVAL;
    }
    int i = 0, nset = 0;
    for (char *save = NULL, *c = strtok_r(cols, ",", &save); c;
         c = strtok_r(NULL, ",", &save), i++) {
        char m = i < t->nkey ? 'k' : t->merge[i - t->nkey];
        const char *n = t->name;
        if (m == 'k')
            APPEND("%s%s%s", i ? ", " : "(", c, i == t->nkey - 1 ? ") DO UPDATE SET " : "");
        else if (m == '+')
            APPEND("%s%s=%s.%s+excluded.%s", nset++ ? ", " : "", c, n, c, c);
        else if (m == '<' || m == '>') /* min / max: one spelling for both databases */
            APPEND("%s%s=CASE WHEN excluded.%s %c %s.%s THEN excluded.%s ELSE %s.%s END",
                   nset++ ? ", " : "", c, c, m, n, c, c, n, c);
    }
    return o < size ? 0 : CM_EINVAL;
}

int agg_pg_schema_version(void) {
    int v = 0;
    for (const agg_schema_table_t *t = agg_schema_tables; t->name; t++)
        v = t->since > v ? t->since : v;
    for (size_t i = 0; i < sizeof indexes / sizeof indexes[0]; i++)
        v = indexes[i].since > v ? indexes[i].since : v;
    for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++)
        v = packed[i].since > v ? packed[i].since : v;
    return v;
}

/* Runs sql; 0 or CM_EIO with the server's message in err. */
static int run(PGconn *c, const char *sql, char *err, size_t err_size) {
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : CM_EIO;
    if (rc)
        snprintf(err, err_size, "%s", PQerrorMessage(c));
    PQclear(r);
    return rc;
}

/* Applies migration v unless applied (caller holds the advisory lock in a transaction). */
static int migrate_one(PGconn *c, int v, char *e, size_t esize) {
    char q[128];
    snprintf(q, sizeof q, "SELECT 1 FROM fleetprof_schema WHERE version = %d", v);
    PGresult *r = PQexec(c, q);
    int done = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
    int bad = PQresultStatus(r) != PGRES_TUPLES_OK;
    PQclear(r);
    if (bad) {
        snprintf(e, esize, "%s", PQerrorMessage(c));
        return CM_EIO;
    }
    if (done)
        return 0;
    char ddl[8192];
    if (agg_schema_ddl(1, v, ddl, sizeof ddl)) {
        snprintf(e, esize, "the DDL does not fit in %zu bytes", sizeof ddl);
        return CM_EINVAL;
    }
    snprintf(q, sizeof q, "INSERT INTO fleetprof_schema(version) VALUES (%d)", v);
    int rc = run(c, ddl, e, esize);
    if (!rc && !(rc = run(c, q, e, esize)))
        CM_INFO("postgres store: applied schema migration %d", v);
    return rc;
}

int agg_pg_migrate(PGconn *c, char *err, size_t err_size) {
    char e[512] = "";
    int n = agg_pg_schema_version();
    /* under the lock too: two CREATE TABLE IF NOT EXISTS at once collide in the catalog */
    if (run(c, "SET client_min_messages = warning; BEGIN;"
               "SELECT pg_advisory_xact_lock(7175046372);"
               "CREATE TABLE IF NOT EXISTS fleetprof_schema(version integer PRIMARY KEY,"
               " applied_at timestamptz NOT NULL DEFAULT now()); COMMIT", e, sizeof e)) {
        PQclear(PQexec(c, "ROLLBACK"));
        snprintf(err, err_size, "cannot create the schema version table: %s", e);
        return CM_EIO;
    }
    for (int v = 1; v <= n; v++) {
        /* the lock serializes instances migrating at once; the check inside it makes each
         * migration run once */
        if (run(c, "BEGIN; SELECT pg_advisory_xact_lock(7175046372)", e, sizeof e) ||
            migrate_one(c, v, e, sizeof e) || run(c, "COMMIT", e, sizeof e)) {
            PQclear(PQexec(c, "ROLLBACK"));
            snprintf(err, err_size, "schema migration %d failed: %s", v, e);
            return CM_EIO;
        }
    }
    /* a database migrated by a newer aggregator: refuse rather than write a schema we do not
     * know */
    PGresult *r = PQexec(c, "SELECT max(version) FROM fleetprof_schema");
    int newest = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
                     ? atoi(PQgetvalue(r, 0, 0))
                     : -1;
    PQclear(r);
    if (newest != n) {
        snprintf(err, err_size, "the database's schema is version %d, this aggregator knows "
                 "versions up to %d: upgrade the aggregator", newest, n);
        return CM_ECONFIG;
    }
    return 0;
}
