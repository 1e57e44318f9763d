#!/usr/bin/env bash
# loadtest/http/tls-counts.sh: what one keep-alive request over TLS costs magpied, counted,
# at each connection count: figures that do not move with the machine's load.
#
#   loadtest/http/tls-counts.sh                         c64 and c256, every probe below
#   CONNS=256 PROBES="hw sys" DURATION=5 loadtest/http/tls-counts.sh
#   SERVER=nginx PROBES="hw sys" loadtest/http/tls-counts.sh    nginx's, for comparison
#
# One magpied as tls-compare.sh starts it (2 workers, the shipped TLS defaults, the same
# ECDSA P-256 certificate made per run), plus [route = /metrics]; magpie-load -t LOAD_THREADS
# keep-alive GET /static/1k.bin on CONNS connections. For each connection count, a fresh
# server, a warm-up, then one window of DURATION seconds per probe, each divided by the
# requests the server answered in it (magpied_http_responses_total{code="2xx"} of /metrics
# before and after; nginx: magpie-load's count):
#
#   hw      perf stat: instructions (user, kernel), context switches, migrations, page faults,
#           cache references and misses where the machine has them
#   sys     perf stat on the syscall tracepoints: system calls by kind (every one that ran)
#   reads   perf record of read()'s returns: reads per request, bytes per read, EAGAINs
#   calls   uprobes: malloc, free, calloc, realloc (libc); SSL_read_ex, SSL_write_ex
#           (libssl); CRYPTO_malloc, CRYPTO_free (libcrypto); and malloc's sizes (a
#           histogram of a short perf record: OpenSSL's 16 KiB record buffers show there)
#   strace  strace -c -f: system calls by kind, a cross-check of sys (strace slows the
#           server: its per-request counts shift toward the slow case)
#   runtime magpied only, and in every window: the runtime's counters per request (polls,
#           parks and unparks of workers, I/O loop runs), from /metrics
#
# Needs perf (and root, or perf_event_paranoid <= 1 for uprobes and tracepoints), strace,
# curl, openssl. Raw output in build/loadtest/tlscount-STAMP/, a Markdown table on stdout.
# Every process it starts it stops by its PID.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

CONNS=${CONNS:-64 256}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-2}
LEAD=${LEAD:-2}
CG_LEAD=${CG_LEAD:-60}
CG_CACHE=${CG_CACHE:-no}
CG_OPTS=${CG_OPTS:-}
LOAD_THREADS=${LOAD_THREADS:-2}
WORKERS=${WORKERS:-2}
SERVER=${SERVER:-magpied}
PROBES=${PROBES:-hw sys reads calls strace}
READY_TIMEOUT=${READY_TIMEOUT:-15}
OUTDIR=${OUTDIR:-$ROOT/build/loadtest}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
LOAD=${LOAD:-$ROOT/build/release/magpie-load}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
LOCK=${LOCK:-/tmp/lt/bench.lock}
LOCK_WAIT=${LOCK_WAIT:-3600}
LIBC=${LIBC:-$(ldconfig -p | awk '/libc\.so\.6 .*x86-64/ { if (p == "") p = $NF } END { print p }')}
LIBSSL=${LIBSSL:-$(ldconfig -p | awk '/libssl\.so\.3 .*x86-64/ { if (p == "") p = $NF } END { print p }')}
LIBCRYPTO=${LIBCRYPTO:-$(ldconfig -p | awk '/libcrypto\.so\.3 .*x86-64/ { if (p == "") p = $NF } END { print p }')}
PROG=tls-counts.sh

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'tls-counts.sh: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 0 ]] || { echo "usage: $0   (knobs are environment variables, see the top of the file)" >&2; exit 2; }
for t in perf curl openssl timeout flock ss; do
    command -v "$t" >/dev/null || die "$t not found"
done
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"
# shellcheck source=loadtest/http/tls-servers.sh
source "$HERE/tls-servers.sh"

RUN=
PERF_PID=
CLIENT_PID=
PROBES_ADDED=0
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n $PERF_PID ]]; then stop_pid "$PERF_PID"; fi
    if [[ -n $CLIENT_PID ]]; then stop_pid "$CLIENT_PID"; fi
    stop_server
    ((PROBES_ADDED == 0)) || perf probe -q -d 'probe_*:tlscount_*' 2>/dev/null || true
    [[ -z $RUN || ! -d $RUN ]] || rm -rf "$RUN"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$OUTDIR/tlscount-$STAMP
mkdir -p "$OUT" /tmp/lt
RUN=$(mktemp -d /tmp/lt/tlscount.XXXXXX)
chmod 755 "$RUN"
bench_lock
[[ -x $MAGPIED && -x $LOAD ]] || make -C "$ROOT" -s -j2 build/release/magpied build/release/magpie-load >&2

tls_site "$RUN" || die "openssl req failed"
chmod -R a+rX "$RUN"

start() { # CONNS
    local conns=$1
    [[ $SERVER == magpied || $SERVER == nginx ]] || die "SERVER: magpied or nginx"
    PORT=$(free_port)
    MAGPIED_HTTPS_EXTRA=$(if [[ ${CG:-0} == 1 ]]; then printf 'handshake_timeout_ms = 600000\nhandshake_min_rate = 0\n'; fi) \
        MAGPIED_ROUTES_EXTRA=$'[route = /metrics]\nhandler = metrics' \
        tls_server_conf "$SERVER" "$RUN" "$PORT" "$WORKERS" "$conns"
    local -a cmd=("${TLS_CMD[@]}")
    if [[ ${CG:-0} == 1 ]]; then
        # shellcheck disable=SC2206 # CG_OPTS: words
        cmd=(valgrind --tool=callgrind --cache-sim="$CG_CACHE" $CG_OPTS --dump-instr=no --callgrind-out-file="$OUT/cg.out.%p" "${cmd[@]}")
    fi
    (ulimit -n $((conns + 512)) && exec "${cmd[@]}") >"$RUN/server.log" 2>&1 </dev/null 9>&- &
    SRV_PID=$!
    wait_https "$SRV_PID" "$PORT" $((READY_TIMEOUT * (${CG:-0} == 1 ? 4 : 1))) "$RUN/server.log" \
        $((${CG:-0} == 1 ? 5 : 1)) || die "$SERVER did not start"
}

# The processes perf and strace attach to: magpied's PID, nginx's workers.
targets() {
    if [[ $SERVER == nginx ]]; then pgrep -d, -P "$SRV_PID"; else echo "$SRV_PID"; fi
}

# The runtime's counters (summed over workers) and the 2xx responses, NAME VALUE lines.
snapshot() { # FILE
    if [[ $SERVER != magpied ]]; then : >"$1"; return; fi
    curl -sk --max-time 60 "https://127.0.0.1:$PORT/metrics" | awk '
        /^magpie_worker_[a-z_]+_total\{/ { n = $1; sub(/\{.*/, "", n); sub(/^magpie_worker_/, "", n); sub(/_total$/, "", n); s[n] += $2 }
        /^magpied_http_responses_total\{code="2xx"\}/ { s["responses_2xx"] = $2 }
        END { for (k in s) print k, s[k] }' >"$1"
}

# One window of DURATION seconds in the middle of a magpie-load run of LEAD + DURATION + 2
# seconds, so that its connections and their handshakes are made before it. perf (COMMAND
# is perf stat or perf record) counts while a child of its own takes the snapshots and
# sleeps between them: its counting spans the window and two /metrics requests. strace
# (COMMAND is strace) attaches first, and the window starts once it has. Sets REQS, the
# requests answered in the window.
window() { # NAME CONNS COMMAND...
    local name=$1 c=$2
    shift 2
    local base=$OUT/$SERVER-c$c-$name load_pid i
    timeout -k 5 $((LEAD + DURATION + 30)) "$LOAD" -q -t "$LOAD_THREADS" -d $((LEAD + DURATION + 2)) \
        -c "$c" --csv "$base.csv" "https://127.0.0.1:$PORT/static/1k.bin" >"$base.load" 2>&1 </dev/null 9>&- &
    load_pid=$!
    CLIENT_PID=$load_pid
    sleep "$LEAD"
    if [[ $1 == perf ]]; then
        "$@" -- env SERVER="$SERVER" PORT="$PORT" DURATION="$DURATION" BASE="$base" \
            bash -c "$(declare -f snapshot); snapshot \"\$BASE.m0\"; sleep \"\$DURATION\"; snapshot \"\$BASE.m1\"" \
            >"$base.probe" 2>&1 </dev/null 9>&- || log "$name: $1 failed (see $base.probe)"
    else
        "$@" >"$base.probe" 2>&1 </dev/null 9>&- &
        PERF_PID=$!
        sleep 1
        snapshot "$base.m0"
        sleep "$DURATION"
        snapshot "$base.m1"
        kill -INT "$PERF_PID" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do kill -0 "$PERF_PID" 2>/dev/null || break; sleep 0.1; done
        stop_pid "$PERF_PID"
        PERF_PID=
    fi
    wait "$load_pid" || true
    CLIENT_PID=
    REQS=$(awk 'NR == FNR { a[$1] = $2; next } $1 == "responses_2xx" { print $2 - a[$1] }' "$base.m0" "$base.m1")
    if [[ -z $REQS ]]; then # nginx: magpie-load's rate over the window
        REQS=$(awk -F, -v d="$DURATION" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "requests_per_s") k = i } NR == 2 { printf "%d\n", $k * d }' "$base.csv")
    fi
    echo "$REQS" >"$base.reqs"
    log "$SERVER c$c $name: $REQS requests in the window"
}

# perf stat -x, output (value,unit,event,...) divided by REQS: EVENT VALUE_PER_REQUEST lines.
per_req() { # FILE REQS
    awk -F, -v n="$2" '$3 != "" && $1 ~ /^[0-9.]+$/ { printf "%s %.3f\n", $3, $1 / n }
        $1 ~ /not (supported|counted)/ { printf "%s n/a\n", $3 }' "$1"
}

runtime_per_req() { # NAME CONNS
    local base=$OUT/$SERVER-c$2-$1
    [[ $SERVER == magpied ]] || return 0
    awk -v n="$(cat "$base.reqs")" 'NR == FNR { a[$1] = $2; next }
        $1 != "responses_2xx" && $2 - a[$1] != 0 { printf "runtime:%s %.4f\n", $1, ($2 - a[$1]) / n }' \
        "$base.m0" "$base.m1"
}

probe_setup() {
    ((PROBES_ADDED == 0)) || return 0
    perf probe -q -d 'probe_*:tlscount_*' 2>/dev/null || true
    local ok=1 p
    for p in "$LIBC tlscount_malloc=malloc size=%di:u64" "$LIBC tlscount_free=free" \
        "$LIBC tlscount_calloc=calloc" "$LIBC tlscount_realloc=realloc" \
        "$LIBSSL tlscount_SSL_read_ex=SSL_read_ex" "$LIBSSL tlscount_SSL_write_ex=SSL_write_ex" \
        "$LIBCRYPTO tlscount_CRYPTO_malloc=CRYPTO_malloc" "$LIBCRYPTO tlscount_CRYPTO_free=CRYPTO_free"; do
        # shellcheck disable=SC2086 # "LIB FUNC [ARGS]"
        set -- $p
        local lib=$1
        shift
        perf probe -q -x "$lib" -a "$*" 2>>"$OUT/probe-setup.err" || { ok=0; log "uprobe $* on $lib: failed"; }
    done
    PROBES_ADDED=1
    ((ok)) || log "some uprobes are missing (see $OUT/probe-setup.err)"
}

RESULTS=$OUT/results.txt
: >"$RESULTS"
for c in $CONNS; do
    log "$SERVER, $c connections"
    start "$c"
    timeout -k 5 $((WARMUP + 30)) "$LOAD" -q -t "$LOAD_THREADS" -d "$WARMUP" -c "$c" \
        "https://127.0.0.1:$PORT/static/1k.bin" >/dev/null 2>&1 </dev/null 9>&- || true
    tg=$(targets)
    for p in $PROBES; do
        base=$OUT/$SERVER-c$c-$p
        case $p in
        hw)
            window hw "$c" perf stat -x, -p "$tg" -e instructions:u,instructions:k,cycles:u,cycles:k,task-clock,context-switches,cpu-migrations,page-faults,cache-references,cache-misses
            per_req "$base.probe" "$REQS" | sed "s/^/c$c hw /" >>"$RESULTS"
            ;;
        sys)
            window sys "$c" perf stat -x, -p "$tg" -e 'raw_syscalls:sys_enter' -e 'syscalls:sys_enter_*'
            per_req "$base.probe" "$REQS" | awk '$2 != "0.000"' | sed "s/^/c$c sys /" >>"$RESULTS"
            ;;
        reads)
            window reads "$c" perf record -q -o "$base.data" -p "$tg" -e syscalls:sys_exit_read,syscalls:sys_exit_sendto
            perf script -i "$base.data" -F event,trace 2>/dev/null | awk -v n="$REQS" -v c="$c" '
                function num(x,   v, i, d, neg) { # perf prints the return in hex
                    if (x !~ /^0x/) return x + 0
                    x = tolower(substr(x, 3)); v = 0
                    neg = length(x) == 16 && substr(x, 1, 1) == "f"
                    for (i = 1; i <= length(x); i++) { d = index("0123456789abcdef", substr(x, i, 1)) - 1; v = v * 16 + (neg ? 15 - d : d) }
                    return neg ? -(v + 1) : v }
                /sys_exit_read/ { r++; v = num($NF); if (v > 0) { b += v; ok++ } else if (v == -11) again++; else other++ }
                /sys_exit_sendto/ { s++; v = num($NF); if (v > 0) sb += v }
                END { printf "c%s reads reads/req %.3f\nc%s reads bytes/read %.1f\nc%s reads eagain/req %.3f\nc%s reads bytes_in/req %.1f\nc%s reads sends/req %.3f\nc%s reads bytes/send %.1f\n",
                    c, r / n, c, (ok ? b / ok : 0), c, again / n, c, b / n, c, s / n, c, (s ? sb / s : 0) }' >>"$RESULTS"
            rm -f "$base.data"
            ;;
        calls)
            probe_setup
            window calls "$c" perf stat -x, -p "$tg" -e 'probe_*:tlscount_*'
            per_req "$base.probe" "$REQS" | sed "s/^/c$c calls /" >>"$RESULTS"
            # malloc's sizes: a second window, recorded
            window sizes "$c" perf record -q -o "$base.sizes" -p "$tg" -e probe_libc:tlscount_malloc
            perf script -i "$base.sizes" -F trace 2>/dev/null | sed -n 's/.*size=\([0-9a-fx]*\).*/\1/p' |
                awk -v n="$REQS" '{ v = $1
                        if (v ~ /^0x/) { x = tolower(substr(v, 3)); v = 0
                            for (i = 1; i <= length(x); i++) v = v * 16 + index("0123456789abcdef", substr(x, i, 1)) - 1 }
                        t++; h[v + 0]++ }
                    END { for (k in h) if (h[k] / t >= 0.01) printf "%d bytes: %.1f%% of mallocs, %.2f per request\n", k, 100 * h[k] / t, h[k] / n }' |
                sort -n >"$OUT/$SERVER-c$c-malloc-sizes.txt" || true
            rm -f "$base.sizes"
            ;;
        insn)
            # A server of its own under callgrind (with its cache simulation): zeroed once
            # the connections are open, dumped after DURATION seconds.
            command -v valgrind >/dev/null || { log "no valgrind"; continue; }
            stop_server
            CG=1 start "$c"
            timeout -k 5 $((CG_LEAD + DURATION + 60)) "$LOAD" -q -t "$LOAD_THREADS" -d $((CG_LEAD + DURATION + 5)) \
                --timeout 20000 --connect-timeout 20000 -c "$c" --csv "$base.csv" \
                "https://127.0.0.1:$PORT/static/1k.bin" >"$base.load" 2>&1 </dev/null 9>&- &
            CLIENT_PID=$!
            sleep "$CG_LEAD"
            callgrind_control -z "$SRV_PID" >/dev/null 2>&1
            sleep "$DURATION"
            callgrind_control -d "$SRV_PID" >/dev/null 2>&1
            wait "$CLIENT_PID" || true
            CLIENT_PID=
            stop_server
            # shellcheck disable=SC2012 # one file, a name we made
            dump=$(ls -t "$OUT/cg.out."*.1 2>/dev/null | head -1)
            [[ -n $dump ]] || { log "no callgrind dump"; continue; }
            mv "$dump" "$base.cg"
            rm -f "$OUT/cg.out."*
            # The requests: one SSL_write_ex each (head and body in one call, tls.c); /metrics
            # would need a handshake that the loaded server under callgrind may time out.
            REQS=$(awk '/^c?fn=/ { id = $1; sub(/^c?fn=/, "", id); nm = $0; if (sub(/^c?fn=\([0-9]+\) /, "", nm)) name[id] = nm; if ($0 ~ /^cfn=/) cur = id }
                /^calls=/ { v = $1; sub(/^calls=/, "", v); calls[cur] += v }
                END { for (id in calls) if (name[id] == "SSL_write_ex") print calls[id] }' "$base.cg")
            echo "$REQS" >"$base.reqs"
            log "$SERVER c$c insn: $REQS requests (SSL_write_ex calls) in the window"
            # Events per request from the summary; calls per request of the functions named.
            awk -v n="$REQS" -v c="$c" '
                /^events:/ { for (i = 2; i <= NF; i++) ev[i - 1] = $i; ne = NF - 1 }
                /^summary:/ { for (i = 2; i <= NF; i++) printf "c%s insn %s %.1f\n", c, ev[i - 1], $i / n }
                /^c?fn=/ { id = $1; sub(/^c?fn=/, "", id); nm = $0; if (sub(/^c?fn=\([0-9]+\) /, "", nm)) name[id] = nm; if ($0 ~ /^cfn=/) cur = id }
                /^calls=/ { v = $1; sub(/^calls=/, "", v); calls[cur] += v }
                END { for (id in calls) if (name[id] ~ /^(malloc|free|calloc|realloc|CRYPTO_malloc|CRYPTO_free|CRYPTO_zalloc|SSL_read_ex|SSL_write_ex|SSL_get_error|ssl3_read_bytes|ssl3_read_n|ssl3_setup_read_buffer|ssl3_release_read_buffer|ssl3_setup_write_buffer|ssl3_release_write_buffer|tls_get_more_records|ssl3_get_record|do_ssl3_write|EVP_Cipher|EVP_CipherUpdate|EVP_DecryptUpdate|EVP_EncryptUpdate|ERR_clear_error|ERR_peek_error|epoll_wait|sendto|read|syscall)$/)
                        printf "c%s insn calls:%s %.3f\n", c, name[id], calls[id] / n }' "$base.cg" >>"$RESULTS"
            start "$c"
            continue
            ;;
        strace)
            command -v strace >/dev/null || { log "no strace"; continue; }
            # shellcheck disable=SC2046 # one -p per target
            window strace "$c" strace -c -f -qq $(tr , '\n' <<<"$tg" | sed 's/^/-p /')
            awk -v n="$REQS" -v c="$c" '$1 ~ /^[0-9.]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
                    printf "c%s strace %s %.3f\n", c, $NF, $4 / n }' \
                "$base.probe" >>"$RESULTS" || true
            ;;
        *) die "unknown probe '$p'" ;;
        esac
        runtime_per_req "$p" "$c" | sed "s/^/c$c $p /" >>"$RESULTS"
    done
    stop_server
done

# One table: a row per figure, a column per connection count.
awk '{ k = $2 " " $3; if (!(k in seen)) { seen[k] = 1; order[++n] = k } v[k, $1] = $4; cs[$1] = 1 }
    END {
        m = 0; for (c in cs) col[++m] = c
        for (i = 1; i < m; i++) for (j = i + 1; j <= m; j++) if (substr(col[j], 2) + 0 < substr(col[i], 2) + 0) { t = col[i]; col[i] = col[j]; col[j] = t }
        printf "| probe | figure per request |"; for (i = 1; i <= m; i++) printf " %s |", col[i]; printf "\n|---|---|"
        for (i = 1; i <= m; i++) printf "---:|"; printf "\n"
        for (r = 1; r <= n; r++) { split(order[r], pk, " "); printf "| %s | %s |", pk[1], pk[2]
            for (i = 1; i <= m; i++) printf " %s |", ((order[r], col[i]) in v) ? v[order[r], col[i]] : ""; printf "\n" }
    }' "$RESULTS" | tee "$OUT/table.md"
for f in "$OUT"/*-malloc-sizes.txt; do
    [[ -e $f ]] || continue
    echo
    echo "malloc sizes, $(basename "$f" -malloc-sizes.txt) (share of mallocs, >= 1%):"
    cat "$f"
done
log "raw output in $OUT"
