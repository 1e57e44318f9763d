#!/usr/bin/env bash
# Fork-join benchmark: magpie's pool against Rayon, OpenMP tasks and oneTBB.
#
# Builds every twin into build/forkjoin/ (Rayon into build/forkjoin/rayon-target; nothing is
# written into the source tree), then runs them interleaved -- each round runs every workload
# on every implementation once, in a rotating order -- with the same thread count. Each run
# does one warm-up plus REPS timed repetitions and reports its median; the table shows the
# median of those over the rounds, and magpie's time divided by each twin's.
#
#   loadtest/forkjoin/compare.sh                 3 rounds, 2 threads, 5 reps
#   THREADS=2 ROUNDS=5 REPS=7 WORKLOADS="fib35 sort" loadtest/forkjoin/compare.sh
#
# Needs gcc with -fopenmp, libtbb-dev, cargo and librust-rayon-dev (Debian; offline build).
set -euo pipefail
cd "$(dirname "$0")/../.."

threads=${THREADS:-2}
rounds=${ROUNDS:-3}
reps=${REPS:-5}
workloads=${WORKLOADS:-"fib35 fib40c tree20 sum sort"}
run_timeout=${RUN_TIMEOUT:-120}
out=build/forkjoin
src=loadtest/forkjoin
mkdir -p "$out"

# The peers' packages: only the missing ones, as the Makefile's install steps do.
.ci/deps.sh libtbb-dev cargo librust-rayon-dev || exit 1

echo "== building into $out/"
# magpie: the pool sources with the flags of the Makefile's release libmagpie (-O2 -g).
gcc -std=c11 -D_GNU_SOURCE -O2 -g -pthread -Iruntime/include -Iruntime/src -I"$src" runtime/src/pool/*.c runtime/src/testhook.c \
    "$src/bench_magpie.c" -o "$out/bench_magpie"
gcc -std=c11 -D_GNU_SOURCE -O2 -g -fopenmp -I"$src" "$src/bench_omp.c" -o "$out/bench_omp"
g++ -std=c++17 -O2 -g -I"$src" "$src/bench_tbb.cpp" -ltbb -o "$out/bench_tbb"
# Debian's toolchain explicitly: a rustup one earlier in PATH would not match the table.
(cd "$src/rayon" && RUSTC=/usr/bin/rustc CARGO_TARGET_DIR="$PWD/../../../$out/rayon-target" \
    /usr/bin/cargo build --release --offline -q)

bin_magpie=$out/bench_magpie
bin_openmp=$out/bench_omp
bin_tbb=$out/bench_tbb
bin_rayon=$out/rayon-target/release/forkjoin-rayon
impls=(magpie rayon openmp tbb)

results=$out/results.txt
: >"$results"
echo "== $rounds rounds x {$workloads} x {${impls[*]}}, $threads threads, $reps reps each"
for ((r = 0; r < rounds; r++)); do
    for w in $workloads; do
        for ((k = 0; k < ${#impls[@]}; k++)); do
            impl=${impls[$(((k + r) % ${#impls[@]}))]}
            bin_var=bin_$impl
            line=$(OMP_NUM_THREADS=$threads timeout "$run_timeout" "${!bin_var}" "$w" "$threads" "$reps" ||
                echo "$impl $w threads=$threads median_ms=NaN")
            echo "$line"
            echo "$line" >>"$results"
        done
    done
done

echo
echo "== medians over $rounds rounds ($(nproc) CPUs, $threads threads; $(uname -r))"
awk -v workloads="$workloads" '
function median(key,   n, i, j, t, v) {
    n = split(vals[key], v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n == 0 ? "NaN" : (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2)
}
function range(key,   n, i, v, lo, hi) {
    n = split(vals[key], v, " ")
    if (n == 0) return "-"
    lo = hi = v[1] + 0
    for (i = 2; i <= n; i++) { if (v[i] + 0 < lo) lo = v[i] + 0; if (v[i] + 0 > hi) hi = v[i] + 0 }
    return sprintf("%.1f-%.1f", lo, hi)
}
{
    split($4, m, "=")
    vals[$1 "," $2] = vals[$1 "," $2] " " m[2]
}
END {
    printf "%-8s %12s %12s %12s %12s %10s %10s %10s\n", "workload", "magpie ms", "rayon ms", "openmp ms", "tbb ms", "/rayon", "/openmp", "/tbb"
    nw = split(workloads, ws, " ")
    for (i = 1; i <= nw; i++) {
        w = ws[i]
        mg = median("magpie," w); ry = median("rayon," w); om = median("openmp," w); tb = median("tbb," w)
        printf "%-8s %12.2f %12.2f %12.2f %12.2f %10.2f %10.2f %10.2f\n", w, mg, ry, om, tb, mg / ry, mg / om, mg / tb
        printf "%-8s %12s %12s %12s %12s   (min-max over rounds)\n", "", range("magpie," w), range("rayon," w), range("openmp," w), range("tbb," w)
        if (w == "tree20")
            printf "%-8s %12.2f %12.2f %12.2f %12.2f   (ns per fork: 2^20 - 1 joins)\n", "  ns/fork", mg * 1e6 / 1048575, ry * 1e6 / 1048575, om * 1e6 / 1048575, tb * 1e6 / 1048575
    }
}' "$results"
