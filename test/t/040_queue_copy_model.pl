# The queue's COPY (src/engine/queuecopy.c) against PostgreSQL's own COPY
# as its model.  Seeded random statements (text, CSV with its options,
# binary from a server file; columns in any order and subset; up to 2,500
# rows; now and then a bad row or a column that may not be given) go into
# queues their owner altered at random: columns of the owner's with
# defaults, a generated column, a check, a dropped column and partitions
# made after it, a volatile default, statement triggers, row triggers on
# ingest or a partition, row-level security.  Each statement runs as the
# owner twice, with exactonce.queue_copy on and off, each time in a
# transaction rolled back that starts from the same identity value: the
# rows (their partition, identity and every column), the row count, what
# the statement triggers recorded and the error with its context must be
# the same.  The DEBUG1 message says which COPY ran: the path is taken
# where the queue allows it, and refused, with the reason, for each
# alteration that needs PostgreSQL's COPY.
#
# EO_COPY_SEED picks another seed, EO_COPY_ROUNDS and EO_COPY_CASES run
# more queues and more statements on each.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use List::Util qw(shuffle);
use ExactonceTest;

my $db = 'postgres';
my $seed = $ENV{EO_COPY_SEED} // 20261202;
my $rounds = $ENV{EO_COPY_ROUNDS} // 9;
my $cases = $ENV{EO_COPY_CASES} // 14;
srand($seed);
note "seed $seed: $rounds queues, $cases statements each";

my $node = eo_node('queue_copy_model');
my $dir = PostgreSQL::Test::Utils::tempdir;
$node->safe_psql(
	$db, q{
SET client_min_messages = warning;
CREATE EXTENSION exactonce;
CREATE ROLE dq_owner LOGIN;
GRANT CREATE ON DATABASE postgres TO dq_owner;
GRANT pg_read_server_files TO dq_owner;
});

# The alterations a queue may get; each round draws some, the first rounds
# one of each that sends the COPY to PostgreSQL, so that every seed has them
my @columns_of_owner = qw(note twice small moved stmt);
# in the order CopyRefusal looks for them, the first one found is said
my @refusing = qw(rls rowtrig volatile partition_trigger);
my %alter_sql = (
	note => "ALTER TABLE dq.ingest ADD COLUMN note text DEFAULT 'n'",
	twice => 'ALTER TABLE dq.ingest ADD COLUMN twice numeric GENERATED ALWAYS AS (value * 2) STORED',
	small => 'ALTER TABLE dq.ingest ADD CONSTRAINT small CHECK (value < 100000)',
	moved => "ALTER TABLE dq.ingest ADD COLUMN gone int;
		ALTER TABLE dq.ingest DROP COLUMN gone;
		SELECT exactonce.set_shards('dq', SHARDS + 1)",
	stmt => q{CREATE TABLE dq.fired (what text);
		CREATE FUNCTION dq.fire() RETURNS trigger LANGUAGE plpgsql AS
			$$BEGIN INSERT INTO dq.fired VALUES (TG_WHEN || ' ' || TG_LEVEL); RETURN NULL; END$$;
		CREATE TRIGGER b BEFORE INSERT ON dq.ingest FOR EACH STATEMENT EXECUTE FUNCTION dq.fire();
		CREATE TRIGGER a AFTER INSERT ON dq.ingest FOR EACH STATEMENT EXECUTE FUNCTION dq.fire()},
	rowtrig => q{CREATE FUNCTION dq.upper() RETURNS trigger LANGUAGE plpgsql AS
			$$BEGIN NEW.desk := upper(NEW.desk); RETURN NEW; END$$;
		CREATE TRIGGER u BEFORE INSERT ON dq.ingest FOR EACH ROW EXECUTE FUNCTION dq.upper()},
	partition_trigger => q{CREATE FUNCTION dq.upper() RETURNS trigger LANGUAGE plpgsql AS
			$$BEGIN NEW.desk := upper(NEW.desk); RETURN NEW; END$$;
		SELECT format('CREATE TRIGGER u BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION dq.upper()',
			min(inhrelid::regclass::text)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE c.relkind = 'r' AND c.relnamespace = 'dq'::regnamespace \gexec
		SELECT 1},
	rls => q{CREATE POLICY p ON dq.ingest WITH CHECK (value > -100000);
		ALTER TABLE dq.ingest ENABLE ROW LEVEL SECURITY;
		ALTER TABLE dq.ingest FORCE ROW LEVEL SECURITY},
	volatile => q{CREATE FUNCTION dq.seven() RETURNS int LANGUAGE sql VOLATILE AS 'SELECT 7';
		ALTER TABLE dq.ingest ADD COLUMN vol int DEFAULT dq.seven()});
my %refusal = (
	rowtrig => qr/row-level insert trigger/,
	partition_trigger => qr/has a trigger or an index/,
	rls => qr/Row-level security/,
	volatile => qr/column "vol".*is volatile/);

my @keys_chars = ('a' .. 'f', '0' .. '9', ',', ';', '"', "'", '\\', ' ', "\t", 'é', '€', '|');
my @regions = ('EMEA', 'AMER', 'APAC', 'LAT AM', 'say "hi"');
my @desks = ('FX', 'Rates', 'Rates, long', "it's", 'a|b', 'back\\slash');

sub pick { return $_[ int(rand(@_)) ] }

sub random_text
{
	my ($n) = @_;
	return join('', map { pick(@keys_chars) } 1 .. $n);
}

# random_value(column): a value the column takes, as text; undef is NULL
sub random_value
{
	my ($col) = @_;
	return 'k' . random_text(1 + int(rand(6))) if $col eq 'key';
	return 1 + int(rand(5)) if $col eq 'version';
	return sprintf('%.2f', rand(100000) - 1000) if $col eq 'value';
	return pick(@regions) if $col eq 'region';
	return pick(@desks) if $col eq 'desk';
	return rand() < 0.3 ? undef : int(rand(100)) if $col eq 'qty';
	return pick('t', 'f', 'true', 'false') if $col eq 'deleted';
	return sprintf('2026-11-%02d %02d:%02d:%02d.%06d+00',
		1 + int(rand(28)), int(rand(24)), int(rand(60)), int(rand(60)), int(rand(1e6)))
	  if $col eq 'event_time';
	return rand() < 0.2 ? undef : random_text(int(rand(8))) if $col eq 'note';
	return int(rand(10)) if $col eq 'vol';
	return 1 + int(rand(3)) if $col eq 'twice';
	return 0 if $col eq 'ingest_slot';
	return 'x';
}

# bad_row(cols, row): the row spoilt one way or another, as PostgreSQL's
# COPY would refuse it (or, for 'check', the owner's check)
sub bad_row
{
	my ($cols, $row) = @_;
	my %at = map { $cols->[$_] => $_ } 0 .. $#$cols;
	my $how = pick(qw(numeric null short extra check bool time));
	if ($how eq 'numeric') { $row->[ $at{value} ] = 'abc' }
	elsif ($how eq 'null') { $row->[ $at{version} ] = undef }
	elsif ($how eq 'short') { pop @$row }
	elsif ($how eq 'extra') { push @$row, '1' }
	elsif ($how eq 'check') { $row->[ $at{value} ] = '500000' }
	elsif ($how eq 'bool' && exists $at{deleted}) { $row->[ $at{deleted} ] = 'maybe' }
	elsif ($how eq 'time' && exists $at{event_time}) { $row->[ $at{event_time} ] = '2026-13-45 25:00' }
	else { $row->[ $at{version} ] = '1.5'; $how = 'version' }
	return $how;
}

# as_text(row, delimiter, null): a line of COPY's text format
sub as_text
{
	my ($row, $delim, $null) = @_;
	return join(
		$delim,
		map {
			my $v = $_;
			if (!defined $v) { $null }
			else
			{
				$v =~ s/\\/\\\\/g;
				$v =~ s/\t/\\t/g;
				$v =~ s/\Q$delim\E/\\$delim/g if $delim ne "\t";
				$v;
			}
		} @$row);
}

# as_csv(row, delimiter, quote, null): a line of COPY's CSV format
sub as_csv
{
	my ($row, $delim, $quote, $null) = @_;
	return join(
		$delim,
		map {
			my $v = $_;
			if (!defined $v) { $null }
			elsif ($v eq '' || $v eq $null || $v =~ /[\Q$delim$quote\E\r\n\\]|^\s|\s$/)
			{
				$v =~ s/\Q$quote\E/$quote$quote/g;
				"$quote$v$quote";
			}
			else { $v }
		} @$row);
}

# filtered(stderr): the messages psql printed, without their line numbers,
# exactonce's own DEBUG1 line apart and every other DEBUG message dropped
sub filtered
{
	my ($err) = @_;
	my (@kept, @path, $cur);
	for my $line (split /\n/, $err)
	{
		$line =~ s/^psql:[^:]*:\d+: //;
		if ($line =~ /^(DEBUG|ERROR|WARNING|NOTICE|LOG|INFO):/)
		{
			$cur = [$line];
			if ($line =~ /COPY into "dq.ingest" runs/) { push @path, $cur }
			elsif ($1 ne 'DEBUG') { push @kept, $cur }
		}
		elsif (defined $cur) { push @$cur, $line }
	}
	return (join("\n", map { @$_ } @kept), join("\n", map { @$_ } @path));
}

my (@differing, %taken, %refused, %unrefused, $statements, $with_rows, $failed);
for my $round (1 .. $rounds)
{
	my $shards = 1 + int(rand(4));
	my %alt;
	if ($round <= @refusing) { $alt{ $refusing[ $round - 1 ] } = 1 }
	elsif ($round == @refusing + 1) { $alt{$_} = 1 for @columns_of_owner }
	else
	{
		for (@columns_of_owner) { $alt{$_} = 1 if rand() < 0.5 }
		for (@refusing) { $alt{$_} = 1 if rand() < 0.1 }
		delete $alt{partition_trigger} if $alt{rowtrig};
	}
	my $setup = join(";\n", map { my $s = $alter_sql{$_}; $s =~ s/SHARDS/$shards/; $s } sort keys %alt);
	$node->safe_psql(
		$db, qq{
SET client_min_messages = warning;
SET ROLE dq_owner;
SELECT exactonce.create_pipeline('dq', ARRAY['region', 'desk'], shards => $shards, measures => ARRAY['qty']);
SELECT exactonce.pause('dq');
$setup;
});
	note "queue $round: $shards shards, " . (join(', ', sort keys %alt) || 'as made');
	my @optional = ('qty', 'deleted', 'event_time', ('note') x !!$alt{note}, ('vol') x !!$alt{volatile});

	for my $case (1 .. $cases)
	{
		# the columns: those a producer must give, some others, rarely one
		# that may not be given or one left out that must be
		my @cols = (qw(key version value region desk), grep { rand() < 0.5 } @optional);
		my $odd = rand();
		if ($odd < 0.04 && $alt{twice}) { push @cols, 'twice' }
		elsif ($odd < 0.08) { push @cols, 'ingest_slot' }
		elsif ($odd < 0.11) { @cols = grep { $_ ne 'desk' } @cols }
		@cols = shuffle(@cols);
		my $size = pick(0, 1, 3, 10, 40, 200, 999, 1001, 2500);
		my @rows = map { [ map { random_value($_) } @cols ] } 1 .. $size;
		my $bad = '';
		$bad = bad_row(\@cols, $rows[ int(rand(@rows)) ]) if @rows && rand() < 0.25;

		my $format = pick(qw(text text csv csv binary));
		$format = 'csv' if $format eq 'binary' && $bad =~ /^(numeric|short|extra|bool|time|version)$/;
		my ($options, $data);
		if ($format eq 'text')
		{
			my $delim = rand() < 0.3 ? '|' : "\t";
			my $null = rand() < 0.3 ? 'NA' : '\N';
			my @o;
			push @o, "DELIMITER '|'" if $delim eq '|';
			push @o, "NULL 'NA'" if $null eq 'NA';
			push @o, "ENCODING 'LATIN1'" if rand() < 0.1;
			$options = @o ? ' (' . join(', ', @o) . ')' : '';
			$data = join('', map { as_text($_, $delim, $null) . "\n" } @rows) . "\\.\n";
		}
		elsif ($format eq 'csv')
		{
			my $delim = rand() < 0.3 ? ';' : ',';
			my $quote = rand() < 0.3 ? "'" : '"';
			my $null = rand() < 0.3 ? 'NA' : '';
			my @o = ('FORMAT csv');
			push @o, "DELIMITER '$delim'" if $delim ne ',';
			push @o, "QUOTE ''''" if $quote eq "'";
			push @o, "NULL 'NA'" if $null eq 'NA';
			my $header = rand() < 0.4;
			push @o, 'HEADER' if $header;
			push @o, 'FORCE_NULL (qty)' if grep({ $_ eq 'qty' } @cols) && rand() < 0.3;
			push @o, 'FORCE_NOT_NULL (note)' if grep({ $_ eq 'note' } @cols) && rand() < 0.3;
			$options = ' (' . join(', ', @o) . ')';
			$data = ($header ? join($delim, @cols) . "\n" : '')
			  . join('', map { as_csv($_, $delim, $quote, $null) . "\n" } @rows) . "\\.\n";
		}

		# binary from a server file the superuser writes from the same rows
		my $from = 'STDIN';
		if ($format eq 'binary')
		{
			my $file = "$dir/copy_$round\_$case.bin";
			my $list = join(', ', @cols);
			$node->safe_psql($db,
				    "CREATE TABLE dq_src AS SELECT $list FROM dq.ingest WITH NO DATA;\n"
				  . "COPY dq_src ($list) FROM STDIN;\n"
				  . join('', map { as_text($_, "\t", '\N') . "\n" } @rows)
				  . "\\.\nCOPY dq_src TO '$file' (FORMAT binary); DROP TABLE dq_src;");
			($from, $options, $data) = ("'$file'", ' (FORMAT binary)', '');
		}

		my $shown = join(', ',
			'tableoid::regclass', 'ingest_id', 'ingest_slot', 'key', 'version', 'value', 'region', 'desk',
			'qty', 'deleted',
			(grep({ $_ eq 'event_time' } @cols) ? 'event_time' : 'event_time >= transaction_timestamp()'),
			('note') x !!$alt{note}, ('twice') x !!$alt{twice}, ('vol') x !!$alt{volatile});
		my $fired = $alt{stmt} ? 'SELECT what, count(*) FROM dq.fired GROUP BY 1 ORDER BY 1;' : '';
		my $copy = 'COPY dq.ingest (' . join(', ', @cols) . ") FROM $from$options;\n$data";
		my (%out, %err, %path);
		for my $on ('on', 'off')
		{
			my $script = qq{SET ROLE dq_owner;
SET exactonce.queue_copy = $on;
BEGIN;
SELECT setval(pg_get_serial_sequence('dq.ingest', 'ingest_id'), 1000000);
SET client_min_messages = debug1;
$copy\\echo rows :ROW_COUNT
RESET client_min_messages;
SELECT $shown FROM dq.ingest ORDER BY ingest_id;
$fired
ROLLBACK;
};
			my ($rc, $out, $err) = $node->psql($db, $script, on_error_stop => 0);
			# a failing row shows the time its event_time defaulted to
			$err =~ s/\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\+00/(time)/g
			  unless grep { $_ eq 'event_time' } @cols;
			$out{$on} = $out;
			($err{$on}, $path{$on}) = filtered($err);
		}
		$statements++;
		$with_rows++ if $out{off} =~ /^rows [1-9]/m;
		$failed++ if $err{off} =~ /^ERROR/m;
		my $what = "queue $round, statement $case: $format, " . scalar(@rows) . " rows of ("
		  . join(', ', @cols) . ")$options" . ($bad ? ", a bad row ($bad)" : '');
		if ($out{on} ne $out{off} || $err{on} ne $err{off})
		{
			push @differing,
			  "$what\n--- on\n$out{on}$err{on}\n--- off\n$out{off}$err{off}";
		}
		push @differing, "$what: a DEBUG1 message with the path off: $path{off}" if $path{off} ne '';

		# which COPY ran
		my ($needs) = grep { $alt{$_} && !($_ eq 'volatile' && grep({ $_ eq 'vol' } @cols)) } @refusing;
		if ($path{on} =~ /runs on exactonce's path/)
		{
			$taken{ $needs // 'none' }++;
			$unrefused{$needs}++ if defined $needs;
		}
		elsif ($path{on} =~ /runs as PostgreSQL's/)
		{
			my ($r) = grep { $path{on} =~ $refusal{$_} } sort keys %refusal;
			$refused{ $r // 'unknown' }++;
			$unrefused{"$needs (said: $path{on})"}++ if !defined $needs || !defined $r || $r ne $needs;
		}
		elsif ($err{on} !~ /^ERROR/m || $err{on} !~ /does not exist|generated column/)
		{
			# only a statement PostgreSQL refuses before opening the
			# table, a column unknown, may go without the message
			push @differing, "$what: no DEBUG1 message with the path on\n$err{on}";
		}
	}
	$node->safe_psql($db, "SET ROLE dq_owner; SELECT exactonce.drop_pipeline('dq', force => true)");
}

note "$statements statements, $with_rows with rows, $failed refused by PostgreSQL's COPY too";
note 'the path taken: ' . join(', ', map { "$_ $taken{$_}" } sort keys %taken);
note 'PostgreSQL\'s COPY, for: ' . join(', ', map { "$_ $refused{$_}" } sort keys %refused);
is(scalar(@differing), 0, 'every statement has the same rows, count, triggers and errors both ways')
  or diag(join("\n\n", @differing[ 0 .. ($#differing < 2 ? $#differing : 2) ]));
cmp_ok($taken{none} // 0, '>=', $statements / 3, 'the path runs the statements of queues that allow it');
cmp_ok($with_rows, '>=', $statements / 4, 'a good part of the statements copy rows');
cmp_ok($failed, '>=', 3, 'some statements fail');
is_deeply(\%unrefused, {}, 'a queue that needs PostgreSQL\'s COPY gets it, with the reason said');
for my $r (sort keys %refusal)
{
	cmp_ok($refused{$r} // 0, '>', 0, "PostgreSQL's COPY runs where the queue has $r");
}
unlike(slurp_file($node->logfile), qr/terminated by signal|reference leak/, 'no backend crashed or leaked');
done_testing();
