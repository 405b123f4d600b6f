-- test/pgtap/random_retention.sql
--
-- Retention against an oracle computed from the events as produced.  Keys
-- get versions that are times (1..1000); events come in ten chunks of one
-- hundred time units each, shuffled, with resends of the chunk before.
-- After each chunk the pipelines prune everything below 200 units ago,
-- which no resend reaches: the aggregates equal the oracle and nothing is
-- dead-lettered.  Then resends from long ago arrive: in latest mode those
-- of live keys are stale or duplicates, those of forgotten tombstoned keys
-- dead letters (they would otherwise come back to life), in accumulate mode
-- those of forgotten readings dead letters (they would otherwise count
-- twice); the aggregates do not move.
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(32);

SELECT lives_ok($$SELECT exactonce.create_pipeline('tap_rl', ARRAY['book', 'desk'])$$,
	'create a latest-mode pipeline');
SELECT lives_ok($$SELECT exactonce.create_pipeline('tap_ra', ARRAY['book', 'desk'], 'accumulate')$$,
	'create an accumulate-mode pipeline');

DO $$ BEGIN PERFORM setseed(0.31); END $$;

-- each key's versions: times, about every 60 units, some tombstones; one
-- key in four ends before 400 with a tombstone, which pruning forgets
CREATE TEMP TABLE distinct_events AS
SELECT format('k%s', k) AS key, v::bigint AS version,
	   round((random() * 100)::numeric, 2) AS value,
	   (ARRAY['b1', 'b2', 'b3'])[1 + floor(random() * 3)::int] AS book,
	   (ARRAY['d1', 'd2'])[1 + floor(random() * 2)::int] AS desk,
	   random() < 0.1 AS deleted
FROM generate_series(1, 1500) AS k,
	 LATERAL (SELECT DISTINCT (s + floor(random() * 60))::int AS v
			  FROM generate_series(1 + (k % 50), CASE WHEN k % 4 = 0 THEN 339 ELSE 999 END, 60) s) v;
UPDATE distinct_events e SET deleted = true
WHERE substr(key, 2)::int % 4 = 0 AND version = (SELECT max(version) FROM distinct_events l WHERE l.key = e.key);

-- chunk c: the versions of its hundred units, and resends of the chunk before
CREATE TEMP TABLE produced AS
SELECT e.*, 1 + least(e.version / 100, 9)::int AS chunk, random() AS arrival FROM distinct_events e
UNION ALL
SELECT e.*, 2 + least(e.version / 100, 8)::int, random() FROM distinct_events e
WHERE random() < 0.2 AND e.version < 900;

SELECT cmp_ok((SELECT count(*) FROM produced), '>=', 20000::bigint, 'generator: at least 20,000 events');

CREATE FUNCTION pg_temp.latest_oracle(c int) RETURNS TABLE (level int, book text, desk text, total numeric, keys bigint)
LANGUAGE sql AS $$
	SELECT 2 - (GROUPING(book) + GROUPING(desk)), book, desk, sum(value), count(*)
	FROM (SELECT DISTINCT ON (key) * FROM produced WHERE chunk <= c ORDER BY key, version DESC) l
	WHERE NOT deleted GROUP BY ROLLUP (book, desk)
$$;
CREATE FUNCTION pg_temp.accumulate_oracle(c int) RETURNS TABLE (level int, book text, desk text, total numeric, keys bigint)
LANGUAGE sql AS $$
	SELECT 2 - (GROUPING(book) + GROUPING(desk)), book, desk, sum(value), count(*)
	FROM (SELECT DISTINCT key, version, value, book, desk FROM produced WHERE chunk <= c) r
	GROUP BY ROLLUP (book, desk)
$$;

CREATE FUNCTION pg_temp.deliver_and_check()
RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
	FOR c IN 1..10 LOOP
		INSERT INTO tap_rl.ingest (key, version, value, book, desk, deleted)
		SELECT key, version, value, book, desk, deleted FROM produced WHERE chunk = c ORDER BY arrival;
		INSERT INTO tap_ra.ingest (key, version, value, book, desk)
		SELECT key, version, value, book, desk FROM produced WHERE chunk = c ORDER BY arrival;
		PERFORM exactonce.flush('tap_rl');
		PERFORM exactonce.flush('tap_ra');
		PERFORM exactonce.prune('tap_rl', c * 100 - 200);
		PERFORM exactonce.prune('tap_ra', c * 100 - 200);
		RETURN NEXT is_empty(format(
			$q$(SELECT level, book, desk, total, keys FROM tap_rl.aggregates EXCEPT ALL SELECT * FROM pg_temp.latest_oracle(%1$s))
			   UNION ALL (SELECT * FROM pg_temp.latest_oracle(%1$s) EXCEPT ALL SELECT level, book, desk, total, keys FROM tap_rl.aggregates)$q$, c),
			format('latest, pruned below %s: after chunk %s the aggregates equal the oracle', c * 100 - 200, c));
		RETURN NEXT is_empty(format(
			$q$(SELECT level, book, desk, total, keys FROM tap_ra.aggregates EXCEPT ALL SELECT * FROM pg_temp.accumulate_oracle(%1$s))
			   UNION ALL (SELECT * FROM pg_temp.accumulate_oracle(%1$s) EXCEPT ALL SELECT level, book, desk, total, keys FROM tap_ra.aggregates)$q$, c),
			format('accumulate, pruned below %s: after chunk %s the aggregates equal the oracle', c * 100 - 200, c));
	END LOOP;
END
$$;

SELECT * FROM pg_temp.deliver_and_check();

SELECT is((SELECT count(*) FROM tap_rl.dead_letters) + (SELECT count(*) FROM tap_ra.dead_letters), 0::bigint,
	'no resend within the horizon was dead-lettered');
SELECT cmp_ok((SELECT count(*) FROM tap_ra.seen), '<', (SELECT count(DISTINCT (key, version)) FROM produced),
	'accumulate: seen holds fewer readings than were applied');

-- resends from long ago: every version below 300 once more
CREATE TEMP TABLE old AS SELECT DISTINCT key, version, value, book, desk, deleted FROM produced WHERE version < 300;
CREATE TEMP TABLE before_rl AS SELECT level, book, desk, total, keys FROM tap_rl.aggregates;
CREATE TEMP TABLE before_ra AS SELECT level, book, desk, total, keys FROM tap_ra.aggregates;
CREATE TEMP TABLE forgotten_keys AS
SELECT DISTINCT o.key FROM old o WHERE NOT EXISTS (SELECT FROM tap_rl.state s WHERE s.key = o.key);
INSERT INTO tap_rl.ingest (key, version, value, book, desk, deleted) SELECT * FROM old;
INSERT INTO tap_ra.ingest (key, version, value, book, desk) SELECT key, version, value, book, desk FROM old;
SELECT ok(exactonce.flush('tap_rl') + exactonce.flush('tap_ra') > 0, 'the old resends are taken');

SELECT cmp_ok((SELECT count(*) FROM forgotten_keys), '>', 0::bigint, 'some resends are of keys whose tombstones were forgotten');
SELECT set_eq($$SELECT level, book, desk, total, keys FROM tap_rl.aggregates$$, $$SELECT * FROM before_rl$$,
	'latest: the resends from below the horizon do not move the aggregates');
SELECT set_eq($$SELECT key FROM tap_rl.dead_letters WHERE reason LIKE 'below the retention horizon%'$$,
	$$SELECT o.key FROM old o JOIN forgotten_keys f USING (key)$$,
	'latest: exactly the resends of forgotten keys are dead letters, with the reason');
SELECT set_eq($$SELECT level, book, desk, total, keys FROM tap_ra.aggregates$$, $$SELECT * FROM before_ra$$,
	'accumulate: the resends from below the horizon do not move the aggregates');
SELECT is((SELECT count(*) FROM tap_ra.dead_letters WHERE reason LIKE 'below the retention horizon%')
		  + (SELECT duplicates FROM exactonce.pipelines WHERE name = 'tap_ra')
		  - (SELECT count(*) FROM produced) + (SELECT count(DISTINCT (key, version)) FROM produced),
	(SELECT count(*) FROM old),
	'accumulate: each old resend is a duplicate or a dead letter');
SELECT ok((SELECT bool_and(ingested = applied + duplicates + stale + dead_lettered) FROM exactonce.pipelines
		   WHERE name IN ('tap_rl', 'tap_ra')), 'the accounting identity holds');

ROLLBACK;
