#!/bin/bash
# test/bench/declared.sh: does a pipeline declared as a query cost what the
# same pipeline made with create_pipeline costs?  In one cluster, rounds of:
#
#   create_pipeline     dimensions, a measure, min and max, a distinct count
#   create_pipeline_as  the same, declared as the query
#   computed            the query with an expression key and a FILTER, which
#                       the queue computes as each event is inserted
#
# each sent the same events (INSERT into the queue, then flush()), the
# order of the three turned each round; medians of the INSERT and of the
# flush, their ratios to create_pipeline's, and each result checked against
# the query over the events.
#
#   bash test/bench/declared.sh [EVENTS] [ROUNDS]
#
# It runs where PostgreSQL 15 and the extension are installed.
set -u
EVENTS=${1:-200000}
ROUNDS=${2:-5}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
W=${W:-/tmp/eo-declared-bench}
as_pg() { runuser -u postgres -- env PATH=$PGBIN:$PATH PGOPTIONS="-c client_min_messages=warning" "$@"; }
[ "$(id -u)" = 0 ] || as_pg() { env PATH=$PGBIN:$PATH PGOPTIONS="-c client_min_messages=warning" "$@"; }
rm -rf "$W" && mkdir -p "$W" && chown postgres: "$W" 2>/dev/null
as_pg initdb -D "$W/data" -A trust >/dev/null || exit 1
cat >>"$W/data/postgresql.conf" <<EOF
port = 5497
unix_socket_directories = '$W'
shared_buffers = 1GB
max_wal_size = 8GB
EOF
as_pg pg_ctl -D "$W/data" -l "$W/log" -w start >/dev/null || exit 1
trap 'as_pg pg_ctl -D "$W/data" -m immediate -w stop >/dev/null' EXIT
psql() { as_pg psql -X -q -h "$W" -p 5497 -d postgres -v ON_ERROR_STOP=1 "$@"; }
echo "machine: $(nproc) cores; $EVENTS events, $ROUNDS rounds"
psql <<EOF
CREATE EXTENSION exactonce;
CREATE TABLE events AS
SELECT 'k' || (i % ($EVENTS / 2)) AS key, i::bigint AS version, round((i * 7919 % 100000) / 100.0, 2) AS value,
	(ARRAY['Delta', 'Vega', 'Gamma'])[1 + i % 3] AS risk_type,
	(ARRAY['AMER', 'EMEA', 'APAC'])[1 + (i / 3) % 3] AS region,
	(ARRAY['FX', 'Rates', 'Credit', 'Equity'])[1 + (i / 7) % 4] AS desk,
	round((i % 50) / 10.0, 1) AS qty, 'cp' || (i % 97) AS cp
FROM generate_series(1, $EVENTS) i;
CREATE VIEW stream AS SELECT * FROM (SELECT DISTINCT ON (key) * FROM events ORDER BY key, version DESC) l;
EOF
Q="SELECT risk_type, region, desk, sum(value) AS total, count(*) AS n, sum(qty) AS qty, min(value), max(value), count(DISTINCT cp) AS cps FROM stream GROUP BY ROLLUP (risk_type, region, desk)"
QC="SELECT risk_type, lower(region) AS region, desk, sum(value) AS total, count(*) FILTER (WHERE value > 500) AS big, sum(qty) AS qty, min(value), max(value), count(DISTINCT cp) AS cps FROM stream GROUP BY ROLLUP (risk_type, lower(region), desk)"
make_pipeline() {
	case $1 in
	create_pipeline) echo "SELECT exactonce.create_pipeline('b', ARRAY['risk_type', 'region', 'desk'], shards => 2, measures => ARRAY['qty'], min_max => ARRAY['value'], distinct_counts => ARRAY['cp'])" ;;
	create_pipeline_as) echo "SELECT exactonce.create_pipeline_as('b', \$q\$$Q\$q\$, shards => 2)" ;;
	computed) echo "SELECT exactonce.create_pipeline_as('b', \$q\$$QC\$q\$, shards => 2)" ;;
	esac
}
KINDS=(create_pipeline create_pipeline_as computed)
for r in $(seq 1 "$ROUNDS"); do
	for j in 0 1 2; do
		k=${KINDS[$(((j + r) % 3))]}
		psql -c "$(make_pipeline "$k")" >/dev/null
		psql -c "CHECKPOINT" >/dev/null
		ins=$(psql -At -c "SELECT extract(epoch FROM clock_timestamp())" -c "INSERT INTO b.ingest (key, version, value, risk_type, region, desk, qty, cp) SELECT key, version, value, risk_type, region, desk, qty, cp FROM events" -c "SELECT extract(epoch FROM clock_timestamp())" | awk 'NR==1{a=$1} END{printf "%.3f", $1-a}')
		fl=$(psql -At -c "SELECT extract(epoch FROM clock_timestamp())" -c "SELECT exactonce.flush('b')" -c "SELECT extract(epoch FROM clock_timestamp())" | awk 'NR==1{a=$1} END{printf "%.3f", $1-a}')
		q=$Q; [ "$k" = computed ] && q=$QC
		if [ "$k" = create_pipeline ]; then
			ok=$(psql -At -c "SELECT count(*) = 0 FROM ((SELECT risk_type, region, desk, total, keys, qty_sum, value_min, value_max, cp_distinct FROM b.aggregates EXCEPT ALL $Q) UNION ALL ($Q EXCEPT ALL SELECT risk_type, region, desk, total, keys, qty_sum, value_min, value_max, cp_distinct FROM b.aggregates)) d")
		else
			ok=$(psql -At -c "SELECT count(*) = 0 FROM ((SELECT * FROM b.result EXCEPT ALL $q) UNION ALL ($q EXCEPT ALL SELECT * FROM b.result)) d")
		fi
		echo "round $r $k insert $ins flush $fl exact $ok" | tee -a "$W/runs.txt"
		psql -c "SELECT exactonce.drop_pipeline('b')" >/dev/null
	done
done
echo
awk '{ins[$3] = ins[$3] " " $5; fl[$3] = fl[$3] " " $7; if ($9 != "t") bad = 1 }
function median(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
END {
	bi = median(ins["create_pipeline"]); bf = median(fl["create_pipeline"]);
	for (k in ins) printf "%-20s insert median %.3f s (%.2fx)   flush median %.3f s (%.2fx)\n", k, median(ins[k]), median(ins[k]) / bi, median(fl[k]), median(fl[k]) / bf;
	print bad ? "SOME RESULT DIFFERED FROM THE QUERY" : "every result equal to its query";
}' "$W/runs.txt"
