#!/usr/bin/env bash
# loadtest/bench-all.sh (`make bench-all`): every comparison of loadtest/, one after the other,
# into one build/bench/STAMP/.
#
#   make bench-all                     everything, full length (about an hour on 2 vCPUs)
#   BENCH_QUICK=1 make bench-all       every step's short mode: proves the pipeline (a few minutes)
#   STEPS="runtime-sched forkjoin" make bench-all      only those steps
#   OUT=build/bench/STAMP STEPS=plots loadtest/bench-all.sh    redraw a run's runtime.png,
#                                      forkjoin.png and summary.md (latency.png and cpu.png
#                                      are bench-http's, drawn when that step runs)
#   PUBLISH=1 make bench-all           also copy latency, cpu, runtime and forkjoin.png into
#                                      loadtest/img/ (what loadtest/README.md and README.md show)
#
# Steps (STEPS, in this order):
#   http            loadtest/load/bench-http.sh, every server and scenario under magpie-load:
#                   results.md, runs.csv, raw/, latency.png, cpu.png (BENCH_QUICK passed on)
#   runtime-sched   loadtest/runtime/compare.sh: the scheduler against Tokio  -> runtime-sched.md
#   runtime-sync    SUITE=sync: mutex, semaphore, MPMC, broadcast             -> runtime-sync.md
#   runtime-io      SUITE=io: TCP, UDP, spawn_blocking, file read             -> runtime-io.md
#   forkjoin        loadtest/forkjoin/compare.sh: the pool against Rayon, OpenMP and oneTBB
#                                                                             -> forkjoin.txt
# then runtime.png (each runtime workload's time, magpie over Tokio; below 1 is faster) and
# forkjoin.png (magpie's time over each peer's, by workload), and summary.md, which lists
# every step's outcome and table. One progress line per step, with the time left estimated
# from what each step usually takes, scaled by how the steps so far compared with that.
# A step that fails is reported and the next one runs; the exit status is 1 if any failed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
cd "$ROOT"

QUICK=${BENCH_QUICK:-0}
STEPS=${STEPS:-http runtime-sched runtime-sync runtime-io forkjoin}
STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT=${OUT:-$ROOT/build/bench/$STAMP}
mkdir -p "$OUT"

log() { printf '%s\n' "$*" >&2; }

# Seconds each step usually takes here (2 vCPUs), full and quick.
declare -A EST_FULL=([http]=2700 [runtime-sched]=60 [runtime-sync]=60 [runtime-io]=120 [forkjoin]=600)
declare -A EST_QUICK=([http]=90 [runtime-sched]=25 [runtime-sync]=25 [runtime-io]=40 [forkjoin]=90)
est() { if [[ $QUICK == 1 ]]; then echo "${EST_QUICK[$1]:-60}"; else echo "${EST_FULL[$1]:-60}"; fi; }

# The short modes of the steps that have no BENCH_QUICK of their own.
if [[ $QUICK == 1 ]]; then
    RT_ENV=(ROUNDS=1 INNER=3 WARMUP=1)
    FJ_ENV=(ROUNDS=1 REPS=1 WORKLOADS="fib40c sum sort")
else
    RT_ENV=()
    FJ_ENV=()
fi

run_step() { # STEP: runs it, output into $OUT
    case $1 in
    http) OUT=$OUT loadtest/load/bench-http.sh >"$OUT/http.log" 2>&1 ;;
    runtime-sched | runtime-sync | runtime-io)
        env "${RT_ENV[@]}" SUITE="${1#runtime-}" loadtest/runtime/compare.sh >"$OUT/$1.md" 2>"$OUT/$1.log"
        ;;
    forkjoin) env "${FJ_ENV[@]}" loadtest/forkjoin/compare.sh >"$OUT/forkjoin.txt" 2>"$OUT/forkjoin.log" ;;
    plots) ;; # nothing to run: the plots and summary.md below, again, from OUT's files
    *) log "bench-all: unknown step $1 (known: http runtime-sched runtime-sync runtime-io forkjoin)"; return 2 ;;
    esac
}

read -ra steps <<<"$STEPS"
left=0
for s in "${steps[@]}"; do left=$((left + $(est "$s"))); done
spent_est=0 spent_real=0 failed=()
declare -A RESULT=()
t_all=$SECONDS
log "bench-all: ${steps[*]}${BENCH_QUICK:+ (BENCH_QUICK=$BENCH_QUICK)}; output $OUT"
for i in "${!steps[@]}"; do
    s=${steps[$i]}
    # Time left: the estimates of the steps to come, scaled by how the steps so far did.
    scale=1
    ((spent_est > 0)) && scale=$(awk -v r="$spent_real" -v e="$spent_est" 'BEGIN { print r / e }')
    mins=$(awk -v l="$left" -v k="$scale" 'BEGIN { printf "%d", (l * k + 59) / 60 }')
    log "[$((i + 1))/${#steps[@]}] $s, about $mins min left"
    t0=$SECONDS
    if run_step "$s"; then
        RESULT[$s]="done in $((SECONDS - t0)) s"
    else
        RESULT[$s]="FAILED (exit $?) after $((SECONDS - t0)) s; see $OUT/$s.log"
        failed+=("$s")
        log "  $s: ${RESULT[$s]}"
    fi
    spent_real=$((spent_real + SECONDS - t0))
    spent_est=$((spent_est + $(est "$s")))
    left=$((left - $(est "$s")))
done

# ---- plots of the ratios
# runtime.dat: "suite/workload ratio", from each suite's table rows "| w | m | t | ratio |".
: >"$OUT/runtime.dat"
for suite in sched sync io; do
    [[ -s $OUT/runtime-$suite.md ]] || continue
    # The ratio of the two medians (the table's own is rounded to 0.01).
    awk -F'|' -v s="$suite" 'NF >= 6 && $5 ~ /^ *[0-9.]+ *$/ && $3 + 0 > 0 && $4 + 0 > 0 {
        gsub(/ /, "", $2); printf "%s:%s %.4g\n", s, $2, ($3 + 0) / ($4 + 0) }' "$OUT/runtime-$suite.md" >>"$OUT/runtime.dat"
    raw=$(sed -n 's/^Raw per-run medians: //p' "$OUT/runtime-$suite.md")
    [[ -n $raw && -f $raw ]] && cp "$raw" "$OUT/runtime-$suite-raw.txt"
done
# forkjoin.dat: "workload /rayon /openmp /tbb", from compare.sh's table of medians.
: >"$OUT/forkjoin.dat"
[[ -s $OUT/forkjoin.txt ]] && awk 'NF == 8 && $2 ~ /^[0-9.]+$/ && $8 ~ /^[0-9.]+$/ { print $1, $6, $7, $8 }' \
    "$OUT/forkjoin.txt" >"$OUT/forkjoin.dat"
if command -v gnuplot >/dev/null; then
    {
        echo "set terminal pngcairo size 800,500 noenhanced font ',10'"
        echo "set style data histogram; set style histogram cluster gap 1; set style fill solid 0.7"
        echo "set grid ytics; set xtics rotate by -40 font ',8'"
        if [[ -s $OUT/runtime.dat ]]; then
            echo "set output '$OUT/runtime.png'"
            echo "set title 'libmagpie against Tokio 1.24: time per operation, magpie / Tokio (below 1: magpie faster)'"
            echo "set ylabel 'magpie time / Tokio time (ratio of medians, log scale)'; set xlabel 'suite:workload'"
            echo "set logscale y; set yrange [*:2<*]"
            echo "plot '$OUT/runtime.dat' using 2:xtic(1) lc 1 title 'magpie / Tokio', 1 with lines lc rgb 'black' dashtype 2 title 'parity'"
        fi
        if [[ -s $OUT/forkjoin.dat ]]; then
            echo "set output '$OUT/forkjoin.png'"
            echo "set logscale y; set yrange [*:2<*]"
            echo "set title 'Fork-join pool: magpie time / peer time, by workload (below 1: magpie faster)'"
            echo "set ylabel 'magpie time / peer time (ratio of medians, log scale)'; set xlabel 'workload'; set key top left"
            echo "plot '$OUT/forkjoin.dat' using 2:xtic(1) lc 2 title 'magpie / Rayon', '' using 3 lc 3 title 'magpie / OpenMP', '' using 4 lc 4 title 'magpie / oneTBB', 1 with lines lc rgb 'black' dashtype 2 title 'parity'"
        fi
    } >"$OUT/ratios.gp"
    gnuplot "$OUT/ratios.gp" 2>"$OUT/ratios-gnuplot.log" || log "gnuplot failed (see $OUT/ratios-gnuplot.log)"
else
    log "no plots: gnuplot is not installed (apt-get install gnuplot-nox)"
fi

# ---- summary.md: what ran, and every table
shopt -s nullglob
pngs=("$OUT"/*.png)
{
    echo "# make bench-all, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: ${BENCH_QUICK:+BENCH_QUICK=$BENCH_QUICK }STEPS=\"$STEPS\" loadtest/bench-all.sh ($(((SECONDS - t_all + 30) / 60)) min)"
    echo "Machine: $(nproc) CPUs ($(sed -n 's/^model name\t*: //p' /proc/cpuinfo | head -1)), $(uname -sr), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    for s in "${steps[@]}"; do echo "- $s: ${RESULT[$s]:-not run}"; done
    echo
    [[ -s $OUT/results.md ]] && { echo "## HTTP (results.md)"; echo; cat "$OUT/results.md"; echo; }
    for suite in sched sync io; do
        [[ -s $OUT/runtime-$suite.md ]] && { echo "## Runtime against Tokio: $suite"; cat "$OUT/runtime-$suite.md"; echo; }
    done
    [[ -s $OUT/forkjoin.txt ]] && { echo "## Fork-join"; echo; echo '```'; sed -n '/^== medians/,$p' "$OUT/forkjoin.txt"; echo '```'; }
    echo
    echo "Plots: ${pngs[*]##*/}"
} >"$OUT/summary.md"
log "done: $OUT (summary.md; plots: ${pngs[*]##*/})"
if [[ ${PUBLISH:-0} == 1 ]]; then # the plots the READMEs show, at their stable names
    mkdir -p "$ROOT/loadtest/img"
    for f in latency cpu runtime forkjoin; do
        [[ -s $OUT/$f.png ]] && cp "$OUT/$f.png" "$ROOT/loadtest/img/$f.png" && log "published loadtest/img/$f.png"
    done
fi
((${#failed[@]} == 0)) || { log "failed steps: ${failed[*]}"; exit 1; }
