-- Source offsets: exactonce.ingest(pipeline, source, events, offsets) queues
-- a batch from one log partition and commits its offset with it; replays,
-- overlaps, gaps, restarts (reset_source), errors and rights.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('off', ARRAY['a']);

-- a log partition: offsets 0..9 with a gap (no offset 4), a duplicate event
-- (offset 6 repeats offset 1: the producer sent it twice) and a newer
-- version of k1 (offset 9)
CREATE TABLE log (part int, off bigint, key text, version bigint, value numeric, a text);
INSERT INTO log VALUES
	(0, 0, 'k0', 1, 10, 'x'), (0, 1, 'k1', 1, 20, 'x'), (0, 2, 'k2', 1, 30, 'y'),
	(0, 3, 'k3', 1, 40, 'y'), (0, 5, 'k5', 1, 50, 'z'), (0, 6, 'k1', 1, 20, 'x'),
	(0, 7, 'k7', 1, 70, 'z'), (0, 8, 'k8', 1, 80, 'x'), (0, 9, 'k1', 2, 25, 'y'),
	(1, 0, 'k10', 1, 100, 'x'), (1, 1, 'k11', 1, 110, 'y');
-- deliver(part, from, to): the events of a range of offsets, as a consumer does
CREATE FUNCTION deliver(p int, lo bigint, hi bigint) RETURNS bigint LANGUAGE sql AS $$
	SELECT exactonce.ingest('off', 'log:' || p,
		(SELECT array_agg(e ORDER BY e.off) FROM (SELECT off, key, version, value, a FROM log
			WHERE part = p AND off BETWEEN lo AND hi) e),
		(SELECT array_agg(off ORDER BY off) FROM log WHERE part = p AND off BETWEEN lo AND hi))
$$;
CREATE VIEW src AS SELECT pipeline, source, committed_offset, ingested, skipped, batches
	FROM exactonce.sources ORDER BY source;

-- a first batch is taken whole
SELECT deliver(0, 0, 3) AS ingested;
SELECT * FROM src;
SELECT exactonce.committed_offset('off', 'log:0');
-- the same batch again (a lost acknowledgement, a crash before the consumer
-- recorded its progress) is skipped whole
SELECT deliver(0, 0, 3) AS ingested;
-- an overlapping range: the overlap is skipped, the rest taken
SELECT deliver(0, 2, 6) AS ingested;
SELECT * FROM src;
-- gaps are allowed: the committed offset jumps
SELECT exactonce.ingest('off', 'log:0',
	(SELECT array_agg(e) FROM (VALUES ('k20', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)),
	ARRAY[20]::bigint[]) AS after_gap;
SELECT exactonce.committed_offset('off', 'log:0');
-- lower offsets are replays: offsets 7..9 now count as already delivered
SELECT deliver(0, 7, 9) AS ingested;
SELECT * FROM src;
-- sources are independent
SELECT deliver(1, 0, 1) AS ingested;
SELECT * FROM src;
-- an empty batch does nothing
SELECT exactonce.ingest('off', 'log:2', '{}'::log[], '{}'::bigint[]) AS empty;
SELECT count(*) AS sources FROM exactonce.sources;

-- the offset commits with the events, or not at all
BEGIN;
SELECT deliver(1, 0, 1) AS replay_in_transaction;
SELECT exactonce.ingest('off', 'log:1',
	(SELECT array_agg(e) FROM (VALUES ('k12', 1::bigint, 5::numeric, 'x')) e(key, version, value, a)),
	ARRAY[2]::bigint[]) AS new_event;
ROLLBACK;
SELECT exactonce.committed_offset('off', 'log:1') AS after_rollback;

-- a partition that starts again from zero: without a reset its events are
-- replays; the owner resets the source (NULL: forget it) and they are taken
SELECT exactonce.reset_source('off', 'log:0', 6) AS previous;
SELECT deliver(0, 5, 9) AS after_reset_to_6;
SELECT exactonce.reset_source('off', 'log:0') AS previous;
SELECT exactonce.committed_offset('off', 'log:0') IS NULL AS forgotten;
SELECT * FROM src;
SELECT exactonce.reset_source('off', 'log:9') IS NULL AS never_seen;
SELECT exactonce.reset_source('off', 'log:9', 41) IS NULL AS created;
SELECT exactonce.committed_offset('off', 'log:9');

-- what is queued equals the log's events, each once; the pipeline drains it
-- as usual
SELECT key, version, value, a, deleted FROM off.ingest ORDER BY key, version;
SELECT exactonce.flush('off') AS drained;
SELECT ingested, applied, duplicates, stale, dead_lettered FROM exactonce.pipelines WHERE name = 'off';
SELECT level, a, total, keys FROM off.aggregates ORDER BY level, a;

-- records may carry deleted and event_time; other columns are ignored
SELECT exactonce.ingest('off', 'log:1',
	(SELECT array_agg(e) FROM (VALUES ('k10', 2::bigint, 0::numeric, 'x', true, '2024-01-01'::timestamptz, 'ignored')) e(key, version, value, a, deleted, event_time, note)),
	ARRAY[5]::bigint[]) AS tombstone;
SELECT key, version, deleted, event_time FROM off.ingest;
SELECT exactonce.flush('off');
SELECT level, a, total, keys FROM off.aggregates ORDER BY level, a;

-- bad batches are refused whole and move no offset
\set VERBOSITY default
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', 1::bigint, 1::numeric, 'x'), ('k', 2::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[7, 7]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', 1::bigint, 1::numeric, 'x'), ('k', 2::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[9, 8]::bigint[]);
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[-1]::bigint[]);
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[NULL]::bigint[]);
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[8, 9]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)), '{{8}}'::bigint[]);
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', 1::bigint, 1::numeric)) e(key, version, value)), ARRAY[8]::bigint[]);
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', NULL::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[8]::bigint[]);
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k', 1::int, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[8]::bigint[]);
SELECT exactonce.ingest('off', 'log:1', ARRAY[1, 2], ARRAY[8, 9]::bigint[]);
SELECT exactonce.ingest('off', 'log:1', NULL::log[], ARRAY[8]::bigint[]);
SELECT exactonce.ingest('off', NULL, (SELECT array_agg(e) FROM log e), ARRAY[8]::bigint[]);
SELECT exactonce.ingest('off', '', '{}'::log[], '{}');
SELECT exactonce.ingest('nope', 'log:1', '{}'::log[], '{}');
SELECT exactonce.reset_source('off', 'log:1', -1);
SELECT exactonce.committed_offset('off', 'log:1') AS unchanged;

-- REPEATABLE READ works too
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k13', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[6]::bigint[]) AS repeatable_read;
SELECT exactonce.ingest('off', 'log:1', (SELECT array_agg(e) FROM (VALUES ('k13', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[6]::bigint[]) AS replay;
COMMIT;

-- rights: whoever may insert into the queue may ingest and read offsets;
-- only the owner resets them; nobody reads the offsets table directly
CREATE ROLE regress_eo_off_owner;
CREATE ROLE regress_eo_off_writer;
CREATE ROLE regress_eo_off_other;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO regress_eo_off_owner', current_database()); END $$;
SET ROLE regress_eo_off_owner;
SELECT exactonce.create_pipeline('offsec', ARRAY['a']);
GRANT USAGE ON SCHEMA offsec TO regress_eo_off_writer;
GRANT INSERT ON offsec.ingest TO regress_eo_off_writer;
SELECT exactonce.ingest('offsec', 'p0', (SELECT array_agg(e) FROM (VALUES ('k1', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[0]::bigint[]) AS owner_ingests;
RESET ROLE;
SET ROLE regress_eo_off_writer;
SELECT exactonce.ingest('offsec', 'p0', (SELECT array_agg(e) FROM (VALUES ('k1', 1::bigint, 1::numeric, 'x'), ('k2', 1::bigint, 2::numeric, 'x')) e(key, version, value, a)), ARRAY[0, 1]::bigint[]) AS writer_ingests;
SELECT exactonce.committed_offset('offsec', 'p0') AS writer_reads;
SELECT pipeline, source, committed_offset FROM exactonce.sources;
SELECT exactonce.reset_source('offsec', 'p0');
SELECT * FROM exactonce.source_offset;
UPDATE exactonce.source_offset SET committed_offset = 0;
RESET ROLE;
SET ROLE regress_eo_off_other;
SELECT exactonce.ingest('offsec', 'p0', (SELECT array_agg(e) FROM (VALUES ('k3', 1::bigint, 1::numeric, 'x')) e(key, version, value, a)), ARRAY[2]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT exactonce.committed_offset('offsec', 'p0');
SELECT count(*) AS visible FROM exactonce.sources;
SELECT * FROM exactonce.source_offset;
RESET ROLE;
SET ROLE regress_eo_off_owner;
SELECT exactonce.reset_source('offsec', 'p0', 0) AS owner_resets;
SELECT exactonce.flush('offsec');
SELECT level, a, total, keys FROM offsec.aggregates ORDER BY level, a;
-- dropping a pipeline drops its offsets
SELECT exactonce.drop_pipeline('offsec');
RESET ROLE;
SELECT count(*) AS offsets_left FROM exactonce.source_offset s
WHERE NOT EXISTS (SELECT 1 FROM exactonce.pipeline p WHERE p.id = s.pipeline_id);
SELECT pipeline, count(*) FROM exactonce.sources GROUP BY 1;

DO $$ BEGIN EXECUTE format('REVOKE CREATE ON DATABASE %I FROM regress_eo_off_owner', current_database()); END $$;
DROP ROLE regress_eo_off_owner, regress_eo_off_writer, regress_eo_off_other;
DROP VIEW src;
DROP FUNCTION deliver(int, bigint, bigint);
DROP TABLE log;
SELECT exactonce.flush('off');
SELECT ingested, applied, duplicates, stale, dead_lettered FROM exactonce.pipelines WHERE name = 'off';
-- log:0 was forgotten by the reset, counters and all: what remains is log:1's
-- 4 events (2 + tombstone + k13) and log:9's none
SELECT source, ingested FROM exactonce.sources WHERE pipeline = 'off' ORDER BY source;
SELECT exactonce.drop_pipeline('off');
DROP EXTENSION exactonce;
