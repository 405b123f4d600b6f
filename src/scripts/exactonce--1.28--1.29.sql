/*
 * exactonce 1.28 -> 1.29: a shard's position knows its partition's file.
 *
 * Each shard's row remembers the file of the queue partition its position
 * is in (drain_file, the partition's relfilenode): a position is then
 * trusted at its TID only where no rewrite gave the partition another file
 * since; otherwise the shard counts its rows from the partition's start,
 * as it did when the ingest_id at the TID differed.  A producer can give
 * many rows one ingest_id (COPY writes an identity column), so after a
 * VACUUM FULL the TID could hold another row of the same ingest_id, and
 * the shard would go on from there, skipping rows.  Rows of the shards
 * made before have no file, and are counted once.
 *
 * Nothing else in the catalog changes.  The guard resolves an ALTER COLUMN
 * TYPE's new type in the caller's search_path, a text column with a
 * collation that is not deterministic, a column with a type modifier and
 * an unlogged table are refused, and the queue's COPY
 * frees the slots of routing and says which COPY ran.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.29'" to load this file. \quit

DO $$
DECLARE
	t pg_catalog.regclass;
BEGIN
	FOR t IN
		SELECT c.oid::pg_catalog.regclass
		  FROM exactonce.pipeline p
		  JOIN pg_catalog.pg_class c ON c.relname = 'shard' AND c.relkind = 'r'
			   AND c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(p.name))
		 ORDER BY p.id
	LOOP
		EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS drain_file pg_catalog.oid', t);
		EXECUTE pg_catalog.format('COMMENT ON TABLE %s IS %L', t,
			'exactonce: drain position of each key shard (the rotation it drains, how many rows of its keys it took there, the TID and ingest_id of the last one and the file of that TID, a digest of their ingest_ids), the events it took and the counters of what it drained');
	END LOOP;
END
$$;
