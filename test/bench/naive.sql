-- test/bench/naive.sql: the naive SQL pipeline, the reference peer of
-- exactonce's latest mode in test/bench/run.sh.
--
-- Same semantics as an exactonce pipeline in latest mode over (risk_type,
-- region, trade_desk):
--   * a key contributes the value of its highest version, in the cell of that
--     version's dimensions, at every rollup level 0..3;
--   * a lower version than the key's current one, or the same version again,
--     changes nothing (the version guard of the state upsert);
--   * deleted = true removes the key's contribution and stays in state, so
--     older versions stay stale;
--   * a cell with no live key has no row.
--
-- Events go into naive.queue (COPY or INSERT); CALL naive.drain() takes them
-- out in batches with DELETE ... RETURNING, and for each batch, in one
-- statement: collapses the batch per trade (its highest version), upserts
-- state with a version guard, computes the old and new contributions of every
-- trade that changed, turns them into ROLLUP deltas, upserts the aggregates;
-- then deletes the cells left without keys and commits.  One commit per batch.
--
-- It keeps no counters of duplicates and stale events and no dead letters:
-- it is the plain SQL a team would write first, not a reimplementation of
-- exactonce.
--
-- The planner trap.  A batch is taken with the usual batched-delete idiom,
-- DELETE ... WHERE ctid = ANY (ARRAY(SELECT ctid ... LIMIT n)), for which the
-- planner assumes an array of 10 elements: it plans the whole batch statement
-- for 10 rows and joins the changed trades to their old state rows with a
-- nested loop that compares every pair (10,000 x 10,000 per batch), and it
-- gets slower as the run goes on.  As written it runs at a few thousand
-- events/s; with SET enable_nestloop = off for the drain (what run.sh calls
-- "tuned") the same SQL runs at about 100,000 on two cores.  (The
-- variant "WHERE id IN (SELECT id FROM naive.queue ORDER BY id LIMIT n)" gets a
-- 10,000-row estimate and a good plan without the setting.)

CREATE SCHEMA naive;

-- The queue.  Batches are taken in physical order, which is arrival order
-- up to a few rows; latest mode does not depend on the order anyway.
CREATE TABLE naive.queue (
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
CREATE TABLE naive.state (
	key			text COLLATE "C" PRIMARY KEY,
	version		bigint NOT NULL,
	value		numeric NOT NULL,
	risk_type	text NOT NULL,
	region		text NOT NULL,
	trade_desk	text NOT NULL,
	deleted		boolean NOT NULL
);

-- One row per non-empty rollup cell; level k groups by the first k dimensions.
CREATE TABLE naive.aggregates (
	risk_type	text,
	region		text,
	trade_desk	text,
	level		integer NOT NULL,
	total		numeric NOT NULL,
	keys		bigint NOT NULL
);
CREATE UNIQUE INDEX aggregates_cell ON naive.aggregates (level, risk_type, region, trade_desk)
	NULLS NOT DISTINCT;

-- Events taken and batches committed, for the benchmark's bookkeeping.
CREATE TABLE naive.progress (
	events		bigint NOT NULL,
	batches		bigint NOT NULL
);
INSERT INTO naive.progress VALUES (0, 0);

CREATE PROCEDURE naive.drain(batch_size integer DEFAULT 10000)
LANGUAGE plpgsql
AS $$
DECLARE
	taken bigint;
BEGIN
	LOOP
		WITH batch AS (
			-- take batch_size events off the queue
			DELETE FROM naive.queue
			 WHERE ctid = ANY (ARRAY(SELECT ctid FROM naive.queue LIMIT batch_size))
			RETURNING key, version, value, risk_type, region, trade_desk, deleted
		), latest AS (
			-- per trade, the highest version in the batch
			SELECT DISTINCT ON (key) *
			  FROM batch
			 ORDER BY key, version DESC
		), before AS (
			-- the trades' state rows as they were before this batch
			SELECT s.*
			  FROM naive.state s
			  JOIN latest l ON l.key = s.key
		), upserted AS (
			-- apply the batch to state: only a higher version replaces a row
			INSERT INTO naive.state AS s (key, version, value, risk_type, region, trade_desk, deleted)
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
			-- ... minus its old one
			SELECT b.risk_type, b.region, b.trade_desk, -b.value, -1
			  FROM before b
			  JOIN upserted u ON u.key = b.key
			 WHERE NOT b.deleted
		), deltas AS (
			SELECT risk_type, region, trade_desk,
				   3 - grouping(risk_type) - grouping(region) - grouping(trade_desk) AS level,
				   sum(total) AS total, sum(keys) AS keys
			  FROM contributions
			 GROUP BY ROLLUP (risk_type, region, trade_desk)
		), applied AS (
			INSERT INTO naive.aggregates AS a (risk_type, region, trade_desk, level, total, keys)
			SELECT risk_type, region, trade_desk, level, total, keys
			  FROM deltas
			 WHERE keys <> 0 OR total <> 0		-- also drops ROLLUP's row for no input
			ON CONFLICT (level, risk_type, region, trade_desk) DO UPDATE
			   SET total = a.total + excluded.total, keys = a.keys + excluded.keys
			RETURNING 1
		)
		SELECT count(*) INTO taken
		  FROM batch;

		EXIT WHEN taken = 0;
		-- cells left without live keys
		DELETE FROM naive.aggregates WHERE keys = 0;
		UPDATE naive.progress SET events = events + taken, batches = batches + 1;
		COMMIT;
	END LOOP;
	COMMIT;
END;
$$;
