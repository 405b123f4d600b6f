#!/usr/bin/env bash
# Two sessions race: session A claims a token (or ingests a batch of a
# source) in a transaction it holds open; session B does the same and must
# wait for A; then A commits or rolls back and B's answer must follow:
#
#	 once()			A commits: B gets false;  A rolls back: B gets true
#	 with payload	A commits: B gets EO002;  A rolls back: B gets true
#	 REPEATABLE READ	A commits: B gets a serialization failure (40001)
#	 new scope		A commits: B (another role) gets 42501
#	 ingest()		B skips what A committed, or takes all after A's rollback
#
# Waiting is never a fixed sleep: the script polls pg_stat_activity and
# pg_blocking_pids() for the state it expects, with a bound.
set -u
. "$(dirname "$0")/lib.sh"
DB=exactonce_test
WORK=$(mktemp -d)
trap 'exec 3>&- 2>/dev/null; rm -rf "$WORK"' EXIT

psql -X -q -d $DB >/dev/null 2>&1 <<'SQL'
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_race_a;
DROP ROLE IF EXISTS regress_race_b;
CREATE ROLE regress_race_a;
CREATE ROLE regress_race_b;
SELECT exactonce.create_pipeline('race', ARRAY['a']);
-- batch(lo, hi): the events at offsets lo..hi of one log partition
CREATE FUNCTION race_batch(lo int, hi int) RETURNS bigint LANGUAGE sql AS $$
	SELECT exactonce.ingest('race', 'log:0',
		(SELECT array_agg(e ORDER BY e.off) FROM (SELECT g AS off, 'k' || g AS key, 1::bigint AS version,
			g::numeric AS value, 'x' AS a FROM generate_series(lo, hi) g) e),
		ARRAY(SELECT generate_series(lo, hi)::bigint))
$$;
SQL

# wait_exit PID: poll until a background process has ended (bounded), then
# reap it
wait_exit() {
	for _ in $(seq 1 600); do
		kill -0 "$1" 2>/dev/null || { wait "$1"; return 0; }
		sleep 0.1
	done
	return 1
}

# race NAME A_SQL B_SQL END: session A runs A_SQL in a transaction it keeps
# open; session B runs B_SQL, which must block on A; A ends with END.  Sets
# a_out and b_out to what each session printed.
race() {
	local name=$1 a_pid b_pid
	rm -f "$WORK/a.in"
	mkfifo "$WORK/a.in"
	PGAPPNAME=race_a psql -X -A -t -q -d $DB <"$WORK/a.in" >"$WORK/a.out" 2>&1 &
	a_pid=$!
	exec 3>"$WORK/a.in"
	printf '%s\n' "$2" >&3
	poll_until $DB "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'race_a'
		AND state = 'idle in transaction' AND (query LIKE '%exactonce.%' OR query LIKE '%race_batch%'))"
	ok $? "$name: session A holds its transaction open"

	PGAPPNAME=race_b psql -X -A -t -q -d $DB >"$WORK/b.out" 2>&1 <<<"$3" &
	b_pid=$!
	poll_until $DB "SELECT EXISTS (SELECT 1 FROM pg_stat_activity b, pg_stat_activity a
		WHERE b.application_name = 'race_b' AND a.application_name = 'race_a'
		AND a.pid = ANY (pg_catalog.pg_blocking_pids(b.pid)))"
	ok $? "$name: session B waits for session A"

	printf '%s\n' "$4" >&3
	exec 3>&-
	wait_exit $b_pid
	ok $? "$name: session B finished once A ended with ${4%;}"
	wait_exit $a_pid
	a_out=$(cat "$WORK/a.out")
	b_out=$(cat "$WORK/b.out")
}

race "commit" "BEGIN; SELECT exactonce.once('race', 'commit');" \
	"SELECT exactonce.once('race', 'commit');" "COMMIT;"
is "$a_out" t "commit: A claimed the token"
is "$b_out" f "commit: B got false after A committed"

race "rollback" "BEGIN; SELECT exactonce.once('race', 'rollback');" \
	"SELECT exactonce.once('race', 'rollback');" "ROLLBACK;"
is "$a_out" t "rollback: A claimed the token"
is "$b_out" t "rollback: B got true after A rolled back"
is "$(q $DB "SELECT exactonce.once('race', 'rollback')")" f "rollback: B's claim committed"

race "payload commit" "BEGIN; SELECT exactonce.once('race', 'pay-commit', 'x');" \
	"SELECT exactonce.once('race', 'pay-commit', 'y');
\\echo :LAST_ERROR_SQLSTATE" "COMMIT;"
is "$(tail -1 <<<"$b_out")" EO002 "payload commit: B got EO002 for its other payload"

race "payload rollback" "BEGIN; SELECT exactonce.once('race', 'pay-rollback', 'x');" \
	"SELECT exactonce.once('race', 'pay-rollback', 'y');" "ROLLBACK;"
is "$b_out" t "payload rollback: B claimed the token with its own payload"

race "repeatable read" "BEGIN; SELECT exactonce.once('race', 'rr');" \
	"BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT exactonce.once('race', 'rr');
\\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT exactonce.once('race', 'rr');" "COMMIT;"
is "$(tail -2 <<<"$b_out" | tr '\n' ' ')" "40001 f " "repeatable read: B got a serialization failure, and false when it retried"

race "new scope" "SET ROLE regress_race_a; BEGIN; SELECT exactonce.once('race-new-scope', 't');" \
	"SET ROLE regress_race_b;
SELECT exactonce.once('race-new-scope', 'u');
\\echo :LAST_ERROR_SQLSTATE" "COMMIT;"
is "$(tail -1 <<<"$b_out")" 42501 "new scope: the scope went to A's role, B's role is refused"

race "ingest commit" "BEGIN; SELECT race_batch(0, 9);" "SELECT race_batch(5, 14);" "COMMIT;"
is "$a_out" 10 "ingest commit: A queued offsets 0..9"
is "$b_out" 5 "ingest commit: B skipped 5..9 and queued 10..14"

race "ingest rollback" "BEGIN; SELECT race_batch(15, 19);" "SELECT race_batch(15, 24);" "ROLLBACK;"
is "$a_out" 5 "ingest rollback: A queued offsets 15..19, then rolled back"
is "$b_out" 10 "ingest rollback: B queued 15..24"

is "$(q $DB "SELECT exactonce.committed_offset('race', 'log:0')")" 24 "the committed offset is the last one committed"
q $DB "SELECT exactonce.flush('race')" >/dev/null
is "$(q $DB "SELECT ingested || ' ' || applied FROM exactonce.pipelines WHERE name = 'race'")" "25 25" \
	"the pipeline took each of the 25 offsets once"
is "$(q $DB "SELECT total || ' ' || keys FROM race.aggregates WHERE level = 0")" "300 25" "aggregates: the sum of 0..24"

psql -X -q -d $DB >/dev/null 2>&1 <<'SQL'
SET client_min_messages = warning;
SELECT exactonce.drop_pipeline('race');
DROP FUNCTION race_batch(int, int);
SELECT exactonce.forget(s, '0') FROM unnest(ARRAY['race', 'race-new-scope']) s;
DELETE FROM exactonce.once_scope WHERE scope IN ('race', 'race-new-scope');
DROP ROLE regress_race_a, regress_race_b;
SQL
