-- Groupings beyond a rollup: CUBE and explicit grouping sets, and bad
-- groupings.
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

SELECT exactonce.create_pipeline('c', ARRAY['region', 'desk'], grouping_sets => 'cube');
SELECT exactonce.create_pipeline('g', ARRAY['region', 'desk'], grouping_sets => '(desk), ( )');
SELECT name, grouping_sets FROM exactonce.pipelines ORDER BY name;
SELECT obj_description('g.aggregates'::regclass);

INSERT INTO c.ingest (key, version, value, region, desk) VALUES
	('a', 1, 10, 'EMEA', 'd1'), ('b', 1, 20, 'EMEA', 'd2'), ('c', 1, 5, 'APAC', 'd1');
INSERT INTO g.ingest (key, version, value, region, desk) VALUES
	('a', 1, 10, 'EMEA', 'd1'), ('b', 1, 20, 'EMEA', 'd2'), ('c', 1, 5, 'APAC', 'd1');
SELECT exactonce.flush('c'), exactonce.flush('g');
-- the cube has every subset: the desks alone too
SELECT level, region, desk, total, keys FROM c.aggregates ORDER BY level, region NULLS FIRST, desk NULLS FIRST;
SELECT level, region, desk, total, keys FROM g.aggregates ORDER BY level, region NULLS FIRST, desk NULLS FIRST;

-- a move and a tombstone
INSERT INTO c.ingest (key, version, value, region, desk, deleted) VALUES
	('a', 2, 10, 'APAC', 'd2', false), ('b', 2, 20, 'EMEA', 'd2', true);
SELECT exactonce.flush('c');
SELECT level, region, desk, total, keys FROM c.aggregates ORDER BY level, region NULLS FIRST, desk NULLS FIRST;

-- bad groupings
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => 'cubes')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => '(a, c)')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => '(a, a)')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => '(a), (a)')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => '(a) (b)')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => '(a')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => '')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => NULL)$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'],
	grouping_sets => 'cube')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], grouping_sets => '(a), ()',
	min_max => ARRAY['value'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b'], 'accumulate',
	grouping_sets => 'cube', window_width => '1 hour')$$);
SELECT count(*) AS pipelines FROM exactonce.pipeline;

SELECT exactonce.drop_pipeline('c');
SELECT exactonce.drop_pipeline('g');
DROP EXTENSION exactonce;
