/* The site the HTTP/2 end-to-end suites serve (test_http2.c, test_http2_conform.c). Include
 * after magpied_harness.h and tls_pki.h. */
#ifndef TESTS_DAEMON_E2E_H2_SITE_H
#define TESTS_DAEMON_E2E_H2_SITE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* Makes the PKI in dir (pki_make), the files www/files/small.txt, big.bin (1 MiB), 64k.bin and
 * f1.bin..f8.bin (9,001 bytes and up, 9,001 apart), body.bin (300,000 bytes: a request body),
 * and a configuration at conf: h2c on [http], h2 by ALPN on [https], two workers, and the
 * routes / (text "Hello, World!"), /echo (POST), /metrics, /healthz, /old (a redirect to
 * /new) and /files (static, from www); with access_log, the access log at dir/access.log.
 * extra: more sections, appended. */
static inline void h2_site(char *dir, char *conf, size_t conf_cap, bool access_log,
                           const char *extra)
{
    pki_make(dir);
    char cmd[PKI_DIR_MAX + 512];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir -p www/files && printf 'small file\\n' > www/files/small.txt && "
             "head -c 1048576 /dev/urandom > www/files/big.bin && "
             "head -c 65536 /dev/urandom > www/files/64k.bin && "
             "for i in 1 2 3 4 5 6 7 8; do head -c $((i * 9000 + i)) /dev/urandom "
             "> www/files/f$i.bin; done && "
             "head -c 300000 /dev/urandom > body.bin",
             dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(conf, conf_cap, "%s/magpied.conf", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "[http]\nlisten = 127.0.0.1:0\nhttp2 = on\n[echo]\nlisten =\n"
            "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/ec.pem\ncertificate_key = %s/ec.key\n"
            "[runtime]\nworkers = 2\n"
            "%s%s%s"
            "[route = /]\nhandler = text\nbody = Hello, World!\n"
            "[route = /echo]\nhandler = echo\nmethods = POST\n"
            "[route = /metrics]\nhandler = metrics\n"
            "[route = /healthz]\nhandler = health\n"
            "[route = /old]\nhandler = redirect\nlocation = /new\n"
            "[route /files]\nhandler = static\nroot = %s/www\n"
            "%s\n",
            dir, dir, access_log ? "[log]\naccess_log = " : "", access_log ? dir : "",
            access_log ? "/access.log\n" : "", dir, extra != NULL ? extra : "");
    fclose(f);
}

#endif
