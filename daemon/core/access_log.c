/* access_log.c: the access log's shared buffer and the thread that writes it.
 *
 * One line per response, from every worker. A worker formats the line on its
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
 * The writer's target may stall; it is written with a bound (logfd.h), and what a stalled
 * target does not take is dropped and counted.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log_internal.h"
#include "core/logfd.h"

#define HIGH_WATER (MD_LOG_ACCESS_BUFFER / 4)

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
    uint64_t word;       /* guarded by mu: MD_ACCESS_WORD_* of the lines in front */
    struct request *req; /* guarded by mu: at most one, control calls are serialized */
    int fd;              /* the writer's only; set before it starts */
    bool fd_may_stall;   /* the writer's only: md_logfd_may_stall(fd) */
    bool failing;        /* the writer's only: the last write failed (log the first only) */
    atomic_uint_fast64_t word_hint; /* atomic: acc.word, read without the mutex */
    atomic_uint_fast64_t dropped;   /* atomic: lines lost */
    pthread_t writer;               /* the control calls' (serialized by the caller) */
} acc = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .fd = -1,
};

static pthread_once_t acc_once = PTHREAD_ONCE_INIT;

bool md_log_access_on(void)
{
    /* Relaxed: a hint for skipping work; md_log_access decides under acc.mu. */
    return atomic_load_explicit(&acc.word_hint, memory_order_relaxed) & MD_ACCESS_WORD_ON;
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
    /* Acquire: which format to try first; checked against acc.word under acc.mu below (the
     * second race in the file comment), so a stale value costs a second formatting only. It
     * may name a template, whose bytes the control call wrote before the writer published
     * the word (pairs with the release stores of word_hint). */
    uint64_t word = atomic_load_explicit(&acc.word_hint, memory_order_acquire);
    char buf[MD_LOG_ACCESS_LINE_MAX];
    for (;;) {
        if (!(word & MD_ACCESS_WORD_ON))
            return;
        const md_access_template *t = md_access_word_template(word);
        bool prefixed = word & MD_ACCESS_WORD_PREFIXED;
        size_t n = t != NULL ? md_log_access_format_template(buf, t, prefixed, e)
                             : md_log_access_format(buf,
                                                    (word & MD_ACCESS_WORD_JSON)
                                                        ? MD_ACCESS_FORMAT_JSON
                                                        : MD_ACCESS_FORMAT_COMBINED,
                                                    prefixed, e);
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
    int rc = acc.fd_may_stall ? md_logfd_write_bounded(acc.fd, p, n, MD_LOG_STALL_MS, &done)
                              : md_logfd_write_all(acc.fd, p, n, &done);
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
    (void)arg; /* pthread_create's shape: the state is file-wide */
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
            /* Release: a hint, but it may name a template a worker reads without the mutex
             * (pairs with the acquire load in md_log_access). */
            atomic_store_explicit(&acc.word_hint, r->word, memory_order_release);
        }
        pthread_mutex_unlock(&acc.mu);

        if (n > 0)
            write_buffer(out, n);
        bool stop = false;
        if (r != NULL) {
            stop = r->stop;
            if (r->fd >= 0 || stop)
                md_logfd_close(acc.fd);
            if (r->fd >= 0) {
                acc.fd = r->fd;
                acc.fd_may_stall = md_logfd_may_stall(r->fd);
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

/* Hands r to the writer and waits until it is carried out. */
static void writer_request(struct request *r)
{
    r->done = false;
    pthread_mutex_lock(&acc.mu);
    acc.req = r;
    pthread_cond_signal(&acc.wake);
    while (!r->done)
        pthread_cond_wait(&acc.done, &acc.mu);
    pthread_mutex_unlock(&acc.mu);
}

int md_accesslog_start(int fd, uint64_t word)
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
    acc.fd_may_stall = md_logfd_may_stall(fd);
    acc.failing = false;

    /* The writer takes no signals: they belong to the main thread, and a write interrupted
     * by one would only be retried. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&acc.writer, NULL, writer_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) /* named here, not in the thread: visible as soon as this returns */
        pthread_setname_np(acc.writer, "magpied-log");

    pthread_mutex_lock(&acc.mu);
    if (rc == 0) {
        acc.word = word;
        /* Release: as at the swap (pairs with the acquire load in md_log_access). */
        atomic_store_explicit(&acc.word_hint, word, memory_order_release);
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
    return 0;
}

void md_accesslog_stop(void)
{
    struct request r = {.fd = -1, .word = 0, .stop = true};
    writer_request(&r);
    pthread_join(acc.writer, NULL);
    pthread_mutex_lock(&acc.mu);
    free(acc.front);
    free(acc.back);
    acc.front = acc.back = NULL;
    pthread_mutex_unlock(&acc.mu);
    acc.fd = -1;
}

void md_accesslog_request(int fd, uint64_t word)
{
    struct request r = {.fd = fd, .word = word};
    writer_request(&r);
}
