/*
 * exactonce 1.25 -> 1.26: a node's refusal of the keys it gave away is
 * lifted by data.
 *
 * The check on a node's queue that refuses a range of keys moved away,
 * exactonce.key_stays(key, pipeline, modulus, remainder), and the trigger
 * that parks the range's events while it moves refuse a key only while the
 * range's latest move on the node (exactonce.key_move) took it away.  So a
 * range that comes back is taken in by the move's own row, without the
 * queue's ACCESS EXCLUSIVE lock, which the move's prepared transaction
 * held until the coordinator's switch while producers waited on it and the
 * switch on them.  Checks made before 1.26 (key_stays(key, modulus,
 * remainder, server)) go on refusing until their range comes back, which
 * drops them as before.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.26'" to load this file. \quit

CREATE FUNCTION exactonce.key_stays(key text, pipeline name, modulus integer, remainder integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'exactonce_key_stays_here'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION exactonce.key_stays(text, name, integer, integer) IS
	'check of a node''s queue once keys moved away: true unless key_bucket(key, modulus) is remainder and the latest move of those keys on this node (exactonce.key_move) took them away, then the error that the key moved (EO004); for the roles that may insert into the pipeline''s ingest';

COMMENT ON FUNCTION exactonce.move_keys_settle(text, integer, integer) IS
	'on a node, once no move of the keys is under way: the queue refuses them with a check (key_stays()) if they moved away, and with nothing if they are here, never with the row trigger that parked them during a move, which makes COPY insert row by row; waits at most 100 ms for the queue''s lock; returns whether the queue is so; move_keys() calls it; owner only';

COMMENT ON FUNCTION exactonce.key_stays(text, integer, integer, text) IS
	'check of a node''s queue made before 1.26 once keys moved away: true for a key whose key_bucket(key, modulus) is not remainder, else the error that the key moved to server (EO004); a move that brings the keys back drops it';
