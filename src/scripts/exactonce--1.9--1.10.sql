/*
 * exactonce 1.9 -> 1.10: a running pipeline declared anew by a query.
 *
 * alter_pipeline_as() recomputes the cells of a latest-mode pipeline from
 * its state for the new query, in the caller's transaction: other grouping
 * sets, min and max added or dropped, a WHERE added or narrowed.  What
 * state does not keep is refused with 0A000 and a hint.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.10'" to load this file. \quit

CREATE FUNCTION exactonce.alter_pipeline_as(name text, query text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_alter_pipeline_as'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.alter_pipeline_as(text, text) IS
	'declare a running pipeline anew by a query over the columns it keeps (its dimensions, measures and distinct-counted columns): other grouping sets, aggregates, min and max, a WHERE added or narrowed (latest mode); the cells are recomputed from state in the caller''s transaction while producers go on inserting, and view "name".result shows the new query; returns the number of cells (0 in accumulate mode, where only the result''s columns and grouping sets among the kept ones may change)';
