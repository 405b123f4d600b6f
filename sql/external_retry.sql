-- An external consumer drives the three stages itself: state and map in one
-- transaction, reduce in another.  Each transaction is retried as if its
-- commit had succeeded but the acknowledgement was lost, and reduce is made
-- to fail (fault_reduce = 1) between staging and applying.  Nothing is
-- applied twice and nothing is lost.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('ext', ARRAY['desk']);
CREATE TABLE batch1 AS
SELECT 'k' || i AS key, 1::bigint AS version, (i * 1.5)::numeric AS value, 'd' || (i % 3) AS desk
FROM generate_series(1, 1000) i;
CREATE TABLE batch2 AS
SELECT 'k' || i AS key, 2::bigint AS version, (i * 0.25)::numeric AS value, 'd' || (i % 4) AS desk
FROM generate_series(1, 1000, 2) i;
-- what the consumer should have applied: the newest version of each key
CREATE VIEW mismatches AS
WITH latest AS (SELECT DISTINCT ON (key) * FROM (SELECT * FROM batch1 UNION ALL SELECT * FROM batch2) u
				ORDER BY key, version DESC),
oracle AS (SELECT desk, 1 - GROUPING(desk) AS level, sum(value) AS total, count(*) AS keys
		   FROM latest GROUP BY ROLLUP (desk))
SELECT count(*) FROM (
	(SELECT desk, level, total, keys FROM ext.aggregates EXCEPT SELECT * FROM oracle)
	UNION ALL
	(SELECT * FROM oracle EXCEPT SELECT desk, level, total, keys FROM ext.aggregates)) m;

-- stage batch 1: state and map in one transaction
SELECT encode(exactonce.map_stage('ext', ARRAY(SELECT d FROM exactonce.state_upsert('ext',
	(SELECT array_agg(e) FROM batch1 e)) d), source => 'consumer', source_position => 1), 'hex') AS t1 \gset
SELECT length(:'t1') AS token_hex_digits;
-- the acknowledgement was lost: the same transaction again stages nothing
SELECT exactonce.map_stage('ext', ARRAY(SELECT d FROM exactonce.state_upsert('ext',
	(SELECT array_agg(e) FROM batch1 e)) d), source => 'consumer', source_position => 1) IS NULL AS nothing_staged;
SELECT count(*) AS staged FROM ext.ledger WHERE applied_at IS NULL;

-- reduce fails on purpose, after staging committed and before applying
SET exactonce.fault_reduce = 1;
SELECT exactonce.reduce_apply('ext');
RESET exactonce.fault_reduce;
SELECT count(*) AS cells FROM ext.aggregates;
-- the retried reduce applies the staged batch; its lost acknowledgement
-- makes the consumer reduce again, which applies nothing, by name or not
SELECT exactonce.reduce_apply('ext');
SELECT exactonce.reduce_apply('ext');
SELECT exactonce.reduce_apply('ext', ARRAY[decode(:'t1', 'hex')]);
-- replaying the events once more stages nothing
SELECT exactonce.map_stage('ext', ARRAY(SELECT d FROM exactonce.state_upsert('ext',
	(SELECT array_agg(e) FROM batch1 e)) d)) IS NULL AS nothing_staged;

-- batch 2 modifies half the keys and moves them; its stage is retried twice
SELECT encode(exactonce.map_stage('ext', ARRAY(SELECT d FROM exactonce.state_upsert('ext',
	(SELECT array_agg(e) FROM batch2 e)) d), source => 'consumer', source_position => 2), 'hex') AS t2 \gset
SELECT exactonce.map_stage('ext', ARRAY(SELECT d FROM exactonce.state_upsert('ext',
	(SELECT array_agg(e) FROM batch2 e)) d), source => 'consumer', source_position => 2) IS NULL AS nothing_staged;
SELECT exactonce.map_stage('ext', ARRAY(SELECT d FROM exactonce.state_upsert('ext',
	(SELECT array_agg(e) FROM batch2 e)) d), source => 'consumer', source_position => 2) IS NULL AS nothing_staged;
-- a pipeline with a batch staged and not applied is not dropped
\set VERBOSITY terse
SELECT exactonce.drop_pipeline('ext');
\set VERBOSITY default
SELECT exactonce.reduce_apply('ext', ARRAY[decode(:'t2', 'hex')]);
SELECT exactonce.reduce_apply('ext', ARRAY[decode(:'t2', 'hex')]);
SELECT * FROM mismatches;
-- each retry of the state stage counted its events as duplicates
SELECT ingested, applied, duplicates, stale FROM exactonce.pipelines WHERE name = 'ext';

-- tokens are kept until the consumer releases them, then forgotten
SELECT exactonce.release('ext', 'consumer', 1);
SELECT count(*) AS kept FROM ext.ledger;

-- the token is the SHA-256 of the batch's canonical encoding, computed here
-- from the deltas alone: sorted by key (bytes), version, cell, key change
-- and total; a header of the numbers of dimensions and measures; each text
-- and number length-prefixed (numbers without trailing zeros), a NULL
-- measure as four 0xFF bytes.  A retry after an upgrade stages the same
-- batch under the same token only while this holds.
SELECT exactonce.create_pipeline('tok', ARRAY['desk'], measures => ARRAY['qty']);
CREATE TABLE batch3 AS
SELECT key, version + 1 AS version, value * 3 AS value, 'd' || (length(key) % 2) AS desk,
	   CASE WHEN version % 2 = 0 THEN NULL ELSE value / 7 END AS qty
FROM batch2;
SELECT count(*) > 0 AS first FROM exactonce.state_upsert('tok', (SELECT array_agg(e) FROM batch1 e));
CREATE TEMP TABLE deltas AS SELECT d FROM exactonce.state_upsert('tok', (SELECT array_agg(e) FROM batch3 e)) d;
SELECT count(*) FILTER (WHERE (d).keys = -1) > 0 AND count(*) FILTER (WHERE (d).keys = 1) > 0
	   AND count(*) FILTER (WHERE (d).measures[1] IS NULL) > 0 AS deltas_of_every_kind
FROM deltas;
CREATE FUNCTION pg_temp.len_text(t text) RETURNS bytea LANGUAGE sql IMMUTABLE
	AS $$ SELECT int4send(octet_length(t)) || convert_to(t, 'UTF8') $$;
SELECT sha256(int8send(1) || int8send(1) || (
		   SELECT string_agg(pg_temp.len_text((d).key) || int8send((d).version) || pg_temp.len_text((d).cell[1])
							 || pg_temp.len_text(trim_scale((d).total)::text) || int8send((d).keys)
							 || coalesce(pg_temp.len_text(trim_scale((d).measures[1])::text), '\xffffffff'),
							 ''::bytea
							 ORDER BY (d).key COLLATE "C", (d).version, (d).cell[1] COLLATE "C", (d).keys,
									  (d).total, (d).measures[1] NULLS FIRST)
		   FROM deltas)) AS canonical \gset
-- deltas in any order stage under that token: in reverse, then as the
-- state stage yields them (sorted already, hashed as they come)
BEGIN;
SELECT exactonce.map_stage('tok', ARRAY(SELECT d FROM deltas ORDER BY (d).key COLLATE "C" DESC, (d).keys))
	   = :'canonical'::bytea AS reversed_is_canonical;
ROLLBACK;
SELECT exactonce.map_stage('tok', ARRAY(SELECT d FROM deltas)) = :'canonical'::bytea
	   AS token_is_sha256_of_canonical_deltas;
DROP TABLE batch3, deltas;
SELECT exactonce.drop_pipeline('tok', force => true);

-- every number enters the token as its text without trailing zeros,
-- written straight from the stored digits: numbers of every form (short
-- and long, whole, fractions, below 1e-4, scales past their digits, signs,
-- zeros at every scale, past 128 characters) give the token computed here
-- from their text
SELECT exactonce.create_pipeline('num', ARRAY['desk'], measures => ARRAY['qty']);
CREATE TEMP TABLE numbers AS
SELECT row_number() OVER () AS i, n::numeric AS n
FROM unnest(ARRAY['0', '0.000', '-0.5', '1.50', '10000', '-10000.0000', '9999.9999',
				  '0.0001', '0.00001000', '1e-30', '-1.5e-7', '123456789012345678901234567890.000100',
				  '100000000', '0.1', '7', '-7.00', '1e100', '-1e120', '2e-200',
				  repeat('9', 150) || '.' || repeat('1', 40),
				  '0.' || repeat('0', 120) || '3',
				  '12345.678900000000000000000000000000']) AS n;
SELECT n::text AS n, round(n, 40)::text AS at_scale_40 FROM numbers WHERE i IN (2, 11) ORDER BY i;
CREATE TEMP TABLE deltas AS
SELECT ROW('k' || lpad(i::text, 3, '0'), 1, ARRAY['d'], n, 1,
		   ARRAY[CASE WHEN i % 2 = 0 THEN round(n, 40) ELSE -n END], NULL)::exactonce.delta AS d
FROM numbers;
SELECT sha256(int8send(1) || int8send(1) || (
		   SELECT string_agg(pg_temp.len_text((d).key) || int8send((d).version) || pg_temp.len_text((d).cell[1])
							 || pg_temp.len_text(trim_scale((d).total)::text) || int8send((d).keys)
							 || pg_temp.len_text(trim_scale((d).measures[1])::text),
							 ''::bytea ORDER BY (d).key)
		   FROM deltas)) AS canonical \gset
SELECT exactonce.map_stage('num', ARRAY(SELECT d FROM deltas)) = :'canonical'::bytea
	   AS numbers_hash_as_their_text;
DROP TABLE numbers, deltas;
SELECT exactonce.drop_pipeline('num', force => true);

-- the stage functions and the wait read the latest committed state: a
-- transaction snapshot is refused, each before it touches anything
\set VERBOSITY terse
BEGIN ISOLATION LEVEL REPEATABLE READ;
SAVEPOINT s;
SELECT * FROM exactonce.state_upsert('ext', (SELECT array_agg(e) FROM batch1 e));
ROLLBACK TO s;
SELECT exactonce.map_stage('ext', ARRAY[]::exactonce.delta[], source => 'consumer', source_position => 3);
ROLLBACK TO s;
SELECT exactonce.reduce_apply('ext');
ROLLBACK TO s;
SELECT exactonce.release('ext', 'consumer', 2);
ROLLBACK TO s;
SELECT exactonce.wait_applied('ext', '1 second');
ROLLBACK;
\set VERBOSITY default
SELECT count(*) AS still_kept FROM ext.ledger;
SELECT * FROM mismatches;

DROP VIEW mismatches;
DROP TABLE batch1, batch2;
SELECT exactonce.drop_pipeline('ext');
DROP EXTENSION exactonce;
