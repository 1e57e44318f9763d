/* Runs the tutorial's programs (runtime/examples/, built into EXAMPLES_DIR) against loopback
 * and checks what they print and how they exit. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_net.h"

/* Start argv[0] from EXAMPLES_DIR with stdout to a pipe; *out_fd reads it. */
static pid_t start(char *const argv[], int *out_fd)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        char path[512];
        snprintf(path, sizeof path, "%s/%s", EXAMPLES_DIR, argv[0]);
        execv(path, argv);
        _exit(127);
    }
    close(p[1]);
    *out_fd = p[0];
    return pid;
}

/* Everything the program prints, until it exits; its exit status. */
static int finish(pid_t pid, int fd, char *out, size_t cap)
{
    size_t len = 0;
    ssize_t n;
    while (len < cap - 1 && (n = read(fd, out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = 0;
    close(fd);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "the example died: status %#x; it printed:\n%s", st, out);
    return WEXITSTATUS(st);
}

static int run(char *const argv[], char *out, size_t cap)
{
    int fd;
    pid_t pid = start(argv, &fd);
    return finish(pid, fd, out, cap);
}

Test(examples, fan_out_runs_every_task_to_the_end, .timeout = 60)
{
    char out[1024];
    int rc = run((char *[]){"fan_out", "200", NULL}, out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "200 tasks x 100 polls = 20000 polls on "), "%s", out);
    cr_assert(strstr(out, "spawned 200, stolen "), "%s", out);
}

Test(examples, echo_server_echoes_and_stops_on_sigterm, .timeout = 60)
{
    int fd;
    pid_t pid = start((char *[]){"echo_server", "0", NULL}, &fd);
    char line[128] = {0};
    size_t len = 0;
    while (len < sizeof line - 1 && !strchr(line, '\n')) {
        ssize_t n = read(fd, line + len, 1);
        cr_assert_gt(n, 0, "no listening line");
        len += (size_t)n;
    }
    int port = 0;
    cr_assert_eq(sscanf(line, "listening on 127.0.0.1:%d", &port), 1, "%s", line);
    for (int k = 0; k < 3; k++) {
        int c = test_connect(port);
        char msg[4096], got[4096];
        memset(msg, 'a' + k, sizeof msg);
        test_write_all(c, msg, sizeof msg);
        size_t have = 0;
        while (have < sizeof got) {
            ssize_t n = read(c, got + have, sizeof got - have);
            cr_assert_gt(n, 0);
            have += (size_t)n;
        }
        cr_assert_eq(memcmp(got, msg, sizeof msg), 0);
        close(c);
    }
    usleep(100000); /* the server sees the last close */
    kill(pid, SIGTERM);
    char out[256];
    cr_assert_eq(finish(pid, fd, out, sizeof out), 0);
    cr_assert(strstr(out, "served 3 connections"), "%s", out);
}

/* A small HTTP server on a plain thread: 200 and "hello" for every path but /missing. */
static void *http_server(void *arg)
{
    int lfd = *(int *)arg;
    for (;;) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0)
            return NULL;
        char req[2048];
        size_t len = 0;
        ssize_t n;
        while (len < sizeof req - 1 && (n = read(c, req + len, sizeof req - 1 - len)) > 0) {
            len += (size_t)n;
            req[len] = 0;
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        const char *resp = strncmp(req, "GET /missing ", 13) == 0
                               ? "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
                               : "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        test_write_all(c, resp, strlen(resp));
        close(c);
    }
}

Test(examples, http_get_fetches_urls_concurrently, .timeout = 60)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    listen(lfd, 64);
    getsockname(lfd, (struct sockaddr *)&a, &al);
    pthread_t th;
    pthread_create(&th, NULL, http_server, &lfd);
    char u[6][64];
    for (int i = 0; i < 6; i++)
        snprintf(u[i], sizeof u[i], "http://127.0.0.1:%d/page%d", ntohs(a.sin_port), i);
    char out[4096];
    int rc = run((char *[]){"http_get", "-c", "3", u[0], u[1], u[2], u[3], u[4], u[5], NULL}, out,
                 sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    for (int i = 0; i < 6; i++) {
        char want[96];
        snprintf(want, sizeof want, "200 43 %.63s\n", u[i]);
        cr_assert(strstr(out, want), "no line '%s' in:\n%s", want, out);
    }
    char missing[64], closed[64];
    snprintf(missing, sizeof missing, "http://127.0.0.1:%d/missing", ntohs(a.sin_port));
    snprintf(closed, sizeof closed, "http://127.0.0.1:1/");
    rc = run((char *[]){"http_get", missing, closed, "ftp://x/", NULL}, out, sizeof out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "404 "), "%s", out);
    /* The reason too: the last address's connect error, by mp_strerror(). */
    cr_assert(strstr(out, "ERR could not connect (Connection refused) http://127.0.0.1:1/"), "%s",
              out);
    cr_assert(strstr(out, "ERR not an http:// URL ftp://x/"), "%s", out);
    shutdown(lfd, SHUT_RDWR);
    close(lfd);
    pthread_join(th, NULL);
}

Test(examples, udp_query_answers_every_query, .timeout = 60)
{
    char out[256];
    int rc = run((char *[]){"udp_query", "4", "50", NULL}, out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "200 of 200 answers right"), "%s", out);
}

Test(examples, dir_checksum_hashes_every_file_in_parallel, .timeout = 60)
{
    char dir[] = "/tmp/mp-examples-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const size_t sizes[] = {0, 1, 4096, 65537, 3 << 20};
    for (int i = 0; i < 5; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/f%d", dir, i);
        FILE *f = fopen(p, "w");
        for (size_t k = 0; k < sizes[i]; k++)
            fputc((int)((k * 2654435761u) >> 13) & 0xff, f);
        fclose(f);
    }
    char sub[128];
    snprintf(sub, sizeof sub, "%s/subdir", dir);
    mkdir(sub, 0755);
    char out[1024];
    int rc = run((char *[]){"dir_checksum", "--verify", dir, NULL}, out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    int lines = 0;
    for (char *p = out; (p = strchr(p, '\n')); p++)
        lines++;
    cr_assert_eq(lines, 5, "one line per regular file:\n%s", out);
    cr_assert(strstr(out, "0000000000000000  f0\n"), "the empty file's hash:\n%s", out);
    cr_assert_eq(run((char *[]){"dir_checksum", "/nonexistent-dir", NULL}, out, sizeof out), 1);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
