#!/usr/bin/env bash
# bench/plot-ragbench.sh CSV OUTDIR — PNG plots from a `lazyinfer bench rag --csv` sweep (gnuplot):
#   OUTDIR/ttft-vs-rate.png    TTFT p50 (solid) and p99 (dashed) against the arrival rate, one
#                              colour per mode, one panel per KV budget
#   OUTDIR/hit-vs-budget.png   document hit ratio against the KV budget (GiB), one line per mode
set -eu
csv=$1; out=$2
mkdir -p "$out"
command -v gnuplot >/dev/null || { echo "plot-ragbench: gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)"; exit 1; }
# runs where no request completed (a budget too small for one request) have no TTFT to plot
served=$(mktemp)
trap 'rm -f "$served"' EXIT
awk -F, 'NR == 1 || $13 > 0' "$csv" >"$served"
[ "$(wc -l <"$served")" -gt 1 ] || { echo "plot-ragbench: no run in $csv served a request"; exit 1; }
csv=$served
modes=$(tail -n +2 "$csv" | cut -d, -f1 | sort -u)
budgets=$(tail -n +2 "$csv" | awk -F, '{print $4, $3}' | sort -n | awk '{print $2}' | uniq)  # by size
rates=$(tail -n +2 "$csv" | cut -d, -f2 | sort -u | wc -l)
tmp=$(mktemp -d)
for m in $modes; do
  for b in $budgets; do
    awk -F, -v m="$m" -v b="$b" 'NR > 1 && $1 == m && $3 == b {print $2, $8, $9}' "$csv" | sort -n >"$tmp/ttft-$m-$b"
  done
  # hit ratio against the budget at the highest rate
  awk -F, -v m="$m" 'NR > 1 && $1 == m {print $2, $4 / 1073741824, $12}' "$csv" | sort -k1,1n -k2,2n |
    awk '{r[$2] = $0} END {for (k in r) print r[k]}' | sort -k2,2n | cut -d' ' -f2,3 >"$tmp/hit-$m"
done
{
  echo "set terminal pngcairo size 1100,450 noenhanced"
  echo "set output '$out/ttft-vs-rate.png'"
  n=$(echo "$budgets" | wc -w)
  echo "set multiplot layout 1,$n title 'TTFT vs arrival rate ($(basename "$1"))'"
  for b in $budgets; do
    echo "set title 'KV budget $b'; set xlabel 'arrival rate (requests/s)'; set ylabel 'TTFT (ms)'; set key top left"
    [ "$rates" -le 1 ] && echo "set xrange [*:*]"
    plot="plot"; i=1
    for m in $modes; do
      plot="$plot '$tmp/ttft-$m-$b' using 1:2 with linespoints lc $i lw 2 title '$m p50', '$tmp/ttft-$m-$b' using 1:3 with linespoints lc $i dt 2 title '$m p99',"
      i=$((i + 1))
    done
    echo "${plot%,}"
  done
  echo "unset multiplot"
  echo "set output '$out/hit-vs-budget.png'"
  echo "set terminal pngcairo size 600,450 noenhanced"
  echo "set title 'document hit ratio vs KV budget'; set xlabel 'KV budget (GiB)'; set ylabel 'hit ratio'; set yrange [0:1]; set key top left"
  plot="plot"; i=1
  for m in $modes; do plot="$plot '$tmp/hit-$m' using 1:2 with linespoints lc $i lw 2 title '$m',"; i=$((i + 1)); done
  echo "${plot%,}"
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
rm -rf "$tmp"
echo "wrote $out/ttft-vs-rate.png $out/hit-vs-budget.png"
