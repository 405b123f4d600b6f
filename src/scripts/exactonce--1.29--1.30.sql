/*
 * exactonce 1.29 -> 1.30: the library only.
 *
 * Nothing in the catalog changes.  The one door (catalog/shape.c) refuses
 * a pipeline whose owner made a column exactonce made NOT NULL allow
 * nulls, dropped the queue's check ingest_slot_open, detached a partition
 * of the queue, or made state_pkey or seen_pkey anew as another index;
 * preloaded, the guard refuses the ALTER TABLE that would do the first
 * three.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.30'" to load this file. \quit
