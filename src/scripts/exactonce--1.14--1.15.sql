/*
 * exactonce 1.14 -> 1.15: less WAL per event.
 *
 * The state stage inserts the keys new to state, the seen rows and new
 * values of distinct counts a page at a time (one WAL record per page
 * instead of per row), in the library.  A queue's identity sequence now
 * hands each backend 1,000 ingest_ids at a time, as a new pipeline's
 * does: each fetch is a WAL record, and ingest_id need only be unique.
 * (A new pipeline's queue also has ingest_id before ingest_slot, which
 * saves the 4 bytes of padding between them; existing queues keep their
 * columns, since reordering them would rewrite the queue.)
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.15'" to load this file. \quit

DO $$
DECLARE
	s regclass;
BEGIN
	FOR s IN
		SELECT d.objid::regclass
		  FROM exactonce.pipeline p
		  JOIN pg_catalog.pg_class c ON c.relname = 'ingest' AND c.relkind = 'p'
			   AND c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(p.name))
		  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'ingest_id'
			   AND a.attidentity = 'a' AND NOT a.attisdropped
		  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
			   AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
			   AND d.refobjid = c.oid AND d.refobjsubid = a.attnum AND d.deptype = 'i'
		  JOIN pg_catalog.pg_class q ON q.oid = d.objid AND q.relkind = 'S'
		 ORDER BY p.id
	LOOP
		EXECUTE pg_catalog.format('ALTER SEQUENCE %s CACHE 1000', s);
	END LOOP;
END
$$;
