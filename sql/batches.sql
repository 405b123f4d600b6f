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

SELECT exactonce.drop_pipeline('b');
DROP EXTENSION exactonce;
