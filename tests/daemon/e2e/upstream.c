/* upstream: a deliberately badly-behaved HTTP/1.1 origin server for the proxy's end-to-end
 * suites (tests/daemon/e2e/test_proxy_*.c). One process, a thread per connection, plain
 * blocking sockets: nothing here is fast, all of it is exact about the bytes it sends.
 *
 *   upstream [PORT [IP]]  listens on IP:PORT (127.0.0.1 by default; 0 or no PORT: a port
 *                       from the kernel) and prints "upstream port=P noaccept=Q\n" once it
 *                       accepts
 *
 * Q is a second port bound with a full backlog that is never accepted from: a connect to it
 * hangs (the kernel drops the SYNs), as a wedged server does.
 *
 * What each request gets is chosen by its path, so one upstream serves a whole suite:
 *
 *   /stats                    "accepts=A requests=R bad=B strays=S\n" (a first request of a
 *                             connection that asks for /stats is not counted in A or R; S:
 *                             the unrequested responses /mode/extra has sent so far)
 *   anything else             200, the body the exact bytes received for the request (head,
 *                             then the body as framed on the wire), X-Conn (connection number),
 *                             X-Req (request number on the connection), X-Body-Bytes (the
 *                             decoded body length), X-Upgrade (the Upgrade field seen, or none)
 *   /mode/slowhead?ms=N       the echo after N ms (/mode/ may follow a prefix: /ws/mode/...)
 *   /mode/slowbody?ms=N       the echo's head and half its body, the rest after N ms
 *   /mode/garbage?v=N         a malformed response (see garbage[] below)
 *   /mode/bighead?bytes=N     a 200 with one header field of N bytes
 *   /mode/cut?at=none|head|body|chunk   close before the response, after its head, mid-body
 *                             (Content-Length), or mid-chunk
 *   /mode/reset?at=none|body  RST (SO_LINGER 0) before the response or mid-body
 *   /mode/extra?delay_ms=N    a complete response, then (after N ms) a second, unrequested one
 *                             "SMUGGLED"; the connection then goes on serving requests
 *   /mode/interim?codes=100,102,103   each 1xx first, then the echo; a 103 carries a Link
 *                             field and hop-by-hop ones (Connection: X-Hop, X-Hop, Keep-Alive)
 *   /mode/endless1xx          102 Processing, again and again, until the connection fails
 *   /mode/eof?bytes=N         a response delimited by closing the connection
 *   /mode/chunked             a chunked body "hello world" with an extension and a trailer
 *   /mode/trailers            a chunked body "hello" with trailers: X-Checksum and
 *                             Server-Timing (end-to-end), Content-Length, Host, Content-Type,
 *                             X-Hop (named by the head's Connection), Keep-Alive (none may pass)
 *   /mode/hop                 a chunked response carrying every hop-by-hop field
 *   /mode/status?code=204|304 that status with Content-Length: 5 and 5 body bytes anyway
 *   /mode/headbody            to HEAD: Content-Length: 10, and 10 body bytes anyway
 *   /mode/big?bytes=N         a 200 of N bytes (the byte at offset i is 'a' + i % 26)
 *   /mode/sink?pause_ms=N     read nothing for N ms, then the whole body; answer its length
 *   /mode/text?bytes=N&frame=length|chunked|eof&code=C&noise=1&ce=X&cc=X&vary=X&type=X&trailer=1
 *                             a C (200) of N bytes (1000) of Content-Type X (text/plain) with
 *                             ETag "v1" and Accept-Ranges, framed as asked (length), with
 *                             Content-Encoding, Cache-Control and Vary when given; the body
 *                             'a' + i % 26, or with noise letters from a fixed generator (text
 *                             that compresses poorly); chunked, X-Trailer: t in the last chunk
 *                             with trailer=1; to HEAD, the head alone
 *   /mode/upgrade?linger_ms=N 101 to a request with Upgrade, then echo raw bytes until EOF,
 *                             then (after N ms, when given) "BYE\n" and close; without Upgrade,
 *                             the echo
 *   /mode/force101            101 and raw bytes whatever the request asked
 *   /mode/clte                a 200 with Content-Length: 3 and a chunked body "hello"
 *   /mode/fold                a 200 whose X-Fold field is folded (obs-fold)
 *   /mode/saysclose           a 200 with Connection: close, the connection kept open
 *   /mode/http10              an HTTP/1.0 200 (no keep-alive), the connection kept open;
 *                             after either, an echo on that connection carries X-After-Close
 *   /mode/early?linger_ms=N&drain=0|1   413 before reading the body, then (after N ms of
 *                             reading and dropping the body, or of reading nothing) close
 *
 * A request whose framing is ambiguous (Content-Length and Transfer-Encoding, two
 * Content-Lengths, a bad chunk) or has a bare LF in its head is counted in "bad" and answered
 * 400 with the connection closed: a proxy in front must never send one. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEAD (1 << 20)
#define ECHO_CAP (1 << 20) /* bytes of a request echoed at most */

/* Read by the test through /stats; relaxed: counters, no data published through them. */
static atomic_long accepts, requests, bad, strays;

typedef struct conn {
    int fd;
    long id;
    char *buf;
    size_t len, cap; /* bytes buf holds, its size */
    size_t pos;      /* start of what the current request has not consumed */
    bool said_close; /* a response said the connection ends: a later request is a reuse */
} conn;

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool send_str(int fd, const char *s)
{
    return send_all(fd, s, strlen(s));
}

/* Read more into c->buf; false on EOF or error. */
static bool fill(conn *c)
{
    if (c->cap - c->len < 16384) {
        if (c->cap >= MAX_HEAD + ECHO_CAP * 2)
            return false;
        c->cap *= 2;
        char *nb = realloc(c->buf, c->cap);
        if (nb == NULL)
            return false;
        c->buf = nb;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        c->len += (size_t)n;
        return true;
    }
}

/* Make sure n bytes from pos are buffered. */
static bool need(conn *c, size_t n)
{
    while (c->len - c->pos < n)
        if (!fill(c))
            return false;
    return true;
}

/* Consume n body bytes from pos, reading as needed; of a long body only the first ECHO_CAP
 * bytes after start stay in the buffer (the echo is capped there anyway). */
static bool skip(conn *c, size_t start, unsigned long long n)
{
    while (n > 0) {
        if (c->len == c->pos && !fill(c))
            return false;
        size_t k = c->len - c->pos < n ? c->len - c->pos : (size_t)n;
        c->pos += k;
        n -= k;
        size_t keep = start + ECHO_CAP;
        if (c->pos > keep) {
            memmove(c->buf + keep, c->buf + c->pos, c->len - c->pos);
            c->len -= c->pos - keep;
            c->pos = keep;
        }
    }
    return true;
}

/* The offset after the line starting at off (CRLF included); 0 when it is not all here. */
static size_t line_end(conn *c, size_t off)
{
    for (;;) {
        for (size_t i = off; i + 1 < c->len; i++)
            if (c->buf[i] == '\r' && c->buf[i + 1] == '\n')
                return i + 2;
        if (!fill(c))
            return 0;
    }
}

/* How many fields called name the head has; the first one's value into out. */
static int field(const char *head, size_t hlen, const char *name, char *out, size_t cap)
{
    int count = 0;
    size_t nl = strlen(name);
    const char *end = head + hlen;
    const char *p = memchr(head, '\n', hlen);
    if (out && cap)
        out[0] = 0;
    while (p != NULL && p + 1 < end) {
        p++;
        if ((size_t)(end - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            const char *e = v;
            while (e < end && *e != '\r' && *e != '\n')
                e++;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            if (count == 0 && out && cap) {
                size_t n = (size_t)(e - v) < cap - 1 ? (size_t)(e - v) : cap - 1;
                memcpy(out, v, n);
                out[n] = 0;
            }
            count++;
        }
        p = memchr(p, '\n', (size_t)(end - p));
    }
    return count;
}

/* The integer value of ?key= / &key= in target, or dflt. */
static long qint(const char *target, const char *key, long dflt)
{
    const char *q = strchr(target, '?');
    size_t kl = strlen(key);
    for (const char *p = q; p != NULL; p = strchr(p + 1, '&'))
        if (strncmp(p + 1, key, kl) == 0 && p[1 + kl] == '=')
            return strtol(p + 2 + kl, NULL, 10);
    return dflt;
}

static const char *qstr(const char *target, const char *key, char *out, size_t cap)
{
    const char *q = strchr(target, '?');
    size_t kl = strlen(key);
    out[0] = 0;
    for (const char *p = q; p != NULL; p = strchr(p + 1, '&'))
        if (strncmp(p + 1, key, kl) == 0 && p[1 + kl] == '=') {
            size_t n = strcspn(p + 2 + kl, "& ");
            n = n < cap - 1 ? n : cap - 1;
            memcpy(out, p + 2 + kl, n);
            out[n] = 0;
            break;
        }
    return out;
}

/* Whether the path has /mode/MODE in it (after a route's prefix: /ws/mode/upgrade). */
static bool mode_is(const char *target, const char *mode)
{
    const char *m = strstr(target, "/mode/");
    size_t n = strlen(mode);
    return m != NULL && strncmp(m + 6, mode, n) == 0 && (m[6 + n] == 0 || m[6 + n] == '?');
}

/* Read the body framed as the head says; its decoded length into *body_bytes. Returns 1, 0 on
 * EOF (a request cut short is not one), -1 on ambiguous framing. Consumes through the body's
 * end (c->pos moves there). */
static int read_body(conn *c, size_t start, const char *head, size_t hlen, size_t *body_bytes)
{
    char te[256], cl[64];
    int n_te = field(head, hlen, "Transfer-Encoding", te, sizeof te);
    int n_cl = field(head, hlen, "Content-Length", cl, sizeof cl);
    *body_bytes = 0;
    if ((n_te > 0 && n_cl > 0) || n_cl > 1 || n_te > 1)
        return -1;
    if (n_te == 1) {
        if (strcasecmp(te, "chunked") != 0)
            return -1;
        for (;;) {
            size_t e = line_end(c, c->pos);
            if (e == 0)
                return 0;
            char *endp;
            errno = 0;
            if (!isxdigit((unsigned char)c->buf[c->pos]))
                return -1;
            unsigned long long size = strtoull(c->buf + c->pos, &endp, 16);
            if (errno != 0 || endp - (c->buf + c->pos) > 15 || (*endp != '\r' && *endp != ';'))
                return -1;
            c->pos = e;
            if (size == 0)
                break;
            if (!skip(c, start, size) || !need(c, 2))
                return 0;
            if (c->buf[c->pos] != '\r' || c->buf[c->pos + 1] != '\n')
                return -1;
            c->pos += 2;
            *body_bytes += size;
        }
        for (;;) { /* trailers, then the empty line */
            size_t e = line_end(c, c->pos);
            if (e == 0)
                return 0;
            bool empty = e == c->pos + 2;
            c->pos = e;
            if (empty)
                return 1;
        }
    }
    if (n_cl == 1) {
        char *endp;
        if (!isdigit((unsigned char)cl[0]))
            return -1;
        unsigned long long n = strtoull(cl, &endp, 10);
        if (*endp != 0)
            return -1;
        if (!skip(c, start, n))
            return 0;
        *body_bytes = n;
    }
    return 1;
}

static void echo(conn *c, long req, bool head_method, size_t start, size_t body_bytes,
                 const char *upgrade)
{
    size_t n = c->pos - start;
    if (n > ECHO_CAP)
        n = ECHO_CAP;
    char h[512];
    snprintf(h, sizeof h,
             "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
             "X-Conn: %ld\r\nX-Req: %ld\r\nX-Body-Bytes: %zu\r\nX-Upgrade: %s\r\n%s\r\n",
             n, c->id, req, body_bytes, upgrade[0] ? upgrade : "none",
             c->said_close ? "X-After-Close: 1\r\n" : "");
    send_str(c->fd, h);
    if (!head_method)
        send_all(c->fd, c->buf + start, n);
}

static const char *const garbage[] = {
    "GARBAGE\r\n\r\n",
    "HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nBad Header\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nhello",
    "HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\x01\x02\r\n\r\nok",
    "ICY 200 OK\r\nContent-Length: 2\r\n\r\nok",
};
#define N_GARBAGE (sizeof garbage / sizeof garbage[0])
/* Their lengths: one has a NUL inside. */
static size_t garbage_len(size_t v)
{
    return v == 5 ? strlen(garbage[v]) + 1 + strlen(garbage[v] + strlen(garbage[v]) + 1)
                  : strlen(garbage[v]);
}

static void rst_close(int fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

/* Serve one request; false when the connection is to be closed. */
static bool serve(conn *c, long req)
{
    size_t start = c->pos;
    size_t hend = 0;
    for (;;) {
        char *p = c->buf + start;
        size_t avail = c->len - start;
        char *e = avail >= 4 ? memmem(p, avail, "\r\n\r\n", 4) : NULL;
        if (e != NULL) {
            hend = (size_t)(e - c->buf) + 4;
            break;
        }
        if (avail > MAX_HEAD || !fill(c))
            return false;
    }
    const char *head = c->buf + start;
    size_t hlen = hend - start;
    /* A bare LF anywhere in the head: never from a correct proxy. */
    for (size_t i = 0; i < hlen; i++)
        if (head[i] == '\n' && (i == 0 || head[i - 1] != '\r')) {
            atomic_fetch_add_explicit(&bad, 1, memory_order_relaxed);
            send_str(c->fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n"
                            "Connection: close\r\n\r\nbare-lf-in\n");
            return false;
        }
    char method[32] = "", target[4096] = "", line[4200];
    size_t ll = hlen < sizeof line - 1 ? hlen : sizeof line - 1; /* the buffer has no NUL */
    memcpy(line, head, ll);
    line[ll] = 0;
    if (sscanf(line, "%31s %4095s", method, target) != 2)
        return false;
    bool is_head = strcmp(method, "HEAD") == 0;
    char upgrade[256], conn_hdr[256];
    field(head, hlen, "Upgrade", upgrade, sizeof upgrade);
    field(head, hlen, "Connection", conn_hdr, sizeof conn_hdr);
    bool close_after = strcasestr(conn_hdr, "close") != NULL;
    c->pos = hend;

    if (mode_is(target, "sink"))
        sleep_ms(qint(target, "pause_ms", 0));
    if (mode_is(target, "early")) { /* answer before the body, then close (413's shape) */
        atomic_fetch_add_explicit(&requests, 1, memory_order_relaxed);
        send_str(c->fd, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 5\r\n"
                        "Connection: close\r\n\r\nearly");
        shutdown(c->fd, SHUT_WR);
        /* Read and drop the body for a while: closing with unread bytes would send a reset,
         * which can destroy the answer before the proxy reads it (RFC 9112 section 9.6). */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        long linger = qint(target, "linger_ms", 1000);
        char drop[16384];
        if (qint(target, "drain", 1) == 0) { /* or read nothing, as a stuck server */
            sleep_ms(linger);
            return false;
        }
        for (;;) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
            struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
            if (ms >= linger || poll(&pfd, 1, (int)(linger - ms)) != 1 ||
                recv(c->fd, drop, sizeof drop, 0) <= 0)
                break;
        }
        return false;
    }
    size_t body_bytes;
    int framed = read_body(c, start, head, hlen, &body_bytes); /* may move c->buf */
    if (framed == 0)
        return false;
    if (framed < 0) {
        atomic_fetch_add_explicit(&bad, 1, memory_order_relaxed);
        send_str(c->fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 14\r\n"
                        "Connection: close\r\n\r\nbad-framing-in");
        return false;
    }
    if (strcmp(target, "/stats") == 0) {
        if (req == 1)
            atomic_fetch_sub_explicit(&accepts, 1, memory_order_relaxed);
        char b[128], h[128];
        int n = snprintf(b, sizeof b, "accepts=%ld requests=%ld bad=%ld strays=%ld\n",
                         atomic_load_explicit(&accepts, memory_order_relaxed),
                         atomic_load_explicit(&requests, memory_order_relaxed),
                         atomic_load_explicit(&bad, memory_order_relaxed),
                         atomic_load_explicit(&strays, memory_order_relaxed));
        snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", n);
        return send_str(c->fd, h) && send_str(c->fd, b) && !close_after;
    }
    atomic_fetch_add_explicit(&requests, 1, memory_order_relaxed);

    char h[512], s[64];
    if (mode_is(target, "slowhead")) {
        sleep_ms(qint(target, "ms", 1000));
    } else if (mode_is(target, "slowbody")) {
        size_t n = c->pos - start;
        snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nX-Conn: %ld\r\n\r\n", n,
                 c->id);
        if (!send_str(c->fd, h) || !send_all(c->fd, c->buf + start, n / 2))
            return false;
        sleep_ms(qint(target, "ms", 1000));
        return send_all(c->fd, c->buf + start + n / 2, n - n / 2) && !close_after;
    } else if (mode_is(target, "garbage")) {
        size_t v = (size_t)qint(target, "v", 0) % N_GARBAGE;
        send_all(c->fd, garbage[v], garbage_len(v));
        return false;
    } else if (mode_is(target, "bighead")) {
        long n = qint(target, "bytes", 70000);
        char *big = malloc((size_t)n + 1);
        if (big == NULL)
            return false;
        memset(big, 'b', (size_t)n);
        big[n] = 0;
        bool ok = send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Big: ") &&
                  send_str(c->fd, big) && send_str(c->fd, "\r\n\r\nok");
        free(big);
        return ok && !close_after;
    } else if (mode_is(target, "cut")) {
        qstr(target, "at", s, sizeof s);
        if (strcmp(s, "head") == 0)
            send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
        else if (strcmp(s, "body") == 0)
            send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
        else if (strcmp(s, "chunk") == 0)
            send_str(c->fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "5\r\nhello\r\na\r\n01234");
        return false;
    } else if (mode_is(target, "reset")) {
        qstr(target, "at", s, sizeof s);
        if (strcmp(s, "body") == 0) {
            send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
            sleep_ms(20); /* let the bytes leave before the RST overtakes them */
        }
        rst_close(c->fd);
        return false;
    } else if (mode_is(target, "extra")) {
        snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Conn: %ld\r\n\r\nok",
                 c->id);
        send_str(c->fd, h);
        long delay = qint(target, "delay_ms", 0);
        if (delay > 0)
            sleep_ms(delay);
        bool sent = send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED");
        atomic_fetch_add_explicit(&strays, 1, memory_order_relaxed); /* after: it is sent */
        return sent && !close_after;
    } else if (mode_is(target, "interim")) {
        qstr(target, "codes", s, sizeof s);
        for (char *p = s; *p;) {
            long code = strtol(p, &p, 10);
            snprintf(h, sizeof h, "HTTP/1.1 %ld %s\r\n%s\r\n", code,
                     code == 100   ? "Continue"
                     : code == 102 ? "Processing"
                                   : "Early Hints",
                     code == 103 ? "Link: </a.css>; rel=preload\r\nConnection: X-Hop\r\n"
                                   "X-Hop: secret\r\nKeep-Alive: timeout=5\r\n"
                                 : "");
            if (!send_str(c->fd, h))
                return false;
            while (*p == ',')
                p++;
            if (*p && !isdigit((unsigned char)*p))
                break;
        }
    } else if (mode_is(target, "endless1xx")) {
        while (send_str(c->fd, "HTTP/1.1 102 Processing\r\n\r\n")) {
        }
        return false;
    } else if (mode_is(target, "eof")) {
        long n = qint(target, "bytes", 1000);
        send_str(c->fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n");
        for (long i = 0; i < n; i++) {
            char ch = (char)('a' + i % 26);
            if (!send_all(c->fd, &ch, 1))
                break;
        }
        return false;
    } else if (mode_is(target, "chunked")) {
        return send_str(c->fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Tr\r\n"
                               "\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Tr: v\r\n\r\n") &&
               !close_after;
    } else if (mode_is(target, "trailers")) {
        return send_str(c->fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                               "Trailer: X-Checksum, Server-Timing\r\nConnection: X-Hop\r\n\r\n"
                               "5\r\nhello\r\n0\r\nX-Checksum: 5d41402a\r\n"
                               "Content-Length: 99\r\nHost: evil.example\r\n"
                               "Content-Type: text/evil\r\nX-Hop: secret\r\n"
                               "Keep-Alive: timeout=5\r\nServer-Timing: app;dur=7\r\n\r\n") &&
               !close_after;
    } else if (mode_is(target, "hop")) {
        return send_str(c->fd,
                        "HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\n"
                        "Keep-Alive: timeout=5\r\nX-Secret: s\r\nProxy-Connection: keep-alive\r\n"
                        "TE: trailers\r\nTrailer: X-Tr\r\nUpgrade: h2c\r\n"
                        "Transfer-Encoding: chunked\r\nX-End-To-End: kept\r\n\r\n"
                        "5\r\nhello\r\n0\r\nX-Tr: t\r\n\r\n") &&
               !close_after;
    } else if (mode_is(target, "status")) {
        long code = qint(target, "code", 204);
        snprintf(h, sizeof h, "HTTP/1.1 %ld %s\r\nContent-Length: 5\r\nX-Conn: %ld\r\n\r\nXXXXX",
                 code, code == 204 ? "No Content" : "Not Modified", c->id);
        send_str(c->fd, h);
        return !close_after;
    } else if (mode_is(target, "headbody")) {
        snprintf(h, sizeof h,
                 "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-Conn: %ld\r\n\r\n0123456789", c->id);
        send_str(c->fd, h);
        return !close_after;
    } else if (mode_is(target, "big")) {
        long n = qint(target, "bytes", 1 << 20);
        snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %ld\r\n\r\n", n);
        if (!send_str(c->fd, h))
            return false;
        char chunk[26 * 2521]; /* a multiple of 26: every chunk starts at 'a' */
        for (size_t i = 0; i < sizeof chunk; i++)
            chunk[i] = (char)('a' + i % 26);
        for (long left = n; left > 0;) {
            size_t k = (size_t)left < sizeof chunk ? (size_t)left : sizeof chunk;
            if (!send_all(c->fd, chunk, k))
                return false;
            left -= (long)k;
        }
        return !close_after;
    } else if (mode_is(target, "text")) {
        long n = qint(target, "bytes", 1000), code = qint(target, "code", 200);
        char frame[16], ce[32], cc[32], vary[32], type[64];
        qstr(target, "frame", frame, sizeof frame);
        qstr(target, "ce", ce, sizeof ce);
        qstr(target, "cc", cc, sizeof cc);
        qstr(target, "vary", vary, sizeof vary);
        qstr(target, "type", type, sizeof type);
        bool chunked = strcmp(frame, "chunked") == 0, eof = strcmp(frame, "eof") == 0;
        int w = snprintf(h, sizeof h,
                         "HTTP/1.1 %ld X\r\nContent-Type: %s\r\nETag: \"v1\"\r\n"
                         "Accept-Ranges: bytes\r\n",
                         code, type[0] != 0 ? type : "text/plain");
        if (ce[0] != 0)
            w += snprintf(h + w, sizeof h - (size_t)w, "Content-Encoding: %s\r\n", ce);
        if (cc[0] != 0)
            w += snprintf(h + w, sizeof h - (size_t)w, "Cache-Control: %s\r\n", cc);
        if (vary[0] != 0)
            w += snprintf(h + w, sizeof h - (size_t)w, "Vary: %s\r\n", vary);
        if (chunked)
            w += snprintf(h + w, sizeof h - (size_t)w, "Transfer-Encoding: chunked\r\n\r\n");
        else if (eof)
            w += snprintf(h + w, sizeof h - (size_t)w, "Connection: close\r\n\r\n");
        else
            w += snprintf(h + w, sizeof h - (size_t)w, "Content-Length: %ld\r\n\r\n", n);
        if (!send_str(c->fd, h))
            return false;
        if (is_head)
            return !eof && !close_after;
        bool noise = qint(target, "noise", 0) != 0;
        unsigned seed = 12345;
        static _Thread_local char piece[16384 + 16];
        for (long left = n, at = 0; left > 0;) {
            size_t k = (size_t)left < 16384 ? (size_t)left : 16384;
            size_t o = 0;
            if (chunked)
                o = (size_t)snprintf(piece, sizeof piece, "%zx\r\n", k);
            for (size_t i = 0; i < k; i++, at++) {
                seed = seed * 1103515245u + 12345u;
                piece[o + i] = (char)('a' + (noise ? (seed >> 16) % 26 : (unsigned)(at % 26)));
            }
            if (!send_all(c->fd, piece, o + k) || (chunked && !send_str(c->fd, "\r\n")))
                return false;
            left -= (long)k;
        }
        bool trailer = qint(target, "trailer", 0) != 0;
        if (chunked && !send_str(c->fd, trailer ? "0\r\nX-Trailer: t\r\n\r\n" : "0\r\n\r\n"))
            return false;
        return !eof && !close_after;
    } else if (mode_is(target, "sink")) {
        int n = snprintf(s, sizeof s, "%zu", body_bytes);
        snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", n, s);
        return send_str(c->fd, h) && !close_after;
    } else if (mode_is(target, "saysclose") || mode_is(target, "http10")) {
        bool v10 = mode_is(target, "http10");
        snprintf(h, sizeof h, "HTTP/1.%d 200 OK\r\nContent-Length: 2\r\nX-Conn: %ld\r\n%s\r\nok",
                 v10 ? 0 : 1, c->id, v10 ? "" : "Connection: close\r\n");
        c->said_close = true; /* and the connection stays open, to catch a reuse */
        return send_str(c->fd, h);
    } else if (mode_is(target, "clte")) { /* both framings; the connection stays open */
        snprintf(h, sizeof h,
                 "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n"
                 "X-Conn: %ld\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                 c->id);
        return send_str(c->fd, h) && !close_after;
    } else if (mode_is(target, "fold")) { /* an obs-fold in a response field */
        snprintf(h, sizeof h,
                 "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 2\r\nX-Conn: %ld\r\n\r\nok",
                 c->id);
        return send_str(c->fd, h) && !close_after;
    } else if (mode_is(target, "force101")) {
        send_str(c->fd, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\n\r\nRAW-AFTER-101");
        return false;
    } else if (mode_is(target, "upgrade") && upgrade[0]) {
        if (!send_str(c->fd, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             "Connection: Upgrade\r\n\r\n"))
            return false;
        for (;;) { /* raw bytes both ways from here */
            if (c->len > c->pos) {
                if (!send_all(c->fd, c->buf + c->pos, c->len - c->pos))
                    return false;
                c->pos = c->len = 0;
            }
            if (!fill(c))
                break;
        }
        long linger = qint(target, "linger_ms", -1); /* the peer half-closed: a last word */
        if (linger >= 0) {
            sleep_ms(linger);
            send_str(c->fd, "BYE\n");
        }
        return false;
    }
    echo(c, req, is_head, start, body_bytes, upgrade);
    return !close_after;
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (long req = 1;; req++) {
        if (!serve(c, req))
            break;
        /* Keep what a pipelining peer sent beyond this request. */
        memmove(c->buf, c->buf + c->pos, c->len - c->pos);
        c->len -= c->pos;
        c->pos = 0;
    }
    close(c->fd);
    free(c->buf);
    free(c);
    return NULL;
}

static int listen_on(int port, int backlog, const char *ip)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ip != NULL && inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        fprintf(stderr, "upstream: bad address %s\n", ip);
        exit(1);
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, backlog) != 0) {
        perror("upstream: listen");
        exit(1);
    }
    return fd;
}

static int port_of(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    return ntohs(a.sin_port);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    int lfd = listen_on(argc > 1 ? atoi(argv[1]) : 0, 512, argc > 2 ? argv[2] : NULL);
    /* The wedged port: a backlog of 0 holds one connection, which we make ourselves; after
     * that the kernel drops SYNs and a connect waits for its own timeout. */
    int nfd = listen_on(0, 0, NULL);
    int nport = port_of(nfd);
    for (int i = 0; i < 2; i++) {
        int cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)nport)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        (void)connect(cfd, (struct sockaddr *)&a, sizeof a); /* kept open, never used */
    }
    printf("upstream port=%d noaccept=%d\n", port_of(lfd), nport);
    fflush(stdout);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
                continue;
            perror("upstream: accept");
            return 1;
        }
        conn *c = calloc(1, sizeof *c);
        c->fd = fd;
        c->id = atomic_fetch_add_explicit(&accepts, 1, memory_order_relaxed) + 1;
        c->cap = 65536;
        c->buf = malloc(c->cap);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, conn_main, c) != 0) {
            close(fd);
            free(c->buf);
            free(c);
        }
        pthread_attr_destroy(&attr);
    }
}
