/*
 * exactonce 1.11 -> 1.12: reduce writes table distincts directly.
 *
 * Reduce applies a batch's changes of distinct values through the table
 * AM, in the primary key's order (engine/distinct.c), as the state stage
 * writes state.  Every batch updates n of many rows of distincts: a new
 * pipeline's table keeps half of each page free (fillfactor 50) so that
 * most of those updates are HOT, and so do existing pipelines' tables from
 * now on (pages written from now on; VACUUM FULL or pg_repack rewrites the
 * rest).
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.12'" to load this file. \quit

DO $$
DECLARE
	t regclass;
BEGIN
	FOR t IN
		SELECT c.oid::regclass
		  FROM exactonce.pipeline p
		  JOIN pg_catalog.pg_class c ON c.relname = 'distincts' AND c.relkind = 'r'
			   AND c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(p.name))
		 ORDER BY p.id
	LOOP
		EXECUTE pg_catalog.format('ALTER TABLE %s SET (fillfactor = 50)', t);
	END LOOP;
END
$$;
