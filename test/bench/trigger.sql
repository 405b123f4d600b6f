-- test/bench/trigger.sql: a trigger pipeline, a peer of exactonce's latest
-- mode in test/bench/run.sh: no queue, the pipeline runs inside the ingest.
--
-- Same semantics as test/bench/naive.sql (and an exactonce pipeline in latest
-- mode over risk_type, region, trade_desk):
--   * a key contributes the value of its highest version, in the cell of that
--     version's dimensions, at every rollup level 0..3;
--   * a lower version than the key's current one, or the same version again,
--     changes nothing (the version guard of the state upsert);
--   * deleted = true removes the key's contribution and stays in state, so
--     older versions stay stale;
--   * a cell with no live key has no row.
--
-- Events go into trig.ingest (COPY or INSERT).  An AFTER INSERT trigger
-- applies them to trig.state and trig.aggregates in the inserting
-- statement's transaction: the ingest is the pipeline, and its cost is the
-- pipeline's.  trig.ingest keeps the rows it was given, as a log (a real
-- deployment would partition it by time and drop old partitions).
--
-- Statement level, not row level.  The trigger is FOR EACH STATEMENT with a
-- transition table: one set-based statement per INSERT or COPY collapses the
-- statement's events per trade, upserts state with a version guard and turns
-- the changed trades' old and new contributions into ROLLUP deltas, like
-- naive.drain's batch.  A FOR EACH ROW trigger does the work an event at a
-- time: a state lookup and write, a four-cell aggregate upsert for the old
-- contribution and one for the new, the deletes of emptied cells.  On the
-- benchmark's first 20,000 events in one COPY it took 43 s, the
-- statement-level trigger 0.13 s: each update of a cell leaves a row version
-- that the cell's next update in the same transaction walks past, the level-0
-- cell changes with nearly every event, and the row-level trigger slows down
-- as the transaction grows.  The statement-level trigger
-- pays its fixed cost per statement: a COPY of the whole event file (the
-- benchmark) is one set, a single-row INSERT pays it for one event.
--
-- The statement is naive.drain's but for one join: the old contribution of a
-- trade comes from its state row read before the upsert when the statement
-- brings a higher version, not from joining those rows to the upsert's
-- RETURNING (test/bench/pgq.sql says why: a planner trap when estimates are
-- low; a transition table's row count is known, but the join is not needed).
--
-- Concurrent writers.  The trigger reads the trades' old state rows in its
-- statement's snapshot; an upsert that waited for a concurrent writer's row
-- would see a newer version than that snapshot and subtract the wrong old
-- contribution, and two writers upserting the same cells in different orders
-- deadlock.  So the trigger first takes an exclusive lock on trig.aggregates,
-- which serializes the pipeline part of concurrent ingests (each one's
-- statement then starts after the previous one committed, and sees its
-- state).  In the benchmark there is one writer and the lock is free.

CREATE SCHEMA trig;

-- The ingest table: the events as they came, one row each.
CREATE TABLE trig.ingest (
	key			text NOT NULL,
	version		bigint NOT NULL,
	value		numeric NOT NULL,
	risk_type	text NOT NULL,
	region		text NOT NULL,
	trade_desk	text NOT NULL,
	deleted		boolean NOT NULL DEFAULT false,
	event_time	timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per trade: its highest version so far.
CREATE TABLE trig.state (
	key			text COLLATE "C" PRIMARY KEY,
	version		bigint NOT NULL,
	value		numeric NOT NULL,
	risk_type	text NOT NULL,
	region		text NOT NULL,
	trade_desk	text NOT NULL,
	deleted		boolean NOT NULL
);

-- One row per non-empty rollup cell; level k groups by the first k dimensions.
CREATE TABLE trig.aggregates (
	risk_type	text,
	region		text,
	trade_desk	text,
	level		integer NOT NULL,
	total		numeric NOT NULL,
	keys		bigint NOT NULL
);
CREATE UNIQUE INDEX aggregates_cell ON trig.aggregates (level, risk_type, region, trade_desk)
	NULLS NOT DISTINCT;

-- Events applied and trigger runs, for the benchmark's bookkeeping.
CREATE TABLE trig.progress (
	events		bigint NOT NULL,
	statements	bigint NOT NULL
);
INSERT INTO trig.progress VALUES (0, 0);

CREATE FUNCTION trig.apply() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
	taken bigint;
BEGIN
	-- one writer at a time through the pipeline (see the header)
	LOCK TABLE trig.aggregates IN EXCLUSIVE MODE;
	WITH latest AS (
		-- per trade, the highest version in the statement
		SELECT DISTINCT ON (key) key, version, value, risk_type, region, trade_desk, deleted
		  FROM new_events
		 ORDER BY key, version DESC
	), before AS (
		-- the trades' state rows as they were before this statement, and the
		-- version the statement brings
		SELECT s.*, l.version AS new_version
		  FROM trig.state s
		  JOIN latest l ON l.key = s.key
	), upserted AS (
		-- only a higher version replaces a row
		INSERT INTO trig.state AS s (key, version, value, risk_type, region, trade_desk, deleted)
		SELECT key, version, value, risk_type, region, trade_desk, deleted
		  FROM latest
		ON CONFLICT (key) DO UPDATE
		   SET version = excluded.version, value = excluded.value,
			   risk_type = excluded.risk_type, region = excluded.region,
			   trade_desk = excluded.trade_desk, deleted = excluded.deleted
		 WHERE s.version < excluded.version
		RETURNING s.*
	), contributions AS (
		-- the new contribution of every trade that changed ...
		SELECT risk_type, region, trade_desk, value AS total, 1 AS keys
		  FROM upserted
		 WHERE NOT deleted
		UNION ALL
		-- ... minus its old one: the state rows the upsert replaced
		SELECT risk_type, region, trade_desk, -value, -1
		  FROM before
		 WHERE version < new_version AND NOT deleted
	), deltas AS (
		SELECT risk_type, region, trade_desk,
			   3 - grouping(risk_type) - grouping(region) - grouping(trade_desk) AS level,
			   sum(total) AS total, sum(keys) AS keys
		  FROM contributions
		 GROUP BY ROLLUP (risk_type, region, trade_desk)
	), applied AS (
		INSERT INTO trig.aggregates AS a (risk_type, region, trade_desk, level, total, keys)
		SELECT risk_type, region, trade_desk, level, total, keys
		  FROM deltas
		 WHERE keys <> 0 OR total <> 0		-- also drops ROLLUP's row for no input
		ON CONFLICT (level, risk_type, region, trade_desk) DO UPDATE
		   SET total = a.total + excluded.total, keys = a.keys + excluded.keys
		RETURNING 1
	)
	SELECT count(*) INTO taken
	  FROM new_events;

	-- cells left without live keys
	DELETE FROM trig.aggregates WHERE keys = 0;
	UPDATE trig.progress SET events = events + taken, statements = statements + 1;
	RETURN NULL;
END;
$$;

CREATE TRIGGER apply AFTER INSERT ON trig.ingest
	REFERENCING NEW TABLE AS new_events
	FOR EACH STATEMENT EXECUTE FUNCTION trig.apply();
