/*
 * exactonce 1.15 -> 1.16: min and max kept in reserve.
 *
 * A leaf cell of a latest-mode pipeline with min_max keeps its least and
 * greatest values of each min_max column in aggregates.extrema_reserve,
 * from which the library sets its min and max anew when they leave the
 * cell, where it read every key of the cell in state.  The update adds the
 * column, empty: a cell fills its reserve the first time it reads its keys.
 * Batches staged before the update are applied as before.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.16'" to load this file. \quit

DO $$
DECLARE
	a pg_catalog.regclass;
BEGIN
	FOR a IN
		SELECT c.oid::pg_catalog.regclass
		  FROM exactonce.pipeline p
		  JOIN pg_catalog.pg_class c ON c.relname = 'aggregates' AND c.relkind = 'r'
			   AND c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(p.name))
		 WHERE p.mode = 'latest' AND pg_catalog.cardinality(p.min_max) > 0
		 ORDER BY p.id
	LOOP
		EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS extrema_reserve numeric[]', a);
		EXECUTE pg_catalog.format('COMMENT ON COLUMN %s.extrema_reserve IS %L', a,
								  'exactonce: a leaf cell''s least and greatest values of each min_max column, kept to set its min and max anew when they leave (NULL: none kept)');
	END LOOP;
END
$$;
