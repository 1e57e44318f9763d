/* Loopback client helpers shared by the suites that talk to real sockets (test_tcp.c,
 * tests/daemon/e2e/test_main.c), and the socket address of a numeric IPv4 or IPv6 text for the
 * suites of address rules (test_acl.c, test_ratelimit.c, test_real_ip.c). They assert, so
 * include after <criterion/criterion.h>. */
#ifndef MP_TEST_NET_H
#define MP_TEST_NET_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The socket address (port 0) of "192.0.2.1" or "2001:db8::1"; anything else fails the test. */
static inline struct sockaddr_storage test_addr(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &v4->sin_addr) == 1)
        v4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1)
        v6->sin6_family = AF_INET6;
    else
        cr_assert_fail("bad test address %s", text);
    return ss;
}

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
