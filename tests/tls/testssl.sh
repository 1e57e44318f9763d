#!/usr/bin/env bash
# tests/tls/testssl.sh (`make testssl`): testssl.sh, Debian's package, against magpied's [https]
# listener as config/magpied-tls.conf ships it, with only what a deployment changes set on the
# command line (the certificate pairs, the addresses). It fails on any finding rated HIGH or
# CRITICAL, and prints every finding above OK and INFO so that daemon/README.md can say what it
# reports; the whole report is left in build/testssl/.
#
#   tests/tls/testssl.sh [MAGPIED]         default build/release/magpied
#
# The certificates come from a test CA made here (ECDSA P-256 and RSA 2048 leaves for
# localhost and 127.0.0.1, a year's validity, a CRL distribution point as a public CA's have),
# handed to testssl with --add-ca, so that the chain of trust is judged as a client that
# trusts the CA would judge it. Not part of
# `make test`: a run takes two to four minutes.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MAGPIED=${1:-$ROOT/build/release/magpied}
TESTSSL=${TESTSSL:-$(command -v testssl || command -v testssl.sh || true)}
die() { printf 'testssl.sh: %s\n' "$*" >&2; exit 1; }
[[ -x $MAGPIED ]] || die "no $MAGPIED (make first)"
[[ -n $TESTSSL ]] || die "testssl not found (apt-get install testssl.sh)"

WORK=$(mktemp -d /tmp/magpied-testssl.XXXXXX)
PID=
cleanup() {
    if [[ -n $PID ]]; then
        kill "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

cd "$WORK"
san="subjectAltName=DNS:localhost,IP:127.0.0.1"
# Where a public CA's certificate says its revocation list is (testssl rates a certificate
# without one HIGH); nothing is served there, and testssl fetches nothing without --phone-out.
crl="crlDistributionPoints=URI:http://127.0.0.1/magpied-test-ca.crl"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -keyout ca.key -out ca.pem -subj "/CN=magpied testssl CA" 2>/dev/null
leaf() { # NAME KEYARGS...
    local name=$1
    shift
    openssl req -newkey "$@" -nodes -keyout "$name.key" -out "$name.csr" -subj /CN=localhost \
        2>/dev/null
    openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
        -extfile <(printf '%s\nextendedKeyUsage=serverAuth\n%s\n' "$san" "$crl") -out "$name.crt" \
        2>/dev/null
    cat "$name.crt" ca.pem >"$name.pem" # the chain: leaf first
}
leaf ec ec -pkeyopt ec_paramgen_curve:P-256
leaf rsa rsa:2048

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
HTTPS=$(free_port)
HTTP=$(free_port)
"$MAGPIED" -c "$ROOT/config/magpied-tls.conf" \
    --set "https.listen=127.0.0.1:$HTTPS" --set "http.listen=127.0.0.1:$HTTP" \
    --set "https.certificate=$WORK/ec.pem" --set "https.certificate_key=$WORK/ec.key" \
    --set "https.certificate2=$WORK/rsa.pem" --set "https.certificate_key2=$WORK/rsa.key" \
    >magpied.log 2>&1 &
PID=$!
for _ in $(seq 100); do
    curl -fsS --cacert ca.pem -o /dev/null "https://localhost:$HTTPS/" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || { cat magpied.log >&2; die "magpied did not start"; }
    sleep 0.1
done

version=$(dpkg-query -W -f='${Version}' testssl.sh 2>/dev/null || echo '?')
echo "testssl.sh $version; $(openssl version)"
# --ip: the name localhost is checked against the certificate, the address is where it goes.
"$TESTSSL" --quiet --color 0 --warnings batch --add-ca "$WORK/ca.pem" --jsonfile "$WORK/out.json" \
    --ip 127.0.0.1 "localhost:$HTTPS" >testssl.log 2>&1 || true
[[ -s out.json ]] || { tail -20 testssl.log >&2; die "testssl wrote no findings"; }
# The whole report, kept for a reader: build/testssl/ (testssl.log and its JSON).
mkdir -p "$ROOT/build/testssl"
cp testssl.log out.json "$ROOT/build/testssl/"
kill -0 "$PID" 2>/dev/null || die "magpied exited during the scan"

/usr/bin/python3 - out.json <<'PY'
import json, sys
findings = json.load(open(sys.argv[1]))
order = ["CRITICAL", "HIGH", "MEDIUM", "LOW", "WARN"]
shown = [f for f in findings if f.get("severity") in order]
shown.sort(key=lambda f: order.index(f["severity"]))
for f in shown:
    print(f'{f["severity"]:8} {f["id"]}: {f["finding"]}')
bad = [f for f in shown if f["severity"] in ("CRITICAL", "HIGH")]
print(f"{len(findings)} findings; {len(bad)} rated HIGH or CRITICAL")
sys.exit(1 if bad else 0)
PY
