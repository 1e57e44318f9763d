/* Fetch URLs over HTTP/1.1, several at once: name resolution on the blocking pool, connect
 * with a timeout (trying each address in turn), then the request and the whole response, read
 * by a deadline (mp_timeout_poll around the read: one way to bound any wait).
 *
 *   http_get [-c CONNS] URL...    at most CONNS connections in flight (default 4); prints
 *                                 "STATUS BYTES URL" per URL; exit 0 when every status is 2xx
 *
 * URLs are http://HOST[:PORT][/PATH]. Each of CONNS fetcher tasks takes the next URL until
 * none is left, so no more than CONNS connections are ever open.
 */
#include <magpie.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { TIMEOUT_MS = 5000 };

static char **urls;
static int nurls;
static _Atomic int next_url, failures;

typedef struct fetcher {
    mp_task task;
    mp_runtime *rt;
    int step, url;
    char host[256], port[8], req[1024];
    size_t req_len;
    mp_resolve resolve;
    struct addrinfo *addrs, *ai;
    mp_tcp *tcp; /* the connection in use, or NULL; freed by its close callback */
    mp_timer timer;
    uint64_t deadline;
    int connect_err; /* the last address's failure, for the report */
    char head[16];   /* the status line's start */
    size_t head_len, bytes;
    const char *data; /* the read's view, its length and error (read_poll below) */
    size_t len;
    int read_err;
} fetcher;

enum { TAKE, RESOLVE, CONNECT, SEND, RECV };

/* A stream's storage is freed by its close callback, a loop turn after the close. */
static void tcp_closed(mp_tcp *t)
{
    free(t);
}

static void close_stream(fetcher *f)
{
    if (f->tcp)
        mp_tcp_close(f->tcp, tcp_closed); /* tcp_closed runs once, whatever it returns */
    f->tcp = NULL;
}

/* The read as an mp_wait, for mp_timeout_poll: its poll, and its cancel, which withdraws the
 * waker the read left in the stream when the deadline passes first. */
static mp_poll read_poll(void *arg, mp_context *cx)
{
    fetcher *f = arg;
    return mp_tcp_read_poll(f->tcp, cx, &f->data, &f->len, &f->read_err);
}

static bool read_cancel(void *arg)
{
    mp_tcp_cancel_read(((fetcher *)arg)->tcp);
    return false; /* nothing was handed over */
}

/* http://HOST[:PORT][/PATH] into host, port and the request. */
static bool parse_url(fetcher *f, const char *url)
{
    snprintf(f->port, sizeof f->port, "80");
    if (sscanf(url, "http://%255[^:/]:%7[0-9]", f->host, f->port) < 1)
        return false;
    const char *path = strchr(url + 7, '/');
    int n =
        snprintf(f->req, sizeof f->req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                 path ? path : "/", f->host);
    f->req_len = (size_t)n;
    return n > 0 && (size_t)n < sizeof f->req;
}

/* One line per URL: "STATUS BYTES URL", or "ERR WHAT (REASON) URL" with the reason for the
 * error code err (mp_strerror) when there is one. */
static void report(fetcher *f, const char *what, int err)
{
    int status = 0;
    if (!what && !err && sscanf(f->head, "HTTP/1.%*d %d", &status) != 1)
        what = "malformed response";
    if (what || err || status < 200 || status > 299)
        atomic_fetch_add(&failures, 1);
    if (what && err)
        printf("ERR %s (%s) %s\n", what, mp_strerror(err), urls[f->url]);
    else if (what || err)
        printf("ERR %s %s\n", what ? what : mp_strerror(err), urls[f->url]);
    else
        printf("%d %zu %s\n", status, f->bytes, urls[f->url]);
}

static mp_poll fetcher_poll(mp_task *t, mp_context *cx)
{
    fetcher *f = mp_container_of(t, fetcher, task);
    int err;
    for (;;) {
        switch (f->step) {
        case TAKE:
            close_stream(f);
            if ((f->url = atomic_fetch_add(&next_url, 1)) >= nurls)
                return MP_READY;
            if (!parse_url(f, urls[f->url])) {
                report(f, "not an http:// URL", 0);
                continue;
            }
            if ((err = mp_resolve_start(f->rt, &f->resolve, f->host, f->port, NULL)) != 0) {
                report(f, "cannot resolve", err);
                continue;
            }
            f->deadline = mp_now_ms() + TIMEOUT_MS;
            f->step = RESOLVE;
            /* fall through */
        case RESOLVE:
            if (mp_resolve_poll(&f->resolve, cx, &f->timer, f->deadline, &f->addrs, &err) ==
                MP_PENDING)
                return MP_PENDING;
            f->step = TAKE;
            if (err != 0) {
                report(f, "cannot resolve", err); /* MP_ERESOLVE_NOTFOUND, say */
                continue;
            }
            f->ai = f->addrs;
            f->connect_err = 0;
            f->step = CONNECT;
            /* fall through */
        case CONNECT: /* each address in getaddrinfo's order until one answers */
            if (!f->tcp) {
                if (!f->ai) {
                    freeaddrinfo(f->addrs);
                    f->step = TAKE;
                    report(f, "could not connect", f->connect_err);
                    continue;
                }
                if (!(f->tcp = malloc(sizeof *f->tcp)))
                    return MP_READY;
                if ((f->connect_err = mp_tcp_connect(f->rt, f->tcp, f->ai->ai_addr, 0)) != 0)
                    close_stream(f); /* as after a failed connect_poll: tcp_closed frees it */
                f->ai = f->ai->ai_next;
                f->deadline = mp_now_ms() + TIMEOUT_MS;
                continue;
            }
            if (mp_tcp_connect_poll(f->tcp, cx, &f->timer, f->deadline, &err) == MP_PENDING)
                return MP_PENDING;
            if (err != 0) {
                f->connect_err = err;
                close_stream(f);
                continue;
            }
            freeaddrinfo(f->addrs);
            f->head_len = f->bytes = 0;
            f->deadline = mp_now_ms() + TIMEOUT_MS; /* for the whole response */
            f->step = SEND;
            /* fall through */
        case SEND:
            if (mp_tcp_write_poll(f->tcp, cx, f->req, f->req_len, &err) == MP_PENDING)
                return MP_PENDING;
            f->step = err ? TAKE : RECV;
            if (err) {
                report(f, "cannot send", err);
                continue;
            }
            /* fall through */
        case RECV: {
            mp_wait read = {read_poll, read_cancel, f};
            if (mp_timeout_poll(&f->timer, f->deadline, &read, cx, &err) == MP_PENDING)
                return MP_PENDING;
            if (err != 0) { /* -ETIMEDOUT: the read's waker is withdrawn already */
                report(f, "no response in time", err);
                f->step = TAKE;
                continue;
            }
            const char *data = f->data;
            size_t len = f->len;
            if (len == 0) { /* the server closed: the response is whole */
                f->head[f->head_len < sizeof f->head ? f->head_len : sizeof f->head - 1] = 0;
                report(f, NULL, f->read_err == MP_EOF ? 0 : f->read_err);
                f->step = TAKE;
                continue;
            }
            size_t take = sizeof f->head - 1 - f->head_len;
            memcpy(f->head + f->head_len, data, len < take ? len : take);
            f->head_len += len < take ? len : take;
            f->bytes += len;
            mp_tcp_consume(f->tcp, len);
            continue;
        }
        }
    }
}

/* Cancelled (a shutdown): give back every wait the task left and what it holds. */
static void fetcher_cancel(mp_task *t)
{
    fetcher *f = mp_container_of(t, fetcher, task);
    mp_timer_cancel(&f->timer);
    mp_resolve_cancel(&f->resolve);
    if (f->step == CONNECT)
        freeaddrinfo(f->addrs);
    close_stream(f);
}

static const mp_task_vtable fetcher_vt = {.poll = fetcher_poll, .cancel = fetcher_cancel};

int main(int argc, char **argv)
{
    int conns = 4, opt;
    while ((opt = getopt(argc, argv, "c:")) != -1) {
        if (opt != 'c' || (conns = atoi(optarg)) < 1) {
            fprintf(stderr, "usage: http_get [-c CONNS] URL...\n");
            return 2;
        }
    }
    urls = argv + optind;
    nurls = argc - optind;
    mp_runtime *rt;
    fetcher *f = calloc((size_t)conns, sizeof *f);
    if (!f || mp_runtime_new(&rt, NULL) != 0)
        return 1;
    for (int i = 0; i < conns; i++) {
        f[i].rt = rt;
        mp_timer_init(&f[i].timer, rt);
        mp_task_init(&f[i].task, &fetcher_vt);
        mp_spawn_joinable(rt, &f[i].task);
    }
    for (int i = 0; i < conns; i++)
        mp_join(&f[i].task);
    mp_runtime_free(rt); /* runs the last close callbacks */
    free(f);
    return atomic_load(&failures) == 0 ? 0 : 1;
}
