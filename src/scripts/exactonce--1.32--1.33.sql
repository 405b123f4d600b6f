/*
 * exactonce 1.32 -> 1.33: the library only.
 *
 * Nothing in the catalog changes.  What rebuild(), set_shards() and a
 * narrower WHERE of alter_pipeline_as() write to a pipeline's tables as a
 * whole set of rows, and the dead letters a move takes out and puts in,
 * they count against the rows they meant to write: a trigger of the
 * owner's that skips rows is refused (EO006), where with 1.32 it left cells
 * short, or a staged batch to be applied again on top of the rebuilt
 * cells.  A batch map stages must be in the ledger afterwards.  A move
 * refuses triggers on state and seen, as the stage does.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.33'" to load this file. \quit
