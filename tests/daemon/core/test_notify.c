/* Tests of daemon/core/notify.c: the systemd notify datagrams. */
#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/notify.h"

/* A listening datagram socket: a path, or an abstract name when name starts with '@'. */
static int listener(const char *name)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(a.sun_path, name, n);
    if (name[0] == '@')
        a.sun_path[0] = '\0';
    else
        unlink(name);
    cr_assert_eq(
        bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)),
        0);
    return fd;
}

static void expect(int fd, const char *want)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 2000), 1, "no datagram");
    char buf[512];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    cr_assert_gt(n, 0);
    buf[n] = 0;
    cr_assert_str_eq(buf, want);
}

Test(notify, path_and_abstract_sockets, .timeout = 10)
{
    char path[64], abstract[64];
    snprintf(path, sizeof path, "/tmp/magpied-notify-%d", (int)getpid());
    snprintf(abstract, sizeof abstract, "@magpied-notify-%d", (int)getpid());
    int a = listener(path), b = listener(abstract);
    setenv("NOTIFY_SOCKET", path, 1);
    cr_assert_eq(md_notify("READY=1\nSTATUS=ok"), 0);
    expect(a, "READY=1\nSTATUS=ok");
    setenv("NOTIFY_SOCKET", abstract, 1);
    cr_assert_eq(md_notify("STOPPING=1"), 0);
    expect(b, "STOPPING=1");
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    cr_assert_eq(md_notify("READY=1"), -EINVAL);
    unsetenv("NOTIFY_SOCKET");
    cr_assert_eq(md_notify("READY=1"), 0, "no socket: nothing to do");
    close(a);
    close(b);
    unlink(path);
}

Test(notify, watchdog_usec_for_this_process_only)
{
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
    cr_assert_eq(md_notify_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "30000000", 1);
    cr_assert_eq(md_notify_watchdog_usec(), 30000000);
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    cr_assert_eq(md_notify_watchdog_usec(), 30000000);
    setenv("WATCHDOG_PID", "1", 1);
    cr_assert_eq(md_notify_watchdog_usec(), 0, "meant for another process");
}
