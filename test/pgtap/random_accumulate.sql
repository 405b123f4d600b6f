-- test/pgtap/random_accumulate.sql
--
-- Exactness of an 'accumulate' pipeline against an oracle computed from the
-- generated readings alone (never from the pipeline's state table).
--
-- About 5,000 keys, each with 1..21 readings (distinct versions with gaps)
-- whose dimensions may differ from one reading to the next (readings
-- "move").  Every reading carries an explicit event_time.  About 10% of the
-- readings are sent twice (exact copies).  Everything is delivered in random
-- order in eight chunks, with flushes between most of them, so that many
-- readings arrive after a higher version of their key was applied; they must
-- still be added.
--
-- Part 2 sends a few conflicting duplicates (an applied (key, version) with
-- other content) and a tombstone, which must go to dead_letters.
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(35);

SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_accumulate', ARRAY['region', 'user_id'], 'accumulate')$$,
	'create_pipeline tap_accumulate (accumulate; region, user_id)');

------------------------------------------------------------------------------
-- The generator (deterministic)
------------------------------------------------------------------------------

DO $$ BEGIN PERFORM setseed(-0.31415); END $$;

CREATE TEMP TABLE keyspace AS
SELECT CASE WHEN i % 11 = 0 THEN format('capteur-é-%s', i) ELSE format('s%s', i) END AS key,
	   1 + floor(random() * 21)::int AS nreadings,
	   (ARRAY['north', 'south', 'east', 'west'])[1 + floor(random() * 4)::int] AS region,
	   format('u%s', 1 + floor(random() * 200)::int) AS user_id
FROM generate_series(1, 5000) AS i;

-- One row per distinct reading (key, version).  30% of the readings of a key
-- are in another cell than its home cell.  event_time is random, unrelated
-- to the version.
CREATE TEMP TABLE readings AS
SELECT key, version, value,
	   CASE WHEN moved THEN (ARRAY['north', 'south', 'east', 'west'])[1 + floor(random() * 4)::int]
			ELSE home_region END AS region,
	   CASE WHEN moved THEN format('u%s', 1 + floor(random() * 200)::int)
			ELSE home_user_id END AS user_id,
	   event_time
FROM (SELECT k.key,
			 (i * 7 + floor(random() * 7))::bigint AS version,
			 round((random() * 200 - 100)::numeric, 2) AS value,
			 k.region AS home_region,
			 k.user_id AS home_user_id,
			 random() < 0.30 AS moved,
			 timestamptz '2024-01-01 00:00:00+00' + random() * interval '30 days' AS event_time
	  FROM keyspace AS k, generate_series(1, k.nreadings) AS i
	  OFFSET 0) AS s;

-- produced: the readings as delivered, ~10% exact copies (event_time
-- included), in random arrival order (ORDER BY random()), in eight chunks.
CREATE TEMP TABLE produced AS
WITH copies AS (
	SELECT * FROM readings
	UNION ALL
	SELECT * FROM readings WHERE random() < 0.10
), ordered AS (
	SELECT c.*, row_number() OVER (ORDER BY random()) AS arrival
	FROM copies AS c
)
SELECT o.*, (1 + (o.arrival - 1) * 8 / (SELECT count(*) FROM ordered))::int AS chunk
FROM ordered AS o;

-- The oracle: every distinct (key, version) counts once.
CREATE TEMP TABLE oracle_readings AS
SELECT DISTINCT key, version, value, region, user_id, event_time FROM produced;

CREATE TEMP TABLE oracle_agg AS
SELECT 2 - (GROUPING(region) + GROUPING(user_id)) AS level,
	   region, user_id, sum(value) AS total, count(*) AS keys
FROM oracle_readings
GROUP BY ROLLUP (region, user_id);

CREATE TEMP TABLE oracle_state AS
SELECT key COLLATE "C" AS key, max(version) AS version, sum(value) AS total, count(*) AS events,
	   min(event_time) AS first_event_time, max(event_time) AS last_event_time
FROM oracle_readings
GROUP BY key;

SELECT cmp_ok((SELECT count(*) FROM oracle_readings), '>=', 50000::bigint,
	'generator: at least 50,000 distinct readings');
SELECT is((SELECT count(*) FROM oracle_readings), (SELECT count(DISTINCT (key, version)) FROM produced),
	'generator: every copy of a reading has the same content');
SELECT cmp_ok((SELECT count(*) FROM produced) - (SELECT count(*) FROM oracle_readings),
	'>=', (SELECT count(*) / 20 FROM readings),
	'generator: about 10% exact duplicates');
SELECT cmp_ok((SELECT count(*) FROM (SELECT key FROM readings GROUP BY key
			   HAVING count(DISTINCT (region, user_id)) > 1) AS m), '>', 2000::bigint,
	'generator: readings of a key move between cells');
SELECT cmp_ok((SELECT count(*) FROM produced AS late
			   WHERE EXISTS (SELECT 1 FROM produced AS newer
							 WHERE newer.key = late.key AND newer.version > late.version
							   AND newer.chunk < late.chunk)), '>', 5000::bigint,
	'generator: many readings arrive in later chunks than higher versions of their key');

------------------------------------------------------------------------------
-- Delivery: eight chunks, flushes after chunks 1, 2, 4, 5, 7 and 8
------------------------------------------------------------------------------

INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, event_time)
SELECT key, version, value, region, user_id, event_time FROM produced WHERE chunk = 1 ORDER BY arrival;
SELECT is(exactonce.flush('tap_accumulate'), (SELECT count(*) FROM produced WHERE chunk = 1),
	'flush takes chunk 1');

INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, event_time)
SELECT key, version, value, region, user_id, event_time FROM produced WHERE chunk = 2 ORDER BY arrival;
SELECT is(exactonce.flush('tap_accumulate'), (SELECT count(*) FROM produced WHERE chunk = 2),
	'flush takes chunk 2');

INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, event_time)
SELECT key, version, value, region, user_id, event_time FROM produced WHERE chunk = 3 ORDER BY arrival;
INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, event_time)
SELECT key, version, value, region, user_id, event_time FROM produced WHERE chunk = 4 ORDER BY arrival;
SELECT is(exactonce.flush('tap_accumulate'), (SELECT count(*) FROM produced WHERE chunk IN (3, 4)),
	'flush takes chunks 3 and 4 (more than one batch)');

INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, event_time)
SELECT key, version, value, region, user_id, event_time FROM produced WHERE chunk = 5 ORDER BY arrival;
SELECT is(exactonce.flush('tap_accumulate'), (SELECT count(*) FROM produced WHERE chunk = 5),
	'flush takes chunk 5');

INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, event_time)
SELECT key, version, value, region, user_id, event_time FROM produced WHERE chunk = 6 ORDER BY arrival;
INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, event_time)
SELECT key, version, value, region, user_id, event_time FROM produced WHERE chunk = 7 ORDER BY arrival;
SELECT is(exactonce.flush('tap_accumulate'), (SELECT count(*) FROM produced WHERE chunk IN (6, 7)),
	'flush takes chunks 6 and 7 (more than one batch)');

INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, event_time)
SELECT key, version, value, region, user_id, event_time FROM produced WHERE chunk = 8 ORDER BY arrival;
SELECT is(exactonce.flush('tap_accumulate'), (SELECT count(*) FROM produced WHERE chunk = 8),
	'flush takes chunk 8');

SELECT results_eq(
	$$SELECT queued, staged FROM exactonce.pipelines WHERE name = 'tap_accumulate'$$,
	$$VALUES (0::bigint, 0::bigint)$$,
	'queue drained, nothing left staged');

------------------------------------------------------------------------------
-- Aggregates equal the oracle
------------------------------------------------------------------------------

SELECT results_eq(
	$$SELECT level, region, user_id, total, keys FROM tap_accumulate.aggregates
	  ORDER BY level, region COLLATE "C", user_id COLLATE "C"$$,
	$$SELECT level, region, user_id, total, keys FROM oracle_agg
	  ORDER BY level, region COLLATE "C", user_id COLLATE "C"$$,
	'aggregates equal the oracle, row for row');

SELECT is_empty(
	$$SELECT level, region, user_id, total, keys FROM tap_accumulate.aggregates
	  EXCEPT ALL
	  SELECT level, region, user_id, total, keys FROM oracle_agg$$,
	'aggregates: no row that the oracle lacks');

SELECT is_empty(
	$$SELECT level, region, user_id, total, keys FROM oracle_agg
	  EXCEPT ALL
	  SELECT level, region, user_id, total, keys FROM tap_accumulate.aggregates$$,
	'aggregates: no oracle row missing');

SELECT results_eq(
	$$SELECT total, keys FROM tap_accumulate.aggregates WHERE level = 0$$,
	$$SELECT sum(value), count(*) FROM oracle_readings$$,
	'grand total: sum and count of the distinct readings');

------------------------------------------------------------------------------
-- State: each key's running context
------------------------------------------------------------------------------

SELECT is((SELECT count(*) FROM tap_accumulate.state), (SELECT count(*) FROM oracle_state),
	'state has one row per key');

SELECT results_eq(
	$$SELECT key, total, events FROM tap_accumulate.state ORDER BY key$$,
	$$SELECT key, total, events FROM oracle_state ORDER BY key$$,
	'state: total and events = sum and count of the key''s distinct readings');

SELECT results_eq(
	$$SELECT key, version FROM tap_accumulate.state ORDER BY key$$,
	$$SELECT key, version FROM oracle_state ORDER BY key$$,
	'state: version = the key''s highest version');

SELECT results_eq(
	$$SELECT key, first_event_time, last_event_time FROM tap_accumulate.state ORDER BY key$$,
	$$SELECT key, first_event_time, last_event_time FROM oracle_state ORDER BY key$$,
	'state: first/last_event_time = min/max event_time of the key''s readings');

SELECT bag_eq(
	$$SELECT key, version FROM tap_accumulate.seen$$,
	$$SELECT key COLLATE "C", version FROM oracle_readings$$,
	'seen: one row per distinct reading');

------------------------------------------------------------------------------
-- Accounting
------------------------------------------------------------------------------

SELECT is(ingested, applied + duplicates + stale + dead_lettered,
	'ingested = applied + duplicates + stale + dead_lettered')
FROM exactonce.pipelines WHERE name = 'tap_accumulate';

SELECT is(ingested, (SELECT count(*) FROM produced), 'ingested = number of events produced')
FROM exactonce.pipelines WHERE name = 'tap_accumulate';

SELECT is(applied, (SELECT count(*) FROM oracle_readings), 'applied = number of distinct readings')
FROM exactonce.pipelines WHERE name = 'tap_accumulate';

SELECT is(duplicates, (SELECT count(*) FROM produced) - (SELECT count(*) FROM oracle_readings),
	'duplicates = number of repeated copies')
FROM exactonce.pipelines WHERE name = 'tap_accumulate';

SELECT is(stale + dead_lettered, 0::bigint, 'nothing stale, nothing dead-lettered')
FROM exactonce.pipelines WHERE name = 'tap_accumulate';

SELECT is_empty($$SELECT * FROM tap_accumulate.dead_letters$$, 'dead_letters is empty');

SELECT diag(format('%s events (%s distinct) over %s keys; pipeline counted %s applied, %s duplicates; %s cells',
	(SELECT count(*) FROM produced), (SELECT count(DISTINCT (key, version)) FROM produced),
	(SELECT count(DISTINCT key) FROM produced), applied, duplicates,
	(SELECT count(*) FROM tap_accumulate.aggregates)))
FROM exactonce.pipelines WHERE name = 'tap_accumulate';

------------------------------------------------------------------------------
-- Part 2: conflicting duplicates and a tombstone go to dead_letters
------------------------------------------------------------------------------

-- Applied readings sent again with other content: another value (an old
-- version and a newest version), other dimensions; and a tombstone, which
-- accumulate mode does not take.
CREATE TEMP TABLE conflicts AS
WITH r AS (
	SELECT o.*, row_number() OVER (ORDER BY o.key COLLATE "C", o.version) AS n,
		   o.version = max(o.version) OVER (PARTITION BY o.key) AS newest
	FROM oracle_readings AS o
), oldest AS (
	SELECT DISTINCT ON (key) * FROM r ORDER BY key, version
)
SELECT key, version, value + 0.5 AS value, region, user_id, false AS deleted, event_time
FROM (SELECT * FROM oldest WHERE NOT newest ORDER BY n LIMIT 1) AS a
UNION ALL
SELECT key, version, value - 0.5, region, user_id, false, event_time
FROM (SELECT * FROM r WHERE newest ORDER BY n OFFSET 10 LIMIT 1) AS b
UNION ALL
SELECT key, version, value, CASE WHEN region = 'north' THEN 'south' ELSE 'north' END, user_id,
	   false, event_time
FROM (SELECT * FROM r ORDER BY n OFFSET 20 LIMIT 1) AS c
UNION ALL
SELECT 'tombstone-key', 1, 1, 'north', 'u1', true, timestamptz '2024-02-01 00:00:00+00';

CREATE TEMP TABLE counters_before AS
SELECT ingested, applied, duplicates, stale, dead_lettered
FROM exactonce.pipelines WHERE name = 'tap_accumulate';

INSERT INTO tap_accumulate.ingest (key, version, value, region, user_id, deleted, event_time)
SELECT key, version, value, region, user_id, deleted, event_time FROM conflicts ORDER BY random();

SELECT is(exactonce.flush('tap_accumulate'), 4::bigint, 'flush takes 3 conflicts and a tombstone');

SELECT bag_eq(
	$$SELECT key, version, value, region, user_id, deleted, event_time FROM tap_accumulate.dead_letters$$,
	$$SELECT key, version, value, region, user_id, deleted, event_time FROM conflicts$$,
	'each of them is in dead_letters, as sent');

SELECT is_empty(
	$$SELECT * FROM tap_accumulate.dead_letters
	  WHERE reason IS NULL OR (NOT deleted AND reason !~ 'conflicting duplicate')
		 OR (deleted AND reason !~ 'tombstone')$$,
	'each dead letter has its reason');

SELECT results_eq(
	$$SELECT level, region, user_id, total, keys FROM tap_accumulate.aggregates
	  ORDER BY level, region COLLATE "C", user_id COLLATE "C"$$,
	$$SELECT level, region, user_id, total, keys FROM oracle_agg
	  ORDER BY level, region COLLATE "C", user_id COLLATE "C"$$,
	'aggregates are unchanged by them');

SELECT results_eq(
	$$SELECT key, version, total, events, first_event_time, last_event_time
	  FROM tap_accumulate.state ORDER BY key$$,
	$$SELECT key, version, total, events, first_event_time, last_event_time
	  FROM oracle_state ORDER BY key$$,
	'state is unchanged by them');

SELECT results_eq(
	$$SELECT p.ingested - b.ingested, p.applied - b.applied, p.duplicates - b.duplicates,
			 p.stale - b.stale, p.dead_lettered - b.dead_lettered
	  FROM exactonce.pipelines AS p, counters_before AS b WHERE p.name = 'tap_accumulate'$$,
	$$VALUES (4::bigint, 0::bigint, 0::bigint, 0::bigint, 4::bigint)$$,
	'counters: 4 ingested, 4 dead-lettered');

SELECT is(ingested, applied + duplicates + stale + dead_lettered,
	'ingested = applied + duplicates + stale + dead_lettered, after the conflicts')
FROM exactonce.pipelines WHERE name = 'tap_accumulate';

SELECT * FROM finish();
ROLLBACK;
