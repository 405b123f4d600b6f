/*
 * exactonce 1.16 -> 1.17: the library only.
 *
 * Nothing in the catalog changes.  The library probes keys in collation
 * "C" as bytes, and cancels a statement on a node with pg_cancel_backend()
 * from a connection of its own, waiting for the node at most 10 seconds.
 * A batch's token is computed as before: one staged by 1.16 and retried
 * under 1.17 is staged once.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.17'" to load this file. \quit
