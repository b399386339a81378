/* The store's schema, described once (store/schema.c): the DDL of both databases and the
 * batch's merge rules are written from it.
 * Threading: the description is constant; the functions are reentrant. */
#ifndef AGG_STORE_SCHEMA_H
#define AGG_STORE_SCHEMA_H

#include <stddef.h>

/* A table: cols "a,b,c"; types one letter per column (i bigint, n integer, f double, b bytes,
 * t text, T text not null, a any, z bigint not null default 0 added after version 1); the
 * first nkey columns are the primary key; merge one letter per other column for a batch's row
 * meeting a stored one (+ sum, < min, > max, = keep), NULL for a dictionary (the stored row
 * stays); since: the PostgreSQL migration that creates it. */
typedef struct {
    const char *name, *cols, *types;
    int nkey;
    const char *merge;
    int since;
} agg_schema_table_t;

extern const agg_schema_table_t agg_schema_tables[]; /* ends with a NULL name */
const agg_schema_table_t *agg_schema_table(const char *name);
/* PostgreSQL: the table that holds table `name` packed (one row per group, the last key column
 * and the sums as bigint arrays; `name` is then a view that unnests it: rows of one key may
 * repeat, readers sum), NULL when `name` is stored as it reads. */
const char *agg_schema_packed(const char *name);
/* The INSERT that packs the rows `from` yields (a table, or "(SELECT ...) AS d(<the table's
 * columns>)"; each key once) into table name's packed table: a row per group, each other
 * column an array in the order of the last key column. 0, or CM_EINVAL (name not packed, or
 * it does not fit). */
int agg_schema_pack_insert(const char *name, const char *from, char *buf, size_t size);

/* The DDL (CREATE ... IF NOT EXISTS) of the objects of PostgreSQL migration `since` (0: all),
 * for PostgreSQL (pg) or SQLite (every object, then its schema_version row). 0 or CM_EINVAL
 * when it does not fit. */
int agg_schema_ddl(int pg, int since, char *buf, size_t size);
/* SQLite: the ALTER TABLE ... ADD COLUMN of the late columns, one statement each ("duplicate
 * column" for a file that has it). */
int agg_schema_late_columns(char *buf, size_t size);

/* The statement that merges rows from src ("VALUES(?1, ...)" or "SELECT * FROM stage") into
 * table t by its merge rules: an upsert on the primary key, or, for a dictionary, an insert of
 * the rows not stored yet. Both dialects. 0 or CM_EINVAL when it does not fit. */
int agg_schema_upsert(const agg_schema_table_t *t, const char *src, char *buf, size_t size);

#endif
