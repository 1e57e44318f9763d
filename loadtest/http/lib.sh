# loadtest/http/lib.sh: what the HTTP comparisons share (compare.sh, proxy-compare.sh, and the
# other scripts here and in ../load that source it for some of it):
# stopping processes by PID, free ports, a process tree's CPU time from /proc, bounded wrk
# runs with the server's CPU per request, waiting for a quiet machine, and the Markdown
# tables with their paired ratios. Sourced, not run.
#
# The caller sets before sourcing: HERE (this folder), RUN (a scratch folder), CLK_TCK,
# WRK_PREFIX (an array, may be empty), SETTLE, QUIET, QUIET_WAIT, SCENARIOS, PIPE_CONNS,
# DURATION, ROUNDS; and defines log and die. PROG names the script in messages. The
# measured server is SRV_PID on PORT; WRK_PID is the wrk running, if any.
# shellcheck shell=bash

PROG=${PROG:-compare.sh}
SRV_PID=
WRK_PID=
PORT=

# ---------------------------------------------------------------------------------------
# Processes.

# One benchmark at a time on this machine: the lock LOCK on fd 9, waiting up to LOCK_WAIT s.
# The servers and wrk are started with fd 9 closed so that none of them can hold it.
bench_lock() {
    exec 9>"$LOCK"
    if ! flock -n 9; then
        log "another benchmark holds $LOCK; waiting up to ${LOCK_WAIT}s"
        flock -w "$LOCK_WAIT" 9 || die "timed out waiting for $LOCK"
    fi
}

# stop_pid PID [SECONDS]: TERM, wait up to SECONDS (STOP_WAIT, else 5: more for valgrind,
# which writes its profile at exit), then KILL; always reaps it. No PID: nothing to do.
stop_pid() {
    local pid=$1 secs=${2:-${STOP_WAIT:-5}} i
    [[ -n $pid ]] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        # A reaped-but-not-waited child still answers kill -0 as a zombie; check state.
        [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]] && break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; then
        echo "$PROG: PID $pid did not stop on SIGTERM; sending SIGKILL" >&2
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
        echo "$PROG: wrk exited $rc (see $out)" >&2
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
        '"$PAIRED_RATIO_END" "$1"
}
# The END of an awk program that filled m[ROUND] (magpied's figure) and q[ROUND] (the peer's):
# the median (min-max) of m[r] / q[r] over the rounds that have both, "n/a" when none.
PAIRED_RATIO_END='END {
            n = 0
            for (r in m) if ((r in q) && q[r] > 0) x[++n] = m[r] / q[r]
            if (n == 0) { print "n/a"; exit }
            for (i = 2; i <= n; i++) { v = x[i]; for (j = i - 1; j >= 1 && x[j] > v; j--) x[j + 1] = x[j]; x[j + 1] = v }
            med = n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
            printf "%.2f (%.2f–%.2f)", med, x[1], x[n]
        }'

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
# The floor (floor.c), built into DIR/floor with the flags of magpied's release build: -O2,
# and GCC's link-time optimisation, which lets llhttp's callback shims inline for the floor as
# for magpied (FLOOR_LTO=0 builds it without). LLHTTP_DIR and LLHTTP_INC_DIR as the Makefile.
build_floor() { # DIR
    local dir=$1 f
    local llhttp=${LLHTTP_DIR:-/usr/share/llhttp} inc=${LLHTTP_INC_DIR:-/usr/share/include/llhttp}
    local -a opt=(-O2 -g)
    if [[ ${FLOOR_LTO:-1} != 0 ]] && cc --version | grep -q 'Free Software Foundation'; then
        opt+=(-flto=auto)
    fi
    mkdir -p "$dir"
    for f in api http llhttp; do
        cc -std=c11 "${opt[@]}" -DLLHTTP_STRICT_MODE=1 -I"$inc" -c "$llhttp/$f.c" -o "$dir/$f.o"
    done
    cc -std=c11 -D_GNU_SOURCE "${opt[@]}" -Wall -Wextra -Wno-unused-parameter -I"$inc" \
        "$HERE/floor.c" "$dir"/api.o "$dir"/http.o "$dir"/llhttp.o -luv -o "$dir/floor"
}
