-- test/pgtap/random_grouping.sql
--
-- CUBE and explicit grouping sets, against an oracle computed from the
-- generated events alone (GROUP BY CUBE and GROUPING SETS over each key's
-- latest version), checked after every batch.
--
-- About 3,000 keys, each with 0..12 versions that move between cells and
-- are tombstones, about 10% sent twice, all shuffled, in eight chunks, into
-- a pipeline with grouping 'cube' over three dimensions, with a measure,
-- min/max and a distinct count, one with the grouping sets (book, desk),
-- (region), (), and one with the sets (book, desk, region), (desk), () and
-- min/max and a distinct count.
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(49);

SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_cube', ARRAY['book', 'desk', 'region'],
		measures => ARRAY['qty'], min_max => ARRAY['value', 'qty'], distinct_counts => ARRAY['cpty'],
		grouping_sets => 'cube')$$,
	'create_pipeline with grouping cube, min/max and a distinct count');
SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_sets', ARRAY['book', 'desk', 'region'],
		grouping_sets => '(book, desk), (region), ()')$$,
	'create_pipeline with grouping sets (book, desk), (region), ()');
SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_sets_all', ARRAY['book', 'desk', 'region'],
		min_max => ARRAY['value'], distinct_counts => ARRAY['cpty'],
		grouping_sets => '(book, desk, region), (desk), ()')$$,
	'create_pipeline with grouping sets of all dimensions, (desk), (), min/max and a distinct count');
SELECT results_eq($$SELECT name, grouping_sets FROM exactonce.pipelines WHERE name LIKE 'tap_%' ORDER BY name$$,
	$$VALUES ('tap_cube'::name, 'cube'), ('tap_sets'::name, '(book, desk), (region), ()'),
			 ('tap_sets_all'::name, '(book, desk, region), (desk), ()')$$,
	'exactonce.pipelines shows the groupings');

-- Views: one cell per row of the cube's (book, region), with its distinct
-- counts, behind a filter; and the grouping sets' (book, desk) cells summed
-- per book.
SELECT lives_ok(
	$$SELECT exactonce.create_view('tap_cube', 'book_region', ARRAY['book', 'region AS area'], $f$book <> 'b3'$f$)$$,
	'create_view over a grouping of the cube, with a filter');
SELECT lives_ok(
	$$SELECT exactonce.create_view('tap_sets', 'books', ARRAY['book'])$$,
	'create_view over the cells of a grouping set that has more dimensions');

DO $$ BEGIN PERFORM setseed(0.24); END $$;

CREATE TEMP TABLE distinct_events AS
SELECT format('k%s', k) AS key, (v * 10 + floor(random() * 10))::bigint AS version,
	   round((random() * 200 - 100)::numeric, 2) AS value,
	   (ARRAY['b1', 'b2', 'b3'])[1 + floor(random() * 3)::int] AS book,
	   (ARRAY['d1', 'd2', 'd3', 'd4'])[1 + floor(random() * 4)::int] AS desk,
	   (ARRAY['EMEA', 'APAC'])[1 + floor(random() * 2)::int] AS region,
	   CASE WHEN random() < 0.2 THEN NULL ELSE round((random() * 10)::numeric, 1) END AS qty,
	   CASE WHEN random() < 0.1 THEN NULL ELSE format('cp%s', floor(random() * 30)) END AS cpty,
	   random() < 0.1 AS deleted
FROM generate_series(1, 3000) AS k, generate_series(1, (k * 7919 % 13)) AS v;

CREATE TEMP TABLE produced AS
WITH copies AS (
	SELECT * FROM distinct_events
	UNION ALL
	SELECT * FROM distinct_events WHERE random() < 0.10
), ordered AS (
	SELECT c.*, row_number() OVER (ORDER BY random()) AS arrival FROM copies AS c
)
SELECT o.*, (1 + (o.arrival - 1) * 8 / (SELECT count(*) FROM ordered))::int AS chunk
FROM ordered AS o;

SELECT cmp_ok((SELECT count(*) FROM produced), '>=', 18000::bigint, 'generator: at least 18,000 events');
SELECT cmp_ok((SELECT count(*) FROM (SELECT key FROM distinct_events GROUP BY key
			   HAVING count(DISTINCT (book, desk, region)) > 1) AS m), '>', 1000::bigint,
	'generator: keys that move between cells');

CREATE FUNCTION pg_temp.latest(c int) RETURNS SETOF distinct_events LANGUAGE sql AS $$
	SELECT DISTINCT ON (key) key, version, value, book, desk, region, qty, cpty, deleted
	FROM produced WHERE chunk <= c ORDER BY key, version DESC
$$;

CREATE FUNCTION pg_temp.deliver_and_check()
RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
	FOR c IN 1..8 LOOP
		INSERT INTO tap_cube.ingest (key, version, value, book, desk, region, qty, cpty, deleted)
		SELECT key, version, value, book, desk, region, qty, cpty, deleted FROM produced WHERE chunk = c ORDER BY arrival;
		INSERT INTO tap_sets_all.ingest (key, version, value, book, desk, region, cpty, deleted)
		SELECT key, version, value, book, desk, region, cpty, deleted FROM produced WHERE chunk = c ORDER BY arrival;
		INSERT INTO tap_sets.ingest (key, version, value, book, desk, region, deleted)
		SELECT key, version, value, book, desk, region, deleted FROM produced WHERE chunk = c ORDER BY arrival;
		PERFORM exactonce.flush('tap_cube');
		PERFORM exactonce.flush('tap_sets');
		PERFORM exactonce.flush('tap_sets_all');
		RETURN NEXT is_empty(format(
			$q$WITH oracle AS (
				SELECT 3 - (GROUPING(book) + GROUPING(desk) + GROUPING(region)) AS level, book, desk, region,
					   sum(value) AS total, count(*) AS keys, coalesce(sum(qty), 0) AS qty_sum, count(qty) AS qty_count,
					   min(value), max(value), min(qty), max(qty), count(DISTINCT cpty)
				FROM pg_temp.latest(%1$s) WHERE NOT deleted GROUP BY CUBE (book, desk, region)),
			agg AS (SELECT level, book, desk, region, total, keys, qty_sum, qty_count, value_min, value_max,
						   qty_min, qty_max, cpty_distinct FROM tap_cube.aggregates)
			(SELECT * FROM agg EXCEPT ALL SELECT * FROM oracle)
			UNION ALL (SELECT * FROM oracle EXCEPT ALL SELECT * FROM agg)$q$, c),
			format('cube: after chunk %s, every cell equals the oracle', c));
		RETURN NEXT is_empty(format(
			$q$WITH oracle AS (
				SELECT 3 - (GROUPING(book) + GROUPING(desk) + GROUPING(region)) AS level, book, desk, region,
					   sum(value) AS total, count(*) AS keys
				FROM pg_temp.latest(%1$s) WHERE NOT deleted
				GROUP BY GROUPING SETS ((book, desk), (region), ())),
			agg AS (SELECT level, book, desk, region, total, keys FROM tap_sets.aggregates)
			(SELECT * FROM agg EXCEPT ALL SELECT * FROM oracle)
			UNION ALL (SELECT * FROM oracle EXCEPT ALL SELECT * FROM agg)$q$, c),
			format('grouping sets: after chunk %s, every cell equals the oracle', c));
		RETURN NEXT is_empty(format(
			$q$WITH oracle AS (
				SELECT 3 - (GROUPING(book) + GROUPING(desk) + GROUPING(region)) AS level, book, desk, region,
					   sum(value) AS total, count(*) AS keys, min(value), max(value), count(DISTINCT cpty)
				FROM pg_temp.latest(%1$s) WHERE NOT deleted
				GROUP BY GROUPING SETS ((book, desk, region), (desk), ())),
			agg AS (SELECT level, book, desk, region, total, keys, value_min, value_max, cpty_distinct
					FROM tap_sets_all.aggregates)
			(SELECT * FROM agg EXCEPT ALL SELECT * FROM oracle)
			UNION ALL (SELECT * FROM oracle EXCEPT ALL SELECT * FROM agg)$q$, c),
			format('grouping sets with min/max and a distinct count: after chunk %s, every cell equals the oracle', c));
		RETURN NEXT is_empty(format(
			$q$WITH oracle AS (
				SELECT book, region, sum(value) AS total, count(*) AS keys, coalesce(sum(qty), 0) AS qty_sum,
					   count(qty) AS qty_count, min(value), max(value), min(qty), max(qty), count(DISTINCT cpty)
				FROM pg_temp.latest(%1$s) WHERE NOT deleted AND book <> 'b3' GROUP BY book, region),
			v AS (SELECT book, area, total, keys, qty_sum, qty_count, value_min, value_max, qty_min, qty_max,
						 cpty_distinct FROM tap_cube.book_region)
			(SELECT * FROM v EXCEPT ALL SELECT * FROM oracle)
			UNION ALL (SELECT * FROM oracle EXCEPT ALL SELECT * FROM v)$q$, c),
			format('cube view: after chunk %s, every row equals the oracle', c));
		RETURN NEXT is_empty(format(
			$q$WITH oracle AS (
				SELECT book, sum(value) AS total, count(*) AS keys
				FROM pg_temp.latest(%1$s) WHERE NOT deleted GROUP BY book),
			v AS (SELECT book, total, keys FROM tap_sets.books)
			(SELECT * FROM v EXCEPT ALL SELECT * FROM oracle)
			UNION ALL (SELECT * FROM oracle EXCEPT ALL SELECT * FROM v)$q$, c),
			format('grouping sets view: after chunk %s, every row equals the oracle', c));
	END LOOP;
END
$$;

SELECT * FROM pg_temp.deliver_and_check();

SELECT is((SELECT count(*) FROM tap_cube.aggregates WHERE level = 1 AND book IS NULL AND desk IS NULL),
	2::bigint, 'cube: a cell per region alone, which a rollup does not have');

ROLLBACK;
