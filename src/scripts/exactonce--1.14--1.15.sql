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
 *
 * The moves of keys made before 1.14 left the node the keys left refusing
 * them with a row trigger, which makes every COPY into its queue insert row
 * by row; the update settles each such range into a check, as
 * move_keys_settle() does (it waits at most 100 ms for a queue's lock, as
 * the pipeline's owner).  A range it could not settle keeps its trigger,
 * which refuses the keys as before, and is named in a warning.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.15'" to load this file. \quit

DO $$
DECLARE
	q record;
	r record;
	settled boolean;
	why text;
BEGIN
	FOR q IN
		SELECT p.name, c.oid::pg_catalog.regclass AS ingest
		  FROM exactonce.pipeline p
		  JOIN pg_catalog.pg_class c ON c.relname = 'ingest' AND c.relkind = 'p'
			   AND c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(p.name))
		 ORDER BY p.id
	LOOP
		IF EXISTS (SELECT FROM pg_catalog.pg_attribute
					WHERE attrelid = q.ingest AND attname = 'ingest_id' AND attidentity = 'a'
					  AND NOT attisdropped) THEN
			EXECUTE pg_catalog.format('ALTER SEQUENCE %s CACHE 1000',
									  pg_catalog.pg_get_serial_sequence(q.ingest::pg_catalog.text, 'ingest_id'));
		END IF;
		FOR r IN
			SELECT t.tgname,
				   (pg_catalog.regexp_match(t.tgname, '^exactonce_moved_(\d+)_(\d+)$'))::pg_catalog.int4[] AS range
			  FROM pg_catalog.pg_trigger t
			 WHERE t.tgrelid = q.ingest
			   AND t.tgfoid = 'exactonce.refuse_moved_key()'::pg_catalog.regprocedure
			   AND t.tgname ~ '^exactonce_moved_\d+_\d+$'
			 ORDER BY t.tgname
		LOOP
			why := 'its queue was busy, or a move of the range is under way';
			BEGIN
				settled := exactonce.move_keys_settle(q.name, r.range[1], r.range[2]);
			EXCEPTION WHEN OTHERS THEN
				settled := false;
				why := SQLERRM;
			END;
			IF NOT settled THEN
				RAISE WARNING 'trigger % of pipeline "%" (the keys (%, %)) was not settled into a check',
					r.tgname, q.name, r.range[1], r.range[2]
					USING DETAIL = why,
						  HINT = pg_catalog.format('Call SELECT exactonce.move_keys_settle(%L, %s, %s) later; the trigger refuses (or parks) the keys meanwhile.',
												   q.name, r.range[1], r.range[2]);
			END IF;
		END LOOP;
	END LOOP;
END
$$;
