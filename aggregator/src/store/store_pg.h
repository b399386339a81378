/* The PostgreSQL backend of the store (store.h), chosen with `--store postgres://...`: one
 * database for every partition of the topic, so any number of aggregator instances on any
 * hosts form one consumer group over it. The batch write (store/write.c) runs here fenced on
 * the stored offset (the offsets row is locked FOR UPDATE and must still hold the batch's base
 * offset, else -ESTALE); each table's rows are copied (COPY, binary) into a temporary staging
 * table and merged with one INSERT ... SELECT ... ON CONFLICT, keys sorted so concurrent
 * writers lock rows in one order; rows known to be new to the store (labels flagged by the
 * batch) are copied straight into the table instead; the
 * packed tables (schema.h agg_schema_packed: profile, profile_leaf, span_stacks) get one row
 * per group of the batch, its stacks and sums as arrays, by one COPY. A lost connection fails
 * the batch (the consume loop re-reads the stored offset and consumes the batch again) and is
 * re-established on the next call.
 *
 * Threading: a handle (one connection) is used by one thread at a time.
 */
#ifndef AGG_STORE_PG_H
#define AGG_STORE_PG_H

#include "store.h"

#include <libpq-fe.h>
#include <stddef.h>

/* 1 if spec names a PostgreSQL store (postgres:// or postgresql://). */
int agg_store_is_pg(const char *spec);
/* url without its password (for messages) into out (size bytes). */
void agg_store_pg_url_safe(const char *url, char *out, size_t size);

/* Connects to url, applies the schema migrations not applied yet, and returns a store handle.
 * Returns 0 or a negative code with the reason in err (the password is never echoed). */
int agg_store_pg_open(const char *url, agg_store_t **out, char *err, size_t err_size);

/* store/schema.c: applies the migrations not applied yet (serialized across instances by
 * an advisory lock). Returns 0, CM_EIO, or CM_ECONFIG when the database is newer than this
 * code; the reason in err. */
int agg_pg_migrate(PGconn *c, char *err, size_t err_size);
int agg_pg_schema_version(void);

#endif
