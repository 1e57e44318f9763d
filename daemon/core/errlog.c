/* errlog.c: the error log.
 *
 * Rare lines, written by the calling thread: the message is formatted on its stack behind
 * some headroom, the prefix (which depends on the target) is put in front of it under
 * elog.mu, and the whole line goes out in one write(2), so concurrent lines never interleave.
 * elog.mu also keeps md_errlog_switch() (reopen, apply) from closing the descriptor under a
 * write. A target that may stall is written with a bound (logfd.h); after one stall each line
 * is tried once without waiting, until the target takes data again.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log_internal.h"
#include "core/logfd.h"

/* atomic, relaxed everywhere: the level gates lines and publishes nothing else. */
static atomic_int log_level = MD_LOG_INFO;

static struct {
    pthread_mutex_t mu;
    int fd;        /* guarded by mu: STDERR_FILENO or a file */
    bool to_file;  /* guarded by mu */
    int may_stall; /* guarded by mu: -1 not known yet, else md_logfd_may_stall(fd) */
    bool stalled;  /* guarded by mu: the last line timed out; do not wait for the next */
} elog = {PTHREAD_MUTEX_INITIALIZER, STDERR_FILENO, false, -1, false};

static const int priorities[] = {
    [MD_LOG_ERROR] = 3,
    [MD_LOG_WARN] = 4,
    [MD_LOG_INFO] = 6,
    [MD_LOG_DEBUG] = 7,
};

bool md_log_enabled(md_log_level level)
{
    /* Relaxed: see log_level. */
    return (int)level <= atomic_load_explicit(&log_level, memory_order_relaxed);
}

void md_log(md_log_level level, const char *fmt, ...)
{
    if (!md_log_enabled(level))
        return;
    if ((unsigned)level > MD_LOG_DEBUG)
        level = MD_LOG_DEBUG;
    enum { HEAD = 64 }; /* room for the longest prefix, in front of the message */
    char buf[HEAD + MD_LOG_MESSAGE_MAX + 1];
    char *msg = buf + HEAD;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, MD_LOG_MESSAGE_MAX + 1, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n;
    if (len > MD_LOG_MESSAGE_MAX) {
        len = MD_LOG_MESSAGE_MAX;
        memcpy(msg + len - 3, "...", 3);
    }
    if (len > 0 && msg[len - 1] == '\n')
        len--;
    msg[len++] = '\n'; /* over the NUL: the line is written by length */

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char head[HEAD];
    int h;
    pthread_mutex_lock(&elog.mu);
    if (elog.to_file) {
        struct tm tm;
        gmtime_r(&now.tv_sec, &tm);
        h = snprintf(head, sizeof(head), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     now.tv_nsec / 1000000, md_log_level_name(level));
    } else {
        h = snprintf(head, sizeof(head), "<%d>", priorities[level]);
    }
    if (h < 0 || h >= HEAD)
        h = 0;
    memcpy(msg - h, head, (size_t)h);
    if (elog.may_stall < 0)
        elog.may_stall = md_logfd_may_stall(elog.fd);
    /* Failures go unreported: there is nowhere to report them. */
    if (elog.may_stall)
        elog.stalled =
            md_logfd_write_bounded(elog.fd, msg - h, (size_t)h + len,
                                   elog.stalled ? 0 : MD_LOG_STALL_MS, NULL) == -ETIMEDOUT;
    else
        (void)md_logfd_write_all(elog.fd, msg - h, (size_t)h + len, NULL);
    pthread_mutex_unlock(&elog.mu);
}

/* Points the error log at fd (STDERR_FILENO or a file) and closes the old one. */
void md_errlog_switch(int fd)
{
    pthread_mutex_lock(&elog.mu);
    int old = elog.fd;
    elog.fd = fd;
    elog.to_file = fd != STDERR_FILENO;
    elog.may_stall = md_logfd_may_stall(fd);
    elog.stalled = false;
    pthread_mutex_unlock(&elog.mu);
    md_logfd_close(old);
}

void md_errlog_set_level(md_log_level level)
{
    /* Relaxed: see log_level. */
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}
