# The log consumer (tools/consumer.c) delivers a partitioned log through
# exactonce.ingest() while it crashes after commits (before it records its
# progress), before commits, and while two consumers race over one log; the
# background workers drain the pipelines.  In every case the aggregates equal
# an oracle computed from the log file, the pipeline ingested each offset
# exactly once, and each source's committed offset is its partition's last.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Copy qw(copy);
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ExactonceTest;

my $db = 'postgres';
my $node = eo_node('consumer');
my $work = PostgreSQL::Test::Utils::tempdir;

# the consumer, built in the test's directory with the tools' Makefile
copy('tools/consumer.c', "$work/consumer.c") or die "copy tools/consumer.c: $!";
ok(run_log([ 'make', '-s', '-C', $work, '-f', abs_path('tools/Makefile'), 'consumer' ]),
	'tools/consumer builds');
my $consumer = "$work/consumer";

# the log: 4 partitions, 30000 events, offsets with gaps; 3000 keys with 10
# versions each, so repeats (duplicates), older versions after newer ones
# (stale) and tombstones; a (key, version) always has the same content
my $log = "$work/log.tsv";
my $events = 30000;
{
	srand(20240601);
	my @off = (-1) x 4;
	open my $fh, '>', $log or die "open $log: $!";
	for (1 .. $events)
	{
		my $p = int(rand(4));
		$off[$p] += rand() < 0.1 ? 1 + int(rand(5)) : 1;
		my $k = int(rand(3000));
		my $v = int(rand(10));
		printf $fh "%d\t%d\tk%d\t%d\t%s\t%s\ta%d\tb%d\n", $p, $off[$p], $k, $v,
		  (($k * 31 + $v * 17) % 1000) / 10,
		  (($k * 7 + $v * 13) % 23 == 0) ? 't' : 'f', ($k + $v) % 3, ($k * $v) % 5;
	}
	close $fh or die "close $log: $!";
}

my ($rc, $stdout, $stderr) = $node->psql(
	$db, qq{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
SELECT exactonce.create_pipeline('cons_l', ARRAY['a', 'b']);
SELECT exactonce.create_pipeline('cons_a', ARRAY['a', 'b'], 'accumulate');
SELECT exactonce.create_pipeline('cons_r', ARRAY['a', 'b']);
CREATE TABLE cons_log (part int, off bigint, key text, version bigint, value numeric,
	deleted boolean, a text, b text);
\\copy cons_log FROM '$log'
-- latest: each key's highest version counts unless it is a tombstone
CREATE VIEW cons_oracle_latest AS
SELECT a, b, 2 - (GROUPING(a) + GROUPING(b)) AS level, sum(value) AS total, count(*) AS keys
FROM (SELECT DISTINCT ON (key) * FROM cons_log ORDER BY key, version DESC) s
WHERE NOT deleted GROUP BY ROLLUP (a, b);
-- accumulate: each distinct (key, version) adds once; tombstones are dead letters
CREATE VIEW cons_oracle_accumulate AS
SELECT a, b, 2 - (GROUPING(a) + GROUPING(b)) AS level, sum(value) AS total, count(*) AS keys
FROM (SELECT DISTINCT key, version, value, a, b FROM cons_log WHERE NOT deleted) s
GROUP BY ROLLUP (a, b);
});
is($rc, 0, 'pipelines, log table and oracles created') or diag $stderr;

sub sql
{
	my ($query) = @_;
	return $node->safe_psql($db, $query);
}

# mismatches(pipeline, oracle): rows in one and not in the other
sub mismatches
{
	my ($pipe, $oracle) = @_;
	return sql(
		"SELECT count(*) FROM (
		(SELECT a, b, level, total, keys FROM $pipe.aggregates EXCEPT ALL SELECT * FROM $oracle)
		UNION ALL
		(SELECT * FROM $oracle EXCEPT ALL SELECT a, b, level, total, keys FROM $pipe.aggregates)) m");
}

# offsets_right(pipeline, topic): every partition's committed offset is its last
sub offsets_right
{
	my ($pipe, $topic) = @_;
	return sql(
		"SELECT count(*) = 4 AND bool_and(s.committed_offset = l.last) FROM exactonce.sources s
		JOIN (SELECT '$topic:' || part AS source, max(off) AS last FROM cons_log GROUP BY part) l USING (source)
		WHERE s.pipeline = '$pipe'");
}

# consume(name, args...): run the consumer until it finishes without
# crashing (exit status 3 is a crash), at most 2000 runs; returns whether
# it finished, the runs, the crashes and its last summary line
sub consume
{
	my ($name, @args) = @_;
	my ($runs, $crashes) = (0, 0);
	while ($runs < 2000)
	{
		$runs++;
		my ($out, $err) = ('', '');
		IPC::Run::run(
			[
				$consumer, '-d', $node->connstr($db), '-i', $log,
				'-s', $runs . int(rand(1_000_000)), @args
			],
			'>', \$out, '2>', \$err);
		my $status = $?;
		append_to_file("$work/$name.err", $err);
		if ($status >> 8 == 3)
		{
			$crashes++;
			next;
		}
		return (1, $runs, $crashes, $out) if $status == 0;
		diag "consumer $name failed (status $status): $err";
		return (0, $runs, $crashes, $out);
	}
	return (0, $runs, $crashes, '');
}

# 1. crash after every third commit that queued events, before the progress
# file records it; the restarted consumer replays from its progress file
my ($done, $runs, $crashes) =
  consume('latest', '-p', 'cons_l', '-f', "$work/progress_l", '-b', 300, '-R', '-c', 3);
ok($done, "latest: the consumer finished after $runs runs");
cmp_ok($crashes, '>=', 20, "latest: it crashed $crashes times after a commit, before recording its progress");
my $skipped = sql("SELECT sum(skipped) FROM exactonce.sources WHERE pipeline = 'cons_l'");
cmp_ok($skipped, '>', 0, "latest: the replays after the crashes were skipped ($skipped events)");

# 2. a consumer that lost its progress file delivers the whole log again:
# nothing is queued twice
my $out;
IPC::Run::run(
	[
		$consumer, '-d', $node->connstr($db), '-p', 'cons_l', '-i', $log,
		'-f', "$work/progress_lost", '-b', 1000
	],
	'>', \$out, '2>&1');
chomp $out;
is($out =~ s/^batches \d+ //r, "events $events ingested 0 skipped $events",
	'latest: a full replay queues nothing');

# 3. accumulate mode: random crashes before and after commits, resuming from
# the pipeline's committed offsets (no progress file)
($done, $runs, $crashes) =
  consume('accumulate', '-p', 'cons_a', '-S', '-b', 200, '-R', '-r', 0.2, '-k', 'either');
ok($done, "accumulate: the consumer finished after $runs runs");
cmp_ok($crashes, '>=', 10, "accumulate: it crashed $crashes times before or after a commit");

# 4. two consumers race over the same log into one pipeline, each crashing;
# each runs in a child process that leaves by POSIX::_exit, so that the
# harness's END blocks run only in this one
my @children;
for my $name (qw(race1 race2))
{
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		srand($$);
		my ($ok) = consume($name, '-p', 'cons_r', '-f', "$work/progress_$name", '-b', 250,
			'-R', '-r', 0.1, '-k', 'either');
		POSIX::_exit($ok ? 0 : 1);
	}
	push @children, $pid;
}
my $failed = 0;
for my $pid (@children)
{
	waitpid($pid, 0);
	$failed++ if $?;
}
is($failed, 0, 'race: both consumers finished');

# the workers drain all three pipelines
ok(eo_wait_drained($node, $db, $_), "$_: the workers drained the pipeline") for qw(cons_l cons_a cons_r);

is(mismatches('cons_l', 'cons_oracle_latest'), '0', 'latest: aggregates equal the oracle');
is(mismatches('cons_a', 'cons_oracle_accumulate'), '0', 'accumulate: aggregates equal the oracle');
is(mismatches('cons_r', 'cons_oracle_latest'), '0', 'race: aggregates equal the oracle');
my $distinct = sql('SELECT count(DISTINCT (part, off)) FROM cons_log');
is($distinct, $events, "the log has $events distinct offsets");
for my $pipe (qw(cons_l cons_a cons_r))
{
	is(sql("SELECT ingested FROM exactonce.pipelines WHERE name = '$pipe'"),
		$distinct, "$pipe: ingested equals the number of distinct offsets");
	is(sql("SELECT sum(ingested) FROM exactonce.sources WHERE pipeline = '$pipe'"),
		$distinct, "$pipe: the sources' ingested counters add up to it");
	is(offsets_right($pipe, 'log'), 't', "$pipe: each source's committed offset is its partition's last");
}
is( sql(
		"SELECT dead_lettered = (SELECT count(*) FROM cons_log WHERE deleted) FROM exactonce.pipelines WHERE name = 'cons_a'"
	),
	't',
	'accumulate: exactly the tombstones were dead-lettered');
is( sql("SELECT (SELECT count(*) FROM cons_l.dead_letters) || ' ' || (SELECT count(*) FROM cons_r.dead_letters)"),
	'0 0', 'latest: no dead letters');

sql(q{
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline(p) FROM unnest(ARRAY['cons_l', 'cons_a', 'cons_r']) p;
});
is(sql("SELECT count(*) FROM exactonce.sources WHERE pipeline LIKE 'cons\\_%'"),
	'0', 'dropping the pipelines dropped their offsets');

$node->stop;
done_testing();
