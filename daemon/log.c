/* log.c: the error log and the access log (see log.h).
 *
 * Error log. Rare lines, written by the calling thread: the message is formatted on its stack
 * behind some headroom, the prefix (which depends on the target) is put in front of it under
 * elog.mu, and the whole line goes out in one write(2), so concurrent lines never interleave.
 * elog.mu also keeps md_log_reopen/md_log_apply from closing the descriptor under a write.
 *
 * Access log. One line per response, from every worker. A worker formats the line on its
 * stack and copies it into acc.front under acc.mu (the critical section is a memcpy); the
 * writer thread swaps acc.front with acc.back under acc.mu and writes the full one with the
 * mutex released. A worker never waits for the disk: when acc.front is full the line is
 * dropped and counted. Control calls (apply, reopen, flush, close) never touch the writer's
 * descriptor: they post a request that the writer carries out at its next swap.
 *
 * The writer sleeps without a timeout while the buffer is empty (an idle daemon makes no
 * wake-ups), and a worker signals only when its line makes the buffer non-empty or crosses
 * the high-water mark, not per line. Then the writer lets lines gather for MD_LOG_FLUSH_MS
 * (or until the high-water mark) and swaps. The wake-up this must not lose:
 *
 *   writer                              worker
 *   sees acc.len == 0
 *                                       appends: acc.len 0 -> n
 *                                       signals: nobody waits yet
 *   waits, no timeout                   later workers do not signal: len was not 0
 *   => the lines sit in memory until the next request; on an idle daemon, for ever
 *
 * Both decisions are taken under acc.mu, and pthread_cond_wait releases the mutex and starts
 * waiting in one step:
 *
 *   writer                              worker
 *   lock; acc.len == 0                  lock (blocks)
 *   (A) cond_wait: waiter, then unlock
 *                                       (B) acc.len 0 -> n; unlock
 *                                       signal: wakes the writer, a waiter since (A)
 *
 * Either (B) came first and the writer sees len > 0 and does not wait, or (A) came first and
 * the writer is on the condition variable before the worker can take the mutex. Signalling
 * after unlocking is enough because the waiter registered under the mutex.
 *
 * The second race is a line in the wrong format:
 *
 *   worker                    md_log_apply (json)        writer
 *   reads format: combined
 *   formats a combined line
 *                             posts request              swaps; format = json, new file
 *   appends the combined line                            ...writes it to the JSON file
 *
 * acc.word (on, format, "<6>" prefix) is changed by the writer in the critical section of the
 * swap, and a worker checks the word it formatted with against acc.word under acc.mu before
 * its memcpy, formatting again on a mismatch. So every line in a buffer has the format of the
 * target that buffer goes to: lines appended before the swap go to the old target, lines
 * after it to the new one, and none is lost or written twice around a reopen.
 *
 * A target that stops taking data (a FIFO or pipe whose reader stopped reading, a stalled
 * socket) must not hold the writer: every control call waits for it, and with them reload,
 * reopen and exit on the main thread. Such targets are written through write_bounded(), which
 * drops what is left of a buffer when the target takes nothing for MD_LOG_STALL_MS; the error
 * log does the same, and after one stall tries each line once without waiting until the
 * target takes data again. Regular files are written plainly (they never report a stall).
 *
 * Lock order: ctl.mu, then acc.mu or elog.mu; never acc.mu and elog.mu together.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* O_NONBLOCK: opening a FIFO that has no reader fails (ENXIO) instead of waiting for one; on
 * regular files it changes nothing, and pipes are written through write_bounded(). */
#define LOG_FILE_FLAGS (O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK)
#define LOG_FILE_MODE  0640
#define HIGH_WATER     (MD_LOG_ACCESS_BUFFER / 4)

/* Output caps per access-log field, after escaping; longer fields end in "...". */
enum {
    CAP_PEER = 64,
    CAP_METHOD = 64,
    CAP_TARGET = 4096,
    CAP_REFERER = 1024,
    CAP_USER_AGENT = 1024,
    CAP_FIXED = 256, /* the prefix, keys, punctuation, time, protocol and three numbers */
};
_Static_assert(CAP_FIXED + CAP_PEER + CAP_METHOD + CAP_TARGET + CAP_REFERER + CAP_USER_AGENT <=
                   MD_LOG_ACCESS_LINE_MAX,
               "an access line can outgrow its buffer");

/* acc.word: how lines are formatted now. 0: the access log is off. */
enum {
    WORD_ON = 1,
    WORD_PREFIXED = 2, /* "<6>" in front: the target is stderr */
    WORD_JSON = 4,
};

/* Writes everything, across EINTR, short writes and a non-blocking descriptor. 0 or a
 * negative errno; *done says how much went out either way. */
static int write_all(int fd, const char *p, size_t n, size_t *done)
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
 * through write_bounded(). */
static bool may_stall(int fd)
{
    struct stat st;
    return fstat(fd, &st) != 0 || !S_ISREG(st.st_mode);
}

/* write_all() for a target that may stop taking data: waits for room at most wait_ms at a
 * time, then gives up with -ETIMEDOUT. After each POLLOUT it writes at most PIPE_BUF bytes,
 * which a pipe with room takes without blocking, ending at a line's end where one is in
 * reach, so that giving up leaves no line cut in the target. */
static int write_bounded(int fd, const char *p, size_t n, int wait_ms, size_t *done)
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
        size_t chunk = n - off;
        if (chunk > PIPE_BUF) {
            const char *eol = memrchr(p + off, '\n', PIPE_BUF);
            chunk = eol ? (size_t)(eol - (p + off)) + 1 : PIPE_BUF;
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
static int open_log_file(const char *path, md_error *err)
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

static void close_log_fd(int fd)
{
    if (fd >= 0 && fd != STDERR_FILENO)
        close(fd);
}

/* ------------------------------------------------------------------------------------------
 * State. */

/* atomic, relaxed everywhere: the level gates lines and publishes nothing else. */
static atomic_int log_level = MD_LOG_INFO;

static struct {
    pthread_mutex_t mu;
    int fd;        /* guarded by mu: STDERR_FILENO or a file */
    bool to_file;  /* guarded by mu */
    int may_stall; /* guarded by mu: -1 not known yet, else may_stall(fd) */
    bool stalled;  /* guarded by mu: the last line timed out; do not wait for the next */
} elog = {PTHREAD_MUTEX_INITIALIZER, STDERR_FILENO, false, -1, false};

/* A control call's order to the writer, carried out at the writer's next swap. */
struct request {
    int fd;        /* the new target from the swap on, or -1: keep the current one */
    uint64_t word; /* acc.word from the swap on */
    bool stop;     /* the writer closes its target and exits after this buffer */
    bool done;     /* guarded by acc.mu; set by the writer */
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the writer waits for lines or a request; CLOCK_MONOTONIC */
    pthread_cond_t done; /* a control call waits for its request to be carried out */
    char *front;         /* guarded by mu: workers append here */
    size_t len;          /* guarded by mu: bytes in front */
    char *back;          /* guarded by mu; the writer's while it writes */
    uint64_t word;       /* guarded by mu: WORD_* of the lines in front */
    struct request *req; /* guarded by mu: at most one, control calls are serialized */
    int fd;              /* the writer's only; set before it starts */
    bool fd_may_stall;   /* the writer's only: may_stall(fd) */
    bool failing;        /* the writer's only: the last write failed (log the first only) */
    atomic_uint_fast64_t word_hint; /* atomic: acc.word, read without the mutex */
    atomic_uint_fast64_t dropped;   /* atomic: lines lost */
} acc = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .fd = -1,
};

static pthread_once_t acc_once = PTHREAD_ONCE_INIT;

/* The control calls' view: what is configured now. */
static struct {
    pthread_mutex_t mu; /* serializes the control calls; guards the rest */
    bool open;
    char err_path[MD_CONFIG_PATH_MAX]; /* "" = stderr */
    uint64_t acc_word;                 /* 0: off */
    bool acc_to_file;
    char acc_path[MD_CONFIG_PATH_MAX];
    bool running; /* the writer thread exists */
    pthread_t writer;
} ctl = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ------------------------------------------------------------------------------------------
 * Error log. */

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
        elog.may_stall = may_stall(elog.fd);
    /* Failures go unreported: there is nowhere to report them. */
    if (elog.may_stall)
        elog.stalled = write_bounded(elog.fd, msg - h, (size_t)h + len,
                                     elog.stalled ? 0 : MD_LOG_STALL_MS, NULL) == -ETIMEDOUT;
    else
        (void)write_all(elog.fd, msg - h, (size_t)h + len, NULL);
    pthread_mutex_unlock(&elog.mu);
}

/* Points the error log at fd (STDERR_FILENO or a file) and closes the old one. */
static void elog_switch(int fd)
{
    pthread_mutex_lock(&elog.mu);
    int old = elog.fd;
    elog.fd = fd;
    elog.to_file = fd != STDERR_FILENO;
    elog.may_stall = may_stall(fd);
    elog.stalled = false;
    pthread_mutex_unlock(&elog.mu);
    close_log_fd(old);
}

/* ------------------------------------------------------------------------------------------
 * Access-log lines. */

typedef struct line {
    char *p;
    size_t len;
} line;

static inline void put(line *l, const char *s, size_t n)
{
    memcpy(l->p + l->len, s, n);
    l->len += n;
}

#define PUT_LIT(l, s) put((l), (s), sizeof(s) - 1)

static void put_u64(line *l, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    put(l, tmp + i, sizeof(tmp) - i);
}

enum escape { ESCAPE_CLF, ESCAPE_JSON };

/* A quoted field's content. CLF as nginx: '"', '\\', control bytes and bytes >= 0x7f as
 * "\xHH". JSON: \" \\ and \u00hh for control bytes and every byte >= 0x7f, so the line is
 * valid JSON (and ASCII) whatever the client sent. At most about cap bytes come out; a longer
 * field, or one marked cut, ends in "...". */
static void put_escaped(line *l, const char *s, size_t n, size_t cap, enum escape how, bool cut)
{
    static const char upper[] = "0123456789ABCDEF", lower[] = "0123456789abcdef";
    size_t start = l->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[6];
        size_t k;
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            e[0] = (char)c;
            k = 1;
        } else if (how == ESCAPE_CLF) {
            memcpy(e, "\\x", 2);
            e[2] = upper[c >> 4];
            e[3] = upper[c & 15];
            k = 4;
        } else if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            k = 2;
        } else {
            memcpy(e, "\\u00", 4);
            e[4] = lower[c >> 4];
            e[5] = lower[c & 15];
            k = 6;
        }
        if (l->len - start + k + 3 > cap) {
            cut = true;
            break;
        }
        put(l, e, k);
    }
    if (cut)
        PUT_LIT(l, "...");
}

/* A string field that may be absent (NULL or empty). */
static void put_field(line *l, const char *s, size_t n, size_t cap, enum escape how,
                      const char *absent)
{
    if (s == NULL || n == 0)
        put(l, absent, strlen(absent));
    else
        put_escaped(l, s, n, cap, how, false);
}

/* The formatted times of one second, per thread: strftime-like work once a second, not per
 * line. */
static _Thread_local struct {
    bool valid;
    time_t sec;
    char clf[48]; /* 21/Nov/2026:10:11:12 +0000 */
    char iso[48]; /* 2026-11-21T10:11:12Z */
} times;

static void times_for(time_t t)
{
    if (times.valid && times.sec == t)
        return;
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL) {
        snprintf(times.clf, sizeof(times.clf), "-");
        snprintf(times.iso, sizeof(times.iso), "-");
    } else {
        snprintf(times.clf, sizeof(times.clf), "%02d/%s/%04d:%02d:%02d:%02d +0000", tm.tm_mday,
                 months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        snprintf(times.iso, sizeof(times.iso), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    }
    times.sec = t;
    times.valid = true;
}

static void put_protocol(line *l, const md_access_entry *e)
{
    PUT_LIT(l, "HTTP/");
    put_u64(l, e->http_major);
    PUT_LIT(l, ".");
    put_u64(l, e->http_minor);
}

static void format_combined(line *l, const md_access_entry *e)
{
    put_field(l, e->peer, e->peer ? strlen(e->peer) : 0, CAP_PEER, ESCAPE_CLF, "-");
    PUT_LIT(l, " - - [");
    put(l, times.clf, strlen(times.clf));
    PUT_LIT(l, "] \"");
    if (e->method == NULL) {
        PUT_LIT(l, "-"); /* nothing that could be called a request line */
    } else {
        put_escaped(l, e->method, e->method_len, CAP_METHOD, ESCAPE_CLF, false);
        PUT_LIT(l, " ");
        if (e->target == NULL)
            PUT_LIT(l, "-");
        else
            put_escaped(l, e->target, e->target_len, CAP_TARGET, ESCAPE_CLF, e->target_cut);
        PUT_LIT(l, " ");
        put_protocol(l, e);
    }
    PUT_LIT(l, "\" ");
    put_u64(l, e->status);
    PUT_LIT(l, " ");
    put_u64(l, e->body_bytes);
    PUT_LIT(l, " \"");
    put_field(l, e->referer, e->referer_len, CAP_REFERER, ESCAPE_CLF, "-");
    PUT_LIT(l, "\" \"");
    put_field(l, e->user_agent, e->user_agent_len, CAP_USER_AGENT, ESCAPE_CLF, "-");
    PUT_LIT(l, "\"\n");
}

/* Absent strings are "" in JSON. */
static void format_json(line *l, const md_access_entry *e)
{
    PUT_LIT(l, "{\"time\":\"");
    put(l, times.iso, strlen(times.iso));
    PUT_LIT(l, "\",\"remote_addr\":\"");
    put_field(l, e->peer, e->peer ? strlen(e->peer) : 0, CAP_PEER, ESCAPE_JSON, "");
    PUT_LIT(l, "\",\"method\":\"");
    put_field(l, e->method, e->method_len, CAP_METHOD, ESCAPE_JSON, "");
    PUT_LIT(l, "\",\"target\":\"");
    if (e->target != NULL)
        put_escaped(l, e->target, e->target_len, CAP_TARGET, ESCAPE_JSON, e->target_cut);
    PUT_LIT(l, "\",\"protocol\":\"");
    if (e->method != NULL)
        put_protocol(l, e);
    PUT_LIT(l, "\",\"status\":");
    put_u64(l, e->status);
    PUT_LIT(l, ",\"body_bytes\":");
    put_u64(l, e->body_bytes);
    PUT_LIT(l, ",\"referer\":\"");
    put_field(l, e->referer, e->referer_len, CAP_REFERER, ESCAPE_JSON, "");
    PUT_LIT(l, "\",\"user_agent\":\"");
    put_field(l, e->user_agent, e->user_agent_len, CAP_USER_AGENT, ESCAPE_JSON, "");
    PUT_LIT(l, "\",\"duration_us\":");
    put_u64(l, e->duration_ns / 1000);
    PUT_LIT(l, "}\n");
}

size_t md_log_access_format(char *buf, md_access_format format, bool prefixed,
                            const md_access_entry *e)
{
    line l = {buf, 0};
    times_for(e->time);
    if (prefixed)
        PUT_LIT(&l, "<6>");
    if (format == MD_ACCESS_FORMAT_JSON)
        format_json(&l, e);
    else
        format_combined(&l, e);
    return l.len;
}

/* ------------------------------------------------------------------------------------------
 * Access log: workers and the writer. */

bool md_log_access_on(void)
{
    /* Relaxed: a hint for skipping work; md_log_access decides under acc.mu. */
    return atomic_load_explicit(&acc.word_hint, memory_order_relaxed) & WORD_ON;
}

uint64_t md_log_access_dropped(void)
{
    /* Relaxed: a monotonic counter, it publishes nothing else. */
    return atomic_load_explicit(&acc.dropped, memory_order_relaxed);
}

static void count_dropped(uint64_t n)
{
    /* Relaxed: see md_log_access_dropped. */
    atomic_fetch_add_explicit(&acc.dropped, n, memory_order_relaxed);
}

void md_log_access(const md_access_entry *e)
{
    /* Relaxed: which format to try first; checked against acc.word under acc.mu below (the
     * second race in the file comment), so a stale value costs a second formatting only. */
    uint64_t word = atomic_load_explicit(&acc.word_hint, memory_order_relaxed);
    char buf[MD_LOG_ACCESS_LINE_MAX];
    for (;;) {
        if (!(word & WORD_ON))
            return;
        size_t n = md_log_access_format(
            buf, (word & WORD_JSON) ? MD_ACCESS_FORMAT_JSON : MD_ACCESS_FORMAT_COMBINED,
            word & WORD_PREFIXED, e);
        pthread_mutex_lock(&acc.mu);
        if (acc.word != word) {
            word = acc.word;
            pthread_mutex_unlock(&acc.mu);
            continue;
        }
        size_t old = acc.len;
        if (MD_LOG_ACCESS_BUFFER - old < n) {
            pthread_mutex_unlock(&acc.mu);
            count_dropped(1);
            return;
        }
        memcpy(acc.front + old, buf, n);
        acc.len = old + n; /* (B) in the file comment */
        pthread_mutex_unlock(&acc.mu);
        /* Empty -> non-empty: the writer may sleep without a timeout. Crossing the
         * high-water mark: it may be waiting out the flush interval. */
        if (old == 0 || (old < HIGH_WATER && old + n >= HIGH_WATER))
            pthread_cond_signal(&acc.wake);
        return;
    }
}

static void write_buffer(const char *p, size_t n)
{
    size_t done;
    int rc = acc.fd_may_stall ? write_bounded(acc.fd, p, n, MD_LOG_STALL_MS, &done)
                              : write_all(acc.fd, p, n, &done);
    if (rc == 0) {
        acc.failing = false;
        return;
    }
    uint64_t lost = 0;
    for (const char *q = p + done; (q = memchr(q, '\n', (size_t)(p + n - q))) != NULL; q++)
        lost++;
    count_dropped(lost);
    /* Once per run of failures: the error log may be on the same disk. */
    if (!acc.failing && rc == -ETIMEDOUT)
        md_log(MD_LOG_ERROR, "access log: the target took no data for %d ms (%llu lines lost)",
               MD_LOG_STALL_MS, (unsigned long long)lost);
    else if (!acc.failing)
        md_log(MD_LOG_ERROR, "access log: write failed: %s (%llu lines lost)", strerror(-rc),
               (unsigned long long)lost);
    acc.failing = true;
}

static void *writer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&acc.mu);
    for (;;) {
        while (acc.len == 0 && acc.req == NULL)
            pthread_cond_wait(&acc.wake, &acc.mu); /* (A): idle, no timeout */
        if (acc.req == NULL && acc.len < HIGH_WATER) {
            /* Let lines gather: one write per interval, not one per wake-up. */
            struct timespec deadline;
            clock_gettime(CLOCK_MONOTONIC, &deadline);
            deadline.tv_nsec += (long)MD_LOG_FLUSH_MS * 1000000;
            deadline.tv_sec += deadline.tv_nsec / 1000000000;
            deadline.tv_nsec %= 1000000000;
            while (acc.req == NULL && acc.len < HIGH_WATER &&
                   pthread_cond_timedwait(&acc.wake, &acc.mu, &deadline) != ETIMEDOUT)
                ;
        }
        char *out = acc.front;
        size_t n = acc.len;
        acc.front = acc.back;
        acc.back = out;
        acc.len = 0;
        struct request *r = acc.req;
        acc.req = NULL;
        if (r != NULL) {
            acc.word = r->word; /* in the swap's critical section: see the file comment */
            /* Relaxed: a hint only, see md_log_access. */
            atomic_store_explicit(&acc.word_hint, r->word, memory_order_relaxed);
        }
        pthread_mutex_unlock(&acc.mu);

        if (n > 0)
            write_buffer(out, n);
        bool stop = false;
        if (r != NULL) {
            stop = r->stop;
            if (r->fd >= 0 || stop)
                close_log_fd(acc.fd);
            if (r->fd >= 0) {
                acc.fd = r->fd;
                acc.fd_may_stall = may_stall(r->fd);
            }
        }

        pthread_mutex_lock(&acc.mu);
        if (r != NULL) {
            r->done = true; /* r may be gone once acc.mu is released */
            pthread_cond_broadcast(&acc.done);
        }
        if (stop)
            break;
    }
    pthread_mutex_unlock(&acc.mu);
    return NULL;
}

static void acc_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&acc.wake, &a);
    pthread_condattr_destroy(&a);
}

/* Hands r to the writer and waits until it is carried out. ctl.mu held. */
static void writer_request_locked(struct request *r)
{
    r->done = false;
    pthread_mutex_lock(&acc.mu);
    acc.req = r;
    pthread_cond_signal(&acc.wake);
    while (!r->done)
        pthread_cond_wait(&acc.done, &acc.mu);
    pthread_mutex_unlock(&acc.mu);
}

/* Starts the writer on fd with lines formatted as word. ctl.mu held. 0 or a negative errno;
 * fd is the caller's on failure. */
static int writer_start_locked(int fd, uint64_t word)
{
    pthread_once(&acc_once, acc_init);
    char *a = malloc(MD_LOG_ACCESS_BUFFER), *b = malloc(MD_LOG_ACCESS_BUFFER);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return -ENOMEM;
    }
    pthread_mutex_lock(&acc.mu);
    acc.front = a;
    acc.back = b;
    acc.len = 0;
    acc.req = NULL;
    pthread_mutex_unlock(&acc.mu);
    acc.fd = fd; /* before the thread starts: pthread_create publishes it */
    acc.fd_may_stall = may_stall(fd);
    acc.failing = false;

    /* The writer takes no signals: they belong to the main thread, and a write interrupted
     * by one would only be retried. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&ctl.writer, NULL, writer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) /* named here, not in the thread: visible as soon as this returns */
        pthread_setname_np(ctl.writer, "magpied-log");

    pthread_mutex_lock(&acc.mu);
    if (rc == 0) {
        acc.word = word;
        /* Relaxed: a hint only, see md_log_access. */
        atomic_store_explicit(&acc.word_hint, word, memory_order_relaxed);
    } else {
        acc.front = acc.back = NULL;
    }
    pthread_mutex_unlock(&acc.mu);
    if (rc != 0) {
        acc.fd = -1;
        free(a);
        free(b);
        return -rc;
    }
    ctl.running = true;
    return 0;
}

/* Writes everything pending, stops the writer (it closes its target). ctl.mu held. */
static void writer_stop_locked(void)
{
    struct request r = {.fd = -1, .word = 0, .stop = true};
    writer_request_locked(&r);
    pthread_join(ctl.writer, NULL);
    pthread_mutex_lock(&acc.mu);
    free(acc.front);
    free(acc.back);
    acc.front = acc.back = NULL;
    pthread_mutex_unlock(&acc.mu);
    acc.fd = -1;
    ctl.running = false;
}

/* ------------------------------------------------------------------------------------------
 * Control calls. */

static uint64_t access_word(const md_config *cfg)
{
    if (cfg->access_log == MD_ACCESS_LOG_OFF)
        return 0;
    return WORD_ON | (cfg->access_log == MD_ACCESS_LOG_STDERR ? WORD_PREFIXED : 0) |
           (cfg->access_format == MD_ACCESS_FORMAT_JSON ? WORD_JSON : 0);
}

/* Everything that can fail (opening files, starting the writer) happens before anything
 * changes, so a failure leaves the old settings. ctl.mu held. */
static int apply_locked(const md_config *cfg, md_error *err)
{
    int efd = -1; /* -1: the error log stays where it is */
    if (strcmp(cfg->error_log_path, ctl.err_path) != 0) {
        efd = cfg->error_log_path[0] ? open_log_file(cfg->error_log_path, err) : STDERR_FILENO;
        if (efd < 0)
            return efd;
    }

    uint64_t word = access_word(cfg);
    bool to_file = cfg->access_log == MD_ACCESS_LOG_FILE;
    int afd = -1; /* -1: the access log keeps its target */
    if (word != 0 && to_file &&
        !(ctl.running && ctl.acc_to_file && strcmp(cfg->access_log_path, ctl.acc_path) == 0)) {
        afd = open_log_file(cfg->access_log_path, err);
        if (afd < 0) {
            close_log_fd(efd);
            return afd;
        }
    } else if (word != 0 && !to_file && !(ctl.running && !ctl.acc_to_file)) {
        afd = STDERR_FILENO;
    }

    if (word != 0 && !ctl.running) {
        int rc = writer_start_locked(afd, word);
        if (rc != 0) {
            if (err)
                snprintf(err->msg, sizeof(err->msg), "access log writer: %s", strerror(-rc));
            close_log_fd(afd);
            close_log_fd(efd);
            return rc;
        }
    } else if (word == 0 && ctl.running) {
        writer_stop_locked();
    } else if (word != 0 && (afd >= 0 || word != ctl.acc_word)) {
        struct request r = {.fd = afd, .word = word};
        writer_request_locked(&r);
    }
    ctl.acc_word = word;
    ctl.acc_to_file = word != 0 && to_file;
    snprintf(ctl.acc_path, sizeof(ctl.acc_path), "%s", ctl.acc_to_file ? cfg->access_log_path : "");

    if (efd >= 0) {
        elog_switch(efd);
        snprintf(ctl.err_path, sizeof(ctl.err_path), "%s", cfg->error_log_path);
    }
    /* Relaxed: see log_level. */
    atomic_store_explicit(&log_level, (int)cfg->log_level, memory_order_relaxed);
    return 0;
}

int md_log_open(const md_config *cfg, md_error *err)
{
    pthread_mutex_lock(&ctl.mu);
    int rc = -EALREADY;
    if (ctl.open) {
        if (err)
            snprintf(err->msg, sizeof(err->msg), "log: already open");
    } else {
        rc = apply_locked(cfg, err);
        ctl.open = rc == 0;
    }
    pthread_mutex_unlock(&ctl.mu);
    return rc;
}

int md_log_apply(const md_config *cfg, md_error *err)
{
    pthread_mutex_lock(&ctl.mu);
    int rc = apply_locked(cfg, err);
    if (rc == 0)
        ctl.open = true;
    pthread_mutex_unlock(&ctl.mu);
    return rc;
}

int md_log_reopen(void)
{
    int first = 0;
    pthread_mutex_lock(&ctl.mu);
    if (ctl.err_path[0]) {
        int fd = open_log_file(ctl.err_path, NULL);
        if (fd >= 0)
            elog_switch(fd);
        else
            md_log(MD_LOG_ERROR, "cannot reopen the error log %s: %s", ctl.err_path,
                   strerror(-(first = fd)));
    }
    if (ctl.running && ctl.acc_to_file) {
        int fd = open_log_file(ctl.acc_path, NULL);
        if (fd >= 0) {
            struct request r = {.fd = fd, .word = ctl.acc_word};
            writer_request_locked(&r);
        } else {
            md_log(MD_LOG_ERROR, "cannot reopen the access log %s: %s", ctl.acc_path,
                   strerror(-fd));
            if (first == 0)
                first = fd;
        }
    }
    pthread_mutex_unlock(&ctl.mu);
    return first;
}

void md_log_flush(void)
{
    pthread_mutex_lock(&ctl.mu);
    if (ctl.running) {
        struct request r = {.fd = -1, .word = ctl.acc_word};
        writer_request_locked(&r);
    }
    pthread_mutex_unlock(&ctl.mu);
}

void md_log_close(void)
{
    pthread_mutex_lock(&ctl.mu);
    if (ctl.running)
        writer_stop_locked();
    ctl.acc_word = 0;
    ctl.acc_to_file = false;
    ctl.acc_path[0] = '\0';
    if (ctl.err_path[0]) {
        elog_switch(STDERR_FILENO);
        ctl.err_path[0] = '\0';
    }
    ctl.open = false;
    pthread_mutex_unlock(&ctl.mu);
}
