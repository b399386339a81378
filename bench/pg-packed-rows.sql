-- The cost of the store's fine rows against the same rows packed one row per group (a
-- process's stacks of one type and bucket: arrays, read back with unnest), measured on the
-- rows an ingest run wrote (bench-aggregator's BENCH_PG_HOOK):
--   BENCH_PG_HOOK='psql "$PG_URL" -X -q -f bench/pg-packed-rows.sql' BENCH_PG=1 ... bench-aggregator 1 0
-- Both forms go in by a binary COPY from a file (the ingest's path), into tables with the
-- store's primary key (the packed one on the group's columns), in the backend measured here;
-- each pair twice, alternating. Prints the backend's CPU (from /proc), the WAL written and
-- the table's size for each, and the read of every row back (a sum over stacks).
\pset footer off
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
\echo == rows and groups per table
SELECT 'profile' t, count(*) nrows, count(DISTINCT (service, version, type, width, bucket, labels)) groups FROM profile
UNION ALL SELECT 'span_stacks', count(*), count(DISTINCT (trace, span, type)) FROM span_stacks
UNION ALL SELECT 'profile_leaf', count(*), count(DISTINCT (service, version, type, width, bucket, labels)) FROM profile_leaf
UNION ALL SELECT 'profile_coarse', count(*), count(DISTINCT (service, version, type, width, bucket, labels)) FROM profile_coarse
UNION ALL SELECT 'labels', count(*), count(DISTINCT labelset) FROM labels;
\echo == profile: stacks per group (quantiles)
SELECT percentile_disc(ARRAY[0.1, 0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY n) q, max(n)
FROM (SELECT count(*) n FROM profile GROUP BY service, version, type, width, bucket, labels) g;
COPY (SELECT * FROM profile ORDER BY service, version, type, width, bucket, labels, stack)
  TO '/tmp/pging3-prof-rows.bin' (FORMAT binary);
COPY (SELECT service, version, type, width, bucket, labels, array_agg(stack ORDER BY stack),
             array_agg(weight ORDER BY stack), array_agg(count ORDER BY stack),
             array_agg(rows ORDER BY stack), array_agg(chunks ORDER BY stack)
      FROM profile GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6)
  TO '/tmp/pging3-prof-pack.bin' (FORMAT binary);
CREATE TABLE x_rows (LIKE profile INCLUDING ALL);
CREATE TABLE x_pack (service bigint, version bigint, type bigint, width bigint, bucket bigint,
  labels bigint, stacks bigint[], weights bigint[], counts bigint[], nrows bigint[],
  chunks bigint[], PRIMARY KEY (service, version, type, width, bucket, labels));
\o /dev/null
SELECT sum(weight) FROM profile;
\o
\echo == load: backend CPU-s (cumulative), WAL bytes, size
SELECT pg_current_wal_lsn() AS l0 \gset
\! awk '{printf "cpu %.2f start\n", ($14+$15)/100}' /proc/$BPID/stat
COPY x_rows FROM '/tmp/pging3-prof-rows.bin' (FORMAT binary);
\! awk '{printf "cpu %.2f after rows\n", ($14+$15)/100}' /proc/$BPID/stat
SELECT pg_current_wal_lsn() AS l1 \gset
COPY x_pack FROM '/tmp/pging3-prof-pack.bin' (FORMAT binary);
\! awk '{printf "cpu %.2f after packed\n", ($14+$15)/100}' /proc/$BPID/stat
SELECT pg_current_wal_lsn() AS l2 \gset
SELECT pg_size_pretty(pg_wal_lsn_diff(:'l1', :'l0')) wal_rows, pg_size_pretty(pg_wal_lsn_diff(:'l2', :'l1')) wal_packed,
       pg_size_pretty(pg_total_relation_size('x_rows')) size_rows, pg_size_pretty(pg_total_relation_size('x_pack')) size_packed;
TRUNCATE x_rows; TRUNCATE x_pack;
CHECKPOINT;
\! awk '{printf "cpu %.2f again\n", ($14+$15)/100}' /proc/$BPID/stat
COPY x_pack FROM '/tmp/pging3-prof-pack.bin' (FORMAT binary);
\! awk '{printf "cpu %.2f after packed\n", ($14+$15)/100}' /proc/$BPID/stat
COPY x_rows FROM '/tmp/pging3-prof-rows.bin' (FORMAT binary);
\! awk '{printf "cpu %.2f after rows\n", ($14+$15)/100}' /proc/$BPID/stat
\echo == read every row back: sum per stack of one type
\o /dev/null
SELECT stack, sum(weight) FROM x_rows WHERE type = 1 GROUP BY stack;
\! awk '{printf "cpu %.2f after rows read\n", ($14+$15)/100}' /proc/$BPID/stat
SELECT u.s, sum(u.w) FROM x_pack, unnest(stacks, weights) u(s, w) WHERE type = 1 GROUP BY u.s;
\! awk '{printf "cpu %.2f after packed read\n", ($14+$15)/100}' /proc/$BPID/stat
SELECT stack, sum(weight) FROM x_rows WHERE type = 1 GROUP BY stack;
\! awk '{printf "cpu %.2f after rows read\n", ($14+$15)/100}' /proc/$BPID/stat
\o
DROP TABLE x_rows; DROP TABLE x_pack;
\! rm -f /tmp/pging3-prof-rows.bin /tmp/pging3-prof-pack.bin
