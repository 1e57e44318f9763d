#!/usr/bin/env bash
# loadtest/load/vs-wrk.sh: magpie-load against wrk, both loading the same server.
#
#   loadtest/load/vs-wrk.sh                     3 rounds x 10 s, c64, one client thread
#   ROUNDS=1 DURATION=3 loadtest/load/vs-wrk.sh     a smoke run
#   PIN=1 loadtest/load/vs-wrk.sh               the server on CPU 1 with one worker, the client on CPU 0
#   SERVER=nginx loadtest/load/vs-wrk.sh        nginx (loadtest/peers/nginx) instead of magpied
#   LOAD_THREADS=2 loadtest/load/vs-wrk.sh      magpie-load with two workers (wrk stays -t1)
#   ALSO="t2=build/release/magpie-load:2 old=/tmp/magpie-load.old:1" loadtest/load/vs-wrk.sh
#                                               more magpie-load clients (NAME=BINARY:THREADS) in
#                                               every round: before/after or -t1/-t2 in one run
#
# The server (SERVER=magpied: build/release/magpied, config/magpied.conf; SERVER=nginx: the
# peer configuration of loadtest/http/compare.sh) starts once on a free loopback port.
# Each round runs `wrk -t1 -cC -dD` and `magpie-load -tT -cC -dD` (T: LOAD_THREADS, 1 unless
# set) (and, with PIPE set,
# both again with PIPE requests per write: wrk through loadtest/http/pipeline.lua), the
# order rotated every round (ALSO's clients take turns with them). Per run: req/s, the client's CPU seconds (user+sys of the
# client process, from bash's `times` in a subshell that runs only the client: the same
# measure for both), the server's CPU from /proc/PID/stat, and p50/p99 as each client reports
# them. Prints a table of medians and the ratios magpie-load/wrk: req/s (>= 0.95 wanted) and
# requests per client CPU-second (>= 1.3 wanted). Raw outputs in build/loadtest/vs-wrk-STAMP/.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
PIPE=${PIPE:-}
WARMUP=${WARMUP:-2}
PIN=${PIN:-0}
LOAD_THREADS=${LOAD_THREADS:-1}
SERVER=${SERVER:-magpied}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
LOAD=${LOAD:-$ROOT/build/release/magpie-load}
OUT=${OUTDIR:-$ROOT/build/loadtest}/vs-wrk-$(date +%Y%m%d-%H%M%S)
LOCK=${LOCK:-/tmp/lt/bench.lock}
mkdir -p "$OUT" "$(dirname "$LOCK")"
for t in wrk timeout flock; do command -v $t >/dev/null || { echo "needs $t" >&2; exit 2; }; done
[[ -x $MAGPIED && -x $LOAD ]] || { echo "build first: make all load" >&2; exit 2; }

exec 9>"$LOCK"
flock -w 3600 9 || { echo "timed out waiting for $LOCK" >&2; exit 2; }

if [[ $PIN == 1 ]]; then
    SRV=(taskset -c 1)
    CLI=(taskset -c 0)
    WORKERS=1
else
    SRV=()
    CLI=()
    WORKERS=${WORKERS:-0}
fi
PROG=vs-wrk.sh
# tree_pids, cpu_ticks and to_us
# shellcheck source=loadtest/http/lib.sh
source "$HERE/../http/lib.sh"
cleanup() {
    if [[ -n $SRV_PID ]]; then
        local pids
        pids=$(tree_pids "$SRV_PID")
        kill "$SRV_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
        for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    fi
    [[ -z ${RUN:-} ]] || rm -rf "$RUN"
}
trap cleanup EXIT INT TERM

case $SERVER in
magpied)
    "${SRV[@]}" "$MAGPIED" -c "$ROOT/config/magpied.conf" --set http.listen=127.0.0.1:0 \
        --set echo.listen= --set runtime.workers="$WORKERS" >"$OUT/magpied.out" 2>"$OUT/magpied.err" 9>&- &
    SRV_PID=$!
    for _ in $(seq 100); do grep -q listening "$OUT/magpied.out" 2>/dev/null && break; sleep 0.1; done
    PORT=$(sed -n 's/.*http=127.0.0.1:\([0-9]*\).*/\1/p' "$OUT/magpied.out")
    ;;
nginx)
    [[ -x $NGINX ]] || { echo "nginx not installed (apt-get install nginx-light)" >&2; exit 2; }
    mkdir -p /tmp/lt
    RUN=$(mktemp -d /tmp/lt/vs-wrk.XXXXXX)
    chmod 755 "$RUN" # its workers run as nobody
    PORT=$(free_port)
    nw=auto
    ((WORKERS > 0)) && nw=$WORKERS
    sed -e "s|@WORKERS@|$nw|g" -e "s|@PORT@|$PORT|g" -e "s|@RUNDIR@|$RUN|g" \
        "$ROOT/loadtest/peers/nginx/nginx.conf.in" >"$RUN/nginx.conf"
    "${SRV[@]}" "$NGINX" -p "$RUN/" -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log" \
        >"$OUT/nginx.out" 2>&1 9>&- &
    SRV_PID=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
    ;;
*) echo "SERVER is magpied or nginx" >&2; exit 2 ;;
esac
if [[ -z $PORT ]] || ! kill -0 "$SRV_PID" 2>/dev/null; then
    echo "$SERVER did not start" >&2
    cat "$OUT"/*.err "$OUT"/*.out >&2
    exit 1
fi
URL=http://127.0.0.1:$PORT/
CLK=$(getconf CLK_TCK)
# run FILE CMD...: runs CMD in a subshell of its own, whose `times` gives the client's CPU.
run() {
    local file=$1
    shift
    local s0 s1
    s0=$(cpu_ticks "$SRV_PID")
    (
        timeout $((DURATION + 30)) "$@" >"$file" 2>&1 || echo "exit $?" >>"$file"
        times >"$file.times"
    )
    s1=$(cpu_ticks "$SRV_PID")
    # `times`: line 2 is the children's "XmY.YYYs XmZ.ZZZs" (user, sys): total, user, sys.
    awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); us = u[1] * 60 + u[2]; ss = s[1] * 60 + s[2]
                   printf "%.3f %.3f %.3f\n", us + ss, us, ss }' "$file.times" >"$file.cpu"
    echo $(( s1 - s0 )) >"$file.srvticks"
}

declare -A BINARY=([load]=$LOAD) THREADS=([load]=$LOAD_THREADS)
CLIENTS=(wrk load)
for a in ${ALSO:-}; do # NAME=BINARY:THREADS
    n=${a%%=*} b=${a#*=}
    [[ $n != "$a" && $n =~ ^[a-z0-9_]+$ && $n != wrk && $n != load && -x ${b%:*} ]] ||
        { echo "ALSO: $a is not NAME=BINARY:THREADS (an executable, a new name)" >&2; exit 2; }
    BINARY[$n]=${b%:*} THREADS[$n]=${b##*:}
    [[ $b == *:* ]] || THREADS[$n]=1
    CLIENTS+=("$n")
done
echo "$SERVER pid $SRV_PID on $URL; $ROUNDS rounds of ${DURATION}s, c$CONNS${PIPE:+, pipeline $PIPE}, magpie-load -t$LOAD_THREADS; raw: $OUT"
[[ $WARMUP -gt 0 ]] && timeout 60 "${CLI[@]}" wrk -t1 -c"$CONNS" -d"$WARMUP" "$URL" >/dev/null
CSV=$OUT/runs.csv
echo "round,client,rps,client_cpu_s,server_cpu_s,requests,p50_us,p99_us,client_user_s,client_sys_s" >"$CSV"
for r in $(seq "$ROUNDS"); do
    order=()
    for i in "${!CLIENTS[@]}"; do order+=("${CLIENTS[$(((i + r - 1) % ${#CLIENTS[@]}))]}"); done
    for c in "${order[@]}"; do
        f=$OUT/$c-$r.txt
        if [[ $c == wrk ]]; then
            args=(wrk -t1 -c"$CONNS" -d"$DURATION" --latency)
            [[ -n $PIPE ]] && args+=(-s "$ROOT/loadtest/http/pipeline.lua")
            args+=("$URL")
            [[ -n $PIPE ]] && args+=(-- "$PIPE")
            run "$f" "${CLI[@]}" "${args[@]}"
            rps=$(awk '/^Requests\/sec/ {print $2}' "$f")
            reqs=$(awk '/requests in/ {print $1}' "$f")
            p50=$(to_us "$(awk '$1 == "50%" {print $2}' "$f")")
            p99=$(to_us "$(awk '$1 == "99%" {print $2}' "$f")")
        else
            args=("${BINARY[$c]}" -t"${THREADS[$c]}" -c"$CONNS" -d"$DURATION" --json "$f.json")
            [[ -n $PIPE ]] && args+=(-p "$PIPE")
            run "$f" "${CLI[@]}" "${args[@]}" "$URL"
            rps=$(sed -n 's/.*"requests_per_s": \([0-9.]*\).*/\1/p' "$f.json")
            reqs=$(sed -n 's/.*"requests": \([0-9]*\).*/\1/p' "$f.json")
            p50=$(sed -n 's/.*"latency_us".*"p50": \([0-9.]*\).*/\1/p' "$f.json")
            p99=$(sed -n 's/.*"latency_us".*"p99": \([0-9.]*\).*/\1/p' "$f.json")
        fi
        read -r cpu user sys <"$f.cpu"
        srv=$(awk -v t="$(cat "$f.srvticks")" -v k="$CLK" 'BEGIN { printf "%.2f", t / k }')
        echo "$r,$c,$rps,$cpu,$srv,$reqs,$p50,$p99,$user,$sys" >>"$CSV"
        printf '  round %d/%d %-6s %10.0f req/s  client CPU %6.2fs (%s us/req)  server CPU %6.2fs  p50 %sus p99 %sus\n' \
            "$r" "$ROUNDS" "$c" "$rps" "$cpu" "$(awk -v c="$cpu" -v u="$user" -v n="$reqs" 'BEGIN { if (n) printf "%.2f, user %.2f", c * 1e6 / n, u * 1e6 / n; else print 0 }')" \
            "$srv" "$p50" "$p99"
    done
done

# Medians per client, then the ratios (each magpie-load client against wrk).
awk -F, 'NR > 1 { rps[$2] = rps[$2] " " $3; eff[$2] = eff[$2] " " ($4 > 0 ? $6 / $4 : 0)
        usr[$2] = usr[$2] " " ($6 > 0 ? $9 * 1e6 / $6 : 0); sys[$2] = sys[$2] " " ($6 > 0 ? $10 * 1e6 / $6 : 0); if (!($2 in seen)) order[++n] = $2; seen[$2] = 1 }
    function med(s,   a, n, i, j, t) { n = split(s, a, " ");
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    function name(c) { return c == "load" ? "magpie-load" : c == "wrk" ? "wrk" : "magpie-load " c }
    END {
        printf "\n| client | req/s (median) | requests per client CPU-second (median) | client user µs/req | client sys µs/req |\n|---|---:|---:|---:|---:|\n"
        for (i = 1; i <= n; i++) printf "| %s | %.0f | %.0f | %.2f | %.2f |\n", name(order[i]), med(rps[order[i]]), med(eff[order[i]]), med(usr[order[i]]), med(sys[order[i]])
        for (i = 1; i <= n; i++) if (order[i] != "wrk")
            printf "\nagainst %s: %s / wrk: req/s %.2fx, requests per client CPU-second %.2fx", srv, name(order[i]),
                med(rps[order[i]]) / med(rps["wrk"]), med(eff[order[i]]) / med(eff["wrk"])
        printf "\n"
    }' srv="$SERVER" "$CSV" | tee "$OUT/summary.md"
