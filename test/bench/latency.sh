#!/bin/bash
# test/bench/latency.sh: latency of a paced stream, for each build of the
# extension and each shared_buffers given, in one run on one machine.
#
#   bash test/bench/latency.sh "1GB 32GB" base=old/exactonce.so new=exactonce.so
#
# For each build (NAME=PATH of an exactonce.so; the SQL scripts installed
# are the same for all) and each shared_buffers: a cluster with the
# workers preloaded (exactonce.workers 16, fsync and synchronous_commit
# on), a 4-shard pipeline, and tools/producer sending 1,000,000 events (or
# EVENTS) at
# 50,000 events/s in batches of 1,000.  It prints the p50 and p99 latency
# of the last batches (exactonce.pipelines: oldest event of a batch,
# insert to commit) and checks the aggregates against the producer's truth.
#
# It runs where PostgreSQL 15 and the producer are on PATH, or on the
# 16-core device machine from the bundle of ../shared/device/bundle.sh:
#
#   run  carry: [".device-bundle"]
#        command: BUNDLE=.device-bundle bash test/bench/latency.sh "1GB 32GB" base=... new=...
#
# Output goes to stdout and $OUT/latency.txt.
set -u
SBLIST=${1:-"1GB 32GB"}
EVENTS=${EVENTS:-1000000}
shift
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee "$O/latency.txt") 2>&1
if [ -n "${BUNDLE:-}" ]; then
	tar -xJf "$BUNDLE/pg.tar.xz" -C / && mkdir -p /opt && tar -xJf "$BUNDLE/pglibs.tar.xz" -C /opt || exit 1
	export LD_LIBRARY_PATH=/opt/pglibs
fi
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
export PATH=$PGBIN:$PATH:$(cd "$(dirname "$0")/../../tools" && pwd)
command -v producer >/dev/null || { echo "latency.sh: no producer on PATH or in tools/ (make -C tools)" >&2; exit 2; }
LIB=$(pg_config --pkglibdir)
id postgres >/dev/null 2>&1 || useradd -m postgres 2>/dev/null ||
	{ echo "postgres:x:990:990::/tmp:/bin/sh" >>/etc/passwd; echo "postgres:x:990:" >>/etc/group; }
as_pg() { runuser -u postgres -- env LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} PATH=$PATH "$@"; }
echo "machine: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GB"
W=${W:-/tmp/eo-latency}
rm -rf "$W"
mkdir -p "$W"
chown postgres "$W"
as_pg initdb -D "$W/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$W/initdb.log" || exit 1
cat >>"$W/data/postgresql.conf" <<CONF
port = 5432
listen_addresses = ''
unix_socket_directories = '$W'
shared_preload_libraries = 'exactonce'
exactonce.database = 'postgres'
exactonce.workers = 16
max_worker_processes = 64
shared_buffers = 1GB
max_wal_size = 16GB
fsync = on
synchronous_commit = on
CONF
export PGHOST=$W PGPORT=5432 PGUSER=postgres PGDATABASE=postgres PGOPTIONS="-c client_min_messages=warning"
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
cp "$LIB/exactonce.so" "$W/installed.so"
summary=()
for build in "$@"; do
	name=${build%%=*}
	so=${build#*=}
	# never over a library a running server has mapped: it would crash
	as_pg pg_ctl -D "$W/data" -m fast -w stop >/dev/null 2>&1
	rm -f "$LIB/exactonce.so"
	cp "$so" "$LIB/exactonce.so"
	for sb in $SBLIST; do
		sed -i "s/^shared_buffers = .*/shared_buffers = $sb/" "$W/data/postgresql.conf"
		as_pg pg_ctl -D "$W/data" -m fast -w stop >/dev/null 2>&1
		as_pg pg_ctl -D "$W/data" -l "$W/server.log" -w -t 300 start >/dev/null || { tail "$W/server.log"; exit 1; }
		q -c "DROP EXTENSION IF EXISTS exactonce CASCADE; DROP TABLE IF EXISTS lat_truth; CREATE EXTENSION exactonce"
		q -c "SELECT exactonce.create_pipeline('lat', ARRAY['risk_type','region','trade_desk'], shards => 4)" >/dev/null
		producer -q -p lat --events $EVENTS --trades $((EVENTS / 5)) --rate 50000 --batch 1000 --seed 7 -T lat_truth \
			>/dev/null 2>"$W/producer.err" || tail -2 "$W/producer.err"
		sleep 2
		lat=$(q -c "SELECT latency_p50 || ' / ' || latency_p99 FROM exactonce.pipelines WHERE name = 'lat'")
		diff=$(q -c "SELECT count(*) FROM ((SELECT risk_type, region, trade_desk, level, total, keys FROM lat.aggregates
			EXCEPT ALL SELECT * FROM lat_truth) UNION ALL (SELECT * FROM lat_truth
			EXCEPT ALL SELECT risk_type, region, trade_desk, level, total, keys FROM lat.aggregates)) d")
		line="$name, shared_buffers $sb: p50 / p99 $lat; rows differing from the truth: $diff"
		echo "$line"
		summary+=("$line")
		q -c "SELECT exactonce.drop_pipeline('lat', force => true)" >/dev/null
	done
done
as_pg pg_ctl -D "$W/data" -m fast -w stop >/dev/null
rm -f "$LIB/exactonce.so"
cp "$W/installed.so" "$LIB/exactonce.so"
echo "== paced 50,000 events/s in batches of 1,000, 4 shards"
printf '%s\n' "${summary[@]}"
echo "target: p99 at most 25 ms with shared_buffers 1GB and at most 40 ms with 32GB, exact"
