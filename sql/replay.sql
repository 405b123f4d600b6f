-- replay_dead_letters(): dead letters sent back through the stages once
-- their cause is fixed, exactly once, with the counters moving from
-- dead_lettered to applied; replayed unfixed, they come back with their
-- reason; replayed twice, nothing changes.
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

SELECT exactonce.create_pipeline('rp', ARRAY['desk']);
CREATE VIEW counters AS
SELECT ingested, applied, duplicates, stale, dead_lettered,
	   ingested = applied + duplicates + stale + dead_lettered AS identity
FROM exactonce.pipelines WHERE name = 'rp';

-- a NaN, a value too large, and a conflicting duplicate
INSERT INTO rp.ingest (key, version, value, desk) VALUES
	('a', 1, 10, 'd1'), ('b', 1, 'NaN', 'd1'), ('c', 1, 1e1000, 'd2'), ('d', 1, 4, 'd2');
SELECT exactonce.flush('rp');
INSERT INTO rp.ingest (key, version, value, desk) VALUES ('d', 1, 5, 'd2');
SELECT exactonce.flush('rp');
SELECT key, version, desk, reason FROM rp.dead_letters ORDER BY key;
SELECT * FROM counters;

-- unfixed, each comes back with its reason
SELECT * FROM exactonce.replay_dead_letters('rp');
SELECT key, version, desk, reason FROM rp.dead_letters ORDER BY key;
SELECT * FROM counters;

-- fixed: NaN corrected, the large value scaled, the duplicate made a new
-- version; the producer also resent b, corrected, into the queue
INSERT INTO rp.ingest (key, version, value, desk) VALUES ('b', 1, 20, 'd1');
SELECT exactonce.flush('rp');
UPDATE rp.dead_letters SET value = 20 WHERE key = 'b';
SELECT * FROM exactonce.replay_dead_letters('rp', $$key = 'b'$$);
SELECT * FROM exactonce.replay_dead_letters('rp', $$key = 'b'$$) AS again;
UPDATE rp.dead_letters SET value = 3 WHERE key = 'c';
UPDATE rp.dead_letters SET version = 2 WHERE key = 'd';
SELECT * FROM exactonce.replay_dead_letters('rp', $$reason LIKE 'value is%' OR version = 2 -- all the rest$$);
SELECT count(*) AS dead_letters FROM rp.dead_letters;
SELECT * FROM counters;
-- the oracle: each key's latest version as finally sent
WITH latest AS (SELECT DISTINCT ON (key) * FROM (VALUES ('a', 1, 10, 'd1'), ('b', 1, 20, 'd1'),
		('c', 1, 3, 'd2'), ('d', 2, 5, 'd2')) e(key, version, value, desk) ORDER BY key, version DESC),
oracle AS (SELECT 1 - GROUPING(desk) AS level, desk, sum(value) AS total, count(*) AS keys
		   FROM latest GROUP BY ROLLUP (desk))
SELECT count(*) AS mismatches FROM (
	(SELECT level, desk, total, keys FROM rp.aggregates EXCEPT SELECT * FROM oracle)
	UNION ALL (SELECT * FROM oracle EXCEPT SELECT level, desk, total, keys FROM rp.aggregates)) m;
SELECT * FROM exactonce.replay_dead_letters('rp') AS nothing_left;

-- rows without a whole event are skipped, and stay
INSERT INTO rp.dead_letters (key, version, value, desk, deleted, event_time, reason)
VALUES (NULL, 1, 1, 'd1', false, now(), 'no key'), ('e', 1, 1, 'd1', NULL, NULL, 'by hand');
SELECT * FROM exactonce.replay_dead_letters('rp');
SELECT count(*) AS kept FROM rp.dead_letters;
SELECT * FROM counters;

-- accumulate mode: a tombstone is a dead letter there; made a reading, it
-- is added once
SELECT exactonce.create_pipeline('ra', ARRAY['runner'], 'accumulate');
INSERT INTO ra.ingest (key, version, value, runner, deleted) VALUES
	('r1', 1, 100, 'ann', false), ('r1', 2, 50, 'ann', true);
SELECT exactonce.flush('ra');
SELECT key, version, reason FROM ra.dead_letters;
UPDATE ra.dead_letters SET deleted = false;
SELECT * FROM exactonce.replay_dead_letters('ra');
INSERT INTO ra.ingest (key, version, value, runner) VALUES ('r1', 2, 50, 'ann');
SELECT exactonce.flush('ra');
SELECT level, runner, total, keys FROM ra.aggregates ORDER BY level, runner;
SELECT ingested, applied, duplicates, stale, dead_lettered FROM exactonce.pipelines WHERE name = 'ra';

-- refused
SELECT pg_temp.err($$SELECT exactonce.replay_dead_letters('rp', 'true; DELETE FROM rp.state')$$);
SELECT pg_temp.err($$SELECT exactonce.replay_dead_letters('rp', 'nope = 1')$$);
SELECT pg_temp.err($$SELECT exactonce.replay_dead_letters(NULL)$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err($$SELECT exactonce.replay_dead_letters('rp')$$);
ROLLBACK;
CREATE ROLE regress_replay_other;
SET ROLE regress_replay_other;
SELECT pg_temp.err($$SELECT exactonce.replay_dead_letters('rp')$$);
RESET ROLE;
DROP ROLE regress_replay_other;

DROP VIEW counters;
SELECT exactonce.drop_pipeline('rp'), exactonce.drop_pipeline('ra');
DROP EXTENSION exactonce;
