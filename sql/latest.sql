-- latest mode: a key's highest version counts, in every rollup level.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('risk', ARRAY['risk_type', 'region', 'desk']);

-- rollup(): the aggregates SPEC says must match, computed from state
CREATE VIEW rollup AS
SELECT risk_type, region, desk,
	   3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(desk)) AS level,
	   sum(value) AS total, count(*) AS keys
FROM risk.state WHERE NOT deleted
GROUP BY ROLLUP (risk_type, region, desk);
CREATE VIEW mismatch AS
(SELECT risk_type, region, desk, level, total, keys FROM risk.aggregates
 EXCEPT SELECT * FROM rollup)
UNION ALL
(SELECT * FROM rollup
 EXCEPT SELECT risk_type, region, desk, level, total, keys FROM risk.aggregates);
CREATE VIEW counters AS
SELECT ingested, applied, duplicates, stale, dead_lettered,
	   ingested = applied + duplicates + stale + dead_lettered AS identity
FROM exactonce.pipelines WHERE name = 'risk';
CREATE VIEW cells AS
SELECT level, risk_type, region, desk, total, keys FROM risk.aggregates
ORDER BY level, risk_type NULLS FIRST, region NULLS FIRST, desk NULLS FIRST;

-- three trades, exact decimals
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk) VALUES
	('t1', 0, 100.10, 'delta', 'amer', 'fx'),
	('t2', 0, 200.02, 'delta', 'amer', 'rates'),
	('t3', 0, 0.003, 'vega', 'emea', 'fx');
SELECT exactonce.flush('risk');
SELECT * FROM cells;
SELECT count(*) AS mismatches FROM mismatch;

-- a duplicate, a stale version, and a newer version moving t1 to emea/credit
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk) VALUES
	('t2', 0, 200.02, 'delta', 'amer', 'rates'),
	('t1', 2, 150, 'delta', 'emea', 'credit'),
	('t1', 1, 999, 'delta', 'amer', 'fx');
SELECT exactonce.flush('risk');
SELECT * FROM cells;
SELECT count(*) AS mismatches FROM mismatch;
SELECT * FROM counters;

-- the stale version arriving after the newer one changes nothing
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk) VALUES
	('t1', 1, 999, 'vega', 'apac', 'fx');
SELECT exactonce.flush('risk');
SELECT key, version, value, risk_type, region, desk, deleted FROM risk.state ORDER BY key;

-- a conflicting duplicate goes to dead_letters and changes nothing
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk) VALUES
	('t3', 0, 0.004, 'vega', 'emea', 'fx');
SELECT exactonce.flush('risk');
SELECT key, version, value, reason FROM risk.dead_letters;
SELECT count(*) AS mismatches FROM mismatch;

-- equal values written differently are the same content: a duplicate
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk) VALUES
	('t3', 0, 0.0030, 'vega', 'emea', 'fx');
SELECT exactonce.flush('risk');
SELECT * FROM counters;

-- a tombstone removes t2; its empty cells disappear at every level
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk, deleted) VALUES
	('t2', 1, 0, 'delta', 'amer', 'rates', true);
SELECT exactonce.flush('risk');
SELECT * FROM cells;
SELECT count(*) AS mismatches FROM mismatch;

-- an older version after the tombstone stays dead; a newer one resurrects
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk) VALUES
	('t2', 0, 200.02, 'delta', 'amer', 'rates');
SELECT exactonce.flush('risk');
SELECT count(*) FROM risk.aggregates WHERE desk = 'rates';
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk) VALUES
	('t2', 5, -50.5, 'gamma', 'amer', 'rates');
SELECT exactonce.flush('risk');
SELECT * FROM cells;
SELECT count(*) AS mismatches FROM mismatch;

-- several versions of one key within one batch collapse to the highest
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk) VALUES
	('t4', 3, 3, 'delta', 'apac', 'fx'),
	('t4', 1, 1, 'vega', 'apac', 'fx'),
	('t4', 2, 2, 'gamma', 'apac', 'fx'),
	('t4', 3, 3, 'delta', 'apac', 'fx');
SELECT exactonce.flush('risk');
SELECT key, version, value, risk_type FROM risk.state WHERE key = 't4';
SELECT count(*) AS mismatches FROM mismatch;
SELECT * FROM counters;

-- exact numerics: many small values do not drift
INSERT INTO risk.ingest (key, version, value, risk_type, region, desk)
SELECT 'n' || i, 0, 0.1, 'theta', 'emea', 'fx' FROM generate_series(1, 1000) i;
SELECT exactonce.flush('risk');
SELECT total, keys FROM risk.aggregates WHERE level = 1 AND risk_type = 'theta';
SELECT count(*) AS mismatches FROM mismatch;

-- flush of an empty queue takes nothing
SELECT exactonce.flush('risk');
SELECT * FROM counters;

DROP VIEW cells, counters, mismatch, rollup;
SELECT exactonce.drop_pipeline('risk');
DROP EXTENSION exactonce;
