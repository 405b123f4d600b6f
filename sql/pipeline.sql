-- Creating, listing, pausing and dropping pipelines; bad arguments.
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

SELECT exactonce.create_pipeline('trades', ARRAY['risk_type', 'region', 'trade_desk']);
SELECT exactonce.create_pipeline('runs', ARRAY['user_id'], 'accumulate', shards => 3);

-- the relations and their columns; state and aggregates keep half of each
-- page free for the versions a batch writes (HOT updates), the one-row
-- progress and shard tables most of it
SELECT n.nspname, c.relname, c.relkind, c.reloptions
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('trades', 'runs') AND c.relkind IN ('r', 'p')
ORDER BY 1, 2;
SELECT attname, format_type(atttypid, atttypmod), attnotnull
FROM pg_attribute WHERE attrelid = 'trades.ingest'::regclass AND attnum > 0 AND NOT attisdropped
ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute WHERE attrelid = 'trades.aggregates'::regclass AND attnum > 0 AND NOT attisdropped
ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute WHERE attrelid = 'runs.state'::regclass AND attnum > 0 AND NOT attisdropped
ORDER BY attnum;
SELECT attname FROM pg_attribute
WHERE attrelid = 'trades.dead_letters'::regclass AND attnum > 0 AND NOT attisdropped
ORDER BY attnum;

SELECT name, mode, dimensions, shards, paused, queued, ingested, applied, duplicates, stale,
	   dead_lettered, batches, staged
FROM exactonce.pipelines ORDER BY name;
SELECT shard, drain_rotation, drain_position FROM runs.shard ORDER BY shard;

-- pause and resume
SELECT exactonce.pause('trades');
SELECT name, paused FROM exactonce.pipelines ORDER BY name;
SELECT exactonce.resume('trades');
SELECT name, paused FROM exactonce.pipelines ORDER BY name;

-- bad arguments
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('trades', ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('public', ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('Trades', ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('x; DROP TABLE y', ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('x"y', ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('', ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline(repeat('a', 64), ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('pg_trades', ARRAY['a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY[]::text[])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', 'b', 'a'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a', NULL])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['version'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a b'])$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a'], 'sum')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', NULL)$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a'], shards => 0)$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('p1', ARRAY['a'], shards => 65)$$);
-- shards NULL: one per drain worker of the database, at least 2 (no
-- worker serves this one)
SELECT exactonce.create_pipeline('p1', ARRAY['a'], shards => NULL);
SELECT shards FROM exactonce.pipelines WHERE name = 'p1';
SELECT exactonce.drop_pipeline('p1');
SELECT pg_temp.err($$SELECT exactonce.flush('nope')$$);
SELECT pg_temp.err($$SELECT exactonce.pause('nope')$$);
SELECT pg_temp.err($$SELECT exactonce.drop_pipeline('nope')$$);
SELECT pg_temp.err($$SELECT exactonce.state_upsert('nope', ARRAY[1])$$);
SELECT pg_temp.err($$SELECT exactonce.state_upsert('trades', ARRAY[1])$$);
-- nothing was left behind by the failed calls
SELECT name FROM exactonce.pipeline ORDER BY name;
SELECT nspname FROM pg_namespace WHERE nspname IN ('p1', 'x', 'pg_trades') ORDER BY 1;

-- drop refuses to discard queued events unless forced
INSERT INTO trades.ingest (key, version, value, risk_type, region, trade_desk)
VALUES ('t1', 1, 1, 'delta', 'amer', 'fx');
SELECT pg_temp.err($$SELECT exactonce.drop_pipeline('trades')$$);
SELECT exactonce.flush('trades');
SELECT exactonce.drop_pipeline('trades');
INSERT INTO runs.ingest (key, version, value, user_id) VALUES ('r1', 1, 1, 'u1');
SELECT exactonce.drop_pipeline('runs', force => true);
SELECT count(*) FROM exactonce.pipelines;
SELECT nspname FROM pg_namespace WHERE nspname IN ('trades', 'runs');

-- a dropped pipeline's name can be used again
SELECT exactonce.create_pipeline('trades', ARRAY['desk']);
SELECT name, dimensions FROM exactonce.pipelines;
SELECT exactonce.drop_pipeline('trades');

-- a trigger, an index or a column the owner adds to state or seen, which
-- the state stage writes directly, is refused before anything is written,
-- and the pipeline goes on once it is gone
SELECT exactonce.create_pipeline('planted', ARRAY['d']);
SELECT exactonce.create_pipeline('planted_acc', ARRAY['d'], 'accumulate');
INSERT INTO planted.ingest (key, version, value, d) VALUES ('a', 1, 1, 'x'), ('b', 1, 2, 'y');
INSERT INTO planted_acc.ingest (key, version, value, d) VALUES ('a', 1, 1, 'x'), ('a', 2, 2, 'x');
CREATE FUNCTION planted_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER planted BEFORE INSERT ON planted.state FOR EACH ROW EXECUTE FUNCTION planted_noop();
SELECT pg_temp.err($$SELECT exactonce.flush('planted')$$);
DROP TRIGGER planted ON planted.state;
CREATE TRIGGER planted AFTER INSERT ON planted_acc.seen FOR EACH STATEMENT EXECUTE FUNCTION planted_noop();
SELECT pg_temp.err($$SELECT exactonce.flush('planted_acc')$$);
DROP TRIGGER planted ON planted_acc.seen;
DROP FUNCTION planted_noop();
CREATE INDEX planted_value ON planted.state (value);
SELECT pg_temp.err($$SELECT exactonce.flush('planted')$$);
DROP INDEX planted.planted_value;
ALTER TABLE planted.state ADD COLUMN note text;
SELECT pg_temp.err($$SELECT exactonce.flush('planted')$$);
ALTER TABLE planted.state DROP COLUMN note;
CREATE INDEX planted_seen ON planted_acc.seen (key);
SELECT pg_temp.err($$SELECT exactonce.flush('planted_acc')$$);
DROP INDEX planted_acc.planted_seen;
ALTER TABLE planted_acc.seen ADD COLUMN note text;
SELECT pg_temp.err($$SELECT exactonce.flush('planted_acc')$$);
ALTER TABLE planted_acc.seen DROP COLUMN note;
SELECT (SELECT count(*) FROM planted.state) + (SELECT count(*) FROM planted_acc.seen)
	+ (SELECT count(*) FROM planted.aggregates) + (SELECT count(*) FROM planted_acc.aggregates) AS nothing_written;
SELECT exactonce.flush('planted'), exactonce.flush('planted_acc');
SELECT level, d, total, keys FROM planted.aggregates ORDER BY level, d;
SELECT level, d, total, keys FROM planted_acc.aggregates ORDER BY level, d;
SELECT exactonce.drop_pipeline('planted'), exactonce.drop_pipeline('planted_acc');

DROP EXTENSION exactonce;
