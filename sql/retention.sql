-- Retention: prune() forgets the tombstones (latest mode) or seen rows
-- (accumulate mode) below a version horizon, and old dead letters.  A
-- resend below the horizon that the pipeline can no longer tell from a new
-- event is a dead letter with its reason, never a second count; live keys
-- keep recognizing their resends; the horizon never goes down.
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

-- latest mode: versions are times (here, seconds)
SELECT exactonce.create_pipeline('rl', ARRAY['desk']);
CREATE VIEW rl_counters AS
SELECT ingested, applied, duplicates, stale, dead_lettered,
	   ingested = applied + duplicates + stale + dead_lettered AS identity
FROM exactonce.pipelines WHERE name = 'rl';
INSERT INTO rl.ingest (key, version, value, desk, deleted) VALUES
	('gone', 100, 5, 'd1', false), ('gone', 200, 5, 'd1', true),
	('live', 100, 7, 'd1', false), ('late', 300, 1, 'd2', true);
SELECT exactonce.flush('rl');
SELECT key, version, deleted FROM rl.state ORDER BY key;

-- forget the tombstones below 250: only gone's goes, late's stays
SELECT * FROM exactonce.prune('rl', 250);
SELECT key, version, deleted FROM rl.state ORDER BY key;
SELECT name, retention_horizon FROM exactonce.pipelines;

-- resends: of the forgotten key below the horizon, a dead letter (without
-- the horizon it would have come back to life); of the live key, stale as
-- before; of the kept tombstone, stale; above the horizon, a new key
INSERT INTO rl.ingest (key, version, value, desk) VALUES
	('gone', 100, 5, 'd1'), ('live', 50, 7, 'd1'), ('late', 250, 1, 'd2'), ('gone', 400, 9, 'd3');
SELECT exactonce.flush('rl');
SELECT key, version, reason FROM rl.dead_letters ORDER BY key;
SELECT level, desk, total, keys FROM rl.aggregates ORDER BY level, desk;
SELECT * FROM rl_counters;

-- the horizon never goes down
SELECT * FROM exactonce.prune('rl', 10);
SELECT name, retention_horizon FROM exactonce.pipelines WHERE name = 'rl';

-- old dead letters go too, when asked; the counters keep counting them
SELECT horizon, forgotten, dead_letters FROM exactonce.prune('rl', 250, dead_letters_older_than => '0 seconds');
SELECT count(*) AS dead_letters FROM rl.dead_letters;
SELECT * FROM rl_counters;

-- accumulate mode: the readings below the horizon are forgotten from seen
SELECT exactonce.create_pipeline('ra', ARRAY['runner'], 'accumulate');
INSERT INTO ra.ingest (key, version, value, runner) VALUES
	('r1', 10, 100, 'ann'), ('r1', 20, 50, 'ann'), ('r2', 30, 70, 'bob');
SELECT exactonce.flush('ra');
SELECT * FROM exactonce.prune('ra', 25);
SELECT key, version FROM ra.seen ORDER BY key, version;
-- a resend of a forgotten reading: a dead letter, not a second count; a
-- resend of a kept one: a duplicate; a new one above: applied
INSERT INTO ra.ingest (key, version, value, runner) VALUES
	('r1', 10, 100, 'ann'), ('r2', 30, 70, 'bob'), ('r1', 40, 5, 'ann');
SELECT exactonce.flush('ra');
SELECT key, version, reason FROM ra.dead_letters ORDER BY key;
SELECT level, runner, total, keys FROM ra.aggregates ORDER BY level, runner;
SELECT ingested, applied, duplicates, stale, dead_lettered FROM exactonce.pipelines WHERE name = 'ra';

-- refused
SELECT pg_temp.err($$SELECT * FROM exactonce.prune('rl', NULL)$$);
SELECT pg_temp.err($$SELECT * FROM exactonce.prune('nope', 1)$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err($$SELECT * FROM exactonce.prune('rl', 1)$$);
ROLLBACK;
CREATE ROLE regress_prune_other;
SET ROLE regress_prune_other;
SELECT pg_temp.err($$SELECT * FROM exactonce.prune('rl', 1000)$$);
RESET ROLE;
DROP ROLE regress_prune_other;

DROP VIEW rl_counters;
SELECT exactonce.drop_pipeline('rl'), exactonce.drop_pipeline('ra');
DROP EXTENSION exactonce;
