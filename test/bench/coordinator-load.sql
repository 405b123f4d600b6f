-- test/bench/coordinator-load.sql: a pgbench transaction for
-- distributed.sh and moves.sh: 100 new keys, logged in load_log (the
-- producers' truth) and inserted through the coordinator's ingest, so that
-- each statement reaches every node.
WITH r AS (INSERT INTO load_log SELECT 'L' || nextval('load_seq'), 1, (random() * 100)::int,
	'rt' || (random() * 3)::int, 'rg' || (random() * 2)::int, 'td1' FROM generate_series(1, 100) RETURNING *)
INSERT INTO dtrades.ingest (key, version, value, risk_type, region, trade_desk, deleted, event_time)
SELECT key, version, value, risk_type, region, trade_desk, false, now() FROM r;
