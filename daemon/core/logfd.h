/* Writing log lines to a descriptor: a regular file, or a target that may stop taking data
 * (a pipe, a FIFO, a socket, a terminal), which is never waited for without bound. Used by
 * the error log and the access-log writer thread.
 */
#ifndef MD_LOGFD_H
#define MD_LOGFD_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

/* Writes everything, across EINTR, short writes and a non-blocking descriptor. 0 or a
 * negative errno; *done (when not NULL) says how much went out either way. */
int md_logfd_write_all(int fd, const char *p, size_t n, size_t *done);
/* md_logfd_write_all() for a target that may stop taking data: waits for room at most
 * wait_ms at a time, then gives up with -ETIMEDOUT, leaving no line cut where a line's end
 * was in reach. */
int md_logfd_write_bounded(int fd, const char *p, size_t n, int wait_ms, size_t *done);
/* Whether writes to fd may wait for a reader (pipe, FIFO, socket, terminal): those are
 * written with md_logfd_write_bounded(). */
bool md_logfd_may_stall(int fd);
/* A descriptor for a log file (appending, created 0640; a FIFO without a reader fails), or a
 * negative errno with err (when not NULL) naming the path. */
int md_logfd_open(const char *path, md_error *err);
/* Closes fd unless it is stderr or negative. */
void md_logfd_close(int fd);

#endif
