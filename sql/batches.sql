-- Batches adapt to the load (drain.c): a shard's first batch takes at most
-- 10,000 events, each full batch doubles the next one's limit up to
-- exactonce.batch_size, and a batch that used more than
-- exactonce.batch_memory halves it, down to 1,000 events.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT exactonce.create_pipeline('b', ARRAY['d'], shards => 1);
SELECT exactonce.pause('b');

-- 50,000 events: batches of 10,000, 20,000 and the 20,000 left, where a
-- fixed batch_size of 10,000 would take five
SHOW exactonce.batch_size;
INSERT INTO b.ingest (key, version, value, d)
	SELECT 'k' || i, 1, 1, 'd' || (i % 7) FROM generate_series(1, 50000) i;
SELECT exactonce.flush('b');
SELECT batches, applied FROM exactonce.pipelines WHERE name = 'b';

-- batch_size bounds the growth: 3,000, then 3,000 at a time
SET exactonce.batch_size = 3000;
INSERT INTO b.ingest (key, version, value, d)
	SELECT 'k' || i, 2, 2, 'd' || (i % 7) FROM generate_series(1, 10000) i;
SELECT exactonce.flush('b');
SELECT batches, applied FROM exactonce.pipelines WHERE name = 'b';
RESET exactonce.batch_size;

-- with 1MB to spend, each batch goes over it and halves the next, down to
-- 1,000 events: many more batches than the five a fixed size of 10,000
-- would take, and the same result
SELECT batches AS before FROM exactonce.pipelines WHERE name = 'b' \gset
SET exactonce.batch_memory = '1MB';
INSERT INTO b.ingest (key, version, value, d)
	SELECT 'k' || i, 3, 3, 'd' || (i % 7) FROM generate_series(1, 50000) i;
SELECT exactonce.flush('b');
SELECT batches - :before >= 20 AS shrank, applied FROM exactonce.pipelines WHERE name = 'b';
RESET exactonce.batch_memory;
SELECT sum(total), sum(keys) FROM b.aggregates WHERE level = 0;

-- a pipeline with min and max and a distinct count holds more of a batch
-- per event; with the default batch_memory (128MB) its batches still
-- double to 80,000 here: 250,000 events in 6 batches (10,000, 20,000,
-- 40,000, 80,000, 80,000, 20,000), where at 64MB they stopped at 40,000
-- (8 batches)
SELECT exactonce.create_pipeline('rich', ARRAY['d', 'e'], shards => 1, measures => ARRAY['m'],
	min_max => ARRAY['m'], distinct_counts => ARRAY['u']);
SELECT exactonce.pause('rich');
INSERT INTO rich.ingest (key, version, value, d, e, m, u)
	SELECT 'key-' || i, 1, i % 100, 'd' || (i % 7), 'e' || (i % 13), i % 1000, 'user-' || (i % 5000)
	FROM generate_series(1, 250000) i;
SELECT exactonce.flush('rich');
SELECT batches <= 6 AS grew, applied FROM exactonce.pipelines WHERE name = 'rich';
SELECT keys, m_min, m_max, u_distinct FROM rich.aggregates WHERE level = 0;
SELECT exactonce.drop_pipeline('rich');

SELECT exactonce.drop_pipeline('b');
DROP EXTENSION exactonce;
