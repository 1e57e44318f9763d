/* Loopback client helpers shared by the suites that talk to real sockets (test_tcp.c,
 * tests/daemon/e2e/test_main.c). They assert, so include after <criterion/criterion.h>. */
#ifndef MP_TEST_NET_H
#define MP_TEST_NET_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

static inline void test_write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        cr_assert_gt(w, 0);
        p += w;
        n -= (size_t)w;
    }
}

#endif
