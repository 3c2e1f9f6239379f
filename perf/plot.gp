# perf/plot.gp — one clustered bar chart from a whitespace table whose first
# row names the series (the sides compared) and whose first column labels
# the groups.  Called by perf/bench_report.py:
#   gnuplot -e "datafile='x.dat'; outfile='x.png'; ttl='...'; ylab='...'; ncol=3" perf/plot.gp
set terminal pngcairo size 900,480 noenhanced font ",10"
set output outfile
set title ttl
set ylabel ylab
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set key top left
set grid ytics
set yrange [0:*]
set xtics rotate by -20
plot for [i=2:ncol] datafile using i:xtic(1) title columnheader(i)
