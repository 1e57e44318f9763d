#!/usr/bin/env bash
# loadtest/http/compare.sh: magpied against Go net/http, Tokio+hyper and nginx under wrk.
#
#   loadtest/http/compare.sh                 full comparison (see README.md for the knobs)
#   ROUNDS=1 DURATION=3 loadtest/http/compare.sh      a smoke run of a few seconds per run
#   loadtest/http/compare.sh idle [SERVER...]         idle wake-up check (default: magpied)
#
# One server runs at a time, on 127.0.0.1 and a free ephemeral port. Rounds are
# interleaved: round 1 runs every server, then round 2 every server (starting one
# server further down the list each round), ... Per server and round: start it, warm
# it up with a short wrk run, then run each scenario with wrk -t1 --latency:
#
#   c64     64 keep-alive connections, one request in flight on each
#   c256    256 keep-alive connections
#   pipe16  64 connections, 16 pipelined GET / per write (pipeline.lua)
#   fSIZE-cN  static files (magpied and nginx only): GET /static/SIZE.bin on N keep-alive
#           connections, SIZE 1k, 64k or 1m (the same files for both, made per run);
#           f304-cN: the 1k file with its own ETag in If-None-Match (a 304 revalidation)
#
# and record req/s, p50, p99 and the server's CPU time per request: utime+stime from
# /proc/PID/stat (all threads; for nginx the master plus its workers) before and after
# the wrk run, divided by the requests wrk completed. With one wrk thread the client
# saturates its core near 190-205k req/s on a 2-vCPU VM (measured with a bare libuv +
# llhttp server, Tokio, nginx and h2o all pinned beside it), so for the fastest servers
# CPU µs/req and pipelined throughput are the figures that rank them.
#
# Prints one Markdown table per scenario (medians over the rounds) and writes the raw
# numbers to build/loadtest/http-STAMP.csv, the tables to http-STAMP.md and every wrk
# output to http-STAMP/. Every process it starts it stops by its PID, also on Ctrl-C.

set -euo pipefail
shopt -s nullglob

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PEERS=$ROOT/loadtest/peers

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SCENARIOS=${SCENARIOS:-c64 c256 pipe16}
STATIC_SCENARIOS="f1k-c64 f1k-c256 f64k-c64 f64k-c256 f1m-c64 f1m-c256 f304-c64"
case $SCENARIOS in # shorthands: the static files alone, or everything
static) SCENARIOS=$STATIC_SCENARIOS ;;
all) SCENARIOS="c64 c256 pipe16 $STATIC_SCENARIOS" ;;
esac
PIPE_CONNS=${PIPE_CONNS:-64}
SERVERS=${SERVERS:-magpied hyper go nginx}
PIN=${PIN:-0}
SERVER_CPU=${SERVER_CPU:-1}
WRK_CPU=${WRK_CPU:-0}
WORKERS=${WORKERS:-}
SETTLE=${SETTLE:-1}
QUIET=${QUIET:-0.25}
QUIET_WAIT=${QUIET_WAIT:-120}
READY_TIMEOUT=${READY_TIMEOUT:-15}
OUTDIR=${OUTDIR:-$ROOT/build/loadtest}
BIN=$OUTDIR/bin
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
MAGPIED_CONF=${MAGPIED_CONF:-$ROOT/config/magpied.conf}
MAGPIED_ARGS=${MAGPIED_ARGS:-}
BUILD_MAGPIED=${BUILD_MAGPIED:-missing}
IDLE_SECONDS=${IDLE_SECONDS:-10}
IDLE_SETTLE=${IDLE_SETTLE:-2}
LOCK=${LOCK:-/tmp/lt/bench.lock}
LOCK_WAIT=${LOCK_WAIT:-3600}

if [[ $PIN == 1 ]]; then
    WORKERS=${WORKERS:-1}
    SRV_PREFIX=(taskset -c "$SERVER_CPU")
    WRK_PREFIX=(taskset -c "$WRK_CPU")
else
    SRV_PREFIX=()
    WRK_PREFIX=()
fi
# How magpied is told its worker count when WORKERS is set; override if the key differs.
MAGPIED_WORKERS_ARGS=${MAGPIED_WORKERS_ARGS:-${WORKERS:+--set runtime.workers=$WORKERS}}

CLK_TCK=$(getconf CLK_TCK)
MODE=bench
if [[ ${1:-} == idle ]]; then
    MODE=idle
    shift
    IDLE_SERVERS=("$@")
    [[ ${#IDLE_SERVERS[@]} -gt 0 ]] || IDLE_SERVERS=(magpied)
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [idle [SERVER...]]   (knobs are environment variables, see README.md)" >&2
    exit 2
fi

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'compare.sh: %s\n' "$*" >&2; exit 1; }

for t in curl taskset timeout flock ss; do
    command -v "$t" >/dev/null || die "$t not found"
done

# stop_pid, free_port, cpu_ticks, run_wrk, settle, report ... (shared with proxy-compare.sh)
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"

# ---------------------------------------------------------------------------------------
# Process bookkeeping: the one server and the one wrk that may be running.

RUN=

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n $WRK_PID ]]; then stop_pid "$WRK_PID"; WRK_PID=; fi
    stop_server
    if [[ -n $RUN && -d $RUN && ${KEEP:-0} != 1 ]]; then rm -rf "$RUN"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "compare.sh: interrupted" >&2; exit 130' INT
trap 'echo "compare.sh: terminated" >&2; exit 143' TERM HUP

mkdir -p /tmp/lt "$OUTDIR" "$BIN"
RUN=$(mktemp -d /tmp/lt/http.XXXXXX)
chmod 755 "$RUN" # nginx workers run as nobody

bench_lock # one benchmark at a time (other harnesses may take the same lock)

# ---------------------------------------------------------------------------------------
# Building. A peer that cannot be built is skipped with the reason.

declare -A SKIP=()

build_go() {
    command -v go >/dev/null || { SKIP[go]="go not installed (apt-get install golang-go)"; return; }
    if ! (cd "$PEERS/go" &&
        GOPROXY=off GOFLAGS=-mod=mod GOCACHE=$OUTDIR/gocache GOPATH=$OUTDIR/gopath \
            go build -trimpath -o "$BIN/go-peer" .) >"$OUTDIR/build-go.log" 2>&1; then
        tail -20 "$OUTDIR/build-go.log" >&2
        SKIP[go]="build failed (see $OUTDIR/build-go.log)"
    fi
}

build_hyper() {
    [[ -x /usr/bin/cargo ]] || { SKIP[hyper]="/usr/bin/cargo missing (apt-get install cargo librust-hyper-dev librust-tokio-dev)"; return; }
    # cd: cargo finds .cargo/config.toml (Debian's vendored registry) from the cwd.
    if ! (cd "$PEERS/hyper" &&
        CARGO_TARGET_DIR=$OUTDIR/cargo /usr/bin/cargo build --offline --release) \
        >"$OUTDIR/build-hyper.log" 2>&1; then
        tail -20 "$OUTDIR/build-hyper.log" >&2
        SKIP[hyper]="build failed (see $OUTDIR/build-hyper.log)"
        return
    fi
    cp -f "$OUTDIR/cargo/release/hyper-peer" "$BIN/hyper-peer"
}

check_nginx() {
    NGINX=$(command -v nginx || true)
    [[ -n $NGINX ]] || NGINX=/usr/sbin/nginx
    [[ -x $NGINX ]] || SKIP[nginx]="nginx not installed (apt-get install nginx)"
}

build_magpied() {
    if [[ $BUILD_MAGPIED == always || ! -x $MAGPIED ]]; then
        log "building magpied (make)"
        if ! make -C "$ROOT" >"$OUTDIR/build-magpied.log" 2>&1; then
            tail -20 "$OUTDIR/build-magpied.log" >&2
            SKIP[magpied]="make failed (see $OUTDIR/build-magpied.log)"
            return
        fi
    fi
    [[ -x $MAGPIED ]] || SKIP[magpied]="$MAGPIED was not built"
}

build_all() { # SERVER...
    local s
    for s in "$@"; do
        case $s in
        go) build_go ;;
        hyper) build_hyper ;;
        nginx) check_nginx ;;
        magpied) build_magpied ;;
        *) die "unknown server '$s' (known: magpied hyper go nginx)" ;;
        esac
        if [[ -n ${SKIP[$s]:-} ]]; then log "skipping $s: ${SKIP[$s]}"; fi
    done
}

# ---------------------------------------------------------------------------------------
# Starting and probing one server.

PORT=
start_server() {
    local name=$1 w=${WORKERS:-} out=$RUN/$1.log
    local -a cmd
    PORT=$(free_port)
    case $name in
    go) cmd=("$BIN/go-peer" -listen "127.0.0.1:$PORT" ${w:+-procs "$w"}) ;;
    hyper) cmd=("$BIN/hyper-peer" --listen "127.0.0.1:$PORT" ${w:+--workers "$w"}) ;;
    nginx)
        sed -e "s|@WORKERS@|${w:-auto}|g" -e "s|@PORT@|$PORT|g" -e "s|@RUNDIR@|$RUN|g" \
            "$PEERS/nginx/nginx.conf.in" >"$RUN/nginx.conf"
        cmd=("$NGINX" -p "$RUN/" -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log")
        ;;
    magpied)
        local conf=$MAGPIED_CONF
        if [[ ! -f $conf ]]; then conf=$RUN/magpied.conf; : >"$conf"; fi
        if [[ -n $STATIC_ROOT ]]; then # the shipped routes plus the static files'
            { cat "$conf"; printf '\n[route /static]\nhandler = static\nroot = %s\n' \
                "$STATIC_ROOT"; } >"$RUN/magpied-static.conf"
            conf=$RUN/magpied-static.conf
        fi
        # shellcheck disable=SC2206 # word-split the extra-argument knobs on purpose
        cmd=("$MAGPIED" -c "$conf" --set "http.listen=127.0.0.1:$PORT" --set "echo.listen="
            $MAGPIED_WORKERS_ARGS $MAGPIED_ARGS)
        ;;
    esac
    echo "+ ${SRV_PREFIX[*]} ${cmd[*]}" >"$out"
    "${SRV_PREFIX[@]}" "${cmd[@]}" >>"$out" 2>&1 </dev/null 9>&- &
    SRV_PID=$!
}

# Waits until GET / answers "Hello, World!"; returns 1 if the server died or timed out.
wait_ready() {
    local name=$1 deadline=$((SECONDS + READY_TIMEOUT)) body
    while ((SECONDS < deadline)); do
        if ! kill -0 "$SRV_PID" 2>/dev/null; then
            wait "$SRV_PID" 2>/dev/null || true
            SRV_PID=
            echo "compare.sh: $name exited during start-up:" >&2
            tail -20 "$RUN/$name.log" >&2
            [[ $name == nginx ]] && tail -5 "$RUN/nginx-error.log" >&2 2>/dev/null
            return 1
        fi
        body=$(curl -s --max-time 1 "http://127.0.0.1:$PORT/" 2>/dev/null || true)
        if [[ $body == "Hello, World!" ]]; then
            if [[ $name != nginx ]]; then
                body=$(curl -s --max-time 2 --data-binary 'magpie echo check' \
                    "http://127.0.0.1:$PORT/echo" 2>/dev/null || true)
                [[ $body == "magpie echo check" ]] ||
                    echo "compare.sh: warning: $name POST /echo answered '${body:0:60}'" >&2
            fi
            return 0
        fi
        sleep 0.1
    done
    echo "compare.sh: $name did not answer GET / within ${READY_TIMEOUT}s:" >&2
    tail -20 "$RUN/$name.log" >&2
    stop_server
    return 1
}

start_ready() { # NAME: start on a free port, retrying once (a port race, a slow start)
    for _ in 1 2; do
        start_server "$1"
        if wait_ready "$1"; then return 0; fi
        stop_server
    done
    return 1
}

# The path a scenario asks for, and whether it revalidates (f304).
scenario_path() { # NAME -> PATH
    case $1 in
    f304-*) echo /static/1k.bin ;;
    f*) local size=${1%%-*}; echo "/static/${size#f}.bin" ;;
    *) echo / ;;
    esac
}

# Static-file scenarios run on the servers that serve files.
serves_files() { [[ $1 == magpied || $1 == nginx ]]; }

# The files of the f* scenarios, made once per run: the same bytes for every server.
STATIC_ROOT=
make_static_root() {
    STATIC_ROOT=$RUN/www
    mkdir -p "$STATIC_ROOT/static"
    head -c 1024 /dev/urandom >"$STATIC_ROOT/static/1k.bin"
    head -c 65536 /dev/urandom >"$STATIC_ROOT/static/64k.bin"
    head -c 1048576 /dev/urandom >"$STATIC_ROOT/static/1m.bin"
    chmod -R a+rX "$STATIC_ROOT"
}

# Checks that the server serves each file whole; sets ETAG to the 1k file's ETag.
check_static() { # NAME
    local f want got
    for f in 1k 64k 1m; do
        want=$(stat -c %s "$STATIC_ROOT/static/$f.bin")
        got=$(curl -s --max-time 5 -o /dev/null -w '%{http_code} %{size_download}' \
            "http://127.0.0.1:$PORT/static/$f.bin" || true)
        [[ $got == "200 $want" ]] || { echo "compare.sh: $1 GET /static/$f.bin: $got (want 200 $want)" >&2; return 1; }
    done
    ETAG=$(curl -s --max-time 5 -D - -o /dev/null "http://127.0.0.1:$PORT/static/1k.bin" |
        tr -d '\r' | awk 'tolower($1) == "etag:" { print $2 }')
    [[ -n $ETAG ]] || { echo "compare.sh: $1 sent no ETag" >&2; return 1; }
}

# ---------------------------------------------------------------------------------------
# idle: count context switches of an idle server over IDLE_SECONDS.

ctxt_snapshot() { # PID -> lines "TID COMM VOLUNTARY NONVOLUNTARY", its whole process tree
    local t comm v n
    for t in $(for p in $(tree_pids "$1"); do echo /proc/"$p"/task/*; done); do
        { comm=$(<"$t/comm"); } 2>/dev/null || continue
        read -r v n < <(awk '/^voluntary_ctxt_switches/ { v = $2 }
                             /^nonvoluntary_ctxt_switches/ { n = $2 }
                             END { print v + 0, n + 0 }' "$t/status" 2>/dev/null)
        echo "${t##*/} ${comm// /_} $v $n"
    done
}

idle_check() {
    local s status=0 t0 t1 a b
    build_all "${IDLE_SERVERS[@]}"
    for s in "${IDLE_SERVERS[@]}"; do
        if [[ -n ${SKIP[$s]:-} ]]; then
            echo "idle $s: SKIPPED ($s: ${SKIP[$s]})"
            continue
        fi
        start_ready "$s" || { echo "idle $s: FAILED to start"; status=1; continue; }
        log "$s (PID $SRV_PID) answered on port $PORT; letting it settle ${IDLE_SETTLE}s"
        sleep "$IDLE_SETTLE"
        a=$(ctxt_snapshot "$SRV_PID")
        t0=$(cpu_ticks "$SRV_PID")
        sleep "$IDLE_SECONDS"
        b=$(ctxt_snapshot "$SRV_PID")
        t1=$(cpu_ticks "$SRV_PID")
        echo
        echo "### idle $s: context switches over ${IDLE_SECONDS}s, no connections"
        echo
        echo "| thread | tid | voluntary | involuntary |"
        echo "|---|---:|---:|---:|"
        local rows total
        rows=$(awk '
            NR == FNR { v0[$1] = $3; n0[$1] = $4; next }
            { if ($1 in v0) { dv = $3 - v0[$1]; dn = $4 - n0[$1] } else { dv = $3; dn = $4; $2 = $2 " (new)" }
              printf "| %s | %s | %d | %d |\n", $2, $1, dv, dn
              tot += dv + dn; seen[$1] = 1 }
            END { for (t in v0) if (!(t in seen)) printf "| (exited) | %s | ? | ? |\n", t
                  print "TOTAL", tot + 0 }' <(echo "$a") <(echo "$b"))
        grep -v '^TOTAL ' <<<"$rows"
        total=$(awk '$1 == "TOTAL" { print $2 }' <<<"$rows")
        echo
        awk -v t="$total" -v secs="$IDLE_SECONDS" -v c="$((t1 - t0))" -v hz="$CLK_TCK" -v s="$s" \
            'BEGIN { printf "%s: %d context switches in %ss = %.2f wake-ups/s; CPU %.2f s\n",
                     s, t, secs, t / secs, c / hz }'
        if [[ $s == magpied ]]; then
            if ((total == 0)); then echo "idle magpied: PASS (no wake-ups)"; else
                echo "idle magpied: FAIL ($total context switches while idle)"
                status=1
            fi
        fi
        stop_server
    done
    return "$status"
}

# ---------------------------------------------------------------------------------------
# main

if [[ $MODE == idle ]]; then
    idle_check
    exit $?
fi

read -r -a ALL <<<"$SERVERS"
build_all "${ALL[@]}"
ACTIVE=()
for s in "${ALL[@]}"; do [[ -n ${SKIP[$s]:-} ]] || ACTIVE+=("$s"); done
((${#ACTIVE[@]} > 0)) || die "no server to run"

STAMP=$(date +%Y%m%d-%H%M%S)
RAW=$OUTDIR/http-$STAMP
CSV=$OUTDIR/http-$STAMP.csv
MD=$OUTDIR/http-$STAMP.md
mkdir -p "$RAW"
[[ " $SCENARIOS " != *" f"* ]] || make_static_root
echo "round,server,scenario,connections,pipeline,duration_s,requests,req_per_s,p50_us,p99_us,cpu_s,cpu_us_per_req,socket_errors,non2xx,load1,bg_cpu_s" >"$CSV"

n=${#ACTIVE[@]}
per_server=$((WARMUP + 0))
for sc in $SCENARIOS; do per_server=$((per_server + DURATION + SETTLE)); done
log "servers: ${ACTIVE[*]}; scenarios: $SCENARIOS; ${ROUNDS} rounds; PIN=$PIN${WORKERS:+ WORKERS=$WORKERS}"
log "about $((ROUNDS * n * (per_server + 1) / 60 + 1)) minutes; raw output in $RAW"

for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
        s=${ACTIVE[$(((k + r - 1) % n))]} # rotate the order each round
        load1=$(awk '{ print $1 }' /proc/loadavg)
        if ! start_ready "$s"; then
            echo "compare.sh: round $r: $s failed to start; no data for it this round" >&2
            continue
        fi
        log "round $r/$ROUNDS: $s (PID $SRV_PID, port $PORT, load $load1)"
        if ((WARMUP > 0)); then
            run_wrk "$RAW/r$r-$s-warmup.txt" 64 1 "$WARMUP"
        fi
        files_ok=0
        if [[ -n $STATIC_ROOT ]] && serves_files "$s" && check_static "$s"; then files_ok=1; fi
        for sc in $SCENARIOS; do
            if [[ $sc == f* ]] && ((!files_ok)); then continue; fi
            settle
            read -r conns depth < <(scenario_shape "$sc")
            load1=$(awk '{ print $1 }' /proc/loadavg)
            run_wrk "$RAW/r$r-$s-$sc.txt" "$conns" "$depth" "$DURATION" "$(scenario_path "$sc")" \
                "$([[ $sc == f304-* ]] && echo "$ETAG")"
            cpu_us=$(awk -v c="$W_CPU" -v n="$W_REQS" 'BEGIN { printf "%.3f", (n > 0 ? c * 1e6 / n : 0) }')
            echo "$r,$s,$sc,$conns,$depth,$DURATION,$W_REQS,$W_RPS,$W_P50,$W_P99,$W_CPU,$cpu_us,$W_ERRS,$W_NON2XX,$load1,$W_BG" >>"$CSV"
            printf '   %-7s %-7s %8s req/s  p50 %-9s p99 %-9s %6.2f CPU µs/req  bg %s s%s\n' "$s" "$sc" \
                "$(fmt_rps "$W_RPS")" "$(fmt_us "$W_P50")" "$(fmt_us "$W_P99")" "$cpu_us" "$W_BG" \
                "$( ((W_ERRS + W_NON2XX > 0)) && echo "  ($W_ERRS socket errors, $W_NON2XX non-2xx)")" >&2
        done
        stop_server
    done
done

{
    echo "## HTTP comparison $STAMP"
    echo
    echo "\`ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP PIN=$PIN${WORKERS:+ WORKERS=$WORKERS} SERVERS=\"${ACTIVE[*]}\" loadtest/http/compare.sh\`"
    echo "on $(nproc) CPUs, $(uname -sr), $(wrk --version 2>&1 | head -1 | awk '{ print "wrk", $2 }'), one server at a time on 127.0.0.1;"
    if [[ $PIN == 1 ]]; then
        echo "pinned: server on CPU $SERVER_CPU with ${WORKERS} worker(s), wrk on CPU $WRK_CPU."
    else
        echo "unpinned: servers use ${WORKERS:-all} CPUs (workers), wrk -t1 shares the machine."
    fi
    echo "CPU µs/req = server utime+stime (/proc/PID/stat, all threads and child processes) / requests."
    for s in "${!SKIP[@]}"; do echo "Skipped $s: ${SKIP[$s]}."; done
    report "$CSV" "${ACTIVE[@]}"
    echo
    echo "nginx is compared on GET / and the static files only (it cannot echo a POST body with stock modules)."
    echo "Raw: $CSV"
} | tee "$MD"
