-- A COPY into a pipeline's queue (engine/queuecopy.c): with the library
-- preloaded it is inserted a page at a time from slots of exactonce's own;
-- without, PostgreSQL's COPY runs it.  This file's output is the same both
-- ways: the rows land in the same partitions with the same values, the
-- errors are PostgreSQL's, the rights are COPY's, the triggers fire, and
-- the aggregates equal those computed from the events copied.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT exactonce.create_pipeline('qc', ARRAY['region', 'desk'], shards => 4,
	measures => ARRAY['qty']);
SELECT exactonce.pause('qc');
CREATE TABLE truth (key text COLLATE "C", version bigint, value numeric, region text, desk text,
	qty numeric, deleted boolean);

-- text, every column the producer sends
COPY qc.ingest (key, version, value, region, desk, qty, deleted, event_time) FROM STDIN;
k1	1	10.5	EMEA	Rates	1	f	2026-12-01 10:00:00+00
k2	1	-3	AMER	FX	2	f	2026-12-01 10:00:01+00
k3	1	7	EMEA	FX	\N	f	2026-12-01 10:00:02+00
k1	2	11	EMEA	Rates	3	f	2026-12-01 10:00:03+00
k2	1	-3	AMER	FX	2	f	2026-12-01 10:00:01+00
\.
-- CSV with a header, columns in another order, event_time and deleted left
-- to their defaults (clock_timestamp() among them)
COPY qc.ingest (region, desk, key, version, value, qty) FROM STDIN (FORMAT csv, HEADER true);
region,desk,key,version,value,qty
APAC,"Rates, long",k4,1,100,4
EMEA,FX,k3,2,8,5
"AP""AC",FX,"k,5",1,1.25,
\.
-- many rows, over the 1,000 buffered at a time, into every shard, from a
-- server file
SELECT '/tmp/exactonce_queue_copy_' || pg_backend_pid() AS f \gset
INSERT INTO truth SELECT 'm' || i, 1 + i % 3, i, 'R' || (i % 5), 'D' || (i % 3), i % 7, i % 11 = 0
	FROM generate_series(1, 5000) i;
COPY (SELECT key, version, value, region, desk, qty, deleted FROM truth) TO :'f' (FORMAT csv);
COPY qc.ingest (key, version, value, region, desk, qty, deleted) FROM :'f' (FORMAT csv);
-- binary
COPY (SELECT 'b' || i, 1::bigint, i::numeric, 'R1', 'D1', NULL::numeric, false FROM generate_series(1, 1200) i)
	TO :'f' (FORMAT binary);
COPY qc.ingest (key, version, value, region, desk, qty, deleted) FROM :'f' (FORMAT binary);
-- wide rows: each flush holds at most 64kB of them, as PostgreSQL's COPY;
-- their dimension values are over exactonce's limit, so they become dead
-- letters once drained
COPY (SELECT 'w' || i, 1::bigint, i::numeric, 'R2', repeat('x', 40000 + i), NULL::numeric, false
	FROM generate_series(1, 20) i) TO :'f' (FORMAT csv);
COPY qc.ingest (key, version, value, region, desk, qty, deleted) FROM :'f' (FORMAT csv);
INSERT INTO truth VALUES ('k1', 1, 10.5, 'EMEA', 'Rates', 1, false), ('k2', 1, -3, 'AMER', 'FX', 2, false),
	('k3', 1, 7, 'EMEA', 'FX', NULL, false), ('k1', 2, 11, 'EMEA', 'Rates', 3, false),
	('k4', 1, 100, 'APAC', 'Rates, long', 4, false), ('k3', 2, 8, 'EMEA', 'FX', 5, false),
	('k,5', 1, 1.25, 'AP"AC', 'FX', NULL, false);
INSERT INTO truth SELECT 'b' || i, 1, i, 'R1', 'D1', NULL, false FROM generate_series(1, 1200) i;

-- where the rows are: each in the partition of its shard and the open slot
SELECT tableoid::regclass AS partition, count(*), min(ingest_id) > 0 AS identified,
	count(DISTINCT ingest_id) = count(*) AS unique_ids, bool_and(event_time IS NOT NULL) AS timed
	FROM qc.ingest GROUP BY 1 ORDER BY 1;
-- within each partition the rows lie in the order they came
SELECT count(*) AS out_of_order FROM (
	SELECT ingest_id < lag(ingest_id) OVER (PARTITION BY tableoid ORDER BY ctid) AS back FROM qc.ingest) o
	WHERE back;
SELECT key, version, value, region, desk, qty, deleted FROM qc.ingest WHERE key !~ '^[mbw]' ORDER BY ingest_id;
SELECT count(*), sum(length(desk)) FROM qc.ingest WHERE key ~ '^w';

-- a COPY of no rows
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
\.

-- errors are PostgreSQL's, and a failed COPY leaves nothing behind
SELECT count(*) AS before FROM qc.ingest \gset
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
e1	1	1	EMEA	FX
e2	\N	1	EMEA	FX
\.
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
e1	1	1	EMEA	FX
e3	1	abc	EMEA	FX
\.
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
e4	1	1	EMEA
\.
COPY qc.ingest (key, version, value, region, desk, ingest_slot) FROM STDIN;
e5	1	1	EMEA	FX	1
\.
SELECT count(*) - :before AS added FROM qc.ingest;

-- the rights are COPY's: INSERT on ingest
CREATE ROLE qc_producer;
CREATE ROLE qc_reader;
GRANT USAGE ON SCHEMA qc TO qc_producer, qc_reader;
GRANT INSERT ON qc.ingest TO qc_producer;
GRANT SELECT ON qc.ingest TO qc_reader;
SET ROLE qc_producer;
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
p1	1	2	EMEA	FX
\.
SET ROLE qc_reader;
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
p3	1	2	EMEA	FX
\.
RESET ROLE;
INSERT INTO truth VALUES ('p1', 1, 2, 'EMEA', 'FX', NULL, false);

-- an owner's statement trigger on ingest fires once per COPY, a row
-- trigger on a partition once per row
CREATE TABLE fired (what text, n bigint);
CREATE FUNCTION qc_stmt() RETURNS trigger LANGUAGE plpgsql AS
	$$BEGIN INSERT INTO fired VALUES ('statement', 1); RETURN NULL; END$$;
CREATE FUNCTION qc_row() RETURNS trigger LANGUAGE plpgsql AS
	$$BEGIN INSERT INTO fired VALUES ('row ' || NEW.key, 1); RETURN NULL; END$$;
CREATE TRIGGER qc_stmt AFTER INSERT ON qc.ingest FOR EACH STATEMENT EXECUTE FUNCTION qc_stmt();
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
t1	1	3	EMEA	FX
t2	1	4	AMER	FX
\.
CREATE TRIGGER qc_row AFTER INSERT ON qc.ingest_0_0 FOR EACH ROW EXECUTE FUNCTION qc_row();
CREATE TRIGGER qc_row AFTER INSERT ON qc.ingest_0_1 FOR EACH ROW EXECUTE FUNCTION qc_row();
CREATE TRIGGER qc_row AFTER INSERT ON qc.ingest_0_2 FOR EACH ROW EXECUTE FUNCTION qc_row();
CREATE TRIGGER qc_row AFTER INSERT ON qc.ingest_0_3 FOR EACH ROW EXECUTE FUNCTION qc_row();
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
t3	1	5	EMEA	FX
t4	1	6	APAC	FX
\.
SELECT what, sum(n) FROM fired GROUP BY 1 ORDER BY 1;
DROP TRIGGER qc_row ON qc.ingest_0_0;
DROP TRIGGER qc_row ON qc.ingest_0_1;
DROP TRIGGER qc_row ON qc.ingest_0_2;
DROP TRIGGER qc_row ON qc.ingest_0_3;
DROP TRIGGER qc_stmt ON qc.ingest;
INSERT INTO truth VALUES ('t1', 1, 3, 'EMEA', 'FX', NULL, false), ('t2', 1, 4, 'AMER', 'FX', NULL, false),
	('t3', 1, 5, 'EMEA', 'FX', NULL, false), ('t4', 1, 6, 'APAC', 'FX', NULL, false);

-- a COPY rolled back leaves nothing; one in a transaction lands with it
BEGIN;
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
r1	1	1	EMEA	FX
\.
ROLLBACK;
BEGIN;
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
r2	1	9	EMEA	FX
\.
SAVEPOINT s;
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
r3	1	1	EMEA	FX
\.
ROLLBACK TO s;
COMMIT;
INSERT INTO truth VALUES ('r2', 1, 9, 'EMEA', 'FX', NULL, false);
-- with exactonce.queue_copy off, PostgreSQL's COPY, the same
SET exactonce.queue_copy = off;
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
o1	1	12	AMER	Rates
\.
RESET exactonce.queue_copy;
INSERT INTO truth VALUES ('o1', 1, 12, 'AMER', 'Rates', NULL, false);

-- an owner's columns: one with a default, one generated, a check, and one
-- added and dropped before more shards made partitions whose columns lie
-- elsewhere than the root's (each leaf then has a map from the root)
ALTER TABLE qc.ingest ADD COLUMN note text DEFAULT 'n';
ALTER TABLE qc.ingest ADD COLUMN twice numeric GENERATED ALWAYS AS (value * 2) STORED;
ALTER TABLE qc.ingest ADD CONSTRAINT small CHECK (value < 100000);
ALTER TABLE qc.ingest ADD COLUMN gone int;
ALTER TABLE qc.ingest DROP COLUMN gone;
SELECT exactonce.set_shards('qc', 6);
COPY qc.ingest (key, version, value, region, desk, note) FROM STDIN;
a1	1	1	EMEA	FX	x
a2	1	2	AMER	FX	\N
a3	1	3	APAC	Rates	y
a4	1	4	EMEA	Rates	z
a5	1	5	AMER	Rates	x
a6	1	6	APAC	FX	y
\.
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
a7	1	7	EMEA	FX
a8	1	500000	EMEA	FX
\.
COPY qc.ingest (key, version, value, region, desk) FROM STDIN;
a9	1	9	EMEA	FX
\.
SELECT tableoid::regclass AS partition, key, note, twice FROM qc.ingest WHERE key ~ '^a' ORDER BY key;
INSERT INTO truth SELECT 'a' || i, 1, i, (ARRAY['EMEA', 'AMER', 'APAC'])[1 + (i - 1) % 3],
	CASE WHEN i IN (1, 2, 6, 9) THEN 'FX' ELSE 'Rates' END, NULL, false FROM generate_series(1, 6) i;
INSERT INTO truth VALUES ('a9', 1, 9, 'EMEA', 'FX', NULL, false);

-- drained, the aggregates are those of the events' latest versions
SELECT exactonce.resume('qc');
SELECT exactonce.flush('qc') > 0 AS flushed;
WITH latest AS (SELECT DISTINCT ON (key) * FROM truth ORDER BY key, version DESC),
	 want AS (SELECT 2 - (GROUPING(region) + GROUPING(desk)) AS level, region, desk, sum(value) AS total,
					 count(*) AS keys, coalesce(sum(qty), 0) AS qty_sum
			  FROM latest WHERE NOT deleted GROUP BY ROLLUP (region, desk)),
	 got AS (SELECT level, region, desk, total, keys, qty_sum FROM qc.aggregates WHERE keys <> 0)
SELECT (SELECT count(*) FROM want) AS cells,
	(SELECT count(*) FROM ((SELECT * FROM want EXCEPT ALL SELECT * FROM got)
						   UNION ALL (SELECT * FROM got EXCEPT ALL SELECT * FROM want)) d) AS differing;
SELECT ingested, applied, duplicates, dead_lettered FROM exactonce.pipelines WHERE name = 'qc';
SELECT key, length(desk), reason FROM qc.dead_letters ORDER BY key LIMIT 2;
SELECT exactonce.drop_pipeline('qc', force => true);
DROP ROLE qc_producer;
DROP ROLE qc_reader;
DROP TABLE truth, fired;
DROP FUNCTION qc_stmt(), qc_row();
DROP EXTENSION exactonce;
