/*
 * exactonce 1.31 -> 1.32: the library only.
 *
 * Nothing in the catalog changes.  What exactonce reads from a pipeline's
 * progress, shard and state rows it checks before it uses it, and a
 * statement that touched other rows than it counts on, a row the owner
 * changed by hand, is refused (EO006, as the ledger's rows now) naming the
 * table; a table of a pipeline with rules is refused, and an insert into a
 * queue partition with an unlogged table.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.32'" to load this file. \quit
