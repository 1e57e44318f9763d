/* Tests of runtime/src/file.c: file reads, opens and stats from tasks. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "test_util.h"

static char dir[64];

static void make_tree(void)
{
    snprintf(dir, sizeof dir, "/tmp/mp-file-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char p[128];
    snprintf(p, sizeof p, "%s/data", dir);
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 100000; i++)
        fprintf(f, "%08d\n", i);
    fclose(f);
    snprintf(p, sizeof p, "%s/sub", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/fifo", dir);
    mkfifo(p, 0644);
}

static void remove_tree(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    system(cmd);
}

/* One operation, from a task. */
enum { READ, OPEN, STAT };
typedef struct op_task {
    mp_task task;
    mp_file_op op;
    int kind;
    int fd, dirfd, flags;
    uint64_t resolve;
    const char *path;
    char *buf;
    size_t len, n;
    uint64_t off;
    struct stat st;
    int out_fd, err;
    _Atomic bool waited; /* a poll returned MP_PENDING: read by the test's thread */
} op_task;

static mp_poll op_poll(mp_task *t, mp_context *cx)
{
    op_task *o = mp_container_of(t, op_task, task);
    mp_runtime *rt = mp_runtime_current();
    mp_poll r;
    switch (o->kind) {
    case READ:
        r = mp_file_read_poll(rt, &o->op, cx, o->fd, o->buf, o->len, o->off, &o->n, &o->err);
        break;
    case OPEN:
        r = mp_file_open_poll(rt, &o->op, cx, o->dirfd, o->path, o->flags, 0, o->resolve,
                              &o->out_fd, &o->err);
        break;
    default:
        r = mp_file_stat_poll(rt, &o->op, cx, o->dirfd, o->path, o->flags, &o->st, &o->err);
        break;
    }
    if (r == MP_PENDING)
        atomic_store(&o->waited, true);
    return r;
}

static void op_cancel(mp_task *t)
{
    mp_file_op_cancel(&mp_container_of(t, op_task, task)->op);
}

static const mp_task_vtable op_vt = {.poll = op_poll, .cancel = op_cancel};

static void run(mp_runtime *rt, op_task *o)
{
    mp_task_init(&o->task, &op_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &o->task), 0);
    cr_assert_eq(mp_join(&o->task), 0);
}

Test(file, reads_whole_files_at_offsets_cached_or_not, .timeout = 60)
{
    make_tree();
    mp_runtime *rt = test_runtime(2);
    op_task o = {.kind = OPEN, .dirfd = AT_FDCWD, .flags = O_RDONLY};
    char p[128];
    snprintf(p, sizeof p, "%s/data", dir);
    o.path = p;
    run(rt, &o);
    cr_assert_eq(o.err, 0);
    int fd = o.out_fd;
    cr_assert_geq(fd, 0);
    cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    /* Drop the file's pages (written back first), so the pool path runs too. */
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    char *buf = malloc(900000);
    for (int pass = 0; pass < 2; pass++) {
        size_t total = 0;
        while (total < 900000) {
            op_task r = {.kind = READ, .fd = fd, .buf = buf + total, .len = 65536, .off = total};
            if (r.len > 900000 - total)
                r.len = 900000 - total;
            run(rt, &r);
            cr_assert_eq(r.err, 0);
            if (r.n == 0)
                break;
            total += r.n;
        }
        cr_assert_eq(total, 900000);
        for (int i = 0; i < 100000; i += 997) {
            char want[16];
            snprintf(want, sizeof want, "%08d\n", i);
            cr_assert_eq(memcmp(buf + i * 9, want, 9), 0, "line %d", i);
        }
    }
    op_task eof = {.kind = READ, .fd = fd, .buf = buf, .len = 10, .off = 900000};
    run(rt, &eof);
    cr_assert_eq(eof.err, 0);
    cr_assert_eq(eof.n, 0);
    close(fd);
    op_task badf = {.kind = READ, .fd = fd, .buf = buf, .len = 10};
    run(rt, &badf);
    cr_assert_eq(badf.err, -EBADF);
    op_task huge = {.kind = READ, .fd = 0, .buf = buf, .len = (size_t)2 << 30};
    run(rt, &huge);
    cr_assert_eq(huge.err, -EINVAL);
    free(buf);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    remove_tree();
}

Test(file, a_file_without_nowait_reads_go_through_the_pool, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    /* procfs files do not take RWF_NOWAIT (EOPNOTSUPP): the read goes to a pool thread. */
    int fd = open("/proc/version", O_RDONLY);
    cr_assert_geq(fd, 0);
    char want[512], got[512];
    ssize_t wn = pread(fd, want, sizeof want, 0);
    cr_assert_gt(wn, 0);
    mp_stats before, after;
    mp_runtime_stats_get(rt, &before);
    op_task r = {.kind = READ, .fd = fd, .buf = got, .len = sizeof got};
    run(rt, &r);
    cr_assert_eq(r.err, 0);
    cr_assert_eq(r.n, (size_t)wn);
    cr_assert_eq(memcmp(got, want, r.n), 0);
    mp_runtime_stats_get(rt, &after);
    cr_assert_eq(after.blocking_jobs, before.blocking_jobs + 1);
    close(fd);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(file, open_and_stat_errors_and_resolve_beneath, .timeout = 60)
{
    make_tree();
    mp_runtime *rt = test_runtime(1);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    op_task o = {.kind = OPEN, .dirfd = dfd, .path = "missing", .flags = O_RDONLY};
    run(rt, &o);
    cr_assert_eq(o.err, -ENOENT);
    cr_assert_eq(o.out_fd, -1);
    /* Non-blocking open: the cached fast path when the kernel has it. */
    op_task nb = {.kind = OPEN, .dirfd = dfd, .path = "data", .flags = O_RDONLY | O_NONBLOCK};
    run(rt, &nb);
    cr_assert_eq(nb.err, 0);
    close(nb.out_fd);
    /* A FIFO opened with O_NONBLOCK does not wait for a writer. */
    op_task fifo = {.kind = OPEN, .dirfd = dfd, .path = "fifo", .flags = O_RDONLY | O_NONBLOCK};
    run(rt, &fifo);
    cr_assert_eq(fifo.err, 0);
    struct stat fst;
    fstat(fifo.out_fd, &fst);
    cr_assert(S_ISFIFO(fst.st_mode));
    close(fifo.out_fd);
    /* RESOLVE_BENEATH: no way out of the directory. */
    op_task esc = {.kind = OPEN,
                   .dirfd = dfd,
                   .path = "../../etc/passwd",
                   .flags = O_RDONLY,
                   .resolve = RESOLVE_BENEATH};
    run(rt, &esc);
    cr_assert(esc.err == -EXDEV || esc.err == -ENOSYS, "err %d", esc.err);
    op_task esc_nb = esc;
    esc_nb.op = (mp_file_op){0};
    esc_nb.flags |= O_NONBLOCK;
    run(rt, &esc_nb);
    cr_assert(esc_nb.err == -EXDEV || esc_nb.err == -ENOSYS, "err %d", esc_nb.err);
    op_task inside = {.kind = OPEN,
                      .dirfd = dfd,
                      .path = "sub/../data",
                      .flags = O_RDONLY,
                      .resolve = RESOLVE_BENEATH};
    run(rt, &inside);
    cr_assert(inside.err == 0 || inside.err == -ENOSYS, "err %d", inside.err);
    if (inside.err == 0)
        close(inside.out_fd);
    op_task st = {.kind = STAT, .dirfd = dfd, .path = "data"};
    run(rt, &st);
    cr_assert_eq(st.err, 0);
    cr_assert_eq(st.st.st_size, 900000);
    op_task sd = {.kind = STAT, .dirfd = dfd, .path = ""};
    sd.flags = AT_EMPTY_PATH;
    run(rt, &sd);
    cr_assert_eq(sd.err, 0);
    cr_assert(S_ISDIR(sd.st.st_mode));
    op_task sm = {.kind = STAT, .dirfd = dfd, .path = "missing"};
    run(rt, &sm);
    cr_assert_eq(sm.err, -ENOENT);
    op_task np = {.kind = STAT, .dirfd = dfd, .path = NULL};
    run(rt, &np);
    cr_assert_eq(np.err, -EINVAL);
    close(dfd);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    remove_tree();
}

static _Atomic bool hold_release;

Test(file, a_cancelled_read_touches_nothing_of_the_caller, .timeout = 60)
{
    make_tree();
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_threads = 1;
    mp_runtime *rt = test_runtime_with(&cfg);
    atomic_store(&hold_release, false);
    mp_task *h;
    cr_assert_eq(mp_spawn_blocking(rt, test_hold, &hold_release, &h), 0);
    char p[128];
    snprintf(p, sizeof p, "%s/data", dir);
    /* An open queued behind the held thread, then cancelled: its descriptor, if it opens, is
     * closed by the job itself. */
    op_task *o = calloc(1, sizeof *o);
    o->kind = OPEN;
    o->dirfd = AT_FDCWD;
    o->path = p;
    o->flags = O_RDONLY;
    mp_task_init(&o->task, &op_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &o->task), 0);
    while (!atomic_load(&o->waited))
        usleep(1000);
    mp_task_cancel(&o->task);
    cr_assert_eq(mp_join(&o->task), -ECANCELED);
    cr_assert_null(o->op.job, "mp_file_op_cancel() left the op free");
    free(o); /* nothing of the task is touched from now on */
    atomic_store(&hold_release, true);
    cr_assert_eq(mp_join(h), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    remove_tree();
}

/* Without a task (cx NULL) an open is tried from the kernel's caches only: a cached path opens
 * at once, an O_NONBLOCK-less open is -EAGAIN (it would need the pool), and nothing is left in
 * the op. */
Test(file, open_without_a_task_never_waits, .timeout = 30)
{
    make_tree();
    char p[128];
    snprintf(p, sizeof p, "%s/data", dir);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0); /* its dentry is in the cache now */
    mp_file_op op = {0};
    int fd = -1, err = 1;
    cr_assert_eq(mp_file_open_poll(NULL, &op, NULL, AT_FDCWD, p, O_RDONLY | O_NONBLOCK, 0,
                                   RESOLVE_NO_MAGICLINKS, &fd, &err),
                 MP_READY);
    if (err == 0) {
        cr_assert_geq(fd, 0);
        close(fd);
    } else { /* a kernel without RESOLVE_CACHED */
        cr_assert_eq(err, -EAGAIN);
    }
    cr_assert_null(op.job);
    cr_assert_eq(mp_file_open_poll(NULL, &op, NULL, AT_FDCWD, p, O_RDONLY, 0, 0, &fd, &err),
                 MP_READY);
    cr_assert_eq(err, -EAGAIN);
    cr_assert_eq(fd, -1);
    cr_assert_null(op.job);
    remove_tree();
}

/* File operations started while the runtime shuts down answer -ECANCELED, the one errno the
 * header gives for "the runtime shut down first" (they said -ESHUTDOWN, which no file call
 * documents). The task's poll waits, on its worker, until the runtime refuses blocking work,
 * then starts each operation: an open without O_NONBLOCK and a stat always need the pool; a
 * read of dropped pages does unless the kernel serves it from its cache meanwhile. */
typedef struct late_ops {
    mp_task task;
    int fd;
    const char *path;
    _Atomic bool started;
    int open_err, stat_err, read_err;
    mp_poll open_p, stat_p, read_p;
} late_ops;

static void noop(void *arg)
{
    (void)arg;
}

static mp_poll late_ops_poll(mp_task *t, mp_context *cx)
{
    late_ops *l = mp_container_of(t, late_ops, task);
    mp_runtime *rt = mp_runtime_current();
    atomic_store(&l->started, true);
    while (mp_spawn_blocking(rt, noop, NULL, NULL) == 0)
        usleep(1000);
    mp_file_op op = {0};
    int fd = -1;
    l->open_p =
        mp_file_open_poll(rt, &op, cx, AT_FDCWD, l->path, O_RDONLY, 0, 0, &fd, &l->open_err);
    cr_assert_null(op.job);
    struct stat st;
    l->stat_p = mp_file_stat_poll(rt, &op, cx, AT_FDCWD, l->path, 0, &st, &l->stat_err);
    cr_assert_null(op.job);
    char buf[4096];
    size_t n;
    l->read_p = mp_file_read_poll(rt, &op, cx, l->fd, buf, sizeof buf, 8192, &n, &l->read_err);
    cr_assert_null(op.job);
    return MP_READY;
}

static const mp_task_vtable late_ops_vt = {.poll = late_ops_poll};

Test(file, operations_started_during_shutdown_answer_ecanceled, .timeout = 30)
{
    make_tree();
    char p[128];
    snprintf(p, sizeof p, "%s/data", dir);
    int fd = open(p, O_RDONLY);
    cr_assert_geq(fd, 0);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    mp_runtime *rt = test_runtime(1);
    late_ops l = {.fd = fd, .path = p};
    mp_task_init(&l.task, &late_ops_vt);
    cr_assert_eq(mp_spawn(rt, &l.task), 0);
    while (!atomic_load(&l.started))
        usleep(1000);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(l.open_p, MP_READY);
    cr_assert_eq(l.open_err, -ECANCELED, "open: %d", l.open_err);
    cr_assert_eq(l.stat_p, MP_READY);
    cr_assert_eq(l.stat_err, -ECANCELED, "stat: %d", l.stat_err);
    cr_assert_eq(l.read_p, MP_READY);
    cr_assert(l.read_err == -ECANCELED || l.read_err == 0, "read: %d", l.read_err);
    mp_runtime_free(rt);
    close(fd);
    remove_tree();
}
