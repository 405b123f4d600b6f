-- Bad input: rejected at INSERT by Postgres, or dead-lettered with a reason.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT exactonce.create_pipeline('b', ARRAY['d']);

-- type and NOT NULL violations never enter the queue
INSERT INTO b.ingest (key, version, value, d) VALUES (NULL, 1, 1, 'x');
INSERT INTO b.ingest (key, version, value, d) VALUES ('k', NULL, 1, 'x');
INSERT INTO b.ingest (key, version, value, d) VALUES ('k', 1, NULL, 'x');
INSERT INTO b.ingest (key, version, value, d) VALUES ('k', 1, 1, NULL);
INSERT INTO b.ingest (key, version, value, d) VALUES ('k', 'one', 1, 'x');
INSERT INTO b.ingest (key, version, value, d) VALUES ('k', 1, 'lots', 'x');
INSERT INTO b.ingest (key, version, value, d) VALUES ('k', 9223372036854775808, 1, 'x');
-- a multi-row insert with one bad row ingests nothing
INSERT INTO b.ingest (key, version, value, d) VALUES ('k1', 1, 1, 'x'), ('k2', 1, NULL, 'x');
SELECT count(*) FROM b.ingest;

-- NaN and infinities never poison a sum
INSERT INTO b.ingest (key, version, value, d) VALUES
	('nan', 1, 'NaN', 'x'),
	('inf', 1, 'Infinity', 'x'),
	('ninf', 1, '-Infinity', 'x'),
	('ok', 1, 1.25, 'x');
SELECT exactonce.flush('b');
SELECT key, reason FROM b.dead_letters ORDER BY key;
SELECT total, keys FROM b.aggregates WHERE level = 0;

-- values so large that sums could overflow numeric are refused one by one,
-- so that no reduce can ever fail on them
INSERT INTO b.ingest (key, version, value, d) VALUES
	('huge1', 1, 9e131071, 'x'),
	('huge2', 1, -1e1000, 'x'),
	('fine', 1, 9.99e999, 'y');
SELECT exactonce.flush('b');
SELECT key, reason FROM b.dead_letters WHERE key LIKE 'huge%' ORDER BY key;
INSERT INTO b.ingest (key, version, value, d, deleted) VALUES ('fine', 2, 0, 'y', true);
SELECT exactonce.flush('b');

-- invalid UTF-8 never gets in
INSERT INTO b.ingest (key, version, value, d) VALUES (convert_from('\xff'::bytea, 'UTF8'), 1, 1, 'x');
INSERT INTO b.ingest (key, version, value, d) VALUES (E'\xff', 1, 1, 'x');

-- keys and cells too long for an index entry are refused one by one
INSERT INTO b.ingest (key, version, value, d) VALUES
	(repeat('k', 2001), 1, 1, 'x'),
	('longcell', 1, 1, repeat('d', 2001));
SELECT exactonce.flush('b');
SELECT left(key, 10) AS key, reason FROM b.dead_letters WHERE reason LIKE '%longer than%' ORDER BY 1;

-- edge values that are valid are applied exactly
INSERT INTO b.ingest (key, version, value, d) VALUES
	('', 1, 1, ''),
	(repeat('k', 2000), 1, 1, repeat('d', 2000)),
	('min', -9223372036854775808, 1, 'x'),
	('max', 9223372036854775807, 1, 'x'),
	('big', 1, 1e300, 'x'),
	('tiny', 1, 1e-300, 'x');
SELECT exactonce.flush('b');
SELECT count(*) FROM b.state WHERE NOT deleted;
SELECT total = 1e300 + 1e-300 + 4 + 1.25 AS exact_total, keys FROM b.aggregates WHERE level = 0;
SELECT length(d), keys FROM b.aggregates WHERE level = 1 ORDER BY 1;
-- long values come out of the queue whole, compressed there or not
CREATE TABLE b_long AS SELECT repeat('c', 1990) AS k, repeat('e', 1999) AS d
	UNION ALL SELECT string_agg(md5(i::text), ''), string_agg(md5((-i)::text), '') FROM generate_series(1, 62) i;
BEGIN;
INSERT INTO b.ingest (key, version, value, d) SELECT k, 1, 1, d FROM b_long;
SELECT pg_column_compression(key) IS NOT NULL AS compressed, octet_length(key) AS bytes
FROM b.ingest WHERE key IN (SELECT k FROM b_long) ORDER BY 1 DESC;
COMMIT;
SELECT exactonce.flush('b');
SELECT count(*) AS whole FROM b.state s JOIN b_long l ON s.key = l.k AND s.d = l.d AND s.value = 1;
DROP TABLE b_long;
-- a version beyond the highest bigint cannot be newer than max: only the same
INSERT INTO b.ingest (key, version, value, d) VALUES ('max', 9223372036854775807, 1, 'x');
SELECT exactonce.flush('b');

SELECT ingested, applied, duplicates, stale, dead_lettered,
	   ingested = applied + duplicates + stale + dead_lettered AS identity
FROM exactonce.pipelines WHERE name = 'b';

SELECT exactonce.drop_pipeline('b');
DROP EXTENSION exactonce;
