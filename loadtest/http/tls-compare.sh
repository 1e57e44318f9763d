#!/usr/bin/env bash
# loadtest/http/tls-compare.sh: magpied's TLS against nginx and HAProxy, under magpie-load.
#
#   loadtest/http/tls-compare.sh                          3 rounds of 10 s runs, then idle10k
#   ROUNDS=1 DURATION=3 IDLE_N=1000 loadtest/http/tls-compare.sh     a smoke run
#   SCENARIOS="full resumed" SERVERS="magpied nginx" loadtest/http/tls-compare.sh
#
# One ECDSA P-256 certificate made at run time with openssl (CN and SAN localhost and
# 127.0.0.1), the same for every server, each linked with the system's OpenSSL 3:
#
#   magpied   [https] on the certificate, the shipped TLS defaults (tickets on), 2 workers
#             (one per CPU), [route /] text "Hello, World!", [route /static] static files
#   nginx     2 worker_processes, ssl_protocols TLSv1.2 TLSv1.3, ssl_session_tickets on,
#             location = / return 200 "Hello, World!", /static/ from the same files
#             (sendfile is moot over TLS; open_file_cache on)
#   haproxy   nbthread 2, bind ... ssl crt (tickets on, its default), answering itself with
#             http-request return: "Hello, World!" on /, /static/1k.bin's bytes from memory
#             (HAProxy serves no files: the 1 MiB scenario is magpied against nginx only)
#
# Scenarios, each a magpie-load run of DURATION seconds (-t1, LOAD_THREADS to change):
#
#   full      -c HS_CONNS, TLS 1.3, Connection: close on GET /: a new connection and a full
#             handshake per request; handshakes/s and the server's CPU per handshake
#   resumed   the same with --resume: each connection slot offers its last ticket
#   ka64      64 keep-alive TLS connections, GET /static/1k.bin: req/s and CPU per request
#   ka256     the same on 256 connections
#   static1m  64 keep-alive TLS connections, GET /static/1m.bin (magpied and nginx)
#
# Rounds are interleaved (every server in round 1, then every server in round 2, starting
# one server further down the list each round); each server is started fresh for its round
# and warmed up with a short keep-alive run. The server's CPU is utime+stime from /proc of its
# process tree (lib.sh's cpu_ticks) around the run; the client's is magpie-load's own
# getrusage; "others" is the machine's busy time that was neither (builds of other people on a
# shared machine). Then, once per server in IDLE_SERVERS (magpied and nginx) on a fresh
# server, idle memory (idle10k): open IDLE_N
# keep-alive TLS connections with idle_clients.c (a full handshake and one GET / each, then
# idle) and report RSS and PSS of the server's processes before and with them, per
# connection.
#
# WORKERS (default 2) sets every server's workers / worker processes / threads; NGINX and
# HAPROXY name their binaries; BENCH_PREBUILT=1 builds nothing (loadtest/scaling.sh's `http`
# runs it that way at 2 to 16 workers).
#
# With XCHECK=1 (the default) one cell is measured again with h2load --h1 (nghttp2-client):
# ka64 on every server, the same connections and duration, as a check on magpie-load.
#
# Prints one Markdown table per scenario (medians over rounds, and the median of the
# per-round ratios magpied/peer), the idle table, and the issue's targets met or missed.
# Raw numbers in build/loadtest/tls-STAMP.csv, tables in tls-STAMP.md, every client's output
# in tls-STAMP/. Every process it starts it stops by its PID, also on Ctrl-C.

set -euo pipefail
shopt -s nullglob

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SCENARIOS=${SCENARIOS:-full resumed ka64 ka256 static1m}
SERVERS=${SERVERS:-magpied nginx haproxy}
HS_CONNS=${HS_CONNS:-64}
LOAD_THREADS=${LOAD_THREADS:-1}
WORKERS=${WORKERS:-2}
IDLE_N=${IDLE_N:-10000}
# HAProxy counts two descriptors per connection: 10,000 would need more than the hard limit
# of 20,000 a container often has. The issue compares magpied's idle memory with nginx's.
IDLE_SERVERS=${IDLE_SERVERS:-magpied nginx}
XCHECK=${XCHECK:-1}
SETTLE=${SETTLE:-1}
QUIET=${QUIET:-0.25}
QUIET_WAIT=${QUIET_WAIT:-20}
READY_TIMEOUT=${READY_TIMEOUT:-15}
IDLE_TIMEOUT=${IDLE_TIMEOUT:-240}
OUTDIR=${OUTDIR:-$ROOT/build/loadtest}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
LOAD=${LOAD:-$ROOT/build/release/magpie-load}
LOCK=${LOCK:-/tmp/lt/bench.lock}
LOCK_WAIT=${LOCK_WAIT:-3600}
WRK_PREFIX=()
CLK_TCK=$(getconf CLK_TCK)
PROG=tls-compare.sh

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'tls-compare.sh: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 0 ]] || { echo "usage: $0   (knobs are environment variables, see the top of the file)" >&2; exit 2; }
# BENCH_PREBUILT=1 builds nothing: magpied, magpie-load and $OUTDIR/bin/idle_clients are taken
# as they are (loadtest/scaling.sh packs them for a machine with no compiler).
PREBUILT=${BENCH_PREBUILT:-0}
for t in curl openssl timeout flock ss; do
    command -v "$t" >/dev/null || die "$t not found"
done
[[ $PREBUILT == 1 ]] || command -v cc >/dev/null || die "cc not found"

# stop_pid, free_port, cpu_ticks, busy_ticks, settle, median, fmt_rps ...
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"
# shellcheck source=loadtest/http/tls-servers.sh
source "$HERE/tls-servers.sh"

RUN=
CLIENT_PID=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n $CLIENT_PID ]]; then stop_pid "$CLIENT_PID"; CLIENT_PID=; fi
    stop_server
    if [[ -n $RUN && -d $RUN && ${KEEP:-0} != 1 ]]; then rm -rf "$RUN"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "tls-compare.sh: interrupted" >&2; exit 130' INT
trap 'echo "tls-compare.sh: terminated" >&2; exit 143' TERM HUP

mkdir -p /tmp/lt "$OUTDIR/bin"
RUN=$(mktemp -d /tmp/lt/tls.XXXXXX)
chmod 755 "$RUN" # nginx workers run as nobody
STAMP=$(date -u +%Y%m%d-%H%M%S)
CSV=$OUTDIR/tls-$STAMP.csv
MD=$OUTDIR/tls-$STAMP.md
LOGS=$OUTDIR/tls-$STAMP
mkdir -p "$LOGS"

bench_lock

# ---------------------------------------------------------------------------------------
# What runs.

declare -A SKIP=()
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
[[ -x $NGINX ]] || SKIP[nginx]="nginx not installed (apt-get install nginx-light)"
[[ -x $HAPROXY ]] || SKIP[haproxy]="haproxy not installed (apt-get install haproxy)"
if [[ ! -x $MAGPIED || ! -x $LOAD ]]; then
    log "building magpied and magpie-load (make)"
    make -C "$ROOT" -s -j2 build/release/magpied build/release/magpie-load >&2 || die "make failed"
fi
if [[ $PREBUILT == 1 ]]; then
    [[ -x $OUTDIR/bin/idle_clients || $IDLE_N == 0 ]] || die "BENCH_PREBUILT=1: no $OUTDIR/bin/idle_clients"
else
    cc -O2 -Wall -o "$OUTDIR/bin/idle_clients" "$HERE/idle_clients.c" -lssl -lcrypto ||
        die "cannot build idle_clients.c"
fi

# The certificate (ECDSA P-256, self-signed: magpie-load does not verify by default), the
# files, and HAProxy's crt (certificate and key in one file).
tls_site "$RUN" || die "openssl req failed"
head -c 1048576 /dev/urandom >"$RUN/www/static/1m.bin"
chmod -R a+rX "$RUN"

serves_files() { [[ $1 == magpied || $1 == nginx ]]; }
serves() { # SERVER SCENARIO
    [[ $2 != static1m ]] || serves_files "$1"
}

# ---------------------------------------------------------------------------------------
# Starting one server: on a free port, with NOFILE descriptors and room for CONNS connections.

start_tls_server() { # NAME [CONNS]
    local name=$1 conns=${2:-4096} nofile
    nofile=$((conns + 512))
    [[ $name != haproxy ]] || nofile=$((2 * conns + 512)) # it counts two descriptors per connection
    PORT=$(free_port)
    tls_server_conf "$name" "$RUN" "$PORT" "$WORKERS" "$conns" || die "no such server"
    echo "+ ${TLS_CMD[*]}" >"$RUN/$name.log"
    (ulimit -n "$nofile" && exec "${TLS_CMD[@]}") >>"$RUN/$name.log" 2>&1 </dev/null 9>&- &
    SRV_PID=$!
    if ! wait_https "$SRV_PID" "$PORT" "$READY_TIMEOUT" "$RUN/$name.log"; then
        echo "tls-compare.sh: $name did not start" >&2
        [[ $name != nginx ]] || tail -5 "$RUN/nginx-error.log" >&2 2>/dev/null || true
        stop_server
        return 1
    fi
}

check_files() { # NAME: the 1k file (every server) and the 1m one (file servers) come whole
    local f want got
    for f in 1k 1m; do
        [[ $f == 1k ]] || serves_files "$1" || continue
        want=$(stat -c %s "$RUN/www/static/$f.bin")
        got=$(curl -sk --max-time 5 -o /dev/null -w '%{http_code} %{size_download}' \
            "https://127.0.0.1:$PORT/static/$f.bin" || true)
        [[ $got == "200 $want" ]] || { echo "tls-compare.sh: $1 GET /static/$f.bin: $got (want 200 $want)" >&2; return 1; }
    done
}

# ---------------------------------------------------------------------------------------
# One measured run.

scenario_args() { # NAME -> magpie-load arguments (before the URL)
    case $1 in
    full) echo "-c $HS_CONNS --tls13 -H Connection:close" ;;
    resumed) echo "-c $HS_CONNS --tls13 --resume -H Connection:close" ;;
    ka64) echo "-c 64" ;;
    ka256) echo "-c 256" ;;
    static1m) echo "-c 64" ;;
    *) die "unknown scenario '$1' (full resumed ka64 ka256 static1m)" ;;
    esac
}
scenario_path() {
    case $1 in
    full | resumed) echo / ;;
    ka64 | ka256) echo /static/1k.bin ;;
    static1m) echo /static/1m.bin ;;
    esac
}

echo "round,server,scenario,requests,req_per_s,hs_per_s,resumed_share,hs_p50_us,hs_p99_us,p50_us,p99_us,errors,srv_cpu_s,srv_us_per_req,srv_us_per_hs,client_cpu_s,others_cpu_s" >"$CSV"

# csv_field FILE NAME: a column of magpie-load's CSV by its header name
csv_field() {
    awk -F, -v k="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == k) c = i } NR == 2 && c { print $c }' "$1"
}

measure() { # ROUND SERVER SCENARIO
    local r=$1 s=$2 sc=$3 out=$LOGS/$2-$3-r$1 t0 t1 b0 b1 rc=0
    local -a args
    read -r -a args < <(scenario_args "$sc")
    # -H takes "Connection: close" with its space back
    local i
    for i in "${!args[@]}"; do [[ ${args[i]} != Connection:close ]] || args[i]="Connection: close"; done
    settle
    b0=$(busy_ticks)
    t0=$(cpu_ticks "$SRV_PID")
    timeout -k 5 $((DURATION + 40)) "$LOAD" -t "$LOAD_THREADS" -d "$DURATION" "${args[@]}" \
        --csv "$out.csv" "https://127.0.0.1:$PORT$(scenario_path "$sc")" >"$out.txt" 2>&1 </dev/null 9>&- || rc=$?
    t1=$(cpu_ticks "$SRV_PID")
    b1=$(busy_ticks)
    ((rc == 0)) || log "$s $sc round $r: magpie-load exited $rc (see $out.txt)"
    [[ -s $out.csv ]] || { echo "$r,$s,$sc,0,0,0,0,0,0,0,0,0,0,0,0,0,0" >>"$CSV"; return; }
    local reqs rps hs res h50 h99 p50 p99 errs ccpu
    reqs=$(csv_field "$out.csv" requests)
    rps=$(csv_field "$out.csv" requests_per_s)
    hs=$(csv_field "$out.csv" handshakes_per_s)
    res=$(csv_field "$out.csv" resumed_share)
    h50=$(csv_field "$out.csv" hs_p50_us)
    h99=$(csv_field "$out.csv" hs_p99_us)
    p50=$(csv_field "$out.csv" lat_p50_us)
    p99=$(csv_field "$out.csv" lat_p99_us)
    errs=$(csv_field "$out.csv" errors)
    ccpu=$(csv_field "$out.csv" cpu_s)
    awk -v r="$r" -v s="$s" -v sc="$sc" -v reqs="$reqs" -v rps="$rps" -v hs="$hs" -v res="$res" \
        -v h50="$h50" -v h99="$h99" -v p50="$p50" -v p99="$p99" -v errs="$errs" -v ccpu="$ccpu" \
        -v t="$((t1 - t0))" -v b="$((b1 - b0))" -v hz="$CLK_TCK" -v d="$DURATION" 'BEGIN {
            cpu = t / hz; others = b / hz - cpu - ccpu; if (others < 0) others = 0
            nhs = hs * d
            printf "%s,%s,%s,%d,%.2f,%.2f,%.4f,%.1f,%.1f,%.1f,%.1f,%d,%.3f,%.2f,%.2f,%.3f,%.2f\n",
                r, s, sc, reqs, rps, hs, res, h50, h99, p50, p99, errs, cpu,
                (reqs > 0 ? cpu * 1e6 / reqs : 0), (nhs > 0 ? cpu * 1e6 / nhs : 0), ccpu, others }' >>"$CSV"
    log "$s $sc round $r: $(tail -1 "$CSV")"
}

# ---------------------------------------------------------------------------------------
# The rounds.

ACTIVE=()
for s in $SERVERS; do
    if [[ -n ${SKIP[$s]:-} ]]; then log "skipping $s: ${SKIP[$s]}"; else ACTIVE+=("$s"); fi
done
((${#ACTIVE[@]} > 0)) || die "no server to measure"
n=${#ACTIVE[@]}
for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
        s=${ACTIVE[$(((k + r - 1) % n))]}
        log "round $r/$ROUNDS: $s"
        if ! start_tls_server "$s"; then
            log "$s did not start; its round $r is skipped"
            continue
        fi
        if ! check_files "$s"; then stop_server; continue; fi
        timeout -k 5 $((WARMUP + 30)) "$LOAD" -q -d "$WARMUP" -c 64 \
            "https://127.0.0.1:$PORT/static/1k.bin" >/dev/null 2>&1 </dev/null 9>&- || true
        for sc in $SCENARIOS; do
            serves "$s" "$sc" || continue
            measure "$r" "$s" "$sc"
        done
        stop_server
    done
done

# ---------------------------------------------------------------------------------------
# The h2load cross-check: ka64 once per server.

XCSV=$OUTDIR/tls-$STAMP-h2load.csv
echo "server,req_per_s,srv_us_per_req" >"$XCSV"
if [[ $XCHECK == 1 ]] && command -v h2load >/dev/null; then
    for s in "${ACTIVE[@]}"; do
        start_tls_server "$s" || continue
        timeout -k 5 $((WARMUP + 30)) "$LOAD" -q -d "$WARMUP" -c 64 \
            "https://127.0.0.1:$PORT/static/1k.bin" >/dev/null 2>&1 </dev/null 9>&- || true
        settle
        t0=$(cpu_ticks "$SRV_PID")
        out=$LOGS/$s-h2load-ka64.txt
        timeout -k 5 $((DURATION + 40)) h2load --h1 -t1 -c64 -D "$DURATION" \
            "https://127.0.0.1:$PORT/static/1k.bin" >"$out" 2>&1 </dev/null 9>&- || true
        t1=$(cpu_ticks "$SRV_PID")
        awk -v s="$s" -v t="$((t1 - t0))" -v hz="$CLK_TCK" '
            /^finished in/ { gsub(/,/, ""); rps = $4 }
            /^requests:/ { ok = $8 }
            END { printf "%s,%.2f,%.2f\n", s, rps, (ok > 0 ? t / hz * 1e6 / ok : 0) }' "$out" >>"$XCSV"
        log "h2load $s: $(tail -1 "$XCSV")"
        stop_server
    done
fi

# ---------------------------------------------------------------------------------------
# Idle memory: IDLE_N keep-alive TLS connections on a fresh server.

ICSV=$OUTDIR/tls-$STAMP-idle.csv
echo "server,connections,rss_before_kib,rss_with_kib,pss_before_kib,pss_with_kib,rss_per_conn_kib,pss_per_conn_kib" >"$ICSV"

mem_kib() { # PID FIELD(Rss|Pss): summed over the process tree, from smaps_rollup
    local total=0 p v
    for p in $(tree_pids "$1"); do
        v=$(awk -v f="$2:" '$1 == f { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

if ((IDLE_N > 0)); then
    if ! (ulimit -n $((IDLE_N + 512))) 2>/dev/null; then
        log "idle: ulimit -n $((IDLE_N + 512)) not permitted (hard limit $(ulimit -Hn)); skipped"
    else
        ulimit -n $((IDLE_N + 512))
        for s in "${ACTIVE[@]}"; do
            [[ " $IDLE_SERVERS " == *" $s "* ]] || continue
            start_tls_server "$s" "$IDLE_N" || continue
            sleep 1
            rb=$(mem_kib "$SRV_PID" Rss)
            pb=$(mem_kib "$SRV_PID" Pss)
            "$OUTDIR/bin/idle_clients" "$PORT" "$IDLE_N" "$IDLE_TIMEOUT" tls >"$RUN/idle.out" 2>&1 &
            CLIENT_PID=$!
            ok=0
            for ((i = 0; i < IDLE_TIMEOUT * 10; i++)); do
                if grep -q '^ready' "$RUN/idle.out" 2>/dev/null; then ok=1; break; fi
                kill -0 "$CLIENT_PID" 2>/dev/null || break
                sleep 0.1
            done
            if ((ok)); then
                sleep 3
                rw=$(mem_kib "$SRV_PID" Rss)
                pw=$(mem_kib "$SRV_PID" Pss)
                awk -v s="$s" -v n="$IDLE_N" -v rb="$rb" -v rw="$rw" -v pb="$pb" -v pw="$pw" 'BEGIN {
                    printf "%s,%d,%d,%d,%d,%d,%.2f,%.2f\n", s, n, rb, rw, pb, pw, (rw - rb) / n, (pw - pb) / n }' >>"$ICSV"
                log "idle $s: $(tail -1 "$ICSV")"
            else
                log "idle $s: the client failed: $(tail -3 "$RUN/idle.out")"
            fi
            stop_pid "$CLIENT_PID"
            CLIENT_PID=
            stop_server
        done
    fi
fi

# ---------------------------------------------------------------------------------------
# Report.

mcol() { # SERVER SCENARIO FIELD -> the median over rounds
    awk -F, -v s="$1" -v c="$2" -v f="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; next }
        $idx["server"] == s && $idx["scenario"] == c && $idx["requests"] > 0 { print $idx[f] }' "$CSV" |
        median
}
# The median (min-max) over rounds of magpied's FIELD over the peer's, each round's own pair.
pratio() { # PEER SCENARIO FIELD
    awk -F, -v p="$1" -v c="$2" -v f="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) idx[$i] = i; next }
        $idx["scenario"] == c && $idx["requests"] > 0 && $idx["server"] == "magpied" { m[$1] = $idx[f] }
        $idx["scenario"] == c && $idx["requests"] > 0 && $idx["server"] == p { q[$1] = $idx[f] }
        '"$PAIRED_RATIO_END" "$CSV"
}
pmed() { pratio "$@" | awk '{ print $1 }'; }

{
    echo "## TLS: magpied, nginx, HAProxy ($STAMP)"
    echo
    echo "\`ROUNDS=$ROUNDS DURATION=$DURATION loadtest/http/tls-compare.sh\` on $(nproc) CPUs; $(uname -r);"
    echo "$(openssl version); nginx $($NGINX -v 2>&1 | sed 's/.*nginx\///'); $($HAPROXY -v | head -1 | awk '{ print $1, $3 }');"
    echo "magpie-load -t$LOAD_THREADS, medians over $ROUNDS rounds; ratios are the median (min–max) of each round's magpied/peer."
    for sc in $SCENARIOS; do
        echo
        case $sc in
        full | resumed)
            echo "### $sc: $(scenario_args "$sc" | sed 's/Connection:close/"Connection: close"/'), GET /, ${DURATION}s"
            echo
            echo "| server | handshakes/s | resumed | handshake p50 | p99 | server CPU µs/handshake | client CPU s | others' CPU s ¹ | magpied/peer handshakes/s | magpied/peer CPU |"
            echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            main=hs_per_s cpuf=srv_us_per_hs
            ;;
        *)
            echo "### $sc: $(scenario_args "$sc"), GET $(scenario_path "$sc") over TLS, ${DURATION}s"
            echo
            echo "| server | req/s | p50 | p99 | server CPU µs/req | client CPU s | others' CPU s ¹ | magpied/peer req/s | magpied/peer CPU |"
            echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
            main=req_per_s cpuf=srv_us_per_req
            ;;
        esac
        for s in "${ACTIVE[@]}"; do
            serves "$s" "$sc" || continue
            v=$(mcol "$s" "$sc" "$main")
            [[ -n $v ]] || { echo "| $s | (no data) |"; continue; }
            cpu=$(mcol "$s" "$sc" "$cpuf")
            cc=$(mcol "$s" "$sc" client_cpu_s)
            oc=$(mcol "$s" "$sc" others_cpu_s)
            if [[ $s == magpied ]]; then rr="—"; cr="—"; else rr=$(pratio "$s" "$sc" "$main"); cr=$(pratio "$s" "$sc" "$cpuf"); fi
            if [[ $main == hs_per_s ]]; then
                printf '| %s | %s | %.1f%% | %s | %s | %.1f | %.2f | %.2f | %s | %s |\n' "$s" "$(fmt_rps "$v")" \
                    "$(awk -v x="$(mcol "$s" "$sc" resumed_share)" 'BEGIN { print 100 * x }')" \
                    "$(fmt_us "$(mcol "$s" "$sc" hs_p50_us)")" "$(fmt_us "$(mcol "$s" "$sc" hs_p99_us)")" \
                    "$cpu" "$cc" "$oc" "$rr" "$cr"
            else
                printf '| %s | %s | %s | %s | %.2f | %.2f | %.2f | %s | %s |\n' "$s" "$(fmt_rps "$v")" \
                    "$(fmt_us "$(mcol "$s" "$sc" p50_us)")" "$(fmt_us "$(mcol "$s" "$sc" p99_us)")" \
                    "$cpu" "$cc" "$oc" "$rr" "$cr"
            fi
        done
        errs=$(awk -F, -v c="$sc" 'NR > 1 && $3 == c && $12 > 0 { printf "%s%s round %s: %d", sep, $2, $1, $12; sep = "; " }' "$CSV")
        [[ -z $errs ]] || { echo; echo "Errors (magpie-load's count): $errs"; }
    done
    if (($(wc -l <"$XCSV") > 1)); then
        echo
        echo "### cross-check: h2load --h1 -t1 -c64 -D $DURATION, GET /static/1k.bin over TLS (one run each)"
        echo
        echo "| server | req/s | server CPU µs/req |"
        echo "|---|---:|---:|"
        awk -F, 'NR > 1 { printf "| %s | %.0f | %.2f |\n", $1, $2, $3 }' "$XCSV"
    fi
    if (($(wc -l <"$ICSV") > 1)); then
        echo
        echo "### idle: $IDLE_N keep-alive TLS connections (a full handshake and one GET / each, then idle)"
        echo
        echo "| server | RSS before (KiB) | RSS with (KiB) | PSS before | PSS with | RSS/conn (KiB) | PSS/conn (KiB) |"
        echo "|---|---:|---:|---:|---:|---:|---:|"
        awk -F, 'NR > 1 { printf "| %s | %d | %d | %d | %d | %.2f | %.2f |\n", $1, $3, $4, $5, $6, $7, $8 }' "$ICSV"
    fi
    echo
    echo "¹ the machine's busy time (/proc/stat: user, nice, system, irq, softirq, steal) during the run that"
    echo "was neither the server's nor magpie-load's: other work on a shared machine."
    echo
    echo "### targets (issue 32)"
    echo
    target() { # TEXT RATIO OP LIMIT
        local v=$2
        if [[ -z $v || $v == n/a ]]; then echo "- $1: no data"; return; fi
        if awk -v v="$v" -v l="$4" -v op="$3" 'BEGIN { exit !(op == ">=" ? v >= l : v < l) }'; then
            echo "- $1: $v — met"
        else
            echo "- $1: $v — missed"
        fi
    }
    for p in nginx haproxy; do
        [[ " ${ACTIVE[*]} " == *" $p "* ]] || continue
        [[ " $SCENARIOS " != *" full "* ]] || target "full handshakes/s ≥ 1.1× $p" "$(pmed "$p" full hs_per_s)" ">=" 1.1
        [[ " $SCENARIOS " != *" resumed "* ]] || target "resumed handshakes/s ≥ 1.1× $p" "$(pmed "$p" resumed hs_per_s)" ">=" 1.1
        for sc in ka64 ka256; do
            [[ " $SCENARIOS " == *" $sc "* ]] || continue
            [[ $p != nginx ]] || target "$sc req/s ≥ 1.2× nginx" "$(pmed nginx "$sc" req_per_s)" ">=" 1.2
            target "$sc server CPU/request below $p's (ratio)" "$(pmed "$p" "$sc" srv_us_per_req)" "<" 1.0
        done
    done
    [[ " $SCENARIOS " != *" static1m "* ]] || target "static1m req/s ≥ 1.0× nginx" "$(pmed nginx static1m req_per_s)" ">=" 1.0
    if (($(wc -l <"$ICSV") > 1)); then
        im=$(awk -F, '$1 == "magpied" { print $8 }' "$ICSV")
        in=$(awk -F, '$1 == "nginx" { print $8 }' "$ICSV")
        if [[ -n $im && -n $in ]]; then
            awk -v m="$im" -v n="$in" 'BEGIN { printf "- idle TLS PSS per connection at most nginx'\''s: %.2f KiB against %.2f — %s\n", m, n, (m <= n ? "met" : "missed") }'
        fi
    fi
    echo
    echo "Raw: $CSV; clients' output: $LOGS/."
} | tee "$MD"
