/*
 * exactonce 1.13 -> 1.14: a node refuses the keys it gave away with a check.
 *
 * Once a move of keys is done, the node they left refuses them with a
 * check on its queue (exactonce.key_stays()) instead of the row trigger
 * that parked them during the move: a row trigger makes PostgreSQL's COPY
 * insert row by row, a check keeps its batches.  move_keys() settles each
 * move so; exactonce.move_keys_settle() does it for a node's moves made
 * before 1.14 (or where the queue was busy at the move's switch).
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.14'" to load this file. \quit

CREATE FUNCTION exactonce.key_stays(key text, modulus integer, remainder integer, server text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'exactonce_key_stays'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION exactonce.key_stays(text, integer, integer, text) IS
	'check of a node''s queue once keys moved away: true for a key whose key_bucket(key, modulus) is not remainder, else the error that the key moved to server (EO004)';

CREATE FUNCTION exactonce.move_keys_settle(pipeline text, modulus integer, remainder integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'exactonce_move_keys_settle'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.move_keys_settle(text, integer, integer) IS
	'on the node keys moved away from, once the move is done: the queue refuses them with a check (key_stays()) instead of a row trigger, which keeps COPY into it batched; waits at most 100 ms for the queue''s lock; returns whether the queue has the check; move_keys() calls it; owner only';
