#!/bin/bash
# test/bench/device-ab.sh: libraries of exactonce compared on one machine,
# taking turns, so that their figures share the machine's noise.
#
#   LIBS="installed .device-bundle/eo-119.so" ROUNDS=3 SECTIONS=scale SHARDS=16 TIMELINE=1 \
#       BUNDLE=.device-bundle bash test/bench/device-ab.sh
#
# Each of ROUNDS rounds runs test/bench/device.sh once per library, in the
# order given, with that library installed as exactonce.so; the other
# variables are device.sh's own (SECTIONS, SHARDS, EVENTS, TIMELINE, ...;
# its own ROUNDS is 1 here).  "installed" is the library installed when the
# script starts (the bundle's, with BUNDLE).  The SQL objects are the installed
# version's: a library of an older version runs on them as it would on an
# updated catalog before the restart (docs/upgrading.md says which do).
# Each run's output goes to $OUT/<n>-<library>-<round>/ (n: its place in
# LIBS); the last lines are
# every run's results, grouped by result and library.
set -u
O=${OUT:-/tmp/out}
ROUNDS=${ROUNDS:-3}
LIBS=${LIBS:?LIBS: the libraries to compare, paths or "installed"}
if [ -n "${BUNDLE:-}" ]; then
	tar -xJf "$BUNDLE/pg.tar.xz" -C / && mkdir -p /opt && tar -xJf "$BUNDLE/pglibs.tar.xz" -C /opt || exit 1
	[ -f "$BUNDLE/perf.tar.xz" ] && tar -xJf "$BUNDLE/perf.tar.xz" -C /opt
	export LD_LIBRARY_PATH=/opt/pglibs PATH=$PATH:/opt/perf
fi
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
L=$("$PGBIN/pg_config" --pkglibdir 2>/dev/null || echo /usr/lib/postgresql/15/lib)
keep=$(mktemp -d)
cp "$L/exactonce.so" "$keep/installed.so"
mkdir -p "$O"
for r in $(seq "$ROUNDS"); do
	k=0
	for lib in $LIBS; do
		k=$((k + 1))
		[ "$lib" = installed ] && lib=$keep/installed.so
		name=$k-$(basename "$lib" .so)
		cp "$lib" "$L/exactonce.so.new" && mv -f "$L/exactonce.so.new" "$L/exactonce.so" || exit 1
		echo "== $name, round $r"
		OUT=$O/$name-$r BUNDLE= ROUNDS=1 bash "$(dirname "$0")/device.sh" >/dev/null 2>&1
		sed -n '/^== results/,$p' "$O/$name-$r/device.txt" | tail -n +2 | sed "s/^/$name $r: /" | tee -a "$O/ab.txt"
	done
done
cp "$keep/installed.so" "$L/exactonce.so.new" && mv -f "$L/exactonce.so.new" "$L/exactonce.so"
rm -rf "$keep"
echo "== every run, by result"
awk '{ i = index($0, ": "); run = substr($0, 1, i - 1); line = substr($0, i + 2)
	j = index(line, ":"); key = j ? substr(line, 1, j - 1) : line
	if (!(key in seen)) { seen[key] = 1; order[++n] = key }
	runs[key] = runs[key] "  " run ": " (j ? substr(line, j + 2) : "") "\n" }
	END { for (k = 1; k <= n; k++) printf "%s\n%s", order[k], runs[order[k]] }' "$O/ab.txt"
