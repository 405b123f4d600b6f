-- Min and max under moves, newer versions, tombstones and missing
-- measures: after each of 60 rounds of random events (a fixed seed), the
-- min and max of every cell of a rollup and of a cube equal those computed
-- from the latest version of each key of the events as sent.  A cell whose
-- extreme leaves is set anew from state (a leaf) or from its children; the
-- others take in what enters (extrema.c).
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('mm', ARRAY['a', 'b', 'c'], measures => ARRAY['m'],
	min_max => ARRAY['value', 'm']);
SELECT exactonce.create_pipeline('mc', ARRAY['a', 'b', 'c'], measures => ARRAY['m'],
	min_max => ARRAY['value', 'm'], grouping_sets => 'cube');
CREATE TABLE sent (key text, version bigint, value numeric, a text, b text, c text, m numeric,
	deleted boolean);
-- rows of the pipeline's aggregates and of the oracle that are not in the other
CREATE FUNCTION differing(p text, sets text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
BEGIN
	EXECUTE format($q$
	WITH l AS (SELECT DISTINCT ON (key) * FROM sent ORDER BY key, version DESC),
	o AS (SELECT a, b, c, min(value), max(value), min(m), max(m), count(*)
		  FROM l WHERE NOT deleted GROUP BY %s),
	g AS (SELECT a, b, c, value_min, value_max, m_min, m_max, keys FROM %I.aggregates)
	SELECT count(*) FROM ((SELECT * FROM o EXCEPT ALL SELECT * FROM g)
		UNION ALL (SELECT * FROM g EXCEPT ALL SELECT * FROM o)) d$q$, sets, p) INTO n;
	RETURN n;
END $$;
CREATE TABLE rounds (round integer, rollup_differing bigint, cube_differing bigint);
DO $$
BEGIN
	PERFORM setseed(0.42);
	FOR r IN 1 .. 60 LOOP
		CREATE TEMP TABLE b AS
		SELECT 'k' || (random() * 2500)::int AS key, (r * 1000 + i)::bigint AS version,
			round((random() * 100)::numeric, 1) AS value, 'a' || (random() * 2)::int AS a,
			'b' || (random() * 2)::int AS b, 'c' || (random() * 2)::int AS c,
			CASE WHEN random() < 0.2 THEN NULL ELSE round((random() * 50)::numeric, 0) END AS m,
			random() < 0.1 AS deleted
		FROM generate_series(1, 200) i;
		INSERT INTO sent SELECT * FROM b;
		INSERT INTO mm.ingest (key, version, value, a, b, c, m, deleted) SELECT * FROM b;
		INSERT INTO mc.ingest (key, version, value, a, b, c, m, deleted) SELECT * FROM b;
		DROP TABLE b;
		PERFORM exactonce.flush('mm');
		PERFORM exactonce.flush('mc');
		INSERT INTO rounds VALUES (r, differing('mm', 'ROLLUP (a, b, c)'), differing('mc', 'CUBE (a, b, c)'));
	END LOOP;
END $$;
SELECT count(*) AS rounds, sum(rollup_differing) AS rollup_differing, sum(cube_differing) AS cube_differing
FROM rounds;
-- keys moved between cells, taking their values out of the old ones
SELECT count(*) > 2000 AS versions_moved FROM (SELECT key, a, b, c, lag(a || b || c) OVER (PARTITION BY key ORDER BY version) AS before FROM sent) s WHERE before IS DISTINCT FROM a || b || c AND before IS NOT NULL;
SELECT item, ok FROM exactonce.verify('mm') WHERE NOT ok;
-- leaves of enough keys kept reserves through it, which verify() checked
SELECT count(extrema_reserve) > 0 AS reserves_kept FROM mm.aggregates;
SELECT exactonce.drop_pipeline('mm'), exactonce.drop_pipeline('mc');
DROP TABLE sent, rounds;

-- a leaf of more than 64 keys keeps a reserve of its least and greatest
-- values (a batch lists four of each): when its min leaves, the next comes from the
-- reserve without reading the leaf's keys through index state_cell; only
-- a reserve emptied reads them, and fills itself again
SELECT exactonce.create_pipeline('rs', ARRAY['a'], shards => 1, min_max => ARRAY['value']);
CREATE FUNCTION reads() RETURNS bigint LANGUAGE sql AS
$$SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelid = 'rs.state_cell'::regclass$$;
INSERT INTO rs.ingest (key, version, value, a) SELECT 'k' || i, 1, i, 'x' FROM generate_series(1, 100) i;
SELECT exactonce.flush('rs') AS flushed;
SELECT pg_stat_force_next_flush();
SELECT value_min, value_max, extrema_reserve, reads() AS reads FROM rs.aggregates WHERE level = 1 \gset
SELECT :value_min, :value_max, :'extrema_reserve';
-- the min and the max leave, each replaced from the reserve
INSERT INTO rs.ingest (key, version, value, a) VALUES ('k1', 2, 50.5, 'x'), ('k100', 2, 49.5, 'x');
SELECT exactonce.flush('rs') AS flushed;
SELECT pg_stat_force_next_flush();
SELECT value_min, value_max, extrema_reserve, reads() - :reads AS reads FROM rs.aggregates WHERE level = 1;
-- the rest of the reserve of least values leaves: one read
INSERT INTO rs.ingest (key, version, value, a) SELECT 'k' || i, 2, 50, 'x' FROM generate_series(2, 7) i;
SELECT exactonce.flush('rs') AS flushed;
SELECT pg_stat_force_next_flush();
SELECT value_min, value_max, extrema_reserve, reads() - :reads AS reads FROM rs.aggregates WHERE level = 1;
-- and a leaf new in the batch, of more than 64 keys, starts its reserve
-- from its values
INSERT INTO rs.ingest (key, version, value, a) SELECT 'k8', 2, 50, 'x'
UNION ALL SELECT 'k' || i, 1, -i, 'y' FROM generate_series(101, 170) i;
SELECT exactonce.flush('rs') AS flushed;
SELECT pg_stat_force_next_flush();
SELECT a, value_min, value_max, extrema_reserve, reads() - :reads AS reads FROM rs.aggregates WHERE level = 1 ORDER BY a;
SELECT item, ok FROM exactonce.verify('rs') WHERE NOT ok;
-- rebuild() keeps no reserve; the next read fills it
SELECT exactonce.rebuild('rs') AS cells;
SELECT count(extrema_reserve) AS reserves FROM rs.aggregates;
SELECT exactonce.drop_pipeline('rs');
DROP FUNCTION reads();
-- verify() reads a pipeline whose dimensions are named as its own columns
-- might be; the reserve's column is no dimension's name
SELECT exactonce.create_pipeline('rn', ARRAY['l0', 'fits'], shards => 1, min_max => ARRAY['value']);
INSERT INTO rn.ingest (key, version, value, l0, fits) SELECT 'k' || i, 1, i, 'x', 'y' FROM generate_series(1, 70) i;
SELECT exactonce.flush('rn') AS flushed;
SELECT item, detail FROM exactonce.verify('rn') WHERE item = 'reserves';
SELECT exactonce.drop_pipeline('rn');
\set VERBOSITY terse
SELECT exactonce.create_pipeline('rx', ARRAY['extrema_reserve'], min_max => ARRAY['value']);
\set VERBOSITY default

-- a batch staged and not applied is in state already: a leaf read while it
-- waits (reduce_apply() of an earlier token) sets its min from state but
-- keeps no reserve, or the batch's values would count twice once applied
SELECT exactonce.create_pipeline('rs', ARRAY['a'], min_max => ARRAY['value']);
INSERT INTO rs.ingest (key, version, value, a) SELECT 'k' || i, 1, 10 * i, 'x' FROM generate_series(1, 100) i;
SELECT exactonce.flush('rs') AS flushed;
CREATE TEMP TABLE tokens (n int, token bytea);
INSERT INTO tokens SELECT 1, exactonce.map_stage('rs', ARRAY(SELECT d FROM exactonce.state_upsert('rs',
	(SELECT array_agg(e) FROM (SELECT 'k' || i AS key, 2::bigint AS version, (1000 + i)::numeric AS value, 'x' AS a
							   FROM generate_series(1, 100) i) e)) d));
INSERT INTO tokens SELECT 2, exactonce.map_stage('rs', ARRAY(SELECT d FROM exactonce.state_upsert('rs',
	(SELECT array_agg(e) FROM (VALUES ('k101', 1::bigint, 5::numeric, 'x')) e(key, version, value, a))) d));
SELECT exactonce.reduce_apply('rs', ARRAY(SELECT token FROM tokens WHERE n = 1)) AS applied;
SELECT value_min, extrema_reserve FROM rs.aggregates WHERE level = 1;
SELECT exactonce.reduce_apply('rs', ARRAY(SELECT token FROM tokens WHERE n = 2)) AS applied;
INSERT INTO rs.ingest (key, version, value, a) VALUES ('k101', 2, 2000, 'x');
SELECT exactonce.flush('rs') AS flushed;
SELECT value_min, value_max FROM rs.aggregates WHERE level = 1;
SELECT item, ok FROM exactonce.verify('rs') WHERE NOT ok;
-- a value that enters and leaves in batches applied together is no
-- extreme: the upsert took it in, the reserve sets the min back
INSERT INTO tokens SELECT 3, exactonce.map_stage('rs', ARRAY(SELECT d FROM exactonce.state_upsert('rs',
	(SELECT array_agg(e) FROM (VALUES ('k102', 1::bigint, 7::numeric, 'x', false)) e(key, version, value, a, deleted))) d));
INSERT INTO tokens SELECT 4, exactonce.map_stage('rs', ARRAY(SELECT d FROM exactonce.state_upsert('rs',
	(SELECT array_agg(e) FROM (VALUES ('k102', 2::bigint, 7::numeric, 'x', true)) e(key, version, value, a, deleted))) d));
SELECT exactonce.reduce_apply('rs') AS applied;
SELECT value_min, value_max, extrema_reserve IS NOT NULL AS kept FROM rs.aggregates WHERE level = 1;
SELECT item, ok FROM exactonce.verify('rs') WHERE NOT ok;

-- an owner's reserve: one not as the library writes it (a NULL among the
-- values, NaN, the wrong length) is read anew, never trusted; one well
-- formed but wrong is named by verify(), and rebuild() repairs it
UPDATE rs.aggregates SET extrema_reserve = ARRAY[1, 2, NULL, 5]::numeric[] || array_fill(NULL::numeric, ARRAY[16])
WHERE level = 1;
INSERT INTO rs.ingest (key, version, value, a) VALUES ('k2', 3, 3000, 'x');
SELECT exactonce.flush('rs') AS flushed;
SELECT value_min, value_max, extrema_reserve IS NOT NULL AS kept FROM rs.aggregates WHERE level = 1;
UPDATE rs.aggregates SET extrema_reserve = ARRAY[0, 1, 'NaN']::numeric[] || array_fill(NULL::numeric, ARRAY[7])
	|| ARRAY[0, 1, 'NaN']::numeric[] || array_fill(NULL::numeric, ARRAY[7]) WHERE level = 1;
INSERT INTO rs.ingest (key, version, value, a) VALUES ('k3', 3, 3001, 'x');
SELECT exactonce.flush('rs') AS flushed;
UPDATE rs.aggregates SET extrema_reserve = '{}' WHERE level = 1;
INSERT INTO rs.ingest (key, version, value, a) VALUES ('k1', 3, 3002, 'x');
SELECT exactonce.flush('rs') AS flushed;
SELECT value_min, value_max FROM rs.aggregates WHERE level = 1;
SELECT item, ok FROM exactonce.verify('rs') WHERE NOT ok;
UPDATE rs.aggregates SET extrema_reserve = ARRAY[1, 1, 5]::numeric[] || array_fill(NULL::numeric, ARRAY[7])
	|| ARRAY[1, 1, 9999]::numeric[] || array_fill(NULL::numeric, ARRAY[7]) WHERE level = 1;
SELECT item, cell, detail, ok FROM exactonce.verify('rs') WHERE NOT ok;
SELECT exactonce.rebuild('rs') AS cells;
SELECT item, ok FROM exactonce.verify('rs') WHERE NOT ok;
SELECT exactonce.drop_pipeline('rs');
DROP FUNCTION differing(text, text);
DROP EXTENSION exactonce;
