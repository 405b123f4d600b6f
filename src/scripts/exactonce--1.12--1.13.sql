/*
 * exactonce 1.12 -> 1.13: moves of keys that keep the producers going.
 *
 * exactonce.move_keys() no longer holds the coordinator's producers and
 * readers while the keys move: the old node parks the range's events
 * (move_keys_park(), a table of the range and the queue's trigger of the
 * range, committed on their own), the nodes prepare their halves, and
 * only the switch (the coordinator's partition, both commits, the parked
 * events sent to the new node) holds the coordinator's producers and
 * readers.  A move given up returns the parked events to the old node's
 * queue (move_keys_unpark()).  Both nodes of a move need 1.13.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.13'" to load this file. \quit

CREATE FUNCTION exactonce.move_keys_park(pipeline text, modulus integer, remainder integer, target text)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_move_keys_park'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.move_keys_park(text, integer, integer, text) IS
	'the start of exactonce.move_keys() on the node the keys leave: from now on the queue keeps their events in table moving_<modulus>_<remainder> of the pipeline, for the node they go to; commit it before move_keys_out(); owner only';

CREATE FUNCTION exactonce.move_keys_unpark(pipeline text, modulus integer, remainder integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_move_keys_unpark'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.move_keys_unpark(text, integer, integer) IS
	'gives up a move of keys that move_keys_park() started and that has not happened: the queue takes their events again, the parked ones first; returns how many were parked; refused while the move is prepared or once it is done; owner only';

COMMENT ON FUNCTION exactonce.refuse_moved_key() IS
	'trigger of a node''s queue (arguments modulus, remainder, server): keeps the events of the keys exactonce.move_keys() is moving to server in table moving_<modulus>_<remainder> while it exists, and refuses them once they have moved';

COMMENT ON FUNCTION exactonce.move_keys_out(text, integer, integer, text, text) IS
	'the first node''s half of exactonce.move_keys(): the keys'' state rows (and seen rows, in accumulate mode) and dead letters are deleted and returned, the keys taken out of the cells (latest mode; in accumulate mode their share stays in the cells); their events must have been applied, those of a range move_keys_park() parks before it (else it refuses), or else the queue refuses the keys from now on and what is queued is applied; owner only, in the caller''s transaction';

COMMENT ON FUNCTION exactonce.move_keys(text, integer, integer, name) IS
	'move the keys of a distributed pipeline whose key_bucket(key, modulus) is remainder to the node of server (made a node if it is not one), with their state, dead letters and share of the cells, in one two-phase commit of both nodes; the old node keeps the keys'' events aside meanwhile, so the coordinator''s producers and readers wait only for the switch (the partition, both commits, those events sent on); splits the ingest partition that holds them; the nodes need max_prepared_transactions and exactonce 1.13; not in a transaction block; call it again to finish a move that was cut off';
