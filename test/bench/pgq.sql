-- test/bench/pgq.sql: a PgQ queue and consumer, a peer of exactonce's
-- latest mode in test/bench/run.sh.  Needs the pgq extension (Debian:
-- postgresql-15-pgq3); run.sh creates it before this file.
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
-- Events are PgQ events of type 'trade' whose ev_data is the event as JSON
-- (pgqc.encode; pgq.jsontriga encodes rows so too), on queue 'bench' with
-- consumer 'bench'.  Producers enqueue with pgq.insert_event or, in bulk, by
-- COPY into pgq.current_event_table('bench') (what run.sh does: PgQ
-- documents that path, and it skips a PL/pgSQL and a C function call per
-- event).  A batch is the events between two ticks; pgqd ticks, here
-- whoever enqueues calls pgq.ticker('bench') after each transaction, and
-- pgqc.consume calls it too before asking for a batch.
--
-- CALL pgqc.consume() takes batches until none is left, and for each, in one
-- statement: decodes the batch's events (pgq.get_batch_events), collapses
-- them per trade (the highest version), upserts state with a version guard,
-- turns the old and new contributions of every trade that changed into
-- ROLLUP deltas and upserts the aggregates; then deletes the cells left
-- without keys, finishes the batch and commits.  One commit per batch holds
-- the batch's effects and PgQ's progress (pgq.finish_batch) together: after
-- a crash the batch that did not commit is taken again, none of it applied.
--
-- The statement is naive.drain's but for one join: the old contribution of a
-- trade comes from its state row read before the upsert when the batch
-- brings a higher version, not from joining those rows to the upsert's
-- RETURNING.  That join is naive.sql's planner trap: pgq.get_batch_events is
-- estimated at a few rows, the planner joins the two CTEs with a nested loop
-- comparing every pair, and a batch of 10,000 events took over a second with
-- 4,000 trades in state (0.15 s without the join).

SELECT pgq.create_queue('bench');
-- a tick whenever there are new events (pgqd's default waits for 500 or 3 s):
-- the enqueue's transactions make the batches, the last one included
SELECT pgq.set_queue_config('bench', 'ticker_max_count', '1');
SELECT pgq.register_consumer('bench', 'bench');

CREATE SCHEMA pgqc;

-- An event as its JSON carries it.
CREATE TYPE pgqc.event AS (
	key			text,
	version		bigint,
	value		numeric,
	risk_type	text,
	region		text,
	trade_desk	text,
	deleted		boolean
);

CREATE FUNCTION pgqc.encode(e pgqc.event) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT row_to_json(e)::text $$;

-- One row per trade: its highest version so far.
CREATE TABLE pgqc.state (
	key			text COLLATE "C" PRIMARY KEY,
	version		bigint NOT NULL,
	value		numeric NOT NULL,
	risk_type	text NOT NULL,
	region		text NOT NULL,
	trade_desk	text NOT NULL,
	deleted		boolean NOT NULL
);

-- One row per non-empty rollup cell; level k groups by the first k dimensions.
CREATE TABLE pgqc.aggregates (
	risk_type	text,
	region		text,
	trade_desk	text,
	level		integer NOT NULL,
	total		numeric NOT NULL,
	keys		bigint NOT NULL
);
CREATE UNIQUE INDEX aggregates_cell ON pgqc.aggregates (level, risk_type, region, trade_desk)
	NULLS NOT DISTINCT;

-- Events consumed and batches committed, for the benchmark's bookkeeping.
CREATE TABLE pgqc.progress (
	events		bigint NOT NULL,
	batches		bigint NOT NULL
);
INSERT INTO pgqc.progress VALUES (0, 0);

CREATE PROCEDURE pgqc.consume(queue text DEFAULT 'bench', consumer text DEFAULT 'bench')
LANGUAGE plpgsql
AS $$
DECLARE
	batch bigint;
	taken bigint;
BEGIN
	LOOP
		-- pgqd's job: a tick for the events enqueued since the last one
		PERFORM pgq.ticker(queue);
		batch := pgq.next_batch(queue, consumer);
		EXIT WHEN batch IS NULL;

		WITH batch_events AS (
			SELECT j.*
			  FROM pgq.get_batch_events(batch) e,
				   json_populate_record(NULL::pgqc.event, e.ev_data::json) j
			 WHERE e.ev_type = 'trade'
		), latest AS (
			-- per trade, the highest version in the batch
			SELECT DISTINCT ON (key) *
			  FROM batch_events
			 ORDER BY key, version DESC
		), before AS (
			-- the trades' state rows as they were before this batch, and the
			-- version the batch brings
			SELECT s.*, l.version AS new_version
			  FROM pgqc.state s
			  JOIN latest l ON l.key = s.key
		), upserted AS (
			-- only a higher version replaces a row
			INSERT INTO pgqc.state AS s (key, version, value, risk_type, region, trade_desk, deleted)
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
			INSERT INTO pgqc.aggregates AS a (risk_type, region, trade_desk, level, total, keys)
			SELECT risk_type, region, trade_desk, level, total, keys
			  FROM deltas
			 WHERE keys <> 0 OR total <> 0		-- also drops ROLLUP's row for no input
			ON CONFLICT (level, risk_type, region, trade_desk) DO UPDATE
			   SET total = a.total + excluded.total, keys = a.keys + excluded.keys
			RETURNING 1
		)
		SELECT count(*) INTO taken
		  FROM batch_events;

		-- cells left without live keys
		DELETE FROM pgqc.aggregates WHERE keys = 0;
		UPDATE pgqc.progress SET events = events + taken, batches = batches + 1;
		PERFORM pgq.finish_batch(batch);
		COMMIT;
	END LOOP;
	COMMIT;
END;
$$;
