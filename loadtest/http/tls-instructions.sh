#!/usr/bin/env bash
# loadtest/http/tls-instructions.sh: instructions per TLS handshake and per TLS keep-alive
# request, magpied against nginx and HAProxy, each with one worker under callgrind.
#
#   loadtest/http/tls-instructions.sh                    every server and scenario below
#   SERVERS="magpied nginx" SCENARIOS=full DURATION=20 loadtest/http/tls-instructions.sh
#
# Wall-clock CPU on the shared 2-vCPU machines moves with the others' builds; instruction
# counts do not. For each server (magpied: runtime.workers = 1; nginx: master_process off,
# one worker; HAProxy: nbthread 1; the same certificate, made per run, ECDSA P-256) and
# scenario, on a fresh server under valgrind --tool=callgrind: warm up with magpie-load for
# WARMUP seconds, zero the counters (callgrind_control -z), run magpie-load for DURATION
# seconds, dump (callgrind_control -d); the load window's user-space instructions divided by
# the handshakes (full, resumed) or the requests (ka) magpie-load completed:
#
#   full      -c CONNS --tls13 -H 'Connection: close' GET /: a full handshake per request
#   resumed   the same with --resume (TLS 1.3 tickets)
#   ka        -c CONNS keep-alive GET /static/1k.bin (HAProxy: its http-request return)
#
# Prints a table (instructions per operation, the ratios magpied/peer) and, per server and
# scenario, where they go: by shared object (libcrypto, libssl, libc, the server) and the TOP
# functions (exclusive). Profiles stay in build/loadtest/tlsinsn-STAMP/ for callgrind_annotate.
# Every process it starts it stops by its PID, also on Ctrl-C.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

DURATION=${DURATION:-15}
WARMUP=${WARMUP:-2}
CONNS=${CONNS:-4}
TOP=${TOP:-25}
READY_TIMEOUT=${READY_TIMEOUT:-60}
SERVERS=${SERVERS:-magpied nginx haproxy}
SCENARIOS=${SCENARIOS:-full resumed ka}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
LOAD=${LOAD:-$ROOT/build/release/magpie-load}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
OUTDIR=${OUTDIR:-$ROOT/build/loadtest}
LOCK=${LOCK:-/tmp/lt/bench.lock}
LOCK_WAIT=${LOCK_WAIT:-3600}

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'tls-instructions.sh: %s\n' "$*" >&2; exit 1; }

PROG=tls-instructions.sh
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"
# shellcheck source=loadtest/http/tls-servers.sh
source "$HERE/tls-servers.sh"

for t in valgrind callgrind_control callgrind_annotate curl openssl ss flock timeout; do
    command -v "$t" >/dev/null || die "$t not found"
done
[[ -x $MAGPIED && -x $LOAD ]] || make -C "$ROOT" -s -j2 build/release/magpied build/release/magpie-load >&2

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$OUTDIR/tlsinsn-$STAMP
mkdir -p "$OUT" /tmp/lt
RUN=$(mktemp -d /tmp/lt/tlsinsn.XXXXXX)
chmod 755 "$RUN"
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    stop_server
    rm -rf "$RUN"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

bench_lock

tls_site "$RUN" || die "openssl req failed"
chmod -R a+rX "$RUN"

start() { # NAME: under callgrind, on a free port, one worker (nginx: one process)
    local name=$1
    PORT=$(free_port)
    NGINX_MASTER=off tls_server_conf "$name" "$RUN" "$PORT" 1 1000 || die "unknown server $name"
    local -a cmd=("${TLS_CMD[@]}")
    valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$OUT/$name.cg.%p" \
        "${cmd[@]}" >>"$OUT/$name.log" 2>&1 </dev/null 9>&- &
    SRV_PID=$!
    wait_https "$SRV_PID" "$PORT" "$READY_TIMEOUT" "$OUT/$name.log" 5 || die "$name did not start"
}

load_args() { # SCENARIO
    case $1 in
    full) echo "--tls13 -H Connection:close https://127.0.0.1:$PORT/" ;;
    resumed) echo "--tls13 --resume -H Connection:close https://127.0.0.1:$PORT/" ;;
    ka) echo "https://127.0.0.1:$PORT/static/1k.bin" ;;
    *) die "unknown scenario $1 (full resumed ka)" ;;
    esac
}

# run_load SECONDS SCENARIO CSV: one magpie-load run, bounded in time
run_load() {
    local -a args
    read -r -a args < <(load_args "$2")
    local i
    for i in "${!args[@]}"; do [[ ${args[i]} != Connection:close ]] || args[i]="Connection: close"; done
    timeout -k 5 $(($1 + 60)) "$LOAD" -q -c "$CONNS" -d "$1" --timeout 20000 --connect-timeout 20000 \
        --csv "$3" "${args[@]}" 9>&- >/dev/null 2>&1 || true
}
csv_field() {
    awk -F, -v k="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == k) c = i } NR == 2 && c { print $c }' "$1"
}

declare -A OPS IR
for sc in $SCENARIOS; do
    for name in $SERVERS; do
        log "$name $sc: callgrind, magpie-load -c$CONNS -d${DURATION}s"
        start "$name"
        run_load "$WARMUP" "$sc" "$OUT/$name-$sc.warm.csv"
        callgrind_control -z "$SRV_PID" >/dev/null 2>&1
        run_load "$DURATION" "$sc" "$OUT/$name-$sc.csv"
        callgrind_control -d "$SRV_PID" >/dev/null 2>&1
        stop_server
        # shellcheck disable=SC2012 # one file, a name we made
        dump=$(ls -t "$OUT/$name.cg."*.1 2>/dev/null | head -1)
        [[ -n $dump ]] || die "no callgrind dump for $name"
        mv "$dump" "$OUT/$name-$sc.cg"
        rm -f "$OUT/$name.cg."*
        IR[$name-$sc]=$(awk '/^summary:/ { print $2 }' "$OUT/$name-$sc.cg")
        if [[ $sc == ka ]]; then
            OPS[$name-$sc]=$(csv_field "$OUT/$name-$sc.csv" requests)
        else
            OPS[$name-$sc]=$(awk -v h="$(csv_field "$OUT/$name-$sc.csv" handshakes_per_s)" \
                -v d="$DURATION" 'BEGIN { printf "%d", h * d + 0.5 }')
        fi
        log "$name $sc: ${OPS[$name-$sc]} operations, ${IR[$name-$sc]} instructions"
    done
done

per() { awk -v i="${IR[$1]:-0}" -v o="${OPS[$1]:-0}" 'BEGIN { if (o > 0) printf "%.0f", i / o }'; }
{
    echo "| scenario | server | operations | instructions/operation | magpied/server |"
    echo "|---|---|---:|---:|---:|"
    for sc in $SCENARIOS; do
        m=$(per "magpied-$sc")
        for name in $SERVERS; do
            v=$(per "$name-$sc")
            awk -v sc="$sc" -v n="$name" -v o="${OPS[$name-$sc]:-0}" -v v="$v" -v m="$m" 'BEGIN {
                printf "| %s | %s | %d | %s | %s |\n", sc, n, o, v, (n == "magpied" || v == "" || m == "") ? "—" : sprintf("%.2f", m / v) }'
        done
    done
} | tee "$OUT/table.md"

# Where they go: exclusive instructions per operation by shared object, then by function.
for sc in $SCENARIOS; do
    for name in $SERVERS; do
        [[ -n ${OPS[$name-$sc]:-} && ${OPS[$name-$sc]} -gt 0 ]] || continue
        echo
        echo "$name $sc: instructions per operation by object, then the top $TOP functions (exclusive)"
        callgrind_annotate --auto=no --threshold=100 --inclusive=no "$OUT/$name-$sc.cg" 2>/dev/null |
            awk -v r="${OPS[$name-$sc]}" -v n="$TOP" -v total="${IR[$name-$sc]}" '
            # Rows equal to the total are frames that were on the stack when the counters
            # were zeroed (main, the threads, the loop), charged with everything below them.
            match($0, /^ *[0-9,]+ +\( *[0-9.]+%\) +/) {
                ir = $1; gsub(",", "", ir)
                if (ir + 0 >= total * 0.999) next
                f = substr($0, RLENGTH + 1)
                obj = f; if (!sub(/.*\[/, "", obj)) obj = "(the server, no object named)"; sub(/\].*/, "", obj); sub(/.*\//, "", obj)
                by[obj] += ir
                sub(/ \[.*/, "", f); sub(/.*:/, "", f)
                if (shown++ < n) top = top sprintf("%10.0f  %s (%s)\n", ir / r, f, obj)
            }
            END {
                for (o in by) printf "%10.0f  %s\n", by[o] / r, o | "sort -rn | head -8"
                close("sort -rn | head -8")
                print "  --"
                printf "%s", top
            }'
    done
done | tee -a "$OUT/table.md"
log "profiles: $OUT/<server>-<scenario>.cg (callgrind_annotate --inclusive=yes FILE)"
