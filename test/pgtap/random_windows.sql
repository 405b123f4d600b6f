-- test/pgtap/random_windows.sql
--
-- Event-time windows with a lateness bound: the runners of the source
-- material, in accumulate mode, whose readings arrive late.
--
-- 300 runners send readings (distance run) with the time they were taken,
-- over two hours, in ten-minute windows with five minutes of allowed
-- lateness.  Readings arrive mostly in time order, but a fifth of them are
-- held back by up to 40 minutes, and a tenth are sent twice; they come in
-- twelve chunks, each flushed.  The oracle replays the rule from the
-- readings alone: the watermark is the start of the latest window with an
-- accepted reading before the chunk, and a new reading whose window ends,
-- with the lateness, at or before it is too late.  Checked after every
-- chunk: the windows equal the oracle, every too-late delivery is a dead
-- letter with its reason, and the windows marked final are the oracle's.
--
-- Everything happens in one transaction that is rolled back.

BEGIN;
SELECT plan(43);

SELECT lives_ok(
	$$SELECT exactonce.create_pipeline('tap_runs', ARRAY['runner'], 'accumulate', shards => 1,
		measures => ARRAY['heart_rate'], min_max => ARRAY['value'],
		window_width => '10 minutes', allowed_lateness => '5 minutes')$$,
	'create_pipeline tap_runs: ten-minute windows, five minutes of lateness');

DO $$ BEGIN PERFORM setseed(0.42); END $$;

-- one row per distinct reading; taken is when it was taken
CREATE TEMP TABLE readings AS
SELECT format('r%s', r) AS runner, format('r%s', r) AS key, v::bigint AS version,
	   round((random() * 500)::numeric, 1) AS value,
	   CASE WHEN random() < 0.2 THEN NULL ELSE 100 + floor(random() * 80) END::numeric AS heart_rate,
	   timestamptz '2024-05-01 08:00:00+00' + v * interval '30 seconds'
		   + (random() * 20) * interval '1 second' AS taken
FROM generate_series(1, 300) AS r, generate_series(0, 239) AS v
WHERE random() < 0.12;

-- arrival: when it is sent (taken, or up to 40 minutes later for a fifth),
-- 10% sent twice, in twelve chunks of arrival order
CREATE TEMP TABLE produced AS
WITH copies AS (
	SELECT *, taken + CASE WHEN random() < 0.2 THEN random() * interval '40 minutes' ELSE interval '0' END AS sent
	FROM readings
	UNION ALL
	SELECT *, taken + random() * interval '10 minutes' FROM readings WHERE random() < 0.10
), ordered AS (
	SELECT c.*, row_number() OVER (ORDER BY sent, key, version) AS arrival FROM copies AS c
)
SELECT o.*, (1 + (o.arrival - 1) * 12 / (SELECT count(*) FROM ordered))::int AS chunk
FROM ordered AS o;

SELECT cmp_ok((SELECT count(*) FROM produced), '>=', 8000::bigint, 'generator: at least 8,000 deliveries');
SELECT cmp_ok((SELECT max(count) FROM (SELECT count(*) FROM produced GROUP BY chunk) c), '<', 10000::bigint,
	'generator: each chunk fits in one batch');

-- the oracle, chunk by chunk: accepted readings and too-late deliveries
CREATE TEMP TABLE accepted (key text, version bigint, value numeric, heart_rate numeric,
							taken timestamptz, runner text, chunk int);
CREATE TEMP TABLE late (arrival bigint, chunk int);
CREATE TEMP TABLE marks (chunk int, watermark timestamptz);
CREATE FUNCTION pg_temp.window_of(t timestamptz) RETURNS timestamptz LANGUAGE sql IMMUTABLE AS
	$$SELECT date_bin('10 minutes', t, timestamptz '1970-01-01 00:00:00+00')$$;
DO $$
DECLARE
	w timestamptz;
	d record;
BEGIN
	FOR c IN 1..12 LOOP
		FOR d IN SELECT * FROM produced WHERE chunk = c ORDER BY arrival LOOP
			CONTINUE WHEN EXISTS (SELECT 1 FROM accepted a WHERE a.key = d.key AND a.version = d.version);
			IF w IS NOT NULL AND pg_temp.window_of(d.taken) + interval '15 minutes' <= w THEN
				INSERT INTO late VALUES (d.arrival, c);
			ELSE
				INSERT INTO accepted VALUES (d.key, d.version, d.value, d.heart_rate, d.taken, d.runner, c);
			END IF;
		END LOOP;
		w := greatest(w, (SELECT max(pg_temp.window_of(taken)) FROM accepted WHERE chunk = c));
		INSERT INTO marks VALUES (c, w);
	END LOOP;
END $$;

SELECT cmp_ok((SELECT count(*) FROM late), '>', 100::bigint, 'generator: readings arrive too late');
SELECT cmp_ok((SELECT count(*) FROM produced p WHERE NOT EXISTS (SELECT 1 FROM late l WHERE l.arrival = p.arrival)
			   AND p.sent > p.taken + interval '10 minutes'), '>', 100::bigint,
	'generator: readings arrive late but within the lateness');

CREATE FUNCTION pg_temp.oracle(c int)
RETURNS TABLE (window_start timestamptz, runner text, level int, total numeric, keys bigint,
			   heart_rate_sum numeric, heart_rate_count bigint, value_min numeric, value_max numeric)
LANGUAGE sql AS $$
	SELECT pg_temp.window_of(taken), runner, 2 - GROUPING(runner), sum(value), count(*),
		   coalesce(sum(heart_rate), 0), count(heart_rate), min(value), max(value)
	FROM accepted WHERE chunk <= c
	GROUP BY ROLLUP (pg_temp.window_of(taken), runner)
	HAVING GROUPING(pg_temp.window_of(taken)) = 0
$$;

CREATE FUNCTION pg_temp.deliver_and_check()
RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
	FOR c IN 1..12 LOOP
		INSERT INTO tap_runs.ingest (key, version, value, runner, heart_rate, event_time)
		SELECT key, version, value, runner, heart_rate, taken FROM produced WHERE chunk = c ORDER BY arrival;
		PERFORM exactonce.flush('tap_runs');
		RETURN NEXT is_empty(format(
			$q$(SELECT window_start, runner, level, total, keys, heart_rate_sum, heart_rate_count,
					   value_min, value_max FROM tap_runs.windows
				EXCEPT ALL SELECT * FROM pg_temp.oracle(%1$s))
			   UNION ALL
			   (SELECT * FROM pg_temp.oracle(%1$s)
				EXCEPT ALL SELECT window_start, runner, level, total, keys, heart_rate_sum,
					   heart_rate_count, value_min, value_max FROM tap_runs.windows)$q$, c),
			format('after chunk %s, every window equals the oracle', c));
		RETURN NEXT is((SELECT count(*) FROM tap_runs.dead_letters WHERE reason LIKE 'too late:%'),
			(SELECT count(*) FROM late WHERE chunk <= c),
			format('after chunk %s, every too-late delivery is a dead letter', c));
		RETURN NEXT is_empty(format(
			$q$SELECT DISTINCT window_start FROM tap_runs.windows
			   WHERE final IS DISTINCT FROM (window_end + interval '5 minutes'
											 <= (SELECT watermark FROM marks WHERE chunk = %1$s))$q$, c),
			format('after chunk %s, the final windows are those the watermark has passed by the lateness', c));
	END LOOP;
END
$$;

SELECT * FROM pg_temp.deliver_and_check();

SELECT cmp_ok((SELECT count(DISTINCT window_start) FROM tap_runs.windows WHERE final), '>', 5::bigint,
	'windows became final');
SELECT results_eq(
	$$SELECT ingested, applied + duplicates + stale + dead_lettered FROM exactonce.pipelines
	  WHERE name = 'tap_runs'$$,
	$$VALUES ((SELECT count(*) FROM produced), (SELECT count(*) FROM produced))$$,
	'accounting: ingested = applied + duplicates + stale + dead_lettered');

ROLLBACK;
