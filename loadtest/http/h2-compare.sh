#!/usr/bin/env bash
# loadtest/http/h2-compare.sh: magpied against h2o and nginx over HTTP/2 under h2load.
#
# Each server on 127.0.0.1, two workers or threads (magpied's default on this 2-vCPU machine:
# one per vCPU), serving the same files, over h2c by prior knowledge and over TLS with one
# ECDSA P-256 certificate made here with openssl (ALPN h2). Scenarios, each DURATION seconds
# (h2load -D):
#   a  1 KiB file, h2load -c 64 -m 10
#   b  64 KiB file, h2load -c 16 -m 10
#   c  1 KiB file, h2load -c 1 -m 100
# Reported per run: req/s, the requests that succeeded, the server's CPU per request (utime +
# stime of every process of the server, from /proc/PID/stat, before and after) and h2load's
# (its user + system time: where h2load saturates its one thread, what a response costs the
# client decides req/s).
#
#   loadtest/http/h2-compare.sh [DURATION]      (default 10; MAGPIED=path, else build/magpied)
#
# SERVERS (default "magpied h2o nginx") and CELLS (default every transport:scenario, e.g.
# CELLS="tls:b") narrow a run.
#
# Prints a Markdown table and the ratios magpied / peer. Every process it starts it stops by
# its PID; scratch files go to a mktemp folder, removed at the end.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DURATION=${1:-10}
MAGPIED=${MAGPIED:-$ROOT/build/magpied}
CLK_TCK=$(getconf CLK_TCK)
PROG=h2-compare.sh
RUN=$(mktemp -d /tmp/h2-compare-XXXXXX)
chmod 755 "$RUN" # nginx's workers run as another user

log() { echo "$PROG: $*" >&2; }
die() {
    log "$*"
    exit 1
}
# shellcheck source=lib.sh
source "$HERE/lib.sh"

for tool in h2load h2o nginx openssl; do
    command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || die "$tool is not installed"
done
[[ -x $MAGPIED ]] || die "no magpied at $MAGPIED (make, or MAGPIED=path)"

cleanup() {
    stop_server
    rm -rf "$RUN"
}
trap cleanup EXIT

# The files and the certificate.
mkdir -p "$RUN/www"
head -c 1024 /dev/zero | tr '\0' 'a' >"$RUN/www/1k.txt"
head -c 65536 /dev/zero | tr '\0' 'b' >"$RUN/www/64k.txt"
chmod 644 "$RUN"/www/*
openssl ecparam -name prime256v1 -genkey -noout -out "$RUN/key.pem" 2>/dev/null
openssl req -new -x509 -key "$RUN/key.pem" -out "$RUN/cert.pem" -days 2 -subj /CN=localhost \
    2>/dev/null
chmod 644 "$RUN/key.pem"

H2C_PORT=
TLS_PORT=

start_magpied() {
    cat >"$RUN/magpied.conf" <<EOF
[http]
listen = 127.0.0.1:$H2C_PORT
http2 = on
[https]
listen = 127.0.0.1:$TLS_PORT
certificate = $RUN/cert.pem
certificate_key = $RUN/key.pem
[echo]
listen =
[runtime]
workers = 2
[route /]
handler = static
root = $RUN/www
EOF
    9>&- "$MAGPIED" -c "$RUN/magpied.conf" 2>"$RUN/magpied.err" &
    SRV_PID=$!
}

start_h2o() {
    cat >"$RUN/h2o.conf" <<EOF
num-threads: 2
error-log: $RUN/h2o.err
listen:
  host: 127.0.0.1
  port: $H2C_PORT
listen:
  host: 127.0.0.1
  port: $TLS_PORT
  ssl:
    certificate-file: $RUN/cert.pem
    key-file: $RUN/key.pem
hosts:
  default:
    paths:
      /:
        file.dir: $RUN/www
EOF
    9>&- h2o -c "$RUN/h2o.conf" >"$RUN/h2o.out" 2>&1 &
    SRV_PID=$!
}

start_nginx() {
    mkdir -p "$RUN/nginx"
    cat >"$RUN/nginx.conf" <<EOF
worker_processes 2;
daemon off;
pid $RUN/nginx/nginx.pid;
error_log $RUN/nginx/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $RUN/nginx/body;
    proxy_temp_path $RUN/nginx/proxy;
    fastcgi_temp_path $RUN/nginx/fastcgi;
    uwsgi_temp_path $RUN/nginx/uwsgi;
    scgi_temp_path $RUN/nginx/scgi;
    default_type text/plain;
    # nginx closes an HTTP/2 connection after 1000 requests by default (keepalive_requests),
    # and h2load does not reconnect: as unlimited as the others.
    keepalive_requests 100000000;
    http2_max_concurrent_streams 128;
    server {
        listen 127.0.0.1:$H2C_PORT http2;
        root $RUN/www;
    }
    server {
        listen 127.0.0.1:$TLS_PORT ssl http2;
        ssl_certificate $RUN/cert.pem;
        ssl_certificate_key $RUN/key.pem;
        root $RUN/www;
    }
}
EOF
    9>&- /usr/sbin/nginx -c "$RUN/nginx.conf" -e "$RUN/nginx/error.log" 2>"$RUN/nginx.err" &
    SRV_PID=$!
}

wait_up() { # the server answers over h2c within 5 s
    local i
    for ((i = 0; i < 50; i++)); do
        if curl -s -o /dev/null --max-time 1 --http2-prior-knowledge \
            "http://127.0.0.1:$H2C_PORT/1k.txt"; then
            return 0
        fi
        sleep 0.1
    done
    die "$1 did not come up (see $RUN)"
}

# One h2load run against SRV_PID: prints "req/s succeeded cpu_us_per_request
# client_cpu_us_per_request".
measure() { # URL C M
    local url=$1 c=$2 m=$3 t0 t1 out rps ok client TIMEFORMAT='%U %S'
    t0=$(cpu_ticks "$SRV_PID")
    out=$({ time 9>&- h2load -D "$DURATION" -c "$c" -m "$m" "$url" 2>&1; } 2>&1) || true
    t1=$(cpu_ticks "$SRV_PID")
    rps=$(awk '/^finished in/ {gsub(",", "", $4); print $4}' <<<"$out")
    ok=$(awk '/^requests:/ {print $8}' <<<"$out")
    client=$(tail -1 <<<"$out" | awk '{print $1 + $2}')
    [[ -n $rps && -n $ok && $ok -gt 0 ]] || {
        log "h2load failed on $url: $(tail -3 <<<"$out" | tr '\n' ' ')"
        echo "0 0 0 0"
        return
    }
    echo "$rps $ok $(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$ok" \
        'BEGIN {printf "%.2f", d * 1e6 / hz / n}') $(awk -v t="$client" -v n="$ok" \
        'BEGIN {printf "%.2f", t * 1e6 / n}')"
}

declare -A RPS CPU
read -r -a SERVERS <<<"${SERVERS:-magpied h2o nginx}"
CELLS=${CELLS:-h2c:a h2c:b h2c:c tls:a tls:b tls:c}
SCEN=(a b c)
declare -A PATH_OF=([a]=/1k.txt [b]=/64k.txt [c]=/1k.txt)
declare -A C_OF=([a]=64 [b]=16 [c]=1)
declare -A M_OF=([a]=10 [b]=10 [c]=100)

log "$(date -u '+%F %T') UTC; load average $(cut -d' ' -f1-3 /proc/loadavg); ${DURATION}s per run"
for srv in "${SERVERS[@]}"; do
    H2C_PORT=$(free_port)
    TLS_PORT=$(free_port)
    "start_$srv"
    wait_up "$srv"
    # A short warm-up (caches, the TLS session machinery) before the runs that count.
    9>&- h2load -D 2 -c 16 -m 10 "http://127.0.0.1:$H2C_PORT/1k.txt" >/dev/null 2>&1 || true
    for proto in h2c tls; do
        for s in "${SCEN[@]}"; do
            [[ " $CELLS " == *" $proto:$s "* ]] || continue
            if [[ $proto == h2c ]]; then
                url="http://127.0.0.1:$H2C_PORT${PATH_OF[$s]}"
            else
                url="https://127.0.0.1:$TLS_PORT${PATH_OF[$s]}"
            fi
            read -r rps ok cpu client < <(measure "$url" "${C_OF[$s]}" "${M_OF[$s]}")
            RPS[$srv,$proto,$s]=$rps
            CPU[$srv,$proto,$s]=$cpu
            log "$srv $proto $s: $rps req/s, $ok succeeded, $cpu us CPU/request" \
                "(h2load $client)"
        done
    done
    stop_server
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }

echo "| transport | scenario | magpied req/s | h2o req/s | nginx req/s | magpied/h2o | magpied/nginx | CPU µs/req magpied | h2o | nginx |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for proto in h2c tls; do
    for s in "${SCEN[@]}"; do
        [[ " $CELLS " == *" $proto:$s "* ]] || continue
        m=${RPS[magpied,$proto,$s]:-0}
        h=${RPS[h2o,$proto,$s]:-0}
        n=${RPS[nginx,$proto,$s]:-0}
        echo "| $proto | $s (${PATH_OF[$s]}, -c${C_OF[$s]} -m${M_OF[$s]}) | $m | $h | $n |" \
            "$(ratio "$m" "$h") | $(ratio "$m" "$n") | ${CPU[magpied,$proto,$s]:--} |" \
            "${CPU[h2o,$proto,$s]:--} | ${CPU[nginx,$proto,$s]:--} |"
    done
done
