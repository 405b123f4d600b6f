/*
 * exactonce 1.22 -> 1.23: the library only.
 *
 * Nothing in the catalog changes.  Map makes a batch's token, its roll-up
 * and its distinct members in one pass over the deltas, the same token as
 * before; set_shards() and alter_pipeline_as() keep the storage parameters
 * of the relations they make anew.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.23'" to load this file. \quit
