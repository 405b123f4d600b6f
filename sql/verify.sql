-- verify() and rebuild(): the aggregates checked against state, damaged
-- and repaired, a batch staged and not applied, accumulate mode, and what
-- they refuse.  The oracle is computed from the events as produced.
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

SELECT exactonce.create_pipeline('tv', ARRAY['region', 'desk'], measures => ARRAY['qty'],
	min_max => ARRAY['value', 'qty'], distinct_counts => ARRAY['cpty']);
SELECT exactonce.create_pipeline('tc', ARRAY['region', 'desk'], distinct_counts => ARRAY['cpty'],
	grouping_sets => 'cube');
SELECT exactonce.create_pipeline('ta', ARRAY['region', 'desk'], 'accumulate');

CREATE TABLE events AS
SELECT 'k' || i AS key, v::bigint AS version, (i * v)::numeric AS value, 'r' || (i * v % 3) AS region,
	   'd' || ((i + v) % 4) AS desk, CASE WHEN i % 9 = 0 THEN NULL ELSE (i % 5)::numeric END AS qty,
	   'c' || (i * v % 7) AS cpty, v = 2 AND i % 10 = 0 AS deleted
FROM generate_series(1, 600) i, generate_series(1, 2) v;
-- the oracle: each key's latest version, grouped as a cube
CREATE VIEW oracle AS
WITH latest AS (SELECT DISTINCT ON (key) * FROM events ORDER BY key, version DESC)
SELECT region, desk, 2 - (GROUPING(region) + GROUPING(desk)) AS level, sum(value) AS total,
	   count(*) AS keys, count(DISTINCT cpty) AS cpty_distinct
FROM latest WHERE NOT deleted GROUP BY CUBE (region, desk);
CREATE VIEW tc_mismatches AS
SELECT count(*) FROM (
	(SELECT region, desk, level, total, keys, cpty_distinct FROM tc.aggregates EXCEPT ALL SELECT * FROM oracle)
	UNION ALL
	(SELECT * FROM oracle EXCEPT ALL SELECT region, desk, level, total, keys, cpty_distinct FROM tc.aggregates)) m;

-- version 1 of every key
INSERT INTO tv.ingest (key, version, value, region, desk, qty, cpty)
SELECT key, version, value, region, desk, qty, cpty FROM events WHERE version = 1;
INSERT INTO tc.ingest (key, version, value, region, desk, cpty)
SELECT key, version, value, region, desk, cpty FROM events WHERE version = 1;
INSERT INTO ta.ingest (key, version, value, region, desk)
SELECT key, version, value, region, desk FROM events;
SELECT exactonce.flush('tv'), exactonce.flush('tc'), exactonce.flush('ta');
SELECT * FROM exactonce.verify('tv');
SELECT * FROM exactonce.verify('ta');

-- damage: a total, a missing cell, a min and a distinct count
UPDATE tv.aggregates SET total = total + 1 WHERE level = 2 AND region = 'r1' AND desk = 'd1';
DELETE FROM tv.aggregates WHERE level = 1 AND region = 'r2';
UPDATE tv.aggregates SET cpty_distinct = 99, value_min = -1 WHERE level = 0;
SELECT item, cell, ok FROM exactonce.verify('tv') ORDER BY item, cell;
SELECT detail FROM exactonce.verify('tv') WHERE cell = 'level 2 (region = ''r1'', desk = ''d1'')';
UPDATE ta.aggregates SET keys = keys - 1 WHERE level = 2 AND region = 'r1' AND desk = 'd1';
SELECT item, cell, detail, ok FROM exactonce.verify('ta') WHERE NOT ok;

-- and the values behind the cube's distinct counts, which only later
-- changes would show
DELETE FROM tc.distincts WHERE cell = '{NULL,d1}';
UPDATE tc.aggregates SET total = 0 WHERE level = 0;
SELECT item, cell, ok FROM exactonce.verify('tc') WHERE NOT ok;

-- rebuild repairs both; version 2 then moves keys, changes counterparties
-- and deletes some, and the cells stay exact
SELECT exactonce.rebuild('tv') AS tv_cells, exactonce.rebuild('tc') AS tc_cells;
SELECT count(*) AS failing FROM exactonce.verify('tv') WHERE NOT ok;
INSERT INTO tv.ingest (key, version, value, region, desk, qty, cpty, deleted)
SELECT key, version, value, region, desk, qty, cpty, deleted FROM events WHERE version = 2;
INSERT INTO tc.ingest (key, version, value, region, desk, cpty, deleted)
SELECT key, version, value, region, desk, cpty, deleted FROM events WHERE version = 2;
SELECT exactonce.flush('tv'), exactonce.flush('tc');
SELECT count(*) AS failing FROM exactonce.verify('tv') WHERE NOT ok;
SELECT count(*) AS failing FROM exactonce.verify('tc') WHERE NOT ok;
SELECT * FROM tc_mismatches;

-- a batch an external consumer staged and did not apply: its keys are in
-- state, so verify sees the cells behind; rebuild includes it and marks it
-- applied, so applying it later changes nothing
CREATE TABLE late AS SELECT 'late' AS key, 1::bigint AS version, 5::numeric AS value,
	'r9' AS region, 'd9' AS desk, 1::numeric AS qty, 'c9' AS cpty, false AS deleted;
SELECT exactonce.map_stage('tc', ARRAY(SELECT d FROM exactonce.state_upsert('tc',
	(SELECT array_agg(e) FROM (SELECT key, version, value, region, desk, cpty, deleted FROM late) e)) d))
	IS NOT NULL AS staged;
SELECT item, detail, ok FROM exactonce.verify('tc') WHERE item IN ('cells', 'ledger');
SELECT exactonce.rebuild('tc') > 0 AS rebuilt;
SELECT exactonce.reduce_apply('tc');
INSERT INTO events SELECT * FROM late;
SELECT count(*) AS failing FROM exactonce.verify('tc') WHERE NOT ok;
SELECT * FROM tc_mismatches;

-- a pipeline with no live key: new, then every key tombstoned; an
-- accumulate pipeline after prune() forgot seen rows below its horizon
SELECT exactonce.create_pipeline('empty', ARRAY['d']);
SELECT item, ok FROM exactonce.verify('empty') ORDER BY item;
SELECT exactonce.rebuild('empty') AS cells;
INSERT INTO empty.ingest (key, version, value, d) VALUES ('k1', 1, 5, 'a'), ('k2', 1, 7, 'b');
SELECT exactonce.flush('empty');
INSERT INTO empty.ingest (key, version, value, d, deleted) VALUES ('k1', 2, 0, 'a', true), ('k2', 2, 0, 'b', true);
SELECT exactonce.flush('empty');
SELECT count(*) AS cells_left FROM empty.aggregates;
SELECT item, ok FROM exactonce.verify('empty') ORDER BY item;
SELECT exactonce.rebuild('empty') AS cells;
SELECT exactonce.create_pipeline('pruned', ARRAY['d'], mode => 'accumulate');
INSERT INTO pruned.ingest (key, version, value, d) SELECT 'k' || i % 3, i, i, 'a' FROM generate_series(1, 9) i;
SELECT exactonce.flush('pruned');
SELECT horizon, forgotten FROM exactonce.prune('pruned', 5);
SELECT item, detail, ok FROM exactonce.verify('pruned') WHERE item = 'seen';
SELECT count(*) AS failing FROM exactonce.verify('pruned') WHERE NOT ok;
-- a dimension that no grouping set has: NULL in every cell
SELECT exactonce.create_pipeline('halfset', ARRAY['region', 'desk'], grouping_sets => '(region)');
INSERT INTO halfset.ingest (key, version, value, region, desk) VALUES ('k1', 1, 5, 'a', 'x'), ('k2', 1, 7, 'b', 'y');
SELECT exactonce.flush('halfset');
SELECT count(*) AS failing FROM exactonce.verify('halfset') WHERE NOT ok;
SELECT exactonce.rebuild('halfset') AS cells;
SELECT region, desk, level, total, keys FROM halfset.aggregates ORDER BY region;
SELECT exactonce.drop_pipeline('empty'), exactonce.drop_pipeline('pruned'), exactonce.drop_pipeline('halfset');

-- refused
SELECT pg_temp.err($$SELECT exactonce.rebuild('ta')$$);
SELECT pg_temp.err($$SELECT exactonce.rebuild(NULL)$$);
SELECT pg_temp.err($$SELECT * FROM exactonce.verify('nope')$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err($$SELECT exactonce.rebuild('tv')$$);
ROLLBACK;
CREATE ROLE regress_verify_other;
SET ROLE regress_verify_other;
SELECT pg_temp.err($$SELECT * FROM exactonce.verify('tv')$$);
SELECT pg_temp.err($$SELECT exactonce.rebuild('tv')$$);
RESET ROLE;
DROP ROLE regress_verify_other;

DROP VIEW tc_mismatches;
SELECT exactonce.drop_pipeline('tv'), exactonce.drop_pipeline('tc'), exactonce.drop_pipeline('ta');
DROP VIEW oracle;
DROP TABLE events, late;
DROP EXTENSION exactonce;
