-- The ledger is a table of the pipeline's owner, who may write any row it
-- takes.  A staged batch that map did not make (a payload column null,
-- arrays that disagree in length, a NaN, a cell of no grouping or without
-- the value of a dimension it groups by, a member of no distinct count) is
-- refused by reduce with SQLSTATE EO006 and the row's token, before any of
-- it is read; with 1.30 the first of these crashed the server (signal 11),
-- and the workers with it, again at each restart.  Deleted, the pipeline
-- drains as before, exact.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
CREATE ROLE regress_eo_ledger LOGIN;
GRANT CREATE ON DATABASE contrib_regression TO regress_eo_ledger;
SET ROLE regress_eo_ledger;
SELECT exactonce.create_pipeline('lr', ARRAY['d', 'e'], measures => ARRAY['q'], min_max => ARRAY['value'],
	distinct_counts => ARRAY['c']);
INSERT INTO lr.ingest (key, version, value, d, e, q, c)
	VALUES ('a', 1, 5, 'x', 'y', 2, 'c1'), ('b', 1, 7, 'x', 'z', 3, 'c2');

-- lr.try(columns, values): stage one batch by hand, flush, show the error,
-- take the row out again
CREATE FUNCTION lr.try(cols text, vals text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('INSERT INTO lr.ledger (token, source, staged_at, deltas%s) VALUES (''\x01'', ''hand'', now(), 0%s)',
		cols, vals);
	BEGIN
		PERFORM exactonce.flush('lr');
	EXCEPTION WHEN SQLSTATE 'EO006' THEN
		DELETE FROM lr.ledger WHERE token = '\x01';
		RETURN SQLERRM;
	END;
	DELETE FROM lr.ledger WHERE token = '\x01';
	RETURN 'taken';
END $$;

-- what map stages: levels, cells (3 levels x 2 dimensions), totals, keys,
-- measure sums and counts, extrema (8 lists x 5 per cell), members
\set full ', levels, cells, totals, keys, measure_sums, measure_counts, extrema, member_cells, member_columns, member_values, member_counts'
SELECT lr.try('', '');
SELECT lr.try(', levels', ', ''{0}''');
SELECT lr.try(', levels, cells, totals, keys', ', ''{0,1}'', ''{NULL,NULL,x,NULL}'', ''{1}'', ''{1,1}''');
SELECT lr.try(', levels, cells, totals, keys', ', ''{0}'', ''{NULL,NULL}'', ''{1}'', ''{1,1}''');
SELECT lr.try(', levels, cells, totals, keys', ', ''{0}'', ''{NULL}'', ''{1}'', ''{1}''');
SELECT lr.try(', levels, cells, totals, keys', ', ''{0}'', ''{NULL,NULL}'', ''{NaN}'', ''{1}''');
SELECT lr.try(', levels, cells, totals, keys', ', ''{0}'', ''{NULL,NULL}'', ''{Infinity}'', ''{1}''');
SELECT lr.try(', levels, cells, totals, keys, measure_sums, measure_counts', ', ''{0}'', ''{NULL,NULL}'', ''{1}'', ''{1}'', ''{NaN}'', ''{1}''');
SELECT lr.try(', levels, cells, totals, keys, measure_sums, measure_counts', ', ''{0}'', ''{NULL,NULL}'', ''{1}'', ''{1}'', ''{1,2}'', ''{1}''');
SELECT lr.try(', levels, cells, totals, keys, measure_sums, measure_counts', ', ''{0}'', ''{NULL,NULL}'', ''{1}'', ''{1}'', ''{1}'', NULL');
SELECT lr.try(', levels, cells, totals, keys, measure_sums, measure_counts, extrema',
	', ''{0}'', ''{NULL,NULL}'', ''{1}'', ''{1}'', ''{1}'', ''{1}'', ''{1,2,3}''');
SELECT lr.try(', levels, cells, totals, keys, measure_sums, measure_counts, extrema',
	', ''{7}'', ''{NULL,NULL}'', ''{1}'', ''{1}'', ''{1}'', ''{1}'', ''{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}''');
SELECT lr.try(', levels, cells, totals, keys, measure_sums, measure_counts, extrema',
	', ''{2}'', ''{x,NULL}'', ''{1}'', ''{1}'', ''{1}'', ''{1}'', ''{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}''');
SELECT lr.try(:'full', ', ''{0}'', ''{NULL,NULL}'', ''{0}'', ''{0}'', ''{0}'', ''{0}'', ''{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}'',
	 ''{x,y}'', ''{0}'', ''{v}'', NULL');
SELECT lr.try(:'full', ', ''{0}'', ''{NULL,NULL}'', ''{0}'', ''{0}'', ''{0}'', ''{0}'', ''{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}'',
	 ''{x,y}'', ''{3}'', ''{v}'', ''{1}''');
SELECT lr.try(:'full', ', ''{0}'', ''{NULL,NULL}'', ''{0}'', ''{0}'', ''{0}'', ''{0}'', ''{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}'',
	 ''{x,y}'', ''{0}'', ''{NULL}'', ''{1}''');
SELECT lr.try(:'full', ', ''{0}'', ''{NULL,NULL}'', ''{0}'', ''{0}'', ''{0}'', ''{0}'', ''{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}'',
	 ''{x,NULL}'', ''{0}'', ''{v}'', ''{1}''');
SELECT lr.try(:'full', ', ''{0}'', ''{NULL,NULL}'', ''{0}'', ''{0}'', ''{0}'', ''{0}'', ''{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}'',
	 ''{x,y,z}'', ''{0}'', ''{v}'', ''{1}''');

-- nothing of them was applied: the events drain as before
SELECT count(*) AS left_staged FROM lr.ledger WHERE applied_at IS NULL;
SELECT exactonce.flush('lr');
SELECT level, d, e, total, keys, q_sum, value_min, value_max, c_distinct FROM lr.aggregates ORDER BY level, d, e;
SELECT * FROM exactonce.verify('lr');
RESET ROLE;
SELECT exactonce.drop_pipeline('lr');
REVOKE CREATE ON DATABASE contrib_regression FROM regress_eo_ledger;
DROP ROLE regress_eo_ledger;
DROP EXTENSION exactonce;
