
# ExactonceModel: the model of test/t/027_model.pl, and its generator of
# random operations.
#
# The model is what the README promises, computed from the events as they
# were produced and never from the pipeline's tables: in latest mode each
# key's highest version (stale, duplicate and conflicting versions change
# nothing; a conflicting one is a dead letter), in accumulate mode every
# distinct (key, version) once, with the retention horizon of prune(), the
# watermark of event-time windows and the dead letters of each rule.  The
# aggregates the model expects are computed by PostgreSQL from the model's
# rows (GROUP BY GROUPING SETS over the live keys or the readings), so the
# oracle is plain SQL.
#
# Exactly once is exact whatever the batches a drain cuts, but some
# counters are not: a stale version sent with a newer one is "applied" when
# both land in one batch and "stale" when the newer one came first.  The
# model says only what every cut agrees on: the aggregates, state, the dead
# letters and their number.  An operation whose effect would depend on the
# cut (two contents of one version in one step, a conflicting duplicate sent
# with a newer version, a reading near the watermark, below and above the
# horizon for a key without state) is "ambiguous": the generator never
# makes one, and a shortened sequence that would is skipped.

package ExactonceModel;

use strict;
use warnings;

use Exporter 'import';
use POSIX qw(floor strftime);
use List::Util qw(max min shuffle first);

our @EXPORT = qw(model_new model_classify model_commit model_prune model_replay_pick
  model_fix_event model_cells_sql model_agg_cols model_oracle_sql model_sync_sql
  model_view_oracle_sql model_cell_dims model_insert_sql model_describe gen_config
  gen_step gen_create model_sig model_wstart model_key_count lit numlit filter_sql create_sql
  remember model_unambiguous model_view_cols);

# 2024-05-01 08:00:00 UTC: event times start here
our $BASE_TIME = 1714550400;

my @DIMS = ('region', 'desk', 'book');
my %DIM_VALUES = (
	region => [ 'EMEA', 'APAC', 'AMER' ],
	desk => [ 'd1', 'd2', 'd3' ],
	book => [ 'b1', 'b2' ]);
my @MEASURES = ('qty', 'fee');
my @CPTY = ('c1', 'c2', 'c3', 'c4');

# the columns of the model's tables (model.live, model.readings, model.dead)
our @MODEL_COLS = qw(key version value region desk book window_start deleted event_time qty fee cpty);

# lit(text): an SQL literal, NULL for undef
sub lit
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	$s =~ s/'/''/g;
	return "'$s'";
}

# numlit(text): a numeric literal that keeps its scale
sub numlit
{
	my ($s) = @_;
	return defined $s ? lit($s) . '::numeric' : 'NULL::numeric';
}

# norm(number): the number as NumericEq compares it (1.50 = 1.5, -0 = 0)
sub norm
{
	my ($s) = @_;
	return 'n' unless defined $s;
	return $s if $s eq 'NaN';
	my $neg = ($s =~ s/^-//);
	if ($s =~ /\./)
	{
		$s =~ s/0+$//;
		$s =~ s/\.$//;
	}
	$s =~ s/^0+(?=\d)//;
	$s = '0' if $s eq '';
	return ($neg && $s ne '0') ? "-$s" : $s;
}

# fmt_time(epoch): an event_time literal, in UTC
sub fmt_time
{
	return strftime('%Y-%m-%d %H:%M:%S+00', gmtime($_[0]));
}

# model_wstart(M, event): the start of the event's window (epoch)
sub model_wstart
{
	my ($M, $ev) = @_;
	my $w = $M->{cfg}{window};
	return floor($ev->{t} / $w) * $w;
}

sub wstart_text
{
	return strftime('%Y-%m-%dT%H:%M:%SZ', gmtime($_[0]));
}

# model_cell_dims(M): the dimensions of the cells: the window first, if any
sub model_cell_dims
{
	my ($M) = @_;
	return (($M->{cfg}{window} ? ('window_start') : ()), @{ $M->{cfg}{dims} });
}

# model_new(cfg, name): an empty pipeline
sub model_new
{
	my ($cfg, $name) = @_;
	return {
		cfg => $cfg,
		name => $name,
		st => {},          # latest: key => { v, ev } (tombstones too)
		seen => {},        # accumulate: key => { version => content }
		readings => [],    # accumulate: every applied reading
		dead => [],        # dead letters: { ev, reason }
		ingested => 0,
		dead_count => 0,
		has_h => 0,
		h => undef,
		wm => undef,       # windows: the watermark (epoch)
		paused => 0,
		shards => $cfg->{shards} // 2,
		feed => 0,
		views => [],
		nview => 0,
		# the generator's memory of what it sent
		hist => [],
		sentv => {},
		maxv => {},
		vclock => 10,
		clock => $BASE_TIME + 3600,
		nkeys => $cfg->{nkeys} // 10,
		# distributed: the coordinator's partitions and what each node gave away
		parts => [ [ 2, 0, 'node1' ], [ 2, 1, 'node2' ] ],
		gave => { node1 => {}, node2 => {} },
	};
}

# model_sig(M, event): an event's content, as the pipeline compares it
sub model_sig
{
	my ($M, $ev) = @_;
	my $cfg = $M->{cfg};
	return join("\x1f",
		norm($ev->{val}),
		($cfg->{window} ? (model_wstart($M, $ev)) : ()),
		(map { $ev->{dims}{$_} } @{ $cfg->{dims} }),
		($ev->{del} ? 't' : 'f'),
		(map { norm($ev->{m}{$_}) } @{ $cfg->{measures} }),
		(map { defined $ev->{c}{$_} ? "=$ev->{c}{$_}" : 'n' } @{ $cfg->{distincts} }));
}

# fault(M, event): why no state can take the event (its dead letter's
# reason), or undef; in StateEventFault's order
sub fault
{
	my ($M, $ev) = @_;
	return 'value is NaN' if $ev->{val} eq 'NaN';
	for my $m (@{ $M->{cfg}{measures} })
	{
		return "measure $m is NaN" if defined $ev->{m}{$m} && $ev->{m}{$m} eq 'NaN';
	}
	return 'tombstones (deleted = true) are not supported in accumulate mode'
	  if $ev->{del} && $M->{cfg}{mode} eq 'accumulate';
	return undef;
}

sub too_late
{
	my ($M, $ws, $wm) = @_;
	return defined $wm && $ws + $M->{cfg}{window} + $M->{cfg}{lateness} <= $wm;
}

# model_classify(M, events): what the pipeline must do with events taken in
# one drain, whatever its batches: { out => [ 'ok' | 'dead:reason' ], amb =>
# why it is ambiguous or undef, key => the key that makes it so, eff => the
# changes to commit }.  It changes nothing.
sub model_classify
{
	my ($M, $evs) = @_;
	my $cfg = $M->{cfg};
	my (@out, %bykey, $amb, $ambkey);
	my %eff = (st => {}, seen => [], readings => [], wm => $M->{wm});
	my $ambiguous = sub {
		my ($k, $why) = @_;
		($amb, $ambkey) = ($why, $k) unless defined $amb;
	};
	for my $i (0 .. $#$evs)
	{
		my $f = fault($M, $evs->[$i]);
		if (defined $f)
		{
			$out[$i] = "dead:$f";
			next;
		}
		push @{ $bykey{ $evs->[$i]{key} } }, $i;
	}
	# windows: the watermark as the drain starts, and the most it can reach
	my ($w0, $w1) = ($M->{wm}, $M->{wm});
	if ($cfg->{window})
	{
		for my $i (map { @$_ } values %bykey)
		{
			my $ws = model_wstart($M, $evs->[$i]);
			$w1 = $ws if !defined $w1 || $ws > $w1;
		}
	}
	for my $k (sort keys %bykey)
	{
		my @ix = @{ $bykey{$k} };
		if ($cfg->{mode} eq 'latest')
		{
			my $s = $M->{st}{$k};
			my $c = $s ? $s->{v} : undef;
			my @norm = @ix;
			if (!$s && $M->{has_h})
			{
				my @below = grep { $evs->[$_]{v} < $M->{h} } @ix;
				my @above = grep { $evs->[$_]{v} >= $M->{h} } @ix;
				$ambiguous->($k, "key $k has no state: versions below and above the horizon")
				  if @below && @above;
				$out[$_] = 'dead:below the retention horizon' for @below;
				@norm = @above;
			}
			my @higher = grep { !defined $c || $evs->[$_]{v} > $c } @norm;
			my %sigs;
			$sigs{ $evs->[$_]{v} }{ model_sig($M, $evs->[$_]) } = 1 for @higher;
			for my $v (sort { $a <=> $b } keys %sigs)
			{
				$ambiguous->($k, "key $k version $v: two contents")
				  if keys %{ $sigs{$v} } > 1;
			}
			for my $i (@norm)
			{
				my $e = $evs->[$i];
				if (!defined $c || $e->{v} != $c || model_sig($M, $e) eq model_sig($M, $s->{ev}))
				{
					$out[$i] = 'ok';    # applied, stale or a duplicate
				}
				else
				{
					$ambiguous->($k, "key $k: a conflicting duplicate of version $c beside a newer version")
					  if @higher;
					$out[$i] = 'dead:conflicting duplicate';
				}
			}
			if (@higher)
			{
				my ($top) = sort { $evs->[$b]{v} <=> $evs->[$a]{v} } @higher;
				$eff{st}{$k} = { v => $evs->[$top]{v}, ev => $evs->[$top] };
			}
		}
		else
		{
			my %byv;
			push @{ $byv{ $evs->[$_]{v} } }, $_ for @ix;
			for my $v (sort { $a <=> $b } keys %byv)
			{
				my @vi = @{ $byv{$v} };
				my $known = $M->{seen}{$k}{$v};
				if (defined $known)
				{
					$out[$_] = model_sig($M, $evs->[$_]) eq $known ? 'ok' : 'dead:conflicting duplicate'
					  for @vi;
					next;
				}
				if ($M->{has_h} && $v < $M->{h})
				{
					$out[$_] = 'dead:below the retention horizon' for @vi;
					next;
				}
				my %s = map { model_sig($M, $evs->[$_]) => 1 } @vi;
				$ambiguous->($k, "key $k version $v: two contents") if keys %s > 1;
				my $first = $evs->[ $vi[0] ];
				if ($cfg->{window})
				{
					my $ws = model_wstart($M, $first);
					if (too_late($M, $ws, $w0))
					{
						$out[$_] = 'dead:too late' for @vi;
						next;
					}
					$ambiguous->($k, "key $k version $v: its window may close during the drain")
					  if too_late($M, $ws, $w1);
					$eff{wm} = $ws if !defined $eff{wm} || $ws > $eff{wm};
				}
				$out[$_] = 'ok' for @vi;
				push @{ $eff{readings} }, $first;
				push @{ $eff{seen} }, [ $k, $v, model_sig($M, $first) ];
			}
		}
	}
	return { out => \@out, amb => $amb, key => $ambkey, eff => \%eff };
}

# model_commit(M, events, classification): take in what the pipeline did;
# returns how many events became dead letters
sub model_commit
{
	my ($M, $evs, $res) = @_;
	my $eff = $res->{eff};
	$M->{st}{$_} = $eff->{st}{$_} for keys %{ $eff->{st} };
	$M->{seen}{ $_->[0] }{ $_->[1] } = $_->[2] for @{ $eff->{seen} };
	push @{ $M->{readings} }, @{ $eff->{readings} };
	$M->{wm} = $eff->{wm};
	my $dead = 0;
	for my $i (0 .. $#$evs)
	{
		next unless $res->{out}[$i] =~ /^dead:(.*)$/;
		push @{ $M->{dead} }, { ev => $evs->[$i], reason => $1 };
		$dead++;
	}
	return $dead;
}

# model_prune(M, below, dead_letters): prune(); returns (horizon, forgotten,
# dead letters deleted).  It forgets below the new horizon, the greater of
# below and the horizon set before (what was forgotten stays forgotten:
# retention.c; README says "below below_version")
sub model_prune
{
	my ($M, $below, $dl) = @_;
	my $forgot = 0;
	$below = max($below, $M->{h}) if $M->{has_h};
	if ($M->{cfg}{mode} eq 'latest')
	{
		for my $k (keys %{ $M->{st} })
		{
			my $s = $M->{st}{$k};
			if ($s->{ev}{del} && $s->{v} < $below)
			{
				delete $M->{st}{$k};
				$forgot++;
			}
		}
	}
	else
	{
		for my $k (keys %{ $M->{seen} })
		{
			for my $v (keys %{ $M->{seen}{$k} })
			{
				next unless $v < $below;
				delete $M->{seen}{$k}{$v};
				$forgot++;
			}
		}
	}
	$M->{h} = $M->{has_h} ? max($M->{h}, $below) : $below;
	$M->{has_h} = 1;
	my $ndl = 0;
	if ($dl)
	{
		$ndl = @{ $M->{dead} };
		$M->{dead} = [];
	}
	return ($M->{h}, $forgot, $ndl);
}

# model_fix_event(event): the event with its NaN value and measures mended,
# as the fix of a replay step does it in dead_letters
sub model_fix_event
{
	my ($ev) = @_;
	my %e = %$ev;
	$e{m} = { %{ $ev->{m} // {} } };
	$e{val} = '7' if $e{val} eq 'NaN';
	for my $m (keys %{ $e{m} })
	{
		$e{m}{$m} = '1' if defined $e{m}{$m} && $e{m}{$m} eq 'NaN';
	}
	return \%e;
}

# model_replay_pick(M, filter): the indexes of the dead letters a replay's
# filter chooses: undef (all), { key => k } or { reason => prefix }
sub model_replay_pick
{
	my ($M, $filter) = @_;
	my @d = @{ $M->{dead} };
	return grep {
		!defined $filter
		  || (defined $filter->{key} && $d[$_]{ev}{key} eq $filter->{key})
		  || (defined $filter->{reason} && index($d[$_]{reason}, $filter->{reason}) == 0)
	} 0 .. $#d;
}

# model_key_count(M): how many keys have a state row
sub model_key_count
{
	my ($M) = @_;
	return scalar keys %{ $M->{st} } if $M->{cfg}{mode} eq 'latest';
	my %k = map { $_->{key} => 1 } @{ $M->{readings} };
	return scalar keys %k;
}

# row_sql(M, event, extra): the event as a row of the model's tables
sub row_sql
{
	my ($M, $ev, @extra) = @_;
	my %d = %{ $ev->{dims} };
	my $ws = $M->{cfg}{window} ? wstart_text(model_wstart($M, $ev)) : undef;
	return '('
	  . join(', ',
		lit($ev->{key}), $ev->{v}, numlit($ev->{val}),
		lit($d{region}), lit($d{desk}), lit($d{book}), lit($ws),
		($ev->{del} ? 'true' : 'false'), lit(fmt_time($ev->{t})) . '::timestamptz',
		numlit($ev->{m}{qty}), numlit($ev->{m}{fee}), lit($ev->{c}{cpty}), @extra)
	  . ')';
}

# model_sync_sql(M): statements that make the model's tables hold the model
sub model_sync_sql
{
	my ($M) = @_;
	my $cols = join(', ', @MODEL_COLS);
	my $sql = "DELETE FROM model.live; DELETE FROM model.readings; DELETE FROM model.dead;\n";
	my @rows;
	if ($M->{cfg}{mode} eq 'latest')
	{
		@rows = map { row_sql($M, $M->{st}{$_}{ev}) } sort keys %{ $M->{st} };
		$sql .= "INSERT INTO model.live ($cols) VALUES " . join(",\n", @rows) . ";\n" if @rows;
	}
	else
	{
		@rows = map { row_sql($M, $_) } @{ $M->{readings} };
		$sql .= "INSERT INTO model.readings ($cols) VALUES " . join(",\n", @rows) . ";\n" if @rows;
	}
	@rows = map { row_sql($M, $_->{ev}, lit($_->{reason})) } @{ $M->{dead} };
	$sql .= "INSERT INTO model.dead ($cols, reason) VALUES " . join(",\n", @rows) . ";\n" if @rows;
	return $sql;
}

# model_source(M): the model's contributions: live keys or readings
sub model_source
{
	my ($M) = @_;
	return $M->{cfg}{mode} eq 'latest'
	  ? '(SELECT * FROM model.live WHERE NOT deleted) src'
	  : 'model.readings src';
}

# model_agg_cols(M): the columns of aggregates the model checks
sub model_agg_cols
{
	my ($M) = @_;
	my $cfg = $M->{cfg};
	return (
		model_cell_dims($M), 'level', 'total', 'keys',
		(map { ("${_}_sum", "${_}_count", "${_}_avg") } @{ $cfg->{measures} }),
		(map { ("${_}_min", "${_}_max") } @{ $cfg->{min_max} }),
		(map { "${_}_distinct" } @{ $cfg->{distincts} }));
}

# measure_sql(M): the aggregate expressions of the measures, min and max
# and distinct counts, named as in aggregates
sub measure_sql
{
	my ($M) = @_;
	my $cfg = $M->{cfg};
	my @c;
	for my $m (@{ $cfg->{measures} })
	{
		push @c, "coalesce(sum($m), 0) AS ${m}_sum", "count($m) AS ${m}_count",
		  "trim_scale(coalesce(sum($m), 0)) / NULLIF(count($m), 0) AS ${m}_avg";
	}
	push @c, "min($_) AS ${_}_min", "max($_) AS ${_}_max" for @{ $cfg->{min_max} };
	push @c, "count(DISTINCT $_) AS ${_}_distinct" for @{ $cfg->{distincts} };
	return @c;
}

# model_oracle_sql(M): the aggregates the model expects, as a query with
# the columns of model_agg_cols
sub model_oracle_sql
{
	my ($M) = @_;
	my @cd = model_cell_dims($M);
	my %used = map { $_ => 1 } map { @$_ } @{ $M->{cfg}{sets} };
	my @in = grep { $used{$_} } @cd;
	my $sets = join(', ', map { '(' . join(', ', @$_) . ')' } @{ $M->{cfg}{sets} });
	my @cols = map { $used{$_} ? $_ : "NULL::text AS $_" } @cd;
	my $level = @in ? join(' + ', map { "(1 - GROUPING($_))" } @in) : '0';
	return 'SELECT '
	  . join(', ', @cols, "$level AS level", 'sum(value) AS total', 'count(*) AS keys', measure_sql($M))
	  . ' FROM ' . model_source($M)
	  . " GROUP BY GROUPING SETS ($sets) HAVING count(*) > 0";
}

# model_cells_sql(M): how many cells the model expects
sub model_cells_sql
{
	my ($M) = @_;
	return 'SELECT count(*) FROM (' . model_oracle_sql($M) . ') o';
}

# model_view_oracle_sql(M, view): what a view must hold, with its columns
sub model_view_oracle_sql
{
	my ($M, $v) = @_;
	my @keys = @{ $v->{keys} };
	my @c = (@keys, 'sum(value) AS total', 'count(*) AS keys', measure_sql($M));
	@c = grep { !/_distinct$/ } @c if $v->{merges};
	my $sql = 'SELECT ' . join(', ', @c) . ' FROM ' . model_source($M);
	$sql .= " WHERE ($v->{filter})" if defined $v->{filter};
	$sql .= @keys ? ' GROUP BY ' . join(', ', 1 .. @keys) : ' HAVING count(*) > 0';
	return $sql;
}

# model_view_cols(M, view): the view's columns the model checks
sub model_view_cols
{
	my ($M, $v) = @_;
	my $cfg = $M->{cfg};
	return (
		@{ $v->{names} }, 'total', 'keys',
		(map { ("${_}_sum", "${_}_count", "${_}_avg") } @{ $cfg->{measures} }),
		(map { ("${_}_min", "${_}_max") } @{ $cfg->{min_max} }),
		($v->{merges} ? () : map { "${_}_distinct" } @{ $cfg->{distincts} }));
}

# model_insert_sql(M, events, how): the events into the pipeline's queue,
# by INSERT or COPY
sub model_insert_sql
{
	my ($M, $evs, $how) = @_;
	my $cfg = $M->{cfg};
	my @cols = ('key', 'version', 'value', @{ $cfg->{dims} }, 'deleted', 'event_time',
		@{ $cfg->{measures} }, @{ $cfg->{distincts} });
	my $q = "$M->{name}.ingest (" . join(', ', @cols) . ')';
	return '' unless @$evs;
	if (($how // 'insert') eq 'copy')
	{
		my $sql = "COPY $q FROM STDIN;\n";
		for my $e (@$evs)
		{
			$sql .= join("\t",
				$e->{key}, $e->{v}, $e->{val}, (map { $e->{dims}{$_} } @{ $cfg->{dims} }),
				($e->{del} ? 't' : 'f'), fmt_time($e->{t}),
				(map { $e->{m}{$_} // '\N' } @{ $cfg->{measures} }),
				(map { $e->{c}{$_} // '\N' } @{ $cfg->{distincts} }))
			  . "\n";
		}
		return $sql . "\\.\n";
	}
	return "INSERT INTO $q VALUES\n"
	  . join(",\n",
		map {
			my $e = $_;
			'('
			  . join(', ',
				lit($e->{key}), $e->{v}, numlit($e->{val}),
				(map { lit($e->{dims}{$_}) } @{ $cfg->{dims} }),
				($e->{del} ? 'true' : 'false'), lit(fmt_time($e->{t})),
				(map { numlit($e->{m}{$_}) } @{ $cfg->{measures} }),
				(map { lit($e->{c}{$_}) } @{ $cfg->{distincts} }))
			  . ')'
		} @$evs)
	  . ";\n";
}

# describe(event): k3@7=12.50 EMEA/d1 del ...
sub describe_event
{
	my ($M, $e) = @_;
	my $s = "$e->{key}\@$e->{v}=$e->{val} " . join('/', map { $e->{dims}{$_} } @{ $M->{cfg}{dims} });
	$s .= ' del' if $e->{del};
	$s .= " $_=" . ($e->{m}{$_} // 'null') for @{ $M->{cfg}{measures} };
	$s .= " $_=" . ($e->{c}{$_} // 'null') for @{ $M->{cfg}{distincts} };
	$s .= ' t+' . ($e->{t} - $BASE_TIME) if $M->{cfg}{window};
	return $s;
}

# model_describe(M, step): one line that says what the step does
sub model_describe
{
	my ($M, $st) = @_;
	my $op = $st->{op};
	my $evs = $st->{events} && @{ $st->{events} }
	  ? ': ' . join('; ', map { describe_event($M, $_) } @{ $st->{events} }) : '';
	if ($op eq 'create')
	{
		my $c = $st->{cfg};
		return "create $c->{mode} dims (@{$c->{dims}}) grouping '$c->{grouping}'"
		  . (@{ $c->{measures} } ? " measures (@{$c->{measures}})" : '')
		  . (@{ $c->{min_max} } ? " min_max (@{$c->{min_max}})" : '')
		  . (@{ $c->{distincts} } ? " distinct (@{$c->{distincts}})" : '')
		  . ($c->{window} ? " window $c->{window}s lateness $c->{lateness}s" : '')
		  . ($c->{dist} ? ' distributed over node1, node2' : " shards $c->{shards}")
		  . (@{ $st->{bad} // [] } ? ', after ' . join(', ', map { "a declaration refused with $_->{expect}" } @{ $st->{bad} }) : '');
	}
	return "insert by $st->{how}" . ($st->{txns} > 1 ? ' in 2 transactions' : '')
	  . ($st->{what} ? " ($st->{what})" : '') . $evs
	  if $op eq 'insert';
	return "flush" . ($st->{rr} ? ' in REPEATABLE READ (refused)' : '') . $evs if $op eq 'flush';
	return "set_shards($st->{n})$evs" if $op eq 'set_shards';
	return 'prune(' . ($st->{below} // 'NULL') . ($st->{dl} ? ", dead letters older than 0 s" : '') . ')'
	  if $op eq 'prune';
	return 'replay_dead_letters('
	  . (defined $st->{filter} ? "'" . filter_sql($st->{filter}) . "'" : 'NULL') . ')'
	  . ($st->{fix} ? ' after mending the NaN dead letters' : '')
	  if $op eq 'replay';
	return "set_feed(" . ($st->{on} ? 'true' : 'false') . ($st->{notify} ? ', notify' : '') . ')'
	  if $op eq 'set_feed';
	return "feed_read(max $st->{max})" . ($st->{rollback} ? ' rolled back' : '') if $op eq 'feed_read';
	return "create_view $st->{vname} (" . join(', ', @{ $st->{keys} }) . ')'
	  . (defined $st->{filter} ? " where $st->{filter}" : '')
	  if $op eq 'create_view';
	return "wait_applied ($st->{variant})$evs" if $op eq 'wait_applied';
	return 'drop_pipeline' . ($st->{queued} ? ' with events queued (refused), then forced' : '') . $evs
	  if $op eq 'drop';
	return ($st->{how} eq 'immediate' ? 'stop -m immediate and start' : 'restart') . $evs
	  if $op eq 'restart';
	return "damage a cell, verify, rebuild" if $op eq 'damage';
	return "refuse: $st->{sql} ($st->{expect})" if $op eq 'refuse';
	return "move_keys($st->{m}, $st->{r}, $st->{server})" if $op eq 'move';
	return "stop $st->{node} -m immediate and start$evs" if $op eq 'node_crash';
	return $op . $evs;
}

# filter_sql(filter): a replay filter as SQL
sub filter_sql
{
	my ($f) = @_;
	return undef unless defined $f;
	return $f->{sql} if defined $f->{sql};
	return 'key = ' . lit($f->{key}) if defined $f->{key};
	return 'reason LIKE ' . lit("$f->{reason}%");
}

#
# The generator: random operations, made from the model's state, that the
# model can predict.
#

sub pick { return $_[ int(rand(@_)) ]; }

sub subset
{
	my ($p, @xs) = @_;
	return grep { rand() < $p } @xs;
}

# rnum(): a random value: integers, two decimals, a trailing zero
sub rnum
{
	my $r = rand();
	return int(rand(200)) - 50 if $r < 0.4;
	return sprintf('%.2f', rand(400) - 100) if $r < 0.8;
	return sprintf('%.1f0', rand(100));
}

# gen_config(dist): a random pipeline: mode, dimensions, measures, min and
# max, distinct counts, windows, grouping sets
sub gen_config
{
	my ($dist) = @_;
	my %c;
	$c{dist} = $dist ? 1 : 0;
	$c{mode} = rand() < 0.5 ? 'latest' : 'accumulate';
	$c{window} = (!$dist && $c{mode} eq 'accumulate' && rand() < 0.4) ? 600 : undef;
	$c{lateness} = rand() < 0.5 ? 0 : 300;
	my $n = $c{window} ? 1 + int(rand(2)) : 1 + int(rand(3));
	my @d = subset(0.6, @DIMS);
	@d = (pick(@DIMS)) unless @d;
	@d = @d[ 0 .. $n - 1 ] if @d > $n;
	$c{dims} = \@d;
	$c{measures} = [ subset(0.5, @MEASURES) ];
	$c{min_max} = [ subset(0.4, 'value', @{ $c{measures} }) ];
	$c{distincts} = (!$dist && rand() < 0.35) ? ['cpty'] : [];
	$c{shards} = 1 + int(rand(3));
	$c{nkeys} = 6 + int(rand(10));
	my @cd = (($c{window} ? ('window_start') : ()), @d);
	my $g = rand();
	if ($dist || $c{window} || $g < 0.5)
	{
		$c{grouping} = 'rollup';
		$c{sets} = [ map { [ @cd[ 0 .. $_ - 1 ] ] } reverse 0 .. @cd ];
	}
	elsif ($g < 0.75)
	{
		$c{grouping} = 'cube';
		$c{sets} = [
			map {
				my $mask = $_;
				[ map { $cd[$_] } grep { $mask & (1 << $_) } 0 .. $#cd ]
			} 0 .. (1 << @cd) - 1
		];
	}
	else
	{
		my %sets;
		my $need = @{ $c{min_max} } || @{ $c{distincts} };
		$sets{ join(',', @cd) } = [@cd] if $need || rand() < 0.5;
		for (1 .. 1 + int(rand(2)))
		{
			my @s = subset(0.5, @cd);
			$sets{ join(',', @s) } = \@s;
		}
		$c{sets} = [ map { $sets{$_} } sort keys %sets ];
		$c{grouping} = join(', ', map { '(' . join(', ', @$_) . ')' } @{ $c{sets} });
	}
	return \%c;
}

# create_sql(name, cfg): the call that creates the pipeline
sub create_sql
{
	my ($name, $c) = @_;
	my $arr = sub { 'ARRAY[' . join(', ', map { lit($_) } @_) . ']::text[]' };
	if ($c->{dist})
	{
		return "SELECT exactonce.create_distributed_pipeline('$name', "
		  . $arr->(@{ $c->{dims} })
		  . ", ARRAY['node1', 'node2']::name[], '$c->{mode}', measures => "
		  . $arr->(@{ $c->{measures} })
		  . ', min_max => '
		  . $arr->(@{ $c->{min_max} }) . ')';
	}
	return "SELECT exactonce.create_pipeline('$name', "
	  . $arr->(@{ $c->{dims} })
	  . ", '$c->{mode}', shards => $c->{shards}, measures => "
	  . $arr->(@{ $c->{measures} })
	  . ', min_max => '
	  . $arr->(@{ $c->{min_max} })
	  . ', distinct_counts => '
	  . $arr->(@{ $c->{distincts} })
	  . ($c->{window} ? ", window_width => '$c->{window} seconds', allowed_lateness => '$c->{lateness} seconds'" : '')
	  . ", grouping_sets => " . lit($c->{grouping}) . ')';
}

# gen_create(dist): a create step, after some declarations that must be
# refused (single server only)
sub gen_create
{
	my ($dist) = @_;
	my $cfg = gen_config($dist);
	my @bad;
	if (!$dist && rand() < 0.3)
	{
		my %b = (%$cfg, dims => [ @{ $cfg->{dims} } ], min_max => [ @{ $cfg->{min_max} } ]);
		my $r = int(rand(6));
		my $expect;
		if ($r == 0)
		{
			@b{qw(mode window lateness grouping)} = ('latest', 600, 0, 'rollup');
			$expect = '0A000';    # windows need accumulate
		}
		elsif ($r == 1)
		{
			$b{dims} = [ $cfg->{dims}[0], $cfg->{dims}[0] ];
			($b{window}, $b{grouping}) = (undef, 'rollup');
			$expect = '42701';    # a repeated dimension
		}
		elsif ($r == 2)
		{
			$b{mode} = 'sometimes';
			$expect = '22023';
		}
		elsif ($r == 3)
		{
			$b{shards} = 0;
			$expect = '22023';
		}
		elsif ($r == 4)
		{
			$b{min_max} = ['nope'];
			$expect = '22023';    # not a measure
		}
		else
		{
			($b{mode}, $b{window}, $b{lateness}, $b{grouping}) = ('accumulate', 600, 0, 'cube');
			$expect = '0A000';    # windows need a rollup
		}
		push @bad, { cfg => \%b, expect => $expect };
	}
	return { op => 'create', cfg => $cfg, bad => \@bad };
}

# new_content(M, key, from): random content for a key, often in the cell
# of its previous event
sub new_content
{
	my ($M, $k, $from) = @_;
	my $cfg = $M->{cfg};
	my %e = (key => $k, val => rnum(), del => 0, dims => {}, m => {}, c => {});
	for my $d (@{ $cfg->{dims} })
	{
		$e{dims}{$d} = ($from && rand() < 0.6) ? $from->{dims}{$d} : pick(@{ $DIM_VALUES{$d} });
	}
	$e{m}{$_} = rand() < 0.25 ? undef : rnum() for @{ $cfg->{measures} };
	$e{c}{$_} = rand() < 0.2 ? undef : pick(@CPTY) for @{ $cfg->{distincts} };
	$e{t} = $cfg->{window} ? $M->{clock} - int(rand(1800)) : $M->{clock};
	return \%e;
}

# next_version(M, key): a version above every one sent for the key
sub next_version
{
	my ($M, $k) = @_;
	return max($M->{maxv}{$k} // 0, $M->{vclock} - 3) + 1 + int(rand(3));
}

# gen_events(M, n): up to n events of every kind the stream has
sub gen_events
{
	my ($M, $n) = @_;
	my $cfg = $M->{cfg};
	my $latest = $cfg->{mode} eq 'latest';
	my @keys = map { "k$_" } 1 .. $M->{nkeys};
	$M->{vclock} += int(rand(3));
	$M->{clock} += int(rand(300));
	my @evs;
	for (1 .. $n)
	{
		my $k = pick(@keys);
		my $r = rand();
		my $last = $M->{hist}[-1];
		my $prev = first { $_->{key} eq $k } reverse @{ $M->{hist} };
		my $e;
		if ($r < 0.45 || !@{ $M->{hist} })
		{
			# a new version, often in another cell (a move), or a tombstone
			$e = new_content($M, $k, $prev);
			$e->{v} = next_version($M, $k);
			$e->{del} = 1 if rand() < ($latest ? 0.15 : 0.03);
		}
		elsif ($r < 0.65)
		{
			# a resend of an event sent before, its value's scale changed at times
			my $old = pick(@{ $M->{hist} });
			$e = { %$old };
			$e->{val} .= ($e->{val} =~ /\./ ? '0' : '.00') if $e->{val} ne 'NaN' && rand() < 0.3;
		}
		elsif ($r < 0.75)
		{
			# latest: an older version with new content (stale); accumulate:
			# a late reading, in a gap of the versions sent
			$e = new_content($M, $k, $prev);
			if ($latest)
			{
				my $s = $M->{st}{$k};
				next unless $s && $s->{v} > 1;
				$e->{v} = $s->{v} - 1 - int(rand(min(2, $s->{v} - 1)));
			}
			else
			{
				my $top = $M->{maxv}{$k} // 0;
				my @gaps = grep { !$M->{sentv}{$k}{$_} } 1 .. $top;
				$e->{v} = @gaps ? pick(@gaps) : next_version($M, $k);
			}
		}
		elsif ($r < 0.85)
		{
			# the current version (latest) or an applied reading with other
			# content: a conflicting duplicate
			my $base;
			if ($latest)
			{
				my @ks = grep { !$M->{st}{$_}{ev}{del} } sort keys %{ $M->{st} };
				next unless @ks;
				$base = $M->{st}{ pick(@ks) }{ev};
			}
			else
			{
				next unless @{ $M->{readings} };
				$base = pick(@{ $M->{readings} });
			}
			$e = { %$base, dims => { %{ $base->{dims} } } };
			if ($cfg->{window} && rand() < 0.3)
			{
				$e->{t} += 900;    # the same reading in another window
			}
			elsif (rand() < 0.5)
			{
				$e->{val} = $e->{val} eq 'NaN' ? '1' : sprintf('%.2f', $e->{val} + 1);
			}
			else
			{
				my $d = pick(@{ $cfg->{dims} });
				$e->{dims}{$d} = pick(grep { $_ ne $e->{dims}{$d} } @{ $DIM_VALUES{$d} });
			}
		}
		elsif ($r < 0.9)
		{
			# a value or a measure that no sum can take
			$e = new_content($M, $k, $prev);
			$e->{v} = next_version($M, $k);
			if (@{ $cfg->{measures} } && rand() < 0.4)
			{
				$e->{m}{ pick(@{ $cfg->{measures} }) } = 'NaN';
			}
			else
			{
				$e->{val} = 'NaN';
			}
		}
		else
		{
			# a key's early version, below a retention horizon if there is one
			$e = new_content($M, $k, $prev);
			$e->{v} = 1 + int(rand(5));
		}
		push @evs, $e;
	}
	# one content per (key, version) in a step
	my %content;
	@evs = grep {
		my $id = "$_->{key}\@$_->{v}";
		my $s = model_sig($M, $_);
		!defined $content{$id} || $content{$id} eq $s ? ($content{$id} = $s, 1) : 0
	} @evs;
	return [ shuffle(@{ model_unambiguous($M, \@evs) }) ];
}

# model_unambiguous(M, events): the events, less those whose fate the cut
# of the batches would decide
sub model_unambiguous
{
	my ($M, $evs) = @_;
	my @evs = @$evs;
	for (1 .. @evs)
	{
		my $res = model_classify($M, \@evs);
		last unless defined $res->{amb};
		my $i = first { $evs[$_]{key} eq $res->{key} } reverse 0 .. $#evs;
		splice(@evs, $i, 1);
	}
	return \@evs;
}

# remember(M, events): what the generator sent
sub remember
{
	my ($M, $evs) = @_;
	for my $e (@$evs)
	{
		push @{ $M->{hist} }, $e;
		$M->{sentv}{ $e->{key} }{ $e->{v} } = 1;
		$M->{maxv}{ $e->{key} } = $e->{v} if ($M->{maxv}{ $e->{key} } // 0) < $e->{v};
	}
	return;
}

# gen_view(M): a view to create: plain and computed keys, a filter, or one
# that must be refused
sub gen_view
{
	my ($M) = @_;
	my $cfg = $M->{cfg};
	my @cd = model_cell_dims($M);
	my (@keys, @names, %mask);
	my $plain = 1;
	for my $d (@cd)
	{
		next unless rand() < 0.45;
		my $r = rand();
		if ($d eq 'window_start' && $r < 0.5)
		{
			push @keys, "date_trunc('hour', window_start::timestamp) AS hour";
			push @names, 'hour';
			$plain = 0;
		}
		elsif ($r < 0.25)
		{
			push @keys, "lower($d) AS ${d}_l";
			push @names, "${d}_l";
			$plain = 0;
		}
		elsif ($r < 0.4)
		{
			push @keys, "$d AS my_$d";
			push @names, "my_$d";
		}
		else
		{
			push @keys, $d;
			push @names, $d;
		}
		$mask{$d} = 1;
	}
	my %keydims = %mask;
	my $filter;
	my @fd = grep { $_ ne 'window_start' } @cd;
	if (rand() < 0.4 && @fd)
	{
		my $d = pick(@fd);
		$filter = "$d <> " . lit(pick(@{ $DIM_VALUES{$d} }));
		$mask{$d} = 1;
	}
	my $n = ++$M->{nview};
	my $v = { op => 'create_view', vname => "v$n", keys => \@keys, names => \@names, filter => $filter };
	# the smallest grouping with every dimension named, if any
	my @has = grep {
		my %s = map { $_ => 1 } @$_;
		!grep { !$s{$_} } keys %mask
	} @{ $cfg->{sets} };
	my $r = rand();
	if (!@has)
	{
		$v->{expect} = '0A000';
	}
	elsif ($r < 0.06)
	{
		$v->{filter} = 'value > 0';
		$v->{expect} = '42703';
	}
	elsif ($r < 0.1 && @{ $M->{views} })
	{
		$v->{vname} = pick(@{ $M->{views} })->{vname};
		$v->{expect} = '42P07';
	}
	elsif ($r < 0.14)
	{
		push @{ $v->{keys} }, "upper($cd[0])";
		$v->{expect} = '22023';
	}
	# each row is one cell when the keys are plain and a grouping of their own
	my $kd = join(',', sort keys %keydims);
	my $md = join(',', sort keys %mask);
	my $grouping = grep { join(',', sort @$_) eq $kd } @{ $cfg->{sets} };
	$v->{merges} = !($plain && $kd eq $md && $grouping) ? 1 : 0;
	return $v;
}

# gen_step(M, env): the next operation; env says { preload, dist }
sub gen_step
{
	my ($M, $env) = @_;
	my $cfg = $M->{cfg};
	my $latest = $cfg->{mode} eq 'latest';
	my %w = $env->{dist}
	  ? (insert => 50, pause => 4, resume => ($M->{paused} ? 12 : 2), move => 18, node_crash => 3, drop => 2,
		delete_all => ($latest ? 3 : 0))
	  : (
		insert => 36, flush => 4, pause => 3, resume => ($M->{paused} ? 10 : 1), set_shards => 3,
		prune => 5, rebuild => 3, damage => ($latest ? 3 : 0), replay => (@{ $M->{dead} } ? 6 : 0),
		set_feed => 4, feed_read => ($M->{feed} ? 4 : 0), create_view => 4, wait_applied => 3,
		drop => 2, restart => 2, crash => 3, refuse => 3, delete_all => ($latest ? 2 : 0));
	my $total = 0;
	$total += $_ for values %w;
	for (1 .. 100)
	{
		my $x = rand($total);
		my $op;
		for my $o (sort keys %w)
		{
			$x -= $w{$o};
			$op = $o, last if $x < 0;
		}
		$op //= 'insert';
		my $st = gen_op($M, $env, $op);
		return $st if $st;
	}
	return { op => 'insert', how => 'insert', txns => 1, events => [] };
}

sub gen_op
{
	my ($M, $env, $op) = @_;
	my $cfg = $M->{cfg};
	my $latest = $cfg->{mode} eq 'latest';
	my $events = sub {
		my $evs = gen_events($M, $_[0]);
		remember($M, $evs);
		return $evs;
	};
	if ($op eq 'insert')
	{
		return { op => 'insert', how => (rand() < 0.3 ? 'copy' : 'insert'), txns => (rand() < 0.2 ? 2 : 1),
			events => $events->(1 + int(rand(10))) };
	}
	return { op => $op } if $op eq 'pause' || $op eq 'resume' || $op eq 'rebuild' || $op eq 'damage';
	if ($op eq 'delete_all')
	{
		# a tombstone for every live key: no live key is left
		my @evs;
		for my $k (sort keys %{ $M->{st} })
		{
			my $s = $M->{st}{$k};
			next if $s->{ev}{del};
			push @evs, { %{ $s->{ev} }, v => next_version($M, $k), del => 1, t => $M->{clock} };
		}
		remember($M, \@evs);
		return { op => 'insert', how => 'insert', txns => 1, events => \@evs, what => 'tombstones for every live key' };
	}
	if ($op eq 'flush')
	{
		return { op => 'flush', rr => 1, events => [] } if rand() < 0.1;
		return { op => 'flush', events => $events->(int(rand(6))) };
	}
	if ($op eq 'set_shards')
	{
		return { op => 'set_shards', n => 1 + int(rand(4)), events => $events->(int(rand(5))) };
	}
	if ($op eq 'prune')
	{
		return { op => 'prune', below => $M->{vclock} - int(rand(15)), dl => (rand() < 0.3 ? 1 : 0) };
	}
	if ($op eq 'replay')
	{
		my @d = @{ $M->{dead} };
		my $fix = rand() < 0.5 ? 1 : 0;
		my $r = rand();
		my $one = pick(@d);
		my $filter = $r < 0.4 ? undef
		  : $r < 0.7 ? { key => $one->{ev}{key} }
		  : { reason => (split / /, $one->{reason})[0] };
		# the model must tell what the replay does
		my @pick = model_replay_pick($M, $filter);
		my @evs = map { $fix ? model_fix_event($d[$_]{ev}) : $d[$_]{ev} } @pick;
		return undef if defined model_classify($M, \@evs)->{amb};
		return { op => 'replay', filter => $filter, fix => $fix };
	}
	if ($op eq 'set_feed')
	{
		return { op => 'set_feed', on => ($M->{feed} ? 0 : 1), notify => (rand() < 0.3 ? 1 : 0) };
	}
	if ($op eq 'feed_read')
	{
		return { op => 'feed_read', max => 1 + int(rand(20)), rollback => (rand() < 0.3 ? 1 : 0) };
	}
	return gen_view($M) if $op eq 'create_view';
	if ($op eq 'wait_applied')
	{
		my $evs = $events->(1 + int(rand(4)));
		# in a transaction that inserted: only with something to insert
		my $variant = ($env->{preload} && @$evs && rand() < 0.3) ? 'in a transaction that inserted' : 'after insert';
		return { op => 'wait_applied', variant => $variant, events => $evs };
	}
	if ($op eq 'drop')
	{
		my $queued = rand() < 0.5 ? 1 : 0;
		return { op => 'drop', queued => 0, events => [] } if $env->{dist};
		return { op => 'drop', queued => $queued, events => ($queued ? $events->(1 + int(rand(3))) : []) };
	}
	if ($op eq 'restart' || $op eq 'crash')
	{
		return { op => 'restart', how => ($op eq 'crash' ? 'immediate' : 'fast'),
			events => (rand() < 0.6 ? $events->(1 + int(rand(6))) : []) };
	}
	if ($op eq 'node_crash')
	{
		return { op => 'node_crash', node => pick('node1', 'node2'),
			events => (rand() < 0.5 ? $events->(1 + int(rand(4))) : []) };
	}
	if ($op eq 'move')
	{
		my @p = @{ $M->{parts} };
		my $r = rand();
		if ($r < 0.1)
		{
			# a range across partitions, or on its server already: refused
			my $part = pick(@p);
			return { op => 'move', m => $part->[0], r => $part->[1], server => $part->[2] };
		}
		my $part = pick(@p);
		my ($pm, $pr, $srv) = @$part;
		my $m = min(16, $pm * pick(1, 1, 2, 4));
		my $rr = $pr + $pm * int(rand($m / $pm));
		return { op => 'move', m => $m, r => $rr, server => ($srv eq 'node1' ? 'node2' : 'node1') };
	}
	if ($op eq 'refuse')
	{
		my $n = $M->{name};
		my @r = (
			[ "SELECT exactonce.set_shards('$n', 0)", '22023' ],
			[ "SELECT exactonce.set_shards('$n', 65)", '22023' ],
			[ "SELECT * FROM exactonce.prune('$n', NULL)", '22004' ],
			[ "SELECT * FROM exactonce.replay_dead_letters('$n', 'value >')", '42601' ],
			[ "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT exactonce.flush('$n'); COMMIT", '25001' ],
			[ "SELECT exactonce.rebuild(NULL)", '22004' ],
			[ "SELECT exactonce.flush('${n}_nope')", '42704' ],
			[ "SELECT exactonce.pause('${n}_nope')", '42704' ],
			[ "SELECT exactonce.create_pipeline('$n', ARRAY['d'])", '42710' ],
			[ "SELECT exactonce.create_pipeline('$n x', ARRAY['d'])", '42602' ],
			[ "SELECT exactonce.create_pipeline('${n}_x', '{}'::text[])", '22023' ],
			[ "SELECT exactonce.create_view('$n', 'vx', ARRAY['nope'])", '42703' ],
			[ "SELECT * FROM exactonce.verify('${n}_nope')", '42704' ]);
		push @r, [ "SELECT * FROM exactonce.feed_read('$n', 'model')", '55000' ] unless $M->{feed};
		push @r, [ "SELECT exactonce.rebuild('$n')", '0A000' ] unless $latest;
		push @r, [ "SELECT exactonce.wait_applied('$n')", '55000' ] unless $env->{preload};
		my $x = pick(@r);
		return { op => 'refuse', sql => $x->[0], expect => $x->[1] };
	}
	return undef;
}

1;
