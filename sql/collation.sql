-- The key is COLLATE "C" in every table of a pipeline, so that tables
-- distributed by it (Citus) can be co-located and compare keys alike.
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
SELECT exactonce.create_pipeline('cl', ARRAY['d']);
SELECT exactonce.create_pipeline('ca', ARRAY['d'], 'accumulate');
SELECT n.nspname, c.relname, co.collname
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_collation co ON co.oid = a.attcollation
WHERE n.nspname IN ('cl', 'ca') AND a.attname = 'key' AND c.relkind IN ('r', 'p')
ORDER BY 1, 2;
SELECT exactonce.drop_pipeline('cl'), exactonce.drop_pipeline('ca');
DROP EXTENSION exactonce;
