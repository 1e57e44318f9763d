#!/usr/bin/env bash
# loadtest/http/instructions.sh: magpied's cost per keep-alive request against the floor
# (floor.c: a bare libuv + llhttp server answering the same bytes), in one run.
#
#   loadtest/http/instructions.sh                  both servers, defaults below
#   DURATION=30 CONNS=16 loadtest/http/instructions.sh
#   SERVERS="magpied floor nginx" loadtest/http/instructions.sh    nginx beside them
#   SERVERS=proxy loadtest/http/instructions.sh    magpied as a reverse proxy to the floor
#
# For each server, started on 127.0.0.1 and a free port (magpied: 1 worker, access log off,
# the echo listener off, its config copied to a temporary directory; nginx: peers/nginx's
# configuration with one process, master_process off, so that callgrind sees the one that
# serves; proxy: magpied, one worker, [route /] handler = proxy to an [upstream] of the floor
# on its own port, keepalive = 64, so that each request is one upstream exchange on a pooled
# connection; the floor's instructions are not counted):
#
#  1. under valgrind --tool=callgrind: warm up with wrk for WARMUP seconds, zero the counters
#     (callgrind_control -z), run wrk -t1 -c CONNS for DURATION seconds, dump (callgrind_control
#     -d): user-space instructions of the load window only, divided by the requests wrk
#     completed. Both servers see the same client; RUNS below MIN_REQUESTS are flagged.
#  2. without valgrind, under strace -c -f attached for the load window only: a wrk run of
#     STRACE_DURATION seconds; syscalls of every thread divided by the requests.
#
# These VMs expose no hardware counters, and wall-clock CPU per request moves by ±15% from run
# to run here; instruction counts repeat to within a few per cent, which is why this is the
# figure to compare. Prints one Markdown table, then each server's TOP functions by
# instructions per request; the profiles stay in build/loadtest/insn-STAMP/
# for callgrind_annotate. Every process it starts it stops by its PID, also on Ctrl-C.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

DURATION=${DURATION:-20}
STRACE_DURATION=${STRACE_DURATION:-5}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-16}
MIN_REQUESTS=${MIN_REQUESTS:-100000}
TOP=${TOP:-30}
READY_TIMEOUT=${READY_TIMEOUT:-60}
SERVERS=${SERVERS:-magpied floor}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
MAGPIED_CONF=${MAGPIED_CONF:-$ROOT/config/magpied.conf}
NGINX=${NGINX:-/usr/sbin/nginx}
LLHTTP_DIR=${LLHTTP_DIR:-/usr/share/llhttp}
LLHTTP_INC_DIR=${LLHTTP_INC_DIR:-/usr/share/include/llhttp}
OUTDIR=${OUTDIR:-$ROOT/build/loadtest}
LOCK=${LOCK:-/tmp/lt/bench.lock}
LOCK_WAIT=${LOCK_WAIT:-3600}

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'instructions.sh: %s\n' "$*" >&2; exit 1; }

# build_floor, free_port and stop_pid (given 10 s: valgrind writes its profile at exit).
PROG=instructions.sh
STOP_WAIT=10
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"

for t in valgrind callgrind_control strace wrk curl ss flock timeout; do
    command -v "$t" >/dev/null || die "$t not found"
done

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RUN=$OUTDIR/insn-$STAMP
mkdir -p "$RUN" "$(dirname "$LOCK")"
TMP=$(mktemp -d)

SRV_PID=
AUX_PID=
UP_PID=

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n $AUX_PID ]]; then stop_pid "$AUX_PID"; fi
    if [[ -n $SRV_PID ]]; then stop_pid "$SRV_PID"; fi
    if [[ -n $UP_PID ]]; then stop_pid "$UP_PID"; fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT INT TERM HUP

bench_lock

log "building magpied and the floor"
make -C "$ROOT" -s -j2 "${MAGPIED#"$ROOT"/}" >&2
FLOOR_DIR=$OUTDIR/floor
build_floor "$FLOOR_DIR"
cp "$MAGPIED_CONF" "$TMP/magpied.conf"

# start NAME PORT [PREFIX...]: the server in the background, SRV_PID set.
start() {
    local name=$1 port=$2
    shift 2
    local -a cmd
    case $name in
    magpied)
        cmd=("$MAGPIED" -c "$TMP/magpied.conf" --set "http.listen=127.0.0.1:$port"
            --set "echo.listen=" --set runtime.workers=1 --set log.access_log=off)
        ;;
    floor) cmd=("$FLOOR_DIR/floor" "$port") ;;
    proxy)
        if [[ -z $UP_PID ]]; then
            UP_PORT=$(free_port)
            "$FLOOR_DIR/floor" "$UP_PORT" >>"$RUN/upstream.log" 2>&1 </dev/null 9>&- &
            UP_PID=$!
        fi
        printf '[http]\nlisten = 127.0.0.1:%s\n[echo]\nlisten =\n[runtime]\nworkers = 1\n[log]\naccess_log = off\n[upstream app]\nserver = 127.0.0.1:%s\nkeepalive = 64\n[route /]\nhandler = proxy\nupstream = app\n' \
            "$port" "$UP_PORT" >"$TMP/proxy.conf"
        cmd=("$MAGPIED" -c "$TMP/proxy.conf")
        ;;
    nginx)
        [[ -x $NGINX ]] || die "nginx not found at $NGINX"
        mkdir -p "$TMP/nginx"
        sed -e "s/@WORKERS@/1/" -e "s/@PORT@/$port/" -e "s#@RUNDIR@#$TMP/nginx#g" \
            -e "s/^master_process on;/master_process off;/" \
            "$HERE/../peers/nginx/nginx.conf.in" >"$TMP/nginx/nginx.conf"
        cmd=("$NGINX" -p "$TMP/nginx/" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log")
        ;;
    *) die "unknown server $name" ;;
    esac
    "$@" "${cmd[@]}" >>"$RUN/$name.log" 2>&1 </dev/null 9>&- &
    SRV_PID=$!
    local deadline=$((SECONDS + READY_TIMEOUT))
    while ((SECONDS < deadline)); do
        kill -0 "$SRV_PID" 2>/dev/null || { tail "$RUN/$name.log" >&2; die "$name exited"; }
        [[ $(curl -s -m 2 "http://127.0.0.1:$port/" 2>/dev/null) == "Hello, World!" ]] && return
        sleep 0.2
    done
    die "$name did not answer within ${READY_TIMEOUT}s"
}

# load PORT SECONDS OUT: one wrk run, bounded in time; prints the requests it completed.
load() {
    local port=$1 secs=$2 out=$3
    timeout $((secs + 30)) wrk -t1 -c "$CONNS" -d "${secs}s" "http://127.0.0.1:$port/" \
        >"$out" 2>&1 9>&- || die "wrk failed: $(tail -3 "$out")"
    awk '/requests in/ {print $1}' "$out"
}

declare -A REQ IR SREQ SYS
for name in $SERVERS; do
    port=$(free_port)
    log "$name: callgrind, wrk -t1 -c$CONNS -d${DURATION}s"
    start "$name" "$port" valgrind --tool=callgrind --dump-instr=no \
        --callgrind-out-file="$RUN/$name.cg.%p"
    load "$port" "$WARMUP" "$RUN/$name.warm.txt" >/dev/null
    callgrind_control -z "$SRV_PID" >/dev/null 2>&1
    REQ[$name]=$(load "$port" "$DURATION" "$RUN/$name.wrk.txt")
    callgrind_control -d "$SRV_PID" >/dev/null 2>&1
    stop_pid "$SRV_PID"
    SRV_PID=
    dump=$(ls "$RUN/$name.cg."*.1 2>/dev/null | head -1)
    [[ -n $dump ]] || die "no callgrind dump for $name"
    mv "$dump" "$RUN/$name.load.cg"
    IR[$name]=$(awk '/^summary:/ {print $2}' "$RUN/$name.load.cg")
    ((REQ[$name] >= MIN_REQUESTS)) ||
        log "$name: only ${REQ[$name]} requests (< $MIN_REQUESTS): raise DURATION"

    port=$(free_port)
    log "$name: strace -c -f, wrk -t1 -c$CONNS -d${STRACE_DURATION}s"
    start "$name" "$port"
    load "$port" "$WARMUP" "$RUN/$name.warm2.txt" >/dev/null
    strace -c -f -p "$SRV_PID" -o "$RUN/$name.strace" 9>&- 2>"$RUN/$name.strace.err" &
    AUX_PID=$!
    sleep 1 # attached to every thread before the load begins
    SREQ[$name]=$(load "$port" "$STRACE_DURATION" "$RUN/$name.wrk2.txt")
    kill -INT "$AUX_PID"
    wait "$AUX_PID" 2>/dev/null || true
    AUX_PID=
    stop_pid "$SRV_PID"
    SRV_PID=
    SYS[$name]=$(awk '$NF == "total" {print $4}' "$RUN/$name.strace")
done

{
    echo "| server | requests (callgrind) | instructions/request | ratio to floor | ratio to nginx | requests (strace) | syscalls/request |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for name in $SERVERS; do
        awk -v n="$name" -v r="${REQ[$name]}" -v i="${IR[$name]}" -v fr="${REQ[floor]:-0}" \
            -v fi="${IR[floor]:-0}" -v nr="${REQ[nginx]:-0}" -v ni="${IR[nginx]:-0}" \
            -v sr="${SREQ[$name]}" -v s="${SYS[$name]}" 'BEGIN {
            ratio = (fr > 0 && fi > 0) ? sprintf("%.2f", (i / r) / (fi / fr)) : "-"
            nratio = (nr > 0 && ni > 0) ? sprintf("%.2f", (i / r) / (ni / nr)) : "-"
            printf "| %s | %d | %.0f | %s | %s | %d | %.2f |\n", n, r, i / r, ratio, nratio, sr, s / sr }'
    done
} | tee "$RUN/table.md"

# Where each server's instructions go: exclusive cost per request, the TOP functions. Rows
# equal to the total are frames that were on the stack when the counters were zeroed
# (clone, main, the loop), which callgrind charges with everything below them.
for name in $SERVERS; do
    echo
    echo "$name: instructions per request by function (exclusive), top $TOP"
    callgrind_annotate --threshold=100 --inclusive=no "$RUN/$name.load.cg" 2>/dev/null |
        awk -v r="${REQ[$name]}" -v n="$TOP" -v total="${IR[$name]}" '
        match($0, /^ *[0-9,]+ +\( *[0-9.]+%\) +/) {
            ir = $1; gsub(",", "", ir)
            if (ir + 0 >= total * 0.999) next
            f = substr($0, RLENGTH + 1); sub(/ \[.*/, "", f); sub(/.*\//, "", f)
            if (shown++ < n) printf "%8.1f  %s\n", ir / r, f
        }'
done | tee -a "$RUN/table.md"
log "profiles: $RUN/<server>.load.cg (callgrind_annotate --inclusive=no FILE)"
