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
LANGUAGE C VOLATILE;
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

/*
 * Exactly-once for any SQL work and for external consumers (once.c,
 * offsets.c).  The tables belong to the extension's owner and grant nothing
 * to PUBLIC: the functions check the caller's rights and write them as their
 * owner.  They are dumped with the database, so a restored database still
 * knows what it has done.
 */

/* Idempotency tokens */

CREATE TABLE exactonce.once_scope (
	scope		text COLLATE "C" CONSTRAINT once_scope_pkey PRIMARY KEY,
	owner		regrole NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE exactonce.once_scope IS
	'scopes of exactonce.once() tokens: each belongs to the role that claimed its first token; that role and its members use it';
COMMENT ON INDEX exactonce.once_scope_pkey IS 'exactonce: one owner per scope';

CREATE TABLE exactonce.once_token (
	scope		text COLLATE "C" NOT NULL,
	token		text COLLATE "C" NOT NULL,
	fingerprint	bytea,
	result		text,
	claimed_by	regrole NOT NULL,
	claimed_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	CONSTRAINT once_token_pkey PRIMARY KEY (scope, token)
);
COMMENT ON TABLE exactonce.once_token IS
	'idempotency tokens claimed by exactonce.once(), each committed with the work it stands for; forgotten only by exactonce.forget()';
COMMENT ON COLUMN exactonce.once_token.fingerprint IS
	'SHA-256 of the payload passed with the claim, NULL if none';
COMMENT ON COLUMN exactonce.once_token.result IS
	'what the claiming transaction stored with exactonce.once_result(), for retries';
COMMENT ON COLUMN exactonce.once_token.claimed_at IS
	'time of the once() call that claimed the token; forget() goes by it';
COMMENT ON INDEX exactonce.once_token_pkey IS
	'exactonce: a token is claimed once per scope (concurrent claims wait on this index)';

SELECT pg_catalog.pg_extension_config_dump('exactonce.once_scope', '');
SELECT pg_catalog.pg_extension_config_dump('exactonce.once_token', '');
REVOKE ALL ON exactonce.once_scope, exactonce.once_token FROM PUBLIC;

CREATE FUNCTION exactonce.once(scope text, token text, payload text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'exactonce_once'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.once(text, text, text) IS
	'claim an idempotency token in this transaction: true exactly once per (scope, token) among committed transactions, false afterwards; a different payload for the same token raises EO002';

CREATE FUNCTION exactonce.once_result(scope text, token text, result text)
RETURNS text
AS 'MODULE_PATHNAME', 'exactonce_once_result'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.once_result(text, text, text) IS
	'store the result of the work a token stands for; only in the transaction that claimed it; returns the result';

CREATE FUNCTION exactonce.once_get(scope text, token text)
RETURNS text
AS 'MODULE_PATHNAME', 'exactonce_once_get'
LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION exactonce.once_get(text, text) IS
	'the result stored with a token, NULL if the token is not claimed or has none';

CREATE FUNCTION exactonce.forget(scope text, older_than interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_forget'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.forget(text, interval) IS
	'delete the tokens of a scope claimed more than older_than ago, the only way a token is forgotten; returns how many';

CREATE VIEW exactonce.once_tokens WITH (security_barrier) AS
	SELECT t.scope, s.owner AS scope_owner, t.token, t.fingerprint, t.result,
		   t.claimed_by, t.claimed_at
	FROM exactonce.once_token t
	JOIN exactonce.once_scope s ON s.scope OPERATOR(pg_catalog.=) t.scope
	WHERE pg_catalog.pg_has_role(s.owner, 'USAGE');
COMMENT ON VIEW exactonce.once_tokens IS
	'the tokens of the scopes whose owner''s privileges the current role has';
GRANT SELECT ON exactonce.once_tokens TO PUBLIC;

/* Source offsets */

CREATE TABLE exactonce.source_offset (
	pipeline_id	integer NOT NULL
		CONSTRAINT source_offset_pipeline REFERENCES exactonce.pipeline (id) ON DELETE CASCADE,
	source		text COLLATE "C" NOT NULL,
	committed_offset bigint,
	ingested	bigint NOT NULL DEFAULT 0,
	skipped		bigint NOT NULL DEFAULT 0,
	batches		bigint NOT NULL DEFAULT 0,
	updated_at	timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT source_offset_pkey PRIMARY KEY (pipeline_id, source)
) WITH (fillfactor = 50);
COMMENT ON TABLE exactonce.source_offset IS
	'per pipeline and source partition: the highest offset exactonce.ingest() queued, and counters; each batch locks its row';
COMMENT ON COLUMN exactonce.source_offset.committed_offset IS
	'events at or below this offset are replays and are skipped';
COMMENT ON COLUMN exactonce.source_offset.skipped IS
	'events delivered again at or below the committed offset';
COMMENT ON CONSTRAINT source_offset_pipeline ON exactonce.source_offset IS
	'exactonce: the offsets of a pipeline go with it';
COMMENT ON INDEX exactonce.source_offset_pkey IS
	'exactonce: one committed offset per pipeline and source';

SELECT pg_catalog.pg_extension_config_dump('exactonce.source_offset', '');
REVOKE ALL ON exactonce.source_offset FROM PUBLIC;

CREATE FUNCTION exactonce.ingest(pipeline text, source text, events anyarray,
								 offsets bigint[])
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_ingest'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.ingest(text, text, anyarray, bigint[]) IS
	'queue a batch of events from one source partition with their offsets, skipping those at or below the source''s committed offset, and commit the new offset with them; returns the number of events queued';

CREATE FUNCTION exactonce.reset_source(pipeline text, source text,
									   committed_offset bigint DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_reset_source'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.reset_source(text, text, bigint) IS
	'owner only: set the committed offset of a source, or forget the source (NULL), e.g. for a partition that starts again from zero; returns the previous committed offset';

CREATE FUNCTION exactonce.committed_offset(pipeline text, source text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_committed_offset'
LANGUAGE C STABLE;
COMMENT ON FUNCTION exactonce.committed_offset(text, text) IS
	'the highest offset of a source that exactonce.ingest() queued (NULL if none): a consumer resumes after it';

CREATE VIEW exactonce.sources WITH (security_barrier) AS
	SELECT p.name AS pipeline, o.source, o.committed_offset, o.ingested, o.skipped,
		   o.batches, o.updated_at
	FROM exactonce.source_offset o
	JOIN exactonce.pipeline p ON p.id OPERATOR(pg_catalog.=) o.pipeline_id
	WHERE pg_catalog.pg_has_role(p.owner, 'USAGE')
	   OR (pg_catalog.has_schema_privilege(pg_catalog.to_regnamespace(p.name)::pg_catalog.oid, 'USAGE')
		   AND pg_catalog.has_table_privilege(
				pg_catalog.to_regclass(pg_catalog.quote_ident(p.name) OPERATOR(pg_catalog.||) '.ingest')::pg_catalog.oid,
				'INSERT'));
COMMENT ON VIEW exactonce.sources IS
	'committed offset and counters of each source of the pipelines the current role may ingest into';
GRANT SELECT ON exactonce.sources TO PUBLIC;
