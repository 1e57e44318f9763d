#!/usr/bin/env bash
# loadtest/http/proxy-compare.sh: magpied as a reverse proxy against nginx and HAProxy, the
# same upstream behind each, under wrk.
#
#   loadtest/http/proxy-compare.sh                        3 rounds, c64 and c256, 10 s each
#   ROUNDS=1 DURATION=3 loadtest/http/proxy-compare.sh    a smoke run
#   UPSTREAM=magpied loadtest/http/proxy-compare.sh       magpied (one worker) as the upstream
#
# One upstream for the whole run on 127.0.0.1 and a free port: the floor (floor.c, a bare
# libuv + llhttp server, built with build_floor) by default, or magpied with one worker. In
# front of it, one proxy at a time, each with a keep-alive pool to it:
#
#   magpied   [upstream app] server = 127.0.0.1:UP, keepalive = KEEPALIVE; [route /] handler = proxy
#   nginx     upstream { server 127.0.0.1:UP; keepalive KEEPALIVE; keepalive_requests 1000000; }
#             proxy_pass, proxy_http_version 1.1, proxy_set_header Connection ""
#   haproxy   mode http, http-reuse always, option http-keep-alive
#
# Rounds are interleaved as in compare.sh (every proxy in round 1, then every proxy in round
# 2, starting one proxy further down the list each round). Per proxy and round: start it, warm
# it up with a short wrk run, then each scenario with wrk -t1 --latency (c64: 64 keep-alive
# connections, c256: 256), recording req/s, p50, p99 and the proxy's CPU time per request
# (utime+stime from /proc/PID/stat of the proxy's process tree only; the upstream's is logged
# beside it). Prints one Markdown table per scenario with the ratios magpied/nginx and
# magpied/haproxy (medians over rounds, and the median of per-round ratios), then the targets
# (req/s >= 1.2x nginx's and >= 1.1x HAProxy's, CPU per request below both) met or missed.
# Raw numbers in build/loadtest/proxy-STAMP.csv, tables in proxy-STAMP.md, wrk output in
# proxy-STAMP/. Every process it starts it stops by its PID, also on Ctrl-C.

set -euo pipefail
shopt -s nullglob

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SCENARIOS=${SCENARIOS:-c64 c256}
PIPE_CONNS=${PIPE_CONNS:-64}
PROXIES=${PROXIES:-magpied nginx haproxy}
UPSTREAM=${UPSTREAM:-floor}
WORKERS=${WORKERS:-}
KEEPALIVE=${KEEPALIVE:-64}
SETTLE=${SETTLE:-1}
QUIET=${QUIET:-0.25}
QUIET_WAIT=${QUIET_WAIT:-20}
READY_TIMEOUT=${READY_TIMEOUT:-15}
OUTDIR=${OUTDIR:-$ROOT/build/loadtest}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
LOCK=${LOCK:-/tmp/lt/bench.lock}
LOCK_WAIT=${LOCK_WAIT:-3600}
WRK_PREFIX=()
CLK_TCK=$(getconf CLK_TCK)
PROG=proxy-compare.sh

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'proxy-compare.sh: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 0 ]] || { echo "usage: $0   (knobs are environment variables, see README.md)" >&2; exit 2; }
for t in curl wrk timeout flock ss cc; do
    command -v "$t" >/dev/null || die "$t not found"
done

# stop_pid, free_port, cpu_ticks, run_wrk, settle, report ...
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"

RUN=
UP_PID=
UP_PORT=

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n $WRK_PID ]]; then stop_pid "$WRK_PID"; WRK_PID=; fi
    stop_server
    if [[ -n $UP_PID ]]; then stop_pid "$UP_PID"; UP_PID=; fi
    if [[ -n $RUN && -d $RUN && ${KEEP:-0} != 1 ]]; then rm -rf "$RUN"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "proxy-compare.sh: interrupted" >&2; exit 130' INT
trap 'echo "proxy-compare.sh: terminated" >&2; exit 143' TERM HUP

mkdir -p /tmp/lt "$OUTDIR"
RUN=$(mktemp -d /tmp/lt/proxy.XXXXXX)
chmod 755 "$RUN" # nginx workers run as nobody

bench_lock

# ---------------------------------------------------------------------------------------
# What runs: the proxies that are installed, magpied built if missing.

declare -A SKIP=()
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
[[ -x $NGINX ]] || SKIP[nginx]="nginx not installed (apt-get install nginx)"
[[ -x $HAPROXY ]] || SKIP[haproxy]="haproxy not installed (apt-get install haproxy)"
if [[ ! -x $MAGPIED ]]; then
    log "building magpied (make)"
    make -C "$ROOT" -s -j2 "${MAGPIED#"$ROOT"/}" >&2 || die "make failed"
fi
if [[ $UPSTREAM == floor ]]; then
    log "building the floor"
    build_floor "$OUTDIR/floor"
fi

# Waits until GET / on port $2 answers "Hello, World!" while PID $1 lives.
ready() { # PID PORT NAME
    local deadline=$((SECONDS + READY_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$1" 2>/dev/null; then
            echo "proxy-compare.sh: $3 exited during start-up:" >&2
            tail -20 "$RUN/$3.log" >&2
            return 1
        fi
        [[ $(curl -s --max-time 1 "http://127.0.0.1:$2/" 2>/dev/null) == "Hello, World!" ]] &&
            return 0
        sleep 0.1
    done
    echo "proxy-compare.sh: $3 did not answer GET / within ${READY_TIMEOUT}s:" >&2
    tail -20 "$RUN/$3.log" >&2
    return 1
}

start_upstream() {
    local -a cmd
    UP_PORT=$(free_port)
    case $UPSTREAM in
    floor) cmd=("$OUTDIR/floor/floor" "$UP_PORT") ;;
    magpied)
        cmd=("$MAGPIED" -c "$ROOT/config/magpied.conf" --set "http.listen=127.0.0.1:$UP_PORT"
            --set "echo.listen=" --set runtime.workers=1 --set log.access_log=off)
        ;;
    *) die "UPSTREAM must be floor or magpied, not '$UPSTREAM'" ;;
    esac
    echo "+ ${cmd[*]}" >"$RUN/upstream.log"
    "${cmd[@]}" >>"$RUN/upstream.log" 2>&1 </dev/null 9>&- &
    UP_PID=$!
    ready "$UP_PID" "$UP_PORT" upstream || die "the upstream ($UPSTREAM) did not start"
}

# The proxy $1 on a fresh port in the background: SRV_PID and PORT set.
start_proxy() {
    local name=$1 w=${WORKERS:-} conf
    local -a cmd
    PORT=$(free_port)
    case $name in
    magpied)
        conf=$RUN/magpied.conf
        cat >"$conf" <<EOF
[http]
listen = 127.0.0.1:$PORT
[echo]
listen =
[runtime]
workers = ${w:-0}
[log]
access_log = off
[upstream app]
server = 127.0.0.1:$UP_PORT
keepalive = $KEEPALIVE
[route /]
handler = proxy
upstream = app
EOF
        cmd=("$MAGPIED" -c "$conf")
        ;;
    nginx)
        conf=$RUN/nginx.conf
        cat >"$conf" <<EOF
daemon off;
master_process on;
worker_processes ${w:-auto};
pid $RUN/nginx.pid;
error_log $RUN/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    server_tokens off;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    client_body_temp_path $RUN/client_body;
    proxy_temp_path $RUN/proxy;
    fastcgi_temp_path $RUN/fastcgi;
    uwsgi_temp_path $RUN/uwsgi;
    scgi_temp_path $RUN/scgi;
    upstream app {
        server 127.0.0.1:$UP_PORT;
        keepalive $KEEPALIVE;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$PORT backlog=1024;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
        cmd=("$NGINX" -p "$RUN/" -c "$conf" -e "$RUN/nginx-error.log")
        ;;
    haproxy)
        conf=$RUN/haproxy.cfg
        cat >"$conf" <<EOF
global
    maxconn 4096
${w:+    nbthread $w}
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 75s
frontend fe
    bind 127.0.0.1:$PORT
    default_backend app
backend app
    server up 127.0.0.1:$UP_PORT
EOF
        cmd=("$HAPROXY" -db -f "$conf")
        ;;
    *) die "unknown proxy '$name' (known: magpied nginx haproxy)" ;;
    esac
    echo "+ ${cmd[*]}" >"$RUN/$name.log"
    "${cmd[@]}" >>"$RUN/$name.log" 2>&1 </dev/null 9>&- &
    SRV_PID=$!
    if ! ready "$SRV_PID" "$PORT" "$name"; then
        stop_server
        return 1
    fi
}

# ---------------------------------------------------------------------------------------
# main

ACTIVE=()
for s in $PROXIES; do
    if [[ -n ${SKIP[$s]:-} ]]; then log "skipping $s: ${SKIP[$s]}"; else ACTIVE+=("$s"); fi
done
((${#ACTIVE[@]} > 0)) || die "no proxy to run"
start_upstream
log "upstream: $UPSTREAM (PID $UP_PID, port $UP_PORT)"

STAMP=$(date +%Y%m%d-%H%M%S)
RAW=$OUTDIR/proxy-$STAMP
CSV=$OUTDIR/proxy-$STAMP.csv
MD=$OUTDIR/proxy-$STAMP.md
mkdir -p "$RAW"
echo "round,server,scenario,connections,pipeline,duration_s,requests,req_per_s,p50_us,p99_us,cpu_s,cpu_us_per_req,socket_errors,non2xx,load1,bg_cpu_s,upstream_cpu_us_per_req" >"$CSV"

n=${#ACTIVE[@]}
per_proxy=$WARMUP
for sc in $SCENARIOS; do per_proxy=$((per_proxy + DURATION + SETTLE)); done
log "proxies: ${ACTIVE[*]}; scenarios: $SCENARIOS; $ROUNDS rounds; about $((ROUNDS * n * (per_proxy + 1) / 60 + 1)) minutes; raw output in $RAW"

for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
        s=${ACTIVE[$(((k + r - 1) % n))]}
        if ! start_proxy "$s"; then
            echo "proxy-compare.sh: round $r: $s failed to start; no data for it this round" >&2
            continue
        fi
        log "round $r/$ROUNDS: $s (PID $SRV_PID, port $PORT)"
        ((WARMUP > 0)) && run_wrk "$RAW/r$r-$s-warmup.txt" 64 1 "$WARMUP"
        for sc in $SCENARIOS; do
            settle
            read -r conns depth < <(scenario_shape "$sc")
            load1=$(awk '{ print $1 }' /proc/loadavg)
            u0=$(cpu_ticks "$UP_PID")
            run_wrk "$RAW/r$r-$s-$sc.txt" "$conns" "$depth" "$DURATION"
            u1=$(cpu_ticks "$UP_PID")
            cpu_us=$(awk -v c="$W_CPU" -v n="$W_REQS" 'BEGIN { printf "%.3f", (n > 0 ? c * 1e6 / n : 0) }')
            up_us=$(awk -v t="$((u1 - u0))" -v hz="$CLK_TCK" -v n="$W_REQS" \
                'BEGIN { printf "%.3f", (n > 0 ? t / hz * 1e6 / n : 0) }')
            echo "$r,$s,$sc,$conns,$depth,$DURATION,$W_REQS,$W_RPS,$W_P50,$W_P99,$W_CPU,$cpu_us,$W_ERRS,$W_NON2XX,$load1,$W_BG,$up_us" >>"$CSV"
            printf '   %-8s %-6s %8s req/s  p50 %-9s p99 %-9s %6.2f CPU µs/req (upstream %s)  bg %s s%s\n' \
                "$s" "$sc" "$(fmt_rps "$W_RPS")" "$(fmt_us "$W_P50")" "$(fmt_us "$W_P99")" "$cpu_us" \
                "$up_us" "$W_BG" \
                "$( ((W_ERRS + W_NON2XX > 0)) && echo "  ($W_ERRS socket errors, $W_NON2XX non-2xx)")" >&2
        done
        stop_server
    done
done

# The targets, per scenario, from the medians over rounds (req/s also from the paired ratio).
targets() {
    local sc m_rps m_cpu peer rps cpu need
    for sc in $SCENARIOS; do
        m_rps=$(col "$CSV" magpied "$sc" req_per_s)
        m_cpu=$(col "$CSV" magpied "$sc" cpu_us_per_req)
        [[ -n $m_rps ]] || continue
        for peer in nginx haproxy; do
            rps=$(col "$CSV" "$peer" "$sc" req_per_s)
            cpu=$(col "$CSV" "$peer" "$sc" cpu_us_per_req)
            [[ -n $rps ]] || continue
            need=1.1
            [[ $peer == nginx ]] && need=1.2
            awk -v sc="$sc" -v p="$peer" -v a="$m_rps" -v b="$rps" -v c="$m_cpu" -v d="$cpu" \
                -v need="$need" -v pr="$(paired_ratio "$CSV" "$peer" "$sc")" 'BEGIN {
                ratio = a / b
                verdict = (ratio >= need) ? "met" : sprintf("missed by %.0f%%", 100 * (need - ratio) / need)
                printf "- %s, magpied/%s: req/s %.2fx (paired %s; target >= %.1fx: %s), ", sc, p,
                    ratio, pr, need, verdict
                printf "CPU/req %.2fx (target < 1: %s)\n", c / d, (c < d) ? "met" : "missed" }'
        done
    done
}

{
    echo "## Proxy comparison $STAMP"
    echo
    echo "\`ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP UPSTREAM=$UPSTREAM KEEPALIVE=$KEEPALIVE${WORKERS:+ WORKERS=$WORKERS} PROXIES=\"${ACTIVE[*]}\" loadtest/http/proxy-compare.sh\`"
    echo "on $(nproc) CPUs, $(uname -sr), $(wrk --version 2>&1 | head -1 | awk '{ print "wrk", $2 }'), nginx $("$NGINX" -v 2>&1 | sed 's|.*/||'), HAProxy $("$HAPROXY" -v 2>/dev/null | awk 'NR == 1 { print $3 }');"
    echo "one proxy at a time on 127.0.0.1 in front of the same $UPSTREAM upstream; the proxies use ${WORKERS:-all} CPUs, wrk -t1 and the upstream share the machine."
    echo "CPU µs/req = the proxy's utime+stime (/proc/PID/stat, all threads and child processes) / requests."
    for s in "${!SKIP[@]}"; do echo "Skipped $s: ${SKIP[$s]}."; done
    report "$CSV" "${ACTIVE[@]}"
    echo
    awk -F, 'NR > 1 && $2 != "" { t[$2] += $17; n[$2]++ }
        END { printf "Upstream CPU µs/req (mean over runs):"; for (s in t) printf " %s %.2f;", s, t[s] / n[s]; print "" }' "$CSV"
    echo
    echo "Targets:"
    targets
    echo
    echo "Raw: $CSV"
} | tee "$MD"
