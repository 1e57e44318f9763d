/* A test PKI made at test time with the openssl command, in a fresh mkdtemp folder (no
 * network): for the TLS suites (server/test_tls.c, e2e/test_tls.c, e2e/test_vhost.c,
 * e2e/test_http2.c). Include after criterion.h. Everything is made anew for each test except
 * the RSA key, whose making takes about a second (a test would spend most of its time there):
 * the first test makes it in PKI_RSA_KEY (by a rename, so tests running side by side never
 * see half a file) and the others copy it.
 *
 *   ca.pem ca.key            a test CA (ECDSA P-256)
 *   ec.pem ec.key            localhost and 127.0.0.1, ECDSA P-256, signed by the CA
 *   rsa.pem rsa.key          the same names, RSA 2048
 *   other.key                an ECDSA key that matches no certificate
 *   expired.pem              ec.key's, valid in 2020 only
 *   future.pem               ec.key's, valid from 2099
 */
#ifndef TESTS_DAEMON_TLS_PKI_H
#define TESTS_DAEMON_TLS_PKI_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PKI_DIR_MAX = 32 };
#define PKI_RSA_KEY "/tmp/magpied-test-rsa2048.key"

/* Makes the files above in a new folder; its path in dir. */
static inline void pki_make(char dir[PKI_DIR_MAX])
{
    snprintf(dir, PKI_DIR_MAX, "/tmp/magpied-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; exec 2>pki.log\n"
             "EC='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'\n"
             "openssl req -x509 $EC -keyout ca.key -out ca.pem -days 2 -subj /CN=magpie-test-ca\n"
             "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext\n"
             "openssl req $EC -keyout ec.key -out ec.csr -subj /CN=localhost\n"
             "K=" PKI_RSA_KEY "\n"
             "if [ -s $K ]; then cp $K rsa.key; else\n"
             "  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa.key\n"
             "  cp rsa.key $K.$$ && mv -f $K.$$ $K; fi\n"
             "openssl req -new -key rsa.key -out rsa.csr -subj /CN=localhost\n"
             "openssl x509 -req -in ec.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
             "-extfile ext -out ec.pem\n"
             "openssl x509 -req -in rsa.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
             "-extfile ext -out rsa.pem\n"
             "openssl genpkey -algorithm ec -pkeyopt ec_paramgen_curve:prime256v1 -out other.key\n"
             "touch index.txt; echo 1000 > serial\n"
             "printf '[ca]\\ndefault_ca = c\\n[c]\\ndatabase = index.txt\\nnew_certs_dir = .\\n"
             "serial = serial\\ndefault_md = sha256\\npolicy = p\\nunique_subject = no\\n"
             "[p]\\ncommonName = supplied\\n' > ca.cnf\n"
             "openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in ec.csr -notext "
             "-startdate 20200101000000Z -enddate 20200102000000Z -out expired.pem\n"
             "openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in ec.csr -notext "
             "-startdate 20990101000000Z -enddate 20991231000000Z -out future.pem\n",
             dir);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "cat '%.*s/pki.log' >&2", PKI_DIR_MAX, dir);
        (void)system(cmd);
    }
    cr_assert_eq(rc, 0, "making the test PKI failed");
}

/* Removes the folder pki_make() made. */
static inline void pki_remove(const char dir[PKI_DIR_MAX])
{
    char cmd[PKI_DIR_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%.*s'", PKI_DIR_MAX, dir);
    cr_assert_eq(system(cmd), 0);
}

#endif
