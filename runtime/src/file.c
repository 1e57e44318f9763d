/* file.c: file reads, opens and stats for tasks (mp_file_op in magpie_io.h), without stalling
 * a worker on the disk.
 *
 * Linux has no readiness for regular files: a read either finds its pages in the page cache
 * or sleeps in the kernel until the disk brings them. preadv2(RWF_NOWAIT) tells the two apart
 * (Linux 4.14): it copies what is cached and fails with EAGAIN where it would wait, so a read
 * from the cache, the common case for a busy server, costs one system call on the task's own
 * worker. Only a read that would wait goes to the blocking pool. Opens go there too, except an
 * O_NONBLOCK open whose path the kernel can walk from its caches alone (openat2's
 * RESOLVE_CACHED, Linux 5.12); stats always do (a path walk may read directories).
 *
 * A pooled operation cannot be interrupted, and the caller may give up (a timeout, its task
 * cancelled) while it runs: it works in storage of its own (an mp__bjob, blocking.c; a read
 * into a buffer of its own, copied out when the caller collects it), so nothing of the
 * caller's is touched after mp_file_op_cancel(), and it frees itself when done.
 */
#include "internal.h"

#include <linux/openat2.h>
#include <sys/uio.h>

#ifndef RESOLVE_CACHED
#define RESOLVE_CACHED 0x20
#endif

/* openat2(2), a raw system call: ThreadSanitizer sees neither it nor libuv's closes (libuv
 * closes with syscall(SYS_close)), so a descriptor it returns carries the history of the
 * socket that last had its number, and closing it would be reported as racing with that
 * socket's last use on the loop's thread. In a TSan build the file moves to a number TSan saw
 * opened (of /dev/null), through system calls it does not see either, and the first number
 * goes the way libuv's do. */
static long openat2_raw(int dirfd, const char *path, struct open_how *how)
{
    long fd = syscall(SYS_openat2, dirfd, path, how, sizeof *how);
#ifdef __SANITIZE_THREAD__
    if (fd >= 0) {
        int seen = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (seen >= 0 && syscall(SYS_dup3, (int)fd, seen, O_CLOEXEC) == seen) {
            syscall(SYS_close, (int)fd);
            fd = seen;
        } else if (seen >= 0) {
            close(seen);
        }
    }
#endif
    return fd;
}

enum { OP_READ, OP_OPEN, OP_STAT };
#define MAX_READ ((size_t)1 << 30)

typedef struct file_job {
    mp__bjob job;
    int kind;
    int fd;    /* read: the file; open, stat: the directory */
    int flags; /* open, stat */
    unsigned mode;
    uint64_t resolve;
    uint64_t off;
    size_t len;
    ssize_t n; /* read: bytes; open: the fd */
    int err;   /* negative errno */
    struct stat st;
    char *path;
    char buf[]; /* read */
} file_job;

static void job_run(mp__bjob *j)
{
    file_job *f = mp_container_of(j, file_job, job);
    switch (f->kind) {
    case OP_READ:
        do
            f->n = pread(f->fd, f->buf, f->len, (off_t)f->off);
        while (f->n < 0 && errno == EINTR);
        f->err = f->n < 0 ? -errno : 0;
        break;
    case OP_OPEN:
        if (f->resolve) {
            struct open_how how = {
                .flags = (uint64_t)(f->flags | O_CLOEXEC),
                .mode = (f->flags & (O_CREAT | O_TMPFILE)) ? f->mode : 0,
                .resolve = f->resolve,
            };
            f->n = openat2_raw(f->fd, f->path, &how);
        } else {
            f->n = openat(f->fd, f->path, f->flags | O_CLOEXEC, f->mode);
        }
        f->err = f->n < 0 ? -errno : 0;
        break;
    case OP_STAT:
        f->err = fstatat(f->fd, f->path, &f->st, f->flags) == 0 ? 0 : -errno;
        break;
    }
}

static void job_destroy(mp__bjob *j)
{
    file_job *f = mp_container_of(j, file_job, job);
    /* An open nobody collected: its descriptor is nobody's. */
    if (f->kind == OP_OPEN && f->n >= 0 && f->err == 0)
        close((int)f->n);
    free(f->path);
    free(f);
}

static int start(mp_runtime *rt, mp_file_op *op, file_job *f)
{
    f->job.run = job_run;
    f->job.destroy = job_destroy;
    int rc = mp__bjob_spawn(rt, &f->job);
    if (rc != 0) {
        f->kind = -1; /* nothing to close */
        job_destroy(&f->job);
        /* A pool that refuses the job because the runtime is shutting down means what a job
         * cancelled before it ran means: the runtime shut down first, -ECANCELED for every
         * file operation (mp_resolve_poll's answer too). */
        return rc == -ESHUTDOWN ? -ECANCELED : rc;
    }
    op->job = f;
    return 0;
}

static file_job *new_job(int kind, size_t extra, const char *path)
{
    file_job *f = calloc(1, sizeof *f + extra);
    if (!f)
        return NULL;
    f->kind = kind;
    f->n = -1;
    if (path && !(f->path = strdup(path))) {
        free(f);
        return NULL;
    }
    return f;
}

/* An open or a stat for the pool; false with *err set when it could not be started. */
static bool start_path_job(mp_runtime *rt, mp_file_op *op, int kind, int dirfd, const char *path,
                           int flags, unsigned mode, uint64_t resolve, int *err)
{
    file_job *f = new_job(kind, 0, path);
    if (!f) {
        *err = -ENOMEM;
        return false;
    }
    f->fd = dirfd;
    f->flags = flags;
    f->mode = mode;
    f->resolve = resolve;
    int rc = start(rt, op, f);
    if (rc != 0)
        *err = rc;
    return rc == 0;
}

/* Collect the pooled operation: MP_READY with f (the caller's reference kept, to put) or with
 * *err set and f NULL (cancelled before it ran); MP_PENDING. */
static mp_poll collect(mp_file_op *op, mp_context *cx, file_job **out, int *err)
{
    file_job *f = op->job;
    int joined;
    *out = NULL;
    if (mp__bjob_poll(&f->job, cx, &joined) == MP_PENDING)
        return MP_PENDING;
    op->job = NULL;
    if (joined != 0) {
        *err = joined;
        mp__bjob_put(&f->job);
        return MP_READY;
    }
    *out = f;
    *err = f->err;
    return MP_READY;
}

mp_poll mp_file_read_poll(mp_runtime *rt, mp_file_op *op, mp_context *cx, int fd, void *buf,
                          size_t len, uint64_t off, size_t *n, int *err)
{
    *n = 0;
    if (op->job == NULL) {
        if (len > MAX_READ || off > INT64_MAX) {
            *err = -EINVAL;
            return MP_READY;
        }
        struct iovec iov = {.iov_base = buf, .iov_len = len};
        ssize_t got;
        do
            got = preadv2(fd, &iov, 1, (off_t)off, RWF_NOWAIT);
        while (got < 0 && errno == EINTR);
        if (got >= 0) {
            *n = (size_t)got;
            *err = 0;
            return MP_READY;
        }
        /* EAGAIN: not all in the page cache. EOPNOTSUPP: a file system (or a kernel) without
         * RWF_NOWAIT. Either way the pool reads it. */
        if (errno != EAGAIN && errno != EOPNOTSUPP) {
            *err = -errno;
            return MP_READY;
        }
        file_job *f = new_job(OP_READ, len, NULL);
        if (!f) {
            *err = -ENOMEM;
            return MP_READY;
        }
        f->fd = fd;
        f->len = len;
        f->off = off;
        int rc = start(rt, op, f);
        if (rc != 0) {
            *err = rc;
            return MP_READY;
        }
    }
    file_job *f;
    if (collect(op, cx, &f, err) == MP_PENDING)
        return MP_PENDING;
    if (f) {
        if (f->err == 0) {
            *n = (size_t)f->n;
            memcpy(buf, f->buf, *n);
        }
        mp__bjob_put(&f->job);
    }
    return MP_READY;
}

mp_poll mp_file_open_poll(mp_runtime *rt, mp_file_op *op, mp_context *cx, int dirfd,
                          const char *path, int flags, unsigned mode, uint64_t resolve, int *fd,
                          int *err)
{
    *fd = -1;
    if (op->job == NULL) {
        if (!path) {
            *err = -EINVAL;
            return MP_READY;
        }
        /* Without O_NONBLOCK an open may wait (a FIFO waits for its other end). */
        if (flags & O_NONBLOCK) {
            struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                .resolve = resolve | RESOLVE_CACHED,
            };
            long got =
                (flags & (O_CREAT | O_TRUNC | O_TMPFILE)) ? -1 : openat2_raw(dirfd, path, &how);
            if (got >= 0) {
                *fd = (int)got;
                *err = 0;
                return MP_READY;
            }
            /* EAGAIN: not all in the caches; ENOSYS/EINVAL: an older kernel. Errors that
             * need no disk (ENOENT of a cached negative entry, EXDEV of a path leaving the
             * root) come back as they are. */
            if (got < 0 && (flags & (O_CREAT | O_TRUNC | O_TMPFILE)) == 0 && errno != EAGAIN &&
                errno != ENOSYS && errno != EINVAL) {
                *err = -errno;
                return MP_READY;
            }
        }
        if (!cx) { /* the caller cannot wait: it goes to the pool itself, from a task */
            *err = -EAGAIN;
            return MP_READY;
        }
        if (!start_path_job(rt, op, OP_OPEN, dirfd, path, flags, mode, resolve, err))
            return MP_READY;
    }
    file_job *f;
    if (collect(op, cx, &f, err) == MP_PENDING)
        return MP_PENDING;
    if (f) {
        if (f->err == 0) {
            *fd = (int)f->n;
            f->n = -1; /* collected: the caller's now */
        }
        mp__bjob_put(&f->job);
    }
    return MP_READY;
}

mp_poll mp_file_stat_poll(mp_runtime *rt, mp_file_op *op, mp_context *cx, int dirfd,
                          const char *path, int flags, struct stat *st, int *err)
{
    if (op->job == NULL) {
        if (!path) {
            *err = -EINVAL;
            return MP_READY;
        }
        if (!start_path_job(rt, op, OP_STAT, dirfd, path, flags, 0, 0, err))
            return MP_READY;
    }
    file_job *f;
    if (collect(op, cx, &f, err) == MP_PENDING)
        return MP_PENDING;
    if (f) {
        if (f->err == 0)
            *st = f->st;
        mp__bjob_put(&f->job);
    }
    return MP_READY;
}

void mp_file_op_cancel(mp_file_op *op)
{
    file_job *f = op->job;
    if (!f)
        return;
    op->job = NULL;
    mp__bjob_abandon(&f->job);
}
