#!/bin/bash
# test/bench/defaults.sh: does a pipeline use the machine with the default
# settings?  The workers' drain of a pre-loaded queue, in one run on one
# machine, for:
#
#   defaults        nothing set but the preload (exactonce.workers -1:
#                   one per core, at most half of max_worker_processes,
#                   PostgreSQL's default 8); create_pipeline without shards
#   defaults, mwp   the same with max_worker_processes = 64
#   best hand-set   exactonce.workers = 16, shards => 16
#   old defaults    exactonce.workers = 2, shards => 2 (before 1.9)
#
# each checked exact against the producer's truth, with its ratio to the
# best hand-set drain.
#
#   bash test/bench/defaults.sh [EVENTS] [TRADES]
#
# It runs where PostgreSQL 15 and tools/producer are on PATH, or on the
# 16-core device machine from the bundle of ../shared/device/bundle.sh
# (BUNDLE=.device-bundle).  Output goes to stdout and $OUT/defaults.txt.
set -u
EVENTS=${1:-4000000}
TRADES=${2:-800000}
SB=${SB:-8GB}
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee "$O/defaults.txt") 2>&1
if [ -n "${BUNDLE:-}" ] && [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then
	tar -xJf "$BUNDLE/pg.tar.xz" -C / && mkdir -p /opt && tar -xJf "$BUNDLE/pglibs.tar.xz" -C /opt || exit 1
fi
[ -n "${BUNDLE:-}" ] && export LD_LIBRARY_PATH=/opt/pglibs
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
export PATH=$PGBIN:$PATH
id postgres >/dev/null 2>&1 || useradd -m postgres 2>/dev/null ||
	{ echo "postgres:x:990:990::/tmp:/bin/sh" >>/etc/passwd; echo "postgres:x:990:" >>/etc/group; }
as_pg() { runuser -u postgres -- env LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} PATH=$PATH "$@"; }
t() { date +%s.%N; }
c() { awk "BEGIN{printf \"%.3f\", $1}"; }
echo "machine: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GB"
W=${W:-/tmp/eo-defaults}
rm -rf "$W"
mkdir -p "$W"
chown postgres "$W"
as_pg initdb -D "$W/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$W/initdb.log" || exit 1
cp "$W/data/postgresql.conf" "$W/base.conf"
export PGHOST=$W PGPORT=5432 PGUSER=postgres PGDATABASE=postgres PGOPTIONS="-c client_min_messages=warning"
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
producer -q --events "$EVENTS" --trades "$TRADES" --duplicates 0.10 --stale 0.10 --tombstones 0.02 \
	--moves 0.10 --seed 42 --output "$W/events.copy" --truth-file "$W/truth.copy" || exit 1
chmod 644 "$W"/*.copy
COLS="key, version, value, risk_type, region, trade_desk, deleted, event_time"
best=0
summary=()
run() { # run NAME "CONF" SHARDS-ARGUMENT
	local name=$1 conf=$2 shards=$3
	cp "$W/base.conf" "$W/data/postgresql.conf"
	printf "port = 5432\nlisten_addresses = ''\nunix_socket_directories = '%s'\nshared_preload_libraries = 'exactonce'\nexactonce.database = 'postgres'\nshared_buffers = %s\nmax_wal_size = 32GB\n%b" \
		"$W" "$SB" "$conf" >>"$W/data/postgresql.conf"
	as_pg pg_ctl -D "$W/data" -m fast -w stop >/dev/null 2>&1
	as_pg pg_ctl -D "$W/data" -l "$W/server.log" -w -t 300 start >/dev/null || { tail "$W/server.log"; exit 1; }
	sleep 2
	q -c "DROP EXTENSION IF EXISTS exactonce CASCADE; DROP TABLE IF EXISTS truth; CREATE EXTENSION exactonce"
	q -c "CREATE TABLE truth (risk_type text, region text, trade_desk text, level integer, total numeric, keys bigint); COPY truth FROM '$W/truth.copy'"
	q -c "SELECT exactonce.create_pipeline('d', ARRAY['risk_type','region','trade_desk']$shards)" >/dev/null
	q -c "SELECT exactonce.pause('d')" >/dev/null
	q -c "COPY d.ingest ($COLS) FROM '$W/events.copy'"
	q -c CHECKPOINT
	local workers n t0 s eps diff
	workers=$(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'exactonce drain'")
	n=$(q -c "SELECT shards FROM exactonce.pipelines WHERE name = 'd'")
	t0=$(t)
	q -c "SELECT exactonce.resume('d')" >/dev/null
	until [ "$(q -c "SELECT queued = 0 AND staged = 0 FROM exactonce.pipelines WHERE name = 'd'")" = t ]; do sleep 0.05; done
	s=$(c "$(t)-$t0")
	eps=$(c "$EVENTS/$s")
	diff=$(q -c "SELECT count(*) FROM ((SELECT risk_type, region, trade_desk, level, total, keys FROM d.aggregates
		EXCEPT ALL SELECT * FROM truth) UNION ALL (SELECT * FROM truth
		EXCEPT ALL SELECT risk_type, region, trade_desk, level, total, keys FROM d.aggregates)) x")
	[ "$name" = "best hand-set" ] && best=$eps
	summary+=("$name: $workers workers, $n shards: $eps events/s; rows differing from the truth: $diff")
	echo "${summary[-1]}"
	q -c "SELECT exactonce.drop_pipeline('d', force => true)" >/dev/null
}
run "best hand-set" 'exactonce.workers = 16\nmax_worker_processes = 64\n' ", shards => 16"
run "defaults" '' ''
run "defaults, mwp" 'max_worker_processes = 64\n' ''
run "old defaults" 'exactonce.workers = 2\n' ", shards => 2"
as_pg pg_ctl -D "$W/data" -m fast -w stop >/dev/null
echo "== drain of $EVENTS events over $TRADES trades, pre-loaded"
for line in "${summary[@]}"; do
	eps=$(echo "$line" | sed -n 's/.*shards: \([0-9.]*\) events.*/\1/p')
	echo "$line = $(c "$eps/$best")x the best hand-set"
done
echo "target: defaults at least 0.8x the best hand-set"
