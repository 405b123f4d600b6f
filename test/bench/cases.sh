# test/bench/cases.sh: what the benchmarks that compare cases share
# (stream.sh, drain-cpu.sh); sourced, with D and P set to the throwaway
# cluster's directory and port.  A case is a line for postgresql.conf, a
# path to an exactonce.so to install for the run, "sql:STATEMENTS" that
# drain-cpu.sh runs once its pipeline is made, or "-" for none of these.

q() { PGHOST=$D PGPORT=$P psql -X -q -At -v ON_ERROR_STOP=1 -U postgres -d postgres "$@"; }

# cpu PIDS: the CPU time (1/100 s) of the processes listed, comma separated,
# from /proc/<pid>/stat
cpu() {
	local t=0 s f
	for pid in ${1//,/ }; do
		s=$(<"/proc/$pid/stat")
		read -ra f <<<"${s##*) }"    # the fields after the process name
		t=$((t + f[11] + f[12]))     # utime, stime
	done
	echo $t
}

# case_start CASE [CONF...]: installs the case's library, if it names one,
# and starts the cluster with two workers, CONF and the case's line
case_start() {
	local c=$1 conf=""
	shift
	if [[ $c == *.so ]]; then
		local lib
		lib=$(pg_config --pkglibdir)/exactonce.so
		cp "$c" "$lib.tmp" && mv -f "$lib.tmp" "$lib"
	elif [ "$c" != - ] && [[ $c != sql:* ]]; then
		conf=$c
	fi
	bash tools/cluster.sh start $D $P "exactonce.database = 'postgres'" "exactonce.workers = 2" "$@" "$conf" >/dev/null
}

# worker_pids: the drain workers' pids, comma separated, once all of them run
worker_pids() {
	until [ "$(q -c "SELECT count(*) = current_setting('exactonce.workers')::int FROM pg_stat_activity
		WHERE backend_type LIKE 'exactonce drain%'")" = t ]; do sleep 0.1; done
	q -c "SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE backend_type LIKE 'exactonce drain%'"
}
