-- The change feed: set_feed() on a pipeline with cells already, the
-- changes of each reduce with old and new totals, feed_read() positions
-- that move only with the reader's commit, the feed replayed from its
-- start equal to the aggregates, off, and what is refused.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;

-- err(sql): run a statement, show its SQLSTATE, message and hint
CREATE FUNCTION pg_temp.err(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	state text; msg text; hint text;
BEGIN
	EXECUTE sql;
	RETURN 'no error';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
	RETURN state || ': ' || msg || coalesce(' | HINT: ' || nullif(hint, ''), '');
END $$;

SELECT exactonce.create_pipeline('fd', ARRAY['region', 'desk']);
INSERT INTO fd.ingest (key, version, value, region, desk) VALUES
	('a', 1, 10, 'EMEA', 'd1'), ('b', 1, 20, 'EMEA', 'd2');
SELECT exactonce.flush('fd');
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('fd', 'c1')$$);

-- on: the cells there are come first, as changes from nothing
SELECT exactonce.set_feed('fd', true);
SELECT name, feed FROM exactonce.pipelines;
SELECT seq, level, region, desk, old_total, new_total, old_keys, new_keys FROM fd.feed ORDER BY seq;

-- a move, a new key and a tombstone: one change per cell of the reduce.
-- No consumer has read the feed yet, so the flush folds what all of them
-- (none) have read: each cell keeps one row, its last change, from nothing
-- (EMEA/d1, which came and left, keeps none)
INSERT INTO fd.ingest (key, version, value, region, desk, deleted) VALUES
	('a', 2, 15, 'APAC', 'd1', false), ('c', 1, 5, 'EMEA', 'd2', false), ('b', 2, 20, 'EMEA', 'd2', true);
SELECT exactonce.flush('fd');
SELECT seq, level, region, desk, old_total, new_total, old_keys, new_keys FROM fd.feed WHERE seq > 5 ORDER BY seq;

-- a consumer reads in order; what it read in a transaction rolled back it
-- reads again
BEGIN;
SELECT seq, level, cell, new_total FROM exactonce.feed_read('fd', 'c1', 3);
ROLLBACK;
SELECT seq, level, cell, new_total FROM exactonce.feed_read('fd', 'c1', 3);
SELECT seq FROM exactonce.feed_read('fd', 'c1', 100);
SELECT seq FROM exactonce.feed_read('fd', 'c1', 100) AS nothing_new;
SELECT seq FROM exactonce.feed_read('fd', 'c2', 2) AS another_consumer;
SELECT pipeline, consumer, position, changes FROM exactonce.feed_consumers ORDER BY consumer;

-- the feed replayed from its start: each cell's last change is its row in
-- the aggregates, and the changes add up to it
SELECT count(*) AS mismatches FROM (
	(SELECT level, region, desk, total, keys FROM fd.aggregates
	 EXCEPT SELECT level, region, desk, new_total, new_keys FROM
		(SELECT DISTINCT ON (level, region, desk) * FROM fd.feed ORDER BY level, region, desk, seq DESC) l
	 WHERE new_keys > 0)
	UNION ALL
	(SELECT level, region, desk, sum(new_total - old_total), sum(new_keys - old_keys) FROM fd.feed
	 GROUP BY level, region, desk HAVING sum(new_keys - old_keys) > 0
	 EXCEPT SELECT level, region, desk, total, keys FROM fd.aggregates)) m;

-- notify (heard in test/t/019_feed.pl: the notice names a process)
SELECT exactonce.set_feed('fd', true, notify => true);
SELECT feed, feed_notify FROM exactonce.pipeline WHERE name = 'fd';
INSERT INTO fd.ingest (key, version, value, region, desk) VALUES ('d', 1, 1, 'EMEA', 'd1');
SELECT exactonce.flush('fd');

-- a rebuild: damage behind the feed's back is repaired without a change
-- (the feed said the right total all along); a cell the feed had wrong gets
-- one, so the replay still holds
SELECT max(seq) AS before_rebuild FROM fd.feed \gset
UPDATE fd.aggregates SET total = total + 100 WHERE level = 0;
UPDATE fd.feed SET new_total = new_total + 1 WHERE seq = (SELECT max(seq) FROM fd.feed WHERE level = 2);
SELECT exactonce.rebuild('fd');
SELECT level, region, desk, old_total, new_total, old_keys, new_keys FROM fd.feed WHERE seq > :before_rebuild;
SELECT count(*) AS mismatches FROM (
	(SELECT level, region, desk, sum(new_total - old_total), sum(new_keys - old_keys) FROM fd.feed
	 GROUP BY level, region, desk HAVING sum(new_keys - old_keys) > 0
	 EXCEPT SELECT level, region, desk, total, keys FROM fd.aggregates)
	UNION ALL
	(SELECT level, region, desk, total, keys FROM fd.aggregates
	 EXCEPT SELECT level, region, desk, sum(new_total - old_total), sum(new_keys - old_keys) FROM fd.feed
	 GROUP BY level, region, desk)) m;

-- refused
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('fd', '')$$);
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('fd', 'c1', 0)$$);
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('nope', 'c1')$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('fd', 'c1')$$);
ROLLBACK;
CREATE ROLE regress_feed_reader;
GRANT USAGE ON SCHEMA fd TO regress_feed_reader;
SET ROLE regress_feed_reader;
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('fd', 'c3')$$);
SELECT pg_temp.err($$SELECT exactonce.set_feed('fd', false)$$);
SELECT count(*) AS visible_consumers FROM exactonce.feed_consumers;
RESET ROLE;
GRANT SELECT ON fd.feed TO regress_feed_reader;
SET ROLE regress_feed_reader;
SELECT count(*) AS changes FROM exactonce.feed_read('fd', 'c3');
SELECT count(*) AS visible_consumers FROM exactonce.feed_consumers;
RESET ROLE;

-- retention: below the least position of the consumers each cell's
-- changes are folded into its last; above it nothing is touched
SELECT exactonce.create_pipeline('fr', ARRAY['region']);
SELECT exactonce.set_feed('fr', true);
SELECT count(*) AS registered FROM exactonce.feed_read('fr', 'fast');
SELECT count(*) AS registered FROM exactonce.feed_read('fr', 'slow');
INSERT INTO fr.ingest (key, version, value, region) VALUES ('a', 1, 10, 'EMEA');
SELECT exactonce.flush('fr');
INSERT INTO fr.ingest (key, version, value, region) VALUES ('a', 2, 20, 'EMEA');
SELECT exactonce.flush('fr');
SELECT count(*) AS read_by_fast FROM exactonce.feed_read('fr', 'fast');
INSERT INTO fr.ingest (key, version, value, region) VALUES ('a', 3, 30, 'EMEA'), ('b', 1, 5, 'APAC');
SELECT exactonce.flush('fr');
SELECT seq, level, region, old_total, new_total, old_keys, new_keys FROM fr.feed ORDER BY seq;
SELECT count(*) AS read_by_slow FROM exactonce.feed_read('fr', 'slow', 4);
SELECT exactonce.flush('fr');
SELECT seq, level, region, old_total, new_total, old_keys, new_keys FROM fr.feed ORDER BY seq;
-- the consumers go on where they were; one that starts now gets the
-- folded feed, whose changes still add up to the aggregates
SELECT seq FROM exactonce.feed_read('fr', 'slow');
SELECT seq FROM exactonce.feed_read('fr', 'fast');
CREATE TEMP TABLE late AS SELECT * FROM exactonce.feed_read('fr', 'late');
SELECT count(*) AS mismatches FROM (
	(SELECT level, cell[1], sum(new_total - old_total), sum(new_keys - old_keys) FROM late
	 GROUP BY 1, 2 EXCEPT SELECT level, region, total, keys FROM fr.aggregates)
	UNION ALL
	(SELECT level, region, total, keys FROM fr.aggregates
	 EXCEPT SELECT level, cell[1], sum(new_total - old_total), sum(new_keys - old_keys) FROM late
	 GROUP BY 1, 2)) m;
SELECT exactonce.drop_feed_consumer('fr', 'late');

-- a consumer that lags past exactonce.feed_max_lag changes is invalidated
-- at the next fold, loudly, and holds nothing back; its reads fail until it
-- is dropped, and then it starts from the feed's start
SET exactonce.feed_max_lag = 5;
INSERT INTO fr.ingest (key, version, value, region) VALUES ('a', 4, 40, 'EMEA'), ('b', 2, 6, 'APAC');
SELECT exactonce.flush('fr');
SELECT count(*) AS read_by_fast FROM exactonce.feed_read('fr', 'fast');
INSERT INTO fr.ingest (key, version, value, region) VALUES ('a', 5, 50, 'EMEA'), ('b', 3, 7, 'APAC');
SELECT exactonce.flush('fr');
SELECT consumer, position, invalidated_at IS NOT NULL AS invalidated, invalidation_reason
FROM exactonce.feed_consumers WHERE pipeline = 'fr' ORDER BY consumer;
SELECT feed_consumers_invalidated FROM exactonce.pipelines WHERE name = 'fr';
SELECT pg_temp.err($$SELECT * FROM exactonce.feed_read('fr', 'slow')$$);
SELECT seq, level, region, old_total, new_total FROM fr.feed ORDER BY seq;
SET ROLE regress_feed_reader;
SELECT pg_temp.err($$SELECT exactonce.drop_feed_consumer('fr', 'slow')$$);
RESET ROLE;
SELECT exactonce.drop_feed_consumer('fr', 'slow') AS dropped, exactonce.drop_feed_consumer('fr', 'slow') AS again;
SELECT feed_consumers_invalidated FROM exactonce.pipelines WHERE name = 'fr';
SELECT seq, new_total FROM exactonce.feed_read('fr', 'slow');
RESET exactonce.feed_max_lag;

-- ... or whose oldest unread change is older than exactonce.feed_max_lag_age
SET exactonce.feed_max_lag_age = '1s';
SELECT count(*) AS read_by_fast FROM exactonce.feed_read('fr', 'fast');
INSERT INTO fr.ingest (key, version, value, region) VALUES ('a', 6, 60, 'EMEA');
SELECT exactonce.flush('fr');
SELECT count(*) AS read_by_fast FROM exactonce.feed_read('fr', 'fast');
SELECT pg_sleep(1.2);
SELECT exactonce.flush('fr');
SELECT consumer, invalidated_at IS NOT NULL AS invalidated FROM exactonce.feed_consumers
WHERE pipeline = 'fr' ORDER BY consumer;
RESET exactonce.feed_max_lag_age;

-- the limit counts the changes left to read, not seqs: a consumer that
-- starts now reads the folded feed, a row per cell, however many changes
-- were made before
SELECT exactonce.drop_feed_consumer('fr', 'slow');
INSERT INTO fr.ingest (key, version, value, region) VALUES ('c', 1, 3, 'LATAM');
SELECT exactonce.flush('fr');
INSERT INTO fr.ingest (key, version, value, region) VALUES ('a', 7, 70, 'EMEA'), ('b', 4, 8, 'APAC');
SELECT exactonce.flush('fr');
INSERT INTO fr.ingest (key, version, value, region) VALUES ('a', 8, 80, 'EMEA'), ('b', 5, 9, 'APAC');
SELECT exactonce.flush('fr');
SELECT count(*) AS read_by_fast FROM exactonce.feed_read('fr', 'fast');
SELECT exactonce.flush('fr');
SET exactonce.feed_max_lag = 4;
SELECT seq, level, cell, old_total, new_total FROM exactonce.feed_read('fr', 'newcomer', 1);
SELECT (SELECT max(seq) FROM fr.feed) - position AS seqs_behind,
	(SELECT count(*) FROM fr.feed f WHERE f.seq > c.position) AS changes_left
FROM exactonce.feed_consumers c WHERE pipeline = 'fr' AND consumer = 'newcomer';
SELECT exactonce.flush('fr');
SELECT consumer, invalidated_at IS NOT NULL AS invalidated FROM exactonce.feed_consumers
WHERE pipeline = 'fr' ORDER BY consumer;
RESET exactonce.feed_max_lag;
SELECT pg_temp.err($$SET exactonce.feed_max_lag = -2$$);
SELECT exactonce.drop_pipeline('fr');

-- off: the feed and the positions go
SELECT exactonce.set_feed('fd', false);
SELECT to_regclass('fd.feed') IS NULL AS feed_dropped, (SELECT count(*) FROM exactonce.feed_consumers) AS consumers;
INSERT INTO fd.ingest (key, version, value, region, desk) VALUES ('e', 1, 1, 'EMEA', 'd1');
SELECT exactonce.flush('fd');

SELECT exactonce.drop_pipeline('fd');
DROP OWNED BY regress_feed_reader;
DROP ROLE regress_feed_reader;
DROP EXTENSION exactonce;
