/*
 * exactonce 1.1 -> 1.2: queue positions that survive rewrites and restores.
 *
 * A shard's position was the TID of the last queue row it took, which
 * VACUUM FULL, CLUSTER, pg_repack or a dump restored elsewhere invalidate.
 * It becomes "the first drain_count rows of the shard's keys in TID order"
 * (queue.c), with the ingest_id and TID of the last of them and a digest
 * of their ingest_ids.  Each queue row gets an ingest_id, from an identity
 * column of the queue; and a check constraint keeps rows out of a sealed
 * partition however they come.
 *
 * For a pipeline half way through a partition, drain_count is counted here
 * from the 1.1 position, before the partitions are rewritten to add
 * ingest_id (which keeps the rows' order); the digest of those rows is not
 * known (NULL), so the shard finds its place by the count alone, once.
 *
 * The work on each pipeline runs as its owner, whose tables these are.  A
 * pipeline whose schema or queue is gone is left alone, as the workers
 * leave it.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.2'" to load this file. \quit

CREATE FUNCTION exactonce.ingest_slot_check(slot integer, ingest regclass)
RETURNS boolean
AS 'MODULE_PATHNAME', 'exactonce_ingest_slot_check'
LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION exactonce.ingest_slot_check(integer, regclass) IS
	'check constraint ingest_slot_open of each ingest queue: rows enter only the partition taking inserts, never a sealed one';

DO $upgrade$
DECLARE
	p record;
	s record;
	q text;
	seq text;
	members text[] := '{}';
BEGIN
	FOR p IN SELECT name, owner, shards FROM exactonce.pipeline ORDER BY id LOOP
		q := pg_catalog.quote_ident(p.name);
		CONTINUE WHEN pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.ingest') IS NULL
			OR pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.shard') IS NULL;
		EXECUTE pg_catalog.format('SET LOCAL ROLE %s', p.owner::text);

		/* wait for the batch a worker has in hand, keep the next one out */
		EXECUTE pg_catalog.format('LOCK TABLE %s.shard, %s.progress IN EXCLUSIVE MODE', q, q);
		EXECUTE pg_catalog.format(
			'ALTER TABLE %s.shard ADD COLUMN drain_row bigint,'
			' ADD COLUMN drain_count bigint NOT NULL DEFAULT 0,'
			' ADD COLUMN drain_digest bigint DEFAULT 0', q);
		FOR s IN EXECUTE pg_catalog.format(
			'SELECT shard, drain_rotation, drain_position FROM %s.shard'
			' WHERE drain_position OPERATOR(pg_catalog.<>) 0', q) LOOP
			EXECUTE pg_catalog.format(
				'UPDATE %1$s.shard SET drain_digest = NULL, drain_count ='
				' (SELECT pg_catalog.count(*) FROM %1$s.%2$I'
				'  WHERE ctid OPERATOR(pg_catalog.<=) %3$L::pg_catalog.tid'
				'  AND (%4$s = 1 OR (pg_catalog.hashtext(key)::bigint OPERATOR(pg_catalog.&) 4294967295)'
				'       OPERATOR(pg_catalog.%%) %4$s OPERATOR(pg_catalog.=) %5$s))'
				' WHERE shard OPERATOR(pg_catalog.=) %5$s',
				q, pg_catalog.format('ingest_%s', s.drain_rotation OPERATOR(pg_catalog.%) 2),
				pg_catalog.format('(%s,%s)', s.drain_position OPERATOR(pg_catalog.>>) 16,
								  s.drain_position OPERATOR(pg_catalog.&) 65535),
				p.shards, s.shard);
		END LOOP;

		/* PostgreSQL 15 adds an identity column only to a table without
		 * partitions: detach them, give each its ingest_id from the new
		 * sequence (a rewrite in the rows' order), attach them again */
		EXECUTE pg_catalog.format('ALTER TABLE %s.ingest DETACH PARTITION %s.ingest_0', q, q);
		EXECUTE pg_catalog.format('ALTER TABLE %s.ingest DETACH PARTITION %s.ingest_1', q, q);
		EXECUTE pg_catalog.format(
			'ALTER TABLE %s.ingest ADD COLUMN ingest_id bigint NOT NULL'
			' GENERATED ALWAYS AS IDENTITY (CACHE 100)', q);
		seq := pg_catalog.pg_get_serial_sequence(q OPERATOR(pg_catalog.||) '.ingest', 'ingest_id');
		FOR i IN 0..1 LOOP
			EXECUTE pg_catalog.format(
				'ALTER TABLE %1$s.ingest_%2$s ADD COLUMN ingest_id bigint NOT NULL'
				' DEFAULT pg_catalog.nextval(%3$L::pg_catalog.regclass)', q, i, seq);
			EXECUTE pg_catalog.format('ALTER TABLE %s.ingest_%s ALTER COLUMN ingest_id DROP DEFAULT', q, i);
			EXECUTE pg_catalog.format(
				'ALTER TABLE %1$s.ingest ATTACH PARTITION %1$s.ingest_%2$s FOR VALUES IN (%2$s)', q, i);
		END LOOP;
		EXECUTE pg_catalog.format(
			'ALTER TABLE %1$s.ingest ADD CONSTRAINT ingest_slot_open'
			' CHECK (exactonce.ingest_slot_check(ingest_slot, %2$L)) NOT VALID',
			q, q OPERATOR(pg_catalog.||) '.ingest');
		EXECUTE pg_catalog.format(
			'COMMENT ON COLUMN %s.ingest.ingest_id IS %L', q,
			'managed by exactonce: identifies the row in drain positions');
		EXECUTE pg_catalog.format(
			'COMMENT ON TABLE %s.shard IS %L', q,
			'exactonce: drain position of each key shard (the rotation it drains, how many rows of its keys it took there, the TID and ingest_id of the last one, a digest of their ingest_ids) and the events it took');
		RESET ROLE;
		members := members OPERATOR(pg_catalog.||) seq;
	END LOOP;

	/* the sequences belong to their pipelines, not to the extension, so
	 * that pg_dump dumps them */
	FOR i IN 1..pg_catalog.cardinality(members) LOOP
		IF EXISTS (SELECT FROM pg_catalog.pg_depend
				   WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
				   AND objid OPERATOR(pg_catalog.=) members[i]::pg_catalog.regclass
				   AND deptype OPERATOR(pg_catalog.=) 'e') THEN
			EXECUTE pg_catalog.format('ALTER EXTENSION exactonce DROP SEQUENCE %s', members[i]);
		END IF;
	END LOOP;
END
$upgrade$;
