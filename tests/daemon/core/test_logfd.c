/* Tests of daemon/core/logfd.c: writing to a regular file or to a target that may stop taking
 * data, never waiting for it without bound. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/logfd.h"

TestSuite(logfd, .timeout = 30);

Test(logfd, files_do_not_stall_pipes_may)
{
    char path[] = "/tmp/magpie-logfd-XXXXXX";
    int f = mkstemp(path);
    cr_assert_geq(f, 0);
    cr_assert_not(md_logfd_may_stall(f));
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert(md_logfd_may_stall(p[1]));
    close(p[0]);
    close(p[1]);
    close(f);
    unlink(path);
}

Test(logfd, open_appends_and_names_the_path_on_failure)
{
    char path[] = "/tmp/magpie-logfd-XXXXXX";
    int f = mkstemp(path);
    cr_assert_geq(f, 0);
    cr_assert_eq(write(f, "a\n", 2), 2);
    close(f);
    md_error err = {{0}};
    int fd = md_logfd_open(path, &err);
    cr_assert_geq(fd, 0);
    cr_assert_eq(md_logfd_write_all(fd, "b\n", 2, NULL), 0);
    md_logfd_close(fd);
    char buf[8] = {0};
    f = open(path, O_RDONLY);
    cr_assert_eq(read(f, buf, sizeof buf), 4);
    cr_assert_str_eq(buf, "a\nb\n", "appended, not overwritten");
    close(f);
    unlink(path);

    cr_assert_eq(md_logfd_open("/nonexistent-dir/x.log", &err), -ENOENT);
    cr_assert_not_null(strstr(err.msg, "/nonexistent-dir/x.log: cannot open"), "%s", err.msg);
    /* A FIFO without a reader: fails at once instead of waiting for one. */
    char fifo[] = "/tmp/magpie-logfd-fifo-XXXXXX";
    f = mkstemp(fifo);
    close(f);
    unlink(fifo);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(md_logfd_open(fifo, NULL), -ENXIO);
    unlink(fifo);
}

/* A pipe nobody reads: the bounded write gives up after its wait and reports how much went
 * out, ending at a line's end. */
Test(logfd, a_target_that_takes_nothing_times_out_at_a_line_end)
{
    int p[2];
    cr_assert_eq(pipe2(p, O_NONBLOCK), 0);
    enum { LINE = 100, N = 2 * 65536 / LINE };
    char *data = malloc((size_t)LINE * N);
    for (int i = 0; i < N; i++) {
        memset(data + (size_t)i * LINE, 'x', LINE - 1);
        data[(size_t)i * LINE + LINE - 1] = '\n';
    }
    size_t done = 0;
    cr_assert_eq(md_logfd_write_bounded(p[1], data, (size_t)LINE * N, 50, &done), -ETIMEDOUT);
    cr_assert_gt(done, 0);
    cr_assert_lt(done, (size_t)LINE * N);
    cr_assert_eq(done % LINE, 0, "the pipe holds whole lines only: %zu bytes", done);
    free(data);
    close(p[0]);
    close(p[1]);
}

typedef struct drain {
    int fd;
    size_t got;
} drain;

static void *drain_slowly(void *arg)
{
    drain *d = arg;
    char buf[4096];
    ssize_t n;
    while ((n = read(d->fd, buf, sizeof buf)) > 0) {
        d->got += (size_t)n;
        usleep(100);
    }
    return NULL;
}

/* A reader that keeps up, if slowly: both writers deliver everything. */
Test(logfd, a_slow_reader_gets_everything)
{
    for (int bounded = 0; bounded < 2; bounded++) {
        int p[2];
        cr_assert_eq(pipe2(p, O_NONBLOCK), 0);
        int fl = fcntl(p[0], F_GETFL);
        fcntl(p[0], F_SETFL, fl & ~O_NONBLOCK);
        drain d = {.fd = p[0]};
        pthread_t th;
        pthread_create(&th, NULL, drain_slowly, &d);
        size_t len = 1 << 20;
        char *data = malloc(len);
        memset(data, 'y', len);
        size_t done = 0;
        int rc = bounded ? md_logfd_write_bounded(p[1], data, len, 5000, &done)
                         : md_logfd_write_all(p[1], data, len, &done);
        cr_assert_eq(rc, 0);
        cr_assert_eq(done, len);
        close(p[1]);
        pthread_join(th, NULL);
        cr_assert_eq(d.got, len);
        close(p[0]);
        free(data);
    }
}

Test(logfd, errors_are_negative_errnos)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    close(p[0]); /* no reader: EPIPE (SIGPIPE ignored below) */
    signal(SIGPIPE, SIG_IGN);
    size_t done = 1;
    cr_assert_eq(md_logfd_write_all(p[1], "z\n", 2, &done), -EPIPE);
    cr_assert_eq(done, 0);
    cr_assert_eq(md_logfd_write_bounded(p[1], "z\n", 2, 100, &done), -EPIPE);
    close(p[1]);
    md_logfd_close(-1); /* nothing */
    md_logfd_close(STDERR_FILENO);
    cr_assert_neq(fcntl(STDERR_FILENO, F_GETFD), -1, "stderr stays open");
}
