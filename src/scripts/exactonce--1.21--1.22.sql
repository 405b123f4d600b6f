/*
 * exactonce 1.21 -> 1.22: the library only.
 *
 * Nothing in the catalog changes.  set_shards() keeps the triggers of the
 * queue's tables and the privileges their owner granted on them when it
 * makes the tables anew, and refuses, naming it, anything else made on
 * them, where it dropped all of it; alter_pipeline_as() does the same for
 * the view result, whose privileges it dropped.  The setting
 * exactonce.batch_delay lets the workers rotate a queue at most once in
 * that time.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.22'" to load this file. \quit
