/*
 * exactonce: exact aggregates over at-least-once event streams.
 *
 * This script creates the extension's own catalog and its SQL interface.  The
 * relations of each pipeline live in the pipeline's own schema, created by
 * exactonce.create_pipeline().  Everything here is schema-qualified and every
 * operator is spelled OPERATOR(pg_catalog.x), so a hostile search_path cannot
 * change what this script creates.
 */

\echo Use "CREATE EXTENSION exactonce" to load this file. \quit

/* The registry of pipelines; each row's relations live in schema "name". */
CREATE TABLE exactonce.pipeline (
	id			serial PRIMARY KEY,
	name		name NOT NULL UNIQUE,
	mode		text NOT NULL
		CHECK (mode OPERATOR(pg_catalog.=) ANY (ARRAY['latest', 'accumulate'])),
	dimensions	text[] NOT NULL,
	owner		regrole NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE exactonce.pipeline IS
	'exactonce pipelines: one row per pipeline, whose relations live in the schema of the same name';

SELECT pg_catalog.pg_extension_config_dump('exactonce.pipeline', '');
SELECT pg_catalog.pg_extension_config_dump('exactonce.pipeline_id_seq', '');
COMMENT ON SEQUENCE exactonce.pipeline_id_seq IS 'exactonce: ids of pipelines, never reused';

GRANT SELECT ON exactonce.pipeline TO PUBLIC;
GRANT USAGE ON SCHEMA exactonce TO PUBLIC;

/* One state transition's effect on one cell, as the state stage yields it. */
CREATE TYPE exactonce.delta AS (
	key			text,
	version		bigint,
	cell		text[],
	total		numeric,
	keys		bigint
);
COMMENT ON TYPE exactonce.delta IS
	'effect of one state transition (key, version) on one leaf cell: the cell''s dimension values and the change of its total and key count';

/* Pipelines */

CREATE FUNCTION exactonce.create_pipeline(name text, dimensions text[],
										  mode text DEFAULT 'latest')
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_pipeline'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_pipeline(text, text[], text) IS
	'create a pipeline: schema "name" with ingest, state, aggregates, dead_letters, ledger and progress';

CREATE FUNCTION exactonce.drop_pipeline(name text, force boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_drop_pipeline'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.drop_pipeline(text, boolean) IS
	'drop a pipeline and its schema; refuses while events are queued or staged unless force is true';

CREATE FUNCTION exactonce.pause(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_pause'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION exactonce.pause(text) IS
	'stop background workers from draining a pipeline (flush still works)';

CREATE FUNCTION exactonce.resume(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_resume'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION exactonce.resume(text) IS
	'let background workers drain a paused pipeline again';

CREATE FUNCTION exactonce.flush(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_flush'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION exactonce.flush(text) IS
	'synchronously drain every committed event of a pipeline through state, map and reduce; returns the number of events taken';

/* The queue */

CREATE FUNCTION exactonce.ingest_slot(ingest regclass)
RETURNS integer
AS 'MODULE_PATHNAME', 'exactonce_ingest_slot'
LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION exactonce.ingest_slot(regclass) IS
	'default of ingest.ingest_slot: the queue partition that currently takes inserts';

CREATE FUNCTION exactonce.wake()
RETURNS trigger
AS 'MODULE_PATHNAME', 'exactonce_wake'
LANGUAGE C;
COMMENT ON FUNCTION exactonce.wake() IS
	'statement trigger on each ingest queue: wakes the background workers of this database';

CREATE FUNCTION exactonce.faults_injected(OUT stage text, OUT injected bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'exactonce_faults_injected'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.faults_injected() IS
	'failures injected per stage since the server started (exactonce.fault_* settings); NULL when not preloaded';

/* The three stages */

CREATE FUNCTION exactonce.state_upsert(pipeline text, events anyarray)
RETURNS SETOF exactonce.delta
AS 'MODULE_PATHNAME', 'exactonce_state_upsert'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION exactonce.state_upsert(text, anyarray) IS
	'stage 1: apply events (records with the ingest columns) to state; returns the per-cell deltas, none for events already applied';

CREATE FUNCTION exactonce.map_stage(pipeline text, deltas exactonce.delta[],
									source text DEFAULT NULL,
									source_position bigint DEFAULT NULL)
RETURNS bytea
AS 'MODULE_PATHNAME', 'exactonce_map_stage'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.map_stage(text, exactonce.delta[], text, bigint) IS
	'stage 2: pre-aggregate deltas per cell at every rollup level and stage them under the SHA-256 of their canonical encoding; returns that token';

CREATE FUNCTION exactonce.reduce_apply(pipeline text, tokens bytea[] DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'exactonce_reduce_apply'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.reduce_apply(text, bytea[]) IS
	'stage 3: apply staged batches (all, or the given tokens) to aggregates in this transaction and mark them applied in the ledger; returns how many were applied';

CREATE FUNCTION exactonce.release(pipeline text, source text, source_position bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_release'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION exactonce.release(text, text, bigint) IS
	'forget applied ledger tokens that an external consumer staged from source at or below source_position, or without a position; returns how many were forgotten';

/* Monitoring */

CREATE FUNCTION exactonce.pipeline_stats(
	OUT name name,
	OUT mode text,
	OUT dimensions text[],
	OUT owner regrole,
	OUT paused boolean,
	OUT queued bigint,
	OUT oldest_queued timestamptz,
	OUT lag interval,
	OUT ingested bigint,
	OUT applied bigint,
	OUT duplicates bigint,
	OUT stale bigint,
	OUT dead_lettered bigint,
	OUT batches bigint,
	OUT staged bigint,
	OUT last_batch_at timestamptz,
	OUT worker_pid integer,
	OUT worker_state text,
	OUT latency_p50 interval,
	OUT latency_p99 interval,
	OUT last_error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'exactonce_pipeline_stats'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.pipeline_stats() IS
	'one row per pipeline: mode, queue depth and lag, counters, worker state, latency of recent batches';

CREATE VIEW exactonce.pipelines AS
	SELECT * FROM exactonce.pipeline_stats();
COMMENT ON VIEW exactonce.pipelines IS
	'one row per pipeline: mode, paused, queue depth and lag, counters (ingested = applied + duplicates + stale + dead_lettered), batches, worker pid and state, insert-to-aggregate latency p50 and p99 of the last 100 batches, last error';

GRANT SELECT ON exactonce.pipelines TO PUBLIC;
