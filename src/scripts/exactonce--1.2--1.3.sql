/*
 * exactonce 1.2 -> 1.3: several measures per event, min and max and
 * distinct counts per cell, event-time windows.
 *
 * A pipeline may declare numeric measures besides value (each aggregates row
 * then carries their sum, count and avg), keep min and max of value and of
 * its measures, count the distinct values of text columns per cell, and
 * group readings by the window of their event_time.
 * Pipelines made before have none of these and are carried forward
 * unchanged: their tables keep their columns, and the stages use the new
 * ledger columns only for pipelines that declared any.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.3'" to load this file. \quit

ALTER TABLE exactonce.pipeline
	ADD COLUMN measures text[] NOT NULL DEFAULT '{}',
	ADD COLUMN min_max text[] NOT NULL DEFAULT '{}',
	ADD COLUMN distinct_counts text[] NOT NULL DEFAULT '{}',
	ADD COLUMN window_width interval,
	ADD COLUMN allowed_lateness interval,
	ADD COLUMN grouping_sets text NOT NULL DEFAULT 'rollup';
COMMENT ON COLUMN exactonce.pipeline.measures IS
	'numeric measures of each event besides value: each aggregates row carries <measure>_sum, _count and _avg';
COMMENT ON COLUMN exactonce.pipeline.min_max IS
	'measures (value among them) whose min and max each aggregates row carries, as <measure>_min and _max';
COMMENT ON COLUMN exactonce.pipeline.distinct_counts IS
	'text columns of each event whose distinct values each aggregates row counts, as <column>_distinct';
COMMENT ON COLUMN exactonce.pipeline.window_width IS
	'width of the tumbling event-time windows, whose start is the first dimension (window_start); NULL: no windows';
COMMENT ON COLUMN exactonce.pipeline.grouping_sets IS
	'the cells of the aggregates: rollup (level k groups by the first k dimensions), cube (every subset of them), or grouping sets such as (region, desk), (region), ()';
COMMENT ON COLUMN exactonce.pipeline.allowed_lateness IS
	'how long after its end a window takes readings: then it is final, and a later reading for it is too late';

ALTER TYPE exactonce.delta ADD ATTRIBUTE measures numeric[], ADD ATTRIBUTE distincts text[];
COMMENT ON TYPE exactonce.delta IS
	'effect of one state transition (key, version) on one leaf cell: the cell''s dimension values and the change of its total and key count; measures: the change of each declared measure (NULL where the event has none); distincts: the value of each distinct_counts column that enters (keys 1) or leaves (keys -1) the cell';

DROP FUNCTION exactonce.create_pipeline(text, text[], text, integer);
CREATE FUNCTION exactonce.create_pipeline(name text, dimensions text[],
										  mode text DEFAULT 'latest',
										  shards integer DEFAULT 2,
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
	'create a pipeline: schema "name" with ingest, state, aggregates, dead_letters, ledger, progress and shard; shards key shards are drained in parallel; measures: numeric columns besides value, summed, counted and averaged per cell; min_max: measures (value among them) whose min and max each cell keeps; distinct_counts: text columns whose distinct values each cell counts; window_width: tumbling windows of event_time, the first dimension (accumulate mode); allowed_lateness: how long after its end a window takes readings; grouping_sets: rollup, cube or grouping sets such as (region, desk), (region), ()';

CREATE OR REPLACE VIEW exactonce.pipelines AS
	SELECT s.*, p.measures, p.min_max, p.distinct_counts, p.window_width, p.allowed_lateness,
		p.grouping_sets
	FROM exactonce.pipeline_stats() s
	JOIN exactonce.pipeline p ON p.name OPERATOR(pg_catalog.=) s.name;
COMMENT ON VIEW exactonce.pipelines IS
	'one row per pipeline: mode, paused, queue depth and lag, counters (ingested = applied + duplicates + stale + dead_lettered), batches, worker pid (of shard 0) and state, insert-to-aggregate latency p50 and p99 of the last 100 batches per worker, last error, number of shards, measures, those with min and max, the columns counted distinct, and the windows';
