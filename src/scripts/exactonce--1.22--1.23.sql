/*
 * exactonce 1.22 -> 1.23: the library only.
 *
 * Nothing in the catalog changes.  Map makes a batch's token and its
 * roll-up in one pass over the deltas, which the one-shard drain does
 * with some 8-11% less CPU per event; set_shards() and alter_pipeline_as()
 * keep the storage parameters of the relations they make anew.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.23'" to load this file. \quit
