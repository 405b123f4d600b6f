/*
 * exactonce 1.17 -> 1.18: the library only.
 *
 * Nothing in the catalog changes.  The library's connections to the nodes
 * of a distributed pipeline never block in libpq (a copy between nodes
 * waits on the latch, so a node that stops reading no longer holds a move
 * for good), and map_stage() and release() refuse a transaction snapshot
 * (25001), as the other stage functions do.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.18'" to load this file. \quit
