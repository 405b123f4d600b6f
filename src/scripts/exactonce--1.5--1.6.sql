/*
 * exactonce 1.5 -> 1.6: a queue names its pipeline, not its own relation.
 *
 * The default of ingest.ingest_slot and the check ingest_slot_open named
 * the queue by regclass, which a copy of the table made under another name
 * (a Citus shard of it) would not be.  They now name the pipeline, which is
 * the schema's name: exactonce.ingest_slot('name'::text) and
 * exactonce.ingest_slot_check(ingest_slot, 'name'::text).  A schema renamed
 * by hand then stops inserts with an error, rather than queueing events no
 * worker drains.  The regclass forms stay for dumps of older queues.
 *
 * The queue of each pipeline is altered as its owner; one whose schema or
 * queue is gone is left alone, as the workers leave it.  Each ALTER waits
 * for the inserts and batches in progress on its queue.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.6'" to load this file. \quit

CREATE FUNCTION exactonce.ingest_slot(pipeline text)
RETURNS integer
AS 'MODULE_PATHNAME', 'exactonce_pipeline_slot'
LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION exactonce.ingest_slot(text) IS
	'default of ingest.ingest_slot: the partition of the pipeline''s queue that currently takes inserts';
COMMENT ON FUNCTION exactonce.ingest_slot(regclass) IS
	'the default of ingest.ingest_slot in queues made before 1.6: the partition of the queue that currently takes inserts';

CREATE FUNCTION exactonce.ingest_slot_check(slot integer, pipeline text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'exactonce_pipeline_slot_check'
LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION exactonce.ingest_slot_check(integer, text) IS
	'check constraint ingest_slot_open of each ingest queue: rows enter only the partition taking inserts, never a sealed one';
COMMENT ON FUNCTION exactonce.ingest_slot_check(integer, regclass) IS
	'the check constraint ingest_slot_open of queues made before 1.6: rows enter only the partition taking inserts';

DO $upgrade$
DECLARE
	p record;
	q text;
BEGIN
	FOR p IN SELECT name, owner FROM exactonce.pipeline ORDER BY id LOOP
		q := pg_catalog.quote_ident(p.name);
		CONTINUE WHEN pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.ingest') IS NULL;
		EXECUTE pg_catalog.format('SET LOCAL ROLE %s', p.owner::text);
		EXECUTE pg_catalog.format(
			'ALTER TABLE %1$s.ingest ALTER COLUMN ingest_slot'
			' SET DEFAULT exactonce.ingest_slot(%2$L::text),'
			' DROP CONSTRAINT IF EXISTS ingest_slot_open,'
			' ADD CONSTRAINT ingest_slot_open'
			' CHECK (exactonce.ingest_slot_check(ingest_slot, %2$L::text)) NOT VALID',
			q, p.name);
		RESET ROLE;
	END LOOP;
END
$upgrade$;
