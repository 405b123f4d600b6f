# Every function on every state: a model-based test of the whole API.
#
# A seeded generator makes random sequences of operations and applies each
# both to the extension and to a model of what the pipeline must hold
# (ExactonceModel.pm), computed from the events as produced: pipelines of
# each mode with measures, min and max, distinct counts, cubes and grouping
# sets, and event-time windows; inserts and COPYs with duplicates, stale
# and newer versions, moves to other cells, tombstones, conflicting
# duplicates and values no sum can take; flush, worker drains, pause and
# resume, set_shards, prune, rebuild (also of damaged cells), replays of
# dead letters (some mended first), set_feed and feed_read, create_view,
# wait_applied, drop_pipeline and create again, restarts and immediate
# shutdowns, and calls that must be refused.  After every step:
#
# - aggregates and every view equal the model (EXCEPT ALL both ways);
# - state and dead_letters (with the class of each reason) equal the model;
# - exactonce.pipelines: ingested is every row sent, dead_lettered the
#   model's, ingested = applied + duplicates + stale + dead_lettered, and
#   paused, shards, retention_horizon, feed and views are what was set;
# - verify() finds nothing;
# - with a feed, the feed replayed from its start rebuilds the aggregates
#   (each cell's last change, the sum of its changes, each change's old
#   values the previous one's new), and a consumer that read it with
#   feed_read holds them too, having read each change once;
# - with windows, the final windows are those the model's watermark closed;
# - every error is the refusal the README documents, with its SQLSTATE.
#
# The refusals it expects, each with the SQLSTATE the README gives (any
# other error, or an SQLSTATE of class XX, is a failure):
#   create_pipeline: windows in latest mode or over a cube (0A000), a
#     repeated dimension (42701), an unknown mode, 0 shards, a min_max
#     entry that is not a measure, no dimensions (22023), a name taken
#     (42710), a bad name (42602);
#   create_view: no grouping has the dimensions named (0A000), a column that
#     is not a dimension (42703), a computed key without AS (22023), a
#     relation of that name (42P07);
#   set_shards outside 1 to 64 (22023); prune(NULL) and rebuild(NULL)
#   (22004); rebuild in accumulate mode (0A000); a replay filter that is not
#   one expression (42601); flush in REPEATABLE READ (25001); an unknown
#   pipeline (42704); feed_read without a feed (55000); wait_applied without
#   the workers (55000), in a transaction that inserted (25001), past its
#   timeout on a paused pipeline (EO003); drop_pipeline with events queued
#   (55000); move_keys of a range that no partition holds whole or that is
#   on its server already (22023), or that overlaps a range the server gave
#   away (0A000).
#
# It runs on a cluster with the library preloaded (the workers drain;
# wait_applied waits) and on one without it (flush drains), and, with
# fewer steps, on a distributed pipeline over two nodes where keys move
# between the nodes (move_keys) and a node stops with -m immediate.
#
# Each run prints its seed.  A failure prints the whole sequence of the
# pipeline that failed and a shortened one that still fails the same way on
# a fresh pipeline (delta debugging, bounded by EXACTONCE_MODEL_SHRINK_SECONDS,
# default 120), then goes on with a new pipeline.
#
# Settings (environment):
#   EXACTONCE_MODEL_SEEDS        comma-separated seeds, or "random" (default 1,2,293)
#   EXACTONCE_MODEL_STEPS        steps per seed and cluster (default 100)
#   EXACTONCE_MODEL_DIST_STEPS   steps of the distributed sequence (default 20)
#   EXACTONCE_MODEL_DIST_SEEDS   how many of the seeds also run distributed (default 1)
#   EXACTONCE_MODEL_CLUSTERS     which of preload,plain,dist to run (default all three)
#   EXACTONCE_MODEL_SHRINK_SECONDS  time to shorten each new failure (default 120)
#   EXACTONCE_MODEL_DRAIN_WAIT   seconds a drain waits for the workers (default 30)
#
# The long run, thousands of steps on random seeds:
#   EXACTONCE_MODEL_SEEDS=random,random EXACTONCE_MODEL_STEPS=2000 \
#     EXACTONCE_MODEL_DIST_STEPS=200 PG_TEST_TIMEOUT_DEFAULT=300 \
#     bash test/tap.sh /tmp/eo-model test/t/027_model.pl

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use List::Util qw(first max min sum0);
use ExactonceTest;
use ExactonceModel;

my $db = 'postgres';
my @seeds = map { $_ eq 'random' ? int(rand(2**31)) : $_ }
  split /,/, ($ENV{EXACTONCE_MODEL_SEEDS} // '1,2,293');
my $steps = $ENV{EXACTONCE_MODEL_STEPS} // 100;
my $dist_steps = $ENV{EXACTONCE_MODEL_DIST_STEPS} // 20;
my $dist_seeds = $ENV{EXACTONCE_MODEL_DIST_SEEDS} // 1;
my $shrink_seconds = $ENV{EXACTONCE_MODEL_SHRINK_SECONDS} // 120;
my %clusters = map { $_ => 1 } split /,/, ($ENV{EXACTONCE_MODEL_CLUSTERS} // 'preload,plain,dist');
my $timeout = $PostgreSQL::Test::Utils::timeout_default;
# how long a drain waits for the workers
my $drain_wait = min($timeout, $ENV{EXACTONCE_MODEL_DRAIN_WAIT} // 30);
# while shortening, only the last step of a sequence is checked
our $quick = 0;

my $MODEL_DDL = q{
CREATE SCHEMA model;
CREATE TABLE model.live (key text, version bigint, value numeric, region text, desk text,
	book text, window_start text, deleted boolean, event_time timestamptz, qty numeric,
	fee numeric, cpty text);
CREATE TABLE model.readings (LIKE model.live);
CREATE TABLE model.dead (LIKE model.live, reason text);
CREATE TABLE model.mirror (level int, cell text[], total numeric, keys bigint, PRIMARY KEY (level, cell));
CREATE TABLE model.feed_seqs (seq bigint);
};

# sql(node, script): run a script, stopping at its first error; returns
# { ok, out } or { ok => 0, state => SQLSTATE, msg, line => the script's
# line that failed }
sub sql
{
	my ($node, $script) = @_;
	my ($out, $err, $timed_out) = ('', '', 0);
	my $prefix = "\\set VERBOSITY verbose\nSET client_min_messages = warning;\n";
	$node->psql($db, $prefix . $script,
		stdout => \$out, stderr => \$err, on_error_stop => 1,
		timeout => $timeout, timed_out => \$timed_out);
	return { ok => 0, state => 'timeout', msg => "no answer in $timeout s" } if $timed_out;
	if ($err =~ /^(?:psql:[^:]*:(\d+): )?ERROR:\s+([0-9A-Z]{5}):\s*(.*)$/m)
	{
		my ($line, $state, $msg) = ($1, $2, $3);
		$line -= 2 if defined $line;
		my $stmt = defined $line ? (split /\n/, $script)[ $line - 1 ] : undef;
		$msg .= " (in: " . substr($stmt, 0, 160) . ')' if defined $stmt;
		return { ok => 0, state => $state, msg => $msg, out => $out, line => $line };
	}
	return { ok => 0, state => 'lost', msg => $err }
	  if $err =~ /FATAL|PANIC|could not connect|server closed the connection|connection to server/;
	return { ok => 1, out => $out };
}

# labeled(output): the "label|value" lines of a script as a hash
sub labeled
{
	my %h;
	for my $line (split /\n/, $_[0] // '')
	{
		my ($k, $v) = split /\|/, $line, 2;
		$h{$k} = $v // '' if defined $k && $k ne '';
	}
	return \%h;
}

sub fail_with
{
	my ($sig, $detail) = @_;
	return { fail => { sig => $sig, detail => $detail } };
}

# error(what, result): a failure for an error no one expected
sub error
{
	my ($what, $r) = @_;
	my $kind = !defined $r->{state} ? 'no SQLSTATE'
	  : $r->{state} =~ /^XX/ ? 'an internal error'
	  : $r->{state} !~ /^[0-9A-Z]{5}$/ ? 'no SQLSTATE'
	  : 'not a documented refusal';
	return fail_with("$what: error " . ($r->{state} // '?'), "$kind: " . ($r->{msg} // ''));
}

# refused(what, result, expected): undef if the call was refused with the
# expected SQLSTATE, a failure otherwise
sub refused
{
	my ($what, $r, $expect) = @_;
	return fail_with("$what: not refused", "expected SQLSTATE $expect, it succeeded") if $r->{ok};
	return fail_with("$what: refused with $r->{state}",
		"expected SQLSTATE $expect, got $r->{state}: $r->{msg}")
	  if $r->{state} ne $expect;
	return undef;
}

# diff(label, actual, expected): a query that returns label and the rows
# of each query that are not in the other ('' when they agree)
sub diff
{
	my ($label, $a, $b) = @_;
	return qq{SELECT '$label', coalesce(string_agg(x, ' ; '), '') FROM (
	SELECT 'pipeline has ' || d::text AS x FROM (SELECT * FROM ($a) a EXCEPT ALL SELECT * FROM ($b) b) d
	UNION ALL SELECT 'model has ' || d::text FROM (SELECT * FROM ($b) b EXCEPT ALL SELECT * FROM ($a) a) d) x;
};
}

# consumer_sql(M, max): the model's consumer reads up to max changes of the
# feed and keeps each cell's last change in model.mirror
sub consumer_sql
{
	my ($M, $max) = @_;
	return qq{
WITH r AS MATERIALIZED (SELECT * FROM exactonce.feed_read('$M->{name}', 'model', $max)),
	s AS (INSERT INTO model.feed_seqs SELECT seq FROM r)
INSERT INTO model.mirror SELECT DISTINCT ON (level, cell) level, cell, new_total, new_keys FROM r
	ORDER BY level, cell, seq DESC
ON CONFLICT (level, cell) DO UPDATE SET total = excluded.total, keys = excluded.keys;
DELETE FROM model.mirror WHERE keys = 0;
};
}

# check_sql(M): the queries of every check of a single-server pipeline
sub check_sql
{
	my ($M) = @_;
	my $n = $M->{name};
	my $cfg = $M->{cfg};
	my @cd = model_cell_dims($M);
	my $dims = join('', map { "$_, " } @{ $cfg->{dims} });
	my $extra = join('', map { ", $_" } @{ $cfg->{measures} }, @{ $cfg->{distincts} });
	my $sql = model_sync_sql($M);
	$sql .= diff('aggregates', 'SELECT ' . join(', ', model_agg_cols($M)) . " FROM $n.aggregates",
		model_oracle_sql($M));
	for my $v (@{ $M->{views} })
	{
		$sql .= diff("view $v->{vname}",
			'SELECT ' . join(', ', model_view_cols($M, $v)) . " FROM $n.$v->{vname}",
			model_view_oracle_sql($M, $v));
	}
	$sql .= qq{SELECT 'counters', concat_ws(',', ingested, dead_lettered,
	ingested = applied + duplicates + stale + dead_lettered, paused, shards,
	coalesce(retention_horizon::text, '-'), feed, array_to_string(views, ' '),
	coalesce(queued, 0), staged)
FROM exactonce.pipelines WHERE name = '$n';
};
	$sql .= diff('dead letters',
		qq{SELECT key COLLATE "default", version, value, ${dims}deleted, event_time$extra,
			split_part(reason, ':', 1) FROM $n.dead_letters},
		"SELECT key, version, value, ${dims}deleted, event_time$extra, reason FROM model.dead");
	if ($cfg->{mode} eq 'latest')
	{
		$sql .= diff('state',
			qq{SELECT key COLLATE "default", version, value, ${dims}deleted$extra FROM $n.state},
			"SELECT key, version, value, ${dims}deleted$extra FROM model.live");
	}
	else
	{
		$sql .= diff('state',
			qq{SELECT key COLLATE "default", version, total, events, first_event_time, last_event_time
			FROM $n.state},
			q{SELECT key, max(version), sum(value), count(*), min(event_time), max(event_time)
			FROM model.readings GROUP BY key});
	}
	$sql .= qq{SELECT 'verify', coalesce(string_agg(item || ' ' || coalesce(cell, '') || ': '
	|| replace(coalesce(detail, ''), E'\\n', ' '), ' ; '), '') FROM exactonce.verify('$n') WHERE NOT ok;
};
	if ($M->{feed})
	{
		my $c = join(', ', @cd);
		my $cs = join('', map { ", $_" } @cd);
		$sql .= consumer_sql($M, 1000000);
		$sql .= diff('feed: last change of each cell',
			"SELECT level$cs, new_total, new_keys FROM (SELECT DISTINCT ON (level$cs) * FROM $n.feed
			 ORDER BY level$cs, seq DESC) l WHERE new_keys <> 0",
			"SELECT level$cs, total, keys FROM $n.aggregates");
		$sql .= diff('feed: sum of the changes of each cell',
			"SELECT level$cs, sum(new_total - old_total), sum(new_keys - old_keys) FROM $n.feed
			 GROUP BY level$cs HAVING sum(new_keys - old_keys) <> 0 OR sum(new_total - old_total) <> 0",
			"SELECT level$cs, total, keys FROM $n.aggregates");
		$sql .= qq{SELECT 'feed: old values', coalesce(string_agg(seq::text, ','), '') FROM (
	SELECT seq, old_total, old_keys, lag(new_total, 1, 0::numeric) OVER w AS t, lag(new_keys, 1, 0::bigint) OVER w AS k
	FROM $n.feed WINDOW w AS (PARTITION BY level$cs ORDER BY seq)) f
WHERE old_total <> t OR old_keys <> k;
};
		$sql .= diff('feed: the consumer mirror', 'SELECT level, cell, total, keys FROM model.mirror',
			"SELECT level, ARRAY[$c]::text[], total, keys FROM $n.aggregates");
		# the feed keeps what the consumer has not read; below its position
		# each cell's changes are folded into the last (feed.c)
		$sql .= diff('feed: changes read once', 'SELECT seq FROM model.feed_seqs',
			'SELECT DISTINCT seq FROM model.feed_seqs');
		$sql .= qq{SELECT 'feed: changes never read', coalesce(string_agg(seq::text, ','), '') FROM (
	SELECT seq FROM $n.feed EXCEPT SELECT seq FROM model.feed_seqs) f;
};
	}
	if ($cfg->{window})
	{
		my %ws = map { (model_wstart($M, $_) => 1) } @{ $M->{readings} };
		my @rows = map {
			"($_, " . ((defined $M->{wm} && $_ + $cfg->{window} + $cfg->{lateness} <= $M->{wm}) ? 'true' : 'false')
			  . ')'
		} sort keys %ws;
		$sql .= diff('windows: final',
			"SELECT DISTINCT extract(epoch FROM window_start)::bigint, final FROM $n.windows",
			@rows ? 'VALUES ' . join(', ', @rows) : 'SELECT NULL::bigint, NULL::boolean WHERE false');
	}
	return $sql;
}

# expected_counters(M): what exactonce.pipelines must say
sub expected_counters
{
	my ($M) = @_;
	return join(',',
		$M->{ingested}, $M->{dead_count}, 't', ($M->{paused} ? 't' : 'f'), $M->{shards},
		($M->{has_h} ? $M->{h} : '-'), ($M->{feed} ? 't' : 'f'),
		join(' ', sort map { $_->{vname} } @{ $M->{views} }), 0, 0);
}

# finish(E, M, op, pending, pre, validate): in one script, the step's own
# statements pre (outputs labeled "step ..."), a drain (flush, or
# wait_applied for the workers), then every check; validate(outputs)
# judges what the step's statements returned
sub finish
{
	my ($E, $M, $op, $pending, $pre, $validate) = @_;
	return dist_finish(@_) if $E->{dist};
	my $n = $M->{name};
	my $sync = !$E->{preload} || $M->{paused};
	my $drain = $sync
	  ? "SELECT 'flushed', exactonce.flush('$n');\n"
	  : "SELECT exactonce.wait_applied('$n', '$drain_wait s');\n";
	$pre //= '';
	my $r = sql($E->{node}, $pre . $drain . ($quick ? '' : check_sql($M)));
	if (!$r->{ok})
	{
		my $in_pre = defined $r->{line} && $r->{line} <= ($pre =~ tr/\n//);
		if (($r->{state} // '') eq 'EO003')
		{
			# why the workers did not apply them
			my $e = sql($E->{node}, "SELECT last_error FROM exactonce.pipelines WHERE name = '$n'");
			$r->{msg} .= "; its last_error: " . ($e->{out} // '?');
		}
		return error($in_pre ? $op : 'drain and check', $r);
	}
	return {} if $quick;
	my $got = labeled($r->{out});
	if ($validate)
	{
		my $f = $validate->($got);
		return $f if $f;
	}
	return fail_with('flush: events taken', "the drain's flush took $got->{flushed}, $pending were queued")
	  if $sync && $got->{flushed} != $pending;
	my %want = (counters => expected_counters($M));
	for my $label (sort keys %$got)
	{
		next if $label eq 'flushed' || $label =~ /^step /;
		my $w = $want{$label} // '';
		return fail_with("check $label", $label eq 'counters'
			  ? "exactonce.pipelines says $got->{$label}; the model, $w "
			  . '(ingested, dead_lettered, identity, paused, shards, retention_horizon, feed, views, queued, staged)'
			  : $got->{$label})
		  if $got->{$label} ne $w;
	}
	return fail_with('check counters', 'no row in exactonce.pipelines') unless exists $got->{counters};
	return {};
}

# queue_sql(M, events, how, txns): the statements that queue events, or
# undef and why if the model cannot tell what the drain does with them; the
# model takes them in
sub queue_sql
{
	my ($M, $evs, $how, $txns) = @_;
	return ('') unless @$evs;
	my $res = model_classify($M, $evs);
	return (undef, $res->{amb}) if defined $res->{amb};
	my @parts = ($txns // 1) > 1 && @$evs > 1
	  ? ([ @$evs[ 0 .. $#$evs / 2 ] ], [ @$evs[ $#$evs / 2 + 1 .. $#$evs ] ]) : ($evs);
	$M->{ingested} += @$evs;
	$M->{dead_count} += model_commit($M, $evs, $res);
	remember($M, $evs);
	return (join('', map { model_insert_sql($M, $_, $how) } @parts));
}

# restart(node, how): a fast restart, or -m immediate and a start
sub restart
{
	my ($node, $how) = @_;
	$node->stop($how eq 'immediate' ? 'immediate' : 'fast');
	return $node->start(fail_ok => 1);
}

# exec_step(E, Mref, step, name): apply one step to the pipeline and the
# model, then drain and check; returns {}, { end => 1 } (the pipeline is
# gone), { invalid => why } (the model cannot tell what the step does) or
# { fail => { sig, detail } }
sub exec_step
{
	my ($E, $Mref, $st, $name) = @_;
	my $node = $E->{node};
	my $op = $st->{op};
	my ($f, $r);
	if ($op eq 'create')
	{
		for my $b (@{ $st->{bad} })
		{
			$f = refused('create_pipeline (bad declaration)',
				sql($node, create_sql("${name}_bad", $b->{cfg})), $b->{expect});
			return $f if $f;
		}
		$$Mref = model_new($st->{cfg}, $name);
		return finish($E, $$Mref, 'create_pipeline', 0,
			"DELETE FROM model.mirror; DELETE FROM model.feed_seqs;\n" . create_sql($name, $st->{cfg}) . ";\n");
	}
	my $M = $$Mref;
	my $n = $M->{name};
	my ($pre, $validate, $pending) = ('', undef, 0);
	my $determined = !$E->{preload} || $M->{paused};
	# queue(events, how, txns): queue events in the step's statements
	my $queue = sub {
		my ($evs, $how, $txns) = @_;
		# a shortened sequence leaves out what the events of a step were sent
		# after; those whose fate its batches would then decide are left out
		@$evs = @{ model_unambiguous($M, $evs) } if $evs;
		my ($sql, $amb) = queue_sql($M, $evs // [], $how, $txns);
		return $amb if defined $amb;
		$pre .= $sql;
		$pending += @{ $evs // [] };
		return undef;
	};
	# run(what, script): run the step's statements so far and script now
	my $run = sub {
		my ($what, $script) = @_;
		my $x = sql($node, $pre . $script);
		$pre = '';
		return $x;
	};
	my $amb;
	if ($op eq 'insert')
	{
		$amb = $queue->($st->{events}, $st->{how}, $st->{txns});
	}
	elsif ($op eq 'flush' && $st->{rr})
	{
		$f = refused('flush in REPEATABLE READ',
			sql($node, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT exactonce.flush('$n'); COMMIT;"), '25001');
	}
	elsif ($op eq 'flush')
	{
		$amb = $queue->($st->{events});
		my $p = $pending;
		$pre .= "SELECT 'step flush', exactonce.flush('$n');\n";
		$validate = sub {
			return fail_with('flush: events taken', "flush took $_[0]{'step flush'}, $p were queued")
			  if $determined && $_[0]{'step flush'} != $p;
			return undef;
		};
		$pending = 0;
	}
	elsif ($op eq 'pause' || $op eq 'resume')
	{
		$pre .= "SELECT exactonce.$op('$n');\n";
		$M->{paused} = $op eq 'pause' ? 1 : 0;
	}
	elsif ($op eq 'set_shards')
	{
		$amb = $queue->($st->{events});
		my $p = $pending;
		$pre .= "SELECT 'step set_shards', exactonce.set_shards('$n', $st->{n});\n";
		$validate = sub {
			return fail_with('set_shards: events drained', "set_shards drained $_[0]{'step set_shards'}, $p were queued")
			  if $determined && $_[0]{'step set_shards'} != $p;
			return undef;
		};
		$M->{shards} = $st->{n};
		$pending = 0;
	}
	elsif ($op eq 'prune')
	{
		$pre .= "SELECT 'step prune', horizon || ',' || forgotten || ',' || dead_letters FROM exactonce.prune('$n', "
		  . $st->{below} . ($st->{dl} ? ", dead_letters_older_than => '0 seconds'" : '') . ");\n";
		my $want = join(',', model_prune($M, $st->{below}, $st->{dl}));
		$validate = sub {
			return fail_with('prune: result',
				"prune returned (horizon, forgotten, dead_letters) $_[0]{'step prune'}; the model, $want")
			  if $_[0]{'step prune'} ne $want;
			return undef;
		};
	}
	elsif ($op eq 'rebuild' && $M->{cfg}{mode} ne 'latest')
	{
		$f = refused('rebuild in accumulate mode', sql($node, "SELECT exactonce.rebuild('$n')"), '0A000');
	}
	elsif ($op eq 'rebuild' || $op eq 'damage')
	{
		return { invalid => 'damage needs latest mode' } unless $M->{cfg}{mode} eq 'latest';
		$pre .= model_sync_sql($M) . "SELECT 'step cells', (" . model_cells_sql($M) . ");\n";
		$pre .= "UPDATE $n.aggregates SET total = total + 1, keys = keys + 1 WHERE ctid = (SELECT min(ctid) FROM $n.aggregates);\n"
		  . "SELECT 'step damaged', count(*) FROM exactonce.verify('$n') WHERE NOT ok;\n"
		  if $op eq 'damage';
		$pre .= "SELECT 'step rebuilt', exactonce.rebuild('$n');\n";
		$validate = sub {
			my ($got) = @_;
			return fail_with('verify: damage unseen',
				"verify reported $got->{'step damaged'} failing checks after a cell of $got->{'step cells'} was damaged")
			  if $op eq 'damage' && ($got->{'step damaged'} > 0) != ($got->{'step cells'} > 0);
			return fail_with('rebuild: result',
				"rebuild returned $got->{'step rebuilt'}; the model has $got->{'step cells'} cells")
			  if $got->{'step rebuilt'} ne $got->{'step cells'};
			return undef;
		};
	}
	elsif ($op eq 'replay')
	{
		if ($st->{fix})
		{
			$pre .= "UPDATE $n.dead_letters SET value = 7 WHERE value = 'NaN';\n"
			  . join('', map { "UPDATE $n.dead_letters SET $_ = 1 WHERE $_ = 'NaN';\n" } @{ $M->{cfg}{measures} });
		}
		my @dead = map { { %$_, ev => ($st->{fix} ? model_fix_event($_->{ev}) : $_->{ev}) } } @{ $M->{dead} };
		my @pick = model_replay_pick({ %$M, dead => \@dead }, $st->{filter});
		my @evs = map { $dead[$_]{ev} } @pick;
		my $res = model_classify($M, \@evs);
		return { invalid => $res->{amb} } if defined $res->{amb};
		my $filter = defined $st->{filter} ? lit(filter_sql($st->{filter})) : 'NULL';
		$pre .= "SELECT 'step replay', replayed || ',' || dead_lettered || ',' || skipped || ',' || (applied + duplicates + stale)"
		  . " FROM exactonce.replay_dead_letters('$n', $filter);\n";
		my %picked = map { $_ => 1 } @pick;
		$M->{dead} = [ map { $dead[$_] } grep { !$picked{$_} } 0 .. $#dead ];
		my $redead = model_commit($M, \@evs, $res);
		$M->{dead_count} += $redead - @pick;
		my $want = join(',', scalar(@pick), $redead, 0, @pick - $redead);
		$validate = sub {
			return fail_with('replay_dead_letters: result',
				"it returned (replayed, dead_lettered, skipped, applied + duplicates + stale) $_[0]{'step replay'}; the model, $want")
			  if $_[0]{'step replay'} ne $want;
			return undef;
		};
	}
	elsif ($op eq 'set_feed')
	{
		# turning the feed on (or off) again changes nothing but notify
		$pre .= "SELECT exactonce.set_feed('$n', " . ($st->{on} ? 'true' : 'false')
		  . ", notify => " . ($st->{notify} ? 'true' : 'false') . ");\n";
		$pre .= "DELETE FROM model.mirror; DELETE FROM model.feed_seqs;\n" if $st->{on} != $M->{feed};
		$M->{feed} = $st->{on};
	}
	elsif ($op eq 'feed_read' && !$M->{feed})
	{
		$f = refused('feed_read without a feed', sql($node, "SELECT * FROM exactonce.feed_read('$n', 'model')"), '55000');
	}
	elsif ($op eq 'feed_read')
	{
		$pre .= $st->{rollback}
		  ? "BEGIN;\nSELECT count(*) FROM exactonce.feed_read('$n', 'model', $st->{max});\nROLLBACK;\n"
		  : consumer_sql($M, $st->{max});
	}
	elsif ($op eq 'create_view')
	{
		my $exists = grep { $_->{vname} eq $st->{vname} } @{ $M->{views} };
		my $expect = $exists ? '42P07' : (($st->{expect} // '') eq '42P07' ? undef : $st->{expect});
		my $call = "SELECT exactonce.create_view('$n', '$st->{vname}', ARRAY["
		  . join(', ', map { lit($_) } @{ $st->{keys} }) . ']::text[], '
		  . (defined $st->{filter} ? lit($st->{filter}) : 'NULL') . ");\n";
		if (defined $expect)
		{
			$f = refused('create_view', sql($node, $call), $expect);
		}
		else
		{
			$pre .= $call;
			push @{ $M->{views} }, $st;
		}
	}
	elsif ($op eq 'wait_applied' && $st->{variant} =~ /transaction/)
	{
		return { invalid => 'needs the workers' } unless $E->{preload};
		$f = refused('wait_applied in a transaction that inserted',
			sql($node, "BEGIN;\n" . model_insert_sql($M, $st->{events}, 'insert')
				  . "SELECT exactonce.wait_applied('$n', '5 s');\nROLLBACK;"), '25001');
	}
	elsif ($op eq 'wait_applied')
	{
		$amb = $queue->($st->{events});
		my $call = "SELECT exactonce.wait_applied('$n', '" . ($M->{paused} ? '300 ms' : "$timeout s") . "');\n";
		if (!$E->{preload})
		{
			$f = refused('wait_applied without the workers', $run->('wait_applied', $call), '55000');
		}
		elsif ($M->{paused} && $pending > 0)
		{
			$f = refused('wait_applied on a paused pipeline', $run->('wait_applied', $call), 'EO003');
		}
		else
		{
			$pre .= $call;
		}
	}
	elsif ($op eq 'drop')
	{
		if ($st->{queued})
		{
			if ($E->{preload} && !$M->{paused})
			{
				$pre .= "SELECT exactonce.pause('$n');\n";
				$M->{paused} = 1;
			}
			$amb = $queue->($st->{events});
			return { invalid => $amb } if defined $amb;
			$f = refused('drop_pipeline with events queued', $run->('drop', "SELECT exactonce.drop_pipeline('$n');\n"), '55000');
			return $f if $f;
		}
		$r = sql($node, "SELECT exactonce.drop_pipeline('$n'" . ($st->{queued} ? ', force => true' : '') . ");\n"
			  . "SELECT 'left', count(*) FROM exactonce.pipelines WHERE name = '$n';\n");
		return error('drop_pipeline', $r) unless $r->{ok};
		return fail_with('drop_pipeline: still listed', 'exactonce.pipelines lists it')
		  if labeled($r->{out})->{left} ne '0';
		$$Mref = undef;
		return { end => 1 };
	}
	elsif ($op eq 'restart')
	{
		$amb = $queue->($st->{events});
		return { invalid => $amb } if defined $amb;
		if ($pre ne '')
		{
			$r = $run->('insert', '');
			return error('insert before the restart', $r) unless $r->{ok};
		}
		return fail_with('restart: the server did not start', $node->logfile) unless restart($node, $st->{how});
	}
	elsif ($op eq 'refuse')
	{
		$f = refused("refusal of '$st->{sql}'", sql($node, $st->{sql}), $st->{expect});
	}
	elsif ($op eq 'move' || $op eq 'node_crash')
	{
		return dist_step($E, $M, $st);
	}
	else
	{
		die "unknown step $op";
	}
	return { invalid => $amb } if defined $amb;
	return $f if $f;
	return finish($E, $M, $op, $pending, $pre, $validate);
}

#
# The distributed pipeline: a coordinator and two nodes.
#

sub overlap
{
	my ($m1, $r1, $m2, $r2) = @_;
	my $m = min($m1, $m2);
	return $r1 % $m == $r2 % $m;
}

# ranges_sql(M, server): a predicate on key: the ranges the coordinator
# routes to server
sub ranges_sql
{
	my ($M, $server) = @_;
	my @p = grep { $_->[2] eq $server } @{ $M->{parts} };
	return 'false' unless @p;
	return join(' OR ', map { "exactonce.key_bucket(key, $_->[0]) = $_->[1]" } @p);
}

# dist_step(E, M, step): move_keys and a node's crash
sub dist_step
{
	my ($E, $M, $st) = @_;
	my $n = $M->{name};
	my $coord = $E->{node};
	if ($st->{op} eq 'node_crash')
	{
		@{ $st->{events} } = @{ model_unambiguous($M, $st->{events}) };
		my ($sql, $amb) = queue_sql($M, $st->{events});
		return { invalid => $amb } if defined $amb;
		if ($sql ne '')
		{
			my $r = sql($coord, $sql);
			return error('insert before the node stops', $r) unless $r->{ok};
		}
		my $node = $E->{nodes}{ $st->{node} };
		return fail_with('node restart: the server did not start', $node->logfile)
		  unless restart($node, 'immediate');
		return dist_finish($E, $M, 'node_crash');
	}
	# the partition that holds the range, if any, and what must happen
	my ($m, $r, $to) = @$st{qw(m r server)};
	my $holder = first { $_->[0] <= $m && $m % $_->[0] == 0 && $r % $_->[0] == $_->[1] } @{ $M->{parts} };
	my $expect;
	if (!$holder || $holder->[2] eq $to)
	{
		$expect = '22023';    # no partition holds the range, or it is there already
	}
	elsif (first { my ($gm, $gr) = split /,/; overlap($gm, $gr, $m, $r) && "$gm,$gr" ne "$m,$r" } keys %{ $M->{gave}{$to} })
	{
		$expect = '0A000';    # overlaps a range the server gave away
	}
	my $call = "SELECT 'step moved', exactonce.move_keys('$n', $m, $r, '$to');\n";
	if (defined $expect)
	{
		my $f = refused("move_keys($m, $r, $to)", sql($coord, $call), $expect);
		return $f if $f;
		return dist_finish($E, $M, 'move_keys');
	}
	my $pre = model_sync_sql($M)
	  . "SELECT 'step expect', count(*) FROM (SELECT key FROM model.live UNION SELECT key FROM model.readings) k"
	  . " WHERE exactonce.key_bucket(key, $m) = $r;\n" . $call;
	my ($pm, $pr, $from) = @$holder;
	my @pieces = map { [ $m, $pr + $_ * $pm, ($pr + $_ * $pm == $r ? $to : $from) ] } 0 .. $m / $pm - 1;
	$M->{parts} = [ (grep { $_ != $holder } @{ $M->{parts} }), @pieces ];
	$M->{gave}{$from}{"$m,$r"} = 1;
	delete $M->{gave}{$to}{"$m,$r"};
	return dist_finish($E, $M, "move_keys($m, $r, $to)", 0, $pre, sub {
		return fail_with('move_keys: keys moved',
			"move_keys moved $_[0]{'step moved'} keys; the model has $_[0]{'step expect'} in the range")
		  if $_[0]{'step moved'} ne $_[0]{'step expect'};
		return undef;
	});
}

# dist_finish(E, M, op, pending, pre, validate): the step's statements, a
# flush at the coordinator, then the checks of the coordinator and of each
# node
sub dist_finish
{
	my ($E, $M, $op, $pending, $pre, $validate) = @_;
	my $n = $M->{name};
	$pre //= '';
	my $r = sql($E->{node}, $pre . "SELECT exactonce.flush('$n');\n" . ($quick ? '' : model_sync_sql($M)
		  . diff('aggregates', 'SELECT ' . join(', ', model_agg_cols($M)) . " FROM $n.aggregates", model_oracle_sql($M))
		  . "SELECT 'nodes', concat_ws(',', sum(ingested), sum(dead_lettered),
	bool_and(ingested = applied + duplicates + stale + dead_lettered), bool_and(paused), bool_or(paused), sum(queued))
FROM $n.nodes;\n"));
	if (!$r->{ok})
	{
		my $in_pre = defined $r->{line} && $r->{line} <= ($pre =~ tr/\n//);
		return error($in_pre ? $op : 'flush and check at the coordinator', $r);
	}
	return {} if $quick;
	my $got = labeled($r->{out});
	if ($validate)
	{
		my $f = $validate->($got);
		return $f if $f;
	}
	return fail_with('check aggregates', $got->{aggregates}) if $got->{aggregates} ne '';
	my $p = $M->{paused} ? 't' : 'f';
	my $want = "$M->{ingested},$M->{dead_count},t,$p,$p,0";
	return fail_with('check counters', "the nodes say $got->{nodes}; the model, $want "
		  . '(ingested, dead_lettered, identity, paused, paused, queued)')
	  if $got->{nodes} ne $want;
	my $held = 0;
	for my $server (sort keys %{ $E->{nodes} })
	{
		$r = sql($E->{nodes}{$server}, qq{
SELECT 'verify', coalesce(string_agg(item || ' ' || coalesce(cell, '') || ': '
	|| replace(coalesce(detail, ''), E'\\n', ' '), ' ; '), '') FROM exactonce.verify('$n') WHERE NOT ok;
SELECT 'misplaced', coalesce(string_agg(key, ' '), '') FROM $n.state WHERE NOT (} . ranges_sql($M, $server) . qq{);
SELECT 'held', count(*) FROM $n.state;
SELECT 'prepared', count(*) FROM pg_prepared_xacts;
});
		return error("checks on $server", $r) unless $r->{ok};
		$got = labeled($r->{out});
		return fail_with('check verify', "on $server: $got->{verify}") if $got->{verify} ne '';
		return fail_with('check placement', "$server holds keys of ranges it does not have: $got->{misplaced}")
		  if $got->{misplaced} ne '';
		return fail_with('check prepared transactions', "$server has $got->{prepared}") if $got->{prepared} ne '0';
		$held += $got->{held};
	}
	my $keys = model_key_count($M);
	return fail_with('check keys', "the nodes hold $held keys; the model has $keys") if $held != $keys;
	return {};
}

#
# Running sequences, and shortening the ones that fail.
#

my $replays = 0;

# forget(E, name): drop a pipeline, whatever its state
sub forget
{
	my ($E, $name) = @_;
	sql($E->{node}, "SELECT exactonce.drop_pipeline('$name', force => true) FROM exactonce.pipelines WHERE name = '$name'")
	  unless $E->{dist};
	sql($E->{node}, "SELECT exactonce.drop_pipeline('$name', force => true) FROM exactonce.distributed_pipeline WHERE name = '$name'")
	  if $E->{dist};
	return;
}

# replay(E, steps): run steps (a create first) on a fresh pipeline; returns
# the first failure { sig, index }, { invalid }, or {}
sub replay
{
	my ($E, $seq) = @_;
	my $name = "$E->{tag}s" . ++$replays;
	my $M;
	my $out = {};
	# steps may lose events they no longer can take: copies
	$seq = [ map { { %$_, ($_->{events} ? (events => [ @{ $_->{events} } ]) : ()) } } @$seq ];
	for my $i (0 .. $#$seq)
	{
		local $quick = $i < $#$seq;
		my $r = exec_step($E, \$M, $seq->[$i], $name);
		print "  replay $name step $i: " . ($r->{fail} ? "FAIL $r->{fail}{sig}" : $r->{invalid} ? "invalid: $r->{invalid}" : 'ok') . "\n";
		if ($r->{fail})
		{
			$out = { %{ $r->{fail} }, index => $i };
			last;
		}
		if ($r->{invalid} || ($r->{end} && $i < $#$seq))
		{
			$out = { invalid => $r->{invalid} // 'ended' };
			last;
		}
	}
	forget($E, $name);
	$out->{seq} = $seq;
	return $out;
}

# shrink(E, seq, sig): a shorter sequence that fails with sig, by delta
# debugging within the time allowed; undef if it fails no more on a fresh
# pipeline
sub shrink
{
	my ($E, $seq, $sig) = @_;
	my $deadline = time + $shrink_seconds;
	my ($create, @body) = @$seq;
	my $tries = 0;
	my $fails = sub {
		my ($b) = @_;
		$tries++;
		my $r = replay($E, [ $create, @$b ]);
		return undef unless defined $r->{sig} && $r->{sig} eq $sig;
		# the steps as they ran
		@$b = @{ $r->{seq} }[ 1 .. $#{ $r->{seq} } ];
		return $r->{index};
	};
	# most failures need only the last steps: the shortest suffix that fails
	my $at;
	for (my $k = 1; !defined $at; $k *= 2)
	{
		my @cand = $k < @body ? @body[ @body - $k .. $#body ] : @body;
		$at = $fails->(\@cand);
		if (defined $at)
		{
			@body = $at >= 1 ? @cand[ 0 .. $at - 1 ] : ();
		}
		last if $k >= @body || time > $deadline;
	}
	return (undef, $tries, time > $deadline) unless defined $at;
	my $chunks = 2;
	while (@body >= 1 && time < $deadline)
	{
		$chunks = min($chunks, scalar @body);
		my $size = int((@body + $chunks - 1) / $chunks);
		my $reduced = 0;
		for (my $c = 0; $c < @body && time < $deadline; $c += $size)
		{
			my @cand = @body;
			splice(@cand, $c, $size);
			my $i = $fails->(\@cand);
			next unless defined $i;
			@body = @cand[ 0 .. $i - 1 ];
			$chunks = max($chunks - 1, 2);
			$reduced = 1;
			last;
		}
		next if $reduced;
		last if $chunks >= @body;
		$chunks = min($chunks * 2, scalar @body);
	}
	return ([ $create, @body ], $tries);
}

# show(seq): the steps, one per line
sub show
{
	my ($seq) = @_;
	my $M = model_new($seq->[0]{cfg}, 'p');
	my $i = 0;
	return join('', map { sprintf("  %3d. %s\n", $i++, model_describe($M, $_)) } @$seq);
}

# run_seed(E, seed, steps): a random sequence of steps on E; returns the
# failures
sub run_seed
{
	my ($E, $seed, $nsteps) = @_;
	srand($seed);
	my $t0 = time;
	diag("$E->{label}: seed $seed, $nsteps steps");
	my ($M, @gen, @fails, %sigs);
	my ($gens, $name, $ran) = (0, undef, 0);
	for my $done (1 .. $nsteps)
	{
		$ran = $done;
		my $st;
		if (!$M)
		{
			$gens++;
			$name = "$E->{tag}${seed}_$gens" unless defined $name && rand() < 0.5;
			$st = gen_create($E->{dist});
			@gen = ();
		}
		else
		{
			$st = gen_step($M, $E);
		}
		push @gen, $st;
		my $ts = time;
		my $r = exec_step($E, \$M, $st, $name);
		printf "%s seed %s step %d (%s, %.2f s): ", $E->{tag}, $seed, $done, $name, time - $ts;
		print model_describe($M // model_new($gen[0]{cfg}, $name), $st)
		  . ' => ' . ($r->{fail} ? "FAIL $r->{fail}{sig}: $r->{fail}{detail}" : $r->{invalid} ? "invalid: $r->{invalid}" : 'ok') . "\n";
		if ($r->{invalid})
		{
			# the generator makes nothing the model cannot tell
			$r = fail_with('model: ambiguous step', $r->{invalid});
		}
		if ($r->{fail})
		{
			my $f = { %{ $r->{fail} }, seed => $seed, step => $done, seq => [@gen] };
			push @fails, $f;
			if (!$sigs{ $f->{sig} }++)
			{
				my $t = time;
				my ($short, $tries, $late) = shrink($E, $f->{seq}, $f->{sig});
				$f->{short} = $short;
				$f->{late} = $late;
				$f->{shrink} = sprintf('%d replays, %.0f s', $tries, time - $t);
			}
			forget($E, $name);
			($M, $name) = (undef, undef);
			last if @fails >= 50;
		}
		elsif ($r->{end})
		{
			$M = undef;
		}
	}
	$M = undef;
	forget($E, $name) if defined $name;
	my $secs = time - $t0;
	my $summary = sprintf('%s, seed %s: %d steps over %d pipelines in %.0f s', $E->{label}, $seed, $ran, $gens, $secs);
	ok(!@fails, $summary . (@fails ? ', ' . scalar(@fails) . ' failures' : ', every check held'));
	for my $f (@fails)
	{
		my $msg = "FAILURE at step $f->{step} (seed $f->{seed}, $E->{label}): $f->{sig}\n  $f->{detail}\n"
		  . "  again: EXACTONCE_MODEL_SEEDS=$f->{seed} EXACTONCE_MODEL_STEPS=$f->{step} EXACTONCE_MODEL_CLUSTERS=$E->{cluster}"
		  . ($E->{dist} ? " EXACTONCE_MODEL_DIST_STEPS=$f->{step}" : '') . "\n";
		if (exists $f->{short})
		{
			$msg .= "the sequence of its pipeline:\n" . show($f->{seq});
			$msg .= defined $f->{short}
			  ? "shortened ($f->{shrink}), it still fails so on a fresh pipeline:\n" . show($f->{short})
			  : $f->{late} ? "no shorter sequence failed so within the time allowed ($f->{shrink})\n"
			  : "on a fresh pipeline it does not fail so ($f->{shrink}): it needs what came before, or a race\n";
		}
		else
		{
			$msg .= "(the same failure as before, shortened above)\n";
		}
		diag($msg);
	}
	return \@fails;
}

# setup(node): the extension and the model's tables
sub setup
{
	my ($node) = @_;
	$node->safe_psql($db, "CREATE EXTENSION exactonce;\n$MODEL_DDL");
	return;
}

my $t_all = time;
my %failures;

for my $c ([ 'preload', 1, 'mw', 'preloaded (workers)' ], [ 'plain', 0, 'mf', 'not preloaded (flush)' ])
{
	next unless $clusters{ $c->[0] };
	my $node = eo_node("model_$c->[0]", preload => $c->[1]);
	setup($node);
	my $E = { node => $node, preload => $c->[1], tag => $c->[2], label => $c->[3], cluster => $c->[0] };
	for my $seed (@seeds)
	{
		push @{ $failures{ $E->{label} } }, @{ run_seed($E, $seed, $steps) };
	}
	$node->stop;
}

# distributed: a coordinator and two nodes, linked by postgres_fdw
if ($clusters{dist} && $dist_steps > 0 && $dist_seeds > 0)
{
	my $coord = eo_node('model_coordinator', preload => 0);
	my %nodes = (node1 => eo_node('model_node1'), node2 => eo_node('model_node2'));
	$nodes{$_}->safe_psql($db, 'CREATE EXTENSION exactonce') for sort keys %nodes;
	setup($coord);
	$coord->safe_psql($db, 'CREATE EXTENSION postgres_fdw');
	my $user = $coord->safe_psql($db, 'SELECT current_user');
	for my $server (sort keys %nodes)
	{
		$coord->safe_psql($db,
			"CREATE SERVER $server FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '"
			  . $nodes{$server}->host . "', port '" . $nodes{$server}->port . "', dbname '$db');
			 CREATE USER MAPPING FOR CURRENT_USER SERVER $server OPTIONS (user '$user')");
	}
	my $E = { node => $coord, nodes => \%nodes, dist => 1, preload => 0, tag => 'md', label => 'distributed',
		cluster => 'dist' };
	for my $seed (@seeds[ 0 .. min($dist_seeds, scalar @seeds) - 1 ])
	{
		push @{ $failures{distributed} }, @{ run_seed($E, $seed, $dist_steps) };
	}
}

my $total = sum0(map { scalar @$_ } values %failures);
diag(sprintf('%d failures in all, %.0f s', $total, time - $t_all));
for my $label (sort keys %failures)
{
	my %by;
	$by{ $_->{sig} }++ for @{ $failures{$label} };
	diag("  $label: $_ ($by{$_} times)") for sort keys %by;
}

done_testing();
