/* The PostgreSQL store's schema, in one place: a list of versioned migrations, applied in
 * order at open (store_pg.h). Each migration runs in its own transaction under an advisory
 * lock, so instances starting at once against one database apply each exactly once; the
 * version applied is in `fleetprof_schema`. A new column is a new migration appended below
 * (never an edit of an applied one).
 *
 * The tables mirror the SQLite schema (store_sqlite.c) with one database for every partition:
 * dictionaries are content-addressed (shared by partitions, inserted ON CONFLICT DO NOTHING),
 * rollups are sums (a service whose chunks moved partitions adds up in the same rows), offsets
 * are keyed by (topic, partition). 64-bit ids and hashes are stored as bigint (two's complement
 * of the uint64).
 * Threading: called by the thread that owns the connection. */
#include "store_pg.h"

#include "cm/error.h"
#include "cm/log.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROFILE_COLS                                                                               \
    "(service bigint, version bigint, type bigint, width bigint, bucket bigint, labels bigint, "

static const char *const migrations[] = {
    /* 1: the tables of the SQLite schema version 1 (work_units included) */
    "CREATE TABLE meta(key text PRIMARY KEY, value text);"
    "CREATE TABLE offsets(topic text, part integer, next_offset bigint, updated_ns bigint,"
    " PRIMARY KEY(topic, part));"
    "CREATE TABLE seen_chunks(chunk_id bytea PRIMARY KEY, ts_ns bigint);"
    "CREATE INDEX seen_chunks_ts ON seen_chunks(ts_ns);"
    "CREATE TABLE strings(id bigint PRIMARY KEY, s text NOT NULL);"
    "CREATE TABLE mappings(id bigint PRIMARY KEY, filename bigint, build_id bytea);"
    "CREATE TABLE functions(id bigint PRIMARY KEY, name bigint, system_name bigint,"
    " filename bigint);"
    "CREATE INDEX functions_name ON functions(name);"
    "CREATE TABLE locations(id bigint PRIMARY KEY, function bigint, mapping bigint,"
    " address bigint, line bigint);"
    "CREATE TABLE stacks(id bigint PRIMARY KEY, parent bigint, location bigint, depth bigint);"
    "CREATE TABLE labelsets(id bigint PRIMARY KEY);"
    "CREATE TABLE labels(key bigint, value bigint, labelset bigint,"
    " PRIMARY KEY(key, value, labelset));"
    "CREATE TABLE profile" PROFILE_COLS "stack bigint, weight bigint, count bigint, rows bigint,"
    " chunks bigint, PRIMARY KEY(service, version, type, width, bucket, labels, stack));"
    "CREATE TABLE profile_coarse" PROFILE_COLS "stack bigint, weight bigint, count bigint,"
    " rows bigint, chunks bigint,"
    " PRIMARY KEY(service, version, type, width, bucket, labels, stack));"
    "CREATE TABLE profile_leaf" PROFILE_COLS "leaf bigint, weight bigint, count bigint,"
    " rows bigint, chunks bigint,"
    " PRIMARY KEY(service, version, type, width, bucket, labels, leaf));"
    "CREATE TABLE totals(service bigint, version bigint, type bigint, width bigint,"
    " bucket bigint, weight bigint, count bigint, rows bigint, chunks bigint,"
    " PRIMARY KEY(service, version, type, width, bucket));"
    "CREATE TABLE intervals(service bigint, version bigint, width bigint, bucket bigint,"
    " chunks bigint, duration_ns bigint, agent_cpu_ns bigint, process_cpu_ns bigint,"
    " dropped bigint, work_units bigint NOT NULL DEFAULT 0,"
    " PRIMARY KEY(service, version, width, bucket));"
    "CREATE TABLE drops(service bigint, version bigint, width bigint, bucket bigint,"
    " reason bigint, type bigint, count bigint,"
    " PRIMARY KEY(service, version, width, bucket, reason, type));"
    "CREATE TABLE versions(service bigint, version bigint, first_ns bigint, last_ns bigint,"
    " chunks bigint, rows bigint, PRIMARY KEY(service, version));"
    "CREATE TABLE fn_stats(service bigint, version bigint, type bigint, width bigint,"
    " bucket bigint, function bigint, chunks bigint, incl double precision,"
    " incl2 double precision, self double precision, self2 double precision,"
    " PRIMARY KEY(service, version, type, width, bucket, function));"
    "CREATE TABLE spans(trace bytea, span bytea, service bigint, version bigint,"
    " first_ns bigint, last_ns bigint, cpu bigint, wall bigint, alloc bigint, inuse bigint,"
    " lock bigint, io bigint, rows bigint, PRIMARY KEY(trace, span));"
    "CREATE INDEX spans_service ON spans(service, last_ns);"
    "CREATE INDEX spans_span ON spans(span);"
    "CREATE TABLE span_stacks(trace bytea, span bytea, type bigint, stack bigint,"
    " weight bigint, count bigint, rows bigint, PRIMARY KEY(trace, span, type, stack));"
    "CREATE TABLE rejects(reason text PRIMARY KEY, count bigint);",
    /* 2: a label set with dimensions -> the same without them: the key of the derived rows
     * (tiers, per-leaf), which do not keep the dimensions (SQLite: labelset_base) */
    "CREATE TABLE labelset_base(labelset bigint PRIMARY KEY, base bigint);",
    /* 3: the read side (query_store.h): the split of a profile by a label joins each row's
     * label set to its label of one key (labels' primary key starts with the key and value;
     * every other read is a prefix of a primary key or of the span indexes) */
    "CREATE INDEX labels_labelset ON labels(labelset, key);",
};
#define N_MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int agg_pg_schema_version(void) { return N_MIGRATIONS; }

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

int agg_pg_migrate(PGconn *c, char *err, size_t err_size) {
    char e[512] = "";
    /* under the lock too: two CREATE TABLE IF NOT EXISTS at once collide in the catalog */
    if (run(c, "SET client_min_messages = warning; BEGIN;"
               "SELECT pg_advisory_xact_lock(7175046372);"
               "CREATE TABLE IF NOT EXISTS fleetprof_schema(version integer PRIMARY KEY,"
               " applied_at timestamptz NOT NULL DEFAULT now()); COMMIT", e, sizeof e)) {
        PQclear(PQexec(c, "ROLLBACK"));
        snprintf(err, err_size, "cannot create the schema version table: %s", e);
        return CM_EIO;
    }
    for (int v = 1; v <= N_MIGRATIONS; v++) {
        /* the lock serializes instances migrating at once; the check inside it makes each
         * migration run once */
        if (run(c, "BEGIN; SELECT pg_advisory_xact_lock(7175046372)", e, sizeof e))
            goto fail;
        char q[128];
        snprintf(q, sizeof q, "SELECT 1 FROM fleetprof_schema WHERE version = %d", v);
        PGresult *r = PQexec(c, q);
        int done = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
        int bad = PQresultStatus(r) != PGRES_TUPLES_OK;
        PQclear(r);
        if (bad) {
            snprintf(e, sizeof e, "%s", PQerrorMessage(c));
            goto fail;
        }
        if (!done) {
            snprintf(q, sizeof q, "INSERT INTO fleetprof_schema(version) VALUES (%d)", v);
            if (run(c, migrations[v - 1], e, sizeof e) || run(c, q, e, sizeof e))
                goto fail;
            CM_INFO("postgres store: applied schema migration %d", v);
        }
        if (run(c, "COMMIT", e, sizeof e))
            goto fail;
        continue;
    fail:
        PQclear(PQexec(c, "ROLLBACK"));
        snprintf(err, err_size, "schema migration %d failed: %s", v, e);
        return CM_EIO;
    }
    /* a database migrated by a newer aggregator: refuse rather than write a schema we do not
     * know */
    PGresult *r = PQexec(c, "SELECT max(version) FROM fleetprof_schema");
    int newest = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
                     ? atoi(PQgetvalue(r, 0, 0))
                     : -1;
    PQclear(r);
    if (newest != N_MIGRATIONS) {
        snprintf(err, err_size, "the database's schema is version %d, this aggregator knows "
                 "versions up to %d: upgrade the aggregator", newest, N_MIGRATIONS);
        return CM_ECONFIG;
    }
    return 0;
}
