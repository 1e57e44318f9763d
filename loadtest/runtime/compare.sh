#!/usr/bin/env bash
# compare.sh: libmagpie against Tokio on Tokio's rt_multi_threaded workloads.
#
#   loadtest/runtime/compare.sh                 # or: make bench
#   WORKERS=2 ROUNDS=5 INNER=20 loadtest/runtime/compare.sh
#
# Builds build/bench/magpie-bench (loadtest/runtime/bench.c + build/release/libmagpie.a + -luv) and
# build/bench/tokio-bench (loadtest/runtime/tokio, Debian's tokio 1.24.2, offline), then runs
# them interleaved: ROUNDS alternations; in each, every workload runs once in each program
# (--only NAME), the two back to back, the order swapped every alternation. Each run prints the
# median of INNER timed rounds (after WARMUP); the table shows, per workload, the median of
# those ROUNDS medians, in ns per operation.
#
# Environment:
#   WORKERS=2        worker threads, both runtimes
#   ROUNDS=5         alternations
#   INNER=20         timed rounds inside each run (plus WARMUP=3 untimed)
#   ONLY="a b"       only these workloads
#   MAGPIE_FLAGS=    extra flags for magpie-bench (e.g. --alloc)
#   TOKIO_FLAGS=     extra flags for tokio-bench (e.g. --no-drivers)
#   RUN_TIMEOUT=60   seconds one run may take before it is killed and reported as a hang
#   MAGPIE_BENCH_TIMEOUT=20  magpie-bench's own watchdog: seconds per round, then a diagnosis
#   NO_BUILD=1       use the binaries already in build/bench/
#   SUITE=sync       the sync primitives' rows (mutex, semaphore, MPMC, broadcast); target 0.8
#   SUITE=io         the I/O twins instead (loadtest/runtime/io_bench.c, tokio/src/io.rs):
#                    TCP connect round trips, UDP ping-pong, spawn_blocking round trips, a
#                    cached 4 KiB file read; target: every ratio <= 0.8
#
# Runs one benchmark process at a time. A run that crashes or hangs is reported (stderr, and
# under the table) and counted as failed; after a hang that program skips that workload in later
# alternations. Raw results: build/bench/compare-<time>.txt (.err: failure details).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

WORKERS=${WORKERS:-2}
ROUNDS=${ROUNDS:-5}
INNER=${INNER:-20}
WARMUP=${WARMUP:-3}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
MAGPIE_FLAGS=${MAGPIE_FLAGS:-}
TOKIO_FLAGS=${TOKIO_FLAGS:-}
SUITE=${SUITE:-sched}
out=build/bench
mkdir -p "$out"
if [ "$SUITE" = io ]; then
    ALL="tcp_connect_rtt udp_ping_pong spawn_blocking_rtt file_read_4k"
    magpie=$out/magpie-io-bench
    tokio=$out/tokio-io-bench
    TARGET=0.8
elif [ "$SUITE" = sync ]; then
    ALL="mutex_contention semaphore mpmc broadcast_fanout"
    magpie=$out/magpie-bench
    tokio=$out/tokio-bench
    TARGET=0.8
else
    ALL="spawn_many_local spawn_many_remote_idle yield_many ping_pong chained_spawn spawn_join_worker spawn_join_outside"
    magpie=$out/magpie-bench
    tokio=$out/tokio-bench
    TARGET=0.5
fi
ONLY=${ONLY:-$ALL}

# ---- build ----
if [ -z "${NO_BUILD:-}" ]; then
    echo "== building libmagpie and magpie-bench" >&2
    make --no-print-directory build/release/libmagpie.a >&2 ||
        { echo "compare.sh: make build/release/libmagpie.a failed" >&2; exit 1; }
    # libmagpie's reactor is libuv (Libs.private in runtime/magpie.pc.in).
    cc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iruntime/include loadtest/runtime/bench.c \
        build/release/libmagpie.a -luv -o "$out/magpie-bench"
    cc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iruntime/include loadtest/runtime/io_bench.c \
        build/release/libmagpie.a -luv -o "$out/magpie-io-bench"

    echo "== building tokio-bench (Debian's cargo and rustc, crates from /usr/share/cargo/registry)" >&2
    if [ ! -x /usr/bin/cargo ] || [ ! -x /usr/bin/rustc ] ||
        [ ! -d /usr/share/cargo/registry/tokio-1.24.2 ]; then
        echo "compare.sh: needs Debian's cargo, rustc and tokio crate: apt-get install cargo librust-tokio-dev" >&2
        exit 1
    fi
    # .cargo/config.toml is found from the working directory: build from inside the crate.
    (cd loadtest/runtime/tokio &&
        CARGO_HOME="$root/$out/cargo-home" CARGO_TARGET_DIR="$root/$out/tokio-target" \
            RUSTC=/usr/bin/rustc /usr/bin/cargo build --release --offline --quiet)
    cp "$out/tokio-target/release/tokio-bench" "$out/tokio-target/release/tokio-io-bench" "$out/"
fi
for b in "$magpie" "$tokio"; do
    [ -x "$b" ] || { echo "compare.sh: $b missing" >&2; exit 1; }
done

# ---- run ----
stamp=$(date -u +%Y%m%dT%H%M%SZ)
raw=$out/compare-$stamp.txt
errlog=$out/compare-$stamp.err
: >"$raw"
: >"$errlog"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t_start=$(date +%s)

# A program that hung in a workload is not run on it again (keeps the whole run bounded).
hung=" "
export MAGPIE_BENCH_TIMEOUT=${MAGPIE_BENCH_TIMEOUT:-20}

# run PROG LABEL WORKLOAD ALTERNATION: appends "LABEL WORKLOAD ns_per_op ns_total" or a failure.
run() {
    local prog=$1 label=$2 w=$3 a=$4 flags line rc err
    case $hung in *" $label/$w "*)
        echo "$label $w FAIL skipped" >>"$raw"
        return ;;
    esac
    if [ "$label" = magpie ]; then flags=$MAGPIE_FLAGS; else flags=$TOKIO_FLAGS; fi
    err=$(mktemp)
    set +e
    # shellcheck disable=SC2086
    line=$(timeout -k 5 "$RUN_TIMEOUT" "$prog" --workers "$WORKERS" --rounds "$INNER" \
        --warmup "$WARMUP" --only "$w" $flags 2>"$err")
    rc=$?
    set -e
    if [ $rc -eq 0 ] && [ "$(echo "$line" | cut -d' ' -f1)" = "$w" ]; then
        echo "$label $line" >>"$raw"
    else
        local why
        case $rc in
        0) why="bad output: $line" ;;
        124 | 137) why="hang: killed after ${RUN_TIMEOUT}s" ;;
        3) why="hang: watchdog" ;;
        4) why="runtime error" ;;
        *) if [ $rc -gt 128 ]; then why="crash: signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null))"; else why="exit $rc"; fi ;;
        esac
        echo "$label $w FAIL $rc" >>"$raw"
        case $rc in 3 | 124 | 137) hung="$hung$label/$w " ;; esac
        {
            echo "--- $label $w (alternation $a): $why"
            cat "$err"
        } | tee -a "$errlog" >&2
    fi
    rm -f "$err"
}

for a in $(seq 1 "$ROUNDS"); do
    echo "== alternation $a/$ROUNDS" >&2
    for w in $ONLY; do
        if [ $((a % 2)) -eq 1 ]; then
            run "$magpie" magpie "$w" "$a"
            run "$tokio" tokio "$w" "$a"
        else
            run "$tokio" tokio "$w" "$a"
            run "$magpie" magpie "$w" "$a"
        fi
    done
done
t_end=$(date +%s)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report ----
cpu=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^model name[[:space:]]*:[[:space:]]*//')
cmd="WORKERS=$WORKERS ROUNDS=$ROUNDS INNER=$INNER WARMUP=$WARMUP"
[ "$ONLY" != "$ALL" ] && cmd="$cmd ONLY=\"$ONLY\""
[ -n "$MAGPIE_FLAGS" ] && cmd="$cmd MAGPIE_FLAGS=\"$MAGPIE_FLAGS\""
[ -n "$TOKIO_FLAGS" ] && cmd="$cmd TOKIO_FLAGS=\"$TOKIO_FLAGS\""
[ "$SUITE" != sched ] && cmd="SUITE=$SUITE $cmd"
cmd="$cmd loadtest/runtime/compare.sh"

echo
echo "Machine: $(nproc) CPUs ($cpu), Linux $(uname -r); $(cc --version | head -1);"
echo "$(/usr/bin/rustc --version), tokio 1.24.2 (Debian). Load average before $load_before, after $load_after."
echo "Command: \`$cmd\` ($((t_end - t_start)) s of runs)"
echo "Each cell: median (and range) over $ROUNDS runs of each run's median of $INNER rounds, in ns per operation."
echo
echo "| workload | magpie median ns/op (range) | tokio median ns/op (range) | ratio magpie/tokio |"
echo "|---|---:|---:|---:|"
for w in $ONLY; do
    awk -v w="$w" '
        function sort(arr, n,    i, j, t) {
            for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
        }
        function median(arr, n) { return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2 }
        function cell(arr, n, nf) {
            if (!n) return "FAILED" (nf ? sprintf(" (%d of %d runs failed)", nf, nf) : "")
            sort(arr, n)
            return sprintf("%.1f (%.1f-%.1f)", median(arr, n), arr[1], arr[n]) (nf ? sprintf(", %d of %d runs failed", nf, nf + n) : "")
        }
        $2 == w && $1 == "magpie" { if ($3 == "FAIL") mf++; else m[++nm] = $3 }
        $2 == w && $1 == "tokio"  { if ($3 == "FAIL") tf++; else t[++nt] = $3 }
        END {
            ms = cell(m, nm, mf); ts = cell(t, nt, tf)
            r = (nm && nt) ? sprintf("%.2f", median(m, nm) / median(t, nt)) : "-"
            printf "| %s | %s | %s | %s |\n", w, ms, ts, r
        }' "$raw"
done
echo
# Targets: every ratio <= $TARGET (0.5 for the scheduler, 0.8 for I/O); spawn_join_worker <= 50 ns.
awk -v target="$TARGET" '
    function median(arr, n,    i, j, t) {
        for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
        return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    $3 != "FAIL" { k = $1 SUBSEP $2; v[k, ++n[k]] = $3; seen[$2] = 1 }
    END {
        miss = ""
        for (w in seen) {
            km = "magpie" SUBSEP w; kt = "tokio" SUBSEP w
            if (!n[km] || !n[kt]) { miss = miss " " w "(failed)"; continue }
            delete a; for (i = 1; i <= n[km]; i++) a[i] = v[km, i]; mm = median(a, n[km])
            delete b; for (i = 1; i <= n[kt]; i++) b[i] = v[kt, i]; mt = median(b, n[kt])
            if (mm / mt > target) miss = miss sprintf(" %s(ratio %.3f)", w, mm / mt)
            if (w == "spawn_join_worker" && mm > 50) miss = miss sprintf(" spawn_join_worker(%.1f ns > 50)", mm)
        }
        t = sprintf("every ratio <= %s%s", target, target == 0.5 ? ", spawn_join_worker <= 50 ns" : "")
        if (miss == "") print "Targets (" t "): met."
        else print "Targets (" t "): missed:" miss
    }' "$raw"
if [ -s "$errlog" ]; then
    echo
    echo "Failures (details in $errlog):"
    grep '^--- ' "$errlog" | sed 's/^--- /- /'
fi
echo
echo "Raw per-run medians: $raw"
