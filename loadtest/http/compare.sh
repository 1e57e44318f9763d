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

# ---------------------------------------------------------------------------------------
# Process bookkeeping: the one server and the one wrk that may be running.

RUN=
SRV_PID=
WRK_PID=

stop_pid() { # PID: TERM, wait up to 5 s, then KILL; always reaps it.
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        # A reaped-but-not-waited child still answers kill -0 as a zombie; check state.
        [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]] && break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; then
        echo "compare.sh: PID $pid did not stop on SIGTERM; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

stop_server() {
    if [[ -n $SRV_PID ]]; then
        stop_pid "$SRV_PID"
        SRV_PID=
    fi
}

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

# One benchmark at a time on this machine (other harnesses may take the same lock). The
# servers and wrk are started with fd 9 closed so that none of them can hold it.
exec 9>"$LOCK"
if ! flock -n 9; then
    log "another benchmark holds $LOCK; waiting up to ${LOCK_WAIT}s"
    flock -w "$LOCK_WAIT" 9 || die "timed out waiting for $LOCK"
fi

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
        if [[ ! -f $ROOT/daemon/main.c ]]; then
            SKIP[magpied]="daemon/main.c does not exist yet"
            return
        fi
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
free_port() { # a port from the ephemeral range with no socket on it
    local lo hi p i
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
    for ((i = 0; i < 200; i++)); do
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
        if [[ -z $(ss -Htan "( sport = :$p )" 2>/dev/null) ]]; then
            echo "$p"
            return
        fi
    done
    die "no free port found"
}

# Starts server $1 on a fresh port in the background; sets SRV_PID and PORT.
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

# Pids of PID and all its descendants (nginx: master and workers).
tree_pids() {
    local c
    echo "$1"
    for c in $(pgrep -P "$1" 2>/dev/null); do tree_pids "$c"; done
}

# Server CPU time in clock ticks: utime+stime of every process in the tree (all threads).
cpu_ticks() {
    local total=0 pid s
    for pid in $(tree_pids "$1"); do
        { s=$(<"/proc/$pid/stat"); } 2>/dev/null || continue
        s=${s##*) }
        # shellcheck disable=SC2086 # split the stat fields
        set -- $s
        # after "pid (comm) ": $1 = state (field 3), so utime (14) is $12, stime (15) $13
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}

# ---------------------------------------------------------------------------------------
# wrk runs.

# Busy clock ticks of the whole machine (all CPUs) from /proc/stat.
busy_ticks() {
    awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# CPU seconds (user+sys) of this shell's reaped children (wrk), from the builtin `times`,
# into variable $1. `times` must run in this shell: in a $(...) subshell it reports zero.
children_cpu() {
    times >"$RUN/times"
    printf -v "$1" '%s' "$(awk 'NR == 2 { t = 0
        for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); t += a[1] * 60 + a[2] }
        printf "%.3f\n", t }' "$RUN/times")"
}

# wrk's latency figures ("312.00us", "1.02ms", "1.50s", "2.00m") in microseconds.
to_us() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "us") f = 1; else if (u == "ms") f = 1000; else if (u == "s") f = 1000000;
        else if (u == "m") f = 60000000; else f = 1
        printf "%.1f", n * f }'
}

# run_wrk OUTFILE CONNS DEPTH DURATION: runs wrk against the current server, sets
# W_REQS W_RPS W_P50 W_P99 W_ERRS W_NON2XX W_CPU (seconds of server CPU) and W_BG (CPU
# seconds that neither the server nor wrk used: other work on this shared machine).
run_wrk() { # ... [PATH [IF_NONE_MATCH]]
    local out=$1 conns=$2 depth=$3 dur=$4 path=${5:-/} inm=${6:-} t0 t1 b0 b1 c0 c1 rc=0
    local -a script=()
    ((depth > 1)) && script=(-s "$HERE/pipeline.lua")
    [[ -z $inm ]] || script+=(-H "If-None-Match: $inm")
    local -a args=(wrk -t1 "-c$conns" "-d${dur}s" --latency "${script[@]}"
        "http://127.0.0.1:$PORT$path")
    ((depth > 1)) && args+=(-- "$depth")
    echo "+ ${WRK_PREFIX[*]} ${args[*]}" >"$out"
    b0=$(busy_ticks)
    children_cpu c0
    t0=$(cpu_ticks "$SRV_PID")
    # timeout bounds the run even if wrk hangs; it forwards our SIGTERM to wrk.
    "${WRK_PREFIX[@]}" timeout -k 5 $((dur + 30)) "${args[@]}" >>"$out" 2>&1 </dev/null 9>&- &
    WRK_PID=$!
    wait "$WRK_PID" || rc=$?
    WRK_PID=
    t1=$(cpu_ticks "$SRV_PID")
    children_cpu c1
    b1=$(busy_ticks)
    W_BG=$(awk -v b="$((b1 - b0))" -v s="$((t1 - t0))" -v w0="$c0" -v w1="$c1" -v hz="$CLK_TCK" \
        'BEGIN { v = (b - s) / hz - (w1 - w0); printf "%.2f", v < 0 ? 0 : v }')
    if ((rc != 0)); then
        echo "compare.sh: wrk exited $rc (see $out)" >&2
    fi
    W_CPU=$(awk -v a="$t0" -v b="$t1" -v hz="$CLK_TCK" 'BEGIN { printf "%.3f", (b - a) / hz }')
    read -r W_REQS W_RPS W_P50 W_P99 W_ERRS W_NON2XX < <(awk '
        / requests in / { reqs = $1 }
        /^Requests\/sec:/ { rps = $2 }
        /^ +50% / { p50 = $2 }
        /^ +99% / { p99 = $2 }
        /Socket errors:/ { gsub(/,/, ""); errs = $4 + $6 + $8 + $10 }
        /Non-2xx or 3xx responses:/ { non2xx = $5 }
        END { printf "%s %s %s %s %d %d\n", reqs ? reqs : 0, rps ? rps : 0,
                     p50 ? p50 : "0us", p99 ? p99 : "0us", errs, non2xx }' "$out")
    W_P50=$(to_us "$W_P50")
    W_P99=$(to_us "$W_P99")
    # wrk 4.1 sometimes prints 0.00us for percentiles (wg/wrk#354): no value, not zero.
    [[ $W_P50 != 0.0 ]] || W_P50=
    [[ $W_P99 != 0.0 ]] || W_P99=
}

# Sleeps SETTLE seconds with the server idle; while the machine stayed busier than QUIET
# CPUs over that time (others' compiles and benchmarks), keeps waiting, up to QUIET_WAIT s.
settle() {
    local b0 b1 waited=0 busy
    while :; do
        b0=$(busy_ticks)
        sleep "$SETTLE"
        b1=$(busy_ticks)
        busy=$(awk -v d="$((b1 - b0))" -v hz="$CLK_TCK" -v s="$SETTLE" 'BEGIN { printf "%.2f", d / hz / s }')
        if awk -v b="$busy" -v q="$QUIET" 'BEGIN { exit !(b <= q) }'; then break; fi
        if ((waited >= QUIET_WAIT)); then
            log "machine still busy ($busy CPUs in use by others); measuring anyway"
            break
        fi
        ((waited == 0)) && log "machine busy ($busy CPUs in use by others); waiting up to ${QUIET_WAIT}s"
        sleep 2
        waited=$((waited + 2 + ${SETTLE%.*}))
    done
}

scenario_shape() { # NAME -> "CONNS DEPTH"
    case $1 in
    c[0-9]*) echo "${1#c} 1" ;;
    pipe[0-9]*) echo "$PIPE_CONNS ${1#pipe}" ;;
    f*-c[0-9]*) echo "${1##*-c} 1" ;;
    *) die "unknown scenario '$1' (cN, pipeN or fSIZE-cN)" ;;
    esac
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
# Reporting.

fmt_rps() { awk -v v="$1" 'BEGIN { if (v >= 1e6) printf "%.2fM", v / 1e6;
                                    else if (v >= 1e3) printf "%.1fk", v / 1e3;
                                    else printf "%.0f", v }'; }
fmt_us() { awk -v v="$1" 'BEGIN { if (v == "") printf "n/a"; else if (v >= 1e6) printf "%.2f s", v / 1e6;
                                   else if (v >= 1e3) printf "%.2f ms", v / 1e3;
                                   else printf "%.0f µs", v }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) exit;
                         if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# col CSV SERVER SCENARIO FIELD -> the median of that column over the rounds
col() {
    awk -F, -v s="$2" -v c="$3" -v f="$4" '
        NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; next }
        $idx["server"] == s && $idx["scenario"] == c && $idx["requests"] > 0 { print $idx[f] }' "$1" |
        median
}

# Median (min-max) over rounds of magpied's req/s divided by the peer's in the same round.
# The machine's speed drifts by more than the servers differ (a server's own CPU µs/req moves
# by 20% between rounds), and each round runs the two within a minute of each other, so the
# per-round ratio cancels most of the drift that the ratio of medians keeps.
paired_ratio() { # CSV PEER SCENARIO
    awk -F, -v p="$2" -v c="$3" '
        NR > 1 && $3 == c && $2 == "magpied" { m[$1] = $8 }
        NR > 1 && $3 == c && $2 == p { q[$1] = $8 }
        END {
            n = 0
            for (r in m) if ((r in q) && q[r] > 0) x[++n] = m[r] / q[r]
            if (n == 0) { print "n/a"; exit }
            for (i = 2; i <= n; i++) { v = x[i]; for (j = i - 1; j >= 1 && x[j] > v; j--) x[j + 1] = x[j]; x[j + 1] = v }
            med = n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
            printf "%.2f (%.2f–%.2f)", med, x[1], x[n]
        }' "$1"
}

report() { # CSV SERVER...
    local csv=$1 sc s rps p50 p99 cpu mr mc errs
    shift
    local have_m=0
    for s in "$@"; do [[ $s == magpied ]] && have_m=1; done
    for sc in $SCENARIOS; do
        read -r conns depth < <(scenario_shape "$sc")
        echo
        if [[ $sc == f304-* ]]; then
            echo "### $sc: wrk -t1 -c$conns, GET $(scenario_path "$sc") with If-None-Match (304), ${DURATION}s, median of $ROUNDS"
        elif [[ $sc == f* ]]; then
            echo "### $sc: wrk -t1 -c$conns, GET $(scenario_path "$sc"), ${DURATION}s, median of $ROUNDS"
        elif ((depth > 1)); then
            echo "### $sc: wrk -t1 -c$conns, $depth pipelined GET / per write, ${DURATION}s, median of $ROUNDS"
        else
            echo "### $sc: wrk -t1 -c$conns, GET /, ${DURATION}s, median of $ROUNDS"
        fi
        echo
        if ((have_m)); then
            echo "| server | req/s | p50 | p99 | CPU µs/req | magpied/peer req/s | magpied/peer CPU | paired req/s ratio |"
            echo "|---|---:|---:|---:|---:|---:|---:|---:|"
            mr=$(col "$csv" magpied "$sc" req_per_s)
            mc=$(col "$csv" magpied "$sc" cpu_us_per_req)
        else
            echo "| server | req/s | p50 | p99 | CPU µs/req |"
            echo "|---|---:|---:|---:|---:|"
        fi
        for s in "$@"; do
            [[ $sc != f* ]] || serves_files "$s" || continue
            rps=$(col "$csv" "$s" "$sc" req_per_s)
            if [[ -z $rps ]]; then
                echo "| $s | (no data) | | | |$( ((have_m)) && echo ' | | |')"
                continue
            fi
            p50=$(col "$csv" "$s" "$sc" p50_us)
            p99=$(col "$csv" "$s" "$sc" p99_us)
            cpu=$(col "$csv" "$s" "$sc" cpu_us_per_req)
            printf '| %s | %s | %s | %s | %.2f |' "$s" "$(fmt_rps "$rps")" "$(fmt_us "$p50")" \
                "$(fmt_us "$p99")" "$cpu"
            if ((have_m)); then
                if [[ $s == magpied || -z $mr ]]; then
                    printf ' — | — | — |'
                else
                    awk -v a="$mr" -v b="$rps" -v c="$mc" -v d="$cpu" \
                        'BEGIN { printf " %.2f | %.2f |", a / b, (d > 0 ? c / d : 0) }'
                    printf ' %s |' "$(paired_ratio "$csv" "$s" "$sc")"
                fi
            fi
            echo
        done
        errs=$(awk -F, -v c="$sc" 'NR > 1 && $3 == c && ($13 + $14) > 0 {
                   printf "%s%s round %s: %d socket errors, %d non-2xx", sep, $2, $1, $13, $14; sep = "; " }' "$csv")
        [[ -z $errs ]] || { echo; echo "Errors: $errs"; }
        awk -F, -v c="$sc" 'NR > 1 && $3 == c { x = $16 / $6; if (x > m) m = x; t += x; n++ }
            END { if (n && m >= 0.05) printf "\nBackground CPU (neither server nor wrk) during these runs: mean %.0f%%, max %.0f%% of one CPU.\n", 100 * t / n, 100 * m }' "$csv"
    done
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
