# test/scripts/lib.sh: helpers for scripted tests that run against the
# cluster test/run.sh started (PGHOST, PGPORT, EXACTONCE_TEST_DIR) and print
# TAP lines.

PGBIN=$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
tap_n=0

# ok CONDITION-EXIT-STATUS DESCRIPTION: print one TAP line
ok() {
	tap_n=$((tap_n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $tap_n - $2"; else echo "not ok $tap_n - $2"; fi
}

# is GOT WANT DESCRIPTION
is() {
	if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3 (got '$1', want '$2')"; fi
}

# q DB SQL: one value
q() {
	psql -X -A -t -q -d "$1" -c "$2"
}

# wait_ready: poll until the server accepts connections (bounded)
wait_ready() {
	for _ in $(seq 1 600); do
		pg_isready -q -d postgres && psql -X -q -d postgres -c 'SELECT 1' >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

# poll_until DB SQL: poll until the query returns t (bounded, 60 s)
poll_until() {
	for _ in $(seq 1 600); do
		[ "$(q "$1" "$2" 2>/dev/null)" = t ] && return 0
		sleep 0.1
	done
	return 1
}

# pg_ctl_as_postgres ARGS...: run pg_ctl on the test cluster as its owner
pg_ctl_as_postgres() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$EXACTONCE_TEST_DIR/data" "$@"
	else
		"$PGBIN/pg_ctl" -D "$EXACTONCE_TEST_DIR/data" "$@"
	fi
}

# hold_open DB FILE SQL: run SQL in a transaction that stays open, in the
# background, until FILE exists; sets holder to its pid and waits (bounded)
# until the session is idle in its transaction
hold_open() {
	rm -f "$2"
	( echo "BEGIN; $3"
	  while [ ! -e "$2" ]; do sleep 0.1; done
	  echo "COMMIT;" ) | psql -X -q -d "$1" >/dev/null &
	holder=$!
	poll_until "$1" "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database())"
}

# release FILE: let hold_open's transaction commit, and wait for it
release() {
	touch "$1"
	wait "$holder"
}
