-- A pipeline's progress, shard and state tables are its owner's, who may delete,
-- add or change their rows, or plant rules on them.  Whatever exactonce
-- reads from them it checks: a row it did not write is refused as changed
-- by hand (SQLSTATE EO006, naming the table and what is wrong), a table
-- with rules is refused (55000), before any of it is used; with 1.31 a
-- deleted progress row failed every function with an internal error, a
-- negative rotation opened "relation 0", and a rule that made an update of
-- the progress row do nothing left pause() and resume() to fail without
-- saying why.  What exactonce writes as a whole set of rows (rebuild(),
-- set_shards(), a narrower WHERE) it counts against what it meant to
-- write: a trigger that skips rows is refused too.  Put back, the pipeline
-- drains as before, exact.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
CREATE ROLE regress_eo_rows LOGIN;
GRANT CREATE ON DATABASE contrib_regression TO regress_eo_rows;
SET ROLE regress_eo_rows;
SELECT exactonce.create_pipeline('orw', ARRAY['d'], shards => 2, measures => ARRAY['q']);
INSERT INTO orw.ingest (key, version, value, d, q)
	SELECT 'k' || i % 20, i, i % 7, 'd' || i % 3, i % 5 FROM generate_series(1, 200) i;
SELECT exactonce.flush('orw');
INSERT INTO orw.ingest (key, version, value, d, q)
	SELECT 'k' || i % 30, 1000 + i, i % 11, 'd' || i % 4, i % 3 FROM generate_series(1, 100) i;

-- orw.try(change, call): make the change, run the call, show how it ends;
-- both are rolled back
CREATE FUNCTION orw.try(change text, call text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	BEGIN
		EXECUTE change;
		EXECUTE call;
		RAISE EXCEPTION USING ERRCODE = 'P0099', MESSAGE = 'ran';
	EXCEPTION WHEN OTHERS THEN
		RETURN SQLSTATE || ': ' || SQLERRM;
	END;
END $$;

-- the one progress row deleted: every function refuses it, and so does
-- an insert into the queue, which reads the rotation taking inserts
SELECT orw.try('DELETE FROM orw.progress', c)
	FROM unnest(ARRAY['SELECT exactonce.flush(''orw'')', 'SELECT exactonce.pause(''orw'')',
		'SELECT exactonce.resume(''orw'')', 'SELECT exactonce.set_shards(''orw'', 3)',
		'SELECT exactonce.rebuild(''orw'')', 'SELECT exactonce.replay_dead_letters(''orw'')',
		'SELECT exactonce.set_feed(''orw'', true)', 'SELECT * FROM exactonce.prune(''orw'', 1)',
		'INSERT INTO orw.ingest (key, version, value, d) VALUES (''n'', 1, 1, ''x'')']) c;
-- as a caller sees it
BEGIN;
DELETE FROM orw.progress;
SELECT exactonce.flush('orw');
ROLLBACK;
-- such a pipeline is dropped with force, which looks inside none of them
BEGIN;
DELETE FROM orw.progress;
SELECT orw.try('SELECT 1', 'SELECT exactonce.drop_pipeline(''orw'')');
SELECT exactonce.drop_pipeline('orw', force => true);
SELECT count(*) AS left FROM exactonce.pipeline WHERE name = 'orw';
ROLLBACK;

-- rotations that cannot be, and shard rows that are not the shards'
SELECT change, orw.try(change, 'SELECT exactonce.flush(''orw'')') AS flush,
	orw.try(change, 'SELECT exactonce.pause(''orw'')') AS pause
	FROM unnest(ARRAY['UPDATE orw.progress SET drain_rotation = -5',
		'UPDATE orw.progress SET rotation = rotation + 5',
		'UPDATE orw.progress SET rotation = 9223372036854775000',
		'UPDATE orw.shard SET drain_rotation = drain_rotation + 1 WHERE shard = 1',
		'DELETE FROM orw.shard WHERE shard = 0',
		'INSERT INTO orw.shard (shard) VALUES (7)',
		'UPDATE orw.shard SET shard = shard + 10',
		'UPDATE orw.shard SET drain_rotation = -1',
		'UPDATE orw.shard SET drain_position = -1',
		'UPDATE orw.shard SET drain_count = -3']) change;
SELECT orw.try('UPDATE orw.progress SET rotation = -1',
	'INSERT INTO orw.ingest (key, version, value, d) VALUES (''n'', 1, 1, ''x'')');

-- a trigger that skips the rows of progress, and rules
CREATE FUNCTION orw.skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
SELECT orw.try(change, 'SELECT exactonce.pause(''orw'')')
	FROM unnest(ARRAY['CREATE TRIGGER skip BEFORE UPDATE ON orw.progress FOR EACH ROW EXECUTE FUNCTION orw.skip()',
		'CREATE RULE keep AS ON UPDATE TO orw.progress DO INSTEAD NOTHING',
		'CREATE RULE keep AS ON INSERT TO orw.aggregates DO INSTEAD NOTHING',
		'CREATE RULE keep AS ON UPDATE TO orw.shard DO INSTEAD NOTHING']) change;
BEGIN;
CREATE RULE keep AS ON UPDATE TO orw.progress DO INSTEAD NOTHING;
SELECT exactonce.pause('orw');
ROLLBACK;

-- counters set to the end of bigint: the next batch's addition fails with
-- PostgreSQL's own error, and nothing of it is applied
SELECT orw.try('UPDATE orw.shard SET applied = 9223372036854775807', 'SELECT exactonce.flush(''orw'')');

-- triggers that skip rows of what rebuild() writes anew (the feed, the
-- cells, the distinct values, the ledger's staged batches) or set_shards()
-- (the shard rows), or that take rows out after they were written: each is
-- refused, where with 1.32 a batch left staged by a trigger on the ledger
-- was applied again on top of the rebuilt cells, twice in the aggregates
SELECT exactonce.create_pipeline('orb', ARRAY['d'], distinct_counts => ARRAY['c']);
SELECT exactonce.set_feed('orb', true);
INSERT INTO orb.ingest (key, version, value, d, c)
	SELECT 'k' || i % 10, i, i % 7, 'd' || i % 3, 'c' || i % 4 FROM generate_series(1, 40) i;
SELECT exactonce.flush('orb');
CREATE TABLE orb.b (key text, version bigint, value numeric, d text, c text);
INSERT INTO orb.b VALUES ('k1', 100, 50, 'd9', 'c9'), ('new', 1, 3, 'd0', 'c0');
SELECT exactonce.map_stage('orb', ARRAY(SELECT d FROM exactonce.state_upsert('orb',
	(SELECT array_agg(e) FROM orb.b e)) d)) IS NOT NULL AS staged;
CREATE FUNCTION orb.skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION orb.take() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM orb.aggregates WHERE level = NEW.level AND d IS NOT DISTINCT FROM NEW.d;
	RETURN NULL;
END $$;
SELECT change, orw.try('CREATE TRIGGER t ' || change, 'SELECT exactonce.rebuild(''orb'')') AS rebuild
	FROM unnest(ARRAY['BEFORE UPDATE ON orb.ledger FOR EACH ROW EXECUTE FUNCTION orb.skip()',
		'BEFORE INSERT ON orb.aggregates FOR EACH ROW EXECUTE FUNCTION orb.skip()',
		'BEFORE DELETE ON orb.aggregates FOR EACH ROW EXECUTE FUNCTION orb.skip()',
		'BEFORE INSERT ON orb.distincts FOR EACH ROW EXECUTE FUNCTION orb.skip()',
		'BEFORE DELETE ON orb.distincts FOR EACH ROW EXECUTE FUNCTION orb.skip()',
		'BEFORE INSERT ON orb.feed FOR EACH ROW EXECUTE FUNCTION orb.skip()',
		'AFTER INSERT ON orb.aggregates FOR EACH ROW EXECUTE FUNCTION orb.take()']) change;
SELECT change, orw.try('CREATE TRIGGER t ' || change, 'SELECT exactonce.set_shards(''orw'', ' || n || ')') AS set_shards
	FROM (VALUES ('BEFORE UPDATE ON orw.shard FOR EACH ROW EXECUTE FUNCTION orb.skip()', 1),
		('BEFORE DELETE ON orw.shard FOR EACH ROW EXECUTE FUNCTION orb.skip()', 1),
		('BEFORE INSERT ON orw.shard FOR EACH ROW EXECUTE FUNCTION orb.skip()', 3)) t(change, n);
-- and map's staging of a batch, whose events state has taken: a trigger
-- that skips its row of the ledger is refused, where with 1.32 the batch
-- never reached the aggregates
CREATE TABLE orb.b2 (key text, version bigint, value numeric, d text, c text);
INSERT INTO orb.b2 VALUES ('k2', 100, 5, 'd1', 'c1');
SELECT call, orw.try('CREATE TRIGGER t BEFORE INSERT ON orb.ledger FOR EACH ROW EXECUTE FUNCTION orb.skip()', call) AS staged
	FROM unnest(ARRAY['SELECT exactonce.map_stage(''orb'', ARRAY(SELECT d FROM exactonce.state_upsert(''orb'',
			(SELECT array_agg(e) FROM orb.b2 e)) d))',
		'INSERT INTO orb.ingest (key, version, value, d, c) SELECT * FROM orb.b2; SELECT exactonce.flush(''orb'')']) call;
-- and alter_pipeline_as(), whose narrower WHERE makes tombstones in state
SELECT exactonce.create_pipeline_as('orq', 'SELECT d, sum(value) AS total, count(*) AS n FROM stream GROUP BY ROLLUP (d)');
INSERT INTO orq.ingest (key, version, value, d) SELECT 'k' || i, 1, i, 'd' || i % 3 FROM generate_series(1, 20) i;
SELECT exactonce.flush('orq');
SELECT orw.try('CREATE TRIGGER t BEFORE UPDATE ON orq.state FOR EACH ROW EXECUTE FUNCTION orb.skip()',
	'SELECT exactonce.alter_pipeline_as(''orq'', ''SELECT d, sum(value) AS total, count(*) AS n FROM stream WHERE value > 10 GROUP BY ROLLUP (d)'')');
-- and the halves of a move: a trigger on state (which the stage writes
-- directly) is refused, and rows of dead_letters a trigger skips taking
-- out or putting in, where 1.32 left the keys behind or lost them
SELECT exactonce.create_pipeline('orm', ARRAY['d']);
INSERT INTO orm.ingest (key, version, value, d) SELECT 'k' || i, 1, i, 'd' || i % 3 FROM generate_series(1, 40) i;
SELECT exactonce.flush('orm');
INSERT INTO orm.ingest (key, version, value, d) SELECT 'k' || i, 1, i + 1, 'd' || i % 3 FROM generate_series(1, 40) i;
SELECT exactonce.flush('orm');
SELECT count(*) > 0 AS dead_in_range FROM orm.dead_letters WHERE exactonce.key_bucket(key, 4) = 1;
SELECT change, orw.try('CREATE TRIGGER t ' || change, 'SELECT exactonce.move_keys_out(''orm'', 4, 1, ''node2'', ''m-1'')') AS move_out
	FROM unnest(ARRAY['BEFORE DELETE ON orm.state FOR EACH ROW EXECUTE FUNCTION orb.skip()',
		'BEFORE DELETE ON orm.dead_letters FOR EACH ROW EXECUTE FUNCTION orb.skip()']) change;
BEGIN;
CREATE TEMP TABLE orm_moved ON COMMIT DROP AS SELECT * FROM exactonce.move_keys_out('orm', 4, 1, 'node2', 'm-1');
SELECT change, orw.try('CREATE TRIGGER t ' || change,
		'SELECT exactonce.move_keys_in(''orm'', 4, 1, ''node2'', ''m-2'', state, seen, dead_letters, horizon) FROM orm_moved') AS move_in
	FROM unnest(ARRAY['BEFORE INSERT ON orm.state FOR EACH ROW EXECUTE FUNCTION orb.skip()',
		'BEFORE INSERT ON orm.dead_letters FOR EACH ROW EXECUTE FUNCTION orb.skip()']) change;
SELECT exactonce.move_keys_in('orm', 4, 1, 'node2', 'm-2', state, seen, dead_letters, horizon) = keys AS all_back
	FROM orm_moved;
COMMIT;
-- and the events parked while keys move, put back into the queue before
-- their table is dropped: a trigger that keeps some there is refused
SELECT exactonce.move_keys_park('orm', 2, 0, 'node2');
INSERT INTO orm.ingest (key, version, value, d) SELECT 'k' || i, 2, i, 'd' || i % 3 FROM generate_series(1, 40) i;
SELECT count(*) AS parked FROM orm.moving_2_0 \gset
SELECT :parked > 0 AS parked;
SELECT orw.try('CREATE TRIGGER t BEFORE DELETE ON orm.moving_2_0 FOR EACH ROW EXECUTE FUNCTION orb.skip()',
	'SELECT exactonce.move_keys_unpark(''orm'', 2, 0)');
SELECT exactonce.move_keys_unpark('orm', 2, 0) = :parked AS all_returned;
SELECT exactonce.flush('orm') > 0 AS flushed;
SELECT item, ok FROM exactonce.verify('orm');
-- without them the staged batch is in the rebuilt cells once
SELECT count(*) FILTER (WHERE applied_at IS NULL) AS staged FROM orb.ledger;
SELECT exactonce.rebuild('orb');
SELECT exactonce.reduce_apply('orb') AS applied_again;
SELECT level, d, total, keys, c_distinct FROM orb.aggregates ORDER BY level, d;
SELECT d, sum(value) AS total, count(*) AS keys, count(DISTINCT c) AS c_distinct
	FROM orb.state WHERE NOT deleted GROUP BY ROLLUP (d) ORDER BY d NULLS FIRST;
SELECT item, ok FROM exactonce.verify('orb');

-- a key's state holding a number no event makes: refused as the state's,
-- where 1.31 staged its NaN deltas and refused them as the ledger's
SELECT change, orw.try(change, 'SELECT exactonce.flush(''orw'')') AS flush
	FROM unnest(ARRAY['UPDATE orw.state SET value = ''NaN'' WHERE key = ''k1''',
		'UPDATE orw.state SET value = ''-Infinity'' WHERE key = ''k1''',
		'UPDATE orw.state SET q = ''Infinity'' WHERE key = ''k1''']) change;
SELECT exactonce.create_pipeline('ora', ARRAY['d'], 'accumulate');
INSERT INTO ora.ingest (key, version, value, d) VALUES ('k1', 1, 5, 'x');
SELECT exactonce.flush('ora');
INSERT INTO ora.ingest (key, version, value, d) VALUES ('k1', 2, 5, 'x');
SELECT orw.try('UPDATE ora.state SET total = ''NaN''', 'SELECT exactonce.flush(''ora'')');
SELECT exactonce.flush('ora');
SELECT level, d, total, keys FROM ora.aggregates ORDER BY level, d;

-- nothing of it stayed: the events drain as before, exact
SELECT exactonce.flush('orw');
SELECT level, d, total, keys, q_sum FROM orw.aggregates ORDER BY level, d;
SELECT d, sum(value) AS total, count(*) AS keys, sum(q) AS q_sum FROM orw.state GROUP BY d ORDER BY d;
SELECT * FROM exactonce.verify('orw');
RESET ROLE;
SELECT exactonce.drop_pipeline('orw'), exactonce.drop_pipeline('ora'), exactonce.drop_pipeline('orb'),
	exactonce.drop_pipeline('orq'), exactonce.drop_pipeline('orm');
REVOKE CREATE ON DATABASE contrib_regression FROM regress_eo_rows;
DROP ROLE regress_eo_rows;
DROP EXTENSION exactonce;
