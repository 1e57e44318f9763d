/* floor: the least an HTTP/1.1 keep-alive server built on libuv + llhttp can do per request,
 * the yardstick magpied's per-request cost is measured against (instructions.sh).
 *
 * One thread, one uv_loop: accept, uv_read_start, llhttp_execute over each read, and every
 * response parsed from that read sent in one uv_try_write (an iovec per response, all
 * pointing at the same cached bytes); a uv_write only for a tail the kernel would not take.
 * Every request is answered with the bytes magpied gives `GET /` (its Date refreshed once a
 * second, not formatted per response). No routes, limits or timeouts: it is a floor, not a
 * server.
 *
 *   floor PORT        listens on 127.0.0.1:PORT until SIGTERM or SIGINT
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llhttp.h"
#include "uv.h"

#define BODY       "Hello, World!"
#define READ_BYTES 65536
#define MAX_IOV    64

typedef struct conn {
    uv_tcp_t tcp;
    llhttp_t parser;
    unsigned done;   /* responses owed for the current read */
    int close_after; /* a request asked for Connection: close */
} conn;

typedef struct tail_write {
    uv_write_t req;
    char bytes[];
} tail_write;

static uv_loop_t *loop;
static uv_tcp_t listener;
static uv_signal_t sig_term, sig_int;
static char read_buf[READ_BYTES]; /* one thread: every read is consumed before the next */

static struct {
    time_t sec;
    size_t len;
    char text[256];
} resp = {.sec = (time_t)-1};

static void refresh_response(void)
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    if (now == resp.sec)
        return;
    struct tm tm;
    gmtime_r(&now, &tm);
    int n = snprintf(resp.text, sizeof(resp.text),
                     "HTTP/1.1 200 OK\r\nDate: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n"
                     "Server: magpied\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n"
                     "%s",
                     days[tm.tm_wday % 7], tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, sizeof(BODY) - 1, BODY);
    resp.len = (size_t)n;
    resp.sec = now;
}

static int on_message_complete(llhttp_t *p)
{
    conn *c = p->data;
    c->done++;
    if (!llhttp_should_keep_alive(p))
        c->close_after = 1;
    return 0;
}

static const llhttp_settings_t settings = {.on_message_complete = on_message_complete};

static void on_close(uv_handle_t *h)
{
    free(h->data);
}

static void close_conn(conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void on_tail_written(uv_write_t *req, int status)
{
    conn *c = req->handle->data;
    free(req);
    if (status != 0 || c->close_after)
        close_conn(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    *buf = uv_buf_init(read_buf, sizeof(read_buf));
}

/* n responses: one uv_try_write of up to MAX_IOV iovecs at a time; what the kernel does not
 * take goes out by uv_write from a private copy. */
static void send_responses(conn *c, unsigned n)
{
    uv_buf_t iov[MAX_IOV];
    while (n != 0) {
        unsigned k = n < MAX_IOV ? n : MAX_IOV;
        for (unsigned i = 0; i < k; i++)
            iov[i] = uv_buf_init(resp.text, (unsigned)resp.len);
        size_t want = (size_t)k * resp.len;
        int sent = uv_try_write((uv_stream_t *)&c->tcp, iov, k);
        if (sent == UV_EAGAIN)
            sent = 0;
        if (sent < 0) {
            close_conn(c);
            return;
        }
        n -= k;
        if ((size_t)sent == want)
            continue;
        /* The tail of this batch plus the batches after it. */
        size_t left = want - (size_t)sent + (size_t)n * resp.len;
        tail_write *t = malloc(sizeof *t + left);
        if (t == NULL) {
            close_conn(c);
            return;
        }
        size_t off = (size_t)sent % resp.len, at = 0;
        memcpy(t->bytes, resp.text + off, resp.len - off);
        at = resp.len - off;
        while (at < left) {
            memcpy(t->bytes + at, resp.text, resp.len);
            at += resp.len;
        }
        uv_buf_t b = uv_buf_init(t->bytes, (unsigned)left);
        if (uv_write(&t->req, (uv_stream_t *)&c->tcp, &b, 1, on_tail_written) != 0) {
            free(t);
            close_conn(c);
        }
        return;
    }
    if (c->close_after)
        close_conn(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = s->data;
    if (nread < 0) {
        close_conn(c);
        return;
    }
    if (nread == 0)
        return;
    c->done = 0;
    llhttp_errno_t e = llhttp_execute(&c->parser, buf->base, (size_t)nread);
    if (c->done != 0) {
        refresh_response();
        send_responses(c, c->done);
    }
    if (e != HPE_OK)
        close_conn(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status != 0)
        return;
    conn *c = malloc(sizeof *c);
    if (c == NULL)
        return;
    c->done = 0;
    c->close_after = 0;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        close_conn(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &settings);
    c->parser.data = c;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void walk_close(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, h->data != NULL ? on_close : NULL); /* only connections carry data */
}

static void on_signal(uv_signal_t *s, int signum)
{
    uv_walk(loop, walk_close, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    loop = uv_default_loop();
    struct sockaddr_in addr;
    int rc = uv_ip4_addr("127.0.0.1", atoi(argv[1]), &addr);
    if (rc == 0)
        rc = uv_tcp_init(loop, &listener);
    if (rc == 0)
        rc = uv_tcp_bind(&listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&listener, 1024, on_connection);
    if (rc != 0) {
        fprintf(stderr, "floor: 127.0.0.1:%s: %s\n", argv[1], uv_strerror(rc));
        return 1;
    }
    uv_signal_init(loop, &sig_term);
    uv_signal_init(loop, &sig_int);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return 0;
}
