-- test/pgtap/random_measures.sql
--
-- Measures (sum, count, avg), min/max and distinct counts under retraction,
-- against an oracle computed from the generated events alone (never from
-- state), checked after every batch.
--
-- latest mode: about 2,000 keys, each with 0..14 versions that move between
-- cells, are tombstones (and come back), carry measure qty always and fee
-- often not (NULL), from small sets of values, so that a cell's min or max
-- is often shared by several keys and often retracted; and a counterparty
-- (cpty, sometimes NULL) from 40, counted distinct per cell, so that a
-- value leaving a cell often stays with another key and sometimes goes.  About 10% of the
-- events are sent twice; all arrive shuffled, in twelve chunks, each
-- flushed and checked against the oracle of the events delivered so far.
--
-- accumulate mode: readings with the same measures, every distinct (key,
-- version) counting once, checked the same way.
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(67);

SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_measures', ARRAY['book', 'desk'], 'latest',
		measures => ARRAY['qty', 'fee'], min_max => ARRAY['value', 'fee'],
		distinct_counts => ARRAY['cpty'])$$,
	'create_pipeline with measures qty, fee, min_max value, fee and distinct_counts cpty (latest)');
SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_measures_acc', ARRAY['book', 'desk'], 'accumulate',
		measures => ARRAY['qty', 'fee'], min_max => ARRAY['value', 'qty'],
		distinct_counts => ARRAY['cpty'])$$,
	'create_pipeline with measures qty, fee, min_max value, qty and distinct_counts cpty (accumulate)');

DO $$ BEGIN PERFORM setseed(0.16); END $$;

-- Two named views, each fed by its pipeline's one drain: a filter on a
-- dimension they do not group by, and a computed key.
SELECT lives_ok(
	$$SELECT exactonce.create_view('tap_measures', 'desks_but_b1', ARRAY['desk'], $f$book <> 'b1'$f$)$$,
	'create_view with a filter on a dimension it does not group by');
SELECT lives_ok(
	$$SELECT exactonce.create_view('tap_measures_acc', 'sides',
		ARRAY[$k$CASE WHEN desk IN ('d1', 'd2') THEN 'front' ELSE 'back' END AS side$k$])$$,
	'create_view with a computed key');

CREATE TEMP TABLE distinct_events AS
SELECT format('trade-%s', k) AS key,
	   (v * 10 + floor(random() * 10))::bigint AS version,
	   (floor(random() * 40) - 20)::numeric AS value,
	   (ARRAY['b1', 'b2', 'b3'])[1 + floor(random() * 3)::int] AS book,
	   (ARRAY['d1', 'd2', 'd3', 'd4'])[1 + floor(random() * 4)::int] AS desk,
	   round((random() * 10)::numeric, 1) AS qty,
	   CASE WHEN random() < 0.3 THEN NULL ELSE (floor(random() * 15))::numeric / 4 END AS fee,
	   CASE WHEN random() < 0.1 THEN NULL ELSE format('cp%s', floor(random() * 40)) END AS cpty,
	   random() < 0.12 AS deleted
FROM generate_series(1, 2000) AS k,
	 generate_series(1, (k * 7919 % 15)) AS v;

CREATE TEMP TABLE produced AS
WITH copies AS (
	SELECT * FROM distinct_events
	UNION ALL
	SELECT * FROM distinct_events WHERE random() < 0.10
), ordered AS (
	SELECT c.*, row_number() OVER (ORDER BY random()) AS arrival FROM copies AS c
)
SELECT o.*, (1 + (o.arrival - 1) * 12 / (SELECT count(*) FROM ordered))::int AS chunk
FROM ordered AS o;

SELECT cmp_ok((SELECT count(*) FROM produced), '>=', 14000::bigint,
	'generator: at least 14,000 events');
SELECT cmp_ok((SELECT count(*) FROM produced WHERE fee IS NULL), '>', 3000::bigint,
	'generator: many events without a fee');
SELECT cmp_ok((SELECT count(*) FROM distinct_events a JOIN distinct_events b
			   ON b.key = a.key AND b.version > a.version AND b.cpty IS DISTINCT FROM a.cpty), '>', 5000::bigint,
	'generator: newer versions change the counterparty');
SELECT cmp_ok((SELECT count(*) FROM (SELECT key FROM distinct_events GROUP BY key
			   HAVING count(DISTINCT (book, desk)) > 1) AS m), '>', 1000::bigint,
	'generator: keys that move between cells');

-- The oracle after chunk c: each key's highest version delivered so far.
CREATE FUNCTION pg_temp.oracle_latest(c int)
RETURNS TABLE (level int, book text, desk text, total numeric, keys bigint,
			   qty_sum numeric, qty_count bigint, qty_avg numeric,
			   fee_sum numeric, fee_count bigint, fee_avg numeric,
			   value_min numeric, value_max numeric, fee_min numeric, fee_max numeric,
			   cpty_distinct bigint)
LANGUAGE sql AS $$
	SELECT 2 - (GROUPING(book) + GROUPING(desk)), book, desk, sum(value), count(*),
		   coalesce(sum(qty), 0), count(qty), trim_scale(sum(qty)) / nullif(count(qty), 0),
		   coalesce(sum(fee), 0), count(fee), trim_scale(sum(fee)) / nullif(count(fee), 0),
		   min(value), max(value), min(fee), max(fee), count(DISTINCT cpty)
	FROM (SELECT DISTINCT ON (key) * FROM produced WHERE chunk <= c
		  ORDER BY key, version DESC) AS latest
	WHERE NOT deleted
	GROUP BY ROLLUP (book, desk)
$$;

-- The oracle after chunk c in accumulate mode: every distinct (key,
-- version) once.
CREATE FUNCTION pg_temp.oracle_accumulate(c int)
RETURNS TABLE (level int, book text, desk text, total numeric, keys bigint,
			   qty_sum numeric, qty_count bigint, qty_avg numeric,
			   fee_sum numeric, fee_count bigint, fee_avg numeric,
			   value_min numeric, value_max numeric, qty_min numeric, qty_max numeric,
			   cpty_distinct bigint)
LANGUAGE sql AS $$
	SELECT 2 - (GROUPING(book) + GROUPING(desk)), book, desk, sum(value), count(*),
		   coalesce(sum(qty), 0), count(qty), trim_scale(sum(qty)) / nullif(count(qty), 0),
		   coalesce(sum(fee), 0), count(fee), trim_scale(sum(fee)) / nullif(count(fee), 0),
		   min(value), max(value), min(qty), max(qty), count(DISTINCT cpty)
	FROM (SELECT DISTINCT key, version, value, book, desk, qty, fee, cpty FROM produced
		  WHERE chunk <= c AND NOT deleted) AS readings
	GROUP BY ROLLUP (book, desk)
$$;

-- Deliver chunk after chunk; after each, flush and compare both ways.
CREATE FUNCTION pg_temp.deliver_and_check()
RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
	FOR c IN 1..12 LOOP
		INSERT INTO tap_measures.ingest (key, version, value, book, desk, qty, fee, cpty, deleted)
		SELECT key, version, value, book, desk, qty, fee, cpty, deleted
		FROM produced WHERE chunk = c ORDER BY arrival;
		INSERT INTO tap_measures_acc.ingest (key, version, value, book, desk, qty, fee, cpty)
		SELECT key, version, value, book, desk, qty, fee, cpty
		FROM produced WHERE chunk = c AND NOT deleted ORDER BY arrival;
		PERFORM exactonce.flush('tap_measures');
		PERFORM exactonce.flush('tap_measures_acc');
		RETURN NEXT is_empty(format(
			$q$(SELECT level, book, desk, total, keys, qty_sum, qty_count, qty_avg,
					   fee_sum, fee_count, fee_avg, value_min, value_max, fee_min, fee_max, cpty_distinct
				FROM tap_measures.aggregates
				EXCEPT ALL SELECT * FROM pg_temp.oracle_latest(%1$s))
			   UNION ALL
			   (SELECT * FROM pg_temp.oracle_latest(%1$s)
				EXCEPT ALL
				SELECT level, book, desk, total, keys, qty_sum, qty_count, qty_avg,
					   fee_sum, fee_count, fee_avg, value_min, value_max, fee_min, fee_max, cpty_distinct
				FROM tap_measures.aggregates)$q$, c),
			format('latest: after chunk %s, every measure, min and max equals the oracle', c));
		RETURN NEXT is_empty(format(
			$q$(SELECT level, book, desk, total, keys, qty_sum, qty_count, qty_avg,
					   fee_sum, fee_count, fee_avg, value_min, value_max, qty_min, qty_max, cpty_distinct
				FROM tap_measures_acc.aggregates
				EXCEPT ALL SELECT * FROM pg_temp.oracle_accumulate(%1$s))
			   UNION ALL
			   (SELECT * FROM pg_temp.oracle_accumulate(%1$s)
				EXCEPT ALL
				SELECT level, book, desk, total, keys, qty_sum, qty_count, qty_avg,
					   fee_sum, fee_count, fee_avg, value_min, value_max, qty_min, qty_max, cpty_distinct
				FROM tap_measures_acc.aggregates)$q$, c),
			format('accumulate: after chunk %s, every measure, min and max equals the oracle', c));
		RETURN NEXT is_empty(format(
			$q$WITH oracle AS (
				SELECT desk, sum(value) AS total, count(*) AS keys, coalesce(sum(qty), 0) AS qty_sum,
					   count(qty) AS qty_count, trim_scale(sum(qty)) / nullif(count(qty), 0) AS qty_avg,
					   coalesce(sum(fee), 0) AS fee_sum, count(fee) AS fee_count,
					   trim_scale(sum(fee)) / nullif(count(fee), 0) AS fee_avg,
					   min(value), max(value), min(fee), max(fee)
				FROM (SELECT DISTINCT ON (key) * FROM produced WHERE chunk <= %1$s
					  ORDER BY key, version DESC) AS latest
				WHERE NOT deleted AND book <> 'b1' GROUP BY desk),
			v AS (SELECT desk, total, keys, qty_sum, qty_count, qty_avg, fee_sum, fee_count, fee_avg,
						 value_min, value_max, fee_min, fee_max FROM tap_measures.desks_but_b1)
			(SELECT * FROM v EXCEPT ALL SELECT * FROM oracle)
			UNION ALL (SELECT * FROM oracle EXCEPT ALL SELECT * FROM v)$q$, c),
			format('latest: after chunk %s, the filtered view equals the oracle', c));
		RETURN NEXT is_empty(format(
			$q$WITH oracle AS (
				SELECT CASE WHEN desk IN ('d1', 'd2') THEN 'front' ELSE 'back' END AS side,
					   sum(value) AS total, count(*) AS keys, coalesce(sum(qty), 0) AS qty_sum,
					   count(qty) AS qty_count, coalesce(sum(fee), 0) AS fee_sum, count(fee) AS fee_count,
					   trim_scale(sum(fee)) / nullif(count(fee), 0) AS fee_avg,
					   min(value), max(value), min(qty), max(qty)
				FROM (SELECT DISTINCT key, version, value, book, desk, qty, fee, cpty FROM produced
					  WHERE chunk <= %1$s AND NOT deleted) AS readings
				GROUP BY 1),
			v AS (SELECT side, total, keys, qty_sum, qty_count, fee_sum, fee_count, fee_avg,
						 value_min, value_max, qty_min, qty_max FROM tap_measures_acc.sides)
			(SELECT * FROM v EXCEPT ALL SELECT * FROM oracle)
			UNION ALL (SELECT * FROM oracle EXCEPT ALL SELECT * FROM v)$q$, c),
			format('accumulate: after chunk %s, the view of a computed key equals the oracle', c));
	END LOOP;
END
$$;

SELECT * FROM pg_temp.deliver_and_check();

-- a leaf's min and max are read anew from state through state_cell, which
-- the accumulate pipeline, never taking a value out, does without
SELECT is((SELECT count(*) FROM pg_indexes WHERE schemaname = 'tap_measures' AND indexname = 'state_cell'),
	1::bigint, 'latest: index state_cell on the dimensions of state');
SELECT is((SELECT count(*) FROM pg_indexes WHERE schemaname = 'tap_measures_acc' AND indexname = 'state_cell'),
	0::bigint, 'accumulate: no index state_cell');
-- distincts keeps no value without contributions; a leaf's n counts its
-- keys with the value, a cell above's the children that have it
SELECT is((SELECT count(*) FROM tap_measures.distincts WHERE n <= 0), 0::bigint,
	'distincts: no value without contributions is kept');
SELECT is((SELECT sum(n)::bigint FROM tap_measures.distincts WHERE cell = '{}'),
	(SELECT count(DISTINCT (book, cpty)) FROM (SELECT DISTINCT ON (key) * FROM produced
	 ORDER BY key, version DESC) l WHERE NOT deleted AND cpty IS NOT NULL),
	'distincts: each value of the grand total counts the books that have it');
SELECT is((SELECT sum(n)::bigint FROM tap_measures.distincts WHERE cardinality(cell) = 2),
	(SELECT count(cpty) FROM (SELECT DISTINCT ON (key) * FROM produced
	 ORDER BY key, version DESC) l WHERE NOT deleted),
	'distincts: each value of a leaf counts its live keys that have it');

SELECT results_eq(
	$$SELECT ingested, applied + duplicates + stale + dead_lettered FROM exactonce.pipelines
	  WHERE name = 'tap_measures'$$,
	$$VALUES ((SELECT count(*) FROM produced), (SELECT count(*) FROM produced))$$,
	'accounting: ingested = applied + duplicates + stale + dead_lettered');

-- A conflicting duplicate that differs only in a measure is a dead letter.
INSERT INTO tap_measures.ingest (key, version, value, book, desk, qty, fee, cpty, deleted)
SELECT key, version, value, book, desk, qty + 1, fee, cpty, deleted
FROM (SELECT DISTINCT ON (key) * FROM produced ORDER BY key, version DESC) AS l
LIMIT 5;
SELECT is(exactonce.flush('tap_measures'), 5::bigint, 'five conflicting duplicates taken');
SELECT is((SELECT count(*) FROM tap_measures.dead_letters WHERE reason LIKE 'conflicting duplicate%'),
	5::bigint, 'a version differing only in a measure is a conflicting duplicate');
SELECT is_empty(
	$$SELECT level, book, desk, total, keys, qty_sum, qty_count, qty_avg,
			 fee_sum, fee_count, fee_avg, value_min, value_max, fee_min, fee_max, cpty_distinct
	  FROM tap_measures.aggregates EXCEPT ALL SELECT * FROM pg_temp.oracle_latest(12)$$,
	'conflicting duplicates change nothing');

-- A measure that cannot be summed is a dead letter with a reason.
INSERT INTO tap_measures.ingest (key, version, value, book, desk, qty, fee)
VALUES ('nan-fee', 1, 1, 'b1', 'd1', 1, 'NaN'), ('inf-qty', 1, 1, 'b1', 'd1', 'Infinity', 1);
SELECT is(exactonce.flush('tap_measures'), 2::bigint, 'two bad measures taken');
SELECT results_eq(
	$$SELECT key COLLATE "default", reason FROM tap_measures.dead_letters WHERE key IN ('nan-fee', 'inf-qty') ORDER BY key$$,
	$$VALUES ('inf-qty', 'measure qty is infinite'), ('nan-fee', 'measure fee is NaN')$$,
	'a NaN or infinite measure goes to dead_letters with a reason');

ROLLBACK;
