/*
 * exactonce 1.16 -> 1.17: the library only.
 *
 * Nothing in the catalog changes.  The library computes a batch's token
 * from the same bytes as before (a batch staged by 1.16 and retried under
 * 1.17 is staged once), probes keys in collation "C" as bytes, and cancels
 * a statement on a node with pg_cancel_backend() from a connection of its
 * own, waiting for the node at most 10 seconds.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.17'" to load this file. \quit
