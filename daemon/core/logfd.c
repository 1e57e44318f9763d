/* logfd.c: writing log lines to a descriptor that may stop taking them.
 *
 * A target that stops taking data (a FIFO or pipe whose reader stopped reading, a stalled
 * socket) must not hold its writer: the access-log writer thread, whose control calls wait for
 * it (and with them reload, reopen and exit on the main thread), and every thread that writes
 * an error line. Such targets are written through md_logfd_write_bounded(), which gives up
 * when the target takes nothing for a while; regular files are written plainly with
 * md_logfd_write_all() (they never report a stall).
 */
#include "core/logfd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* O_NONBLOCK: opening a FIFO that has no reader fails (ENXIO) instead of waiting for one; on
 * regular files it changes nothing, and pipes are written through md_logfd_write_bounded(). */
#define LOG_FILE_FLAGS (O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK)
#define LOG_FILE_MODE  0640

/* Writes everything, across EINTR, short writes and a non-blocking descriptor. 0 or a
 * negative errno; *done says how much went out either way. */
int md_logfd_write_all(int fd, const char *p, size_t n, size_t *done)
{
    size_t off = 0;
    int rc = 0;
    while (off < n) {
        ssize_t w = write(fd, p + off, n - off);
        if (w >= 0) {
            off += (size_t)w;
        } else if (errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, -1);
        } else if (errno != EINTR) {
            rc = -errno;
            break;
        }
    }
    if (done)
        *done = off;
    return rc;
}

/* Whether writes to fd may wait for a reader (pipe, FIFO, socket, terminal): those are written
 * through md_logfd_write_bounded(). */
bool md_logfd_may_stall(int fd)
{
    struct stat st;
    return fstat(fd, &st) != 0 || !S_ISREG(st.st_mode);
}

/* md_logfd_write_all() for a target that may stop taking data: waits for room at most wait_ms at a
 * time, then gives up with -ETIMEDOUT. After each POLLOUT it writes at most PIPE_BUF bytes,
 * which a pipe with room takes without blocking, ending at a line's end where one is in
 * reach, so that giving up leaves no line cut in the target. */
int md_logfd_write_bounded(int fd, const char *p, size_t n, int wait_ms, size_t *done)
{
    size_t off = 0;
    int rc = 0;
    while (off < n) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int r = poll(&pfd, 1, wait_ms);
        if (r == 0) {
            rc = -ETIMEDOUT;
            break;
        }
        if (r < 0 && errno != EINTR) {
            rc = -errno;
            break;
        }
        if (r < 0)
            continue;
        size_t chunk = n - off < PIPE_BUF ? n - off : PIPE_BUF;
        if (chunk < n - off) { /* more than one atomic write: end this one at a whole line */
            const char *eol = memrchr(p + off, '\n', chunk);
            if (eol)
                chunk = (size_t)(eol - (p + off)) + 1;
        }
        ssize_t w = write(fd, p + off, chunk);
        if (w >= 0) {
            off += (size_t)w;
        } else if (errno != EINTR && errno != EAGAIN) {
            rc = -errno;
            break;
        }
    }
    if (done)
        *done = off;
    return rc;
}

/* A descriptor for a log file, or a negative errno with err naming the path. */
int md_logfd_open(const char *path, md_error *err)
{
    int fd = open(path, LOG_FILE_FLAGS, LOG_FILE_MODE);
    if (fd < 0) {
        int rc = -errno;
        if (err)
            snprintf(err->msg, sizeof(err->msg), "%s: cannot open: %s", path, strerror(-rc));
        return rc;
    }
    return fd;
}

void md_logfd_close(int fd)
{
    if (fd >= 0 && fd != STDERR_FILENO)
        close(fd);
}
