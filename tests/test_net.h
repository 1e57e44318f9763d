/* Loopback client helpers shared by the suites that talk to real sockets (test_tcp.c,
 * tests/daemon/e2e/test_main.c). They assert, so include after <criterion/criterion.h>. */
#ifndef MP_TEST_NET_H
#define MP_TEST_NET_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A blocking TCP connection to 127.0.0.1:port, with Nagle off. */
static inline int test_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* All of p to the connection fd. A peer that has closed the connection fails the test with
 * the error (EPIPE, ECONNRESET) instead of killing it with SIGPIPE, which Criterion can only
 * report as a crash with no line, no error and no hint of which write it was. */
static inline void test_write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        cr_assert_gt(w, 0, "send of %zu bytes: %s", n, w < 0 ? strerror(errno) : "wrote 0");
        p += w;
        n -= (size_t)w;
    }
}

#endif
