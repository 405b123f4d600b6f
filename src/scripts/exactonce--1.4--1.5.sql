/*
 * exactonce 1.4 -> 1.5: moving a range of keys of a distributed pipeline
 * to another node.
 *
 * exactonce.key_bucket() is the hash of a key by which a coordinator's
 * ingest routes it (PostgreSQL's hash partitioning of text COLLATE "C").
 * exactonce.move_keys() moves the keys of one bucket, with their state,
 * dead letters and share of the cells, from one node to another in one
 * two-phase commit; move_keys_out() and move_keys_in() are its halves on
 * the nodes, and exactonce.key_move each node's record of them.
 * create_distributed_pipeline() takes measures and min_max, which the
 * coordinator merges exactly, refuses distinct counts, which it could not,
 * and can adopt the pipelines the nodes have.  Pipelines are carried
 * forward as they are.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.5'" to load this file. \quit

CREATE FUNCTION exactonce.key_bucket(key text, modulus integer)
RETURNS integer
AS 'MODULE_PATHNAME', 'exactonce_key_bucket'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION exactonce.key_bucket(text, integer) IS
	'the hash remainder of key for modulus, as hash partitioning of text COLLATE "C" computes it: a distributed pipeline''s ingest routes key to its partition FOR VALUES WITH (MODULUS modulus, REMAINDER key_bucket(key, modulus)); it never changes';

CREATE FUNCTION exactonce.refuse_moved_key()
RETURNS trigger
AS 'MODULE_PATHNAME', 'exactonce_refuse_moved_key'
LANGUAGE C;
COMMENT ON FUNCTION exactonce.refuse_moved_key() IS
	'trigger of a node''s queue (arguments modulus, remainder, server): refuses the keys that exactonce.move_keys() moved to server';

CREATE TABLE exactonce.key_move (
	gid			text PRIMARY KEY,
	pipeline	name NOT NULL,
	modulus		integer NOT NULL,
	remainder	integer NOT NULL,
	direction	text NOT NULL
		CHECK (direction OPERATOR(pg_catalog.=) ANY (ARRAY['in', 'out'])),
	peer		text NOT NULL,
	keys		bigint NOT NULL,
	total		numeric,
	events		bigint,
	moved_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
COMMENT ON TABLE exactonce.key_move IS
	'the moves of keys (those whose key_bucket(key, modulus) is remainder) of distributed pipelines into and out of this node, by exactonce.move_keys(); gid names its two-phase commit; in accumulate mode total and events are what the keys had added to the cells, which stay where they were counted';
SELECT pg_catalog.pg_extension_config_dump('exactonce.key_move', '');
GRANT SELECT ON exactonce.key_move TO PUBLIC;

CREATE FUNCTION exactonce.move_keys_out(pipeline text, modulus integer, remainder integer,
										target text, gid text,
										OUT state text, OUT seen text, OUT dead_letters text,
										OUT horizon bigint, OUT keys bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'exactonce_move_keys_out'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.move_keys_out(text, integer, integer, text, text) IS
	'the first node''s half of exactonce.move_keys(): from now on the queue refuses the keys, what is queued is applied, and their state rows (and seen rows, in accumulate mode) and dead letters are deleted and returned, the cells rebuilt without them (latest mode; in accumulate mode the keys'' share stays in the cells); owner only, in the caller''s transaction';

CREATE FUNCTION exactonce.move_keys_in(pipeline text, modulus integer, remainder integer,
									   source text, gid text, state text, seen text,
									   dead_letters text, horizon bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_move_keys_in'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.move_keys_in(text, integer, integer, text, text, text, text, text, bigint) IS
	'the second node''s half of exactonce.move_keys(): puts in the state rows, seen rows and dead letters move_keys_out() returned and rebuilds the cells (latest mode); owner only, in the caller''s transaction';

CREATE FUNCTION exactonce.move_keys(pipeline text, modulus integer, remainder integer, server name)
RETURNS bigint
AS 'MODULE_PATHNAME', 'exactonce_move_keys'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.move_keys(text, integer, integer, name) IS
	'move the keys of a distributed pipeline whose key_bucket(key, modulus) is remainder to the node of server (made a node if it is not one), with their state, dead letters and share of the cells, in one two-phase commit of both nodes; splits the ingest partition that holds them; the nodes need max_prepared_transactions; not in a transaction block; call it again to finish a move that was cut off';

-- measures of distributed pipelines: summed, min of mins, max of maxes
ALTER TABLE exactonce.distributed_pipeline
	ADD COLUMN measures text[] NOT NULL DEFAULT '{}',
	ADD COLUMN min_max text[] NOT NULL DEFAULT '{}';
COMMENT ON COLUMN exactonce.distributed_pipeline.measures IS
	'the measures of the nodes'' pipelines: the coordinator sums their sums and counts';
COMMENT ON COLUMN exactonce.distributed_pipeline.min_max IS
	'value or measures whose min and max the nodes keep: the coordinator takes the min of the mins and the max of the maxes';

DROP FUNCTION exactonce.create_distributed_pipeline(text, text[], name[], text, integer);
CREATE FUNCTION exactonce.create_distributed_pipeline(name text, dimensions text[], servers name[],
													  mode text DEFAULT 'latest', shards integer DEFAULT 2,
													  measures text[] DEFAULT '{}',
													  min_max text[] DEFAULT '{}',
													  distinct_counts text[] DEFAULT '{}',
													  adopt boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'exactonce_create_distributed_pipeline'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION exactonce.create_distributed_pipeline(text, text[], name[], text, integer, text[], text[], text[], boolean) IS
	'create pipeline "name" on the node of each postgres_fdw foreign server (with the caller''s user mappings) and, here, schema "name": ingest partitioned by hash of key over foreign tables on the nodes'' queues, aggregates summing the nodes'' cells (sums and counts of measures summed, averages from them, min of mins, max of maxes), and nodes, each node''s row of exactonce.pipelines; distinct counts do not merge and are refused; with adopt, a node''s existing pipeline of the same definition, holding only its partition''s keys, becomes the node''s (so one server''s pipeline can be spread with move_keys); drop_pipeline, flush, pause and resume act on every node';
