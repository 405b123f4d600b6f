# test/bench/scaling.gp: one sweep of test/bench/scaling.sh as a PNG: the
# worker drain's events/s (top), WAL bytes per event and the drain workers'
# peak RssAnon against the swept parameter.  scaling.sh calls it once per
# sweep with the rows of that sweep (scaling.csv's columns, no header):
#
#   gnuplot -e "data='ROWS.csv'; out='scaling-keys.png'; ttl='...'; xlab='...'; logbase=10; nbad=0" test/bench/scaling.gp
#
# logbase: 0 = linear x, otherwise the base of a logarithmic x axis; nbad:
# how many of the rows are not exact (their legend entry only when there are).
# haslat: 1 adds a panel of the p50 and p99 latency (the latency sweep).
# Columns used: 2 x, 4 events_per_s, 5 wal_b_per_ev, 6 peak_rss_kb, 7 exact,
# 15 p50_ms, 16 p99_ms.

# noenhanced: the titles hold names like exactonce.batch_size, no markup
set terminal pngcairo size 900,1000 font ",10" noenhanced
set output out
set datafile separator ','
set grid
set key top right
# room above the highest point for the legend
set offsets 0, 0, graph 0.15, 0
set xlabel xlab
# the x range a little wider than the swept values, so that the first and
# last points do not sit on the frame
stats data using 2 nooutput
if (logbase > 0) {
	set logscale x logbase
	# ticks at powers of the base (1, 2, 4 shards; decades of keys)
	set xtics 1, logbase
	set format x '%.0s%c'
	set xrange [STATS_min / 1.4 : STATS_max * 1.4]
} else {
	set xtics 1
	set xrange [STATS_min - 0.5 : STATS_max + 0.5]
}
# a point whose drain was not exact, marked red on every panel
bad(y) = (strcol(7) eq 'PASS' ? 1/0 : y)

if (!exists("haslat")) haslat = 0
set multiplot layout (haslat ? 4 : 3),1 title ttl
if (haslat) {
	set ylabel 'latency (ms)'
	set format y '%g'
	plot data using 2:16 with linespoints lw 2 pt 7 lc rgb '#800080' title 'p99', \
	     data using 2:15 with linespoints lw 2 pt 6 lc rgb '#c080c0' title 'p50'
}
set ylabel (haslat ? 'events/s (end to end)' : 'events/s (worker drain)')
set format y '%.0s%c'
set yrange [0:*]
plot data using 2:4 with linespoints lw 2 pt 7 lc rgb '#0000c0' title 'events/s', \
     data using 2:(bad($4)) with points pt 2 ps 2 lw 2 lc rgb '#c00000' title (nbad > 0 ? 'NOT exact' : '')
set ylabel 'WAL bytes per event'
set format y '%g'
plot data using 2:5 with linespoints lw 2 pt 7 lc rgb '#008000' title 'WAL B/event', \
     data using 2:(bad($5)) with points pt 2 ps 2 lw 2 lc rgb '#c00000' notitle
set ylabel 'peak RssAnon (MB)'
plot data using 2:($6 / 1024) with linespoints lw 2 pt 7 lc rgb '#a05000' title 'largest drain worker', \
     data using 2:(bad($6 / 1024)) with points pt 2 ps 2 lw 2 lc rgb '#c00000' notitle
unset multiplot
