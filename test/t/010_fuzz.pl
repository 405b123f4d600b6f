# Fuzzing: a bounded sqlsmith run (Debian sqlsmith) against a database with
# pipelines of both modes, once as a producer and once as a pipeline owner,
# with the extension's functions in their search_path; then every function
# of the extension called with generated arguments (NULLs, empty and
# extreme values, wrong pipelines, crafted arrays) as the owner and as the
# producer.  The assertion: no backend crashed, the server is up, and the
# pipelines still add up.  EXACTONCE_FUZZ_QUERIES sets sqlsmith's queries
# per role (default 1500; bash test/fuzz.sh runs the long version).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $queries = $ENV{EXACTONCE_FUZZ_QUERIES} // 1500;
my $node = eo_node('fuzz', conf => "log_min_messages = warning\n");
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
CREATE ROLE regress_fz_owner LOGIN;
CREATE ROLE regress_fz_producer LOGIN;
GRANT CREATE ON DATABASE postgres TO regress_fz_owner;
SET ROLE regress_fz_owner;
SELECT exactonce.create_pipeline('fz_latest', ARRAY['a', 'b']);
SELECT exactonce.create_pipeline('fz_acc', ARRAY['r'], 'accumulate');
GRANT USAGE ON SCHEMA fz_latest, fz_acc TO regress_fz_producer;
GRANT INSERT ON fz_latest.ingest, fz_acc.ingest TO regress_fz_producer;
INSERT INTO fz_latest.ingest (key, version, value, a, b)
	SELECT 'k' || i % 50, i, i, 'a' || i % 3, 'b' || i % 5 FROM generate_series(1, 500) i;
INSERT INTO fz_acc.ingest (key, version, value, r) SELECT 'r' || i % 20, i, i, 'x' FROM generate_series(1, 500) i;
RESET ROLE;
ALTER ROLE regress_fz_owner SET search_path = exactonce, fz_latest, public, pg_catalog;
ALTER ROLE regress_fz_producer SET search_path = exactonce, fz_latest, public, pg_catalog;
ALTER ROLE regress_fz_owner SET statement_timeout = '2s';
ALTER ROLE regress_fz_producer SET statement_timeout = '2s';
});
ok(eo_wait_drained_named($node, 'fz_latest') && eo_wait_drained_named($node, 'fz_acc'), 'the pipelines drain');

sub eo_wait_drained_named
{
	my ($n, $name) = @_;
	return $n->poll_query_until($db,
		"SELECT queued = 0 AND staged = 0 FROM exactonce.pipelines WHERE name = '$name'");
}

sub alive_and_whole
{
	my ($label) = @_;
	my $log = slurp_file($node->logfile);
	unlike($log, qr/terminated by signal|server process .* was terminated|PANIC/,
		"$label: no backend crashed");
	is( $node->safe_psql($db,
			"SELECT coalesce(bool_and(ingested IS NULL OR ingested = applied + duplicates + stale + dead_lettered), true) FROM exactonce.pipelines"),
		't', "$label: the server is up and the pipelines left (the fuzz may drop them) add up");
	return;
}

# sqlsmith, as each role
for my $role ('regress_fz_producer', 'regress_fz_owner')
{
	my ($out, $err) = ('', '');
	my $target = 'host=' . $node->host . ' port=' . $node->port . " dbname=$db user=$role";
	IPC::Run::run([ 'sqlsmith', "--target=$target", "--max-queries=$queries", '--seed=42' ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(900));
	my ($generated) = ($err . $out) =~ /queries: (\d+)/;
	note("sqlsmith as $role: " . (($err . $out) =~ s/\s+/ /gr));
	unlike($err . $out, qr/connection to database failed|server closed the connection unexpectedly|Connection refused/,
		"sqlsmith as $role: $queries queries, the connection never lost");
	alive_and_whole("sqlsmith as $role");
}

# generated arguments for every function of the extension
$node->safe_psql(
	$db, q{
CREATE TYPE fz_ev AS (key text, version bigint, value numeric, a text, b text);
CREATE FUNCTION fz_values(t regtype) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
SELECT CASE t
	WHEN 'text'::regtype THEN ARRAY['NULL::text', $q$''$q$, $q$'fz_latest'$q$, $q$'fz_acc'$q$, $q$'nope'$q$,
		$q$'queue'$q$, $q$repeat('x', 5000)$q$, $q$'fz_latest.ingest'$q$]
	WHEN 'text[]'::regtype THEN ARRAY['NULL::text[]', $q$'{}'::text[]$q$, $q$'{NULL}'::text[]$q$,
		$q$'{a,a}'::text[]$q$, $q$ARRAY[repeat('d', 100)]$q$, $q$'{{a},{b}}'::text[]$q$, $q$'{pg_x}'::text[]$q$]
	WHEN 'integer'::regtype THEN ARRAY['NULL::int', '0', '-1', '1', '65', '2147483647', '(-2147483648)']
	WHEN 'bigint'::regtype THEN ARRAY['NULL::bigint', '0', '-1', '9223372036854775807', '(-9223372036854775808)::bigint']
	WHEN 'bigint[]'::regtype THEN ARRAY['NULL::bigint[]', $q$'{}'::bigint[]$q$, $q$'{NULL}'::bigint[]$q$,
		$q$'{2,1}'::bigint[]$q$, $q$'{-1}'::bigint[]$q$, $q$'{{1}}'::bigint[]$q$]
	WHEN 'bytea[]'::regtype THEN ARRAY['NULL::bytea[]', $q$'{}'::bytea[]$q$, $q$'{NULL}'::bytea[]$q$,
		$q$ARRAY[''::bytea]$q$, $q$ARRAY[decode(repeat('ab', 40000), 'hex')]$q$]
	WHEN 'anyarray'::regtype THEN ARRAY['NULL::fz_ev[]', $q$'{}'::fz_ev[]$q$, 'ARRAY[NULL::fz_ev]',
		$q$ARRAY[('k', 1, 'NaN', 'a', 'b')::fz_ev]$q$, $q$ARRAY[('k', (-9223372036854775808)::bigint, 1e999, 'a', 'b')::fz_ev]$q$,
		$q$ARRAY[(repeat('k', 3000), 1, 1, 'a', 'b')::fz_ev, ('k', 1, 1, NULL, 'b')::fz_ev]$q$,
		$q$ARRAY[(SELECT r FROM (SELECT 1 AS x) r)::record, (SELECT r FROM (SELECT 'k'::text AS key) r)::record]$q$,
		$q$ARRAY[1, 2]$q$, $q$ARRAY[[('k', 1, 1, 'a', 'b')::fz_ev]]$q$]
	WHEN 'exactonce.delta[]'::regtype THEN ARRAY['NULL::exactonce.delta[]', $q$'{}'::exactonce.delta[]$q$,
		'ARRAY[NULL::exactonce.delta]', $q$ARRAY[('k', 1, '{a,b}', 1, 1, NULL, NULL)::exactonce.delta]$q$,
		$q$ARRAY[('k', 1, '{a}', 'NaN', -1, NULL, NULL)::exactonce.delta]$q$, $q$ARRAY[('k', 1, NULL, 1, 1, NULL, NULL)::exactonce.delta]$q$,
		$q$ARRAY[('k', 1, '{a,b,c}', 1e-999, 9223372036854775807, NULL, NULL)::exactonce.delta]$q$,
		$q$ARRAY[('k', 1, '{a}', 1, 1, '{NaN,1}', NULL)::exactonce.delta]$q$,
		$q$ARRAY[('k', 1, '{a}', 1, 1, NULL, '{x}')::exactonce.delta]$q$]
	WHEN 'interval'::regtype THEN ARRAY['NULL::interval', $q$'0'::interval$q$, $q$'-1 day'::interval$q$, $q$'1000 years'::interval$q$]
	WHEN 'regclass'::regtype THEN ARRAY['NULL::regclass', $q$'fz_latest.ingest'::regclass$q$,
		$q$'fz_latest.state'::regclass$q$, $q$'pg_class'::regclass$q$]
	WHEN 'boolean'::regtype THEN ARRAY['NULL::boolean', 'true', 'false']
	ELSE ARRAY['NULL::' || t::text] END
$$;
-- every function with random picks of argument values; the number of calls
CREATE FUNCTION fz_run(calls int, seed float8) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	f record;
	args text;
	n bigint := 0;
	ignored text;
BEGIN
	PERFORM setseed(seed);
	FOR f IN SELECT p.oid::regprocedure AS proc, p.oid::regproc AS name, p.proargtypes::regtype[] AS types
			 FROM pg_proc p WHERE p.pronamespace = 'exactonce'::regnamespace
			 AND p.prorettype <> 'trigger'::regtype ORDER BY 1::text LOOP
		FOR i IN 1..calls LOOP
			SELECT string_agg(v[1 + floor(random() * cardinality(v))::int], ', ' ORDER BY o) INTO args
			FROM unnest(f.types) WITH ORDINALITY AS t(t, o), LATERAL (SELECT fz_values(t.t) AS v) vv;
			BEGIN
				EXECUTE format('SELECT (%s(%s))::text', f.name, coalesce(args, '')) INTO ignored;
			EXCEPTION WHEN OTHERS THEN
				NULL;
			END;
			n := n + 1;
		END LOOP;
	END LOOP;
	RETURN n;
END $$;
GRANT EXECUTE ON FUNCTION fz_run(int, float8), fz_values(regtype) TO PUBLIC;
});
for my $role ('regress_fz_producer', 'regress_fz_owner')
{
	my $calls = $node->safe_psql($db, "SET ROLE $role; SET statement_timeout = 0; SELECT fz_run(150, 0.5)");
	ok($calls > 0, "generated arguments as $role: $calls calls");
	alive_and_whole("generated arguments as $role");
}

$node->stop;
done_testing();
