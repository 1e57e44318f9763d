/* Reloads under pipelined keep-alive load (issue 30, "requests lost around reloads"): client
 * threads send batches of pipelined GET / and POST /echo (1 KiB, each body its own) on
 * keep-alive connections while the test swaps two configurations with SIGHUP, over and over
 * (one with a small max_requests_per_connection and the other limits halved, and one invalid
 * file among them). Every request sent gets its own, complete response, or the connection
 * closes after a response that said Connection: close, and nothing follows that response:
 * none is lost.
 *
 * What each part of it is for:
 * - Batches of up to 24 requests (26 KiB with the echoes) against a limit of 5: more than one
 *   16 KiB read, so requests past the limit are still unread in magpied's socket when it has
 *   answered the last one; and the clients' receive buffers are small, so that some of that
 *   answer still waits in magpied's send buffer. Closed at once, such a connection is reset,
 *   and the reset destroys the answer (a "reset with responses owed" here); magpied's
 *   lingering close (RFC 9112 9.6) keeps it.
 * - A new connection's first request goes alone, a moment after the handshake (as wrk's does),
 *   and the next batch only once it is answered: where mp_tcp_read_time() said 0 for a first
 *   read that came after the loop saw the socket writable, the first request's keep-alive
 *   deadline had passed before it was answered, and the connection closed under the next
 *   batch (an "EOF with responses owed").
 * - The two configurations' "/" texts differ in length: a pipelined batch parsed across a
 *   reload once got the old text's length of the new text (the canned-response cache).
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>

#include "daemon/magpied_harness.h"

static char dir[64];

static void make_dir(void)
{
    harness_dir_make(dir, sizeof dir, "reload");
}

static void remove_dir(void)
{
    harness_dir_remove(dir);
}

TestSuite(reload, .init = make_dir, .fini = remove_dir, .timeout = 90);

#define CLIENTS   16
#define RUN_MS    3000
#define BATCH_MAX 24   /* pipelined requests per write, 1 to 24: past a 16 KiB read */
#define BODY      1024 /* each POST's body */
#define RCVBUF    4096 /* the clients' receive buffer: smaller than a batch's responses */

/* The two texts of GET /, of different lengths, so that a response of one generation can never
 * pass for the other's. */
#define TEXT_A "generation A"
#define TEXT_B "the other generation, B"

/* Two valid configurations (keep-alive timeouts of seconds: no client here is idle that long)
 * and an invalid one. */
static const char conf_a[] = "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
                             "[runtime]\nworkers = 2\n"
                             "[limits]\nkeepalive_timeout_ms = 10000\n"
                             "[route = /]\nhandler = text\nbody = " TEXT_A "\n"
                             "[route = /echo]\nhandler = echo\n";
static const char conf_b[] = "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
                             "[runtime]\nworkers = 2\n"
                             "[limits]\nmax_requests_per_connection = 5\n"
                             "keepalive_timeout_ms = 5000\nheader_timeout_ms = 5000\n"
                             "body_timeout_ms = 5000\nmax_header_bytes = 32768\n"
                             "max_request_line = 4096\nmax_headers = 50\n"
                             "max_body_bytes = 524288\nsend_buffer = 32768\n"
                             "[route = /]\nhandler = text\nbody = " TEXT_B "\n"
                             "[route = /echo]\nhandler = echo\n";
static const char conf_bad[] = "[limits]\nmax_requests_per_connection = many\n";

static const char *in_dir(const char *name)
{
    return harness_path(dir, name);
}

static int count_in_file(const char *path, const char *needle)
{
    static char text[1 << 20];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    int count = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        count++;
    return count;
}

/* One client thread's counts (no assertions on its thread: it reports here). */
typedef struct load {
    int port, id;
    atomic_bool *stop; /* set by the test when time is up */
    long sent;         /* requests written */
    long answered;     /* complete responses, each the right one for its request */
    long closing;      /* of those, responses that said Connection: close */
    long unanswered;   /* requests after such a response (not answered, as RFC 9112 9.6 says) */
    long lost;         /* requests without a response on a connection that closed or stalled */
    long wrong;        /* responses that were not their request's (or not whole) */
    long extra;        /* bytes after a Connection: close response */
    char first_bad[384];
} load;

static void note_bad(load *l, const char *what, const char *at, size_t len)
{
    if (l->first_bad[0] == 0)
        snprintf(l->first_bad, sizeof l->first_bad, "client %d: %s: %.*s", l->id, what,
                 (int)(len < 200 ? len : 200), at != NULL ? at : "");
}

/* A connection with a small receive buffer (set before connect, so the window starts small),
 * or -1. */
static int connect_small(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    int v = RCVBUF;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Input of one connection. */
typedef struct conn_in {
    int fd;
    char buf[1 << 16];
    size_t len;
    bool eof;        /* EOF, reset, or 5 s without a byte */
    const char *why; /* which of them */
} conn_in;

/* More bytes into in->buf; false at EOF, an error or 5 s of silence. */
static bool fill(conn_in *in)
{
    if (in->eof || in->len == sizeof in->buf)
        return false;
    struct pollfd p = {.fd = in->fd, .events = POLLIN};
    if (poll(&p, 1, 5000) != 1) {
        in->eof = true;
        in->why = "5 s without a byte";
        return false;
    }
    ssize_t n = recv(in->fd, in->buf + in->len, sizeof in->buf - in->len, 0);
    if (n <= 0) {
        in->eof = true;
        in->why = n == 0 ? "EOF" : errno == ECONNRESET ? "reset" : "error";
        return false;
    }
    in->len += (size_t)n;
    return true;
}

/* The first response in in->buf, whole: 1 with its status, whether it says Connection: close,
 * and its body; 0 when the connection ended (or went silent) before it was whole. */
static int next_response(conn_in *in, int *status, bool *closes, char *body, size_t cap,
                         size_t *body_len)
{
    for (;;) {
        char *end = memmem(in->buf, in->len, "\r\n\r\n", 4);
        if (end != NULL) {
            size_t head = (size_t)(end + 4 - in->buf);
            char saved = in->buf[head - 1];
            in->buf[head - 1] = 0; /* the head as a string, for strstr and sscanf */
            const char *cl = strcasestr(in->buf, "\r\nContent-Length: ");
            size_t length = cl != NULL ? strtoul(cl + 18, NULL, 10) : 0;
            bool close_field = strcasestr(in->buf, "\r\nConnection: close\r\n") != NULL ||
                               strcasestr(in->buf, "\r\nConnection: close\r") != NULL;
            int code = 0;
            sscanf(in->buf, "HTTP/1.1 %d", &code);
            in->buf[head - 1] = saved;
            while (in->len < head + length)
                if (!fill(in))
                    return 0;
            *status = code;
            *closes = close_field;
            *body_len = length < cap ? length : cap;
            memcpy(body, in->buf + head, *body_len);
            memmove(in->buf, in->buf + head + length, in->len - head - length);
            in->len -= head + length;
            return 1;
        }
        if (!fill(in))
            return 0;
    }
}

static void *client_main(void *arg)
{
    load *l = arg;
    conn_in *in = calloc(1, sizeof *in);
    unsigned seed = (unsigned)l->id * 7919u + 1;
    static const char get[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    char *batch = malloc(BATCH_MAX * (BODY + 128));
    char bodies[BATCH_MAX][BODY];
    bool is_post[BATCH_MAX];
    in->fd = -1;
    long seq = 0;
    /* Relaxed: a flag polled once per batch; nothing else is published through it. */
    while (!atomic_load_explicit(l->stop, memory_order_relaxed)) {
        bool fresh = in->fd < 0;
        if (fresh) {
            in->fd = connect_small(l->port);
            in->len = 0;
            in->eof = false;
            in->why = NULL;
            if (in->fd < 0) {
                note_bad(l, "connect failed", NULL, 0);
                l->lost++;
                break;
            }
        }
        /* A new connection starts with one request and goes on once it has its answer, as
         * a browser does: the connection is idle in between, under its keep-alive deadline. */
        int k = fresh ? 1 : 1 + (int)(rand_r(&seed) % BATCH_MAX);
        size_t n = 0;
        for (int i = 0; i < k; i++, seq++) {
            is_post[i] = rand_r(&seed) % 2 == 0;
            if (!is_post[i]) {
                memcpy(batch + n, get, sizeof get - 1);
                n += sizeof get - 1;
                continue;
            }
            /* The body names its request: an echo of another one's body is caught. */
            memset(bodies[i], 'a' + (int)(seq % 26), BODY);
            int t = snprintf(bodies[i], BODY, "client %d request %ld:", l->id, seq);
            bodies[i][t] = '.';
            n += (size_t)sprintf(
                batch + n, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", BODY);
            memcpy(batch + n, bodies[i], BODY);
            n += BODY;
        }
        /* A request a moment after the handshake, as from a client that waits for its
         * connect's event (wrk): magpied has accepted it and may have seen it writable. */
        if (fresh)
            usleep(rand_r(&seed) % 200);
        l->sent += k;
        /* A write that fails (the server has reset the connection) still leaves its earlier
         * responses to read. */
        for (size_t off = 0; off < n;) {
            ssize_t w = send(in->fd, batch + off, n - off, MSG_NOSIGNAL);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        bool reconnect = false;
        for (int i = 0; i < k; i++) {
            int status;
            bool closes;
            char body[BODY + 1];
            size_t blen;
            if (!next_response(in, &status, &closes, body, sizeof body - 1, &blen)) {
                /* The connection ended (or stalled) with responses owed, and the last one
                 * did not say it would. */
                l->lost += k - i;
                char what[96];
                snprintf(what, sizeof what, "%s with %d responses owed, a part of one left",
                         in->why, k - i);
                note_bad(l, what, in->buf, in->len);
                reconnect = true;
                break;
            }
            bool right =
                status == 200 &&
                (is_post[i] ? blen == BODY && memcmp(body, bodies[i], BODY) == 0
                            : (blen == strlen(TEXT_A) && memcmp(body, TEXT_A, blen) == 0) ||
                                  (blen == strlen(TEXT_B) && memcmp(body, TEXT_B, blen) == 0));
            if (!right) {
                l->wrong++;
                char what[96];
                snprintf(what, sizeof what, "%d to the %s, request %d of %d, body", status,
                         is_post[i] ? "POST" : "GET", i + 1, k);
                note_bad(l, what, body, blen);
            }
            l->answered++;
            if (closes) {
                /* The last answer on this connection: nothing may follow it. */
                l->closing++;
                l->unanswered += k - 1 - i;
                while (fill(in))
                    ;
                if (in->len != 0) {
                    l->extra += (long)in->len;
                    note_bad(l, "bytes after Connection: close", in->buf, in->len);
                }
                reconnect = true;
                break;
            }
        }
        if (reconnect || l->wrong != 0) {
            close(in->fd);
            in->fd = -1;
            if (l->wrong != 0 || l->lost != 0)
                break; /* reported: the counts after a wrong turn would only repeat it */
        }
    }
    if (in->fd >= 0)
        close(in->fd);
    free(batch);
    free(in);
    return NULL;
}

/* SIGHUP, then wait (up to 5 s) for the n-th line saying how it went. */
static void reload_and_wait(const daemon_proc *d, const char *err_log, const char *outcome, int n)
{
    kill(d->pid, SIGHUP);
    for (int i = 0; i < 250 && count_in_file(err_log, outcome) < n; i++)
        usleep(20000);
    cr_assert_eq(count_in_file(err_log, outcome), n, "no \"%s\" #%d in the log", outcome, n);
}

Test(reload, pipelined_keepalive_load_loses_no_request_across_reloads_and_request_limits,
     .timeout = 120)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    harness_write_file(conf, conf_a);
    daemon_proc d = start_with(conf, NULL, err);
    atomic_bool done = false;
    load loads[CLIENTS];
    pthread_t threads[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        loads[i] = (load){.port = d.http, .id = i, .stop = &done};
        cr_assert_eq(pthread_create(&threads[i], NULL, client_main, &loads[i]), 0);
    }
    /* Reload, B then A and so on, with the invalid file once, until the time is up. */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = 0, failed = 0;
    for (int i = 1;; i++) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= RUN_MS)
            break;
        if (i == 3) {
            harness_write_file(conf, conf_bad);
            reload_and_wait(&d, err, "keeping the running configuration", ++failed);
        } else {
            harness_write_file(conf, i % 2 ? conf_b : conf_a);
            reload_and_wait(&d, err, "reloaded", ++ok);
        }
        usleep(20000);
    }
    atomic_store_explicit(&done, true, memory_order_relaxed);
    load sum = {0};
    const char *bad = NULL;
    for (int i = 0; i < CLIENTS; i++) {
        cr_assert_eq(pthread_join(threads[i], NULL), 0);
        sum.sent += loads[i].sent;
        sum.answered += loads[i].answered;
        sum.closing += loads[i].closing;
        sum.unanswered += loads[i].unanswered;
        sum.lost += loads[i].lost;
        sum.wrong += loads[i].wrong;
        sum.extra += loads[i].extra;
        if (bad == NULL && loads[i].first_bad[0] != 0)
            bad = loads[i].first_bad;
    }
    cr_log_info("%d reloads (+%d refused): %ld requests, %ld answered, %ld closes, %ld past them",
                ok, failed, sum.sent, sum.answered, sum.closing, sum.unanswered);
    cr_assert_eq(sum.lost, 0, "%ld of %ld requests lost; %s", sum.lost, sum.sent, bad);
    cr_assert_eq(sum.wrong, 0, "%ld wrong responses; %s", sum.wrong, bad);
    cr_assert_eq(sum.extra, 0, "%ld bytes after Connection: close; %s", sum.extra, bad);
    cr_assert_eq(sum.answered + sum.unanswered, sum.sent);
    /* The paths under test were taken: both configurations served, the limit closed some. */
    cr_assert_geq(ok, 2, "only %d reloads in %d ms", ok, RUN_MS);
    cr_assert_eq(failed, 1);
    cr_assert_gt(sum.closing, 0, "no response said Connection: close");
    cr_assert_eq(stop(&d), 0);
}
