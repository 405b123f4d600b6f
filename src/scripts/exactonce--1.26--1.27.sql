/*
 * exactonce 1.26 -> 1.27: the library only.
 *
 * Nothing in the catalog changes.  exactonce.batch_memory defaults to
 * 128MB (it was 64MB), so that batches of pipelines with min and max or
 * distinct counts grow to exactonce.batch_size.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.27'" to load this file. \quit
