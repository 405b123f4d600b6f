-- A pipeline owner plants code on every table the extension touches
-- through the executor (triggers, an index expression, a column default,
-- operators in its schema),
-- code that tries to make the owner a superuser and records who it runs
-- as.  A superuser then calls every function on the pipeline: the code runs
-- as the owner, in a security-restricted operation, and gains nothing.
-- (state and seen, written directly, refuse triggers: sql/pipeline.sql.)
CREATE EXTENSION exactonce;
SET client_min_messages = warning;
CREATE TYPE ev AS (key text, version bigint, value numeric, d text);
CREATE ROLE regress_eo_owner LOGIN CREATEDB;
GRANT CREATE ON DATABASE contrib_regression TO regress_eo_owner;
SET ROLE regress_eo_owner;
SELECT exactonce.create_pipeline('planted', ARRAY['d']);
CREATE TABLE planted.ran_as (who name, what text);
CREATE FUNCTION planted.escalate(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO planted.ran_as VALUES (current_user, what);
	BEGIN
		ALTER ROLE regress_eo_owner SUPERUSER;
	EXCEPTION WHEN OTHERS THEN
		NULL;
	END;
END $$;
CREATE FUNCTION planted.on_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM planted.escalate(TG_TABLE_NAME || ' ' || TG_OP);
	RETURN NULL;
END $$;
CREATE FUNCTION planted.in_index(numeric) RETURNS numeric LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	PERFORM planted.escalate('index expression');
	RETURN $1;
END $$;
CREATE FUNCTION planted.in_default() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM planted.escalate('default');
	RETURN 'x';
END $$;
DO $$
DECLARE
	t text;
BEGIN
	FOREACH t IN ARRAY ARRAY['aggregates', 'ledger', 'progress', 'shard', 'dead_letters', 'ingest'] LOOP
		EXECUTE format('CREATE TRIGGER planted AFTER INSERT OR UPDATE OR DELETE ON planted.%I'
					   ' FOR EACH ROW EXECUTE FUNCTION planted.on_row()', t);
	END LOOP;
END $$;
CREATE FUNCTION planted.text_eq(text, text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	PERFORM planted.escalate('operator');
	RETURN $1 OPERATOR(pg_catalog.=) $2;
END $$;
CREATE OPERATOR planted.= (LEFTARG = text, RIGHTARG = text, FUNCTION = planted.text_eq);
CREATE FUNCTION planted.numeric_add(numeric, numeric) RETURNS numeric LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	PERFORM planted.escalate('operator');
	RETURN $1 OPERATOR(pg_catalog.+) $2;
END $$;
CREATE OPERATOR planted.+ (LEFTARG = numeric, RIGHTARG = numeric, FUNCTION = planted.numeric_add);
CREATE INDEX planted_index ON planted.aggregates (planted.in_index(total));
ALTER TABLE planted.dead_letters ADD COLUMN note text DEFAULT planted.in_default();
RESET ROLE;

-- every function, called by a superuser whose search_path puts the
-- owner's operators first: the extension's statements pin their own
SET search_path = planted, public;
SET exactonce.fault_poison_key = 'poison';
-- (the events are the owner's: a superuser's own INSERT would fire the
-- owner's trigger as the superuser, as on any table)
SET ROLE regress_eo_owner;
INSERT INTO planted.ingest (key, version, value, d) VALUES ('a', 1, 1, 'x'), ('poison', 1, 1, 'x');
RESET ROLE;
TRUNCATE planted.ran_as;
SELECT exactonce.flush('planted');
SELECT exactonce.pause('planted');
SELECT exactonce.resume('planted');
SELECT exactonce.set_shards('planted', 3);
SELECT count(*) FROM exactonce.state_upsert('planted', ARRAY[('b', 1, 2, 'y')::ev]);
SELECT exactonce.map_stage('planted', ARRAY[('b', 1, ARRAY['y'], 2, 1, NULL, NULL)::exactonce.delta], 'src', 1) IS NOT NULL AS staged;
SELECT exactonce.reduce_apply('planted');
SELECT exactonce.release('planted', 'src', 1);
SELECT exactonce.ingest('planted', 'log', ARRAY[('c', 1, 3, 'z')::ev], ARRAY[1]::bigint[]);
SELECT exactonce.flush('planted');
SELECT exactonce.reset_source('planted', 'log');
SELECT name, queued, ingested, applied, dead_lettered FROM exactonce.pipelines WHERE name = 'planted';
RESET exactonce.fault_poison_key;
RESET search_path;

-- the planted code ran, and only ever as the owner, who is no superuser
SELECT who, what FROM planted.ran_as GROUP BY 1, 2 ORDER BY 1, 2;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_eo_owner';

SELECT exactonce.drop_pipeline('planted', true);
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_eo_owner';
REVOKE CREATE ON DATABASE contrib_regression FROM regress_eo_owner;
DROP ROLE regress_eo_owner;
DROP TYPE ev;
DROP EXTENSION exactonce;
