/*
 * exactonce 1.28 -> 1.29: the library only.
 *
 * Nothing in the catalog changes.  The guard resolves an ALTER COLUMN
 * TYPE's new type in the caller's search_path, a text column with a
 * collation that is not deterministic, a column with a type modifier and
 * an unlogged table are refused, and the queue's COPY
 * frees the slots of routing and says which COPY ran.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.29'" to load this file. \quit
