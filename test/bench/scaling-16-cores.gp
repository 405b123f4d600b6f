# test/bench/scaling-16-cores.gp: the 16-core figures of test/bench/device.sh
# as a PNG: the workers' drain against shards beside the COPY floors (top),
# and a distributed pipeline's end-to-end rate against its nodes (bottom).
# The data are the lines of one run of device.sh, copied below as written.
#
#   gnuplot test/bench/scaling-16-cores.gp     (writes scaling-16-cores.png)
set terminal pngcairo size 900,800 font ",10" noenhanced
set output 'test/bench/scaling-16-cores.png'
set grid
set key top left opaque
set multiplot layout 2,1
set logscale x 2
set xtics ('1' 1, '2' 2, '4' 4, '8' 8, '16' 16)
set xrange [0.8:20]
set format y '%.1s%c'
set ylabel 'events/s'

# device.sh, run 4 of docs/performance.md, 2026-11-27, 1.19 (16 cores,
# shared_buffers 8GB, 4M events over 800k keys)
$drain << EOD
1 187520
4 656167
16 2068252
EOD
set title 'Workers draining a pre-loaded queue, by shards (one worker each)'
set xlabel 'shards'
set yrange [0:3000000]
plot $drain using 1:2 with linespoints lw 2 pt 7 title 'drain', \
	$drain using 1:($1 * 187520) with lines dt 2 lc rgb '#888888' title 'linear from 1 shard', \
	2081247 with lines dt 3 lc rgb '#c03030' title 'COPY into a plain table, 8 sessions', \
	463097 with lines dt 3 lc rgb '#3060c0' title 'COPY into a plain table, 1 session'

$nodes << EOD
1 343554
2 600330
4 1057082
EOD
set title 'A distributed pipeline end to end, 8 sessions COPY through the coordinator, by nodes (4 cores each)'
set xlabel 'nodes'
set xrange [0.8:5]
set xtics ('1' 1, '2' 2, '4' 4)
set yrange [0:1600000]
plot $nodes using 1:2 with linespoints lw 2 pt 7 title 'through the coordinator', \
	$nodes using 1:($1 * 343554) with lines dt 2 lc rgb '#888888' title 'linear from 1 node', \
	1241079 with lines dt 3 lc rgb '#c03030' title 'the 4 nodes fed their own keys directly'
unset multiplot
