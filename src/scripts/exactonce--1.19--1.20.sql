/*
 * exactonce 1.19 -> 1.20: the library only.
 *
 * Nothing in the catalog changes.  A worker's step that finds nothing to do
 * yet (the partition to drain not sealed, another shard still draining the
 * one to retire, no row to rotate for) reads and takes no row lock, where it
 * locked its shard row and the progress row and committed: a commit to
 * flush for nothing, with the progress row held until the flush.  A worker
 * come to finish a rotation does not wait for another shard's worker that
 * holds the progress row, doing the same.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.20'" to load this file. \quit
