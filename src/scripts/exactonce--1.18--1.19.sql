/*
 * exactonce 1.18 -> 1.19: a queue laid out by shard.
 *
 * A pipeline of more than one shard made from 1.19 on, or given its shards
 * again with set_shards(), partitions each queue partition in turn by the
 * shard of the key, so that a shard reads only its own rows: the hash
 * operator class below cuts keys as the shards always have.  Pipelines made
 * before keep their queue as it is until set_shards() is called on them.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.19'" to load this file. \quit

CREATE FUNCTION exactonce.key_shard_hash(text) RETURNS integer
    LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'exactonce_key_shard_hash';

CREATE FUNCTION exactonce.key_shard_hash_extended(text, bigint) RETURNS bigint
    LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'exactonce_key_shard_hash_extended';

COMMENT ON FUNCTION exactonce.key_shard_hash(text) IS
    'exactonce: the hash that cuts keys into shards (of exactonce.key_shard_ops)';
COMMENT ON FUNCTION exactonce.key_shard_hash_extended(text, bigint) IS
    'exactonce: the hash by which a queue partition routes a key to its shard''s table';

CREATE OPERATOR CLASS exactonce.key_shard_ops FOR TYPE text USING hash AS
    OPERATOR 1 pg_catalog.= (text, text),
    FUNCTION 1 exactonce.key_shard_hash(text),
    FUNCTION 2 exactonce.key_shard_hash_extended(text, bigint);
