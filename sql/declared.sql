-- Pipelines declared as queries (create_pipeline_as): view <name>.result
-- always equals the query run over the de-duplicated stream, the latest
-- version of each live key in latest mode, each distinct reading in
-- accumulate mode.  The oracle is the query itself, run by PostgreSQL over
-- the events as they were sent, after every chunk of events with
-- duplicates, stale versions, moves and tombstones.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;

-- chunk c of the events: 300 of 97 keys, versions growing with c, cells
-- that move with the version, a measure missing on a third, a tombstone on
-- a thirteenth (none with tombstones => false), an hour apart by chunk;
-- each numeric column of one scale, as a numeric(p, s) column has (avg's
-- digits follow the scale, see docs/pipelines.md)
CREATE FUNCTION chunk(c integer, tombstones boolean) RETURNS TABLE
	(key text, version bigint, value numeric, risk_type text, region text, desk text,
	 qty numeric, cp text, book text, deleted boolean, event_time timestamptz)
LANGUAGE sql AS $$
	SELECT 'k' || (i % 97), c * 1000 + i, round(((i * 37 + c * 11) % 1000) / 100.0 - 2, 2),
		(ARRAY['Delta', 'Vega', 'Gamma'])[1 + (i + c) % 3],
		(ARRAY['AMER', 'EMEA', 'APAC'])[1 + (i * 7 + c) % 3],
		(ARRAY['FX', 'Rates', 'Credit', 'Equity'])[1 + (i + 2 * c) % 4],
		CASE WHEN i % 3 = 0 THEN NULL ELSE round((i % 50) / 10.0, 1) END,
		'cp' || (i % 7), CASE WHEN (i + c) % 5 = 0 THEN 'test' ELSE 'live' END,
		tombstones AND i % 13 = 0,
		'2026-01-01 00:00+00'::timestamptz + (c * 60 + i % 60) * interval '1 minute'
	FROM generate_series(1, 300) i $$;

-- every event sent, to any pipeline
CREATE TABLE sent AS SELECT * FROM chunk(0, true) WHERE false;

-- send(pipeline, columns, c, tombstones): chunk c into the pipeline's queue
-- twice (a resend), then chunk c - 1 again (stale versions in latest mode,
-- duplicates in accumulate mode), and flush
CREATE FUNCTION send(pipeline text, cols text, c integer, tombstones boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. 2 LOOP
		EXECUTE format('INSERT INTO %I.ingest (key, version, value, %s, deleted, event_time)
			SELECT key, version, value, %s, deleted, event_time FROM chunk(%s, %L)',
			pipeline, cols, cols, c, tombstones);
		INSERT INTO sent SELECT * FROM chunk(c, tombstones);
	END LOOP;
	IF c > 1 THEN
		EXECUTE format('INSERT INTO %I.ingest (key, version, value, %s, deleted, event_time)
			SELECT key, version, value, %s, deleted, event_time FROM chunk(%s, %L)',
			pipeline, cols, cols, c - 1, tombstones);
		INSERT INTO sent SELECT * FROM chunk(c - 1, tombstones);
	END IF;
	PERFORM exactonce.flush(pipeline);
END $$;

-- the de-duplicated streams the queries run over
CREATE VIEW latest_stream AS
	SELECT * FROM (SELECT DISTINCT ON (key) * FROM sent ORDER BY key, version DESC) s
	WHERE NOT deleted;
CREATE VIEW readings AS SELECT DISTINCT ON (key, version) * FROM sent ORDER BY key, version;

CREATE FUNCTION pg_temp.stage_err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'taken';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
CREATE FUNCTION pg_temp.verr(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM exactonce.create_view_as('r1', 'bad', q);
	RETURN 'created';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- 1. latest mode, a rollup with every aggregate kept
TRUNCATE sent;
CREATE TEMP VIEW stream AS SELECT * FROM latest_stream;
\set q 'SELECT risk_type, region, desk, sum(value) AS total, count(*) AS keys, avg(value) AS avg_value, min(value), max(value) AS max_value, sum(qty) AS qty, count(qty) AS qty_n, avg(qty) AS avg_qty, min(qty) AS min_qty, max(qty) AS max_qty, count(DISTINCT cp) AS counterparties FROM stream GROUP BY ROLLUP (risk_type, region, desk)'
SELECT exactonce.create_pipeline_as('r1', :'q');
SELECT name, mode, dimensions, measures, min_max, distinct_counts, grouping_sets
FROM exactonce.pipelines WHERE name = 'r1';
-- each column of the result says how it is computed
SELECT a.attname, col_description(a.attrelid, a.attnum)
FROM pg_attribute a WHERE a.attrelid = 'r1.result'::regclass AND a.attnum > 0 ORDER BY a.attnum;
\d r1.result
DO $$
BEGIN
	FOR c IN 1 .. 4 LOOP
		PERFORM send('r1', 'risk_type, region, desk, qty, cp', c, true);
	END LOOP;
END $$;
SELECT count(*) AS rows, count(*) FILTER (WHERE risk_type IS NULL) AS grand_total FROM r1.result;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r1.result EXCEPT ALL :q)
	UNION ALL (:q EXCEPT ALL SELECT * FROM r1.result)) d;
-- more chunks: still the query
SELECT send('r1', 'risk_type, region, desk, qty, cp', 5, true);
SELECT count(*) AS differing FROM (
	(SELECT * FROM r1.result EXCEPT ALL :q)
	UNION ALL (:q EXCEPT ALL SELECT * FROM r1.result)) d;
-- a view of the same pipeline declared as a query: a plain GROUP BY of its
-- dimensions, a WHERE over them, aggregates it keeps
\set qv 'SELECT desk, sum(value) AS total, count(*) AS n, avg(qty) AS avg_qty, max(value) AS top, min(qty) FROM stream WHERE region <> ''APAC'' GROUP BY desk'
SELECT exactonce.create_view_as('r1', 'desks', :'qv');
SELECT views FROM exactonce.pipelines WHERE name = 'r1';
SELECT count(*) AS differing FROM (
	(SELECT * FROM r1.desks EXCEPT ALL :qv) UNION ALL (:qv EXCEPT ALL SELECT * FROM r1.desks)) d;
SELECT send('r1', 'risk_type, region, desk, qty, cp', 6, true);
SELECT count(*) AS differing FROM (
	(SELECT * FROM r1.desks EXCEPT ALL :qv) UNION ALL (:qv EXCEPT ALL SELECT * FROM r1.desks)) d;
SELECT pg_temp.verr(q) FROM unnest(ARRAY[
	'SELECT desk, count(DISTINCT cp) FROM stream GROUP BY desk',
	'SELECT desk, count(*) FROM stream GROUP BY ROLLUP (desk)',
	'SELECT book, count(*) FROM stream GROUP BY book',
	'SELECT desk, sum(fee) FROM stream GROUP BY desk',
	'SELECT desk, count(*) FROM stream WHERE qty > 1 GROUP BY desk',
	'SELECT desk, count(*) FILTER (WHERE value > 0) FROM stream GROUP BY desk',
	'SELECT desk, count(*) FROM stream WHERE book = ''x'' GROUP BY desk'
]) q;
-- every key dropped: the query over no events still has its grand total row
TRUNCATE sent;
INSERT INTO r1.ingest (key, version, value, risk_type, region, desk, deleted)
	SELECT 'k' || i, 1000000, 0, 'Delta', 'AMER', 'FX', true FROM generate_series(0, 96) i;
SELECT exactonce.flush('r1');
SELECT * FROM r1.result;
:q;
DROP VIEW stream;

-- 2. a cube, 3. grouping sets with the empty set, 4. a plain GROUP BY
TRUNCATE sent;
CREATE TEMP VIEW stream AS SELECT * FROM latest_stream;
\set q2 'SELECT region, desk, sum(value), count(*) AS n FROM stream GROUP BY CUBE (region, desk)'
\set q3 'SELECT risk_type, desk, max(value) AS top, sum(qty) AS qty FROM stream GROUP BY GROUPING SETS ((risk_type, desk), (desk), ())'
\set q4 'SELECT s.region, count(*) AS n, min(s.qty) AS least FROM stream s GROUP BY s.region'
SELECT exactonce.create_pipeline_as('r2', :'q2', shards => 3);
SELECT exactonce.create_pipeline_as('r3', :'q3');
SELECT exactonce.create_pipeline_as('r4', :'q4');
SELECT name, shards, dimensions, grouping_sets FROM exactonce.pipelines WHERE name IN ('r2', 'r3', 'r4') ORDER BY 1;
DO $$
BEGIN
	FOR c IN 1 .. 3 LOOP
		PERFORM send('r2', 'region, desk', c, true);
		PERFORM send('r3', 'risk_type, desk, qty', c, true);
		PERFORM send('r4', 'region, qty', c, true);
	END LOOP;
END $$;
-- the three pipelines were sent the same events three times over, which
-- the de-duplicated stream absorbs
SELECT count(*) AS differing FROM (
	(SELECT * FROM r2.result EXCEPT ALL :q2) UNION ALL (:q2 EXCEPT ALL SELECT * FROM r2.result)) d;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r3.result EXCEPT ALL :q3) UNION ALL (:q3 EXCEPT ALL SELECT * FROM r3.result)) d;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r4.result EXCEPT ALL :q4) UNION ALL (:q4 EXCEPT ALL SELECT * FROM r4.result)) d;
SELECT count(*) AS rows FROM r2.result;
DROP VIEW stream;

-- 5. accumulate mode, hourly windows of event time: each distinct reading
TRUNCATE sent;
CREATE TEMP VIEW stream AS SELECT * FROM readings;
\set q5 'SELECT date_bin(''1 hour'', event_time, ''1970-01-01 00:00+00'') AS hour, region, sum(value), count(*) AS readings, max(value) FROM stream GROUP BY ROLLUP (hour, region)'
SELECT exactonce.create_pipeline_as('r5', :'q5', mode => 'accumulate', allowed_lateness => '36500 days');
SELECT name, mode, dimensions, window_width, grouping_sets FROM exactonce.pipelines WHERE name = 'r5';
DO $$
BEGIN
	FOR c IN 1 .. 4 LOOP
		PERFORM send('r5', 'region', c, false);
	END LOOP;
END $$;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r5.result EXCEPT ALL :q5) UNION ALL (:q5 EXCEPT ALL SELECT * FROM r5.result)) d;
SELECT count(*) AS windows FROM r5.result WHERE region IS NULL AND hour IS NOT NULL;
-- in accumulate mode only what the result shows may change: state keeps no
-- event to recompute other cells from
CREATE FUNCTION pg_temp.aerr(q text, p text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM exactonce.alter_pipeline_as(p, q);
	RETURN 'altered';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
\set q5b 'SELECT date_bin(''1 hour'', event_time, ''1970-01-01 00:00+00'') AS hour, region, count(*) AS readings, min(value) FROM stream GROUP BY ROLLUP (hour, region)'
SELECT exactonce.alter_pipeline_as('r5', :'q5b');
SELECT send('r5', 'region', 5, false);
SELECT count(*) AS differing FROM (
	(SELECT * FROM r5.result EXCEPT ALL :q5b) UNION ALL (:q5b EXCEPT ALL SELECT * FROM r5.result)) d;
SELECT pg_temp.aerr(q, 'r5') FROM unnest(ARRAY[
	'SELECT date_bin(''1 hour'', event_time, ''1970-01-01 00:00+00'') AS hour, count(*) FROM stream GROUP BY ROLLUP (hour)',
	'SELECT date_bin(''2 hours'', event_time, ''1970-01-01 00:00+00'') AS hour, region, count(*) FROM stream GROUP BY ROLLUP (hour, region)',
	'SELECT date_bin(''1 hour'', event_time, ''1970-01-01 00:00+00'') AS hour, region, sum(qty) FROM stream GROUP BY ROLLUP (hour, region)'
]) q;
DROP VIEW stream;

-- 6. latest mode with a WHERE over columns kept and one it alone names:
-- a key whose latest version the WHERE leaves out is out of the result
TRUNCATE sent;
CREATE TEMP VIEW stream AS SELECT * FROM latest_stream;
\set q6 'SELECT region, desk, sum(value) AS total, count(*) AS n, max(qty) AS top FROM stream WHERE book <> ''test'' AND value > 0 GROUP BY ROLLUP (region, desk)'
SELECT exactonce.create_pipeline_as('r6', :'q6');
SELECT attname, format_type(atttypid, atttypmod), attgenerated FROM pg_attribute
WHERE attrelid = 'r6.ingest'::regclass AND attname IN ('book', 'exactonce_where') ORDER BY attnum;
DO $$
BEGIN
	FOR c IN 1 .. 4 LOOP
		PERFORM send('r6', 'region, desk, qty, book', c, true);
	END LOOP;
END $$;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r6.result EXCEPT ALL :q6) UNION ALL (:q6 EXCEPT ALL SELECT * FROM r6.result)) d;
-- events that would not pass the queue's INSERT whole are refused, not
-- counted wrong: state_upsert's arrays skip the queue, and ingest() does
-- not send book, which the WHERE reads; a caller's exactonce_where is
-- never taken for the queue's
SELECT pg_temp.stage_err($$SELECT count(*) FROM exactonce.state_upsert('r6',
	ARRAY[(SELECT r FROM (SELECT 'z1' AS key, 1::bigint AS version, 5.00 AS value,
		'AMER' AS region, 'FX' AS desk, 'live' AS book) r)])$$);
SELECT pg_temp.stage_err($$SELECT exactonce.ingest('r6', 'src',
	ARRAY[(SELECT r FROM (SELECT 'z1' AS key, 1::bigint AS version, 5.00 AS value,
		'AMER' AS region, 'FX' AS desk, 'live' AS book) r)], ARRAY[1::bigint])$$);
SELECT exactonce.ingest('r1', 'src', ARRAY[(SELECT r FROM (SELECT 'z1' AS key,
	1::bigint AS version, 5.00 AS value, 'Delta' AS risk_type, 'AMER' AS region, 'FX' AS desk,
	false AS exactonce_where) r)], ARRAY[1::bigint]) AS ingested;
SELECT exactonce.flush('r1');
SELECT keys FROM r1.result WHERE risk_type = 'Delta' AND region = 'AMER' AND desk = 'FX';
-- the WHERE left keys out, and those count as applied, not lost
SELECT (SELECT count(*) FROM latest_stream) > (SELECT n FROM r6.result WHERE region IS NULL) AS some_left_out,
	ingested = applied + duplicates + stale + dead_lettered AS accounted
FROM exactonce.pipelines WHERE name = 'r6';
DROP VIEW stream;

-- 7. alter_pipeline_as: a running pipeline declared anew, the query over
-- every event sent before and after each change
TRUNCATE sent;
CREATE TEMP VIEW stream AS SELECT * FROM latest_stream;
CREATE FUNCTION pg_temp.differing(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
BEGIN
	EXECUTE format('SELECT count(*) FROM ((SELECT * FROM r7.result EXCEPT ALL %s)
		UNION ALL (%s EXCEPT ALL SELECT * FROM r7.result)) d', q, q) INTO n;
	RETURN n;
END $$;
\set q7a 'SELECT risk_type, region, desk, sum(value) AS total, count(*) AS n, sum(qty) AS qty, count(DISTINCT cp) AS cps FROM stream GROUP BY ROLLUP (risk_type, region, desk)'
SELECT exactonce.create_pipeline_as('r7', :'q7a');
SELECT send('r7', 'risk_type, region, desk, qty, cp', c, true) FROM generate_series(1, 2) c;
SELECT pg_temp.differing(:'q7a');
-- other grouping sets (the cells of all dimensions stay, hidden, for the
-- distinct counts), min and max added: recomputed from state
-- (the view result is made anew each time: the privileges granted on it
-- stay, and what would be dropped with it is refused)
CREATE ROLE regress_r7_reader;
GRANT SELECT ON r7.result TO regress_r7_reader;
-- and so do its options
ALTER VIEW r7.result SET (security_barrier = true);
\set q7b 'SELECT region, desk, min(value), max(qty) AS top_qty, avg(qty), count(DISTINCT cp) AS cps, count(*) FROM stream GROUP BY GROUPING SETS ((region), (desk), ())'
SELECT exactonce.alter_pipeline_as('r7', :'q7b') > 0 AS recomputed;
SELECT has_table_privilege('regress_r7_reader', 'r7.result', 'SELECT') AS still_granted;
SELECT reloptions FROM pg_class WHERE oid = 'r7.result'::regclass;
SELECT min_max, grouping_sets, query = :'q7b' AS shows_query FROM exactonce.pipelines WHERE name = 'r7';
SELECT pg_temp.differing(:'q7b');
SELECT send('r7', 'risk_type, region, desk, qty, cp', 3, true);
SELECT pg_temp.differing(:'q7b');
-- a WHERE added over columns state keeps: the keys it leaves out become
-- tombstones, and the queue computes it for events to come
\set q7c 'SELECT region, desk, sum(value) AS total, max(value), count(*) AS n FROM stream WHERE value > 0 GROUP BY CUBE (region, desk)'
CREATE VIEW r7_top AS SELECT * FROM r7.result;
SELECT exactonce.alter_pipeline_as('r7', :'q7c') > 0 AS recomputed;
DROP VIEW r7_top;
GRANT SELECT (region) ON r7.result TO regress_r7_reader;
SELECT exactonce.alter_pipeline_as('r7', :'q7c') > 0 AS recomputed;
REVOKE SELECT (region) ON r7.result FROM regress_r7_reader;
SELECT exactonce.alter_pipeline_as('r7', :'q7c') > 0 AS recomputed;
SELECT has_table_privilege('regress_r7_reader', 'r7.result', 'SELECT') AS still_granted;
REVOKE SELECT ON r7.result FROM regress_r7_reader;
DROP ROLE regress_r7_reader;
SELECT pg_temp.differing(:'q7c');
SELECT send('r7', 'risk_type, region, desk, qty, cp', 4, true);
SELECT pg_temp.differing(:'q7c');
SELECT attname FROM pg_attribute WHERE attrelid = 'r7.aggregates'::regclass AND attname LIKE '%\_m%' ORDER BY 1;
-- narrowed: the old WHERE AND more
\set q7d 'SELECT risk_type, region, sum(qty) AS qty, count(*) AS n FROM stream WHERE value > 0 AND region <> ''APAC'' AND (qty IS NULL OR qty < 4) GROUP BY ROLLUP (risk_type, region)'
SELECT exactonce.alter_pipeline_as('r7', :'q7d') > 0 AS recomputed;
SELECT pg_temp.differing(:'q7d');
SELECT send('r7', 'risk_type, region, desk, qty, cp', 5, true);
SELECT pg_temp.differing(:'q7d');
SELECT count(*) FILTER (WHERE NOT ok) AS failed_checks FROM exactonce.verify('r7');
-- what state does not keep is refused, and the pipeline is left as it was
SELECT exactonce.create_view_as('r7', 'regions', 'SELECT region, count(*) AS n FROM stream WHERE region <> ''APAC'' GROUP BY region');
SELECT pg_temp.aerr(q, 'r7') FROM unnest(ARRAY[
	'SELECT region, count(*) FROM stream GROUP BY region',
	'SELECT risk_type, region, count(*) FROM stream GROUP BY ROLLUP (risk_type, region)',
	'SELECT region, count(*) FROM stream WHERE value > 1 AND region <> ''APAC'' GROUP BY ROLLUP (risk_type, region)',
	'SELECT risk_type, region, count(*) FROM stream WHERE value > 0 AND region <> ''APAC'' AND (qty IS NULL OR qty < 4) AND book <> ''test'' GROUP BY ROLLUP (risk_type, region)',
	'SELECT risk_type, region, sum(fee) FROM stream WHERE value > 0 AND region <> ''APAC'' AND (qty IS NULL OR qty < 4) GROUP BY ROLLUP (risk_type, region)',
	'SELECT book, count(*) FROM stream WHERE value > 0 AND region <> ''APAC'' AND (qty IS NULL OR qty < 4) GROUP BY book',
	'SELECT risk_type, count(DISTINCT book) FROM stream WHERE value > 0 AND region <> ''APAC'' AND (qty IS NULL OR qty < 4) GROUP BY risk_type',
	'SELECT risk_type, count(*) FROM stream WHERE value > 0 AND region <> ''APAC'' AND (qty IS NULL OR qty < 4) GROUP BY risk_type'
]) q;
SELECT pg_temp.differing(:'q7d');
DROP VIEW stream;

-- 8. FILTER, expressions as keys and inside aggregates: columns the queue
-- computes from each event; in latest mode and in accumulate mode
TRUNCATE sent;
CREATE TEMP VIEW stream AS SELECT * FROM latest_stream;
\set q8 'SELECT lower(region) AS reg, desk, sum(value) AS total, count(*) FILTER (WHERE value > 1) AS big, sum(value) FILTER (WHERE book <> ''test'') AS live, max(qty * 2) AS top2, avg(qty) FILTER (WHERE value > 0) AS avg_qty, count(DISTINCT cp) FILTER (WHERE value > 0) AS cps FROM stream GROUP BY ROLLUP (lower(region), desk)'
SELECT exactonce.create_pipeline_as('r8', :'q8');
SELECT attname, attgenerated FROM pg_attribute WHERE attrelid = 'r8.ingest'::regclass AND attname LIKE 'exactonce\_%' ORDER BY attnum;
SELECT send('r8', 'region, desk, qty, cp, book', c, true) FROM generate_series(1, 3) c;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r8.result EXCEPT ALL :q8) UNION ALL (:q8 EXCEPT ALL SELECT * FROM r8.result)) d;
-- altered: the same computed key and FILTER under other grouping sets are
-- kept; another FILTER is not
\set q8b 'SELECT lower(region) AS reg, count(*) FILTER (WHERE value > 1) AS big, max(qty * 2) AS top2 FROM stream GROUP BY GROUPING SETS ((lower(region)), ())'
SELECT exactonce.alter_pipeline_as('r8', :'q8b') > 0 AS recomputed;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r8.result EXCEPT ALL :q8b) UNION ALL (:q8b EXCEPT ALL SELECT * FROM r8.result)) d;
SELECT pg_temp.aerr('SELECT lower(region) AS reg, count(*) FILTER (WHERE value > 2) AS big FROM stream GROUP BY lower(region)', 'r8');
SELECT pg_temp.stage_err($$SELECT exactonce.ingest('r8', 'src',
	ARRAY[(SELECT r FROM (SELECT 'z1' AS key, 1::bigint AS version, 5.00 AS value) r)], ARRAY[1::bigint])$$);
DROP VIEW stream;
TRUNCATE sent;
CREATE TEMP VIEW stream AS SELECT * FROM readings;
\set q9 'SELECT desk || ''/'' || region AS place, count(*) AS n, sum(value) FILTER (WHERE qty IS NOT NULL) AS with_qty, min(value - 1) AS low FROM stream GROUP BY 1'
SELECT exactonce.create_pipeline_as('r9', :'q9', mode => 'accumulate');
SELECT send('r9', 'region, desk, qty', c, false) FROM generate_series(1, 3) c;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r9.result EXCEPT ALL :q9) UNION ALL (:q9 EXCEPT ALL SELECT * FROM r9.result)) d;
-- a WHERE in accumulate mode is a FILTER of every aggregate, and the
-- result keeps the cells with a reading it lets through; hourly windows
-- written as date_trunc in UTC
\set q10 'SELECT date_trunc(''hour'', event_time, ''UTC'') AS hour, region, count(*) AS n, sum(value), max(value), count(DISTINCT desk) AS desks FROM stream WHERE book <> ''test'' AND value > 7.85 GROUP BY ROLLUP (hour, region)'
SELECT exactonce.create_pipeline_as('r10', :'q10', mode => 'accumulate', allowed_lateness => '36500 days');
SELECT dimensions, window_width FROM exactonce.pipelines WHERE name = 'r10';
SELECT send('r10', 'region, desk, book', c, false) FROM generate_series(1, 3) c;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r10.result EXCEPT ALL :q10) UNION ALL (:q10 EXCEPT ALL SELECT * FROM r10.result)) d;
SELECT count(*) AS rows, (SELECT count(*) FROM r10.aggregates) > count(*) AS cells_left_out FROM r10.result;
DROP VIEW stream;

-- 9. a pipeline made with create_pipeline, paused and empty, declared anew
-- by a query; a computed key's text that ends in a comment stays whole in
-- the queue's column; an event whose computed key is NULL is refused by
-- the INSERT, not counted in a NULL cell
TRUNCATE sent;
CREATE TEMP VIEW stream AS SELECT * FROM latest_stream;
SELECT exactonce.create_pipeline('r12', ARRAY['region', 'desk'], min_max => ARRAY['value']);
SELECT exactonce.pause('r12');
\set q12 'SELECT desk, max(value), count(*) AS n FROM stream WHERE value > 0 GROUP BY ROLLUP (desk)'
SELECT exactonce.alter_pipeline_as('r12', :'q12') AS cells;
SELECT exactonce.resume('r12');
SELECT send('r12', 'region, desk', c, true) FROM generate_series(1, 2) c;
SELECT count(*) AS differing FROM (
	(SELECT * FROM r12.result EXCEPT ALL :q12) UNION ALL (:q12 EXCEPT ALL SELECT * FROM r12.result)) d;
SELECT exactonce.create_pipeline_as('r11', E'SELECT lower(region) AS reg, count(*) AS n FROM stream GROUP BY lower(region) -- ) STORED; a comment\n');
INSERT INTO r11.ingest (key, version, value, region) VALUES ('a', 1, 1, 'EMEA'), ('b', 1, 1, 'Emea');
SELECT exactonce.flush('r11');
SELECT * FROM r11.result;
SELECT pg_temp.stage_err($$INSERT INTO r11.ingest (key, version, value, region) VALUES ('c', 1, 1, NULL)$$);
DROP VIEW stream;

-- what a pipeline cannot keep exactly is refused, naming the construct
CREATE FUNCTION pg_temp.err(q text, m text DEFAULT 'latest') RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM exactonce.create_pipeline_as('bad', q, mode => m);
	RETURN 'created';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT pg_temp.err(q) FROM unnest(ARRAY[
	'SELECT region, count(*) FROM stream s WHERE s.value > 100 GROUP BY region',
	'SELECT region, count(*) FROM stream WHERE event_time > now() GROUP BY region',
	'SELECT region, count(*) FROM stream WHERE public.lower(region) = ''x'' GROUP BY region',
	'SELECT region, count(*) FROM stream WHERE value > (SELECT 1) GROUP BY region',
	'SELECT region, count(*) FILTER (WHERE s.value > 0) FROM stream s GROUP BY region',
	'SELECT region, count(*) FROM stream GROUP BY region HAVING count(*) > 1',
	'SELECT region, count(*) FROM stream JOIN other USING (key) GROUP BY region',
	'SELECT region, count(*) FROM trades GROUP BY region',
	'SELECT lower(region) r, count(*) FROM stream GROUP BY 1',
	'SELECT region, sum(value * 2, 1) FROM stream GROUP BY region',
	'SELECT region, stddev(value) FROM stream GROUP BY region',
	'SELECT region, min(value), min(qty) FROM stream GROUP BY region',
	'SELECT region, count(*) FROM stream',
	'SELECT count(*) FROM stream GROUP BY value',
	'SELECT region, sum(DISTINCT value) FROM stream GROUP BY region',
	'SELECT region, count(*) FROM stream GROUP BY region, ROLLUP (desk)',
	'SELECT region, count(*) OVER () FROM stream GROUP BY region',
	'SELECT region, desk, count(*) FROM stream GROUP BY region',
	'SELECT date_bin(''1 hour'', event_time, ''1970-01-01 00:30+00''), count(*) FROM stream GROUP BY ROLLUP (date_bin(''1 hour'', event_time, ''1970-01-01 00:30+00''))',
	'SELECT region, count(*) FROM stream GROUP BY ROLLUP (region, date_bin(''1 hour'', event_time, ''1970-01-01 00:00+00''))',
	'SELECT date_trunc(''hour'', event_time), count(*) FROM stream GROUP BY 1',
	'SELECT region, count(*) FROM stream GROUP BY region UNION SELECT region, count(*) FROM stream GROUP BY region',
	'SELECT 1; SELECT 2',
	'DELETE FROM stream',
	'SELECT region, count(*) FROM stream GROUP BY region ORDER BY 2'
]) q;
SELECT pg_temp.err(q, 'accumulate') FROM unnest(ARRAY[
	'SELECT date_trunc(''hour'', event_time), count(*) FROM stream GROUP BY ROLLUP (1)',
	'SELECT date_trunc(''week'', event_time, ''UTC''), count(*) FROM stream GROUP BY ROLLUP (1)',
	'SELECT date_trunc(''hour'', event_time, ''Europe/Paris''), count(*) FROM stream GROUP BY ROLLUP (1)'
]) q;
SELECT count(*) AS made FROM exactonce.pipelines WHERE name = 'bad';

SELECT exactonce.drop_pipeline(name) FROM unnest(ARRAY['r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7', 'r8', 'r9', 'r10', 'r11', 'r12']) name;
DROP VIEW latest_stream, readings;
DROP TABLE sent;
DROP FUNCTION chunk(integer, boolean), send(text, text, integer, boolean);
DROP EXTENSION exactonce;
