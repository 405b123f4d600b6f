/*
 * exactonce 1.27 -> 1.28: the library only.
 *
 * Nothing in the catalog changes.  With the library preloaded, a COPY into
 * a pipeline's queue inserts its rows a page at a time from slots of
 * exactonce's own (exactonce.queue_copy, engine/queuecopy.c).
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.28'" to load this file. \quit
