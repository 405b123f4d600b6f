-- Every SQL-callable function of the extension either works or fails with
-- an SQLSTATE for any arguments: each one called with every argument NULL,
-- then with arguments that name nothing, then reduce_apply with tokens in
-- any order, repeated, unknown or applied already.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('args', ARRAY['d']);

-- call(f, args): what calling f with args does, "ok" or the SQLSTATE
CREATE FUNCTION call(f regprocedure, args text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	result text;
	ignored text;
BEGIN
	BEGIN
		EXECUTE format('SELECT (%s(%s))::text', f::oid::regproc, args) INTO ignored;
		result := 'ok';
	EXCEPTION WHEN OTHERS THEN
		result := SQLSTATE;
	END;
	RETURN result;
END $$;

-- every function but the trigger ones, with all arguments NULL (typed)
SELECT p.oid::regprocedure AS function,
	   call(p.oid::regprocedure, (SELECT string_agg(format('NULL::%s',
			CASE WHEN t = 'anyarray'::regtype THEN 'text[]'::regtype ELSE t END), ', ')
		FROM unnest(p.proargtypes::regtype[]) t)) AS all_null
FROM pg_proc p
WHERE p.pronamespace = 'exactonce'::regnamespace AND p.prorettype <> 'trigger'::regtype
ORDER BY p.oid::regprocedure::text;

-- arguments that name no pipeline, source or scope
SELECT call('exactonce.flush(text)', $$'nope'$$),
	   call('exactonce.pause(text)', $$'nope'$$),
	   call('exactonce.set_shards(text, integer)', $$'args', 0$$),
	   call('exactonce.reduce_apply(text, bytea[])', $$'nope', NULL$$),
	   call('exactonce.release(text, text, bigint)', $$'args', 'nobody', -1$$),
	   call('exactonce.committed_offset(text, text)', $$'args', ''$$),
	   call('exactonce.ingest_slot(regclass)', $$'args.state'::regclass$$),
	   call('exactonce.ingest_slot_check(integer, regclass)', $$7, 'args.ingest'::regclass$$),
	   call('exactonce.ingest_slot(text)', $$'nope'$$),
	   call('exactonce.ingest_slot_check(integer, text)', $$7, 'args'$$),
	   call('exactonce.map_stage(text, exactonce.delta[], text, bigint)', $$'args', '{}', NULL, NULL$$),
	   call('exactonce.state_upsert(text, anyarray)', $$'args', '{}'::text[]$$),
	   call('exactonce.wait_applied(text, interval)', $$'nope', '1 second'$$),
	   call('exactonce.key_stays(text, name, integer, integer)', $$'k', 'nope', 1, 0$$),
	   call('exactonce.create_view(text, text, text[], text)', $$'nope', 'v', '{}', NULL$$);

-- reduce_apply: three batches of one key that each build on the one before
-- (k enters cell a, moves to b, then changes value in b)
CREATE TEMP TABLE staged (n int, token bytea);
CREATE FUNCTION stage(n int, version bigint, value numeric, cell text) RETURNS void LANGUAGE sql AS $$
INSERT INTO staged SELECT n, exactonce.map_stage('args',
	ARRAY(SELECT d FROM exactonce.state_upsert('args',
		(SELECT array_agg(e) FROM (SELECT 'k' AS key, version, value, cell AS d) e)) d))
$$;
SELECT stage(1, 1, 10, 'a'), stage(2, 2, 20, 'b'), stage(3, 3, 30, 'b');
-- the last batch before the others: refused, nothing applied
SELECT exactonce.reduce_apply('args', ARRAY(SELECT token FROM staged WHERE n = 3));
SELECT count(*) AS cells FROM args.aggregates;
-- all three in reverse order, one repeated, with an unknown token and a NULL:
-- applied together, once
SELECT exactonce.reduce_apply('args', ARRAY(SELECT token FROM staged ORDER BY n DESC)
	|| ARRAY[(SELECT token FROM staged WHERE n = 2), '\x00'::bytea, NULL]);
SELECT d, level, total, keys FROM args.aggregates ORDER BY level, d;
-- applied already: nothing happens
SELECT exactonce.reduce_apply('args', ARRAY(SELECT token FROM staged));
SELECT exactonce.reduce_apply('args', '{}');
SELECT d, level, total, keys FROM args.aggregates ORDER BY level, d;

DROP FUNCTION call(regprocedure, text), stage(int, bigint, numeric, text);
SELECT exactonce.drop_pipeline('args');
DROP EXTENSION exactonce;
