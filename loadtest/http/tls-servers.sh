# shellcheck shell=bash disable=SC2034 # TLS_CMD is the caller's
# loadtest/http/tls-servers.sh: the TLS servers the TLS scripts measure, configured alike.
# Sourced (after lib.sh) by tls-compare.sh, tls-counts.sh and tls-instructions.sh, so that a
# figure from one script compares with another's: the same certificate shape, the same
# routes, the same peer settings.
#
#   tls_site DIR                 an ECDSA P-256 certificate for localhost and 127.0.0.1
#                                (DIR/cert.pem, DIR/key.pem, and DIR/haproxy.pem with both),
#                                and DIR/www/static/1k.bin
#   tls_server_conf NAME DIR PORT WORKERS CONNS
#                                writes NAME's configuration in DIR, listening with TLS on
#                                127.0.0.1:PORT with WORKERS workers (worker processes,
#                                threads) and room for CONNS connections, and sets TLS_CMD to
#                                the command that runs it (without any valgrind around it):
#       magpied   [https] on the certificate, the shipped TLS defaults (tickets on),
#                 [route = /] text "Hello, World!", [route /static] static files from DIR/www;
#                 MAGPIED_HTTPS_EXTRA: lines added to [https]; MAGPIED_ROUTES_EXTRA: routes
#                 added before the others (e.g. /metrics)
#       nginx     ssl_protocols TLSv1.2 TLSv1.3, ssl_session_tickets on, location = / return
#                 200 "Hello, World!", /static/ from the same files (open_file_cache on;
#                 sendfile is moot over TLS); NGINX_MASTER=off for one process (callgrind);
#                 NGINX_LISTEN_EXTRA: words added to its listen ("http2 ": h2 by ALPN)
#       haproxy   bind ... ssl crt (tickets on, its default), answering itself with
#                 http-request return: "Hello, World!" on /, /static/1k.bin's bytes from memory
#   wait_https PID PORT SECONDS LOG [CURL_MAX_TIME]
#                                waits until GET / over TLS answers "Hello, World!": 0; or
#                                prints why not (the process exited, with LOG's tail, or did
#                                not answer in time) and returns 1. The caller stops PID.
#
# Uses NGINX and HAPROXY (the binaries) and MAGPIED as the scripts set them.

tls_site() { # DIR
    local dir=$1
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout "$dir/key.pem" -out "$dir/cert.pem" -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null || return 1
    cat "$dir/cert.pem" "$dir/key.pem" >"$dir/haproxy.pem"
    mkdir -p "$dir/www/static"
    head -c 1024 /dev/urandom >"$dir/www/static/1k.bin"
}

tls_server_conf() { # NAME DIR PORT WORKERS CONNS
    local name=$1 dir=$2 port=$3 workers=$4 conns=$5
    case $name in
    magpied)
        cat >"$dir/magpied.conf" <<EOF
[http]
listen = 127.0.0.1:$(free_port)
[echo]
listen =
[https]
listen = 127.0.0.1:$port
certificate = $dir/cert.pem
certificate_key = $dir/key.pem
max_connections = $((conns + 100))
${MAGPIED_HTTPS_EXTRA:-}
[limits]
max_connections = $((conns + 100))
keepalive_timeout_ms = 600000
[runtime]
workers = $workers
[log]
access_log = off
${MAGPIED_ROUTES_EXTRA:-}
[route = /]
handler = text
body = Hello, World!
[route /static]
handler = static
root = $dir/www
EOF
        TLS_CMD=("$MAGPIED" -c "$dir/magpied.conf")
        ;;
    nginx)
        cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process ${NGINX_MASTER:-on};
worker_processes $workers;
worker_rlimit_nofile $((conns + 512));
pid $dir/nginx.pid;
error_log $dir/nginx-error.log warn;
events { worker_connections $((conns + 256)); }
http {
    access_log off;
    server_tokens off;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    server {
        listen 127.0.0.1:$port ssl ${NGINX_LISTEN_EXTRA:-}backlog=1024;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_tickets on;
        location = / { default_type text/plain; return 200 "Hello, World!"; }
        location /static/ { root $dir/www; open_file_cache max=1000 inactive=20s; }
        location / { return 404; }
    }
}
EOF
        TLS_CMD=("$NGINX" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/nginx-error.log")
        ;;
    haproxy)
        cat >"$dir/haproxy.cfg" <<EOF
global
    maxconn $((conns + 100))
    nbthread $workers
defaults
    mode http
    option http-keep-alive
    timeout client 600s
    timeout http-keep-alive 600s
    timeout http-request 30s
frontend fe
    bind 127.0.0.1:$port ssl crt $dir/haproxy.pem
    http-request return status 200 content-type text/plain string "Hello, World!" if { path / }
    http-request return status 200 content-type application/octet-stream file $dir/www/static/1k.bin if { path /static/1k.bin }
    http-request return status 404
EOF
        TLS_CMD=("$HAPROXY" -db -f "$dir/haproxy.cfg")
        ;;
    *)
        echo "tls-servers.sh: unknown server '$name' (known: magpied nginx haproxy)" >&2
        return 1
        ;;
    esac
}

wait_https() { # PID PORT SECONDS LOG [CURL_MAX_TIME]
    local pid=$1 port=$2 secs=$3 log=$4 max=${5:-1}
    local deadline=$((SECONDS + secs))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "the server exited during start-up:" >&2
            tail -20 "$log" >&2
            return 1
        fi
        [[ $(curl -sk --max-time "$max" "https://127.0.0.1:$port/" 2>/dev/null) != "Hello, World!" ]] ||
            return 0
        sleep 0.1
    done
    echo "the server did not answer GET / over TLS within ${secs}s:" >&2
    tail -20 "$log" >&2
    return 1
}
