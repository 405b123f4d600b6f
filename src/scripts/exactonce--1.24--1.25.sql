/*
 * exactonce 1.24 -> 1.25: the library only.
 *
 * Nothing in the catalog changes.  With the library preloaded, a COPY into
 * a distributed pipeline's ingest at the coordinator is routed by key and
 * its other fields parsed on the nodes (exactonce.route_copy).
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.25'" to load this file. \quit
