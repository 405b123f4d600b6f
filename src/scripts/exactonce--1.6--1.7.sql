/*
 * exactonce 1.6 -> 1.7: one door to a pipeline's tables and nodes.
 *
 * Every path to a pipeline's tables runs as its owner and checks the
 * columns it touches (C code, nothing to install here).  What this script
 * changes is who may see and move what:
 *	 - a feed consumer's position belongs to the role that made it;
 *	 - the history of key moves, whose totals quote event data, is no
 *	   longer readable by PUBLIC.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.7'" to load this file. \quit

-- A feed consumer's position belongs to the role that made it: only that
-- role (or a member), or the pipeline's owner, reads from it and so moves
-- it.  Positions made before belong to the pipeline's owner, who may hand
-- one over by deleting it (exactonce.set_feed off and on starts afresh).
ALTER TABLE exactonce.feed_position ADD COLUMN owner regrole;
UPDATE exactonce.feed_position f SET owner = p.owner
	FROM exactonce.pipeline p WHERE p.id OPERATOR(pg_catalog.=) f.pipeline_id;
ALTER TABLE exactonce.feed_position ALTER COLUMN owner SET NOT NULL;
COMMENT ON COLUMN exactonce.feed_position.owner IS
	'the role that made the position, the only one (with its members and the pipeline''s owner) that reads from it';

CREATE OR REPLACE VIEW exactonce.feed_consumers WITH (security_barrier) AS
	SELECT p.name AS pipeline, f.consumer, f.position, f.changes, f.updated_at,
		f.owner
	FROM exactonce.feed_position f
	JOIN exactonce.pipeline p ON p.id OPERATOR(pg_catalog.=) f.pipeline_id
	WHERE pg_catalog.pg_has_role(p.owner, 'USAGE')
	   OR (pg_catalog.has_schema_privilege(pg_catalog.to_regnamespace(p.name)::pg_catalog.oid, 'USAGE')
		   AND pg_catalog.has_table_privilege(
				pg_catalog.to_regclass(pg_catalog.quote_ident(p.name) OPERATOR(pg_catalog.||) '.feed')::pg_catalog.oid,
				'SELECT'));

-- The moves' totals are what the keys added to the cells: event data, for
-- the owner of the pipeline and pg_read_all_stats only.
REVOKE ALL ON exactonce.key_move FROM PUBLIC;
CREATE VIEW exactonce.key_moves WITH (security_barrier) AS
	SELECT m.gid, m.pipeline, m.modulus, m.remainder, m.direction, m.peer, m.keys,
		m.total, m.events, m.moved_at
	FROM exactonce.key_move m
	LEFT JOIN exactonce.pipeline p ON p.name OPERATOR(pg_catalog.=) m.pipeline
	WHERE pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')
	   OR (p.owner IS NOT NULL AND pg_catalog.pg_has_role(p.owner, 'USAGE'));
COMMENT ON VIEW exactonce.key_moves IS
	'the moves of keys into and out of this node (exactonce.key_move) of the pipelines the current role owns, or all with pg_read_all_stats';
GRANT SELECT ON exactonce.key_moves TO PUBLIC;

COMMENT ON FUNCTION exactonce.create_distributed_pipeline(text, text[], name[], text, integer, text[], text[], text[], boolean) IS
	'create pipeline "name" on the node of each postgres_fdw foreign server and, here, schema "name": ingest partitioned by hash of key over foreign tables on the nodes'' queues, aggregates summing the nodes'' cells (sums and counts of measures summed, averages from them, min of mins, max of maxes), and nodes, each node''s row of exactonce.pipelines; distinct counts do not merge and are refused; with adopt, a node''s existing pipeline of the same definition, holding only its partition''s keys, becomes the node''s (so one server''s pipeline can be spread with move_keys); drop_pipeline, flush, pause, resume and move_keys act on every node, always with the owner''s user mappings (the caller''s here), whoever calls';
