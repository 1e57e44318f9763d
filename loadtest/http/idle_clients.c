/* idle_clients: open N keep-alive connections to 127.0.0.1:PORT, send one GET / on each, read
 * its response, and keep them all open, idle, until SIGTERM (the kernel closes them as the
 * process ends) or HOLD seconds pass. For loadtest/http/idle-memory.sh.
 *
 *   idle_clients PORT N [HOLD_SECONDS [tls|h2c|h2 [REQUESTS]]]
 *                                     prints "ready N" once every response is in
 *
 * With "tls" each connection first runs a TLS handshake (OpenSSL, no verification, TLS 1.2
 * or 1.3 as the server picks) and sends its GET over it; the sessions stay open and idle as
 * the plain ones do. For loadtest/http/tls-compare.sh.
 *
 * With "h2c" each connection speaks HTTP/2 with prior knowledge: the preface and an empty
 * SETTINGS frame, the server's SETTINGS acknowledged, one GET / on stream 1 (HPACK from the
 * static table, :authority a literal) read to its END_STREAM, then idle as the others: an
 * HTTP/2 connection a browser keeps open after a page. REQUESTS (1..100, default 1): that many
 * GETs at once, on streams 1, 3, 5, ..., all read to their ends before the connection idles: a
 * page of many parts. With "h2" the same over TLS (ALPN h2, :scheme https), as a browser's
 * HTTP/2. For loadtest/http/idle-memory.sh.
 *
 * Loopback only. More than 20000 connections come from 127.0.0.2, 127.0.0.3, ... (with
 * IP_BIND_ADDRESS_NO_PORT), so that the ephemeral port range of one source address does not
 * run out. Raises its own RLIMIT_NOFILE to fit N (as root, also the hard limit).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

enum { PER_SOURCE = 20000 };

static int open_one(int port, int i)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (uint32_t)(i / PER_SOURCE));
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
        close(fd);
        return -1;
    }
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Read one response to GET /: the head and Content-Length bytes of body. 0 or -1. */
static int read_response(int fd, SSL *ssl)
{
    char buf[4096];
    size_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if ((!ssl || !SSL_pending(ssl)) && poll(&p, 1, 10000) != 1)
            return -1;
        ssize_t n = ssl ? SSL_read(ssl, buf + got, (int)(sizeof buf - 1 - got))
                        : read(fd, buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        buf[got] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (end == NULL)
            continue;
        const char *cl = strcasestr(buf, "\r\ncontent-length:");
        size_t body = cl ? strtoul(cl + 17, NULL, 10) : 0;
        if (got >= (size_t)(end + 4 - buf) + body)
            return 0;
    }
}

/* HTTP/2 with prior knowledge: the preface, SETTINGS, and GET / on stream 1 (:method GET,
 * :scheme http, :path / from the static table, :authority 127.0.0.1 without indexing). */
static const char h2_hello[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                               "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                               "\x00\x00\x0e\x01\x05\x00\x00\x00\x01"
                               "\x82\x86\x84\x01\x09"
                               "127.0.0.1";
static const char h2_settings_ack[] = "\x00\x00\x00\x04\x01\x00\x00\x00\x00";
/* The same GET on another stream: HEADERS (END_STREAM, END_HEADERS), its id in bytes 5-8. */
enum { H2_GET_LEN = 9 + 14, H2_MAX_REQUESTS = 100 };

/* The GETs after stream 1's: streams 3, 5, ... up to the requests'th, into w. Their length. */
static size_t h2_more_gets(char *w, const char *hello, int requests)
{
    const char *get = hello + 24 + 9; /* stream 1's HEADERS */
    size_t n = 0;
    for (int i = 1; i < requests; i++, n += H2_GET_LEN) {
        unsigned id = 2u * (unsigned)i + 1;
        memcpy(w + n, get, H2_GET_LEN);
        w[n + 5] = (char)(id >> 24);
        w[n + 6] = (char)(id >> 16);
        w[n + 7] = (char)(id >> 8);
        w[n + 8] = (char)id;
    }
    return n;
}

/* Bytes to the connection, through TLS when ssl. */
static bool put_all(int fd, SSL *ssl, const void *p, size_t n)
{
    return ssl ? SSL_write(ssl, p, (int)n) == (int)n : write(fd, p, n) == (ssize_t)n;
}

/* Reads frames until `requests` streams ended, acknowledging the server's SETTINGS. 0 or -1. */
static int h2_read_response(int fd, SSL *ssl, int requests)
{
    int ended = 0;
    unsigned char buf[16384];
    size_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if ((!ssl || !SSL_pending(ssl)) && poll(&p, 1, 10000) != 1)
            return -1;
        ssize_t n = ssl ? SSL_read(ssl, buf + got, (int)(sizeof buf - got))
                        : read(fd, buf + got, sizeof buf - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
        size_t at = 0;
        while (got - at >= 9) {
            size_t len = (size_t)buf[at] << 16 | (size_t)buf[at + 1] << 8 | buf[at + 2];
            unsigned type = buf[at + 3], flags = buf[at + 4];
            unsigned sid = ((unsigned)buf[at + 5] & 0x7f) << 24 | (unsigned)buf[at + 6] << 16 |
                           (unsigned)buf[at + 7] << 8 | buf[at + 8];
            if (len > sizeof buf - 9)
                return -1;
            if (got - at < 9 + len)
                break;
            if (type == 4 && !(flags & 1) &&
                !put_all(fd, ssl, h2_settings_ack, sizeof h2_settings_ack - 1))
                return -1;
            if (type == 7) /* GOAWAY */
                return -1;
            if (sid % 2 == 1 && (type == 0 || type == 1) && (flags & 1) && ++ended == requests)
                return 0;
            at += 9 + len;
        }
        memmove(buf, buf + at, got - at);
        got -= at;
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT N [HOLD_SECONDS [tls|h2c|h2 [REQUESTS]]]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    int hold = argc > 3 ? atoi(argv[3]) : 600;
    SSL_CTX *ctx = NULL;
    bool h2tls = argc > 4 && strcmp(argv[4], "h2") == 0;
    bool h2c = (argc > 4 && strcmp(argv[4], "h2c") == 0) || h2tls;
    int requests = h2c && argc > 5 ? atoi(argv[5]) : 1;
    if (requests < 1 || requests > H2_MAX_REQUESTS) {
        fprintf(stderr, "idle_clients: REQUESTS is 1..%d\n", H2_MAX_REQUESTS);
        return 2;
    }
    static char hello[sizeof h2_hello], more[H2_MAX_REQUESTS * H2_GET_LEN];
    memcpy(hello, h2_hello, sizeof h2_hello);
    if (h2tls)
        hello[24 + 9 + 9 + 1] = (char)0x87; /* :scheme https, not http */
    size_t more_len = h2_more_gets(more, hello, requests);
    if (argc > 4 && (strcmp(argv[4], "tls") == 0 || strcmp(argv[4], "h2") == 0)) {
        ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx)
            return 1;
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        if (strcmp(argv[4], "h2") == 0 &&
            SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x02h2", 3) != 0)
            return 1;
        /* As a browser's idle tab: the client's own buffers are not what is measured. */
        SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    }
    struct rlimit rl = {.rlim_cur = (rlim_t)n + 64, .rlim_max = (rlim_t)n + 64};
    /* Only as far as needed: raising the hard limit needs CAP_SYS_RESOURCE. */
    struct rlimit old;
    getrlimit(RLIMIT_NOFILE, &old);
    if (old.rlim_max > rl.rlim_max)
        rl.rlim_max = old.rlim_max;
    if (old.rlim_cur < rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "idle_clients: RLIMIT_NOFILE %d: %s\n", n + 64, strerror(errno));
        return 1;
    }
    int *fds = calloc((size_t)n, sizeof *fds);
    SSL **ssls = calloc((size_t)n, sizeof *ssls);
    if (!fds || !ssls)
        return 1;
    static const char req[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    /* In batches: connect and send a batch, then read its responses. */
    enum { BATCH = 500 };
    for (int at = 0; at < n; at += BATCH) {
        int end = at + BATCH < n ? at + BATCH : n;
        for (int i = at; i < end; i++) {
            fds[i] = open_one(port, i);
            if (ctx && fds[i] >= 0) { /* a blocking handshake: the server answers at once */
                if (!(ssls[i] = SSL_new(ctx)) || !SSL_set_fd(ssls[i], fds[i]) ||
                    SSL_connect(ssls[i]) != 1) {
                    fprintf(stderr, "idle_clients: connection %d: TLS handshake failed\n", i);
                    return 1;
                }
                const unsigned char *alpn;
                unsigned alpn_len;
                SSL_get0_alpn_selected(ssls[i], &alpn, &alpn_len);
                if (h2tls && (alpn_len != 2 || memcmp(alpn, "h2", 2) != 0)) {
                    fprintf(stderr, "idle_clients: connection %d: no h2 by ALPN\n", i);
                    return 1;
                }
            }
            if (h2c && fds[i] >= 0) {
                if (!put_all(fds[i], ssls[i], hello, sizeof hello - 1) ||
                    (more_len != 0 && !put_all(fds[i], ssls[i], more, more_len))) {
                    fprintf(stderr, "idle_clients: connection %d: %s\n", i, strerror(errno));
                    return 1;
                }
                continue;
            }
            if (fds[i] < 0 ||
                (ssls[i] ? SSL_write(ssls[i], req, (int)sizeof req - 1)
                         : write(fds[i], req, sizeof req - 1)) != (ssize_t)(sizeof req - 1)) {
                fprintf(stderr, "idle_clients: connection %d: %s\n", i, strerror(errno));
                return 1;
            }
        }
        for (int i = at; i < end; i++)
            if ((h2c ? h2_read_response(fds[i], ssls[i], requests)
                     : read_response(fds[i], ssls[i])) != 0) {
                fprintf(stderr, "idle_clients: no response on connection %d\n", i);
                return 1;
            }
    }
    printf("ready %d\n", n);
    fflush(stdout);
    /* Hold them until SIGTERM ends the process, or at most `hold` seconds. */
    for (time_t until = time(NULL) + hold; time(NULL) < until;)
        sleep(1);
    for (int i = 0; i < n; i++) {
        SSL_free(ssls[i]);
        close(fds[i]);
    }
    free(ssls);
    free(fds);
    SSL_CTX_free(ctx);
    return 0;
}
