-- test/pgtap/once_offsets.sql
--
-- Source offsets, rule by rule:
--
--	 exactonce.ingest(pipeline, source, events, offsets)	-> events queued
--	 exactonce.committed_offset(pipeline, source)			-> bigint
--	 exactonce.reset_source(pipeline, source, offset)		-> previous offset
--
-- plus a randomized consumer: 6,000 events in 3 partitions delivered in
-- random batches, with replays (a crash before the consumer recorded its
-- progress) and rewinds (overlapping ranges), then drained and compared with
-- an oracle.  Two consumers racing on one source are in
-- test/isolation/specs/ingest_race.spec, a crashing C consumer in test/t/014_consumer.pl.
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(50);

SELECT has_function('exactonce', 'ingest', ARRAY['text', 'text', 'anyarray', 'bigint[]'], 'ingest(pipeline, source, events, offsets) exists');
SELECT function_returns('exactonce', 'ingest', ARRAY['text', 'text', 'anyarray', 'bigint[]'], 'bigint', 'ingest() returns bigint');
SELECT has_function('exactonce', 'committed_offset', ARRAY['text', 'text'], 'committed_offset(pipeline, source) exists');
SELECT has_function('exactonce', 'reset_source', ARRAY['text', 'text', 'bigint'], 'reset_source(pipeline, source, offset) exists');
SELECT table_privs_are('exactonce', 'source_offset', 'public', ARRAY[]::text[], 'PUBLIC has no privilege on the offsets');
SELECT fk_ok('exactonce', 'source_offset', 'pipeline_id', 'exactonce', 'pipeline', 'id', 'offsets belong to a pipeline');

SELECT lives_ok($$SELECT exactonce.create_pipeline('tap_off', ARRAY['a', 'b'])$$, 'create_pipeline tap_off');

-- ev(lo, hi): events at offsets lo..hi of a toy partition; off is ignored
CREATE TEMP TABLE toy AS
SELECT g::bigint AS off, 'k' || g AS key, 1::bigint AS version, g::numeric AS value, 'x' AS a, 'y' AS b
FROM generate_series(0, 99) g;
CREATE FUNCTION pg_temp.ev(lo int, hi int) RETURNS toy[] LANGUAGE sql AS
	$$SELECT coalesce(array_agg(t ORDER BY off), '{}') FROM toy t WHERE off BETWEEN lo AND hi$$;
CREATE FUNCTION pg_temp.offs(lo int, hi int) RETURNS bigint[] LANGUAGE sql AS
	$$SELECT coalesce(array_agg(off ORDER BY off), '{}') FROM toy WHERE off BETWEEN lo AND hi$$;

------------------------------------------------------------------------------
-- the rules
------------------------------------------------------------------------------

SELECT is(exactonce.committed_offset('tap_off', 't:0'), NULL, 'a new source has no committed offset');
SELECT is(exactonce.ingest('tap_off', 't:0', pg_temp.ev(0, 9), pg_temp.offs(0, 9)), 10::bigint, 'a first batch is queued whole');
SELECT is(exactonce.committed_offset('tap_off', 't:0'), 9::bigint, 'its last offset is committed');
SELECT is(exactonce.ingest('tap_off', 't:0', pg_temp.ev(0, 9), pg_temp.offs(0, 9)), 0::bigint, 'the same batch again is skipped whole');
SELECT is(exactonce.ingest('tap_off', 't:0', pg_temp.ev(5, 14), pg_temp.offs(5, 14)), 5::bigint, 'an overlapping batch: only the part above the committed offset');
SELECT is(exactonce.ingest('tap_off', 't:0', ARRAY[(SELECT t FROM toy t WHERE off = 30)], ARRAY[30]::bigint[]), 1::bigint,
	'a gap is allowed');
SELECT is(exactonce.committed_offset('tap_off', 't:0'), 30::bigint, 'the committed offset jumps over it');
SELECT is(exactonce.ingest('tap_off', 't:0', pg_temp.ev(15, 29), pg_temp.offs(15, 29)), 0::bigint,
	'offsets in the gap now count as replays');
SELECT is(exactonce.ingest('tap_off', 't:1', pg_temp.ev(0, 4), pg_temp.offs(0, 4)), 5::bigint, 'another source has its own offset');
SELECT is(exactonce.ingest('tap_off', 't:2', '{}'::toy[], '{}'::bigint[]), 0::bigint, 'an empty batch queues nothing');
SELECT is(exactonce.committed_offset('tap_off', 't:2'), NULL, 'and creates no source');
SELECT results_eq($$SELECT source, committed_offset, ingested, skipped, batches FROM exactonce.sources
				   WHERE pipeline = 'tap_off' ORDER BY source$$,
	$$VALUES ('t:0' COLLATE "C", 30::bigint, 16::bigint, 30::bigint, 5::bigint), ('t:1', 4, 5, 0, 1)$$,
	'exactonce.sources counts what was queued and skipped per source');
SELECT is((SELECT count(*) FROM tap_off.ingest), 21::bigint, 'the queue holds each offset once');

SAVEPOINT before_batch;
SELECT is(exactonce.ingest('tap_off', 't:0', pg_temp.ev(31, 40), pg_temp.offs(31, 40)), 10::bigint, 'a batch in a savepoint');
ROLLBACK TO SAVEPOINT before_batch;
SELECT is(exactonce.committed_offset('tap_off', 't:0'), 30::bigint, 'rolls back with its offset');
SELECT is(exactonce.ingest('tap_off', 't:0', pg_temp.ev(31, 40), pg_temp.offs(31, 40)), 10::bigint, 'so it is queued again');

-- errors
SELECT throws_ok($$SELECT exactonce.ingest('tap_off', 't:0', pg_temp.ev(50, 51), ARRAY[51, 50]::bigint[])$$, '22023',
	'offsets must be strictly increasing within a batch', 'decreasing offsets');
SELECT throws_ok($$SELECT exactonce.ingest('tap_off', 't:0', pg_temp.ev(50, 51), ARRAY[50, 50]::bigint[])$$, '22023',
	'offsets must be strictly increasing within a batch', 'repeated offsets');
SELECT throws_ok($$SELECT exactonce.ingest('tap_off', 't:0', pg_temp.ev(50, 51), ARRAY[50]::bigint[])$$, '2202E',
	'a batch of 2 events has 1 offsets', 'fewer offsets than events');
SELECT throws_ok($$SELECT exactonce.ingest('tap_off', 't:0', pg_temp.ev(50, 50), ARRAY[-5]::bigint[])$$, '22023',
	'offset 1 is negative', 'negative offset');
SELECT throws_ok($$SELECT exactonce.ingest('tap_off', 't:0', pg_temp.ev(50, 50), ARRAY[NULL]::bigint[])$$, '22004',
	'offset 1 is NULL', 'NULL offset');
SELECT throws_ok($$SELECT exactonce.ingest('tap_off', NULL, pg_temp.ev(50, 50), ARRAY[50]::bigint[])$$, '22004',
	'source must not be NULL', 'NULL source');
SELECT throws_ok($$SELECT exactonce.ingest('tap_off', 't:0', ARRAY[ROW('k', 1::bigint, 1::numeric)], ARRAY[50]::bigint[])$$,
	'22004', NULL, 'a record without the ingest columns');
SELECT is(exactonce.committed_offset('tap_off', 't:0'), 40::bigint, 'refused batches moved nothing');

-- restarting a partition
SELECT is(exactonce.ingest('tap_off', 't:1', pg_temp.ev(0, 2), pg_temp.offs(0, 2)), 0::bigint,
	'a partition that starts again from zero is taken for a replay');
SELECT is(exactonce.reset_source('tap_off', 't:1'), 4::bigint, 'reset_source(NULL) forgets the source and returns its offset');
SELECT is(exactonce.ingest('tap_off', 't:1', pg_temp.ev(0, 2), pg_temp.offs(0, 2)), 3::bigint, 'after the reset offset 0 is new');
SELECT is(exactonce.reset_source('tap_off', 't:1', 50), 2::bigint, 'reset_source(n) sets the committed offset');
SELECT is(exactonce.ingest('tap_off', 't:1', pg_temp.ev(49, 52), pg_temp.offs(49, 52)), 2::bigint, 'offsets above n are taken');
SELECT throws_ok($$SELECT exactonce.reset_source('tap_off', 't:1', -1)$$, '22023', NULL, 'a negative reset is refused');

-- rights
CREATE ROLE regress_off_writer;
CREATE ROLE regress_off_other;
GRANT USAGE ON SCHEMA tap_off TO regress_off_writer;
GRANT INSERT ON tap_off.ingest TO regress_off_writer;
GRANT SELECT ON toy TO regress_off_writer, regress_off_other;
SET LOCAL ROLE regress_off_writer;
SELECT is(exactonce.ingest('tap_off', 't:0', pg_temp.ev(41, 42), pg_temp.offs(41, 42)), 2::bigint,
	'a role with INSERT on the queue may ingest');
SELECT is(exactonce.committed_offset('tap_off', 't:0'), 42::bigint, 'and read the committed offset');
SELECT throws_ok($$SELECT exactonce.reset_source('tap_off', 't:0')$$, '42501', 'must be owner of pipeline "tap_off"',
	'but not reset it');
RESET ROLE;
SET LOCAL ROLE regress_off_other;
SELECT throws_ok($$SELECT exactonce.ingest('tap_off', 't:0', pg_temp.ev(43, 43), pg_temp.offs(43, 43))$$, '42501',
	'permission denied to ingest into pipeline "tap_off"', 'a role without INSERT on the queue may not ingest');
SELECT is((SELECT count(*) FROM exactonce.sources), 0::bigint, 'nor see its sources');
RESET ROLE;

------------------------------------------------------------------------------
-- a randomized consumer that crashes and rewinds
------------------------------------------------------------------------------

SELECT lives_ok($$SELECT exactonce.create_pipeline('tap_off_r', ARRAY['a', 'b'])$$, 'create_pipeline tap_off_r');
SELECT setseed(0.17);
-- the log: offsets with gaps; a (key, version) always has the same content
CREATE TEMP TABLE log AS
SELECT part, sum(step) OVER (PARTITION BY part ORDER BY i) AS off, key, version, value, a, b, deleted
FROM (SELECT i, (random() * 2)::int AS part, CASE WHEN random() < 0.1 THEN 2 + (random() * 4)::int ELSE 1 END AS step,
			 'k' || k AS key, v::bigint AS version, ((k * 31 + v * 17) % 1000)::numeric / 10 AS value,
			 'a' || (k + v) % 3 AS a, 'b' || (k * v) % 4 AS b, (k * 7 + v * 13) % 19 = 0 AS deleted
	  FROM (SELECT i, (random() * 999)::int AS k, (random() * 7)::int AS v FROM generate_series(1, 6000) i) r) s;
CREATE TEMP TABLE delivered (part int, batch int, asked bigint, queued bigint);
DO $$
DECLARE
	p int;
	pos bigint;			-- the consumer's recorded progress: last offset done
	last bigint;
	hi bigint;
	n bigint;
	b int := 0;
BEGIN
	FOR p IN 0..2 LOOP
		pos := -1;
		SELECT max(off) INTO last FROM log WHERE part = p;
		WHILE pos < last LOOP
			b := b + 1;
			-- the next 1..80 events after pos
			SELECT max(off) INTO hi FROM (SELECT off FROM log WHERE part = p AND off > pos
										  ORDER BY off LIMIT 1 + (random() * 79)::int) x;
			SELECT exactonce.ingest('tap_off_r', 'r:' || p, array_agg(l ORDER BY l.off), array_agg(l.off ORDER BY l.off))
			INTO n FROM log l WHERE part = p AND off > pos AND off <= hi;
			INSERT INTO delivered VALUES (p, b, (SELECT count(*) FROM log WHERE part = p AND off > pos AND off <= hi), n);
			IF random() < 0.3 THEN
				NULL;				-- crashed before recording progress: replay from pos
			ELSIF random() < 0.15 THEN
				pos := greatest(-1, hi - (random() * 100)::int);	-- rewound: overlap
			ELSE
				pos := hi;
			END IF;
		END LOOP;
	END LOOP;
END $$;
SELECT ok((SELECT sum(asked) - sum(queued) FROM delivered) > 1000, 'the consumer delivered many events twice or more');
SELECT is((SELECT sum(queued)::bigint FROM delivered), (SELECT count(*) FROM log), 'ingest() queued each event of the log once');
SELECT is((SELECT sum(skipped)::bigint FROM exactonce.sources WHERE pipeline = 'tap_off_r'),
	(SELECT (sum(asked) - sum(queued))::bigint FROM delivered), 'and skipped every replay');
SELECT results_eq($$SELECT source, committed_offset FROM exactonce.sources WHERE pipeline = 'tap_off_r' ORDER BY source$$,
	$$SELECT ('r:' || part) COLLATE "C", max(off) FROM log GROUP BY part ORDER BY 1$$, 'each committed offset is its partition''s last');
SELECT is(exactonce.flush('tap_off_r'), (SELECT count(*) FROM log), 'flush drains exactly the log');
SELECT is((SELECT ingested FROM exactonce.pipelines WHERE name = 'tap_off_r'), (SELECT count(DISTINCT (part, off)) FROM log),
	'ingested equals the number of distinct offsets');
SELECT set_eq($$SELECT a, b, level, total, keys FROM tap_off_r.aggregates$$,
	$$SELECT a, b, 2 - (GROUPING(a) + GROUPING(b)), sum(value), count(*)
	  FROM (SELECT DISTINCT ON (key) * FROM log ORDER BY key, version DESC) s
	  WHERE NOT deleted GROUP BY ROLLUP (a, b)$$,
	'aggregates equal the oracle computed from the log');

SELECT * FROM finish();
ROLLBACK;
