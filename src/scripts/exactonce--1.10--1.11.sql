/*
 * exactonce 1.10 -> 1.11: the coordinator's ingest sends each node its
 * events of a statement in one COPY.
 *
 * The partitions of a distributed pipeline's ingest become foreign tables
 * of the wrapper exactonce_forward, each naming the postgres_fdw server of
 * its node (option server): PostgreSQL 15's postgres_fdw sends a COPY into
 * a foreign partition one row per round trip.  The partitions of existing
 * distributed pipelines are made anew, with the same bounds and owner,
 * belonging to the pipeline, not to the extension.  Pipelines made from
 * now on read their nodes through exactonce_forward too (options
 * schema_name and table_name), with the owner's user mapping.
 *
 * A distributed pipeline keeps distinct counts (the coordinator counts each
 * cell's distinct values over the union of the nodes' table distincts) and
 * event-time windows (final at the coordinator when final on every node).
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.11'" to load this file. \quit

CREATE FUNCTION exactonce.forward_handler()
RETURNS fdw_handler
AS 'MODULE_PATHNAME', 'exactonce_forward_handler'
LANGUAGE C STRICT;
COMMENT ON FUNCTION exactonce.forward_handler() IS
	'the foreign-data wrapper of a distributed pipeline''s tables at the coordinator, as the pipeline''s owner, in the caller''s transaction: the partitions of ingest send each statement''s events to each node in one COPY; the tables the views read copy a node''s relation out';

CREATE FUNCTION exactonce.forward_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_forward_validator'
LANGUAGE C STRICT;
COMMENT ON FUNCTION exactonce.forward_validator(text[], oid) IS
	'a foreign table of exactonce_forward takes the options server (the postgres_fdw server of its node), and schema_name and table_name of the relation it reads there';

CREATE FOREIGN DATA WRAPPER exactonce_forward
	HANDLER exactonce.forward_handler VALIDATOR exactonce.forward_validator;
COMMENT ON FOREIGN DATA WRAPPER exactonce_forward IS
	'exactonce: a distributed pipeline''s tables at the coordinator, on its nodes';
CREATE SERVER exactonce_forward FOREIGN DATA WRAPPER exactonce_forward;
COMMENT ON SERVER exactonce_forward IS
	'exactonce: a distributed pipeline''s tables at the coordinator; each names its node''s postgres_fdw server';
-- a partition is served only if it is its pipeline's owner's, on one of its nodes
GRANT USAGE ON FOREIGN SERVER exactonce_forward TO PUBLIC;

ALTER TABLE exactonce.distributed_pipeline
	ADD COLUMN distinct_counts text[] NOT NULL DEFAULT '{}';
COMMENT ON COLUMN exactonce.distributed_pipeline.distinct_counts IS
	'columns whose distinct values the nodes keep per cell: the coordinator counts each cell''s over the union of the nodes'' values';
ALTER TABLE exactonce.distributed_pipeline
	ADD COLUMN window_width interval,
	ADD COLUMN allowed_lateness interval NOT NULL DEFAULT '0';
COMMENT ON COLUMN exactonce.distributed_pipeline.window_width IS
	'the width of the event-time windows the nodes keep, or NULL: a window is final at the coordinator when it is final on every node';

DROP FUNCTION exactonce.create_distributed_pipeline(text, text[], name[], text, integer, text[], text[], text[], boolean);
CREATE FUNCTION exactonce.create_distributed_pipeline(name text, dimensions text[], servers name[],
													  mode text DEFAULT 'latest', shards integer DEFAULT 2,
													  measures text[] DEFAULT '{}',
													  min_max text[] DEFAULT '{}',
													  distinct_counts text[] DEFAULT '{}',
													  adopt boolean DEFAULT false,
													  window_width interval DEFAULT NULL,
													  allowed_lateness interval DEFAULT '0')
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_distributed_pipeline'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_distributed_pipeline(text, text[], name[], text, integer, text[], text[], text[], boolean, interval, interval) IS
	'create pipeline "name" on the node of each postgres_fdw foreign server and, here, schema "name": ingest partitioned by hash of key over foreign tables of exactonce_forward on the nodes'' queues (each statement''s events go to each node in one COPY), aggregates summing the nodes'' cells (sums and counts of measures summed, averages from them, min of mins, max of maxes, distinct counts over the union of the nodes'' values of the cell), nodes, each node''s row of exactonce.pipelines, and with window_width (accumulate mode) windows, where a window is final when it is final on every node; with adopt, a node''s existing pipeline of the same definition, holding only its partition''s keys, becomes the node''s (so one server''s pipeline can be spread with move_keys); drop_pipeline, flush, pause, resume and move_keys act on every node, always with the owner''s user mappings (the caller''s here), whoever calls';

-- the partitions of existing distributed pipelines, made anew on exactonce_forward
DO $$
DECLARE
	p record;
BEGIN
	FOR p IN
		SELECT c.oid::regclass::text AS part, i.inhparent::regclass::text AS parent,
			   pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS bound, s.srvname, c.relowner::regrole AS owner
		  FROM exactonce.distributed_pipeline d
		  JOIN pg_catalog.pg_class pc ON pc.relname = 'ingest'
			   AND pc.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(d.name))
		  JOIN pg_catalog.pg_inherits i ON i.inhparent = pc.oid
		  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
		  JOIN pg_catalog.pg_foreign_table f ON f.ftrelid = c.oid
		  JOIN pg_catalog.pg_foreign_server s ON s.oid = f.ftserver
		  JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw AND w.fdwname = 'postgres_fdw'
	LOOP
		EXECUTE pg_catalog.format('ALTER TABLE %s DETACH PARTITION %s', p.parent, p.part);
		EXECUTE pg_catalog.format('DROP FOREIGN TABLE %s', p.part);
		EXECUTE pg_catalog.format('CREATE FOREIGN TABLE %s PARTITION OF %s %s SERVER exactonce_forward OPTIONS (server %L)',
								  p.part, p.parent, p.bound, p.srvname);
		EXECUTE pg_catalog.format('ALTER FOREIGN TABLE %s OWNER TO %s', p.part, p.owner);
		-- the pipeline's, not the extension's
		EXECUTE pg_catalog.format('ALTER EXTENSION exactonce DROP FOREIGN TABLE %s', p.part);
	END LOOP;
END
$$;
