-- Event-time windows: readings grouped by the window of their event_time,
-- a lateness bound, too-late readings in dead_letters, final windows, and
-- bad declarations.
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

SELECT exactonce.create_pipeline('runs', ARRAY['runner'], 'accumulate',
	window_width => '10 minutes', allowed_lateness => '5 minutes');
SELECT name, dimensions, window_width, allowed_lateness FROM exactonce.pipelines;
SELECT col_description('runs.aggregates'::regclass, 1), obj_description('runs.windows'::regclass);

-- the window's start is the first dimension: computed, never sent
SELECT attrelid::regclass, attname, format_type(atttypid, atttypmod)
FROM pg_attribute
WHERE attrelid IN ('runs.ingest'::regclass, 'runs.aggregates'::regclass, 'runs.windows'::regclass)
  AND attnum > 0 AND NOT attisdropped AND attname IN ('runner', 'window_start', 'window_end', 'final')
ORDER BY attrelid::regclass::text, attnum;

-- readings of two runners at 08:01, 08:07 and 08:12 (windows 08:00, 08:10)
INSERT INTO runs.ingest (key, version, value, runner, event_time) VALUES
	('ann', 1, 1.5, 'ann', '2024-05-01 08:01:00+00'),
	('ann', 2, 2.0, 'ann', '2024-05-01 08:07:00+00'),
	('bob', 1, 3.0, 'bob', '2024-05-01 08:12:00+00');
SELECT exactonce.flush('runs');
SELECT window_start, window_end, final, runner, level, total, keys FROM runs.windows
ORDER BY window_start, level, runner;
SELECT watermark FROM runs.progress;

-- 08:31 moves the watermark to 08:30: the 08:00 window is final (08:10 +
-- 5 minutes <= 08:30), the 08:10 one too (08:25 <= 08:30)
INSERT INTO runs.ingest (key, version, value, runner, event_time) VALUES
	('bob', 2, 4.0, 'bob', '2024-05-01 08:31:00+00');
SELECT exactonce.flush('runs');
SELECT DISTINCT window_start, final FROM runs.windows ORDER BY 1;

-- late for the 08:20 window, but within the lateness (08:35 > 08:30): taken;
-- for the 08:10 window: too late; a repeat of an applied reading: a duplicate
INSERT INTO runs.ingest (key, version, value, runner, event_time) VALUES
	('ann', 3, 5.0, 'ann', '2024-05-01 08:24:00+00'),
	('bob', 3, 6.0, 'bob', '2024-05-01 08:15:00+00'),
	('ann', 1, 1.5, 'ann', '2024-05-01 08:01:00+00');
SELECT exactonce.flush('runs');
SELECT window_start, final, runner, total, keys FROM runs.windows WHERE level = 2
ORDER BY window_start, runner;
SELECT key, version, event_time, reason FROM runs.dead_letters;
SELECT ingested, applied, duplicates, stale, dead_lettered FROM exactonce.pipelines;

-- the same reading in another window is other content
INSERT INTO runs.ingest (key, version, value, runner, event_time) VALUES
	('bob', 2, 4.0, 'bob', '2024-05-01 08:45:00+00');
SELECT exactonce.flush('runs');
SELECT key, version, reason FROM runs.dead_letters ORDER BY version;

-- a time whose window does not start in the years 1 to 9999 is in no
-- window: a dead letter, and the pipeline goes on
INSERT INTO runs.ingest (key, version, value, runner, event_time) VALUES
	('cal', 1, 1.0, 'cal', '4713-11-24 00:00:00+00 BC'),
	('cal', 2, 1.0, 'cal', '294276-12-31 23:59:59+00'),
	('cal', 3, 1.0, 'cal', 'infinity');
SELECT exactonce.flush('runs');
SELECT key, version, reason FROM runs.dead_letters WHERE key = 'cal' ORDER BY version;

-- a caller's delta names a window as the state stage does, or is refused
-- before reduce could read the watermark from it
SELECT pg_temp.err($$SELECT exactonce.map_stage('runs',
	ARRAY[ROW('x', 1, ARRAY['-4712-11-18T00:00:00Z', 'ann'], 1, 1, NULL, NULL)::exactonce.delta])$$);
SELECT pg_temp.err($$SELECT exactonce.map_stage('runs',
	ARRAY[ROW('x', 1, ARRAY['2024-05-01T08:03:00Z', 'ann'], 1, 1, NULL, NULL)::exactonce.delta])$$);
SELECT pg_temp.err($$SELECT exactonce.map_stage('runs',
	ARRAY[ROW('x', 1, ARRAY['soon', 'ann'], 1, 1, NULL, NULL)::exactonce.delta])$$);

-- bad declarations
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('w1', ARRAY['r'], window_width => '1 hour')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('w1', ARRAY['r'], 'accumulate', window_width => '1 month')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('w1', ARRAY['r'], 'accumulate', window_width => '0')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('w1', ARRAY['r'], 'accumulate', window_width => '1 hour',
	allowed_lateness => '1 month')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('w1', ARRAY['r'], 'accumulate', window_width => '1 hour',
	allowed_lateness => '-1 minute')$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('w1', ARRAY['r'], 'accumulate', window_width => '1 hour',
	allowed_lateness => NULL)$$);
SELECT pg_temp.err($$SELECT exactonce.create_pipeline('w1', ARRAY['window_start'], 'accumulate',
	window_width => '1 hour')$$);
SELECT count(*) AS pipelines FROM exactonce.pipeline;

SELECT exactonce.drop_pipeline('runs');
DROP EXTENSION exactonce;
