/*
 * exactonce 1.20 -> 1.21: each shard counts what it drains.
 *
 * A worker that finds another worker applying the pipeline's staged
 * batches (it holds the progress row) leaves its own batch staged for that
 * one to apply with the rest, and commits without waiting its turn: the
 * shards' commits no longer follow one another through the progress row.
 * So the counters of what each shard drains move with its position, in its
 * row of table shard, which the update gives the columns; the progress row
 * keeps what it counted so far and what comes in other ways (dead letters
 * replayed, the stage functions' callers, keys moved in).  The view
 * exactonce.pipelines and verify() add the two up.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.21'" to load this file. \quit

DO $$
DECLARE
	t pg_catalog.regclass;
	g pg_catalog.regclass;
BEGIN
	FOR t, g IN
		SELECT c.oid::pg_catalog.regclass, g.oid::pg_catalog.regclass
		  FROM exactonce.pipeline p
		  JOIN pg_catalog.pg_class c ON c.relname = 'shard' AND c.relkind = 'r'
			   AND c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(p.name))
		  LEFT JOIN pg_catalog.pg_class g ON g.relname = 'progress' AND g.relkind = 'r'
			   AND g.relnamespace = c.relnamespace
		 ORDER BY p.id
	LOOP
		EXECUTE pg_catalog.format('ALTER TABLE %s'
			' ADD COLUMN IF NOT EXISTS ingested bigint NOT NULL DEFAULT 0,'
			' ADD COLUMN IF NOT EXISTS applied bigint NOT NULL DEFAULT 0,'
			' ADD COLUMN IF NOT EXISTS duplicates bigint NOT NULL DEFAULT 0,'
			' ADD COLUMN IF NOT EXISTS stale bigint NOT NULL DEFAULT 0,'
			' ADD COLUMN IF NOT EXISTS dead_lettered bigint NOT NULL DEFAULT 0,'
			' ADD COLUMN IF NOT EXISTS batches bigint NOT NULL DEFAULT 0,'
			' ADD COLUMN IF NOT EXISTS last_batch_at timestamptz', t);
		EXECUTE pg_catalog.format('COMMENT ON TABLE %s IS %L', t,
			'exactonce: drain position of each key shard (the rotation it drains, how many rows of its keys it took there, the TID and ingest_id of the last one, a digest of their ingest_ids), the events it took and the counters of what it drained');
		IF g IS NOT NULL THEN
			EXECUTE pg_catalog.format('COMMENT ON TABLE %s IS %L', g,
				'exactonce: queue rotation of this pipeline, and counters of what came other than through a shard (one row)');
		END IF;
	END LOOP;
END
$$;
