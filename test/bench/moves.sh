#!/usr/bin/env bash
# test/bench/moves.sh [SECONDS]: ranges of keys moved away and back while
# two pgbench clients insert through the coordinator (100 new keys per
# statement, so each statement reaches both nodes), for SECONDS (default
# 60).  Three throwaway clusters (tools/cluster.sh): a coordinator and two
# nodes.  Each range (16, r), r even, goes from node1 to node2 and back;
# a move that is refused is called once more.  It prints each refusal and
# how many moves were done and refused, each move's keys, duration and
# switch (how long it held the coordinator's producers, from its log), and
# checks the aggregates against the producers' rows.  Each move back
# reaches the node that gave the range away, whose refusal the move's row
# of exactonce.key_move lifts (docs/distributed.md); a move is never half
# done (given up, it is undone).
# Run as root or as the postgres OS user, after "make install".
set -uo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
BASE=/tmp/exactonce-moves; PORT0=55680
CONF=("log_min_messages = log")
source test/bench/three-clusters.sh
( cd "$BASE" && PGHOST="${C[0]}" PGPORT="${C[1]}" pgbench -n -U postgres -c 2 -T $SECS -f load.sql postgres >"$BASE/pgbench.out" 2>&1 ) &
LOAD=$!
sleep 2
ok=0; bad=0
# (16, r) for r even lives on node1 (2, 0) at first
for r in 0 2 4 6 8 10 12 14; do
  for target in node2 node1; do
    out=$(psql_on "${C[@]}" -c "SELECT exactonce.move_keys('dtrades', 16, $r, '$target')" 2>&1)
    if [[ "$out" =~ ^[0-9]+$ ]]; then ok=$((ok+1)); else bad=$((bad+1)); echo "move (16, $r) to $target: $out" | head -3;
      out=$(psql_on "${C[@]}" -c "SELECT exactonce.move_keys('dtrades', 16, $r, '$target')" 2>&1); echo "  again: $out" | head -2; fi
    kill -0 $LOAD 2>/dev/null || break 2
  done
done
wait $LOAD
psql_on "${C[@]}" -c "SELECT exactonce.flush('dtrades')" >/dev/null
diff=$(psql_on "${C[@]}" -c "WITH oracle AS (SELECT risk_type, region, trade_desk,
		3 - (GROUPING(risk_type) + GROUPING(region) + GROUPING(trade_desk)) AS level, sum(value) AS total, count(*) AS keys
	FROM load_log GROUP BY ROLLUP (risk_type, region, trade_desk)),
	agg AS (SELECT risk_type, region, trade_desk, level, total, keys FROM dtrades.aggregates)
	SELECT (SELECT count(*) FROM (SELECT * FROM agg EXCEPT ALL SELECT * FROM oracle) a)
	     + (SELECT count(*) FROM (SELECT * FROM oracle EXCEPT ALL SELECT * FROM agg) o)")
# the coordinator logs each move: its keys, its duration, its switch
grep -A1 'LOG:  moved [0-9]* keys' "$BASE/coordinator/server.log" |
	sed -n 's/.*moved \([0-9]*\) keys (\([0-9]*\), \([0-9]*\)) .* to server "\([a-z0-9]*\)" in \([0-9]*\) ms.*/\1 \2 \3 \4 \5/p; s/.*switch held .* for \([0-9]*\) ms until.*/switch \1/p' |
	awk '$1 == "switch" { print "  move (" m ", " r ") to " to ": " k " keys in " d " ms, switch " $2 " ms"; next }
		{ k = $1; m = $2; r = $3; to = $4; d = $5 }' | tee "$BASE/moves.txt"
sed -n 's/.*switch \([0-9]*\) ms$/\1/p' "$BASE/moves.txt" | sort -n |
	awk '{ v[NR] = $1 } END { if (NR) print "switch: median " v[int((NR + 1) / 2)] " ms, max " v[NR] " ms over " NR " moves" }'
echo "moves: $ok done, $bad refused; $(grep -o 'number of transactions actually processed: [0-9]*' "$BASE/pgbench.out") statements of the producers; cells differing from theirs: $diff"
[ "$diff" = 0 ] || exit 1
[ "$(psql_on "${C[@]}" -c "SELECT count(*) FROM pg_prepared_xacts")" = 0 ] || echo "a prepared transaction is left at the coordinator"
