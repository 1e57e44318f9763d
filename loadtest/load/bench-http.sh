#!/usr/bin/env bash
# loadtest/load/bench-http.sh (`make bench-http`): magpied, nginx, Tokio + hyper and Go
# net/http under magpie-load, every scenario, one command; tables, CSV and plots.
#
#   make bench-http                          3 rounds x 10 s of every scenario (~40 min)
#   BENCH_QUICK=1 make bench-http            one closed-loop, one open-loop, one static-file and
#                                            one idle-memory run per server, 3 s each: proves
#                                            the pipeline in a few minutes
#   SERVERS="magpied nginx" SCENARIOS="c64 open50 open90" make bench-http
#
# Scenarios (SCENARIOS, in this order within each round):
#   cN          N keep-alive connections, closed loop (c64 c256 c1024)
#   pipe16      64 connections, 16 requests in flight on each
#   echo1k      POST /echo with a 1 KiB body, 64 connections (not nginx: no echo route)
#   echo64k     POST /echo with a 64 KiB body, 64 connections (not nginx)
#   close       a new connection per request (Connection: close): the accept path's cost
#   static1k    GET of a 1 KiB file from a static-file handler, 64 connections
#   static64k   GET of a 64 KiB file, 64 connections (magpied: [route /static] handler =
#               static; nginx: its configuration's location /static/ (sendfile, tcp_nopush,
#               open_file_cache); not Go nor hyper: no file handler)
#   idleN       memory of N idle keep-alive connections (idle1k idle10k: N = 1000, 10000),
#               as loadtest/http/idle-memory.sh measures it, on a server started fresh for it:
#               RSS (all its processes) before, with N connections open (one GET / answered on
#               each) and the KiB per connection; needs ulimit -n N + 1024 (raised here, or the
#               scenario is skipped with the reason)
#   openP       open loop, 64 connections, at P% of the same server's c64 rate measured in
#               this round (P in 10 25 50 75 90 100): p99 and p99.9 at a fixed offered load;
#               with SWEEP_BASE=nginx (a server in SERVERS), at P% of nginx's c64 rate of the
#               round instead, for every server: the same offered loads for all (nginx then
#               runs first in every round, and SCENARIOS must hold c64)
#
# Adding a scenario or a server: a scenario is a name in SCENARIOS, its magpie-load arguments in
# scenario_args() and, when not every server can serve it, a line in supports(); a server is a
# name in SERVERS, how it is built or found (the SKIP block) and how it starts (start_server()).
# The reverse-proxy scenario goes there: a server kind that fronts an upstream started beside
# it, and `proxy` in the scenario list (see the comments at supports() and start_server()).
#
# One server runs at a time, started fresh for each round on a free loopback port, warmed up
# (WARMUP s of c64), then every scenario runs; rounds are interleaved and start one server
# further down the list each time. Each run is bounded (magpie-load -d, and timeout). The
# server's CPU per request comes from /proc/PID/stat (utime+stime, all its processes).
# BENCH_PREBUILT=1 builds nothing: it takes BIN's go-peer, hyper-peer and idle_clients as they
# are (loadtest/scaling.sh packs them, with magpied and magpie-load, for a bigger machine).
# Writes build/bench/STAMP/: raw/ (each run's JSON and text), runs.csv, results.md and, when
# gnuplot is installed (apt-get install gnuplot-nox), latency.png and cpu.png (800x500).
set -euo pipefail
shopt -s nullglob
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PEERS=$ROOT/loadtest/peers

if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    : "${ROUNDS:=1}" "${DURATION:=3}" "${WARMUP:=1}" "${SCENARIOS:=c64 open50 static1k idle1k}"
fi
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SCENARIOS=${SCENARIOS:-c64 c256 c1024 pipe16 echo1k echo64k close static1k static64k open10 open25 open50 open75 open90 open100 idle1k idle10k}
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
PREBUILT=${BENCH_PREBUILT:-0} # 1: the peers and idle_clients are in BIN already (scaling.sh)

log() { printf '%s\n' "$*" >&2; }
die() { printf 'bench-http: %s\n' "$*" >&2; exit 1; }
PROG=bench-http.sh
# free_port, tree_pids and cpu_ticks
# shellcheck source=loadtest/http/lib.sh
source "$HERE/../http/lib.sh"
for t in curl timeout flock ss; do command -v "$t" >/dev/null || die "$t not found"; done
[[ -x $MAGPIED && -x $LOAD ]] || die "build first: make all load"
mkdir -p "$OUT/raw" "$BIN" /tmp/lt
RUN=$(mktemp -d /tmp/lt/bench.XXXXXX)
chmod 755 "$RUN" # nginx workers run as nobody

# Descriptors: the idle scenarios hold N connections open on each side; every server and
# magpie-load inherit this limit. Raised once here (root may raise the hard limit too).
declare -A SKIP_SC=() # scenario -> why it cannot run on this machine
IDLE_MAX=0
for sc in $SCENARIOS; do
    if [[ $sc =~ ^idle([0-9]+)k$ ]]; then
        n=$((BASH_REMATCH[1] * 1000))
        IDLE_MAX=$((n > IDLE_MAX ? n : IDLE_MAX))
    elif [[ $sc == idle* ]]; then
        die "unknown scenario $sc (idleNk: N thousand idle connections)"
    fi
done
NOFILE=$((IDLE_MAX + 1024))
if (($(ulimit -n) < NOFILE)) && ! ulimit -n "$NOFILE" 2>/dev/null; then
    have=$(ulimit -n)
    hard=$(ulimit -Hn)
    for sc in $SCENARIOS; do
        if [[ $sc =~ ^idle([0-9]+)k$ ]] && ((BASH_REMATCH[1] * 1000 + 1024 > have)); then
            SKIP_SC[$sc]="needs ulimit -n $((BASH_REMATCH[1] * 1000 + 1024)), not permitted here (soft $have, hard $hard): run as root or raise the hard limit (limits.conf nofile, systemd LimitNOFILE)"
            log "skipping $sc: ${SKIP_SC[$sc]}"
        fi
    done
fi
if ((IDLE_MAX > 0)) && [[ $PREBUILT != 1 || ! -x $BIN/idle_clients ]]; then
    cc -O2 -Wall -o "$BIN/idle_clients" "$ROOT/loadtest/http/idle_clients.c" -lssl -lcrypto ||
        die "cannot build loadtest/http/idle_clients.c"
fi

# The static-file scenarios' files, served by magpied and nginx from the same directory.
mkdir -p "$RUN/www/static"
head -c 1024 /dev/zero | tr '\0' x >"$RUN/www/static/1k.txt"
head -c 65536 /dev/zero | tr '\0' x >"$RUN/www/static/64k.txt"
chmod -R a+rX "$RUN/www"
{
    cat "$ROOT/config/magpied.conf"
    printf '\n[route /static]\nhandler = static\nroot = %s/www\n' "$RUN"
} >"$RUN/magpied.conf"

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
        NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
        [[ -x $NGINX ]] || SKIP[nginx]="nginx not installed (apt-get install nginx-light)"
        ;;
    go)
        if [[ $PREBUILT == 1 ]]; then
            [[ -x $BIN/go-peer ]] || SKIP[go]="not packed ($BIN/go-peer)"
        elif ! command -v go >/dev/null; then
            SKIP[go]="go not installed (apt-get install golang-go)"
        elif ! (cd "$PEERS/go" && GOPROXY=off GOFLAGS=-mod=mod GOCACHE=$BUILD_DIR/gocache \
            GOPATH=$BUILD_DIR/gopath go build -trimpath -o "$BIN/go-peer" .) \
            >"$OUT/build-go.log" 2>&1; then
            SKIP[go]="build failed (see $OUT/build-go.log)"
        fi
        ;;
    hyper)
        if [[ $PREBUILT == 1 ]]; then
            [[ -x $BIN/hyper-peer ]] || SKIP[hyper]="not packed ($BIN/hyper-peer)"
        elif [[ ! -x /usr/bin/cargo ]]; then
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
if [[ ${BENCH_BUILD_ONLY:-0} == 1 ]]; then # scaling.sh pack: the peers, nothing run
    log "built: $(cd "$BIN" && echo ./*)"
    exit 0
fi
((${#ACTIVE[@]})) || die "no server to run"
if [[ -n $SWEEP_BASE ]]; then
    [[ " ${ACTIVE[*]} " == *" $SWEEP_BASE "* ]] || die "SWEEP_BASE=$SWEEP_BASE is not among the servers that run (${ACTIVE[*]})"
    [[ " $SCENARIOS " == *" c64 "* ]] || die "SWEEP_BASE needs c64 in SCENARIOS"
fi

start_server() { # NAME: start on a free port and wait for GET /; 1 on failure
    local name=$1 w=$WORKERS port
    local -a cmd
    port=$(free_port)
    case $name in
    go) cmd=("$BIN/go-peer" -listen "127.0.0.1:$port" ${w:+-procs "$w"}) ;;
    hyper) cmd=("$BIN/hyper-peer" --listen "127.0.0.1:$port" ${w:+--workers "$w"}) ;;
    nginx) # its /static/ serves $RUN/www/static; room for the idle scenarios' connections
        sed -e "s|@WORKERS@|${w:-auto}|g" -e "s|@PORT@|$port|g" -e "s|@RUNDIR@|$RUN|g" \
            -e "s|worker_connections 4096;|worker_connections $((NOFILE > 4096 ? NOFILE : 4096));|" \
            -e "s|^daemon off;|daemon off;\nworker_rlimit_nofile $NOFILE;|" \
            "$PEERS/nginx/nginx.conf.in" >"$RUN/nginx.conf"
        cmd=("$NGINX" -p "$RUN/" -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log")
        ;;
    magpied)
        cmd=("$MAGPIED" -c "$RUN/magpied.conf" --set "http.listen=127.0.0.1:$port"
            --set "echo.listen=" --set "limits.max_connections=100000" ${w:+--set "runtime.workers=$w"})
        ;;
    # A proxy server kind starts its upstream here first (on a port of its own, stopped with
    # it: tree_pids follows children only, so keep the upstream's PID beside SRV_PID).
    esac
    "${cmd[@]}" >"$RUN/$name.log" 2>&1 </dev/null 9>&- &
    SRV_PID=$!
    URL=http://127.0.0.1:$port/
    PORT=$port
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

printf 'GET /static/1k.txt\n' >"$RUN/static1k.txt"
printf 'GET /static/64k.txt\n' >"$RUN/static64k.txt"

supports() { # SERVER SCENARIO: can that server serve it? (a proxy kind: `proxy` only, say)
    case $1:$2 in
    nginx:echo*) return 1 ;;                    # no echo with nginx's stock modules
    go:static* | hyper:static*) return 1 ;;     # the peers have no file handler
    *) return 0 ;;
    esac
}

declare -A MAXRATE=() # SERVER -> its c64 req/s in the current round
scenario_args() { # SERVER SCENARIO -> magpie-load arguments; empty: not applicable
    local s=$1 sc=$2
    supports "$s" "$sc" || return 0
    case $sc in
    c[0-9]*) echo "-c ${sc#c}" ;;
    pipe[0-9]*) echo "-c 64 -p ${sc#pipe}" ;;
    echo1k | echo64k) echo "-c 64 -r $RUN/$sc.txt" ;;
    close) echo "-c 64 -H Connection:close" ;;
    static1k | static64k) echo "-c 64 -r $RUN/$sc.txt" ;;
    idle[0-9]*k) echo "idle" ;; # not a magpie-load run: run_idle()
    open[0-9]*)
        local max=${MAXRATE[${SWEEP_BASE:-$s}]:-}
        [[ -n $max ]] || return 0
        awk -v m="$max" -v p="${sc#open}" 'BEGIN { r = int(m * p / 100); if (r < 1) r = 1; print "-c 64 -R " r }'
        ;;
    *) die "unknown scenario $sc" ;;
    esac
}

CSV=$OUT/runs.csv
echo "server,scenario,round,offered_rps,rps,errors,p50_us,p90_us,p99_us,p99_9_us,max_us,svc_p99_us,server_cpu_us_per_req,client_cpu_us_per_req,idle_conns,rss_before_kib,rss_with_kib,kib_per_conn" >"$CSV"
read -ra SCS <<<"$SCENARIOS"
idle_n() { local n=${1#idle}; echo $((${n%k} * 1000)); }
est_s() { # SCENARIO: about how many seconds one run of it takes
    if [[ $1 == idle* ]]; then echo $((8 + $(idle_n "$1") / 1000)); else echo $((DURATION + 2)); fi
}
est_total=0
for sc in "${SCS[@]}"; do est_total=$((est_total + $(est_s "$sc"))); done
est_left=$(((est_total + WARMUP + 2) * ${#ACTIVE[@]} * ROUNDS))
total=$((${#ACTIVE[@]} * ROUNDS * ${#SCS[@]}))
done_runs=0
CLK=$(getconf CLK_TCK)
jget() { sed -n "s/.*\"$2\": \\([0-9.]*\\).*/\\1/p" "$1" | head -1; }
jsub() { grep "\"$2\"" "$1" | sed -n "s/.*\"$3\": \\([0-9.]*\\).*/\\1/p" | head -1; }
rss_kib() { # VmRSS of the server's processes, KiB
    local t=0 p
    for p in $(tree_pids "$SRV_PID"); do
        t=$((t + $(awk '/^VmRSS/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
progress() { # SERVER SCENARIO ROUND [what]: one line, with the time left
    done_runs=$((done_runs + 1))
    log "[$done_runs/$total] $1 $2 round $3/$ROUNDS${4:+: $4}, about $(((est_left + 59) / 60)) min left"
    est_left=$((est_left - $(est_s "$2")))
}

# run_idle SERVER SCENARIO ROUND: N idle connections on a fresh server, as
# loadtest/http/idle-memory.sh: RSS before (one GET / answered), with N open, per connection.
run_idle() {
    local s=$1 sc=$2 r=$3 n before with cpid ok=0 base=$OUT/raw/$1-$2-r$3
    n=$(idle_n "$sc")
    start_server "$s" || { log "  $s failed to start for $sc"; return 0; }
    sleep 1
    before=$(rss_kib)
    "$BIN/idle_clients" "$PORT" "$n" 300 >"$base.txt" 2>&1 9>&- &
    cpid=$!
    for _ in $(seq $((600 + n / 10))); do # 60 s + 10 ms per connection at most
        grep -q '^ready' "$base.txt" 2>/dev/null && { ok=1; break; }
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.1
    done
    if ((ok)); then
        sleep 2 # let the server settle what it allocated for them
        with=$(rss_kib)
    fi
    kill "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
    stop_server
    if ((!ok)); then
        log "  $s $sc: the $n connections did not open: $(tail -1 "$base.txt")"
        return 0
    fi
    echo "$s,$sc,$r,,,,,,,,,,,,$n,$before,$with,$(awk -v b="$before" -v w="$with" -v n="$n" 'BEGIN { printf "%.2f", (w - b) / n }')" >>"$CSV"
}

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
        loads=()
        for sc in "${SCS[@]}"; do # the idle scenarios first, each on a fresh server
            if [[ $sc != idle* ]]; then
                loads+=("$sc")
            elif [[ -n ${SKIP_SC[$sc]:-} ]]; then
                progress "$s" "$sc" "$r" "skipped (descriptor limit)"
            else
                progress "$s" "$sc" "$r"
                run_idle "$s" "$sc" "$r"
            fi
        done
        ((${#loads[@]})) || continue
        if ! start_server "$s"; then
            log "$s failed to start in round $r; its runs are skipped"
            for sc in "${loads[@]}"; do progress "$s" "$sc" "$r" "skipped (no server)"; done
            continue
        fi
        if ((WARMUP > 0)); then
            timeout 60 "$LOAD" -q -c 64 -d "$WARMUP" "$URL" >/dev/null 2>&1 || true
        fi
        for sc in "${loads[@]}"; do
            args=$(scenario_args "$s" "$sc")
            if [[ -z $args ]]; then
                progress "$s" "$sc" "$r" "not applicable, skipped"
                continue
            fi
            progress "$s" "$sc" "$r"
            base=$OUT/raw/$s-$sc-r$r
            t0=$(cpu_ticks "$SRV_PID")
            # shellcheck disable=SC2086 # the scenario's arguments are split on purpose
            timeout $((DURATION + 60)) "$LOAD" -t "$LOAD_THREADS" -d "$DURATION" $args \
                --json "$base.json" "$URL" >"$base.txt" 2>&1 || log "  magpie-load exited $? (see $base.txt)"
            t1=$(cpu_ticks "$SRV_PID")
            [[ -s $base.json ]] || continue
            reqs=$(jget "$base.json" requests)
            rps=$(jget "$base.json" requests_per_s)
            [[ $sc == c64 ]] && MAXRATE[$s]=$rps
            offered=$(jget "$base.json" rate)
            echo "$s,$sc,$r,$offered,$rps,$(jsub "$base.json" errors total),$(jsub "$base.json" latency_us p50),$(jsub "$base.json" latency_us p90),$(jsub "$base.json" latency_us p99),$(jsub "$base.json" latency_us p99_9),$(jsub "$base.json" latency_us max),$(jsub "$base.json" service_us p99),$(awk -v t=$((t1 - t0)) -v k="$CLK" -v n="$reqs" 'BEGIN { printf "%.2f", n ? t / k * 1e6 / n : 0 }'),$(jsub "$base.json" cpu us_per_request),,,," >>"$CSV"
        done
        stop_server
    done
done

# ---- the table: medians over rounds
MED_AWK='function med(s,   a, m, i, j, t) { m = split(s, a, " ")
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
'
awk -F, "$MED_AWK"'NR > 1 && $2 !~ /^idle/ { k = $1 "," $2; n[k]++; keys[k] = 1
        for (c = 4; c <= 14; c++) v[k, c] = v[k, c] " " $c }
    END {
        print "| server | scenario | runs | offered req/s | req/s | errors | p50 µs | p99 µs | p99.9 µs | max µs | server CPU µs/req | client CPU µs/req |"
        print "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for (k in keys) { split(k, p, ",")
            printf "| %s | %s | %d | %s | %.0f | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f |\n", p[1], p[2], n[k],
                (med(v[k, 4]) > 0 ? sprintf("%.0f", med(v[k, 4])) : "closed"), med(v[k, 5]), med(v[k, 6]),
                med(v[k, 7]), med(v[k, 9]), med(v[k, 10]), med(v[k, 11]), med(v[k, 13]), med(v[k, 14]) }
    }' "$CSV" | { read -r h1; read -r h2; echo "$h1"; echo "$h2"; sort -t'|' -k2,2 -k3,3; } >"$OUT/results.md"
if grep -q '^[^,]*,idle' "$CSV"; then # memory per idle connection: its own table
    {
        echo
        echo "Idle keep-alive connections (RSS of all the server's processes, medians over rounds):"
        echo
        awk -F, "$MED_AWK"'NR > 1 && $2 ~ /^idle/ { k = $1 "," $15; n[k]++; keys[k] = 1
                b[k] = b[k] " " $16; w[k] = w[k] " " $17; p[k] = p[k] " " $18 }
            END {
                print "| server | connections | runs | RSS before KiB | RSS with them KiB | KiB per connection |"
                print "|---|---:|---:|---:|---:|---:|"
                for (k in keys) { split(k, q, ",")
                    printf "| %s | %d | %d | %.0f | %.0f | %.2f |\n", q[1], q[2], n[k], med(b[k]), med(w[k]), med(p[k]) }
            }' "$CSV" | { read -r h1; read -r h2; echo "$h1"; echo "$h2"; sort -t'|' -k3,3n -k2,2; }
    } >>"$OUT/results.md"
fi
{
    echo
    echo "Command: ${BENCH_QUICK:+BENCH_QUICK=$BENCH_QUICK }${SWEEP_BASE:+SWEEP_BASE=$SWEEP_BASE }${WORKERS:+WORKERS=$WORKERS }${LOAD_THREADS:+LOAD_THREADS=$LOAD_THREADS }SERVERS=\"${ACTIVE[*]}\" SCENARIOS=\"$SCENARIOS\" ROUNDS=$ROUNDS DURATION=$DURATION loadtest/load/bench-http.sh"
    echo "Machine: $(nproc) CPUs, $(uname -sr), $(date -u '+%Y-%m-%d %H:%M UTC'); medians over rounds."
    for s in "${!SKIP[@]}"; do echo "Skipped $s: ${SKIP[$s]}"; done
    for sc in "${!SKIP_SC[@]}"; do echo "Skipped $sc: ${SKIP_SC[$sc]}"; done
} >>"$OUT/results.md"
cat "$OUT/results.md"

# ---- plots
# Each plot is drawn by a gnuplot of its own (one that fails leaves the other), from what ran:
# a server with no row (skipped, failed to start, or serving none of the scenarios) gets no
# line and no bar, a scenario with no row no cluster, and a plot with nothing to show is not
# drawn (gnuplot stops at a series with no valid points). Colours follow SERVERS' order in both.
plot_png() { # NAME: gnuplot $OUT/NAME.gp into NAME.png
    if gnuplot "$OUT/$1.gp" 2>"$OUT/gnuplot-$1.log"; then
        PLOTS+=" $OUT/$1.png"
    else
        log "gnuplot failed on $1.png (see $OUT/gnuplot-$1.log)"
    fi
}
if command -v gnuplot >/dev/null; then
    PLOTS=
    PNG="set terminal pngcairo size 800,500 noenhanced font ',10'"
    plot="plot" lc=0
    for s in "${ACTIVE[@]}"; do # open-loop points, one per level: offered, achieved, p50, p99, p99.9
        lc=$((lc + 1))
        # The median over rounds of each column, per level (open50 ...), so that a line joins
        # one point per offered load rather than zigzagging through every round's.
        awk -F, -v s="$s" '
            function median(list,   v, n, i, j, t) {
                n = split(list, v, " ")
                for (i = 2; i <= n; i++)
                    for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
                return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            }
            $1 == s && $2 ~ /^open/ && $5 != "" {
                for (c = 1; c <= 5; c++) col[$2, c] = col[$2, c] " " $(c == 1 ? 4 : c == 2 ? 5 : c == 3 ? 7 : c == 4 ? 9 : 10)
                seen[$2] = 1
            }
            END { for (k in seen) print median(col[k, 1]), median(col[k, 2]), median(col[k, 3]), median(col[k, 4]), median(col[k, 5]) }' \
            "$CSV" | sort -g >"$OUT/open-$s.dat"
        [[ -s $OUT/open-$s.dat ]] || continue # one colour per server; p99 solid, p99.9 dashed, p50 dotted
        plot+=" '$OUT/open-$s.dat' using 2:4 with linespoints lc $lc title '$s p99',"
        plot+=" '$OUT/open-$s.dat' using 2:5 with linespoints lc $lc dashtype 2 title '$s p99.9',"
        plot+=" '$OUT/open-$s.dat' using 2:3 with linespoints lc $lc dashtype 3 title '$s p50',"
    done
    if [[ $plot != plot ]]; then
        {
            echo "$PNG"
            echo "set output '$OUT/latency.png'"
            echo "set title 'Open loop: latency against achieved throughput (magpie-load, 64 connections)'"
            echo "set xlabel 'achieved throughput (requests/s)'; set ylabel 'latency from the scheduled send (us, log scale)'"
            echo "set logscale y; set key top left; set grid"
            echo "${plot%,}"
        } >"$OUT/latency.gp"
        plot_png latency
    else
        log "no latency.png: no open-loop run completed"
    fi
    # cpu.png: one cluster per scenario that has a row, one bar per server that has one
    # (medians); scenarios in SCENARIOS' order, a server without that scenario a gap (NaN).
    awk -F, 'NR > 1 && $2 !~ /^(open|idle)/ && $13 != "" { print $2, $1, $13 }' "$CSV" >"$OUT/cpu.dat"
    awk -v scs="$SCENARIOS" -v svs="${ACTIVE[*]}" "$MED_AWK"'{ k = $1 SUBSEP $2; v[k] = v[k] " " $3; sc_seen[$1] = 1; sv_seen[$2] = 1 }
        END { n = split(svs, sv, " "); m = split(scs, sc, " ")
              printf "scenario"; for (i = 1; i <= n; i++) if (sv[i] in sv_seen) printf " %s", sv[i]; print ""
              for (j = 1; j <= m; j++) { c = sc[j]; if (!(c in sc_seen)) continue
                  printf "%s", c; for (i = 1; i <= n; i++) { if (!(sv[i] in sv_seen)) continue
                      k = c SUBSEP sv[i]; printf " %s", (k in v) ? med(v[k]) : "NaN" } print "" } }' \
        "$OUT/cpu.dat" >"$OUT/cpu-table.dat"
    plot="plot" col=1
    for s in $(head -1 "$OUT/cpu-table.dat"); do
        [[ $s != scenario ]] || continue
        col=$((col + 1))
        lc=0
        for i in "${!ACTIVE[@]}"; do [[ ${ACTIVE[$i]} != "$s" ]] || lc=$((i + 1)); done
        plot+=" '$OUT/cpu-table.dat' using $col:xtic(1) lc $lc title '$s',"
    done
    rows=$(($(wc -l <"$OUT/cpu-table.dat") - 1))
    # A log scale: the scenarios' costs span three decades (pipelined GET / under 1 us, a 64 KiB
    # echo body over 200 us for Go), and on a linear one the largest bar flattens all the others.
    # The axis starts at the power of ten below the smallest bar, so that every bar shows.
    ylo=$(awk 'NR > 1 { for (i = 2; i <= NF; i++) if ($i != "NaN" && $i + 0 > 0 && (m == "" || $i + 0 < m)) m = $i + 0 }
        END { if (m == "") { print 0.1; exit } e = log(0.9 * m) / log(10); f = int(e); if (f > e) f--; print 10 ^ f }' \
        "$OUT/cpu-table.dat")
    if [[ $plot != plot ]] && ((rows > 0)); then
        {
            echo "$PNG"
            echo "set output '$OUT/cpu.png'"
            echo "set datafile columnheaders" # the table's first line names the servers: no empty first cluster
            echo "set logscale y; set yrange [$ylo:*]; set grid ytics mytics"
            echo "set title 'Server CPU per request, by scenario (medians over rounds; log scale)'"
            echo "set style data histogram; set style histogram cluster gap 1; set style fill solid 0.7"
            echo "set xlabel 'scenario'; set ylabel 'server CPU per request (us, log scale)'; set xtics rotate by -30; set key top left"
            echo "${plot%,}"
        } >"$OUT/cpu.gp"
        plot_png cpu
    else
        log "no cpu.png: no closed-loop run completed"
    fi
    [[ -z $PLOTS ]] || log "plots:$PLOTS"
else
    log "no plots: gnuplot is not installed (apt-get install gnuplot-nox)"
fi
log "done: $OUT"
