# One door: every function of the extension, called by every kind of
# caller, against pipelines whose owner planted code and altered tables.
#
# SPEC "Reliability": every path to a pipeline's tables runs as its owner
# and checks that the columns it touches have the types the extension made;
# every connection to a node uses the owner's user mapping; an owner's
# change to a table is a clear error, never a crash or another role's
# rights.  The test holds functions written tomorrow to that too: it takes
# the extension's functions and views from pg_depend and builds each call's
# arguments from the argument types and names (the pipeline's name, its
# dimensions, an event of its queue's row type, ...), so a function added
# later is called without editing the test.
#
# Two clusters: "main" with two pipelines of its own (latest and
# accumulate, with measures, min/max, distinct counts and a change feed)
# and, as coordinator, two distributed pipelines (one per mode) over
# "node1".  A role that is not a superuser owns them all and plants, on
# main and on the node:
#   - a trigger (before/after, row/statement, every event that applies) on
#     every relation of each pipeline's schema;
#   - for every column type T, a type of its own wrapping T with implicit
#     casts both ways, and a domain over T with a CHECK, all running its
#     code;
#   - shadows of pg_catalog functions, aggregates and operators, in a
#     schema every call puts first in its search_path and in the pipeline's
#     schema;
#   - a PUBLIC user mapping for the node's server naming the node's
#     superuser, without a password.
# The planted code counts its runs and, when it runs as anyone but the
# owner, logs a WARNING naming current_user and tries to make the owner a
# superuser.
#
# Each call runs in a transaction (or savepoint) of its own that is rolled
# back, with a statement_timeout and an application_name naming it in the
# server logs; main's pipelines are paused, so every call finds the same
# queued events, state, cells and feed.  Rounds:
#   every caller   every function and view, for every pipeline, as the
#                  superuser, the owner, a producer (INSERT on the queue), a
#                  reader (SELECT on aggregates and feed) and a role that
#                  may only connect; state and seen keep their triggers;
#   reference      the calls that reach each pipeline, as superuser and
#                  owner, twice, with the triggers on state and seen dropped
#                  (the state stage refuses tables with triggers): what each
#                  returns, and which calls reach the node;
#   altered        each column of each table of a pipeline altered in turn
#                  by the owner, to its domain, to its wrapping type and to
#                  another built-in type (text to name, numeric to bigint,
#                  bigint to numeric, ...), then the calls that reach the
#                  pipeline: as the superuser, and (on main) as the owner
#                  after a built-in type.  The owner's ALTER is tried
#                  first as it is: preloaded, the column guard refuses it
#                  (a refusal that needs an SQLSTATE too); then it is made
#                  with the guard off, as without the preload, where the
#                  one door must hold alone.  On main the ALTER is in the
#                  transaction of the calls; a distributed pipeline's node
#                  tables are altered on the node (built-in types only,
#                  committed, then set back) before the calls that reach
#                  the node, its coordinator's queue as on main;
#   rows changed   rows of each table of main's pipelines deleted, added,
#                  renumbered or given values no stage writes, or a
#                  trigger that skips every row written to one table, by the
#                  owner, one change at a time, in the transaction of the
#                  calls that reach the pipeline (as the owner and the
#                  superuser); with a skipping trigger, a call that runs
#                  must leave what verify() says after it as it was after
#                  the same call unaltered;
#   sqlsmith       main's pipelines resumed with a column of each table
#                  altered (committed): the workers must refuse them with
#                  an error; meanwhile random queries as the owner.
# After each round, seven assertions: no backend terminated by a signal
# (main and node); every refusal has an SQLSTATE, none of class XX
# (internal error), nor any error in either server's log (the workers',
# the node's); on main, a call on an altered table refuses or returns what
# it returned unaltered (a field may be withheld as NULL); the planted
# code ran as the owner only (main and node); pg_roles and pg_auth_members
# unchanged on each cluster; every connection the extension or
# postgres_fdw made to the node logged in as the owner's mapping's role
# (except for create_*, whose caller becomes the owner).  At the end, the
# servers never restarted and every pipeline still adds up.
#
# Every finding is listed in full in tmp_check/log/024_one_door_findings.log
# (the test's diagnostics show the first 40 of each kind), every call with
# its SQLSTATE in 024_one_door_calls.log.
#
# EXACTONCE_ONE_DOOR_QUERIES sets sqlsmith's queries (default 1000);
# EXACTONCE_ONE_DOOR_KINDS (default "domain,type,builtin") the kinds of
# alteration on main, EXACTONCE_ONE_DOOR_NODE_KINDS (default "builtin") on
# the node, where each costs a committed ALTER and the calls' connections.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);
use sort 'stable';
use ExactonceTest;

my $db = 'postgres';
my $queries = $ENV{EXACTONCE_ONE_DOOR_QUERIES} // 1000;
my %kinds = map { $_ => 1 } split /,/, ($ENV{EXACTONCE_ONE_DOOR_KINDS} // 'domain,type,builtin');
my %node_kinds = map { $_ => 1 } split /,/, ($ENV{EXACTONCE_ONE_DOOR_NODE_KINDS} // 'builtin');
my $started = time;

# roles; the superuser is the OS user that ran initdb
my $owner = 'eo_owner';
my $password = 'eo_owner_secret';
my @roles = ('superuser', $owner, 'eo_producer', 'eo_reader', 'eo_connect');

# a crash restarts the server (the harness turns that off), so that the
# round goes on and lists every crash; each log line has its SQLSTATE
my $conf = "log_min_messages = warning\nlog_statement = none\nrestart_after_crash = on\n"
  . "log_line_prefix = '%m [%p] %e %q%a '\n";
my $main = eo_node('main', conf => $conf);
# the node's backends notice a coordinator's backend that went away
my $node = eo_node('node1', conf => "${conf}log_connections = on\nclient_connection_check_interval = '1s'\n");
my $super = $main->safe_psql($db, 'SELECT current_user');

# the owner logs in to the node with a password: postgres_fdw and the
# extension require one of a role that is not a superuser
my $hba = $node->data_dir . '/pg_hba.conf';
my $hba_text = slurp_file($hba);
open my $hba_fh, '>', $hba or die "could not write $hba: $!";
print $hba_fh "local all $owner scram-sha-256\n$hba_text";
close $hba_fh;
$node->reload;

$node->safe_psql(
	$db, qq{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
CREATE ROLE $owner LOGIN PASSWORD '$password';
GRANT CREATE ON DATABASE $db TO $owner;
});
$main->safe_psql(
	$db, qq{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
CREATE EXTENSION postgres_fdw;
CREATE ROLE $owner LOGIN;
CREATE ROLE eo_producer LOGIN;
CREATE ROLE eo_reader LOGIN;
CREATE ROLE eo_connect LOGIN;
GRANT CREATE ON DATABASE $db TO $owner;
GRANT USAGE ON FOREIGN DATA WRAPPER postgres_fdw TO $owner;
CREATE SCHEMA eo_test;
GRANT USAGE ON SCHEMA eo_test TO PUBLIC;
});

# as_owner(cluster, sql): run sql as the owner (with its password on the node)
sub as_owner
{
	my ($cluster, $sql) = @_;
	my $connstr = $cluster->connstr($db) . " user=$owner";
	$connstr .= " password=$password" if $cluster == $node;
	return $cluster->safe_psql($db, "SET client_min_messages = error;\n$sql", connstr => $connstr);
}

as_owner(
	$main, qq{
CREATE SERVER node1 FOREIGN DATA WRAPPER postgres_fdw
	OPTIONS (host '@{[ $node->host ]}', port '@{[ $node->port ]}', dbname '$db');
CREATE USER MAPPING FOR $owner SERVER node1 OPTIONS (user '$owner', password '$password');
});

# The pipelines: name => how to make it.  All are paused, so that every
# round finds main's queued events, state, cells and feed as they were.
my %pipelines = (
	s_latest => {
		mode => 'latest',
		dims => [ 'a', 'b' ],
		create => "SELECT exactonce.create_pipeline('s_latest', ARRAY['a', 'b'], 'latest',
			measures => ARRAY['m'], min_max => ARRAY['value', 'm']);
			SELECT exactonce.set_feed('s_latest', true);"
	},
	s_acc => {
		mode => 'accumulate',
		dims => ['r'],
		create => "SELECT exactonce.create_pipeline('s_acc', ARRAY['r'], 'accumulate',
			measures => ARRAY['m'], min_max => ARRAY['value'], distinct_counts => ARRAY['u']);
			SELECT exactonce.set_feed('s_acc', true);"
	},
	d_latest => {
		distributed => 1,
		mode => 'latest',
		dims => [ 'a', 'b' ],
		create => "SELECT exactonce.create_distributed_pipeline('d_latest', ARRAY['a', 'b'],
			ARRAY['node1']::name[], measures => ARRAY['m'], min_max => ARRAY['value']);"
	},
	d_acc => {
		distributed => 1,
		mode => 'accumulate',
		dims => ['r'],
		create => "SELECT exactonce.create_distributed_pipeline('d_acc', ARRAY['r'],
			ARRAY['node1']::name[], 'accumulate');"
	});
my @pipeline_names = ('s_latest', 's_acc', 'd_latest', 'd_acc');
my $version = 0;    # versions of the events made so far

# columns(cluster, schema): [table, column, type, relkind] of the tables
# (not partitions) of a schema, in order
sub columns
{
	my ($cluster, $schema) = @_;
	my $out = $cluster->safe_psql(
		$db, qq{
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), c.relkind
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = '$schema'::regnamespace AND c.relkind IN ('r', 'p', 'f') AND NOT c.relispartition
ORDER BY c.relname, a.attnum});
	return [ map { [ split /\|/ ] } grep { $_ ne '' } split /\n/, $out ];
}

# events_sql(pipeline, n): an INSERT of n events into the pipeline's queue,
# made from its columns: keys k0..k6, integral values (so that an alteration
# to bigint and back keeps them), every 13th a tombstone, and one conflicting
# duplicate (a dead letter)
sub events_sql
{
	my ($name, $n) = @_;
	my $p = $pipelines{$name};
	my (@cols, @exprs);
	for my $c (@{ $p->{ingest} })
	{
		my ($col, $type) = @$c;
		next if $col =~ /^(ingest_slot|ingest_id|event_time)$/;
		my $e =
			$col eq 'key' ? "'k' || (i % 7)"
		  : $col eq 'version' ? "$version + i"
		  : $col eq 'value' ? "(i % 11)::numeric"
		  : $col eq 'deleted' ? ($p->{mode} eq 'latest' ? 'i % 13 = 0' : 'false')
		  : $type eq 'numeric' ? '2'
		  : $type eq 'text' ? "'$col' || (i % 3)"
		  : "NULL";
		push @cols, $col;
		push @exprs, $e;
	}
	my $list = join(', ', @cols);
	my $sql = "INSERT INTO $name.ingest ($list) SELECT " . join(', ', @exprs)
	  . " FROM generate_series(1, $n) i;\n";
	# the same version again with another value: a conflicting duplicate
	my @conflict = map { $_ eq '(i % 11)::numeric' ? '999' : $_ } @exprs;
	$sql .= "INSERT INTO $name.ingest ($list) SELECT " . join(', ', @conflict)
	  . " FROM generate_series(1, 1) i;\n";
	$version += $n;
	return $sql;
}

# make_pipeline(name): create the pipeline as its owner, give the producer
# and the reader their rights, drain a first batch of events (with an
# external source and a feed consumer), pause it and queue a second batch
sub make_pipeline
{
	my ($name) = @_;
	my $p = $pipelines{$name};
	as_owner($main, $p->{create});
	$p->{ingest} = [ map { [ $_->[1], $_->[2] ] } grep { $_->[0] eq 'ingest' } @{ columns($main, $name) } ];
	my $feed = $main->safe_psql($db, "SELECT to_regclass('$name.feed') IS NOT NULL") eq 't';
	as_owner(
		$main, qq{
SELECT exactonce.pause('$name');
GRANT USAGE ON SCHEMA $name TO eo_producer, eo_reader;
GRANT INSERT ON $name.ingest TO eo_producer;
GRANT SELECT ON $name.aggregates TO eo_reader;
@{[ $feed ? "GRANT SELECT ON $name.feed TO eo_reader;" : '' ]}
@{[ events_sql($name, 40) ]}
SELECT exactonce.flush('$name');
@{[ $feed ? "SELECT count(*) FROM exactonce.feed_read('$name', 'eo_consumer');" : '' ]}
@{[ events_sql($name, 12) ]}});

	# the row type of an event of this queue, for the functions that take
	# arrays of events
	my @fields = grep { $_->[0] !~ /^(ingest_slot|ingest_id)$/ } @{ $p->{ingest} };
	$main->safe_psql($db,
		"DROP TYPE IF EXISTS eo_test.ev_$name; CREATE TYPE eo_test.ev_$name AS ("
		  . join(', ', map { "$_->[0] $_->[1]" } @fields) . ')');
	$p->{event_fields} = \@fields;
	$p->{ingest_oid} = $main->safe_psql($db, "SELECT '$name.ingest'::regclass::oid");
	if (!$p->{distributed})
	{
		# an external consumer's source offsets
		my $ev = event_sql($name);
		as_owner($main, "SELECT exactonce.ingest('$name', 'eo_src', ARRAY[$ev], ARRAY[1]::bigint[])");
	}
	return;
}

# event_sql(pipeline): one event of the pipeline's queue row type
sub event_sql
{
	my ($name) = @_;
	my $p = $pipelines{$name};
	my @v;
	for my $f (@{ $p->{event_fields} })
	{
		my ($col, $type) = @$f;
		push @v,
			$col eq 'key' ? "'k1'"
		  : $col eq 'version' ? '1000000'
		  : $col eq 'value' ? '7'
		  : $type eq 'boolean' ? 'false'
		  : $type eq 'numeric' ? '2'
		  : $type =~ /^timestamp/ ? "'2024-01-01 00:00:00+00'"
		  : $type eq 'text' ? "'${col}1'"
		  : 'NULL';
	}
	return 'ROW(' . join(', ', @v) . ")::eo_test.ev_$name";
}

make_pipeline($_) for @pipeline_names;

# --- what the owner plants -------------------------------------------------

# the owner's code: counts its runs; run as anyone but the owner, it logs a
# WARNING naming current_user and tries to make the owner a superuser
my $plant_base = qq{
CREATE SCHEMA eo_plant;
GRANT USAGE ON SCHEMA eo_plant TO PUBLIC;
CREATE TABLE eo_plant.log (cur name, sess name, what text, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON eo_plant.log TO PUBLIC;
CREATE SEQUENCE eo_plant.runs;
GRANT USAGE ON SEQUENCE eo_plant.runs TO PUBLIC;
CREATE FUNCTION eo_plant.planted(what text) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN
	BEGIN
		PERFORM nextval('eo_plant.runs');
	EXCEPTION WHEN OTHERS THEN NULL;
	END;
	IF current_user = '$owner' THEN
		RETURN true;
	END IF;
	RAISE WARNING 'eo_planted current_user=% session_user=% what=%', current_user, session_user, what;
	BEGIN
		INSERT INTO eo_plant.log (cur, sess, what) VALUES (current_user, session_user, what);
	EXCEPTION WHEN OTHERS THEN NULL;
	END;
	BEGIN
		ALTER ROLE $owner SUPERUSER;
	EXCEPTION WHEN OTHERS THEN NULL;
	END;
	BEGIN
		GRANT pg_write_server_files TO $owner;
	EXCEPTION WHEN OTHERS THEN NULL;
	END;
	RETURN true;
END
\$f\$;
GRANT EXECUTE ON FUNCTION eo_plant.planted(text) TO PUBLIC;
CREATE FUNCTION eo_plant.trg() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN
	PERFORM eo_plant.planted(format('trigger %s.%s %s %s %s', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_WHEN, TG_LEVEL, TG_OP));
	IF TG_LEVEL = 'STATEMENT' THEN
		RETURN NULL;
	ELSIF TG_OP = 'DELETE' THEN
		RETURN OLD;
	END IF;
	RETURN NEW;
END
\$f\$;
CREATE SCHEMA eo_shadow;
GRANT USAGE ON SCHEMA eo_shadow TO PUBLIC;
};

# triggers on every relation of the schemas
sub plant_triggers_sql
{
	my (@schemas) = @_;
	my $list = join(', ', map { "'$_'" } @schemas);
	return qq{
DO \$plant\$
DECLARE
	r record;
	spec text;
	i int;
BEGIN
	FOR r IN SELECT c.oid::regclass AS rel FROM pg_class c
			 WHERE c.relnamespace::regnamespace::text IN ($list) AND c.relkind IN ('r', 'p', 'f', 'v') LOOP
		i := 0;
		FOREACH spec IN ARRAY ARRAY[
			'BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW',
			'AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW',
			'BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH STATEMENT',
			'AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH STATEMENT',
			'BEFORE TRUNCATE ON %s FOR EACH STATEMENT',
			'AFTER TRUNCATE ON %s FOR EACH STATEMENT',
			'INSTEAD OF INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW'] LOOP
			i := i + 1;
			BEGIN
				EXECUTE format('CREATE TRIGGER %I ' || spec || ' EXECUTE FUNCTION eo_plant.trg()',
							   'eo_planted_' || i, r.rel);
			EXCEPTION WHEN OTHERS THEN NULL;
			END;
		END LOOP;
	END LOOP;
END
\$plant\$;
};
}

# tag(type): a name for the owner's types made for a column type
sub tag
{
	my ($type) = @_;
	return ($type =~ s/\[\]/_arr/gr) =~ s/\W+/_/gr;
}

# for each column type: a type wrapping it with implicit casts both ways,
# and a domain over it with a CHECK, each running the owner's code
sub plant_types_sql
{
	my (@types) = @_;
	my $sql = '';
	for my $t (@types)
	{
		my $g = tag($t);
		$sql .= qq{
CREATE TYPE eo_plant.w_$g AS (v $t);
CREATE FUNCTION eo_plant.w_${g}_out(eo_plant.w_$g) RETURNS $t LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM eo_plant.planted('cast w_$g to $t'); RETURN \$1.v; END \$f\$;
CREATE FUNCTION eo_plant.w_${g}_in($t) RETURNS eo_plant.w_$g LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM eo_plant.planted('cast $t to w_$g'); RETURN ROW(\$1)::eo_plant.w_$g; END \$f\$;
CREATE CAST (eo_plant.w_$g AS $t) WITH FUNCTION eo_plant.w_${g}_out(eo_plant.w_$g) AS IMPLICIT;
CREATE CAST ($t AS eo_plant.w_$g) WITH FUNCTION eo_plant.w_${g}_in($t) AS IMPLICIT;
CREATE FUNCTION eo_plant.check_$g($t) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN RETURN eo_plant.planted('domain check d_$g'); END \$f\$;
CREATE DOMAIN eo_plant.d_$g AS $t CHECK (eo_plant.check_$g(VALUE));
};
	}
	return $sql;
}

# shadows of pg_catalog functions, aggregates and operators in each schema
my @shadowed = qw(now clock_timestamp statement_timestamp transaction_timestamp hashtext
  hashtextextended hashint8 md5 sha256 length lower upper quote_ident quote_literal
  quote_nullable concat to_regclass to_regnamespace to_regtype to_regproc array_length
  cardinality array_to_string string_to_array array_append array_cat array_position unnest
  generate_series generate_subscripts abs round trunc trim_scale scale encode decode substr
  substring left right strpos split_part replace btrim pg_has_role has_table_privilege
  has_schema_privilege has_column_privilege has_function_privilege current_setting set_config
  nextval currval setval pg_advisory_xact_lock pg_try_advisory_xact_lock pg_advisory_lock
  pg_try_advisory_lock pg_advisory_unlock pg_notify pg_backend_pid txid_current
  pg_current_xact_id obj_description col_description format_type pg_get_userbyid
  pg_relation_size pg_table_is_visible satisfies_hash_partition row_to_json to_json to_jsonb
  array_fill int8 int4 numeric text float8 date_trunc date_part age timezone);
sub plant_shadows_sql
{
	my (@schemas) = @_;
	my $list = join(', ', map { "'$_'" } @schemas);
	my $names = join(', ', map { "'$_'" } @shadowed);
	my $sql = qq{
DO \$plant\$
DECLARE
	s text;
	f record;
	o record;
	args text;
BEGIN
	FOREACH s IN ARRAY ARRAY[$list] LOOP
		FOR f IN SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS ident,
					pg_get_function_result(p.oid) AS result, p.pronargs, p.proretset
				 FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace
				 AND p.prokind = 'f' AND p.proname IN ($names) LOOP
			args := coalesce((SELECT string_agg('\$' || i, ', ') FROM generate_series(1, f.pronargs) i), '');
			BEGIN
				EXECUTE format('CREATE FUNCTION %I.%I(%s) RETURNS %s LANGUAGE plpgsql'
							   ' SET search_path = pg_catalog, pg_temp AS %L', s, f.proname,
					f.ident, f.result,
					CASE WHEN f.proretset
					THEN format('BEGIN PERFORM eo_plant.planted(%L); RETURN QUERY SELECT * FROM pg_catalog.%I(%s); END',
								'shadow ' || f.proname, f.proname, args)
					ELSE format('BEGIN PERFORM eo_plant.planted(%L); RETURN pg_catalog.%I(%s); END',
								'shadow ' || f.proname, f.proname, args) END);
			EXCEPTION WHEN OTHERS THEN NULL;
			END;
		END LOOP;
		FOR o IN SELECT op.oid, op.oprname, op.oprleft::regtype AS l, op.oprright::regtype AS r,
					op.oprresult::regtype AS res
				 FROM pg_operator op
				 JOIN pg_type lt ON lt.oid = op.oprleft JOIN pg_type rt ON rt.oid = op.oprright
				 WHERE op.oprnamespace = 'pg_catalog'::regnamespace AND op.oprkind = 'b'
				 AND lt.typtype <> 'p' AND rt.typtype <> 'p'
				 AND op.oprname IN ('=', '<>', '<', '>', '<=', '>=', '+', '-', '*', '/', '%', '||', '&', '>>', '<<',
									'\@>', '<\@', '&&', '~~')
				 AND op.oprleft::regtype::text IN ('text', 'bigint', 'integer', 'numeric', 'boolean', 'bytea', 'name',
					'timestamp with time zone', 'interval', 'oid', 'tid', '"char"', 'text[]', 'bigint[]', 'integer[]',
					'numeric[]', 'regclass', 'smallint')
				 AND op.oprright::regtype::text IN ('text', 'bigint', 'integer', 'numeric', 'boolean', 'bytea', 'name',
					'timestamp with time zone', 'interval', 'oid', 'tid', '"char"', 'text[]', 'bigint[]', 'integer[]',
					'numeric[]', 'regclass', 'smallint') LOOP
			BEGIN
				EXECUTE format('CREATE FUNCTION %I.%I(l %s, r %s) RETURNS %s LANGUAGE plpgsql'
							   ' SET search_path = pg_catalog, pg_temp AS %L', s,
					'op_' || o.oid, o.l, o.r, o.res,
					format('BEGIN PERFORM eo_plant.planted(%L); RETURN l OPERATOR(pg_catalog.%s) r; END',
						   format('shadow operator %s(%s, %s)', o.oprname, o.l, o.r), o.oprname));
				EXECUTE format('CREATE OPERATOR %I.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %I.%I)', s,
					o.oprname, o.l, o.r, s, 'op_' || o.oid);
			EXCEPTION WHEN OTHERS THEN NULL;
			END;
		END LOOP;
	END LOOP;
END
\$plant\$;
};
	# aggregates, whose transition functions run the owner's code per row
	for my $s (@schemas)
	{
		for my $t ('numeric', 'bigint', 'integer', 'timestamp with time zone')
		{
			my $g = tag($t);
			for my $agg ([ 'sum', '+' ], [ 'min', '<' ], [ 'max', '>' ])
			{
				my ($a, $op) = @$agg;
				my $combine =
				  $a eq 'sum'
				  ? "s OPERATOR(pg_catalog.+) v"
				  : "CASE WHEN v OPERATOR(pg_catalog.$op) s THEN v ELSE s END";
				next if $a eq 'sum' && $t =~ /^timestamp/;
				$sql .= qq{
CREATE FUNCTION $s.eo_${a}_$g(s $t, v $t) RETURNS $t LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM eo_plant.planted('shadow aggregate $a($t)');
IF s IS NULL THEN RETURN v; ELSIF v IS NULL THEN RETURN s; END IF; RETURN $combine; END \$f\$;
CREATE AGGREGATE $s.$a($t) (SFUNC = $s.eo_${a}_$g, STYPE = $t);
};
			}
		}
		$sql .= qq{
CREATE FUNCTION $s.eo_count(s bigint) RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM eo_plant.planted('shadow aggregate count(*)'); RETURN s OPERATOR(pg_catalog.+) 1; END \$f\$;
CREATE AGGREGATE $s.count(*) (SFUNC = $s.eo_count, STYPE = bigint, INITCOND = '0');
CREATE FUNCTION $s.eo_count_any(s bigint, v anyelement) RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM eo_plant.planted('shadow aggregate count(anyelement)');
RETURN CASE WHEN v IS NULL THEN s ELSE s OPERATOR(pg_catalog.+) 1 END; END \$f\$;
CREATE AGGREGATE $s.count(anyelement) (SFUNC = $s.eo_count_any, STYPE = bigint, INITCOND = '0');
};
	}
	return $sql;
}

# column types of every pipeline table, on either cluster
sub column_types
{
	my ($cluster, @schemas) = @_;
	my %t;
	$t{ $_->[2] } = 1 for map { @{ columns($cluster, $_) } } @schemas;
	return sort keys %t;
}

# plant(cluster, schemas): everything the owner plants on one cluster
sub plant
{
	my ($cluster, @schemas) = @_;
	as_owner($cluster,
		    $plant_base
		  . plant_types_sql(column_types($cluster, @schemas))
		  . plant_triggers_sql(@schemas)
		  . plant_shadows_sql('eo_shadow', @schemas));
	return;
}

# plant_node_schema(name): triggers and shadows in a pipeline's schema on
# the node (the node's eo_plant is there already)
sub plant_node_schema
{
	my ($name) = @_;
	my @missing = grep {
		$node->safe_psql($db, "SELECT to_regtype('eo_plant.w_" . tag($_) . "') IS NULL") eq 't'
	} column_types($node, $name);
	as_owner($node, plant_types_sql(@missing) . plant_triggers_sql($name) . plant_shadows_sql($name));
	return;
}

plant($main, @pipeline_names);
plant($node, 'd_latest', 'd_acc');
# the PUBLIC user mapping: any role without its own rides as the node's
# superuser (no password, which a superuser need not give)
as_owner($main, "CREATE USER MAPPING FOR PUBLIC SERVER node1 OPTIONS (user '$super')");
# on the node the owner also shadows for its own sessions
as_owner($node, "ALTER ROLE $owner SET search_path = eo_shadow, pg_catalog");

# a planted trigger on every relation of each pipeline's schema
for my $c ([ $main, \@pipeline_names ], [ $node, [ 'd_latest', 'd_acc' ] ])
{
	my ($cluster, $schemas) = @$c;
	my $list = join(', ', map { "'$_'" } @$schemas);
	is( $cluster->safe_psql(
			$db, qq{
SELECT string_agg(c.oid::regclass::text, ', ') FROM pg_class c
WHERE c.relnamespace::regnamespace::text IN ($list) AND c.relkind IN ('r', 'p', 'f', 'v')
AND NOT EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname LIKE 'eo_planted_%')}),
		'',
		$cluster->name . ': the owner planted a trigger on every relation of the pipelines');
}

# the shape each pipeline's tables must be restored to
for my $name (@pipeline_names)
{
	my $p = $pipelines{$name};
	$p->{columns} = columns($main, $name);
	$p->{node_columns} = columns($node, $name) if $p->{distributed};
}

# --- the functions and their arguments -------------------------------------

my $ext = "(SELECT oid FROM pg_extension WHERE extname = 'exactonce')";
my @functions = map {
	my ($name, $rettype, $out, $types, $names) = split /\|/, $_, -1;
	{
		name => $name,
		rettype => $rettype,
		out => $out eq 't',
		types => [ split /;/, $types ],
		names => [ split /;/, $names, -1 ],
	}
  } split /\n/,
  $main->safe_psql(
	$db, qq{
SELECT p.proname, p.prorettype::regtype,
	p.proretset OR p.proallargtypes IS NOT NULL,
	coalesce((SELECT string_agg(format_type(t, NULL), ';' ORDER BY o)
			  FROM unnest(p.proargtypes) WITH ORDINALITY u(t, o)), ''),
	coalesce((SELECT string_agg(coalesce(p.proargnames[o], ''), ';' ORDER BY o)
			  FROM unnest(coalesce(p.proargmodes, array_fill('i'::"char", ARRAY[p.pronargs])))
				   WITH ORDINALITY m(mode, o)
			  WHERE m.mode IN ('i', 'b', 'v')), '')
FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_extension'::regclass
AND d.refobjid = $ext AND d.deptype = 'e'
ORDER BY p.proname, p.oid});
my @views = split /\n/, $main->safe_psql(
	$db, qq{
SELECT c.oid::regclass FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
WHERE d.classid = 'pg_class'::regclass AND d.refobjid = $ext AND d.deptype = 'e' AND c.relkind = 'v'
ORDER BY 1});
cmp_ok(scalar(@functions), '>=', 30,
	scalar(@functions) . ' functions and ' . scalar(@views) . ' views of the extension found in pg_depend');

# the attributes of a composite type (for arrays of exactonce.delta)
my %composite;
sub composite_attributes
{
	my ($type) = @_;
	$composite{$type} //= [
		map { [ split /\|/ ] } split /\n/,
		$main->safe_psql(
			$db, qq{
SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_type t
JOIN pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
WHERE t.oid = to_regtype('$type') AND t.typtype = 'c' ORDER BY a.attnum})
	];
	return $composite{$type};
}

sub lit
{
	my ($s) = @_;
	return "'" . ($s =~ s/'/''/gr) . "'";
}

# arg_sql(function, argument name, type, pipeline): the value passed, and
# whether it names the pipeline.  Driven by type and name only: a new
# function gets plausible values without editing the test.
sub arg_sql
{
	my ($fn, $arg, $type, $name) = @_;
	my $p = $pipelines{$name};
	my $creates = $fn =~ /^create_/;
	my @dims = @{ $p->{dims} };
	if ($type eq 'text')
	{
		if ($arg =~ /^(name|pipeline)$/)
		{
			return (lit("fresh_$p->{mode}") . '::text', 0) if $creates;
			return (lit($name) . '::text', 1);
		}
		my %by_name = (
			mode => $p->{mode},
			filter => 'true',
			source => 'eo_src',
			consumer => 'eo_new_consumer',
			scope => 'eo_scope',
			token => 'eo_token',
			gid => 'eo_gid',
			target => 'node1',
			grouping_sets => 'rollup',
			key => 'k1',
			state => '{}',
			seen => '{}',
			dead_letters => '{}');
		return (lit("SELECT $dims[0], count(*), sum(value) FROM stream GROUP BY $dims[0]") . '::text', 0)
		  if $arg eq 'query' && $fn eq 'create_view_as';
		return (lit("SELECT $dims[0], count(*), sum(value), min(value) FROM stream GROUP BY ROLLUP ($dims[0])")
			  . '::text', 0)
		  if $arg eq 'query';
		return (lit($by_name{$arg} // 'x') . '::text', 0);
	}
	if ($type eq 'text[]')
	{
		return ('ARRAY[' . join(', ', map { lit($_) } @dims) . ']::text[]', 0) if $arg eq 'dimensions';
		return ('ARRAY[' . join(', ', map { lit("${_}1") } @dims) . ']::text[]', 0) if $arg eq 'cell';
		return ("ARRAY[" . lit($dims[0]) . "]::text[]", 0) if $arg eq 'group_by';
		return ("'{}'::text[]", 0);
	}
	if ($type eq 'integer')
	{
		my %v = (shards => 2, modulus => 2, remainder => 1, max => 10, slot => 0);
		return (($v{$arg} // 1) . '::integer', 0);
	}
	if ($type eq 'bigint')
	{
		my %v = (below_version => 2, committed_offset => 100, source_position => 1, horizon => 0,
			version => 1000000);
		return (($v{$arg} // 1) . '::bigint', 0);
	}
	return ($arg eq 'offsets' ? 'ARRAY[1]::bigint[]' : "'{1}'::bigint[]", 0) if $type eq 'bigint[]';
	return (($arg eq 'enabled' ? 'true' : 'false'), 0) if $type eq 'boolean';
	if ($type eq 'interval')
	{
		my %v = (window_width => 'NULL', timeout => "'10 milliseconds'", allowed_lateness => "'0'");
		return (($v{$arg} // "'1 second'") . '::interval', 0);
	}
	return ("$p->{ingest_oid}::regclass", 1) if $type eq 'regclass';
	return ("'node1'::name", 0) if $type eq 'name';
	return ("ARRAY['node1']::name[]", 0) if $type eq 'name[]';
	return ('7::numeric', 0) if $type eq 'numeric';
	return ("'\\x00'::bytea", 0) if $type eq 'bytea';
	return ("'2024-01-01 00:00:00+00'::timestamptz", 0) if $type =~ /^timestamp/;
	return ('ARRAY[' . event_sql($name) . ']', 0) if $type eq 'anyarray' && $arg eq 'events';
	if ($type =~ /^(.+)\[\]$/ && @{ composite_attributes($1) })
	{
		my $elem = $1;
		my @fields = map { (arg_sql($fn, $_->[0], $_->[1], $name))[0] } @{ composite_attributes($elem) };
		return ('ARRAY[ROW(' . join(', ', @fields) . ")::$elem]", 0);
	}
	return ("NULL::$type", 0);
}

# calls(pipeline, which): the calls of a round on a pipeline: every function
# with generated arguments and every view (the extension's, and those in
# the pipeline's schema); with which = 'reaching', only those that reach
# the pipeline (an argument names it, or none is taken).  create_* come
# last, then drop_*: on a distributed pipeline they reach the node, whose
# transaction the round cannot roll back.
my %calls;
sub calls
{
	my ($name, $which) = @_;
	return @{ $calls{"$name/$which"} } if $calls{"$name/$which"};
	my @calls;
	for my $f (@functions)
	{
		my ($reaches, @args) = (0);
		for my $i (0 .. $#{ $f->{types} })
		{
			my ($sql, $names_it) = arg_sql($f->{name}, $f->{names}[$i] // '', $f->{types}[$i], $name);
			push @args, $sql;
			$reaches ||= $names_it;
		}
		next if $which eq 'reaching' && @args && !$reaches;
		my $call = "exactonce.$f->{name}(" . join(', ', @args) . ')';
		push @calls,
		  {
			fn => $f->{name},
			sql => ($f->{out} || $f->{rettype} ne 'record') && $f->{rettype} ne 'trigger'
			? "SELECT * FROM $call"
			: "SELECT $call"
		  };
	}
	my @own = split /\n/,
	  $main->safe_psql($db,
		"SELECT c.oid::regclass FROM pg_class c WHERE c.relnamespace = to_regnamespace('$name') AND c.relkind = 'v' ORDER BY 1"
	  );
	push @calls, map { { fn => "view $_", sql => "SELECT * FROM $_" } } @views, @own;
	my $rank = sub { $_[0]{fn} =~ /^drop_/ ? 1 : $_[0]{fn} =~ /^create_/ ? 2 : 0 };
	$calls{"$name/$which"} = [ sort { $rank->($a) <=> $rank->($b) } @calls ];
	return @{ $calls{"$name/$which"} };
}

# --- running calls -----------------------------------------------------------

my $next_id = 0;
my %call;    # id => { fn, role, login, pipeline, alteration, sql, code, msg, out }

# item(fields): a new call, numbered for the logs (its application_name)
sub item
{
	my (%f) = @_;
	my $id = ++$next_id;
	$call{$id} = { %f, id => $id };
	return $call{$id};
}

sub describe
{
	my ($id) = @_;
	my $c = $call{$id};
	return "$c->{fn} as $c->{role} on $c->{pipeline}" . ($c->{alteration} ? " with $c->{alteration}" : '');
}

# connect_to(cluster, login): psql's \connect to a cluster as a role
sub connect_to
{
	my ($cluster, $login) = @_;
	my $user = $login eq 'superuser' ? $super : $login;
	return "\\connect \"host=@{[ $cluster->host ]} port=@{[ $cluster->port ]} dbname=$db user=$user\"\n";
}

# the settings of a call: its own statement_timeout, an application_name
# that names it in the server log, and a search_path that puts the owner's
# shadows first
sub settings
{
	my ($it) = @_;
	return "SET LOCAL statement_timeout = '5s';\n"
	  . "SET LOCAL application_name = 'eo:$it->{id}';\n"
	  . "SET LOCAL search_path = eo_shadow, \"$it->{pipeline}\", public, pg_catalog;\n";
}

# a call in a transaction of its own, logged in as its role
sub in_transaction
{
	my ($it) = @_;
	return "BEGIN;\n" . settings($it) . "$it->{sql};\n"
	  . "\\echo \@\@end $it->{id} :SQLSTATE :LAST_ERROR_MESSAGE\nROLLBACK;\n";
}

# a call in a savepoint of the group's transaction (which altered a table),
# as its role by SET ROLE; then what after says, before the savepoint goes
sub in_savepoint
{
	my ($it, $after) = @_;
	return "SAVEPOINT eo_call;\n"
	  . ($it->{role} eq 'superuser' ? '' : "SET LOCAL ROLE $it->{role};\n")
	  . settings($it) . "$it->{sql};\n"
	  . "\\echo \@\@end $it->{id} :SQLSTATE :LAST_ERROR_MESSAGE\n"
	  . ($after // '') . "ROLLBACK TO SAVEPOINT eo_call;\n";
}

# the same, and then, where the call ran, what exactonce.verify() says of
# its pipeline in that savepoint: "@@verify id ok SQLSTATE", ok the AND of
# its checks (a batch lost to a skipped write leaves the aggregates apart
# from state)
sub in_savepoint_verified
{
	my ($it) = @_;
	return in_savepoint($it,
		    "\\if :ERROR\n\\else\nRESET ROLE;\n\\unset eo_verified\n"
		  . "SELECT coalesce(bool_and(ok), true) AS eo_verified FROM exactonce.verify('$it->{pipeline}') \\gset\n"
		  . "\\echo \@\@verify $it->{id} :eo_verified :SQLSTATE\n\\endif\n");
}

# run_groups(groups): run groups of calls in one psql session on main.  A
# group is { id, pre, body, items, wrap, post }: pre (which may \connect
# elsewhere) ends with the statement that must succeed for the items to run
# (the ALTER), body comes before the items; each item runs logged in as its
# login, between "@@start id" and "@@end id SQLSTATE message".  A session
# that dies in a call (the server lost it: a crash) or hangs records that
# call and goes on, once the servers are back, with the group's pre and the
# calls after it.  Returns { group id => SQLSTATE of its pre, for those it
# skipped } and { group id => restore line } (what post echoed).
sub run_groups
{
	my (@groups) = @_;
	my (%skipped, %restored);
	my @todo = map { { %$_, items => [ @{ $_->{items} } ] } } @groups;
	while (@todo)
	{
		my $script = "\\set ON_ERROR_STOP 0\n\\pset null <NULL>\n\\pset footer off\n";
		my $at = '';
		for my $g (@todo)
		{
			$script .= "\\echo \@\@group $g->{id}\n$g->{pre}"
			  . "\\if :ERROR\n\\echo \@\@skip $g->{id} :SQLSTATE :LAST_ERROR_MESSAGE\n\\else\n"
			  . ($g->{body} // '');
			$at = $g->{login} // '';
			for my $it (@{ $g->{items} })
			{
				if (($it->{login} // $at) ne $at)
				{
					$at = $it->{login};
					$script .= connect_to($main, $at);
				}
				$script .= "\\echo \@\@start $it->{id}\n" . $g->{wrap}->($it);
			}
			$script .= "\\endif\n" . ($g->{post} // '');
		}
		my $file = $main->basedir . '/round.sql';
		open my $fh, '>', $file or die "could not write $file: $!";
		print $fh $script;
		close $fh;
		# a session that shows no progress for a minute (every call has a
		# statement_timeout of seconds) hangs
		my ($out, $err) = ('', '');
		my $quiet = IPC::Run::timeout(60);
		my $psql = IPC::Run::start([ 'psql', '-X', '-q', '-A', '-f', $file, '-d', $main->connstr($db) . " user=$super" ],
			'>', \$out, '2>', \$err, $quiet);
		my $hung = !eval {
			my $seen = 0;
			while ($psql->pumpable)
			{
				$psql->pump;
				next if length($out) == $seen;
				$seen = length($out);
				$quiet->start(60);
			}
			$psql->finish;
			1;
		};
		$psql->kill_kill if $hung;
		my ($group, $current, %done, $progress);
		for my $line (split /\n/, $out)
		{
			$progress = 1 if $line =~ /^\@\@(group|end) /;
			if ($line =~ /^\@\@group (\S+)$/)
			{
				$group = $1;
				$done{"group $group"} = 1;
			}
			elsif ($line =~ /^\@\@skip (\S+) (\S*) ?(.*)$/)
			{
				$skipped{$1} = "$2 $3";
			}
			elsif ($line =~ /^\@\@restore (\S+) (\S*) ?(.*)$/)
			{
				$restored{$1} = $2 eq '00000' ? '' : "$2 $3";
			}
			elsif ($line =~ /^\@\@verify (\d+) (.*)$/)
			{
				$call{$1}{verified} = $2;
			}
			elsif ($line =~ /^\@\@start (\d+)$/)
			{
				$current = $1;
				$call{$current}{out} = [];
			}
			elsif ($line =~ /^\@\@end (\d+) (\S*) ?(.*)$/)
			{
				$call{$1}{code} = $2;
				$call{$1}{msg} = $2 eq '00000' ? '' : $3;
				$done{$1} = 1;
				undef $current;
			}
			elsif (defined $current)
			{
				push @{ $call{$current}{out} }, $line;
			}
		}
		# the groups left: the one the session died in, without the calls
		# it finished, and those after it
		my @left;
		for my $g (@todo)
		{
			next if $done{"group $g->{id}"} && !grep { !$done{ $_->{id} } } @{ $g->{items} };
			next if exists $skipped{ $g->{id} };
			push @left, { %$g, items => [ grep { !$done{ $_->{id} } } @{ $g->{items} } ] };
		}
		last unless @left;
		my $lost = $left[0]{items}[0];
		if ($lost && defined $call{ $lost->{id} }{out})
		{
			$call{ $lost->{id} }{code} = $hung ? 'HANG' : 'CRASH';
			$call{ $lost->{id} }{msg} = $hung ? 'no answer a minute after its statement_timeout' : ($err =~ s/\s+/ /gr);
			if ($hung)
			{
				# end it, and what it holds open on the node
				$main->safe_psql($db,
					"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'eo:$lost->{id}'");
				$node->safe_psql($db,
					"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name IN ('exactonce', 'postgres_fdw')");
			}
			shift @{ $left[0]{items} };
		}
		elsif ($done{"group $left[0]{id}"})
		{
			# lost outside a call (in pre or post): its calls do not run
			diag("group $left[0]{id} lost its session outside a call: " . ($err =~ s/\s+/ /gr));
			$call{ $_->{id} }{code} = 'NOTRUN' for @{ $left[0]{items} };
			shift @left;
		}
		elsif (!$progress)
		{
			die "psql did not start the round: $err";
		}
		up();
		@todo = @left;
	}
	return (\%skipped, \%restored);
}

# --- what a round must leave as it was -------------------------------------

my $roles_sql = q{
SELECT string_agg(format('%s:%s/%s/%s/%s/%s/%s/%s', rolname, rolsuper, rolinherit, rolcreaterole,
	rolcreatedb, rolcanlogin, rolreplication, rolbypassrls), ' ' ORDER BY rolname) FROM pg_roles
UNION ALL
SELECT coalesce(string_agg(format('%s>%s:%s', roleid::regrole, member::regrole, admin_option), ' '
	ORDER BY roleid::regrole::text, member::regrole::text), '') FROM pg_auth_members};
my %roles_before = map { $_->name => $_->safe_psql($db, $roles_sql) } $main, $node;
my %start_time = map { $_->name => $_->safe_psql($db, 'SELECT pg_postmaster_start_time()') } $main, $node;

# where each server log was read up to
my %log_read = map { $_->name => -s $_->logfile } $main, $node;
sub new_log
{
	my ($cluster) = @_;
	my $text = slurp_file($cluster->logfile, $log_read{ $cluster->name });
	$log_read{ $cluster->name } += length($text);
	return $text;
}

# rows(call): what a call returned, without its header, times, intervals
# and pids, sorted
sub rows
{
	my ($c) = @_;
	my @out = @{ $c->{out} // [] };
	shift @out;
	return sort map {
		s/\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d(?::?\d\d)?)?/<time>/gr
		  =~ s/(?:-?\d+ (?:years?|mons?|days?) ?)*-?\d+:\d\d:\d\d(?:\.\d+)?/<interval>/gr
	} @out;
}

sub masked
{
	my ($c) = @_;
	return join(' / ', rows($c));
}

# differences(call, reference): how what a call returned differs from what
# its reference returned, field by field; a field withheld (NULL, as
# exactonce.pipelines shows a pipeline it refuses) is no difference, nor
# are the workers' own fields (a worker restarted after a crash, or timed
# out on the lock the round's ALTER holds, or cannot tell whether the
# pipeline is paused)
my $worker_fields = qr/^(worker_\w+|last_error)$/;
sub differences
{
	my ($c, $ref) = @_;
	my @got = rows($c);
	my @want = rows($ref);
	my @names = split /\|/, ($ref->{out}[0] // ''), -1;
	return (scalar(@got) . ' rows where unaltered it returned ' . scalar(@want) . ": @got") if @got != @want;
	my @diff;
	for my $i (0 .. $#got)
	{
		next if $got[$i] eq $want[$i];
		my @g = split /\|/, $got[$i], -1;
		my @w = split /\|/, $want[$i], -1;
		if (@g != @w)
		{
			push @diff, "row '$got[$i]' where unaltered '$want[$i]'";
			next;
		}
		for my $j (0 .. $#g)
		{
			next if $g[$j] eq $w[$j] || $g[$j] eq '<NULL>' || ($names[$j] // '') =~ $worker_fields;
			my $row = length($w[0] // '') <= 40 ? $w[0] : 'row ' . ($i + 1);
			push @diff, "$row " . ($names[$j] // "field $j") . ": '$g[$j]' where unaltered '$w[$j]'";
		}
	}
	return @diff;
}

# every finding, in full; and every call with what it gave
my $findings = "$PostgreSQL::Test::Utils::log_path/024_one_door_findings.log";
my $calls_log = "$PostgreSQL::Test::Utils::log_path/024_one_door_calls.log";
unlink $findings, $calls_log;
sub finding
{
	my ($label, $what, @list) = @_;
	append_to_file($findings, join('', map { "$label: $what: $_\n" } @list)) if @list;
	return;
}

# log_errors(text): the ERRORs of a server log, each with its SQLSTATE,
# application_name and the statement logged with it
sub log_errors
{
	my ($text) = @_;
	my (@errors, %last);
	for my $line (split /\n/, $text)
	{
		next unless $line =~ /^\S+ \S+ \S+ \[(\d+)\] (\w{5}) (.*?) *(ERROR|STATEMENT):  (.*)$/;
		my ($pid, $code, $app, $level, $rest) = ($1, $2, $3, $4, $5);
		if ($level eq 'ERROR')
		{
			push @errors, { code => $code, app => $app, msg => $rest, statement => '' };
			$last{$pid} = $errors[-1];
		}
		elsif ($last{$pid})
		{
			$last{$pid}{statement} = $rest;
			delete $last{$pid};
		}
	}
	return @errors;
}

sub at_most
{
	my ($n, @list) = @_;
	return @list if @list <= $n;
	return (@list[ 0 .. $n - 1 ], '... and ' . (@list - $n) . ' more');
}

# round_checks(label, ids, node_log => text, reference => 1): the assertions
# after a round (seven, always):
#   no call lost its session, no "terminated by signal" in either log;
#   every refusal has an SQLSTATE, none of class XX (internal error);
#   with reference, a call that succeeds returns what its reference did;
#   the owner's code ran as the owner only (main and node);
#   pg_roles, pg_auth_members unchanged on main and on the node;
#   every login to the node by the extension or postgres_fdw is the
#   owner's mapping's.
sub round_checks
{
	my ($label, $ids, %o) = @_;
	up();
	my $main_log = new_log($main);
	my $node_log = ($o{node_log} // '') . new_log($node);
	my @calls = map { $call{$_} } @$ids;
	append_to_file($calls_log,
		join('', map { "$label: " . describe($_->{id}) . ': ' . ($_->{code} // '') . ' ' . ($_->{msg} // '') . "\n" } @calls));

	my @crash = map { describe($_->{id}) . ": $_->{code} ($_->{msg})" }
	  grep { ($_->{code} // '') =~ /^(CRASH|HANG)$/ } @calls;
	for my $c ([ 'main', $main_log ], [ 'node1', $node_log ])
	{
		push @crash, "$c->[0]: $1"
		  while $c->[1] =~ /^.*?((?:server process|background worker).*terminated by signal.*(?:\n.*Failed process was running:.*)?)/mg;
	}
	finding($label, 'crash', @crash);
	ok(!@crash, "$label: no backend crashed") or diag(join("\n", $label, at_most(40, @crash)));

	my @bad = map { describe($_->{id}) . ': ' . ($_->{code} // 'no result') . ' ' . ($_->{msg} // '') }
	  grep {
		my $code = $_->{code} // '';
		$code !~ /^(CRASH|HANG|NOTRUN)$/ && ($code !~ /^[0-9A-Z]{5}$/ || $code =~ /^XX/)
	  } @calls;
	# and the errors in the logs: the workers', the node's (sqlsmith's only
	# where its statement calls the extension: PostgreSQL's own internal
	# errors are not this test's)
	for my $c ([ 'main', $main_log ], [ 'node1', $node_log ])
	{
		for my $e (grep { $_->{code} =~ /^XX/ } log_errors($c->[1]))
		{
			next if $e->{app} =~ /^sqlsmith/ && $e->{statement} !~ /exactonce\./;
			my $who =
				$e->{app} =~ /^eo:(\d+)$/ ? describe($1)
			  : $e->{app} eq '' ? 'a background process'
			  : "application \"$e->{app}\"";
			push @bad, "$c->[0] log: $who: $e->{code} $e->{msg}";
		}
	}
	my %seen_bad;
	@bad = grep { !$seen_bad{$_}++ } @bad;
	finding($label, 'no clean SQLSTATE', @bad);
	ok(!@bad, "$label: every refusal carries an SQLSTATE, none an internal error (XX)")
	  or diag(join("\n", $label, at_most(40, @bad)));

	my @garbage;
	for my $c (grep { $o{reference} && $_->{ref} } @calls)
	{
		my $ref = $call{ $c->{ref} };
		next unless ($c->{code} // '') eq '00000' && !$ref->{volatile};
		if (($ref->{code} // '') ne '00000')
		{
			push @garbage, describe($c->{id}) . " succeeded, where unaltered it refused ($ref->{code} $ref->{msg}): " . masked($c);
		}
		elsif (my @d = differences($c, $ref))
		{
			push @garbage, describe($c->{id}) . ' returned ' . join('; ', @d);
		}
	}
	finding($label, 'garbage', @garbage);
	ok(!@garbage, "$label: a call on an altered table refuses or returns what it did before")
	  or diag(join("\n", $label, at_most(40, @garbage)));

	my (@planted, %seen);
	for my $c ([ 'main', $main_log ], [ 'node1', $node_log ])
	{
		while ($c->[1] =~ /^\S+ \S+ \S+ \[\d+\] \w{5} (.*?) *WARNING:  eo_planted current_user=(\S+) session_user=(\S+) what=(.*)$/mg)
		{
			my ($app, $cur, $sess, $what) = ($1, $2, $3, $4);
			my $who = $app =~ /^eo:(\d+)$/ ? describe($1) : "application \"$app\"";
			push @planted, "$c->[0]: $what ran as $cur (session $sess) in $who";
		}
	}
	@planted = grep { !$seen{$_}++ } @planted;
	finding($label, 'rights', @planted);
	ok(!@planted, "$label: the owner's planted code ran as the owner only")
	  or diag(join("\n", $label, at_most(40, @planted)));

	for my $cluster ($main, $node)
	{
		is($cluster->safe_psql($db, $roles_sql), $roles_before{ $cluster->name },
			"$label: no role gained a right on " . $cluster->name);
	}

	my @logins;
	while ($node_log =~ /connection authorized: user=(\S+) database=\S+ application_name=(exactonce|postgres_fdw)/g)
	{
		push @logins, "$2 logged in as $1" if $1 ne $owner;
	}
	%seen = ();
	@logins = grep { !$seen{$_}++ } @logins;
	finding($label, 'node login', @logins);
	ok(!@logins, "$label: every connection to the node used the owner's user mapping")
	  or diag(join("\n", $label, @logins));
	return;
}

# --- the distributed pipelines' health ---------------------------------------

# up(): wait until both servers take connections (after a crash, a restart)
sub up
{
	for my $cluster ($main, $node)
	{
		$cluster->poll_query_until($db, 'SELECT true') or die $cluster->name . ' did not come back';
	}
	return;
}

# healthy(name): the distributed pipeline is still on the node and the
# coordinator, with the tables it was made with
sub healthy
{
	my ($name) = @_;
	my $p = $pipelines{$name};
	my $shape = sub { join(',', map { join(':', @$_) } @{ $_[0] }) };
	up();
	return eval {
		$main->safe_psql($db, "SELECT count(*) FROM exactonce.distributed_pipeline WHERE name = '$name'") eq '1'
		  && $node->safe_psql($db, "SELECT count(*) FROM exactonce.pipeline WHERE name = '$name'") eq '1'
		  && $shape->(columns($node, $name)) eq $shape->($p->{node_columns})
		  && $shape->(columns($main, $name)) eq $shape->($p->{columns});
	} // 0;
}

# repair(name): a distributed pipeline a call dropped on the node (a drop
# that reached the node commits there whatever the coordinator does), or
# left altered there, is made again and planted again; a few times, if a
# server that crashes over it restarts in between
sub repair
{
	my ($name) = @_;
	return if healthy($name);
	note("remaking $name, which a call dropped or changed on the node");
	for my $attempt (1 .. 5)
	{
		up();
		last if eval {
			$node->safe_psql($db,
				"SET client_min_messages = warning; DROP SCHEMA IF EXISTS $name CASCADE;
				 DELETE FROM exactonce.pipeline WHERE name = '$name'");
			$main->psql($db, "SELECT exactonce.drop_pipeline('$name', force => true)",
				connstr => $main->connstr($db) . " user=$owner");
			$main->safe_psql($db,
				"SET client_min_messages = warning; DROP SCHEMA IF EXISTS $name CASCADE;
				 DELETE FROM exactonce.distributed_pipeline WHERE name = '$name'");
			make_pipeline($name);
			as_owner($main, plant_triggers_sql($name) . plant_shadows_sql($name));
			plant_node_schema($name);
			1;
		};
		die "could not make $name again: $@" if $attempt == 5;
	}
	$pipelines{$name}{columns} = columns($main, $name);
	$pipelines{$name}{node_columns} = columns($node, $name);
	delete $calls{"$name/$_"} for 'all', 'reaching';
	return;
}

# --- round 1: every caller, every function, every pipeline ------------------

{
	my @ids;
	my $node_log = '';
	for my $name (@pipeline_names)
	{
		for my $role (@roles)
		{
			my @items = map { item(%$_, role => $role, login => $role, pipeline => $name) } calls($name, 'all');
			my @creates = grep { $_->{fn} =~ /^create_/ } @items;
			my @rest = grep { $_->{fn} !~ /^create_/ } @items;
			my $group = { pre => connect_to($main, $role) . "SELECT;\n", login => $role, wrap => \&in_transaction };
			run_groups({ %$group, id => "every/$name/$role", items => \@rest });
			$node_log .= new_log($node);
			# a pipeline the call creates is the caller's: its own mapping's
			# logins are not the owner's door
			run_groups({ %$group, id => "create/$name/$role", items => \@creates });
			$node_log .= new_log($node) =~ s/^.*connection authorized.*$//mgr;
			push @ids, map { $_->{id} } @items;
			if ($pipelines{$name}{distributed})
			{
				repair($name);
				$node_log .= new_log($node);
			}
		}
	}
	round_checks('every caller', \@ids, node_log => $node_log);

	# the roles table of docs/security.md, for the roles that own nothing:
	# the calls each may make and succeed (views of schema exactonce, and
	# the reader's aggregates, are open to them); any other is refused
	my @anyone = qw(drop_feed_consumer faults_injected forget forward_validator key_bucket
	  key_shard_hash key_shard_hash_extended once once_get once_result pipeline_stats);
	my %may = (
		eo_connect => [@anyone],
		eo_producer => [ @anyone, qw(committed_offset ingest ingest_slot ingest_slot_check wait_applied) ],
		eo_reader => [ @anyone, qw(feed_read wait_applied) ]);
	my @granted;
	for my $c (map { $call{$_} } @ids)
	{
		next unless $may{ $c->{role} } && ($c->{code} // '') eq '00000';
		next if grep { $_ eq $c->{fn} } @{ $may{ $c->{role} } };
		next if $c->{fn} =~ /^view exactonce\./;
		next if $c->{role} eq 'eo_reader' && $c->{fn} =~ /^view \w+\.aggregates$/;
		push @granted, describe($c->{id});
	}
	ok(!@granted, 'every caller: a role that owns nothing succeeds only where docs/security.md lets it')
	  or diag(join("\n", at_most(40, @granted)));
}

# --- round 2: the reference -------------------------------------------------

# the state stage refuses tables with triggers: from here on state and seen
# keep none, so that the calls reach every column
for my $cluster ($main, $node)
{
	as_owner(
		$cluster, q{
DO $d$
DECLARE t record;
BEGIN
	FOR t IN SELECT tgname, tgrelid::regclass AS rel FROM pg_trigger
			 WHERE tgname LIKE 'eo_planted_%' AND NOT tgisinternal AND tgparentid = 0
			 AND tgrelid IN (SELECT c.oid FROM pg_class c WHERE c.relname IN ('state', 'seen')) LOOP
		EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
	END LOOP;
END
$d$});
}

# the roles that call after an alteration of each kind: crashes and garbage
# are the same for both, the owner's code running as someone else only
# matters for the superuser
my %kind_roles = (domain => ['superuser'], type => ['superuser'], builtin => [ $owner, 'superuser' ]);

# main_group(name, id, alteration label, pre, roles): a group of the calls
# that reach a pipeline of main, in savepoints of the transaction pre began
sub main_group
{
	my ($name, $id, $alteration, $pre, @roles) = @_;
	my @items;
	for my $role (@roles)
	{
		push @items, map {
			item(%$_, role => $role, login => 'superuser', pipeline => $name, alteration => $alteration)
		} grep { $_->{fn} !~ /^(create_|drop_)/ || !$pipelines{$name}{distributed} } calls($name, 'reaching');
	}
	return {
		id => $id,
		login => 'superuser',
		pre => connect_to($main, 'superuser') . "BEGIN;\nSET client_min_messages = error;\n$pre",
		body => "RESET ROLE;\n",
		items => \@items,
		wrap => \&in_savepoint,
		post => "ROLLBACK;\n"
	};
}

# main_group whose calls are each followed by verify() (in_savepoint_verified)
sub verified_group
{
	my $g = main_group(@_);
	$g->{wrap} = \&in_savepoint_verified;
	return $g;
}

# the reference: each call on main's pipelines twice, unaltered; a call
# whose result differs between the two is volatile, not compared
my (%reference, %reaches_node);
{
	my @ids;
	for my $name ('s_latest', 's_acc')
	{
		my @runs = map { verified_group($name, "reference/$name/$_", undef, "SELECT;\n", $owner, 'superuser') } 1, 2;
		run_groups(@runs);
		my ($first, $second) = map { $_->{items} } @runs;
		for my $i (0 .. $#$first)
		{
			my ($a, $b) = ($first->[$i], $second->[$i]);
			$a->{volatile} = 1 if masked($a) ne masked($b) || ($a->{code} // '') ne ($b->{code} // '');
			$a->{verify_volatile} = 1 if ($a->{verified} // '') ne ($b->{verified} // '');
			$reference{$name}{"$a->{role}/$a->{fn}"} = $a->{id};
		}
		push @ids, map { $_->{id} } @$first, @$second;
	}
	# the distributed pipelines: a call that refuses at the coordinator,
	# without a word from the node, is not repeated for each alteration of
	# the node's tables
	for my $name ('d_latest', 'd_acc')
	{
		my @groups;
		for my $role ($owner, 'superuser')
		{
			my @items = map { item(%$_, role => $role, login => $role, pipeline => $name) }
			  grep { $_->{fn} !~ /^(create_|drop_)/ } calls($name, 'reaching');
			push @groups, { id => "reference/$name/$role", pre => connect_to($main, $role) . "SELECT;\n",
				login => $role, items => \@items, wrap => \&in_transaction };
		}
		run_groups(@groups);
		for my $it (map { @{ $_->{items} } } @groups)
		{
			$reaches_node{$name}{"$it->{role}/$it->{fn}"} = 1
			  if ($it->{code} // '') eq '00000' || ($it->{msg} // '') =~ /server|node/;
			push @ids, $it->{id};
		}
	}
	round_checks('reference', \@ids);
}

# --- round 3: each column altered in turn ----------------------------------

# another built-in type for a column of type t, and how to convert to it
my %builtin = (
	'text' => [ 'name', '%s::name' ],
	'numeric' => [ 'bigint', 'round(%s)::bigint' ],
	'bigint' => [ 'numeric', '%s::numeric' ],
	'integer' => [ 'bigint', '%s::bigint' ],
	'boolean' => [ 'integer', '%s::integer' ],
	'timestamp with time zone' => [ 'timestamp without time zone', '%s::timestamp' ],
	'bytea' => [ 'text', "encode(%s, 'hex')" ],
	'text[]' => [ 'name[]', '%s::name[]' ],
	'bigint[]' => [ 'integer[]', '%s::integer[]' ],
	'integer[]' => [ 'bigint[]', '%s::bigint[]' ],
	'numeric[]' => [ 'bigint[]', '%s::bigint[]' ]);
# and back, for the node's tables (committed there)
my %builtin_back = ('bytea' => "decode(%s, 'hex')");

# alterations(table, column, type): [kind, label, TYPE clause, undo clause]
sub alterations
{
	my ($table, $col, $type) = @_;
	my $g = tag($type);
	my $qcol = "\"$col\"";
	my @a;
	push @a, [ 'domain', "$table.$col to the owner's domain d_$g",
		"TYPE eo_plant.d_$g USING ${qcol}::eo_plant.d_$g", "TYPE $type USING ${qcol}::$type" ];
	push @a, [ 'type', "$table.$col to the owner's type w_$g (casts to and from $type)",
		"TYPE eo_plant.w_$g USING ROW($qcol)::eo_plant.w_$g", "TYPE $type USING ($qcol).v" ];
	if ($builtin{$type})
	{
		my ($to, $using) = @{ $builtin{$type} };
		push @a, [ 'builtin', "$table.$col to $to", "TYPE $to USING " . sprintf($using, $qcol),
			"TYPE $type USING " . sprintf($builtin_back{$type} // "%s::$type", $qcol) ];
	}
	return @a;
}

# alter_sql(name, table, column, clause, label, in transaction): the owner's
# ALTER, first as it is (with the library preloaded, the column guard may
# refuse it: that refusal is a call too, and needs an SQLSTATE), then with
# the guard off, as if the library were not preloaded: the one door must
# hold without it.  Ends with the ALTER that must succeed.
my @guard_ids;
sub alter_sql
{
	my ($name, $table, $col, $clause, $label, $in_transaction) = @_;
	my $alter = "ALTER TABLE $name.$table ALTER COLUMN \"$col\" $clause";
	my $probe = item(fn => 'ALTER TABLE', role => $owner, pipeline => $name, alteration => $label, sql => $alter);
	push @guard_ids, $probe->{id};
	my $sql = "\\echo \@\@start $probe->{id}\n"
	  . ($in_transaction ? "SAVEPOINT eo_guard;\n" : "BEGIN;\n")
	  . "SET LOCAL ROLE $owner;\n$alter;\n"
	  . "\\echo \@\@end $probe->{id} :SQLSTATE :LAST_ERROR_MESSAGE\n"
	  . ($in_transaction ? "ROLLBACK TO SAVEPOINT eo_guard;\n" : "ROLLBACK;\n")
	  . "SELECT set_config('exactonce.guard_columns', 'off', "
	  . ($in_transaction ? 'true' : 'false')
	  . ") FROM pg_settings WHERE name = 'exactonce.guard_columns';\n"
	  . ($in_transaction ? "SET LOCAL ROLE $owner;\n" : "SET ROLE $owner;\n")
	  . "$alter;\n";
	return ($sql, $probe);
}

my (%altered, %skipped, %unrestored);

# alter_main(name): each column of each of the pipeline's tables on main
# (a distributed pipeline's: its coordinator's queue) altered in turn, in
# one transaction per alteration, with the calls after it
sub alter_main
{
	my ($name, @columns) = @_;
	my (@groups, %probe);
	for my $c (@columns)
	{
		my ($table, $col, $type) = @$c;
		for my $a (grep { $kinds{ $_->[0] } } alterations($table, $col, $type))
		{
			my ($kind, $label, $to) = @$a;
			$label = "coordinator: $label" if $pipelines{$name}{distributed};
			my ($sql, $probe) = alter_sql($name, $table, $col, $to, $label, 1);
			my $g = main_group($name, "alter/$name/" . scalar(@groups), $label, $sql, @{ $kind_roles{$kind} });
			$probe{ $g->{id} } = $probe;
			push @groups, $g;
		}
	}
	my ($skipped) = run_groups(@groups);
	my @ids;
	for my $g (@groups)
	{
		push @ids, $probe{ $g->{id} }{id};
		if (exists $skipped->{ $g->{id} })
		{
			$skipped{$name}++;
			delete $call{ $_->{id} } for @{ $g->{items} };
			next;
		}
		$altered{$name}++;
		for my $it (@{ $g->{items} })
		{
			$it->{ref} = $reference{$name}{"$it->{role}/$it->{fn}"};
			push @ids, $it->{id};
		}
	}
	return @ids;
}

# alter_node(name): each column of the distributed pipeline's tables on the
# node altered in turn and committed there (the owner queues a few events
# first), the calls at the coordinator that reach the node, as the
# superuser (the owner's run the same code, with its own rights), then the
# column altered back (the guard lets a column go back to its own type)
sub alter_node
{
	my ($name) = @_;
	my @groups;
	for my $c (@{ $pipelines{$name}{node_columns} })
	{
		my ($table, $col, $type) = @$c;
		for my $a (grep { $node_kinds{ $_->[0] } } alterations($table, $col, $type))
		{
			my ($kind, $label, $to, $back) = @$a;
			my ($sql, $probe) = alter_sql($name, $table, $col, $to, "node1: $label", 0);
			my @items = map {
				item(%$_, role => 'superuser', login => 'superuser', pipeline => $name,
					alteration => "node1: $label")
			} grep { $reaches_node{$name}{"superuser/$_->{fn}"} } calls($name, 'reaching');
			push @groups,
			  {
				id => "node/$name/" . scalar(@groups),
				probe => $probe,
				pre => connect_to($node, 'superuser')
				  . "SET client_min_messages = error;\nSET lock_timeout = '20s';\nSET ROLE $owner;\n"
				  . events_sql($name, 3)
				  . "RESET ROLE;\n$sql",
				items => \@items,
				wrap => \&in_transaction,
				post => connect_to($node, 'superuser')
				  . "SET client_min_messages = error;\nSET lock_timeout = '20s';\nSET ROLE $owner;\n"
				  . "ALTER TABLE $name.$table ALTER COLUMN \"$col\" $back;\n"
				  . "\\echo \@\@restore node/$name/" . scalar(@groups) . " :SQLSTATE :LAST_ERROR_MESSAGE\n"
			  };
		}
	}
	my ($skipped, $restored) = run_groups(@groups);
	my @ids;
	for my $g (@groups)
	{
		push @ids, $g->{probe}{id};
		if (exists $skipped->{ $g->{id} })
		{
			$skipped{$name}++;
			delete $call{ $_->{id} } for @{ $g->{items} };
			next;
		}
		$altered{$name}++;
		push @ids, map { $_->{id} } @{ $g->{items} };
		$unrestored{$name}++ if $restored->{ $g->{id} };
	}
	note("$name: $unrestored{$name} alterations could not be undone on node1") if $unrestored{$name};
	repair($name);
	push @ids, alter_main($name, grep { $_->[0] eq 'ingest' } @{ $pipelines{$name}{columns} });
	return @ids;
}

for my $name (@pipeline_names)
{
	my $t0 = time;
	@guard_ids = ();
	my @ids =
	  $pipelines{$name}{distributed}
	  ? alter_node($name)
	  : alter_main($name, @{ $pipelines{$name}{columns} });
	my $guarded = grep { ($call{$_}{code} // '') =~ /^EO/ } @guard_ids;
	note(sprintf('%s: %d alterations made, %d refused by PostgreSQL; the column guard refused %d; %d calls, %.0fs',
		$name, $altered{$name} // 0, $skipped{$name} // 0, $guarded, scalar(@ids), time - $t0));
	round_checks("$name altered", \@ids, reference => !$pipelines{$name}{distributed});
}

# --- round 3b: rows of the pipeline's tables changed by hand -----------------

# what the owner may write into the tables it owns, as DML: rows deleted,
# added, doubled, renumbered, and values no stage writes (negative
# rotations and positions, NaN, nulls, arrays of other lengths), or a
# trigger that skips every row written to one table, each in the
# transaction of the calls; what exactonce reads from them it must check,
# and what it writes count (src/catalog/statement.c, StatementRowRefused,
# StatementWriteAll), so every call refuses with an SQLSTATE of its own or
# runs, as on the real rows
my @row_changes = (
	'DELETE FROM P.progress',
	'UPDATE P.progress SET rotation = rotation + 5',
	'UPDATE P.progress SET drain_rotation = -5',
	'UPDATE P.progress SET rotation = 9223372036854775000, drain_rotation = 9223372036854775000',
	'UPDATE P.progress SET ingested = -1, applied = 9223372036854775807',
	"UPDATE P.progress SET watermark = 'infinity'",
	'DELETE FROM P.shard WHERE shard = 0',
	'INSERT INTO P.shard (shard) VALUES (7)',
	'UPDATE P.shard SET shard = shard + 10',
	'UPDATE P.shard SET drain_rotation = drain_rotation + 1',
	'UPDATE P.shard SET drain_position = -1',
	'UPDATE P.shard SET drain_position = 9223372036854775000',
	'UPDATE P.shard SET drain_count = -3, drain_row = -1',
	'UPDATE P.shard SET drain_file = 1259, drain_count = 9223372036854775000',
	'DELETE FROM P.aggregates WHERE level = 0',
	"UPDATE P.aggregates SET total = 'NaN', keys = -5",
	'UPDATE P.aggregates SET level = 99',
	'INSERT INTO P.aggregates SELECT * FROM P.aggregates',
	"UPDATE P.aggregates SET extrema_reserve = '{1,2,3}'",
	"UPDATE P.aggregates SET extrema_reserve = '{{1,2},{3,4}}'",
	"UPDATE P.aggregates SET extrema_reserve = '[5:7]={1,2,3}'",
	'UPDATE P.aggregates SET extrema_reserve = array_fill(NULL::numeric, ARRAY[40])',
	'UPDATE P.aggregates SET value_min = 1000, value_max = -1000',
	'UPDATE P.distincts SET n = -1',
	"UPDATE P.distincts SET cell = '{a,b,c,d,e,f}'",
	"UPDATE P.distincts SET col = 'nosuch'",
	'INSERT INTO P.distincts SELECT * FROM P.distincts',
	"UPDATE P.state SET value = 'NaN'",
	"UPDATE P.state SET total = 'NaN', events = -1",
	'UPDATE P.state SET version = 9223372036854775807',
	'INSERT INTO P.state SELECT * FROM P.state',
	'DELETE FROM P.seen',
	'UPDATE P.seen SET version = 9223372036854775807',
	'UPDATE P.feed SET seq = -seq, level = 99',
	'UPDATE P.ledger SET applied_at = NULL',
	"UPDATE P.ledger SET token = '\\x00'",
	'INSERT INTO P.ledger SELECT * FROM P.ledger',
	"INSERT INTO P.dead_letters (key, version, value, reason) VALUES ('dl', 1, 'NaN', 'x')",
	map { "CREATE FUNCTION P.skip() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN RETURN NULL; END \$\$;\n"
		  . "CREATE TRIGGER skip BEFORE INSERT OR UPDATE OR DELETE ON P.$_ FOR EACH ROW EXECUTE FUNCTION P.skip()" }
	  qw(progress shard aggregates distincts state seen feed ledger dead_letters));

for my $name ('s_latest', 's_acc')
{
	my $t0 = time;
	my @groups;
	for my $i (0 .. $#row_changes)
	{
		my $change = $row_changes[$i] =~ s/\bP\./$name./gr;
		my $group = $change =~ /CREATE TRIGGER skip/ ? \&verified_group : \&main_group;
		push @groups, $group->($name, "rows/$name/$i", "rows: $change",
			"SET LOCAL ROLE $owner;\n$change;\n", $owner, 'superuser');
	}
	my ($skipped) = run_groups(@groups);

	# a call that runs with a trigger that skips every row written to one
	# table (the rows all as they were) must leave the pipeline as verify()
	# finds it after the same call unaltered: not proceed past a write that
	# did not happen
	my (@proceeded, %compared);
	for my $it (map { @{ $_->{items} } } grep { $_->{wrap} == \&in_savepoint_verified } @groups)
	{
		next unless ($it->{code} // '') eq '00000';
		my $ref = $call{ $reference{$name}{"$it->{role}/$it->{fn}"} // '' };
		next unless $ref && ($ref->{code} // '') eq '00000' && !$ref->{verify_volatile};
		$compared{ $ref->{verified} // 'none' }++;
		my ($got, $want) = map { $_->{verified} // 'nothing' } $it, $ref;
		push @proceeded, describe($it->{id}) . ": verify() said $got, unaltered $want" if $got ne $want;
	}
	note("$name: calls that ran past a skipping trigger, by what verify() said unaltered: "
		  . join(', ', map { "$_ $compared{$_}" } sort keys %compared));
	ok(grep({ /^t / } keys %compared), "$name: some calls ran past a skipping trigger where verify() said true unaltered");
	finding("$name rows changed", 'proceeded', @proceeded);
	ok(!@proceeded, "$name: a call that runs past a trigger skipping every row leaves what verify() finds as unaltered")
	  or diag(join("\n", at_most(40, @proceeded)));
	my @ids;
	for my $g (@groups)
	{
		if (exists $skipped->{ $g->{id} })
		{
			delete $call{ $_->{id} } for @{ $g->{items} };
			next;
		}
		push @ids, map { $_->{id} } @{ $g->{items} };
	}
	note(sprintf('%s: %d changes of rows made, %d refused by PostgreSQL; %d calls, %.0fs',
		$name, @groups - keys %$skipped, scalar(keys %$skipped), scalar(@ids), time - $t0));
	round_checks("$name rows changed", \@ids);
}

# --- round 4: sqlsmith as the owner, with the workers on altered tables ------

{
	# main's pipelines resumed, then a column of each of their tables (but
	# the queue) altered to another built-in type, committed, and events
	# queued: the workers must refuse them with an error, as sqlsmith's
	# calls must
	for my $name ('s_latest', 's_acc')
	{
		my (%done, $alter);
		for my $c (reverse @{ $pipelines{$name}{columns} })
		{
			my ($table, $col, $type) = @$c;
			next if $table eq 'ingest' || $done{$table} || !$builtin{$type};
			$done{$table} = 1;
			my $to = (grep { $_->[0] eq 'builtin' } alterations($table, $col, $type))[0][2];
			$alter .= "BEGIN\n\tALTER TABLE $name.$table ALTER COLUMN \"$col\" $to;\n"
			  . "EXCEPTION WHEN OTHERS THEN NULL;\nEND;\n";
		}
		as_owner($main, "SELECT exactonce.resume('$name')");
		$main->safe_psql($db,
			"SET client_min_messages = error;\n"
			  . "SELECT set_config('exactonce.guard_columns', 'off', false) FROM pg_settings\n"
			  . "WHERE name = 'exactonce.guard_columns';\n"
			  . "SET ROLE $owner;\nDO \$alter\$\nBEGIN\n$alter\nEND\n\$alter\$;\n"
			  . events_sql($name, 5));
	}
	ok( $main->poll_query_until(
			$db,
			"SELECT bool_and(last_error IS NOT NULL) FROM exactonce.pipelines WHERE name IN ('s_latest', 's_acc')"),
		'the workers refuse the altered pipelines with an error');

	# the owner's shadows are not in sqlsmith's own search_path: its
	# catalog queries would run the owner's operators per row
	my ($out, $err) = ('', '');
	my $target = $main->connstr($db)
	  . " user=$owner options='-c search_path=s_latest,exactonce,public -c statement_timeout=2s'";
	my $t0 = time;
	IPC::Run::run([ 'sqlsmith', "--target=$target", "--max-queries=$queries", '--seed=24' ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(600));
	note(sprintf('sqlsmith as the owner, %.0fs: %s', time - $t0, ($err . $out) =~ s/\s+/ /gr =~ s/^(.{0,300}).*/$1/r));
	$main->poll_query_until($db, 'SELECT true') or die 'main did not come back after sqlsmith';
	unlike($err . $out, qr/connection to database failed|server closed the connection unexpectedly/,
		"sqlsmith as the owner: $queries queries, the connection never lost");
	round_checks('sqlsmith', []);
}

# --- the end: the servers never restarted, the pipelines add up -------------

for my $cluster ($main, $node)
{
	is($cluster->safe_psql($db, 'SELECT pg_postmaster_start_time()'),
		$start_time{ $cluster->name }, $cluster->name . ': the postmaster never restarted');
	unlike(slurp_file($cluster->logfile), qr/all server processes terminated; reinitializing/,
		$cluster->name . ': no crash and restart in the server log');
	is( $cluster->safe_psql(
			$db,
			'SELECT coalesce(bool_and(ingested IS NULL OR ingested = applied + duplicates + stale + dead_lettered), true) FROM exactonce.pipelines'
		),
		't',
		$cluster->name . ': every pipeline still adds up');
	note($cluster->name . ': the owner\'s code ran '
		  . $cluster->safe_psql($db, 'SELECT last_value FROM eo_plant.runs') . ' times');
}
note(sprintf('%d calls in %.0fs', $next_id, time - $started));

$main->stop;
$node->stop;
done_testing();
