/*
 * exactonce 1.10 -> 1.11: the coordinator's ingest sends each node its
 * events of a statement in one COPY.
 *
 * The partitions of a distributed pipeline's ingest become foreign tables
 * of the wrapper exactonce_forward, each naming the postgres_fdw server of
 * its node (option server): PostgreSQL 15's postgres_fdw sends a COPY into
 * a foreign partition one row per round trip.  The partitions of existing
 * distributed pipelines are made anew, with the same bounds and owner,
 * belonging to the pipeline, not to the extension.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.11'" to load this file. \quit

CREATE FUNCTION exactonce.forward_handler()
RETURNS fdw_handler
AS 'MODULE_PATHNAME', 'exactonce_forward_handler'
LANGUAGE C STRICT;
COMMENT ON FUNCTION exactonce.forward_handler() IS
	'the foreign-data wrapper of the partitions of a distributed pipeline''s ingest: each statement''s events go to each node in one COPY, as the pipeline''s owner, in the producer''s transaction';

CREATE FUNCTION exactonce.forward_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_forward_validator'
LANGUAGE C STRICT;
COMMENT ON FUNCTION exactonce.forward_validator(text[], oid) IS
	'a foreign table of exactonce_forward takes one option, server: the postgres_fdw server of its node';

CREATE FOREIGN DATA WRAPPER exactonce_forward
	HANDLER exactonce.forward_handler VALIDATOR exactonce.forward_validator;
COMMENT ON FOREIGN DATA WRAPPER exactonce_forward IS
	'exactonce: the partitions of a distributed pipeline''s ingest at the coordinator';
CREATE SERVER exactonce_forward FOREIGN DATA WRAPPER exactonce_forward;
COMMENT ON SERVER exactonce_forward IS
	'exactonce: the partitions of a distributed pipeline''s ingest at the coordinator; each names its node''s postgres_fdw server';
-- a partition is served only if it is its pipeline's owner's, on one of its nodes
GRANT USAGE ON FOREIGN SERVER exactonce_forward TO PUBLIC;

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
