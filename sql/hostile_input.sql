-- Crafted input to the functions that take arrays of records or tokens:
-- each case gets a result or an error with an SQLSTATE, never a crash.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('h', ARRAY['d']);
CREATE DOMAIN mytext AS text;
CREATE TYPE ev AS (key text, version bigint, value numeric, d text);
CREATE TYPE ev_domain AS (key mytext, version bigint, value numeric, d text);
CREATE TYPE ev_reordered AS (d text, value numeric, version bigint, key text, extra int);
CREATE TYPE ev_short AS (key text, version bigint);
CREATE TABLE ev_dropped (junk int, key text, version bigint, value numeric, d text);
ALTER TABLE ev_dropped DROP COLUMN junk;
INSERT INTO ev_dropped VALUES ('dropped', 1, 1, 'z');

-- anonymous records of different row types (typmods) in one array
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[
	(SELECT r FROM (SELECT 'a'::text AS key, 1::bigint AS version, 1::numeric AS value, 'x'::text AS d) r)::record,
	(SELECT r FROM (SELECT 0 AS zzz, 'b'::text AS key, 2::bigint AS version, 2::numeric AS value, 'y'::text AS d, false AS deleted) r)::record]);
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[
	(SELECT r FROM (SELECT 'c'::text AS key, 1::bigint AS version, 1::numeric AS value, 'x'::text AS d) r)::record,
	(SELECT r FROM (SELECT 1 AS zzz) r)::record]);
-- a row type with a dropped column, columns in another order, missing ones
SELECT count(*) FROM exactonce.state_upsert('h', (SELECT array_agg(e) FROM ev_dropped e));
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[('w', 4.5, 1, 'reordered', 0)::ev_reordered]);
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[('short', 1)::ev_short]);
-- a domain over a column's type, NULL elements and fields
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[('dom', 1, 1, 'x')::ev_domain]);
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[NULL::ev]);
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[('n', NULL, 1, 'x')::ev]);
-- empty and multi-dimensional arrays, arrays of scalars
SELECT count(*) FROM exactonce.state_upsert('h', '{}'::ev[]);
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[[('m', 1, 1, 'x')::ev], [('m2', 1, 1, 'x')::ev]]);
SELECT count(*) FROM exactonce.state_upsert('h', ARRAY[1, 2]);
-- the same through ingest()
SELECT exactonce.ingest('h', 's', ARRAY[
	(SELECT r FROM (SELECT 'i1'::text AS key, 1::bigint AS version, 1::numeric AS value, 'x'::text AS d) r)::record,
	(SELECT r FROM (SELECT 0 AS zzz, 'i2'::text AS key, 2::bigint AS version, 2::numeric AS value, 'y'::text AS d) r)::record],
	ARRAY[1, 2]::bigint[]);
SELECT exactonce.ingest('h', 's', ARRAY[NULL::ev], ARRAY[3]::bigint[]);
SELECT exactonce.ingest('h', 's', ARRAY[('i3', 1, 1, 'x')::ev], ARRAY[NULL]::bigint[]);
SELECT exactonce.ingest('h', 's', ARRAY[('i3', 1, 1, 'x')::ev], ARRAY[[4]]::bigint[]);
-- deltas with NULLs, cells of the wrong size, an empty array
SELECT exactonce.map_stage('h', ARRAY[NULL::exactonce.delta]);
SELECT exactonce.map_stage('h', ARRAY[('k', 1, NULL, 1, 1, NULL, NULL)::exactonce.delta]);
SELECT exactonce.map_stage('h', ARRAY[('k', 1, ARRAY['a', 'b'], 1, 1, NULL, NULL)::exactonce.delta]);
SELECT exactonce.map_stage('h', ARRAY[('k', 1, ARRAY[NULL], 1, 1, NULL, NULL)::exactonce.delta]);
SELECT exactonce.map_stage('h', ARRAY[('k', 1, ARRAY[['a']], 1, 1, NULL, NULL)::exactonce.delta]) IS NOT NULL AS staged;
-- tokens of any length
SELECT exactonce.reduce_apply('h', ARRAY[''::bytea, '\x00'::bytea, decode(repeat('ff', 100000), 'hex')]);
SELECT exactonce.release('h', repeat('s', 100000), 1);

SELECT exactonce.flush('h');
SELECT key, version, value, d FROM h.state ORDER BY key;
SELECT d, level, total, keys FROM h.aggregates ORDER BY level, d;
SELECT ingested = applied + duplicates + stale + dead_lettered AS adds_up FROM exactonce.pipelines WHERE name = 'h';

DROP TABLE ev_dropped;
DROP TYPE ev, ev_domain, ev_reordered, ev_short;
DROP DOMAIN mytext;
SELECT exactonce.drop_pipeline('h', true);
DROP EXTENSION exactonce;
