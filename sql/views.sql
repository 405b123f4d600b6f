-- Named aggregate views: more groupings of one pipeline's cells, with keys
-- of their own, computed keys and filters, and what they refuse.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;

-- err(sql): run a statement, show its SQLSTATE, message and hint
CREATE FUNCTION pg_temp.err(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	state text; msg text; hint text;
BEGIN
	EXECUTE sql;
	RETURN 'no error';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
	RETURN state || ': ' || msg || coalesce(' | HINT: ' || nullif(hint, ''), '');
END $$;

SELECT exactonce.create_pipeline('trades', ARRAY['region', 'desk', 'book'],
	measures => ARRAY['qty'], min_max => ARRAY['value'], distinct_counts => ARRAY['cpty']);
INSERT INTO trades.ingest (key, version, value, region, desk, book, qty, cpty) VALUES
	('t1', 1, 10, 'EMEA', 'd1', 'b1', 1, 'c1'), ('t2', 1, 20, 'EMEA', 'd2', 'b1', 2, 'c2'),
	('t3', 1, 30, 'APAC', 'd1', 'b2', NULL, 'c1'), ('t4', 1, -5, 'APAC', 'd3', 'b1', 4, 'c3'),
	('t5', 1, 7, 'EMEA', 'd1', 'b2', 3, 'c2');
SELECT exactonce.flush('trades');

-- a dimension the rollup only has at its leaves: read from level 3
SELECT exactonce.create_view('trades', 'by_book', ARRAY['book']);
-- a filter on a dimension the view does not group by
SELECT exactonce.create_view('trades', 'emea_desks', ARRAY['desk'], $$region = 'EMEA'$$);
-- a computed key beside a plain one
-- keys that are not a grouping of the pipeline: no distinct counts, and a
-- NOTICE says so
SET client_min_messages = notice;
SELECT exactonce.create_view('trades', 'book_kind', ARRAY['region', $$CASE WHEN book = 'b1' THEN 'flow' ELSE 'exotic' END AS kind$$]);
SET client_min_messages = warning;
-- no key: one row, the total of the cells that pass the filter
SELECT exactonce.create_view('trades', 'b1_total', '{}', $$book = 'b1' -- a trailing comment$$);
-- keys that are a grouping of the pipeline: one cell per row, with distinct counts
SELECT exactonce.create_view('trades', 'region_desk', ARRAY['region', 'desk AS trading_desk'], $$desk <> 'd3'$$);

SELECT book, total, keys, qty_sum, qty_count, qty_avg, value_min, value_max, updated_at IS NOT NULL AS updated FROM trades.by_book ORDER BY book;
SELECT desk, total, keys, qty_sum, qty_count, qty_avg, value_min, value_max FROM trades.emea_desks ORDER BY desk;
SELECT region, kind, total, keys, qty_sum, qty_count, value_min, value_max FROM trades.book_kind ORDER BY 1, 2;
SELECT total, keys, qty_sum, qty_count, qty_avg, value_min, value_max FROM trades.b1_total;
SELECT region, trading_desk, total, keys, value_min, value_max, cpty_distinct FROM trades.region_desk ORDER BY 1, 2;
SELECT attname FROM pg_attribute WHERE attrelid = 'trades.by_book'::regclass AND attnum > 0 ORDER BY attnum;
SELECT obj_description('trades.emea_desks'::regclass), obj_description('trades.region_desk'::regclass);
SELECT name, views FROM exactonce.pipelines;

-- every view equals the same grouping over the live keys, after a move, a
-- tombstone and a stale version
INSERT INTO trades.ingest (key, version, value, region, desk, book, qty, cpty, deleted) VALUES
	('t1', 2, 12, 'APAC', 'd1', 'b2', 5, 'c4', false), ('t2', 2, 20, 'EMEA', 'd2', 'b1', 2, 'c2', true),
	('t3', 0, 99, 'EMEA', 'd9', 'b9', 9, 'c9', false);
SELECT exactonce.flush('trades');
CREATE TEMP VIEW live AS SELECT * FROM trades.state WHERE NOT deleted;
SELECT (SELECT array_agg(row(book, total, keys, qty_sum, qty_count, value_min, value_max) ORDER BY book) FROM trades.by_book)
	IS NOT DISTINCT FROM
	(SELECT array_agg(row(book, total, keys, qty_sum, qty_count, value_min, value_max) ORDER BY book) FROM
		(SELECT book, sum(value) AS total, count(*) AS keys, coalesce(sum(qty), 0) AS qty_sum, count(qty) AS qty_count,
				min(value) AS value_min, max(value) AS value_max FROM live GROUP BY book) o) AS by_book_exact;
SELECT (SELECT array_agg(row(desk, total, keys) ORDER BY desk) FROM trades.emea_desks)
	IS NOT DISTINCT FROM
	(SELECT array_agg(row(desk, total, keys) ORDER BY desk) FROM
		(SELECT desk, sum(value) AS total, count(*) AS keys FROM live WHERE region = 'EMEA' GROUP BY desk) o) AS emea_desks_exact;
SELECT (SELECT array_agg(row(region, trading_desk, total, keys, cpty_distinct) ORDER BY 1, 2) FROM trades.region_desk)
	IS NOT DISTINCT FROM
	(SELECT array_agg(row(region, desk, total, keys, n) ORDER BY 1, 2) FROM
		(SELECT region, desk, sum(value) AS total, count(*) AS keys, count(DISTINCT cpty) AS n
		 FROM live WHERE desk <> 'd3' GROUP BY region, desk) o) AS region_desk_exact;

-- grouping sets: the smallest set that has every dimension named
SELECT exactonce.create_pipeline('sets', ARRAY['region', 'desk', 'book'],
	grouping_sets => '(region, desk, book), (desk, book), (region), ()');
INSERT INTO sets.ingest (key, version, value, region, desk, book) VALUES
	('a', 1, 1, 'EMEA', 'd1', 'b1'), ('b', 1, 2, 'APAC', 'd1', 'b1'), ('c', 1, 4, 'APAC', 'd2', 'b2');
SELECT exactonce.flush('sets');
SELECT exactonce.create_view('sets', 'books', ARRAY['book']);
SELECT exactonce.create_view('sets', 'regions', ARRAY['lower(region) AS r']);
SELECT exactonce.create_view('sets', 'everything', '{}');
SELECT book, total, keys FROM sets.books ORDER BY book;
SELECT r, total, keys FROM sets.regions ORDER BY r;
SELECT total, keys FROM sets.everything;
SELECT obj_description('sets.books'::regclass), obj_description('sets.everything'::regclass);

-- windows: an hour's key computed from ten-minute windows
SELECT exactonce.create_pipeline('runs', ARRAY['runner'], mode => 'accumulate',
	window_width => '10 minutes', allowed_lateness => '2 hours');
INSERT INTO runs.ingest (key, version, value, runner, event_time) VALUES
	('r1', 1, 100, 'ann', '2026-01-01 10:05+00'), ('r1', 2, 50, 'ann', '2026-01-01 10:55+00'),
	('r2', 1, 70, 'bob', '2026-01-01 11:15+00');
SELECT exactonce.flush('runs');
SELECT exactonce.create_view('runs', 'hourly', ARRAY[$$date_trunc('hour', window_start::timestamp) AS hour$$, 'runner']);
SELECT hour AS hour_utc, runner, total, keys FROM runs.hourly ORDER BY hour, runner;

-- refused
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['trader'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk'], 'value > 0')$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk, book'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk FROM trades.state'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk'], 'true; DROP TABLE trades.state')$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk'], 'true) OR (true')$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk'], 'true UNION SELECT 1')$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['upper(desk)'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['(SELECT max(desk) FROM trades.state) AS d'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['s.desk'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk AS total'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk', 'book AS desk'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk', NULL])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'by_book', ARRAY['book'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'state', ARRAY['book'])$$);
SELECT exactonce.create_pipeline('halves', ARRAY['region', 'desk'], grouping_sets => '(region), (desk)');
SELECT pg_temp.err($$SELECT exactonce.create_view('halves', 'x', ARRAY['region'], $q$desk = 'd1'$q$)$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('nope', 'x', ARRAY['book'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', NULL, ARRAY['book'])$$);

-- a view's functions run as whoever reads it: only built-in immutable ones,
-- never one that reaches a table, a file, a large object or a setting
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY[$q$query_to_xml('SELECT 1', true, true, '')::text AS q$q$])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY[$q$pg_read_file('postgresql.conf') AS f$q$])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY[$q$lo_import('/etc/passwd')::text AS l$q$])$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY['desk'], $q$set_config('role', 'postgres', true) = 'x'$q$)$$);
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY[$q$current_setting('search_path') AS s$q$])$$);
CREATE FUNCTION public.regress_plain(t text) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT t';
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY[$q$public.regress_plain(desk) AS d$q$])$$);
CREATE DOMAIN public.regress_checked AS text CHECK (VALUE <> '');
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'x', ARRAY[$q$desk::public.regress_checked AS d$q$])$$);
DROP FUNCTION public.regress_plain(text);
DROP DOMAIN public.regress_checked;
SELECT count(*) AS views_left FROM pg_class WHERE relnamespace = 'trades'::regnamespace AND relname = 'x';

-- only the pipeline's owner makes its views, and they are the owner's
CREATE ROLE regress_view_other;
GRANT USAGE ON SCHEMA trades TO regress_view_other;
SET ROLE regress_view_other;
SELECT pg_temp.err($$SELECT exactonce.create_view('trades', 'mine', ARRAY['book'])$$);
SELECT pg_temp.err($$SELECT * FROM trades.by_book$$);
RESET ROLE;
SELECT pg_get_userbyid(relowner) = current_user AS owned_by_pipeline_owner FROM pg_class WHERE oid = 'trades.by_book'::regclass;

SELECT exactonce.drop_pipeline('trades'), exactonce.drop_pipeline('sets'), exactonce.drop_pipeline('runs'),
	exactonce.drop_pipeline('halves');
DROP ROLE regress_view_other;
DROP EXTENSION exactonce;
