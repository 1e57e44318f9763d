#!/usr/bin/env bash
# loadtest/load/bench-http.sh (`make bench-http`): magpied, nginx, Tokio + hyper and Go
# net/http under magpie-load, every scenario, one command; tables, CSV and plots.
#
#   make bench-http                          3 rounds x 10 s of every scenario (~40 min)
#   BENCH_QUICK=1 make bench-http            one closed-loop and one open-loop run per server,
#                                            3 s each: proves the pipeline in about a minute
#   SERVERS="magpied nginx" SCENARIOS="c64 open50 open90" make bench-http
#
# Scenarios (SCENARIOS, in this order within each round):
#   cN          N keep-alive connections, closed loop (c64 c256 c1024)
#   pipe16      64 connections, 16 requests in flight on each
#   echo1k      POST /echo with a 1 KiB body, 64 connections (not nginx: no echo route)
#   echo64k     POST /echo with a 64 KiB body, 64 connections (not nginx)
#   close       a new connection per request (Connection: close): the accept path's cost
#   openP       open loop, 64 connections, at P% of the same server's c64 rate measured in
#               this round (P in 10 25 50 75 90 100): p99 and p99.9 at a fixed offered load;
#               with SWEEP_BASE=nginx (a server in SERVERS), at P% of nginx's c64 rate of the
#               round instead, for every server: the same offered loads for all (nginx then
#               runs first in every round, and SCENARIOS must hold c64)
# Memory per idle connection is loadtest/http/idle-memory.sh's.
#
# One server runs at a time, started fresh for each round on a free loopback port, warmed up
# (WARMUP s of c64), then every scenario runs; rounds are interleaved and start one server
# further down the list each time. Each run is bounded (magpie-load -d, and timeout). The
# server's CPU per request comes from /proc/PID/stat (utime+stime, all its processes).
# Writes build/bench/STAMP/: raw/ (each run's JSON and text), runs.csv, results.md and, when
# gnuplot is installed (apt-get install gnuplot-nox), latency.png and cpu.png.
set -euo pipefail
shopt -s nullglob
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PEERS=$ROOT/loadtest/peers

if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    : "${ROUNDS:=1}" "${DURATION:=3}" "${WARMUP:=1}" "${SCENARIOS:=c64 open50}"
fi
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SCENARIOS=${SCENARIOS:-c64 c256 c1024 pipe16 echo1k echo64k close open10 open25 open50 open75 open90 open100}
SERVERS=${SERVERS:-magpied nginx hyper go}
SWEEP_BASE=${SWEEP_BASE:-}
WORKERS=${WORKERS:-}
LOAD_THREADS=${LOAD_THREADS:-1}
READY_TIMEOUT=${READY_TIMEOUT:-15}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
LOAD=${LOAD:-$ROOT/build/release/magpie-load}
BUILD_DIR=${BUILD_DIR:-$ROOT/build/loadtest}
BIN=$BUILD_DIR/bin
STAMP=$(date -u +%Y%m%d-%H%M%S)
OUT=${OUT:-$ROOT/build/bench/$STAMP}
LOCK=${LOCK:-/tmp/lt/bench.lock}

log() { printf '%s\n' "$*" >&2; }
die() { printf 'bench-http: %s\n' "$*" >&2; exit 1; }
for t in curl timeout flock ss; do command -v "$t" >/dev/null || die "$t not found"; done
[[ -x $MAGPIED && -x $LOAD ]] || die "build first: make all load"
mkdir -p "$OUT/raw" "$BIN" /tmp/lt
RUN=$(mktemp -d /tmp/lt/bench.XXXXXX)
chmod 755 "$RUN" # nginx workers run as nobody

SRV_PID=
stop_server() {
    [[ -n $SRV_PID ]] || return 0
    local pids
    pids=$(tree_pids "$SRV_PID")
    kill "$SRV_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SRV_PID" 2>/dev/null || true
    wait "$SRV_PID" 2>/dev/null || true
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    SRV_PID=
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_server
    [[ ${KEEP:-0} == 1 ]] || rm -rf "$RUN"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

exec 9>"$LOCK"
flock -n 9 || { log "waiting for $LOCK (another benchmark runs)"; flock -w 3600 9 || die "lock"; }

# ---- the servers: built or found as loadtest/http/compare.sh does

declare -A SKIP=()
for s in $SERVERS; do
    case $s in
    magpied) ;;
    nginx)
        NGINX=$(command -v nginx || echo /usr/sbin/nginx)
        [[ -x $NGINX ]] || SKIP[nginx]="nginx not installed (apt-get install nginx-light)"
        ;;
    go)
        if ! command -v go >/dev/null; then
            SKIP[go]="go not installed (apt-get install golang-go)"
        elif ! (cd "$PEERS/go" && GOPROXY=off GOFLAGS=-mod=mod GOCACHE=$BUILD_DIR/gocache \
            GOPATH=$BUILD_DIR/gopath go build -trimpath -o "$BIN/go-peer" .) \
            >"$OUT/build-go.log" 2>&1; then
            SKIP[go]="build failed (see $OUT/build-go.log)"
        fi
        ;;
    hyper)
        if [[ ! -x /usr/bin/cargo ]]; then
            SKIP[hyper]="/usr/bin/cargo missing (apt-get install cargo librust-hyper-dev librust-tokio-dev)"
        elif ! (cd "$PEERS/hyper" && CARGO_TARGET_DIR=$BUILD_DIR/cargo /usr/bin/cargo build \
            --offline --release) >"$OUT/build-hyper.log" 2>&1; then
            SKIP[hyper]="build failed (see $OUT/build-hyper.log)"
        else
            cp -f "$BUILD_DIR/cargo/release/hyper-peer" "$BIN/hyper-peer"
        fi
        ;;
    *) die "unknown server $s (known: magpied nginx hyper go)" ;;
    esac
    [[ -z ${SKIP[$s]:-} ]] || log "skipping $s: ${SKIP[$s]}"
done
ACTIVE=()
for s in $SERVERS; do [[ -n ${SKIP[$s]:-} ]] || ACTIVE+=("$s"); done
((${#ACTIVE[@]})) || die "no server to run"
if [[ -n $SWEEP_BASE ]]; then
    [[ " ${ACTIVE[*]} " == *" $SWEEP_BASE "* ]] || die "SWEEP_BASE=$SWEEP_BASE is not among the servers that run (${ACTIVE[*]})"
    [[ " $SCENARIOS " == *" c64 "* ]] || die "SWEEP_BASE needs c64 in SCENARIOS"
fi

free_port() {
    local lo hi p
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
    for _ in $(seq 200); do
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
        [[ -z $(ss -Htan "( sport = :$p )" 2>/dev/null) ]] && { echo "$p"; return; }
    done
    die "no free port"
}
tree_pids() {
    echo "$1"
    for c in $(pgrep -P "$1" 2>/dev/null); do tree_pids "$c"; done
}
cpu_ticks() { # utime+stime of the server's processes
    local t=0 p
    for p in $(tree_pids "$SRV_PID"); do
        [[ -r /proc/$p/stat ]] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo "$t"
}

start_server() { # NAME: start on a free port and wait for GET /; 1 on failure
    local name=$1 w=$WORKERS port
    local -a cmd
    port=$(free_port)
    case $name in
    go) cmd=("$BIN/go-peer" -listen "127.0.0.1:$port" ${w:+-procs "$w"}) ;;
    hyper) cmd=("$BIN/hyper-peer" --listen "127.0.0.1:$port" ${w:+--workers "$w"}) ;;
    nginx)
        sed -e "s|@WORKERS@|${w:-auto}|g" -e "s|@PORT@|$port|g" -e "s|@RUNDIR@|$RUN|g" \
            "$PEERS/nginx/nginx.conf.in" >"$RUN/nginx.conf"
        cmd=("$NGINX" -p "$RUN/" -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log")
        ;;
    magpied)
        cmd=("$MAGPIED" -c "$ROOT/config/magpied.conf" --set "http.listen=127.0.0.1:$port"
            --set "echo.listen=" --set "limits.max_connections=100000" ${w:+--set "runtime.workers=$w"})
        ;;
    esac
    "${cmd[@]}" >"$RUN/$name.log" 2>&1 </dev/null 9>&- &
    SRV_PID=$!
    URL=http://127.0.0.1:$port/
    local deadline=$((SECONDS + READY_TIMEOUT))
    while ((SECONDS < deadline)); do
        kill -0 "$SRV_PID" 2>/dev/null || { tail -5 "$RUN/$name.log" >&2; SRV_PID=; return 1; }
        [[ $(curl -s --max-time 1 "$URL" 2>/dev/null || true) == "Hello, World!" ]] && return 0
        sleep 0.1
    done
    stop_server
    return 1
}

# ---- scenarios

printf 'POST /echo\nContent-Type: application/octet-stream\n@body-size 1024\n' >"$RUN/echo1k.txt"
printf 'POST /echo\nContent-Type: application/octet-stream\n@body-size 65536\n' >"$RUN/echo64k.txt"

declare -A MAXRATE=() # SERVER -> its c64 req/s in the current round
scenario_args() { # SERVER SCENARIO -> magpie-load arguments; empty: not applicable
    local s=$1 sc=$2
    case $sc in
    c[0-9]*) echo "-c ${sc#c}" ;;
    pipe[0-9]*) echo "-c 64 -p ${sc#pipe}" ;;
    echo1k | echo64k) [[ $s == nginx ]] || echo "-c 64 -r $RUN/$sc.txt" ;;
    close) echo "-c 64 -H Connection:close" ;;
    open[0-9]*)
        local max=${MAXRATE[${SWEEP_BASE:-$s}]:-}
        [[ -n $max ]] || return 0
        awk -v m="$max" -v p="${sc#open}" 'BEGIN { r = int(m * p / 100); if (r < 1) r = 1; print "-c 64 -R " r }'
        ;;
    *) die "unknown scenario $sc" ;;
    esac
}

CSV=$OUT/runs.csv
echo "server,scenario,round,offered_rps,rps,errors,p50_us,p90_us,p99_us,p99_9_us,max_us,svc_p99_us,server_cpu_us_per_req,client_cpu_us_per_req" >"$CSV"
read -ra SCS <<<"$SCENARIOS"
total=$((${#ACTIVE[@]} * ROUNDS * ${#SCS[@]}))
done_runs=0
per_run=$((DURATION + 2))
CLK=$(getconf CLK_TCK)
jget() { sed -n "s/.*\"$2\": \\([0-9.]*\\).*/\\1/p" "$1" | head -1; }
jsub() { grep "\"$2\"" "$1" | sed -n "s/.*\"$3\": \\([0-9.]*\\).*/\\1/p" | head -1; }

log "servers: ${ACTIVE[*]}; scenarios: $SCENARIOS; $ROUNDS round(s) of ${DURATION}s runs; output $OUT"
for r in $(seq "$ROUNDS"); do
    n=${#ACTIVE[@]}
    order=()
    for i in $(seq 0 $((n - 1))); do order+=("${ACTIVE[$(((i + r - 1) % n))]}"); done
    if [[ -n $SWEEP_BASE ]]; then # the base first, so that its rate is known to the others
        rest=()
        for s in "${order[@]}"; do [[ $s == "$SWEEP_BASE" ]] || rest+=("$s"); done
        order=("$SWEEP_BASE" "${rest[@]}")
    fi
    MAXRATE=()
    for s in "${order[@]}"; do
        if ! start_server "$s"; then
            log "[$done_runs/$total] $s failed to start in round $r; its runs are skipped"
            done_runs=$((done_runs + ${#SCS[@]}))
            continue
        fi
        if ((WARMUP > 0)); then
            timeout 60 "$LOAD" -q -c 64 -d "$WARMUP" "$URL" >/dev/null 2>&1 || true
        fi
        for sc in "${SCS[@]}"; do
            done_runs=$((done_runs + 1))
            left=$(((total - done_runs + 1) * per_run / 60))
            args=$(scenario_args "$s" "$sc")
            if [[ -z $args ]]; then
                log "[$done_runs/$total] $s $sc round $r/$ROUNDS: not applicable, skipped"
                continue
            fi
            log "[$done_runs/$total] $s $sc round $r/$ROUNDS, about $left min left"
            base=$OUT/raw/$s-$sc-r$r
            t0=$(cpu_ticks)
            # shellcheck disable=SC2086 # the scenario's arguments are split on purpose
            timeout $((DURATION + 60)) "$LOAD" -t "$LOAD_THREADS" -d "$DURATION" $args \
                --json "$base.json" "$URL" >"$base.txt" 2>&1 || log "  magpie-load exited $? (see $base.txt)"
            t1=$(cpu_ticks)
            [[ -s $base.json ]] || continue
            reqs=$(jget "$base.json" requests)
            rps=$(jget "$base.json" requests_per_s)
            [[ $sc == c64 ]] && MAXRATE[$s]=$rps
            offered=$(jget "$base.json" rate)
            echo "$s,$sc,$r,$offered,$rps,$(jsub "$base.json" errors total),$(jsub "$base.json" latency_us p50),$(jsub "$base.json" latency_us p90),$(jsub "$base.json" latency_us p99),$(jsub "$base.json" latency_us p99_9),$(jsub "$base.json" latency_us max),$(jsub "$base.json" service_us p99),$(awk -v t=$((t1 - t0)) -v k="$CLK" -v n="$reqs" 'BEGIN { printf "%.2f", n ? t / k * 1e6 / n : 0 }'),$(jsub "$base.json" cpu us_per_request)" >>"$CSV"
        done
        stop_server
    done
done

# ---- the table: medians over rounds
awk -F, 'NR > 1 { k = $1 "," $2; n[k]++; keys[k] = 1
        for (c = 4; c <= 14; c++) v[k, c] = v[k, c] " " $c }
    function med(s,   a, m, i, j, t) { m = split(s, a, " ")
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
    END {
        print "| server | scenario | runs | offered req/s | req/s | errors | p50 µs | p99 µs | p99.9 µs | max µs | server CPU µs/req | client CPU µs/req |"
        print "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for (k in keys) { split(k, p, ",")
            printf "| %s | %s | %d | %s | %.0f | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f |\n", p[1], p[2], n[k],
                (med(v[k, 4]) > 0 ? sprintf("%.0f", med(v[k, 4])) : "closed"), med(v[k, 5]), med(v[k, 6]),
                med(v[k, 7]), med(v[k, 9]), med(v[k, 10]), med(v[k, 11]), med(v[k, 13]), med(v[k, 14]) }
    }' "$CSV" | { read -r h1; read -r h2; echo "$h1"; echo "$h2"; sort -t'|' -k2,2 -k3,3; } >"$OUT/results.md"
{
    echo
    echo "Command: ${BENCH_QUICK:+BENCH_QUICK=$BENCH_QUICK }${SWEEP_BASE:+SWEEP_BASE=$SWEEP_BASE }SERVERS=\"${ACTIVE[*]}\" SCENARIOS=\"$SCENARIOS\" ROUNDS=$ROUNDS DURATION=$DURATION loadtest/load/bench-http.sh"
    echo "Machine: $(nproc) CPUs, $(uname -sr), $(date -u '+%Y-%m-%d %H:%M UTC'); medians over rounds."
    for s in "${!SKIP[@]}"; do echo "Skipped $s: ${SKIP[$s]}"; done
} >>"$OUT/results.md"
cat "$OUT/results.md"

# ---- plots
if command -v gnuplot >/dev/null; then
    for s in "${ACTIVE[@]}"; do # open-loop points, by offered rate: achieved req/s, p50, p99, p99.9
        awk -F, -v s="$s" '$1 == s && $2 ~ /^open/ { print $4, $5, $7, $9, $10 }' "$CSV" | sort -g >"$OUT/open-$s.dat"
    done
    awk -F, 'NR > 1 && $2 !~ /^open/ { print $2, $1, $13 }' "$CSV" >"$OUT/cpu.dat"
    {
        echo "set terminal pngcairo size 900,560 noenhanced" 2>/dev/null
        echo "set output '$OUT/latency.png'"
        echo "set title 'Open loop: latency against achieved throughput (magpie-load, 64 connections)'"
        echo "set xlabel 'achieved requests/s'; set ylabel 'latency (us)'; set logscale y; set key top left; set grid"
        plot="plot" lc=0
        for s in "${ACTIVE[@]}"; do # one colour per server; p99 solid, p99.9 dashed, p50 dotted
            lc=$((lc + 1))
            [[ -s $OUT/open-$s.dat ]] || continue
            plot+=" '$OUT/open-$s.dat' using 2:4 with linespoints lc $lc title '$s p99',"
            plot+=" '$OUT/open-$s.dat' using 2:5 with linespoints lc $lc dashtype 2 title '$s p99.9',"
            plot+=" '$OUT/open-$s.dat' using 2:3 with linespoints lc $lc dashtype 3 title '$s p50',"
        done
        [[ $plot != plot ]] && echo "${plot%,}"
        echo "set output '$OUT/cpu.png'"
        echo "unset logscale y; set yrange [0:*]; set title 'Server CPU per request (us), by scenario'"
        echo "set style data histogram; set style histogram cluster gap 1; set style fill solid 0.7"
        echo "set xlabel 'scenario'; set ylabel 'server CPU us/request'; set xtics rotate by -30"
    } >"$OUT/plots.gp"
    # cpu.png: one cluster per scenario, one bar per server (medians).
    awk '{ k = $1 SUBSEP $2; v[k] = v[k] " " $3; sc[$1] = 1; sv[$2] = 1 }
        function med(s,   a, m, i, j, t) { m = split(s, a, " ")
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
            return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
        END { printf "scenario"; for (s in sv) { printf " %s", s; order[++n] = s } print ""
              for (c in sc) { printf "%s", c; for (i = 1; i <= n; i++) { k = c SUBSEP order[i]; printf " %s", (k in v) ? med(v[k]) : "NaN" } print "" } }' \
        "$OUT/cpu.dat" >"$OUT/cpu-table.dat"
    ncol=$(head -1 "$OUT/cpu-table.dat" | wc -w)
    if ((ncol > 1)); then
        echo "plot for [i=2:$ncol] '$OUT/cpu-table.dat' using i:xtic(1) title columnheader(i)" >>"$OUT/plots.gp"
    fi
    if gnuplot "$OUT/plots.gp" 2>"$OUT/gnuplot.log"; then
        log "plots: $OUT/latency.png $OUT/cpu.png"
    else
        log "gnuplot failed (see $OUT/gnuplot.log)"
    fi
else
    log "no plots: gnuplot is not installed (apt-get install gnuplot-nox)"
fi
log "done: $OUT"
