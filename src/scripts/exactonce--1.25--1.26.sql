/*
 * exactonce 1.25 -> 1.26: a node's refusal of the keys it gave away is
 * lifted by data.
 *
 * The check on a node's queue that refuses a range of keys moved away,
 * exactonce.key_stays(key, pipeline, modulus, remainder), and the trigger
 * that parks the range's events while it moves refuse a key only while the
 * range's latest move on the node (exactonce.key_move) took it away.  So a
 * range that comes back is taken in by the move's own row, without the
 * queue's ACCESS EXCLUSIVE lock, which the move's prepared transaction
 * held until the coordinator's switch while producers waited on it and the
 * switch on them.  The update puts the new check in place of each one made
 * before 1.26 (key_stays(key, modulus, remainder, server)), as
 * move_keys_settle() does (waiting at most 100 ms for a queue's lock); one
 * it cannot replace is named in a warning, goes on refusing, and is dropped
 * as before when its range comes back.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.26'" to load this file. \quit

CREATE FUNCTION exactonce.key_stays(key text, pipeline name, modulus integer, remainder integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'exactonce_key_stays_here'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION exactonce.key_stays(text, name, integer, integer) IS
	'check of a node''s queue once keys moved away: true unless key_bucket(key, modulus) is remainder and the latest move of those keys on this node (exactonce.key_move) took them away, then the error that the key moved (EO004); for the roles that may insert into the pipeline''s ingest';

COMMENT ON FUNCTION exactonce.move_keys_settle(text, integer, integer) IS
	'on a node, once no move of the keys is under way: the queue refuses them with a check (key_stays()) if they moved away, and with nothing if they are here, never with the row trigger that parked them during a move, which makes COPY insert row by row; waits at most 100 ms for the queue''s lock; returns whether the queue is so; move_keys() calls it; owner only';

COMMENT ON FUNCTION exactonce.key_stays(text, integer, integer, text) IS
	'check of a node''s queue made before 1.26 once keys moved away: true for a key whose key_bucket(key, modulus) is not remainder, else the error that the key moved to server (EO004); a move that brings the keys back drops it';

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
		FOR r IN
			SELECT k.conname,
				   (pg_catalog.regexp_match(k.conname, '^exactonce_moved_(\d+)_(\d+)$'))::pg_catalog.int4[] AS range
			  FROM pg_catalog.pg_constraint k
			 WHERE k.conrelid = q.ingest AND k.contype = 'c'
			   AND k.conname ~ '^exactonce_moved_\d+_\d+$'
			   AND EXISTS (SELECT FROM pg_catalog.pg_depend d
							WHERE d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND d.objid = k.oid
							  AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
							  AND d.refobjid = 'exactonce.key_stays(text, integer, integer, text)'::pg_catalog.regprocedure)
			 ORDER BY k.conname
		LOOP
			why := 'its queue was busy';
			BEGIN
				settled := exactonce.move_keys_settle(q.name, r.range[1], r.range[2]);
			EXCEPTION WHEN OTHERS THEN
				settled := false;
				why := SQLERRM;
			END;
			IF NOT settled THEN
				RAISE WARNING 'check % of pipeline "%" (the keys (%, %)) was not replaced by the check of 1.26',
					r.conname, q.name, r.range[1], r.range[2]
					USING DETAIL = why,
						  HINT = pg_catalog.format('Call SELECT exactonce.move_keys_settle(%L, %s, %s) later; the check refuses the keys until they come back meanwhile.',
												   q.name, r.range[1], r.range[2]);
			END IF;
		END LOOP;
	END LOOP;
END
$$;
