#!/usr/bin/env bash
# loadtest/http/filter-cost.sh: what the per-route filters cost on the keep-alive scenario:
# access control (allow/deny), header rules (header_add/set/remove), a per-client rate limit
# (never reached), and the three together, each against the same text route without them.
#
#   loadtest/http/filter-cost.sh
#   DURATION=10 ROUNDS=5 CONNS=64 loadtest/http/filter-cost.sh
#
# One magpied per variant (1 worker, access log and echo listener off), each with one text
# route at /f that differs from the others only in its filters: the same route table, path
# and answer, so the difference is the filters' alone. Two measures, in one run:
#
#  1. instructions per request (callgrind, the figure that repeats to within a few per cent on
#     these VMs): each variant in turn under valgrind, wrk -t1 -c CONNS for IDURATION seconds
#     between callgrind_control -z and -d.
#  2. req/s and server CPU per request without valgrind: all variants running, wrk -t1 -c CONNS
#     -d DURATION against each, interleaved in each of ROUNDS rounds (a drift of the machine
#     touches every variant alike); medians, and each one's ratio to the plain one.
#
# The target (issue 33): each filter at most 3% fewer req/s than the plain route. Every process
# it starts it stops by its PID, also on Ctrl-C.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

DURATION=${DURATION:-5}
IDURATION=${IDURATION:-4}
ROUNDS=${ROUNDS:-5}
CONNS=${CONNS:-64}
READY_TIMEOUT=${READY_TIMEOUT:-60}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
OUTDIR=${OUTDIR:-$ROOT/build/loadtest}
LOCK=${LOCK:-/tmp/lt/bench.lock}
LOCK_WAIT=${LOCK_WAIT:-3600}
ROUTES=(plain acl headers ratelimit all)

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'filter-cost.sh: %s\n' "$*" >&2; exit 1; }

PROG=filter-cost.sh
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"

for t in valgrind callgrind_control wrk curl ss flock timeout; do
    command -v "$t" >/dev/null || die "$t not found"
done

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RUN=$OUTDIR/filter-$STAMP
mkdir -p "$RUN" "$(dirname "$LOCK")"
CLK_TCK=$(getconf CLK_TCK)

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    stop_all
    exit "$rc"
}
trap cleanup EXIT INT TERM HUP

bench_lock
log "building magpied"
make -C "$ROOT" -s -j2 "${MAGPIED#"$ROOT"/}" >&2

# The same text route; only the filters differ. The rate is never reached (a refusal would be
# a cheaper answer, not the filter's cost).
ACL=$'allow = 127.0.0.0/8, ::1\ndeny = all'
HDR=$'header_add = X-Content-Type-Options: nosniff\nheader_add = X-Frame-Options: DENY\nheader_set = Cache-Control: no-store\nheader_remove = X-Powered-By'
RATE=$'limit_rate = 1000000/s\nlimit_burst = 100000'
declare -A FILTERS=([plain]="" [acl]="$ACL" [headers]="$HDR" [ratelimit]="$RATE"
    [all]="$ACL"$'\n'"$HDR"$'\n'"$RATE")
for r in "${ROUTES[@]}"; do
    {
        printf '[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[runtime]\nworkers = 1\n'
        printf '[log]\naccess_log = off\n'
        printf '[route = /f]\nhandler = text\nbody = Hello, World!\n%s\n' "${FILTERS[$r]}"
    } >"$RUN/$r.conf"
    "$MAGPIED" -t -c "$RUN/$r.conf" >/dev/null || die "$r.conf does not check"
done

declare -A PID PORT_OF
stop_all() {
    local r
    for r in "${!PID[@]}"; do stop_pid "${PID[$r]}"; done
    PID=()
}

# start VARIANT [PREFIX...]: its magpied in the background on a fresh port.
start() {
    local r=$1 port
    shift
    port=$(free_port)
    "$@" "$MAGPIED" -c "$RUN/$r.conf" --set "http.listen=127.0.0.1:$port" \
        >>"$RUN/$r.log" 2>&1 </dev/null 9>&- &
    PID[$r]=$!
    PORT_OF[$r]=$port
    local deadline=$((SECONDS + READY_TIMEOUT))
    while ((SECONDS < deadline)); do
        kill -0 "${PID[$r]}" 2>/dev/null || { tail "$RUN/$r.log" >&2; die "magpied ($r) exited"; }
        [[ $(curl -s -m 2 "http://127.0.0.1:$port/f" 2>/dev/null) == "Hello, World!" ]] && return
        sleep 0.2
    done
    die "magpied ($r) did not answer within ${READY_TIMEOUT}s"
}

# wrk_at VARIANT SECONDS OUT: one bounded wrk run; prints the requests it completed.
wrk_at() {
    timeout $(($2 + 30)) wrk -t1 -c "$CONNS" -d "${2}s" "http://127.0.0.1:${PORT_OF[$1]}/f" \
        >"$3" 2>&1 9>&- || die "wrk failed: $(tail -3 "$3")"
    grep -q "Non-2xx" "$3" && die "non-2xx answers from $1: $(grep Non-2xx "$3")"
    awk '/requests in/ {print $1}' "$3"
}

# 1. Instructions per request, the variants one after another under valgrind.
declare -A IPR
log "callgrind: wrk -t1 -c$CONNS -d${IDURATION}s per variant"
for r in "${ROUTES[@]}"; do
    start "$r" valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$RUN/cg-$r.%p"
    wrk_at "$r" 2 "$RUN/warm-$r.txt" >/dev/null
    callgrind_control -z "${PID[$r]}" >/dev/null 2>&1
    n=$(wrk_at "$r" "$IDURATION" "$RUN/cg-$r.txt")
    callgrind_control -d "${PID[$r]}" >/dev/null 2>&1
    stop_all
    dump=$(ls "$RUN"/cg-"$r".*.1 2>/dev/null | head -1)
    [[ -n $dump ]] || die "no callgrind dump for $r"
    mv "$dump" "$RUN/$r.cg"
    IPR[$r]=$(awk -v n="$n" '/^summary:/ {printf "%.0f", $2 / n}' "$RUN/$r.cg")
    log "$r: $n requests, ${IPR[$r]} instructions each"
done

# 2. req/s and CPU per request, every variant running, interleaved in each round.
declare -A RPS CPU
log "wrk -t1 -c$CONNS -d${DURATION}s per variant, $ROUNDS rounds"
for r in "${ROUTES[@]}"; do
    start "$r"
    wrk_at "$r" 1 "$RUN/warm2-$r.txt" >/dev/null
done
for ((i = 1; i <= ROUNDS; i++)); do
    for r in "${ROUTES[@]}"; do
        t0=$(cpu_ticks "${PID[$r]}")
        n=$(wrk_at "$r" "$DURATION" "$RUN/wrk-$r-$i.txt")
        t1=$(cpu_ticks "${PID[$r]}")
        RPS[$r]+="$(awk -v n="$n" -v d="$DURATION" 'BEGIN {printf "%.0f", n / d}') "
        CPU[$r]+="$(awk -v n="$n" -v t=$((t1 - t0)) -v hz="$CLK_TCK" \
            'BEGIN {printf "%.2f", t / hz * 1e6 / n}') "
    done
done
stop_all

med() { tr ' ' '\n' | grep . | median; }
{
    echo "| variant | filters on the route | instructions/request | vs plain | req/s (median of $ROUNDS) | vs plain | server CPU µs/request |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    base_i=${IPR[plain]}
    base_r=$(med <<<"${RPS[plain]}")
    for r in "${ROUTES[@]}"; do
        case $r in
        plain) what="none" ;; acl) what="allow, deny" ;;
        headers) what="2 header_add, header_set, header_remove" ;;
        ratelimit) what="limit_rate (never reached)" ;; all) what="the three" ;;
        esac
        rps=$(med <<<"${RPS[$r]}")
        cpu=$(med <<<"${CPU[$r]}")
        awk -v r="$r" -v w="$what" -v i="${IPR[$r]}" -v bi="$base_i" -v q="$rps" -v bq="$base_r" \
            -v c="$cpu" 'BEGIN {
            printf "| %s | %s | %d | %+.1f%% | %d | %.3f | %.2f |\n", r, w, i,
                (i / bi - 1) * 100, q, q / bq, c }'
    done
} | tee "$RUN/table.md"
log "results: $RUN (callgrind_annotate --inclusive=no $RUN/VARIANT.cg)"
