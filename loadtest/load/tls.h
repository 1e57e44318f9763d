/* tls.h: magpie-load's TLS client (OpenSSL 3) over memory BIOs: the connection task moves
 * the ciphertext with mp_tcp's polls, OpenSSL never touches the socket. One SSL_CTX for the
 * run, made by main before the tasks start; one SSL per connection. */
#ifndef LOADTEST_LOAD_TLS_H
#define LOADTEST_LOAD_TLS_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ld_tls_opts {
    const char *sni;    /* server name sent (NULL or "": none) */
    const char *cacert; /* verify the server's chain against this file; NULL: no verification */
    int version;        /* 0: TLS 1.2 and 1.3; TLS1_2_VERSION or TLS1_3_VERSION: that one only */
    bool resume;        /* offer each slot's last session (ticket) on its next connection */
} ld_tls_opts;

/* The run's context; 0, or -1 with the reason printed. slots: one saved session each. */
int ld_tls_init(const ld_tls_opts *o, unsigned slots);
void ld_tls_free(void);

/* A client SSL for connection slot `slot`, its session offered when resuming; NULL on failure. */
SSL *ld_tls_new(unsigned slot);

/* The ciphertext OpenSSL has written and not yet handed out, appended to *buf (grown as
 * needed); false when out of memory. */
bool ld_tls_take_out(SSL *ssl, char **buf, size_t *len, size_t *cap);

/* Ciphertext read from the socket, handed to OpenSSL; false when out of memory. */
bool ld_tls_put_in(SSL *ssl, const char *data, size_t len);

#endif
