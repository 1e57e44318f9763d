#!/usr/bin/env bash
# scaling.sh: the scheduler and the fork-join pool at more workers than this project's 2-vCPU
# machines have, beside Tokio, Rayon, OpenMP and oneTBB in the same run.
#
#   loadtest/scaling.sh pack     # here: build every program into build/scaling/, with the
#                                # shared libraries they load, for a machine with no toolchain
#   loadtest/scaling.sh run      # there: run what pack built (LD_LIBRARY_PATH=build/scaling/lib)
#   WORKERS="2 4 8 16" ROUNDS=3 loadtest/scaling.sh run
#   loadtest/scaling.sh variants # there: every build/scaling/bench_magpie* beside TBB and Rayon
#   loadtest/scaling.sh pack-http  # here: only the HTTP part of pack (also done by pack)
#   loadtest/scaling.sh http     # there: loadtest/load/bench-http.sh at each of WORKERS
#   WORKERS="4 8 16" BENCH_QUICK=1 loadtest/scaling.sh http
#
# `variants` compares pool builds: pack another commit in a worktree (git worktree add
# /tmp/old COMMIT; cd /tmp/old; loadtest/scaling.sh pack) and copy its bench_magpie here as
# build/scaling/bench_magpie_NAME. Per worker count and round it runs each variant, oneTBB and
# Rayon on VARIANT_WORKLOADS (default "sum sort"), in an order rotated every round, and prints
# the median of ROUNDS (default 7) runs of 7 repetitions.
#
# `run` needs nothing but the packed folder and a shell: the bigger machines lent to this work
# reach no package registry. Per worker count it runs, interleaved and one process at a time:
#   - the runtime benchmark (loadtest/runtime/bench.c and its Tokio twin, every workload, ROUNDS
#     alternations with the order swapped each time, INNER timed rounds each);
#   - the fork-join workloads (FJ_WORKLOADS) on magpie's pool, Rayon and oneTBB, and on OpenMP
#     tasks for OMP_WORKLOADS only (OpenMP's untied tasks take minutes on fib35 and tree20).
# Output: one table per part, worker counts across, and the raw lines in $OUT (or
# build/scaling/results) for a second look.
#
# `http` runs the HTTP suite (loadtest/load/bench-http.sh, every server and scenario under
# magpie-load) once per worker count W, from build/scaling/http/, a copy of the files it reads
# laid out as in the repository: magpied and magpie-load (release), config/magpied.conf, the
# nginx peer's configuration, the Go and hyper peers and idle_clients built here, and nginx's
# binary (its libraries in build/scaling/lib). Each server gets W workers (nginx W worker
# processes, Go GOMAXPROCS=W, hyper W Tokio workers, magpied [runtime] workers = W) and
# magpie-load LOAD_THREADS runtime workers (default W/2, at least 1), so the client has cores
# of its own. Then, at the same W, loadtest/http/tls-compare.sh: full TLS 1.3 handshakes per
# second and keep-alive requests over TLS (TLS_SCENARIOS, default "full ka256"; TLS_ROUNDS 1,
# TLS_DURATION 5 s; TLS_SERVERS; TLS_LOAD_THREADS, default the smaller of 2W and the CPUs W
# leaves), magpied against nginx and HAProxy on one certificate made there. HTTP=0 or
# TLS=0 leaves either part out. Results: $OUT/http-wW/ (results.md, runs.csv, the plots) and
# $OUT/tls-wW/ (tls-*.md). The machine needs bash, coreutils and util-linux (flock); no
# compiler: openssl, curl, ss and haproxy are packed (build/scaling/http/tools) with their
# libraries, and used instead of the machine's own.
set -euo pipefail
cd "$(dirname "$0")/.."

pack=build/scaling
mode=${1:-}

# The HTTP suite's files, laid out as in the repository under $pack/http (see the top).
pack_http() {
    local h=$pack/http lib
    make --no-print-directory build/release/magpied build/release/magpie-load >&2
    rm -rf "$h"
    mkdir -p "$h/build/release" "$h/build/loadtest/bin" "$h/loadtest/load" "$h/loadtest/peers/nginx" \
        "$h/loadtest/http" "$h/config" "$h/nginx" "$pack/lib"
    cp build/release/magpied build/release/magpie-load "$h/build/release/"
    cp loadtest/load/bench-http.sh "$h/loadtest/load/"
    cp loadtest/http/tls-compare.sh loadtest/http/lib.sh "$h/loadtest/http/"
    cp loadtest/peers/nginx/nginx.conf.in "$h/loadtest/peers/nginx/"
    cp loadtest/http/idle_clients.c "$h/loadtest/http/"
    cp config/magpied.conf "$h/config/"
    cc -O2 -Wall -o "$h/build/loadtest/bin/idle_clients" loadtest/http/idle_clients.c -lssl -lcrypto
    # The tools the scripts call that a bare image may lack (the TLS run's certificate is made
    # with openssl there), and HAProxy for the TLS comparison; each with its libraries below.
    mkdir -p "$h/tools"
    local t tools=""
    for t in openssl curl ss haproxy; do
        if command -v "$t" >/dev/null; then
            cp "$(command -v "$t")" "$h/tools/"
            tools="$tools $h/tools/$t"
        fi
    done
    # The peers as bench-http.sh builds them; one that cannot be built here is left out
    # (bench-http.sh then skips it there with the reason).
    BENCH_BUILD_ONLY=1 SERVERS="go hyper" OUT=$PWD/$pack/http-build \
        loadtest/load/bench-http.sh 2>"$pack/http-peers.log" || true
    for p in go-peer hyper-peer; do
        if [ -x build/loadtest/bin/$p ]; then
            cp build/loadtest/bin/$p "$h/build/loadtest/bin/"
        else
            echo "scaling.sh: $p not built here (see $pack/http-peers.log): skipped there" >&2
        fi
    done
    local bins="$h/build/release/magpied $h/build/release/magpie-load $h/build/loadtest/bin/idle_clients$tools"
    if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
        cp "$(command -v nginx || echo /usr/sbin/nginx)" "$h/nginx/nginx"
        bins="$bins $h/nginx/nginx"
    else
        echo "scaling.sh: nginx not installed here: skipped there" >&2
    fi
    # Their libraries (libuv, inih, nginx's pcre2, OpenSSL, zlib) but glibc's own, assumed
    # there as for the other programs.
    # shellcheck disable=SC2086 # a list of paths without spaces
    ldd $bins | awk '$3 ~ /^\// { print $3 }' | sort -u |
        grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
        while read -r lib; do cp -L "$lib" "$pack/lib/"; done
    du -sh "$h" >&2
}

case $mode in
pack-http)
    pack_http
    exit 0
    ;;
pack)
    # The same builds as runtime/compare.sh and forkjoin/compare.sh, so the figures match.
    make --no-print-directory build/release/libmagpie.a >&2
    mkdir -p "$pack/lib"
    cc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iruntime/include loadtest/runtime/bench.c \
        build/release/libmagpie.a -luv -o "$pack/magpie-bench"
    (cd loadtest/runtime/tokio &&
        CARGO_HOME="$PWD/../../../build/bench/cargo-home" \
            CARGO_TARGET_DIR="$PWD/../../../build/bench/tokio-target" \
            RUSTC=/usr/bin/rustc /usr/bin/cargo build --release --offline --quiet)
    cp build/bench/tokio-target/release/tokio-bench "$pack/"
    fj=loadtest/forkjoin
    gcc -std=c11 -D_GNU_SOURCE -O2 -g -pthread -Iruntime/include -Iruntime/src -I"$fj" \
        runtime/src/pool/*.c runtime/src/testhook.c "$fj/bench_magpie.c" -o "$pack/bench_magpie"
    gcc -std=c11 -D_GNU_SOURCE -O2 -g -fopenmp -I"$fj" "$fj/bench_omp.c" -o "$pack/bench_omp"
    g++ -std=c++17 -O2 -g -I"$fj" "$fj/bench_tbb.cpp" -ltbb -o "$pack/bench_tbb"
    (cd "$fj/rayon" && RUSTC=/usr/bin/rustc CARGO_TARGET_DIR="$PWD/../../../build/forkjoin/rayon-target" \
        /usr/bin/cargo build --release --offline -q)
    cp build/forkjoin/rayon-target/release/forkjoin-rayon "$pack/bench_rayon"
    # The libraries a bare glibc system may lack; glibc, libstdc++ and libgcc_s are assumed.
    for b in "$pack"/magpie-bench "$pack"/bench_omp "$pack"/bench_tbb; do
        ldd "$b" | awk '/libuv|libtbb|libgomp/ { print $3 }'
    done | sort -u | xargs -I{} cp -L {} "$pack/lib/"
    pack_http
    du -sh "$pack"
    exit 0
    ;;
run | variants | http) ;;
*)
    echo "usage: $0 pack|pack-http|run|variants|http" >&2
    exit 2
    ;;
esac

export LD_LIBRARY_PATH=$PWD/$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The tools packed beside the suite, before the machine's own: they go with the libraries
# above, which a machine's own curl does not (a lent Ubuntu machine's curl failed with them).
export PATH=$PWD/$pack/http/tools:$PATH

if [ "$mode" = http ]; then
    res=${OUT:-$PWD/$pack/results}
    h=$pack/http
    [ -x "$h/build/release/magpied" ] || { echo "scaling.sh: pack first ($h)" >&2; exit 2; }
    ngx=$h/nginx/nginx
    [ -x "$ngx" ] || ngx=$(command -v nginx || echo /usr/sbin/nginx)
    echo "Machine: $(nproc) CPUs ($(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //')), Linux $(uname -r)"
    for w in ${WORKERS:-4 8 16}; do
        lt=${LOAD_THREADS:-$((w / 2 > 0 ? w / 2 : 1))}
        echo "== WORKERS=$w LOAD_THREADS=$lt" >&2
        if [[ ${HTTP:-1} == 1 ]]; then
            WORKERS=$w LOAD_THREADS=$lt BENCH_PREBUILT=1 NGINX=$ngx OUT=$res/http-w$w \
                "$h/loadtest/load/bench-http.sh" || echo "scaling.sh: bench-http failed at WORKERS=$w" >&2
        fi
        # TLS: full handshakes per second (a connection per request) and keep-alive requests
        # over TLS at W workers, magpied against nginx and HAProxy (tls-compare.sh).
        if [[ ${TLS:-1} == 1 ]]; then
            # A client handshake costs about what the server's does: give the client up to
            # twice the server's workers, within the cores the server leaves.
            tlt=${TLS_LOAD_THREADS:-$((2 * w < $(nproc) - w ? 2 * w : $(nproc) - w))}
            ((tlt >= 1)) || tlt=1
            WORKERS=$w LOAD_THREADS=$tlt BENCH_PREBUILT=1 NGINX=$ngx HAPROXY=$PWD/$h/tools/haproxy \
                SERVERS=${TLS_SERVERS:-magpied nginx haproxy} SCENARIOS=${TLS_SCENARIOS:-full ka256} ROUNDS=${TLS_ROUNDS:-1} \
                DURATION=${TLS_DURATION:-5} XCHECK=0 IDLE_N=0 QUIET_WAIT=0 \
                OUTDIR=$res/tls-w$w MAGPIED=$PWD/$h/build/release/magpied \
                LOAD=$PWD/$h/build/release/magpie-load "$h/loadtest/http/tls-compare.sh" ||
                echo "scaling.sh: tls-compare failed at WORKERS=$w" >&2
        fi
    done
    exit 0
fi

if [ "$mode" = variants ]; then
    res=${OUT:-$PWD/$pack/results}
    mkdir -p "$res"
    raw=$res/variants.txt
    : >"$raw"
    names=""
    for b in "$pack"/bench_magpie*; do names="$names ${b#"$pack"/bench_}"; done
    names="$names tbb rayon"
    echo "Machine: $(nproc) CPUs ($(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //')), Linux $(uname -r)"
    for w in ${WORKERS:-2 4 8 16}; do
        for r in $(seq 1 "${ROUNDS:-7}"); do
            # rotate the order by the round
            order=$(echo $names | tr ' ' '\n' | awk -v r="$r" '{ a[NR] = $0 } END { for (i = 0; i < NR; i++) print a[(i + r) % NR + 1] }')
            for wl in ${VARIANT_WORKLOADS:-sum sort}; do
                for v in $order; do
                    line=$(timeout -k 5 "${RUN_TIMEOUT:-60}" "$pack/bench_$v" "$wl" "$w" 7 2>/dev/null) || line="x $wl threads=$w median_ms=NaN"
                    echo "$v $w $wl ${line##*=}" >>"$raw"
                done
            done
        done
    done
    echo "| workload | workers |$(for v in $names; do printf ' %s |' "$v"; done)"
    echo "|---|---:|$(for v in $names; do printf -- '---:|'; done)"
    for wl in ${VARIANT_WORKLOADS:-sum sort}; do
        for w in ${WORKERS:-2 4 8 16}; do
            printf '| %s | %s |' "$wl" "$w"
            for v in $names; do
                awk -v v="$v" -v w="$w" -v wl="$wl" '$1 == v && $2 == w && $3 == wl && $4 != "NaN" { print $4 }' "$raw" |
                    sort -n | awk '{ a[NR] = $1 } END { if (NR) printf " %.3f |", a[int((NR + 1) / 2)]; else printf " - |" }'
            done
            echo
        done
    done
    exit 0
fi
WORKERS=${WORKERS:-"2 4 8 16"}
ROUNDS=${ROUNDS:-3}
INNER=${INNER:-10}
REPS=${REPS:-5}
RT_WORKLOADS=${RT_WORKLOADS:-"spawn_many_local spawn_many_remote_idle yield_many ping_pong chained_spawn spawn_join_worker spawn_join_outside"}
FJ_WORKLOADS=${FJ_WORKLOADS:-"fib40c tree20 sum sort"}
OMP_WORKLOADS=${OMP_WORKLOADS:-"fib40c sum sort"}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
res=${OUT:-$pack/results}
mkdir -p "$res"
rt=$res/runtime.txt
fjr=$res/forkjoin.txt
: >"$rt"
: >"$fjr"
export MAGPIE_BENCH_TIMEOUT=20

echo "Machine: $(nproc) CPUs ($(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //')), Linux $(uname -r)"
echo "Load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s)

# one LABEL W CMD...: appends "LABEL W <program's line>" or "LABEL W <workload> FAIL rc".
one() {
    local label=$1 w=$2 file=$3 wl=$4 line rc
    shift 4
    set +e
    line=$(timeout -k 5 "$RUN_TIMEOUT" "$@" 2>/dev/null)
    rc=$?
    set -e
    if [ $rc -eq 0 ] && [ -n "$line" ]; then
        echo "$label $w $line" >>"$file"
    else
        echo "$label $w $wl FAIL $rc" >>"$file"
    fi
}

for w in $WORKERS; do
    for a in $(seq 1 "$ROUNDS"); do
        for wl in $RT_WORKLOADS; do
            for p in $([ $((a % 2)) -eq 1 ] && echo "magpie tokio" || echo "tokio magpie"); do
                one "$p" "$w" "$rt" "$wl" "$pack/$p-bench" --workers "$w" --rounds "$INNER" \
                    --warmup 2 --only "$wl"
            done
        done
        impls="magpie rayon tbb openmp"
        for wl in $FJ_WORKLOADS; do
            for p in $impls; do
                case $p in openmp) case " $OMP_WORKLOADS " in *" $wl "*) ;; *) continue ;; esac ;; esac
                bin=$pack/bench_$p
                [ "$p" = openmp ] && bin=$pack/bench_omp
                one "$p" "$w" "$fjr" "$wl" env OMP_NUM_THREADS="$w" "$bin" "$wl" "$w" "$REPS"
            done
            impls="${impls#* } ${impls%% *}" # rotate the order each workload
        done
    done
    echo "workers=$w done at +$(($(date +%s) - t0)) s" >&2
done
echo "Runs took $(($(date +%s) - t0)) s; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Runtime lines: "prog W workload ns_per_op ns_total"; fork-join lines:
# "impl W impl workload threads=N median_ms=X". Both print the median over rounds.
median_awk='
function median(s,   n, v, i, j, t) {
    n = split(s, v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n == 0 ? -1 : (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2)
}'
echo
echo "Runtime, ns per operation (median of $ROUNDS runs, each the median of $INNER rounds); ratio = magpie/tokio"
awk -v workers="$WORKERS" -v wls="$RT_WORKLOADS" "$median_awk"'
    $4 != "FAIL" { v[$1, $2, $3] = v[$1, $2, $3] " " $4 }
    END {
        nw = split(workers, W, " "); nl = split(wls, L, " ")
        printf "| workload |"; for (i = 1; i <= nw; i++) printf " %s: magpie | tokio | ratio |", W[i]; print ""
        printf "|---|"; for (i = 1; i <= nw; i++) printf "---:|---:|---:|"; print ""
        for (k = 1; k <= nl; k++) {
            printf "| %s |", L[k]
            for (i = 1; i <= nw; i++) {
                m = median(v["magpie", W[i], L[k]]); t = median(v["tokio", W[i], L[k]])
                printf " %.1f | %.1f | %s |", m, t, ((m > 0 && t > 0) ? sprintf("%.2f", m / t) : "-")
            }
            print ""
        }
    }' "$rt"
echo
echo "Fork-join, ms (median of $ROUNDS runs, each the median of $REPS reps); magpie/peer ratios"
awk -v workers="$WORKERS" -v wls="$FJ_WORKLOADS" "$median_awk"'
    { split($6, m, "="); if (m[2] != "NaN" && $5 != "FAIL") v[$1, $2, $4] = v[$1, $2, $4] " " m[2] }
    END {
        nw = split(workers, W, " "); nl = split(wls, L, " ")
        print "| workload | workers | magpie | rayon | tbb | openmp | /rayon | /tbb | /openmp |"
        print "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        for (k = 1; k <= nl; k++) for (i = 1; i <= nw; i++) {
            mg = median(v["magpie", W[i], L[k]]); ry = median(v["rayon", W[i], L[k]])
            tb = median(v["tbb", W[i], L[k]]); om = median(v["openmp", W[i], L[k]])
            # Parenthesised: a bare ">" among printf arguments is a redirection.
            printf "| %s | %s | %.2f | %.2f | %.2f | %s | %s | %s | %s |\n", L[k], W[i], mg, ry, tb,
                (om > 0 ? sprintf("%.2f", om) : "-"), (ry > 0 ? sprintf("%.2f", mg / ry) : "-"),
                (tb > 0 ? sprintf("%.2f", mg / tb) : "-"), (om > 0 ? sprintf("%.2f", mg / om) : "-")
        }
    }' "$fjr"
grep -h FAIL "$rt" "$fjr" | sed 's/^/failed: /' || true
