-- test/pgtap/random_latest.sql
--
-- Exactness of a 'latest' pipeline against an oracle computed from the
-- generated events alone (never from the pipeline's state table).
--
-- About 5,000 keys, each with 0..22 versions: versions sometimes move the key
-- to another cell, sometimes are tombstones, and a later version may bring a
-- deleted key back.  About 10% of the events are sent twice (exact copies,
-- so duplicates and not conflicts).  Everything is delivered in random order,
-- in eight chunks, with flushes between most of them, so that stale versions
-- arrive after newer ones were applied, in a later batch or a later flush.
--
-- Part 2 sends a handful of conflicting duplicates (same key and version as
-- the key's applied version, other content), which must go to dead_letters
-- and leave aggregates and state alone.
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(37);

SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_latest',
		ARRAY['risk_type', 'region', 'trade_desk'], 'latest')$$,
	'create_pipeline tap_latest (latest; risk_type, region, trade_desk)');

------------------------------------------------------------------------------
-- The generator (deterministic)
------------------------------------------------------------------------------

DO $$ BEGIN PERFORM setseed(0.20240501); END $$;

-- Each key: a number of versions in 0..22 and a home cell.  Some key names
-- are not ASCII and key lengths vary, so byte order differs from collation
-- order and from length order; some share a prefix longer than the eight
-- bytes the state stage sorts by first, and some are prefixes of others.
CREATE TEMP TABLE keyspace AS
SELECT CASE WHEN i % 7 = 0 THEN format('κλειδί-%s', i)
			WHEN i % 5 = 0 THEN format('settlement-account-%s', i)
			WHEN i % 3 = 0 THEN format('settlement-account-%s-%s', i / 3, repeat('x', i % 4))
			ELSE format('k%s', i) END AS key,
	   floor(random() * 23)::int AS nversions,
	   (ARRAY['IR', 'FX', 'EQ', 'Crédit', 'CM'])[1 + floor(random() * 5)::int] AS risk_type,
	   (ARRAY['EMEA', 'APAC', 'AMER', 'LATAM'])[1 + floor(random() * 4)::int] AS region,
	   format('desk_%s', lpad((1 + floor(random() * 12))::int::text, 2, '0')) AS trade_desk
FROM generate_series(1, 5000) AS i;

-- One row per (key, version).  Versions of a key strictly increase with i
-- but have gaps; 25% of versions move the key to a random cell (sometimes
-- back home), 12% are tombstones; values have two decimals, either sign.
CREATE TEMP TABLE distinct_events AS
SELECT key, version, value,
	   CASE WHEN moved THEN (ARRAY['IR', 'FX', 'EQ', 'Crédit', 'CM'])[1 + floor(random() * 5)::int]
			ELSE home_risk_type END AS risk_type,
	   CASE WHEN moved THEN (ARRAY['EMEA', 'APAC', 'AMER', 'LATAM'])[1 + floor(random() * 4)::int]
			ELSE home_region END AS region,
	   CASE WHEN moved THEN format('desk_%s', lpad((1 + floor(random() * 12))::int::text, 2, '0'))
			ELSE home_trade_desk END AS trade_desk,
	   deleted
FROM (SELECT k.key,
			 (i * 10 + floor(random() * 10))::bigint AS version,
			 round((random() * 2000 - 1000)::numeric, 2) AS value,
			 k.risk_type AS home_risk_type,
			 k.region AS home_region,
			 k.trade_desk AS home_trade_desk,
			 random() < 0.25 AS moved,
			 random() < 0.12 AS deleted
	  FROM keyspace AS k, generate_series(1, k.nversions) AS i
	  OFFSET 0) AS s;

-- produced: the events as delivered, ~10% exact copies, in random arrival
-- order (ORDER BY random()), cut into eight chunks.
CREATE TEMP TABLE produced AS
WITH copies AS (
	SELECT * FROM distinct_events
	UNION ALL
	SELECT * FROM distinct_events WHERE random() < 0.10
), ordered AS (
	SELECT c.*, row_number() OVER (ORDER BY random()) AS arrival
	FROM copies AS c
)
SELECT o.*, (1 + (o.arrival - 1) * 8 / (SELECT count(*) FROM ordered))::int AS chunk
FROM ordered AS o;

-- The oracle: each key's highest version; tombstones contribute nothing.
CREATE TEMP TABLE oracle_latest AS
SELECT DISTINCT ON (key) key, version, value, risk_type, region, trade_desk, deleted
FROM produced
ORDER BY key, version DESC;

CREATE TEMP TABLE oracle_agg AS
SELECT 3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)) AS level,
	   risk_type, region, trade_desk, sum(value) AS total, count(*) AS keys
FROM oracle_latest
WHERE NOT deleted
GROUP BY ROLLUP (risk_type, region, trade_desk);

-- The generator does what the test needs.
SELECT cmp_ok((SELECT count(*) FROM produced), '>=', 50000::bigint,
	'generator: at least 50,000 events');
SELECT cmp_ok((SELECT count(DISTINCT key) FROM produced), '>=', 4500::bigint,
	'generator: about 5,000 keys have events');
SELECT cmp_ok((SELECT count(*) - count(DISTINCT (key, version)) FROM produced),
	'>=', (SELECT count(*) / 20 FROM distinct_events),
	'generator: about 10% exact duplicates');
SELECT is((SELECT count(*) FROM (SELECT DISTINCT * FROM (SELECT key, version, value, risk_type,
			region, trade_desk, deleted FROM produced) AS p) AS d),
	(SELECT count(DISTINCT (key, version)) FROM produced),
	'generator: every copy of a (key, version) has the same content');
SELECT cmp_ok((SELECT count(*) FROM oracle_latest WHERE deleted), '>', 100::bigint,
	'generator: keys whose highest version is a tombstone');
SELECT cmp_ok((SELECT count(DISTINCT a.key) FROM distinct_events AS a
			   JOIN distinct_events AS b ON b.key = a.key AND b.version > a.version
			   WHERE a.deleted AND NOT b.deleted), '>', 100::bigint,
	'generator: keys deleted and later resurrected');
SELECT cmp_ok((SELECT count(*) FROM (SELECT key FROM distinct_events GROUP BY key
			   HAVING count(DISTINCT (risk_type, region, trade_desk)) > 1) AS m), '>', 1000::bigint,
	'generator: keys that move between cells');
SELECT cmp_ok((SELECT count(*) FROM produced AS late
			   WHERE EXISTS (SELECT 1 FROM produced AS newer
							 WHERE newer.key = late.key AND newer.version > late.version
							   AND newer.chunk < late.chunk)), '>', 5000::bigint,
	'generator: stale versions arrive in later chunks than newer ones');

------------------------------------------------------------------------------
-- Delivery: eight chunks, flushes after chunks 1, 2, 4, 5, 7 and 8
------------------------------------------------------------------------------

INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM produced WHERE chunk = 1 ORDER BY arrival;
SELECT is(exactonce.flush('tap_latest'), (SELECT count(*) FROM produced WHERE chunk = 1),
	'flush takes chunk 1');

INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM produced WHERE chunk = 2 ORDER BY arrival;
SELECT is(exactonce.flush('tap_latest'), (SELECT count(*) FROM produced WHERE chunk = 2),
	'flush takes chunk 2');

INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM produced WHERE chunk = 3 ORDER BY arrival;
INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM produced WHERE chunk = 4 ORDER BY arrival;
SELECT is(exactonce.flush('tap_latest'), (SELECT count(*) FROM produced WHERE chunk IN (3, 4)),
	'flush takes chunks 3 and 4 (more than one batch)');

INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM produced WHERE chunk = 5 ORDER BY arrival;
SELECT is(exactonce.flush('tap_latest'), (SELECT count(*) FROM produced WHERE chunk = 5),
	'flush takes chunk 5');

INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM produced WHERE chunk = 6 ORDER BY arrival;
INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM produced WHERE chunk = 7 ORDER BY arrival;
SELECT is(exactonce.flush('tap_latest'), (SELECT count(*) FROM produced WHERE chunk IN (6, 7)),
	'flush takes chunks 6 and 7 (more than one batch)');

INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM produced WHERE chunk = 8 ORDER BY arrival;
SELECT is(exactonce.flush('tap_latest'), (SELECT count(*) FROM produced WHERE chunk = 8),
	'flush takes chunk 8');

SELECT is(exactonce.flush('tap_latest'), 0::bigint, 'a flush of an empty queue takes nothing');

SELECT results_eq(
	$$SELECT queued, staged FROM exactonce.pipelines WHERE name = 'tap_latest'$$,
	$$VALUES (0::bigint, 0::bigint)$$,
	'queue drained, nothing left staged');

------------------------------------------------------------------------------
-- Aggregates equal the oracle
------------------------------------------------------------------------------

SELECT results_eq(
	$$SELECT level, risk_type, region, trade_desk, total, keys FROM tap_latest.aggregates
	  ORDER BY level, risk_type COLLATE "C", region COLLATE "C", trade_desk COLLATE "C"$$,
	$$SELECT level, risk_type, region, trade_desk, total, keys FROM oracle_agg
	  ORDER BY level, risk_type COLLATE "C", region COLLATE "C", trade_desk COLLATE "C"$$,
	'aggregates equal the oracle, row for row');

SELECT is_empty(
	$$SELECT level, risk_type, region, trade_desk, total, keys FROM tap_latest.aggregates
	  EXCEPT ALL
	  SELECT level, risk_type, region, trade_desk, total, keys FROM oracle_agg$$,
	'aggregates: no row that the oracle lacks');

SELECT is_empty(
	$$SELECT level, risk_type, region, trade_desk, total, keys FROM oracle_agg
	  EXCEPT ALL
	  SELECT level, risk_type, region, trade_desk, total, keys FROM tap_latest.aggregates$$,
	'aggregates: no oracle row missing');

SELECT results_eq(
	$$SELECT level, count(*) FROM tap_latest.aggregates GROUP BY level ORDER BY level$$,
	$$SELECT level, count(*) FROM oracle_agg GROUP BY level ORDER BY level$$,
	'aggregates: as many cells per level as the oracle');

------------------------------------------------------------------------------
-- State: one row per key, at its highest version
------------------------------------------------------------------------------

SELECT is((SELECT count(*) FROM tap_latest.state), (SELECT count(DISTINCT key) FROM produced),
	'state has one row per key that had events');

SELECT results_eq(
	$$SELECT key, version, value, risk_type, region, trade_desk, deleted
	  FROM tap_latest.state ORDER BY key COLLATE "C"$$,
	$$SELECT key COLLATE "C", version, value, risk_type, region, trade_desk, deleted
	  FROM oracle_latest ORDER BY key COLLATE "C"$$,
	'state holds each key''s highest version, tombstones included');

------------------------------------------------------------------------------
-- Accounting
------------------------------------------------------------------------------

SELECT is(ingested, applied + duplicates + stale + dead_lettered,
	'ingested = applied + duplicates + stale + dead_lettered')
FROM exactonce.pipelines WHERE name = 'tap_latest';

SELECT is(ingested, (SELECT count(*) FROM produced), 'ingested = number of events produced')
FROM exactonce.pipelines WHERE name = 'tap_latest';

SELECT is(dead_lettered, 0::bigint, 'no dead letters from exact duplicates')
FROM exactonce.pipelines WHERE name = 'tap_latest';

SELECT is_empty($$SELECT * FROM tap_latest.dead_letters$$, 'dead_letters is empty');

SELECT cmp_ok(stale, '>', 0::bigint, 'stale versions were seen (late arrivals after newer ones)')
FROM exactonce.pipelines WHERE name = 'tap_latest';

SELECT cmp_ok(duplicates, '>', 0::bigint, 'duplicates were seen')
FROM exactonce.pipelines WHERE name = 'tap_latest';

SELECT cmp_ok(applied, '>=', (SELECT count(DISTINCT key) FROM produced),
	'at least one applied event per key')
FROM exactonce.pipelines WHERE name = 'tap_latest';

SELECT diag(format('%s events (%s distinct) over %s keys; pipeline counted %s applied, %s duplicates, %s stale; %s cells',
	(SELECT count(*) FROM produced), (SELECT count(DISTINCT (key, version)) FROM produced),
	(SELECT count(DISTINCT key) FROM produced), applied, duplicates, stale,
	(SELECT count(*) FROM tap_latest.aggregates)))
FROM exactonce.pipelines WHERE name = 'tap_latest';

------------------------------------------------------------------------------
-- Part 2: conflicting duplicates go to dead_letters and change nothing
------------------------------------------------------------------------------

-- Same key and version as the key's applied (highest) version, other
-- content: four with another value, one with other dimensions, one turned
-- into a tombstone.
CREATE TEMP TABLE conflicts AS
WITH live AS (
	SELECT *, row_number() OVER (ORDER BY key COLLATE "C") AS n
	FROM oracle_latest WHERE NOT deleted
)
SELECT key, version,
	   CASE WHEN n <= 4 THEN value + (n * 0.01 - 1000) ELSE value END AS value,
	   CASE WHEN n = 5 THEN CASE WHEN risk_type = 'IR' THEN 'FX' ELSE 'IR' END
			ELSE risk_type END AS risk_type,
	   region, trade_desk,
	   n = 6 AS deleted
FROM live WHERE n <= 6;

-- Sent along with them: an exact duplicate of an applied version and a stale
-- version with other content; neither is a conflict.
CREATE TEMP TABLE others AS
SELECT key, version, value, risk_type, region, trade_desk, deleted, 'duplicate' AS kind
FROM (SELECT * FROM oracle_latest WHERE NOT deleted ORDER BY key COLLATE "C" OFFSET 6 LIMIT 1) AS d
UNION ALL
SELECT key, version, value + 1, risk_type, region, trade_desk, deleted, 'stale'
FROM (SELECT e.* FROM distinct_events AS e
	  JOIN oracle_latest AS o ON o.key = e.key AND o.version > e.version AND NOT o.deleted
	  ORDER BY e.key COLLATE "C", e.version LIMIT 1) AS s;

CREATE TEMP TABLE counters_before AS
SELECT ingested, applied, duplicates, stale, dead_lettered
FROM exactonce.pipelines WHERE name = 'tap_latest';

INSERT INTO tap_latest.ingest (key, version, value, risk_type, region, trade_desk, deleted)
SELECT key, version, value, risk_type, region, trade_desk, deleted
FROM (SELECT key, version, value, risk_type, region, trade_desk, deleted FROM conflicts
	  UNION ALL
	  SELECT key, version, value, risk_type, region, trade_desk, deleted FROM others) AS x
ORDER BY random();

SELECT is(exactonce.flush('tap_latest'), 8::bigint, 'flush takes the 6 conflicts and 2 others');

SELECT bag_eq(
	$$SELECT key, version, value, risk_type, region, trade_desk, deleted FROM tap_latest.dead_letters$$,
	$$SELECT key, version, value, risk_type, region, trade_desk, deleted FROM conflicts$$,
	'each conflicting duplicate is in dead_letters, as sent, and nothing else is');

SELECT is_empty(
	$$SELECT * FROM tap_latest.dead_letters
	  WHERE reason IS NULL OR reason !~ 'conflicting duplicate' OR reason !~ version::text$$,
	'each dead letter says it conflicts with the applied version');

SELECT results_eq(
	$$SELECT level, risk_type, region, trade_desk, total, keys FROM tap_latest.aggregates
	  ORDER BY level, risk_type COLLATE "C", region COLLATE "C", trade_desk COLLATE "C"$$,
	$$SELECT level, risk_type, region, trade_desk, total, keys FROM oracle_agg
	  ORDER BY level, risk_type COLLATE "C", region COLLATE "C", trade_desk COLLATE "C"$$,
	'aggregates are unchanged by conflicts, duplicates and stale versions');

SELECT results_eq(
	$$SELECT key, version, value, risk_type, region, trade_desk, deleted
	  FROM tap_latest.state ORDER BY key COLLATE "C"$$,
	$$SELECT key COLLATE "C", version, value, risk_type, region, trade_desk, deleted
	  FROM oracle_latest ORDER BY key COLLATE "C"$$,
	'state is unchanged by them');

SELECT results_eq(
	$$SELECT p.ingested - b.ingested, p.applied - b.applied, p.duplicates - b.duplicates,
			 p.stale - b.stale, p.dead_lettered - b.dead_lettered
	  FROM exactonce.pipelines AS p, counters_before AS b WHERE p.name = 'tap_latest'$$,
	$$VALUES (8::bigint, 0::bigint, 1::bigint, 1::bigint, 6::bigint)$$,
	'counters: 8 ingested, 0 applied, 1 duplicate, 1 stale, 6 dead-lettered');

SELECT is(ingested, applied + duplicates + stale + dead_lettered,
	'ingested = applied + duplicates + stale + dead_lettered, after the conflicts')
FROM exactonce.pipelines WHERE name = 'tap_latest';

SELECT * FROM finish();
ROLLBACK;
