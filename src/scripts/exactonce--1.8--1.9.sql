/*
 * exactonce 1.8 -> 1.9: a pipeline created without a number of shards gets
 * one per drain worker of its database.
 *
 * create_pipeline's shards defaults to NULL, which takes as many shards as
 * the workers of the database (exactonce.workers, which now defaults to one
 * per CPU core), between 2 and 16.  Existing pipelines keep their shards;
 * set_shards() changes them online.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.9'" to load this file. \quit

CREATE OR REPLACE FUNCTION exactonce.create_pipeline(name text, dimensions text[],
										  mode text DEFAULT 'latest',
										  shards integer DEFAULT NULL,
										  measures text[] DEFAULT '{}',
										  min_max text[] DEFAULT '{}',
										  distinct_counts text[] DEFAULT '{}',
										  window_width interval DEFAULT NULL,
										  allowed_lateness interval DEFAULT '0',
										  grouping_sets text DEFAULT 'rollup')
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_pipeline'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_pipeline(text, text[], text, integer, text[], text[], text[], interval, interval, text) IS
	'create a pipeline: schema "name" with ingest, state, aggregates, dead_letters, ledger, progress and shard; shards key shards are drained in parallel (NULL: one per drain worker of the database, between 2 and 16); measures: numeric columns besides value, summed, counted and averaged per cell; min_max: measures (value among them) whose min and max each cell keeps; distinct_counts: text columns whose distinct values each cell counts; window_width: tumbling windows of event_time, the first dimension (accumulate mode); allowed_lateness: how long after its end a window takes readings; grouping_sets: rollup, cube or grouping sets such as (region, desk), (region), ()';
