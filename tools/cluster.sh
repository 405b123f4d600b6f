#!/usr/bin/env bash
# tools/cluster.sh: a throwaway PostgreSQL 15 cluster for the demo and the
# benchmark, run as the postgres OS user (initdb refuses root).  The tests
# do not use it: they run on PostgreSQL's own harnesses.
#
#   tools/cluster.sh start DIR PORT [extra postgresql.conf lines...]
#   tools/cluster.sh stop DIR [mode]
#
# The socket lives in DIR; connect with PGHOST=DIR PGPORT=PORT.
set -euo pipefail

PGBIN=$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
[ -x "$PGBIN/initdb" ] || PGBIN=/usr/lib/postgresql/15/bin

as_postgres() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

cmd=$1; dir=$2
case "$cmd" in
start)
	port=$3; shift 3
	if [ -f "$dir/data/postmaster.pid" ] && as_postgres "$PGBIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
		echo "cluster.sh: a server is running in $dir; stop it first (tools/cluster.sh stop $dir)" >&2
		exit 1
	fi
	rm -rf "$dir"
	mkdir -p "$dir"
	[ "$(id -u)" = 0 ] && chown postgres: "$dir"
	as_postgres "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
	cat >>"$dir/data/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$dir'
shared_preload_libraries = 'exactonce'
shared_buffers = 1GB
max_wal_size = 4GB
fsync = on
synchronous_commit = on
log_min_messages = warning
log_line_prefix = '%m [%p] %b '
CONF
	for line in "$@"; do echo "$line" >>"$dir/data/postgresql.conf"; done
	as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
	;;
stop)
	mode=${3:-fast}
	as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -m "$mode" -w -t 120 stop >/dev/null || true
	;;
*)
	echo "usage: $0 start DIR PORT [conf...] | stop DIR [mode]" >&2
	exit 2
	;;
esac
