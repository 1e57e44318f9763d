/* Starting the built magpied from a test, and talking to it (shared by the integration
 * suites under tests/daemon/). Include once per test binary, after criterion.h. */
#ifndef TESTS_DAEMON_MAGPIED_HARNESS_H
#define TESTS_DAEMON_MAGPIED_HARNESS_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_net.h"
#include "test_util.h"

typedef struct daemon_proc {
    pid_t pid;
    int http, echo;
    int https; /* 0 when [https] is off */
    FILE *out;
    const char *err_path; /* its stderr, when redirected */
    char line[1024];      /* its listening line */
} daemon_proc;

/* A daemon that exited badly (sanitizers exit non-zero after a report): show what it said. */
static inline int exit_code(const daemon_proc *d, int status)
{
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && d->err_path != NULL) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "cat '%s' >&2", d->err_path);
        if (system(cmd) != 0)
            fprintf(stderr, "(no %s)\n", d->err_path);
    }
    return code;
}

/* The daemon of the running test, killed by the suite's fini if an assertion ended the test
 * before it stopped the daemon itself. */
static pid_t running = -1;

static inline void kill_leftover(void)
{
    if (running > 0) {
        kill(running, SIGKILL);
        waitpid(running, NULL, 0);
        running = -1;
    }
}

/* A suite's own folder (its configurations, roots and logs), from a suite's .init: name it
 * /tmp/magpied-<name>-XXXXXX. harness_dir_remove, from the suite's .fini, first kills a daemon
 * that an assertion left running. */
static inline void harness_dir_make(char *dir, size_t len, const char *name)
{
    snprintf(dir, len, "/tmp/magpied-%s-XXXXXX", name);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

static inline void harness_dir_remove(const char *dir)
{
    kill_leftover();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (dir[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* dir/name, in one of 8 static buffers (a call may hold a few at once). */
static inline const char *harness_path(const char *dir, const char *name)
{
    static char paths[8][PATH_MAX];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

/* text written to path whole: to path.new, then renamed over path (as an editor or a
 * deployment would: magpied, reloading, never reads half of it). */
static inline void harness_write_file(const char *path, const char *text)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f, "%s", tmp);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0, "%s", tmp);
    cr_assert_eq(rename(tmp, path), 0, "%s", path);
}

/* A file's bytes, whole and NUL-terminated, in a buffer to free; *len its length. */
static inline char *harness_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n, "%s", path);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* A shell command, printf-formatted, that must succeed. */
__attribute__((format(printf, 1, 2))) static inline void harness_sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* build/<variant>/tests/<folders>/test_x -> build/<variant>/magpied, whatever the folders
 * (the daemon's suites, and others that run magpied: tests/loadtest/) */
static inline void magpied_path(char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert_gt(n, 0);
    self[n] = 0;
    char *at = strstr(self, "/tests/");
    cr_assert_not_null(at, "%s is not under a build's tests/", self);
    *at = 0;
    snprintf(buf, len, "%s/magpied", self);
}

/* Start magpied: on config/magpied.conf with ephemeral ports and two workers when conf is NULL,
 * else on conf alone; then extra arguments. Its stderr goes to err_path when given. Returns
 * once it printed its listening line (d.echo is 0 when echo is off). */
static inline daemon_proc start_with(const char *conf, const char *const *extra,
                                     const char *err_path)
{
    char exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    const char *argv[40] = {exe, "-c", conf ? conf : "config/magpied.conf"};
    int argc = 3;
    if (conf == NULL) {
        static const char *const ephemeral[] = {"--set", "http.listen=127.0.0.1:0",
                                                "--set", "echo.listen=127.0.0.1:0",
                                                "--set", "runtime.workers=2"};
        for (size_t i = 0; i < sizeof ephemeral / sizeof ephemeral[0]; i++)
            argv[argc++] = ephemeral[i];
    }
    for (int i = 0; extra && extra[i] && argc < 39; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        if (err_path != NULL) {
            FILE *e = fopen(err_path, "a");
            if (e == NULL)
                _exit(126);
            dup2(fileno(e), 2);
        }
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    running = pid;
    daemon_proc d = {.pid = pid, .out = fdopen(p[0], "r"), .err_path = err_path};
    char *line = d.line;
    cr_assert_not_null(fgets(line, sizeof d.line, d.out), "magpied printed no listening line");
    /* "http=127.0.0.1:P" or, with more addresses, "http=127.0.0.1:P,[::1]:Q" */
    char echo[64];
    const char *echo_at = strstr(line, " echo=");
    cr_assert(sscanf(line, "listening http=127.0.0.1:%d", &d.http) == 1 && echo_at != NULL &&
                  sscanf(echo_at, " echo=%63s", echo) == 1,
              "line: %s", line);
    if (sscanf(echo, "127.0.0.1:%d", &d.echo) != 1)
        d.echo = 0;
    const char *https = strstr(line, " https=127.0.0.1:");
    d.https = https != NULL ? atoi(https + strlen(" https=127.0.0.1:")) : 0;
    return d;
}

static inline daemon_proc start(const char *const *extra)
{
    return start_with(NULL, extra, NULL);
}

static inline int stop(daemon_proc *d)
{
    kill(d->pid, SIGTERM);
    int status;
    cr_assert_eq(waitpid(d->pid, &status, 0), d->pid);
    running = -1;
    fclose(d->out);
    return exit_code(d, status);
}

/* The daemon's end of the client's TCP connection client_fd, as a descriptor of this process
 * (pidfd_getfd(2), so a test can read its socket options), or -1 when the daemon holds no such
 * socket (not accepted yet, or closed). The caller closes it. */
static inline int daemon_socket_of(const daemon_proc *d, int client_fd)
{
    struct sockaddr_storage mine, peer;
    socklen_t ml = sizeof mine, pl = sizeof peer;
    cr_assert_eq(getsockname(client_fd, (struct sockaddr *)&mine, &ml), 0);
    cr_assert_eq(getpeername(client_fd, (struct sockaddr *)&peer, &pl), 0);
    int pidfd = (int)syscall(SYS_pidfd_open, d->pid, 0);
    cr_assert_geq(pidfd, 0, "pidfd_open: %s", strerror(errno));
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)d->pid);
    DIR *dir = opendir(path);
    cr_assert_not_null(dir, "%s: %s", path, strerror(errno));
    int found = -1;
    for (struct dirent *e; found < 0 && (e = readdir(dir)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        int fd = (int)syscall(SYS_pidfd_getfd, pidfd, atoi(e->d_name), 0);
        if (fd < 0) {
            cr_assert_neq(errno, EPERM, "pidfd_getfd: not allowed to look into the daemon");
            continue; /* closed meanwhile */
        }
        struct sockaddr_storage a, b;
        socklen_t al = sizeof a, bl = sizeof b;
        if (getsockname(fd, (struct sockaddr *)&a, &al) == 0 &&
            getpeername(fd, (struct sockaddr *)&b, &bl) == 0 && al == pl && bl == ml &&
            memcmp(&a, &peer, al) == 0 && memcmp(&b, &mine, bl) == 0)
            found = fd;
        else
            close(fd);
    }
    closedir(dir);
    close(pidfd);
    return found;
}

/* Whether TCP_NODELAY is on at the daemon's end of client_fd's connection: 1 or 0, or -1 when
 * the daemon holds no such socket (daemon_socket_of). */
static inline int daemon_nodelay(const daemon_proc *d, int client_fd)
{
    int s = daemon_socket_of(d, client_fd);
    if (s < 0)
        return -1;
    int v = 0;
    socklen_t vl = sizeof v;
    cr_assert_eq(getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &vl), 0);
    close(s);
    return v != 0;
}

/* Read until the peer closes or `until` appears `count` times (or 5 s pass). */
static inline size_t read_some(int fd, char *buf, size_t cap, const char *until, int count)
{
    size_t got = 0;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 5000) <= 0)
            break;
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = 0;
        if (until) {
            int seen = 0;
            for (const char *p = buf; (p = strstr(p, until)); p++)
                seen++;
            if (seen >= count)
                break;
        }
    }
    buf[got] = 0;
    return got;
}

/* Run a shell command, return its stdout. */
static inline char *run(const char *cmd)
{
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    static char out[65536];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    pclose(f);
    return out;
}

/* magpied -t on text, written to dir/check.conf: what it printed (both streams), then "rc=N",
 * its exit status. */
static inline char *check_conf(const char *dir, const char *text)
{
    char conf[PATH_MAX], exe[PATH_MAX + 32], cmd[3 * PATH_MAX];
    snprintf(conf, sizeof conf, "%s/check.conf", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f, "%s", conf);
    fputs(text, f);
    fclose(f);
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "'%s' -t -c '%s' 2>&1; echo rc=$?", exe, conf);
    return run(cmd);
}

static inline int wait_exit(daemon_proc *d, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            running = -1;
            fclose(d->out);
            return exit_code(d, status);
        }
        usleep(10000);
    }
    return -1; /* still running */
}

/* The status code of one GET on a fresh connection; 0 when no response came. */
static inline int http_status(int port, const char *path)
{
    int fd = test_connect(port);
    char req[512], resp[4096];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    test_write_all(fd, req, strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    int code = 0;
    return sscanf(resp, "HTTP/1.1 %d", &code) == 1 ? code : 0;
}

/* A loopback port nobody listens on right now (bound and released: good enough for tests). */
static inline int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Whether the file at path contains needle within timeout_ms (polled). */
static inline bool file_has(const char *path, const char *needle, int timeout_ms)
{
    static char text[1 << 20];
    for (int waited = 0;; waited += 20) {
        FILE *f = fopen(path, "r");
        size_t n = 0;
        if (f != NULL) {
            n = fread(text, 1, sizeof text - 1, f);
            fclose(f);
        }
        text[n] = 0;
        if (strstr(text, needle) != NULL)
            return true;
        if (waited >= timeout_ms)
            return false;
        usleep(20000);
    }
}

#endif
