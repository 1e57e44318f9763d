/* Tests for daemon/core/activation.c (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES), and magpied started
 * by systemd-socket-activate the way systemd starts it from magpied.socket.
 *
 * The parsing tests run md_activation_fds() in a forked child: the descriptors it reads start
 * at 3, where Criterion keeps its own, so the child moves test sockets there and reports back
 * through a pipe placed high. */
#include <criterion/criterion.h>

#include <fcntl.h>

#include "core/activation.h"
#include "daemon/magpied_harness.h"

TestSuite(activation, .fini = kill_leftover, .timeout = 60);

enum { REPORT_FD = 100 };

static int tcp_listener(bool listening)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    if (listening)
        cr_assert_eq(listen(fd, 8), 0);
    return fd;
}

struct outcome {
    int rc;
    int http, echo; /* descriptor numbers, or -1 */
    int n;          /* sockets taken */
    int second;     /* the second socket's descriptor, or -1 */
    char second_name[MD_ACTIVATION_NAME_MAX];
    bool env_left; /* any LISTEN_ variable still set afterwards */
    char msg[MD_ERROR_MAX];
};

/* In a child: sockets socks[0..n) become fds 3.., the variables are set (pid_delta is added
 * to the child's pid for LISTEN_PID; names NULL leaves LISTEN_FDNAMES unset), and
 * md_activation_fds() runs. */
static struct outcome activate(const int *socks, int n, int pid_delta, const char *names)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(p[1], REPORT_FD);
        int moved[8];
        for (int i = 0; i < n; i++)
            moved[i] = fcntl(socks[i], F_DUPFD, 200); /* out of the way of 3.. first */
        for (int i = 0; i < n; i++)
            dup2(moved[i], 3 + i);
        char num[32];
        snprintf(num, sizeof num, "%d", (int)getpid() + pid_delta);
        setenv("LISTEN_PID", num, 1);
        snprintf(num, sizeof num, "%d", n);
        setenv("LISTEN_FDS", num, 1);
        if (names != NULL)
            setenv("LISTEN_FDNAMES", names, 1);
        else
            unsetenv("LISTEN_FDNAMES");
        md_activated a;
        md_error err = {{0}};
        struct outcome o = {.rc = md_activation_fds(&a, &err)};
        o.http = md_activation_fd(&a, "http");
        o.echo = md_activation_fd(&a, "echo");
        o.n = a.n;
        o.second = a.n > 1 ? a.s[1].fd : -1;
        if (a.n > 1)
            memcpy(o.second_name, a.s[1].name, sizeof o.second_name);
        o.env_left = getenv("LISTEN_PID") || getenv("LISTEN_FDS") || getenv("LISTEN_FDNAMES");
        memcpy(o.msg, err.msg, sizeof o.msg);
        _exit(write(REPORT_FD, &o, sizeof o) == (ssize_t)sizeof o ? 0 : 1);
    }
    close(p[1]);
    struct outcome o;
    cr_assert_eq(read(p[0], &o, sizeof o), (ssize_t)sizeof o);
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return o;
}

Test(activation, named_sockets_in_any_order)
{
    int s[2] = {tcp_listener(true), tcp_listener(true)};
    struct outcome o = activate(s, 2, 0, "echo:http");
    cr_assert_eq(o.rc, 0, "%s", o.msg);
    cr_assert_eq(o.echo, 3);
    cr_assert_eq(o.http, 4);
    cr_assert_not(o.env_left, "the variables are removed");
    close(s[0]);
    close(s[1]);
}

Test(activation, unnamed_sockets_are_http_then_echo)
{
    int s[2] = {tcp_listener(true), tcp_listener(true)};
    struct outcome o = activate(s, 1, 0, NULL);
    cr_assert_eq(o.rc, 0, "%s", o.msg);
    cr_assert_eq(o.http, 3);
    cr_assert_eq(o.echo, -1);
    o = activate(s, 2, 0, "unknown:unknown");
    cr_assert_eq(o.rc, 0, "%s", o.msg);
    cr_assert_eq(o.http, 3);
    cr_assert_eq(o.echo, 4);
    close(s[0]);
    close(s[1]);
}

/* One listener on IPv4 and IPv6 is two sockets of one name; a [listener NAME] is named by its
 * NAME (the server checks that some listener has it). */
Test(activation, several_sockets_per_name_and_listener_names)
{
    int s[2] = {tcp_listener(true), tcp_listener(true)};
    struct outcome o = activate(s, 2, 0, "http:http");
    cr_assert_eq(o.rc, 0, "%s", o.msg);
    cr_assert_eq(o.n, 2);
    cr_assert_eq(o.http, 3);
    cr_assert_eq(o.second, 4);
    cr_assert_str_eq(o.second_name, "http");
    o = activate(s, 2, 0, "http:public-tls");
    cr_assert_eq(o.rc, 0, "%s", o.msg);
    cr_assert_str_eq(o.second_name, "public-tls");
    close(s[0]);
    close(s[1]);
}

Test(activation, another_process_s_variables_are_ignored)
{
    int s = tcp_listener(true);
    struct outcome o = activate(&s, 1, 1, "http");
    cr_assert_eq(o.rc, 0);
    cr_assert_eq(o.http, -1);
    cr_assert_eq(o.echo, -1);
    close(s);
}

Test(activation, bad_names_and_sockets_are_errors)
{
    int s[2] = {tcp_listener(true), tcp_listener(true)};
    struct outcome o = activate(s, 2, 0, "http:me.trics");
    cr_assert_eq(o.rc, -EINVAL);
    cr_assert(strstr(o.msg, "\"me.trics\""), "%s", o.msg);
    cr_assert_eq(o.http, -1, "nothing is half-taken");
    cr_assert_eq(o.n, 0);
    int bound_only = tcp_listener(false);
    o = activate(&bound_only, 1, 0, "http");
    cr_assert_eq(o.rc, -EINVAL);
    cr_assert(strstr(o.msg, "not a listening TCP socket"), "%s", o.msg);
    close(s[0]);
    close(s[1]);
    close(bound_only);
}

/* magpied under systemd-socket-activate: it starts on the first connection, takes the passed
 * sockets by name (a [listener NAME]'s by its NAME), and serves that connection from the
 * backlog. The file's addresses are ignored for passed sockets. */
Test(activation, magpied_serves_sockets_from_systemd_socket_activate)
{
    char conf[] = "/tmp/magpied-activation-XXXXXX";
    int cfd = mkstemp(conf);
    cr_assert_geq(cfd, 0);
    const char *text = "[http]\nlisten = 127.0.0.1:1\n[echo]\nlisten = 127.0.0.1:2\n"
                       "[listener admin]\nlisten = 127.0.0.1:3\n";
    cr_assert_eq(write(cfd, text, strlen(text)), (ssize_t)strlen(text));
    close(cfd);
    int http = free_port(), echo = free_port(), admin = free_port();
    char exe[PATH_MAX + 32], l1[64], l2[64], l3[64];
    magpied_path(exe, sizeof exe);
    snprintf(l1, sizeof l1, "127.0.0.1:%d", http);
    snprintf(l2, sizeof l2, "127.0.0.1:%d", echo);
    snprintf(l3, sizeof l3, "127.0.0.1:%d", admin);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2); /* its chatter ("Listening on ...") */
        execlp("systemd-socket-activate", "systemd-socket-activate", "-l", l1, "-l", l2, "-l", l3,
               "--fdname=http:echo:admin", exe, "-c", conf, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    running = pid; /* it execs magpied in place */
    /* The first connection starts it; connect until systemd-socket-activate listens. */
    int fd = -1;
    for (int i = 0; i < 250 && fd < 0; i++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)http),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            fd = -1;
            usleep(20000);
        }
    }
    cr_assert_geq(fd, 0, "systemd-socket-activate did not listen");
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    char resp[4096];
    read_some(fd, resp, sizeof resp, NULL, 0);
    cr_assert_eq(strncmp(resp, "HTTP/1.1 200", 12), 0, "got:\n%s", resp);
    close(fd);
    FILE *out = fdopen(p[0], "r");
    char line[256], want[256];
    cr_assert_not_null(fgets(line, sizeof line, out));
    snprintf(want, sizeof want, "listening http=%s echo=%s admin=%s\n", l1, l2, l3);
    cr_assert_str_eq(line, want);
    fd = test_connect(admin);
    test_write_all(fd, req, strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    cr_assert_eq(strncmp(resp, "HTTP/1.1 200", 12), 0, "[listener admin] got:\n%s", resp);
    close(fd);
    fd = test_connect(echo);
    test_write_all(fd, "hello", 5);
    cr_assert_eq(read_some(fd, resp, sizeof resp, "hello", 1), 5);
    close(fd);
    kill(pid, SIGTERM);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    running = -1;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    fclose(out);
    unlink(conf);
}
