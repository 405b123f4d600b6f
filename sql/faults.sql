-- Fault injection: failing stages are retried and the result stays exact.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT exactonce.create_pipeline('f', ARRAY['a', 'b']);

-- a reference pipeline fed the same events without faults
SELECT exactonce.create_pipeline('ref', ARRAY['a', 'b']);
CREATE TEMP TABLE events AS
SELECT 'k' || (i % 700) AS key, (i / 700)::bigint AS version,
	   ((i * 7919) % 1000)::numeric / 100 AS value,
	   'a' || (i % 3) AS a, 'b' || ((i / 700) % 4) AS b
FROM generate_series(1, 5000) i;

SET exactonce.fault_state = 0.2;
SET exactonce.fault_map = 0.2;
SET exactonce.fault_reduce = 0.3;
SET exactonce.batch_size = 200;
SELECT setseed(0.5);
-- (now and then, at these rates, a stage fails more often in a row than
-- flush retries it: the flush fails with EO001, and its caller flushes
-- again)
DO $$
BEGIN
	FOR chunk IN 0..4 LOOP
		INSERT INTO f.ingest (key, version, value, a, b)
		SELECT key, version, value, a, b FROM events
		WHERE abs(hashtext(key || version)) % 5 = chunk;
		FOR attempt IN 1..20 LOOP
			BEGIN
				PERFORM exactonce.flush('f');
				EXIT;
			EXCEPTION WHEN SQLSTATE 'EO001' THEN
				IF attempt = 20 THEN
					RAISE;
				END IF;
			END;
		END LOOP;
	END LOOP;
END $$;
RESET exactonce.fault_state;
RESET exactonce.fault_map;
RESET exactonce.fault_reduce;
RESET exactonce.batch_size;

INSERT INTO ref.ingest (key, version, value, a, b) SELECT * FROM events;
SELECT exactonce.flush('ref');

SELECT count(*) AS mismatches FROM (
	(SELECT level, a, b, total, keys FROM f.aggregates EXCEPT SELECT level, a, b, total, keys FROM ref.aggregates)
	UNION ALL
	(SELECT level, a, b, total, keys FROM ref.aggregates EXCEPT SELECT level, a, b, total, keys FROM f.aggregates)) m;
SELECT count(*) > 0 AS has_cells FROM f.aggregates;
SELECT name, ingested, applied, duplicates, stale, dead_lettered,
	   ingested = applied + duplicates + stale + dead_lettered AS identity
FROM exactonce.pipelines ORDER BY name;

-- a stage that always fails makes flush fail after its retries, and roll back
SET exactonce.fault_reduce = 1;
INSERT INTO f.ingest (key, version, value, a, b) VALUES ('new', 1, 1, 'a0', 'b0');
SELECT exactonce.flush('f');
RESET exactonce.fault_reduce;
SELECT queued FROM exactonce.pipelines WHERE name = 'f';
SELECT exactonce.flush('f');
SELECT count(*) FROM f.state WHERE key = 'new';

-- only superusers may inject faults
CREATE ROLE regress_eo_plain;
SET ROLE regress_eo_plain;
SET exactonce.fault_state = 0.5;
RESET ROLE;
DROP ROLE regress_eo_plain;

SELECT exactonce.drop_pipeline('f');
SELECT exactonce.drop_pipeline('ref');
DROP EXTENSION exactonce;
