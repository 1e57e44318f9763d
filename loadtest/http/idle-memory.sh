#!/usr/bin/env bash
# loadtest/http/idle-memory.sh: memory per idle keep-alive connection, magpied beside nginx.
#
#   loadtest/http/idle-memory.sh                    1000, 10000 and 50000 connections
#   COUNTS="1000 10000" SERVERS=magpied loadtest/http/idle-memory.sh
#   PROTO=h2c COUNTS=10000 loadtest/http/idle-memory.sh     idle HTTP/2 connections (h2c)
#   PROTO=h2c H2_REQUESTS=100 COUNTS=10000 loadtest/http/idle-memory.sh   ... after 100 GETs each
#   PROTO=h2 COUNTS=10000 loadtest/http/idle-memory.sh      HTTP/2 over TLS (ALPN h2)
#
# For each server and each count N, in one run: start the server fresh on 127.0.0.1 and a
# free port, answer one GET / (so its threads and workers are up), read its RSS ("before");
# open N keep-alive connections with idle_clients.c (one GET / on each, response read, then
# kept open and idle) and read the RSS again ("with"); stop the client (its connections
# close), wait SETTLE seconds and read it once more ("after"). RSS is VmRSS summed over the
# server's processes (nginx: master and workers). Prints a Markdown table; per connection is
# (with - before) / N, returned is (with - after) / (with - before).
#
# PROTO=h2c: HTTP/2 with prior knowledge on the plaintext listener (magpied `[http] http2 =
# on`, nginx `listen ... http2`): each client connection sends the preface and SETTINGS,
# acknowledges the server's, makes one GET / (H2_REQUESTS of them at once, 1..100) and then
# idles (idle_clients.c h2c). PROTO=h2: the same over TLS (a full handshake, ALPN h2), each
# server configured by tls-servers.sh (its ECDSA P-256 certificate; nginx `listen ... ssl
# http2`), with as many workers as this machine has vCPUs.
#
# Runs as root to raise RLIMIT_NOFILE on both sides (ulimit -n in the server's subshell; the
# client raises its own); where even root may not raise the hard limit (a container without
# CAP_SYS_RESOURCE), counts above it are skipped with a row saying so. Loopback only; every process it starts it stops by its PID, also on
# Ctrl-C; each step is bounded in time (READY_TIMEOUT).

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
COUNTS=${COUNTS:-1000 10000 50000}
SERVERS=${SERVERS:-magpied nginx}
SETTLE=${SETTLE:-3}
PROTO=${PROTO:-http1}
H2_REQUESTS=${H2_REQUESTS:-1}
case $PROTO in http1 | h2c | h2) ;; *) echo "idle-memory: PROTO=http1, h2c or h2" >&2; exit 2 ;; esac
READY_TIMEOUT=${READY_TIMEOUT:-180}
OUTDIR=${OUTDIR:-$ROOT/build/loadtest}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
CLIENT=$OUTDIR/bin/idle_clients
RUN=$(mktemp -d /tmp/idle-memory.XXXXXX)
chmod 755 "$RUN" # nginx workers run as nobody

die() {
    echo "idle-memory: $*" >&2
    exit 1
}

PROG=idle-memory.sh
STOP_WAIT=10
# stop_pid and free_port
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"
# shellcheck source=loadtest/http/tls-servers.sh
source "$HERE/tls-servers.sh"

SERVER_PID=
CLIENT_PID=
cleanup() {
    stop_pid "$CLIENT_PID"
    stop_pid "$SERVER_PID"
    rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[[ $(id -u) == 0 ]] || die "run as root (RLIMIT_NOFILE for 50000 connections)"
[[ -x $MAGPIED ]] || make -C "$ROOT" -j2 build/release/magpied >&2
mkdir -p "$OUTDIR/bin"
cc -O2 -Wall -o "$CLIENT" "$HERE/idle_clients.c" -lssl -lcrypto
[[ $PROTO != h2 ]] || tls_site "$RUN" || die "openssl req failed"

# VmRSS in KiB of PID and its children.
rss_kib() {
    local total=0 p
    for p in $1 $(pgrep -P "$1" || true); do
        total=$((total + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
    done
    echo "$total"
}

wait_port() {
    for _ in $(seq $((READY_TIMEOUT * 10))); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

start_server() { # NAME PORT N
    local name=$1 port=$2 n=$3 nofile=$(($3 + 512))
    if [[ $PROTO == h2 ]]; then
        NGINX_LISTEN_EXTRA="http2 " tls_server_conf "$name" "$RUN" "$port" "$(nproc)" "$n" ||
            die "no TLS configuration for $name"
        (ulimit -n "$nofile" && exec "${TLS_CMD[@]}" >"$RUN/$name.out" 2>&1) &
        SERVER_PID=$!
        wait_port "$port" || die "$name did not listen on $port"
        return
    fi
    case $name in
    magpied)
        (ulimit -n "$nofile" && exec "$MAGPIED" -c "$ROOT/config/magpied.conf" \
            --set "http.listen=127.0.0.1:$port" --set "echo.listen=" \
            --set "limits.max_connections=$((n + 100))" \
            --set "limits.keepalive_timeout_ms=600000" \
            $([[ $PROTO == h2c ]] && echo --set http.http2=on) >"$RUN/magpied.out" 2>&1) &
        ;;
    nginx)
        sed -e "s|@WORKERS@|auto|; s|@PORT@|$port|g; s|@RUNDIR@|$RUN|g" \
            -e "s|worker_connections 4096;|worker_connections $((n + 256));|" \
            -e "s|keepalive_timeout 75s;|keepalive_timeout 600s;|" \
            -e "s|^daemon off;|daemon off;\nworker_rlimit_nofile $nofile;|" \
            -e "$([[ $PROTO == h2c ]] && echo "s|listen 127.0.0.1:$port |listen 127.0.0.1:$port http2 |")" \
            "$ROOT/loadtest/peers/nginx/nginx.conf.in" >"$RUN/nginx.conf"
        (ulimit -n "$nofile" && exec "$NGINX" -p "$RUN/" -c "$RUN/nginx.conf" \
            -e "$RUN/nginx-error.log") &
        ;;
    esac
    SERVER_PID=$!
    wait_port "$port" || die "$name did not listen on $port"
}

echo "| server | connections | RSS before (KiB) | RSS with (KiB) | RSS after (KiB) | per connection (KiB) | returned |"
echo "|---|---|---|---|---|---|---|"
for n in $COUNTS; do
    # Both sides need n descriptors: without CAP_SYS_RESOURCE the hard limit caps n.
    if ! (ulimit -n $((n + 512))) 2>/dev/null; then
        echo "| (all) | $n | skipped: ulimit -n $((n + 512)) not permitted (hard limit $(ulimit -Hn)) | | | | |"
        continue
    fi
    for name in $SERVERS; do
        port=$(free_port)
        start_server "$name" "$port" "$n"
        if [[ $PROTO == h2 ]]; then
            curl -sk --http2 -o /dev/null "https://127.0.0.1:$port/" || die "$name: GET / failed"
        else
            curl -s $([[ $PROTO == h2c ]] && echo --http2-prior-knowledge) -o /dev/null \
                "http://127.0.0.1:$port/" || die "$name: GET / failed"
        fi
        sleep 1
        before=$(rss_kib "$SERVER_PID")
        "$CLIENT" "$port" "$n" "$READY_TIMEOUT" $([[ $PROTO != http1 ]] && echo "$PROTO" "$H2_REQUESTS") \
            >"$RUN/client.out" 2>&1 &
        CLIENT_PID=$!
        for _ in $(seq $((READY_TIMEOUT * 10))); do
            grep -q '^ready' "$RUN/client.out" 2>/dev/null && break
            kill -0 "$CLIENT_PID" 2>/dev/null || die "$name: client failed: $(cat "$RUN/client.out")"
            sleep 0.1
        done
        grep -q '^ready' "$RUN/client.out" || die "$name: $n connections not ready in time"
        sleep "$SETTLE"
        with=$(rss_kib "$SERVER_PID")
        stop_pid "$CLIENT_PID"
        CLIENT_PID=
        sleep "$SETTLE"
        after=$(rss_kib "$SERVER_PID")
        stop_pid "$SERVER_PID"
        SERVER_PID=
        awk -v s="$name$([[ $PROTO != http1 ]] && echo " ($PROTO)")" -v n="$n" -v b="$before" -v w="$with" -v a="$after" 'BEGIN {
            per = (w - b) / n; ret = (w > b) ? 100 * (w - a) / (w - b) : 0;
            printf "| %s | %d | %d | %d | %d | %.2f | %.0f%% |\n", s, n, b, w, a, per, ret }'
    done
done
