-- accumulate mode: every distinct (key, version) adds once, in any order.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('runs', ARRAY['region', 'user_id'], 'accumulate');
CREATE VIEW cells AS
SELECT level, region, user_id, total, keys FROM runs.aggregates
ORDER BY level, region NULLS FIRST, user_id NULLS FIRST;
CREATE VIEW counters AS
SELECT ingested, applied, duplicates, stale, dead_lettered,
	   ingested = applied + duplicates + stale + dead_lettered AS identity
FROM exactonce.pipelines WHERE name = 'runs';

-- readings 1, 3 and 5 of run r1, a duplicate of 3, a reading of r2
INSERT INTO runs.ingest (key, version, value, region, user_id, event_time) VALUES
	('r1', 1, 199, 'eu', 'u1', '2026-01-01 10:00:30+00'),
	('r1', 3, 201, 'eu', 'u1', '2026-01-01 10:01:30+00'),
	('r1', 3, 201, 'eu', 'u1', '2026-01-01 10:01:31+00'),
	('r1', 5, 180, 'eu', 'u1', '2026-01-01 10:02:30+00'),
	('r2', 1, 50.5, 'us', 'u2', '2026-01-01 11:00:00+00');
SELECT exactonce.flush('runs');
SELECT * FROM cells;
SELECT key, version, total, events, first_event_time, last_event_time FROM runs.state ORDER BY key;

-- late readings 2 and 4 are added, not dropped; the running context stays right
INSERT INTO runs.ingest (key, version, value, region, user_id, event_time) VALUES
	('r1', 4, 190, 'eu', 'u1', '2026-01-01 10:02:00+00'),
	('r1', 2, 200, 'eu', 'u1', '2026-01-01 10:01:00+00'),
	('r1', 0, 10, 'eu', 'u1', '2026-01-01 10:00:00+00');
SELECT exactonce.flush('runs');
SELECT * FROM cells;
SELECT key, version, total, events, first_event_time, last_event_time FROM runs.state ORDER BY key;

-- repeats of old readings are duplicates, even long after; with other content
-- they are dead letters
INSERT INTO runs.ingest (key, version, value, region, user_id) VALUES
	('r1', 1, 199, 'eu', 'u1'),
	('r1', 1, 199.00, 'eu', 'u1'),
	('r1', 2, 999, 'eu', 'u1'),
	('r1', 3, 201, 'us', 'u1');
SELECT exactonce.flush('runs');
SELECT key, version, value, region, reason FROM runs.dead_letters ORDER BY version;
SELECT * FROM counters;
SELECT * FROM cells;

-- a reading may land in another cell than the run's earlier readings
INSERT INTO runs.ingest (key, version, value, region, user_id) VALUES
	('r2', 2, 49.5, 'eu', 'u2');
SELECT exactonce.flush('runs');
SELECT * FROM cells;

-- the same pair twice within one batch, once with other content
INSERT INTO runs.ingest (key, version, value, region, user_id) VALUES
	('r3', 7, 1, 'eu', 'u3'),
	('r3', 7, 1, 'eu', 'u3'),
	('r3', 7, 2, 'eu', 'u3');
SELECT exactonce.flush('runs');
SELECT key, version, total, events FROM runs.state WHERE key = 'r3';

-- tombstones have no meaning here: dead letters with a reason
INSERT INTO runs.ingest (key, version, value, region, user_id, deleted) VALUES
	('r1', 9, 0, 'eu', 'u1', true);
SELECT exactonce.flush('runs');
SELECT key, version, reason FROM runs.dead_letters WHERE version = 9;

-- aggregates equal the sum over distinct readings, from seen
SELECT count(*) AS mismatches FROM (
	SELECT level, total, keys FROM runs.aggregates WHERE level = 0
	EXCEPT SELECT 0, sum(total), sum(events) FROM runs.state) m;
SELECT count(*) AS seen_rows FROM runs.seen;
SELECT * FROM counters;

DROP VIEW cells, counters;
SELECT exactonce.drop_pipeline('runs');
DROP EXTENSION exactonce;
