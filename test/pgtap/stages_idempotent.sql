-- test/pgtap/stages_idempotent.sql
--
-- The three stages as an external consumer calls them, each retried:
--
--	 exactonce.state_upsert(pipeline, events)			-> SETOF exactonce.delta
--	 exactonce.map_stage(pipeline, deltas, source, position) -> bytea token
--	 exactonce.reduce_apply(pipeline, tokens)			-> batches applied
--	 exactonce.release(pipeline, source, position)		-> tokens forgotten
--
-- Every stage must be idempotent: the same events give deltas once, the same
-- deltas are staged once under one token, a token is applied once, and an
-- applied token is not staged again until its source releases it.  Two
-- batches that differ only in their keys must not share a token.
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(49);

SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_stages', ARRAY['d1', 'd2'], 'latest')$$,
	'create_pipeline tap_stages (latest; d1, d2)');

-- The events of each batch.  Batch b2 has the same cells and values as b1,
-- with other keys.
CREATE TEMP TABLE ev (batch text, key text, version bigint, value numeric, d1 text, d2 text);
INSERT INTO ev VALUES
	('b1', 'k1', 1, 10, 'a', 'b'), ('b1', 'k2', 1, 20, 'a', 'c'), ('b1', 'k3', 1, 5, 'x', 'y'),
	('b2', 'k4', 1, 10, 'a', 'b'), ('b2', 'k5', 1, 20, 'a', 'c'), ('b2', 'k6', 1, 5, 'x', 'y'),
	-- b3: k1 moves to version 2 in the same cell with another value
	('b3', 'k1', 2, 11, 'a', 'b'),
	-- b4: a new key in a new cell
	('b4', 'k7', 1, 7, 'x', 'z'),
	-- b5: k2 moves to version 2 with the same cell and value: its deltas cancel
	('b5', 'k2', 2, 20, 'a', 'c');

-- The events of a batch as the stage takes them: records whose columns are
-- named and typed like the ingest columns (here of the row type of a temp
-- table; an anonymous record works too, see below).
CREATE TEMP TABLE event (key text, version bigint, value numeric, d1 text, d2 text);
CREATE FUNCTION pg_temp.batch_events(b text) RETURNS event[] LANGUAGE sql AS $$
	SELECT array_agg(ROW(key, version, value, d1, d2)::event ORDER BY key) FROM ev WHERE batch = b
$$;

-- What the consumer keeps of each batch: its deltas and token.
CREATE TEMP TABLE run (batch text PRIMARY KEY, deltas exactonce.delta[], token bytea);

-- Expected aggregates after b1 (and after b1 and b2).
CREATE TEMP TABLE agg_b1 (level int, d1 text, d2 text, total numeric, keys bigint);
INSERT INTO agg_b1 VALUES
	(0, NULL, NULL, 35, 3),
	(1, 'a', NULL, 30, 2), (1, 'x', NULL, 5, 1),
	(2, 'a', 'b', 10, 1), (2, 'a', 'c', 20, 1), (2, 'x', 'y', 5, 1);
CREATE TEMP TABLE agg_b2 AS SELECT level, d1, d2, total * 2 AS total, keys * 2 AS keys FROM agg_b1;

------------------------------------------------------------------------------
-- Stage 1: state_upsert
------------------------------------------------------------------------------

INSERT INTO run (batch, deltas)
SELECT 'b1', array_agg(d ORDER BY d.key)
FROM exactonce.state_upsert('tap_stages', pg_temp.batch_events('b1')) AS d;

SELECT results_eq(
	$$SELECT (u).key, (u).version, (u).cell, (u).total, (u).keys
	  FROM (SELECT unnest(deltas) AS u FROM run WHERE batch = 'b1') AS s ORDER BY 1$$,
	$$VALUES ('k1', 1::bigint, ARRAY['a', 'b'], 10::numeric, 1::bigint),
			 ('k2', 1::bigint, ARRAY['a', 'c'], 20::numeric, 1::bigint),
			 ('k3', 1::bigint, ARRAY['x', 'y'], 5::numeric, 1::bigint)$$,
	'state_upsert yields one delta per new key');

SELECT is((SELECT count(*) FROM exactonce.state_upsert('tap_stages', pg_temp.batch_events('b1'))),
	0::bigint, 'state_upsert of the same events again yields no delta');

SELECT is((SELECT count(*) FROM exactonce.state_upsert('tap_stages',
		(SELECT array_agg(e) FROM (VALUES ('k1', 1::bigint, 10::numeric, 'a', 'b'))
			AS e(key, version, value, d1, d2)))),
	0::bigint, 'state_upsert of one of them again (as a VALUES record) yields no delta');

SELECT results_eq(
	$$SELECT key, version, value, d1, d2, deleted FROM tap_stages.state ORDER BY key$$,
	$$VALUES ('k1'::text COLLATE "C", 1::bigint, 10::numeric, 'a', 'b', false),
			 ('k2', 1, 20, 'a', 'c', false), ('k3', 1, 5, 'x', 'y', false)$$,
	'state holds each key once');

SELECT results_eq(
	$$SELECT ingested, applied, duplicates, stale, dead_lettered FROM exactonce.pipelines
	  WHERE name = 'tap_stages'$$,
	$$VALUES (7::bigint, 3::bigint, 4::bigint, 0::bigint, 0::bigint)$$,
	'counters: the repeats are duplicates');

SELECT is_empty($$SELECT * FROM tap_stages.aggregates$$,
	'state_upsert alone does not touch aggregates');

------------------------------------------------------------------------------
-- Stage 2: map_stage
------------------------------------------------------------------------------

UPDATE run SET token = exactonce.map_stage('tap_stages', deltas, 'consumer_a', 10) WHERE batch = 'b1';

SELECT is(octet_length(token), 32, 'map_stage returns a 32-byte token') FROM run WHERE batch = 'b1';

SELECT is(exactonce.map_stage('tap_stages', deltas, 'consumer_a', 10), token,
	'map_stage of the same deltas again returns the same token')
FROM run WHERE batch = 'b1';

SELECT is(exactonce.map_stage('tap_stages',
		(SELECT array_agg(u ORDER BY (u).key DESC) FROM unnest(deltas) AS u), 'consumer_a', 10),
	token, 'the token does not depend on the order of the deltas')
FROM run WHERE batch = 'b1';

SELECT results_eq(
	$$SELECT l.token, l.source, l.position, l.applied_at IS NULL, l.deltas FROM tap_stages.ledger AS l$$,
	$$SELECT token, 'consumer_a'::text, 10::bigint, true, 3 FROM run WHERE batch = 'b1'$$,
	'the ledger holds one staged row for the token');

SELECT is_empty($$SELECT * FROM tap_stages.aggregates$$,
	'map_stage alone does not touch aggregates');

SELECT is(exactonce.map_stage('tap_stages', '{}'::exactonce.delta[], 'consumer_a', 11), NULL,
	'map_stage of no deltas stages nothing and returns NULL');

------------------------------------------------------------------------------
-- Stage 3: reduce_apply
------------------------------------------------------------------------------

SELECT is(exactonce.reduce_apply('tap_stages', ARRAY[token]), 1, 'reduce_apply applies the token')
FROM run WHERE batch = 'b1';

SELECT results_eq(
	$$SELECT level, d1, d2, total, keys FROM tap_stages.aggregates ORDER BY level, d1, d2$$,
	$$SELECT level, d1, d2, total, keys FROM agg_b1 ORDER BY level, d1, d2$$,
	'aggregates after b1');

SELECT is(exactonce.reduce_apply('tap_stages', ARRAY[token]), 0,
	'reduce_apply of the same token again applies nothing')
FROM run WHERE batch = 'b1';

SELECT is(exactonce.reduce_apply('tap_stages'), 0, 'reduce_apply of all staged batches: none left');

SELECT results_eq(
	$$SELECT level, d1, d2, total, keys FROM tap_stages.aggregates ORDER BY level, d1, d2$$,
	$$SELECT level, d1, d2, total, keys FROM agg_b1 ORDER BY level, d1, d2$$,
	'aggregates changed once');

SELECT results_eq(
	$$SELECT l.token, l.applied_at IS NOT NULL, l.levels IS NULL AND l.cells IS NULL
			 AND l.totals IS NULL AND l.keys IS NULL
	  FROM tap_stages.ledger AS l$$,
	$$SELECT token, true, true FROM run WHERE batch = 'b1'$$,
	'the ledger row is marked applied, its payload dropped');

-- An applied token comes back (the consumer retries after a crash).
SELECT is(exactonce.map_stage('tap_stages', deltas, 'consumer_a', 10), token,
	'map_stage of an applied batch returns its token')
FROM run WHERE batch = 'b1';

SELECT results_eq(
	$$SELECT l.token, l.applied_at IS NOT NULL FROM tap_stages.ledger AS l$$,
	$$SELECT token, true FROM run WHERE batch = 'b1'$$,
	'... and does not stage it again');

SELECT is(exactonce.reduce_apply('tap_stages'), 0, 'reduce_apply then applies nothing');

SELECT is(exactonce.reduce_apply('tap_stages', ARRAY[token]), 0,
	'reduce_apply of that token applies nothing')
FROM run WHERE batch = 'b1';

SELECT results_eq(
	$$SELECT level, d1, d2, total, keys FROM tap_stages.aggregates ORDER BY level, d1, d2$$,
	$$SELECT level, d1, d2, total, keys FROM agg_b1 ORDER BY level, d1, d2$$,
	'aggregates still changed once');

------------------------------------------------------------------------------
-- Same per-cell sums, other keys: another token
------------------------------------------------------------------------------

INSERT INTO run (batch, deltas)
SELECT 'b2', array_agg(d ORDER BY d.key)
FROM exactonce.state_upsert('tap_stages', pg_temp.batch_events('b2')) AS d;

SELECT results_eq(
	$$SELECT (u).cell, sum((u).total), sum((u).keys)
	  FROM (SELECT unnest(deltas) AS u FROM run WHERE batch = 'b2') AS s GROUP BY 1 ORDER BY 1$$,
	$$SELECT (u).cell, sum((u).total), sum((u).keys)
	  FROM (SELECT unnest(deltas) AS u FROM run WHERE batch = 'b1') AS s GROUP BY 1 ORDER BY 1$$,
	'b2 has the same per-cell sums as b1');

UPDATE run SET token = exactonce.map_stage('tap_stages', deltas, 'consumer_a', 20) WHERE batch = 'b2';

SELECT isnt((SELECT token FROM run WHERE batch = 'b2'), (SELECT token FROM run WHERE batch = 'b1'),
	'b2 gets another token than b1');

SELECT results_eq(
	$$SELECT l.applied_at IS NULL, l.deltas FROM tap_stages.ledger AS l JOIN run USING (token)
	  WHERE run.batch = 'b2'$$,
	$$VALUES (true, 3)$$,
	'b2 is staged, not mistaken for the applied b1');

SELECT is(exactonce.reduce_apply('tap_stages', ARRAY[token]), 1, 'reduce_apply applies b2')
FROM run WHERE batch = 'b2';

SELECT results_eq(
	$$SELECT level, d1, d2, total, keys FROM tap_stages.aggregates ORDER BY level, d1, d2$$,
	$$SELECT level, d1, d2, total, keys FROM agg_b2 ORDER BY level, d1, d2$$,
	'aggregates after b1 and b2: both counted');

------------------------------------------------------------------------------
-- A batch whose deltas cancel out
------------------------------------------------------------------------------

INSERT INTO run (batch, deltas)
SELECT 'b5', array_agg(d ORDER BY d.keys)
FROM exactonce.state_upsert('tap_stages', pg_temp.batch_events('b5')) AS d;

SELECT results_eq(
	$$SELECT (u).key, (u).version, (u).cell, (u).total, (u).keys
	  FROM (SELECT unnest(deltas) AS u FROM run WHERE batch = 'b5') AS s ORDER BY 5$$,
	$$VALUES ('k2', 2::bigint, ARRAY['a', 'c'], -20::numeric, -1::bigint),
			 ('k2', 2::bigint, ARRAY['a', 'c'], 20::numeric, 1::bigint)$$,
	'a new version in the same cell yields a retraction and an addition');

UPDATE run SET token = exactonce.map_stage('tap_stages', deltas, 'consumer_c', 1) WHERE batch = 'b5';

SELECT is(exactonce.reduce_apply('tap_stages', ARRAY[token]), 1,
	'reduce_apply applies a batch whose cells all cancel')
FROM run WHERE batch = 'b5';

SELECT results_eq(
	$$SELECT level, d1, d2, total, keys FROM tap_stages.aggregates ORDER BY level, d1, d2$$,
	$$SELECT level, d1, d2, total, keys FROM agg_b2 ORDER BY level, d1, d2$$,
	'... and aggregates do not change');

------------------------------------------------------------------------------
-- release
------------------------------------------------------------------------------

-- b3: staged by consumer_a at position 30, not applied yet.
INSERT INTO run (batch, deltas)
SELECT 'b3', array_agg(d ORDER BY d.keys)
FROM exactonce.state_upsert('tap_stages', pg_temp.batch_events('b3')) AS d;
UPDATE run SET token = exactonce.map_stage('tap_stages', deltas, 'consumer_a', 30) WHERE batch = 'b3';

-- b4: staged and applied by consumer_b at position 5.
INSERT INTO run (batch, deltas)
SELECT 'b4', array_agg(d)
FROM exactonce.state_upsert('tap_stages', pg_temp.batch_events('b4')) AS d;
UPDATE run SET token = exactonce.map_stage('tap_stages', deltas, 'consumer_b', 5) WHERE batch = 'b4';

SELECT is(exactonce.reduce_apply('tap_stages', ARRAY[token]), 1, 'reduce_apply applies b4 alone')
FROM run WHERE batch = 'b4';

SELECT results_eq(
	$$SELECT run.batch, l.source, l.position, l.applied_at IS NOT NULL
	  FROM tap_stages.ledger AS l JOIN run USING (token) ORDER BY 1$$,
	$$VALUES ('b1', 'consumer_a', 10::bigint, true), ('b2', 'consumer_a', 20, true),
			 ('b3', 'consumer_a', 30, false), ('b4', 'consumer_b', 5, true),
			 ('b5', 'consumer_c', 1, true)$$,
	'ledger before release');

SELECT is((SELECT count(*) FROM tap_stages.ledger), 5::bigint, 'the ledger holds nothing else');

SELECT is(exactonce.release('tap_stages', 'consumer_a', 15), 1::bigint,
	'release(consumer_a, 15) forgets one token');

SELECT results_eq(
	$$SELECT run.batch FROM tap_stages.ledger AS l JOIN run USING (token) ORDER BY 1$$,
	$$VALUES ('b2'), ('b3'), ('b4'), ('b5')$$,
	'... the applied token of consumer_a at position 10 (b1)');

SELECT is(exactonce.release('tap_stages', 'consumer_a', 15), 0::bigint,
	'release(consumer_a, 15) again forgets nothing');

SELECT is(exactonce.release('tap_stages', 'consumer_a', 100), 1::bigint,
	'release(consumer_a, 100) forgets one more token');

SELECT results_eq(
	$$SELECT run.batch, l.applied_at IS NOT NULL FROM tap_stages.ledger AS l JOIN run USING (token)
	  ORDER BY 1$$,
	$$VALUES ('b3', false), ('b4', true), ('b5', true)$$,
	'... b2; the staged b3 and the tokens of other sources are kept');

SELECT is(exactonce.release('tap_stages', 'consumer_z', 1000), 0::bigint,
	'release of a source that staged nothing forgets nothing');

SELECT throws_ok(
	$$SELECT exactonce.release('tap_stages', 'queue', 1000)$$,
	'42939', NULL,
	'release refuses source ''queue''');

SELECT throws_ok(
	$$SELECT exactonce.map_stage('tap_stages', deltas, 'queue', 1) FROM run WHERE batch = 'b4'$$,
	'42939', NULL,
	'map_stage refuses source ''queue''');

SELECT is((SELECT count(*) FROM tap_stages.ledger), 3::bigint,
	'the refused calls changed nothing in the ledger');

-- A released token is forgotten: the consumer promised not to bring it back.
SELECT is((SELECT count(*) FROM tap_stages.ledger AS l JOIN run USING (token)
		   WHERE run.batch IN ('b1', 'b2')), 0::bigint,
	'the released tokens are gone from the ledger');

SELECT is(exactonce.reduce_apply('tap_stages'), 1, 'reduce_apply of all staged batches applies b3');

SELECT results_eq(
	$$SELECT level, d1, d2, total, keys FROM tap_stages.aggregates ORDER BY level, d1, d2$$,
	$$VALUES (0, NULL::text, NULL::text, 78::numeric, 7::bigint),
			 (1, 'a', NULL, 61, 4), (1, 'x', NULL, 17, 3),
			 (2, 'a', 'b', 21, 2), (2, 'a', 'c', 40, 2), (2, 'x', 'y', 10, 2), (2, 'x', 'z', 7, 1)$$,
	'final aggregates: every batch counted once');

SELECT results_eq(
	$$SELECT level, d1, d2, total, keys FROM tap_stages.aggregates ORDER BY level, d1, d2$$,
	$$SELECT 2 - (GROUPING(d1) + GROUPING(d2)), d1, d2, sum(value), count(*)
	  FROM tap_stages.state WHERE NOT deleted GROUP BY ROLLUP (d1, d2) ORDER BY 1, 2, 3$$,
	'final aggregates agree with the final state');

SELECT results_eq(
	$$SELECT ingested, applied + duplicates + stale + dead_lettered FROM exactonce.pipelines
	  WHERE name = 'tap_stages'$$,
	$$VALUES (13::bigint, 13::bigint)$$,
	'counters: 13 events ingested, all accounted for');

SELECT * FROM finish();
ROLLBACK;
