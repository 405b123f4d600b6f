# test/bench/three-clusters.sh, sourced by moves.sh and coordinator-cpu.sh:
# three throwaway clusters (tools/cluster.sh) in $BASE from port $PORT0, a
# coordinator and two nodes, with the postgresql.conf lines of array CONF
# if set, and on the coordinator the distributed pipeline dtrades over both
# nodes and the producers' truth for test/bench/coordinator-load.sql
# (table load_log).
# Sets psql_on, names, C (the coordinator's socket and port); the clusters
# stop when the script exits.
psql_on() { local dir=$1 port=$2; shift 2; PGHOST=$dir PGPORT=$port psql -X -q -At -v ON_ERROR_STOP=1 -U postgres -d postgres "$@"; }
names=(coordinator node1 node2)
rm -rf "$BASE"; mkdir -p "$BASE"; chown postgres: "$BASE"
for i in 0 1 2; do bash tools/cluster.sh start "$BASE/${names[$i]}" $((PORT0 + i)) "max_prepared_transactions = 10" ${CONF[@]+"${CONF[@]}"} >/dev/null; done
trap 'for n in "${names[@]}"; do bash tools/cluster.sh stop "$BASE/$n" immediate >/dev/null; done' EXIT
for i in 1 2; do psql_on "$BASE/${names[$i]}" $((PORT0 + i)) -c "CREATE EXTENSION exactonce" >/dev/null; done
C=("$BASE/coordinator" $PORT0)
psql_on "${C[@]}" >/dev/null <<SQL
CREATE EXTENSION exactonce; CREATE EXTENSION postgres_fdw;
CREATE SERVER node1 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$BASE/node1', port '$((PORT0 + 1))', dbname 'postgres');
CREATE SERVER node2 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$BASE/node2', port '$((PORT0 + 2))', dbname 'postgres');
CREATE USER MAPPING FOR postgres SERVER node1 OPTIONS (user 'postgres');
CREATE USER MAPPING FOR postgres SERVER node2 OPTIONS (user 'postgres');
SET client_min_messages = warning;
SELECT exactonce.create_distributed_pipeline('dtrades', ARRAY['risk_type', 'region', 'trade_desk'], ARRAY['node1', 'node2']::name[]);
CREATE TABLE load_log (key text, version bigint, value numeric, risk_type text, region text, trade_desk text);
CREATE SEQUENCE load_seq;
SQL
cp test/bench/coordinator-load.sql "$BASE/load.sql"; chown postgres: "$BASE/load.sql"
