-- Several measures per event, min/max and distinct counts per cell:
-- declarations, the relations they make, retraction by newer versions and
-- tombstones, the stages called by hand, and bad declarations.
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

SELECT exactonce.create_pipeline('risk', ARRAY['desk', 'book'],
	measures => ARRAY['qty', 'fee'], min_max => ARRAY['value', 'fee']);

-- the measures are nullable numeric columns of the queue, state and dead
-- letters; the aggregates carry sum, count, avg and min, max
SELECT attrelid::regclass, attname, format_type(atttypid, atttypmod), attnotnull,
	   pg_get_expr(d.adbin, d.adrelid) AS expression
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE attrelid IN ('risk.ingest'::regclass, 'risk.state'::regclass, 'risk.aggregates'::regclass)
  AND attnum > 0 AND NOT attisdropped
  AND (attname ~ '^(qty|fee|value)' OR attname = 'total')
ORDER BY attrelid::regclass::text, attnum;
SELECT name, measures, min_max FROM exactonce.pipelines;
SELECT attname, col_description(attrelid, attnum) FROM pg_attribute
WHERE attrelid = 'risk.aggregates'::regclass AND col_description(attrelid, attnum) IS NOT NULL
ORDER BY attnum;

-- a: in d1/b1; b: d1/b2 without a fee; c: d2/b1 without a fee; d: d1/b1
INSERT INTO risk.ingest (key, version, value, desk, book, qty, fee) VALUES
	('a', 1, 10, 'd1', 'b1', 5, 1.5),
	('b', 1, 20, 'd1', 'b2', 2, NULL),
	('c', 1, -3, 'd2', 'b1', 7, NULL),
	('d', 1, 10, 'd1', 'b1', 1, 4);
SELECT exactonce.flush('risk');
SELECT level, desk, book, total, keys, qty_sum, qty_count, qty_avg, fee_sum, fee_count, fee_avg,
	   value_min, value_max, fee_min, fee_max
FROM risk.aggregates ORDER BY level, desk, book;

-- b moves to d2/b1 with a fee, d's fee goes, a newer a is a tombstone: the
-- maximum 20 of d1 and the minimum fee 1.5 are retracted, 10 stays (d)
INSERT INTO risk.ingest (key, version, value, desk, book, qty, fee, deleted) VALUES
	('b', 2, 5, 'd2', 'b1', 1, 0.5, false),
	('d', 2, 10, 'd1', 'b1', 1, NULL, false),
	('a', 2, 10, 'd1', 'b1', 5, 1.5, true),
	('a', 1, 10, 'd1', 'b1', 5, 1.5, false);
SELECT exactonce.flush('risk');
SELECT level, desk, book, total, keys, qty_sum, qty_count, qty_avg, fee_sum, fee_count, fee_avg,
	   value_min, value_max, fee_min, fee_max
FROM risk.aggregates ORDER BY level, desk, book;
-- a leaf's min and max are read anew from state, through this index
SELECT indexdef FROM pg_indexes WHERE schemaname = 'risk' AND indexname = 'state_cell';
SELECT ingested, applied, duplicates, stale, dead_lettered FROM exactonce.pipelines;

-- the stages by hand: deltas carry the measures; for a pipeline with min
-- and max a delta adds one key or takes one, as state_upsert's do
CREATE TEMP TABLE ev (key text, version bigint, value numeric, desk text, book text,
	qty numeric, fee numeric);
CREATE TEMP TABLE deltas AS
SELECT d FROM exactonce.state_upsert('risk', ARRAY[ROW('e', 1, 2, 'd3', 'b1', 3, 0.25)::ev,
												  ROW('c', 2, -3, 'd2', 'b1', 7, 1)::ev]) AS d;
SELECT (d).* FROM deltas ORDER BY (d).key, (d).keys;
SELECT exactonce.map_stage('risk', ARRAY(SELECT d FROM deltas)) IS NOT NULL AS staged;
SELECT pg_temp.err($$SELECT exactonce.map_stage('risk',
	ARRAY[ROW('x', 1, ARRAY['d3', 'b1'], 2, 2, ARRAY[1, 1], NULL)::exactonce.delta])$$);
SELECT pg_temp.err($$SELECT exactonce.map_stage('risk',
	ARRAY[ROW('x', 1, ARRAY['d3', 'b1'], 2, 1, ARRAY[1], NULL)::exactonce.delta])$$);
SELECT exactonce.reduce_apply('risk');
SELECT level, desk, book, total, keys, qty_sum, qty_count, fee_sum, fee_count, value_min, value_max, fee_min, fee_max
FROM risk.aggregates ORDER BY level, desk, book;

-- state_cell is the pipeline's: an owner's index of another shape under its
-- name is refused before anything is written, and so is none at all
DROP INDEX risk.state_cell;
CREATE INDEX state_cell ON risk.state (lower(desk), book);
INSERT INTO risk.ingest (key, version, value, desk, book) VALUES ('f', 1, 1, 'd1', 'b1');
SELECT pg_temp.err($$SELECT exactonce.flush('risk')$$);
DROP INDEX risk.state_cell;
SELECT pg_temp.err($$SELECT exactonce.flush('risk')$$);
CREATE INDEX state_cell ON risk.state (desk, book);
SELECT exactonce.flush('risk');
SELECT keys, value_max FROM risk.aggregates WHERE level = 0;

SELECT exactonce.create_pipeline('acc', ARRAY['d'], 'accumulate', min_max => ARRAY['value']);
SELECT pg_temp.err($$SELECT exactonce.map_stage('acc',
	ARRAY[ROW('x', 1, ARRAY['a'], -2, -1, NULL, NULL)::exactonce.delta])$$);
SELECT exactonce.drop_pipeline('acc');

-- distinct counts: counterparties per cell; a value leaves a cell's count
-- only when no other key of the cell has it
SELECT exactonce.create_pipeline('cp', ARRAY['desk', 'book'], distinct_counts => ARRAY['counterparty']);
SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
WHERE attrelid IN ('cp.ingest'::regclass, 'cp.aggregates'::regclass) AND attname LIKE 'counterparty%'
ORDER BY attrelid::regclass::text, attnum;
INSERT INTO cp.ingest (key, version, value, desk, book, counterparty) VALUES
	('a', 1, 10, 'd1', 'b1', 'X'), ('b', 1, 20, 'd1', 'b2', 'X'),
	('c', 1, -3, 'd2', 'b1', 'Y'), ('d', 1, 5, 'd1', 'b1', NULL);
SELECT exactonce.flush('cp');
SELECT level, desk, book, keys, counterparty_distinct FROM cp.aggregates ORDER BY level, desk, book;
-- a moves to Z, b is deleted (X leaves d1), d joins d2 with Y (still one)
INSERT INTO cp.ingest (key, version, value, desk, book, counterparty, deleted) VALUES
	('a', 2, 10, 'd1', 'b1', 'Z', false), ('b', 2, 20, 'd1', 'b2', 'X', true),
	('d', 2, 5, 'd2', 'b1', 'Y', false);
SELECT exactonce.flush('cp');
SELECT level, desk, book, keys, counterparty_distinct FROM cp.aggregates ORDER BY level, desk, book;
SELECT cell, col, value, n FROM cp.distincts ORDER BY cell, col, value;
CREATE TEMP TABLE cpev (key text, version bigint, value numeric, desk text, book text,
	counterparty text);
SELECT key, keys, distincts
FROM exactonce.state_upsert('cp', ARRAY[ROW('a', 3, 10, 'd1', 'b1', NULL)::cpev]) ORDER BY keys;
DROP TABLE cpev;
-- reduce writes table distincts directly (with room for HOT updates): a
-- trigger, an index or a primary key of another order that the owner
-- plants is refused before anything is written, and the pipeline goes on
-- once it is gone
SELECT reloptions FROM pg_class WHERE oid = 'cp.distincts'::regclass;
CREATE FUNCTION planted_trigger() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER planted BEFORE UPDATE ON cp.distincts FOR EACH ROW EXECUTE FUNCTION planted_trigger();
INSERT INTO cp.ingest (key, version, value, desk, book, counterparty) VALUES ('e', 1, 1, 'd2', 'b1', 'W');
SELECT pg_temp.err($$SELECT exactonce.flush('cp')$$);
DROP TRIGGER planted ON cp.distincts;
DROP FUNCTION planted_trigger();
CREATE INDEX planted ON cp.distincts (value);
SELECT pg_temp.err($$SELECT exactonce.flush('cp')$$);
DROP INDEX cp.planted;
ALTER TABLE cp.distincts DROP CONSTRAINT distincts_pkey, ADD PRIMARY KEY (value, col, cell);
SELECT pg_temp.err($$SELECT exactonce.flush('cp')$$);
ALTER TABLE cp.distincts DROP CONSTRAINT distincts_pkey, ADD PRIMARY KEY (cell, col, value);
SELECT level, desk, book, keys, counterparty_distinct FROM cp.aggregates ORDER BY level, desk, book;
SELECT exactonce.flush('cp');
SELECT level, desk, book, keys, counterparty_distinct FROM cp.aggregates ORDER BY level, desk, book;
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], distinct_counts => ARRAY['d'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], distinct_counts => ARRAY['c', 'c'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], distinct_counts => ARRAY['key'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['c_distinct'], distinct_counts => ARRAY['c'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => ARRAY['c'],
	distinct_counts => ARRAY['c'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'],
	distinct_counts => ARRAY(SELECT 'c' || i FROM generate_series(1, 9) i))$$);
SELECT exactonce.drop_pipeline('cp', force => true);

-- bad declarations
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => ARRAY['value'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => ARRAY['q', 'q'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => ARRAY['d'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['q_sum'], measures => ARRAY['q'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => ARRAY['Q'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => ARRAY[NULL])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => NULL)$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'],
	measures => ARRAY(SELECT 'm' || i FROM generate_series(1, 17) i))$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => ARRAY[repeat('m', 60)])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], min_max => ARRAY['q'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['d'], measures => ARRAY['q'],
	min_max => ARRAY['q', 'q'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['value_max'], min_max => ARRAY['value'])$$);
SELECT count(*) AS pipelines FROM exactonce.pipeline;

-- a batch's sums per cell, kept as integers of the terms' largest scale
-- while they fit, come out as numeric's own sums would, display scale
-- included: mixed scales, zero at a scale, sums past an int64 of units,
-- terms of more than 18 decimals or 17 digits, NULL measures among them
-- (a cell without a measure sums to 0)
SELECT exactonce.create_pipeline('sums', ARRAY['d'], measures => ARRAY['q']);
CREATE TEMP TABLE sum_events (key text, version bigint, value numeric, d text, q numeric);
INSERT INTO sum_events VALUES
	('m1', 1, 1.5, 'mix', NULL), ('m2', 1, 2.25, 'mix', 1.5), ('m3', 1, 3, 'mix', NULL),
	('m4', 1, -0.75, 'mix', 2.50), ('m5', 1, 10.125, 'mix', NULL),
	('z1', 1, 1.10, 'zero', 1), ('z2', 1, -1.1, 'zero', -1.000), ('z3', 1, 2.000, 'zero', NULL),
	('z4', 1, -2, 'zero', NULL),
	('b1', 1, 9000000000000000, 'big', 4000000000000000.5),
	('b2', 1, 9000000000000000, 'big', 4000000000000000.5), ('b3', 1, 0.5, 'big', 1),
	('f1', 1, 1e-20, 'fine', 0.1), ('f2', 1, 1, 'fine', 0.2), ('f3', 1, 2, 'fine', 1e-19),
	('w1', 1, 123456789.123456789, 'wide', NULL), ('w2', 1, 1, 'wide', NULL),
	('n1', 1, -5.5, 'neg', -1), ('n2', 1, -4.5, 'neg', -2.0), ('n3', 1, 1, 'neg', 3.00);
INSERT INTO sums.ingest (key, version, value, d, q) SELECT * FROM sum_events;
SELECT exactonce.flush('sums');
SELECT a.d, a.total::text AS total, a.q_sum::text AS q_sum,
	   a.total::text = o.total::text AND a.q_sum::text IS NOT DISTINCT FROM o.q_sum::text AS as_sql_sums
FROM sums.aggregates a
JOIN (SELECT d, sum(value) AS total, coalesce(sum(q), 0) AS q_sum FROM sum_events GROUP BY d) o USING (d)
WHERE a.level = 1 ORDER BY a.d;
-- newer versions take their values out again, in sums of their own
INSERT INTO sums.ingest (key, version, value, d, q)
SELECT key, 2, -value, d, q FROM sum_events WHERE key ~ '[13]$';
SELECT exactonce.flush('sums');
SELECT count(*) AS cells, count(*) FILTER (WHERE a.total = o.total AND a.q_sum IS NOT DISTINCT FROM o.q_sum)
	   AS equal_to_sql_sums
FROM sums.aggregates a
JOIN (SELECT d, sum(CASE WHEN key ~ '[13]$' THEN -value ELSE value END) AS total, coalesce(sum(q), 0) AS q_sum
	  FROM sum_events GROUP BY d) o USING (d)
WHERE a.level = 1;
SELECT exactonce.drop_pipeline('sums', force => true);

SELECT exactonce.drop_pipeline('risk', force => true);
DROP TABLE deltas;
DROP EXTENSION exactonce;
