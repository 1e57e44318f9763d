/* End-to-end tests of compression on the fly of proxied responses (proxy_msg.h, a proxy
 * route's compress): the upstream's body coded as it streams, whatever its framing (length,
 * chunked, close-delimited), re-framed chunked over HTTP/1.1 and in DATA over HTTP/2, Vary
 * merged with the upstream's, the ETag weakened; never a response already coded, a 206, one
 * with Cache-Control: no-transform, a small or uncompressible one, HEAD, HTTP/1.0; and
 * magpied's memory bounded while a client reads a coded body slowly. */
#include <criterion/criterion.h>
#include "daemon/decode_body.h"
#include "daemon/e2e/proxy_harness.h"

TestSuite(proxy_compress, .init = proxy_dir_make, .fini = proxy_dir_remove, .timeout = 60);

/* magpied with h2c on, / proxied to the upstream u with compress = gzip zstd. */
static daemon_proc cz_start(const upstream_proc *u)
{
    return proxy_start_h2("[upstream app]\nserver = 127.0.0.1:%d\nbuffer_bytes = 65536\n"
                          "read_timeout_ms = 30000\n"
                          "[route /]\nhandler = proxy\nupstream = app\ncompress = gzip zstd\n",
                          u->port);
}

/* A client that takes gzip says so. */
#define AE_GZIP "Accept-Encoding: gzip\r\n"

/* The body /mode/text sends without noise: n bytes of 'a' + i % 26. */
static bool is_text(const char *b, size_t n, size_t want)
{
    if (n != want)
        return false;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (char)('a' + i % 26))
            return false;
    return true;
}

/* in[0..n) decoded by coding into a malloc'd buffer (1 MiB at most); *len its length. */
static char *decode(const char *coding, const char *in, size_t n, size_t *len)
{
    size_t cap = 1 << 20;
    char *out = malloc(cap);
    cr_assert_not_null(out);
    *len = decode_body(coding, in, n, out, cap);
    return out;
}

/* GET path over HTTP/1.1 with these more fields. */
static response fetch(int port, const char *path, const char *fields)
{
    char req[1024];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", path,
             fields);
    return ask(port, req);
}

/* A response coded with coding: chunked, no length, no ranges, weak ETag, Vary, decoding to
 * want bytes of the text. */
static void expect_coded(response *r, const char *coding, size_t want)
{
    char v[128];
    cr_assert_eq(r->status, 200, "%s", r->head);
    cr_assert(r->complete, "%s", r->head);
    cr_expect_eq(head_field(r->head, "Content-Encoding", v, sizeof v), 1, "%s", r->head);
    cr_expect_str_eq(v, coding);
    cr_expect(r->chunked, "chunked: %s", r->head);
    cr_expect_eq(head_field(r->head, "Content-Length", NULL, 0), 0, "%s", r->head);
    cr_expect_eq(head_field(r->head, "Accept-Ranges", NULL, 0), 0, "%s", r->head);
    cr_expect_eq(head_field(r->head, "ETag", v, sizeof v), 1, "%s", r->head);
    cr_expect_str_eq(v, "W/\"v1\"");
    cr_expect_eq(head_field(r->head, "Vary", v, sizeof v), 1, "%s", r->head);
    cr_expect_str_eq(v, "Accept-Encoding");
    size_t n;
    char *plain = decode(coding, r->body, r->body_len, &n);
    cr_expect(is_text(plain, n, want), "decoded %zu bytes, want %zu", n, want);
    cr_expect_lt(r->body_len, want, "coded smaller");
    free(plain);
}

/* Each upstream framing, each coding: coded as it streams, chunked to the client. */
Test(proxy_compress, codes_every_upstream_framing)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = cz_start(&u);
    static const char *const frames[] = {"length", "chunked", "eof"};
    static const char *const codings[] = {"gzip", "zstd"};
    for (int f = 0; f < 3; f++) {
        for (int c = 0; c < 2; c++) {
            char path[128], ae[64];
            snprintf(path, sizeof path, "/mode/text?bytes=70000&frame=%s", frames[f]);
            snprintf(ae, sizeof ae, "Accept-Encoding: %s\r\n", codings[c]);
            response r = fetch(d.http, path, ae);
            expect_coded(&r, codings[c], 70000);
            response_free(&r);
        }
    }
    /* A 404 is coded too (as nginx's gzip); a keep-alive connection goes on after a coded
     * body. */
    client c = client_open(d.http);
    client_send(&c, "GET /mode/text?code=404&bytes=5000 HTTP/1.1\r\nHost: x\r\n"
                    "Accept-Encoding: gzip\r\n\r\n"
                    "GET /mode/text?bytes=3000&frame=chunked HTTP/1.1\r\nHost: x\r\n"
                    "Accept-Encoding: gzip\r\n\r\n");
    response r = read_response(&c, false);
    cr_assert_eq(r.status, 404, "%s", r.head);
    cr_expect_eq(head_field(r.head, "Content-Encoding", NULL, 0), 1, "%s", r.head);
    response_free(&r);
    r = read_response(&c, false);
    expect_coded(&r, "gzip", 3000);
    response_free(&r);
    client_close(&c);
    pair_stop(&u, &d);
}

/* What is never coded, and what says Vary all the same. */
Test(proxy_compress, passes_what_it_must_not_code)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = cz_start(&u);
    const char *gz = "Accept-Encoding: gzip, zstd\r\n";
    static const struct {
        const char *path, *fields;
        int vary; /* Vary fields in the answer */
    } cases[] = {
        /* already coded by the upstream: never again, passed as it is */
        {"/mode/text?bytes=20000&ce=gzip", AE_GZIP, 0},
        {"/mode/text?bytes=20000&ce=br&frame=chunked", AE_GZIP, 0},
        /* the upstream forbids transforming it (RFC 9110 7.7) */
        {"/mode/text?bytes=20000&cc=no-transform", NULL, 0},
        {"/mode/text?bytes=20000&cc=public,No-Transform&frame=chunked", NULL, 0},
        /* a range answer */
        {"/mode/text?bytes=20000&code=206", NULL, 0},
        /* a status nginx's gzip leaves alone */
        {"/mode/text?bytes=20000&code=500", NULL, 0},
        /* not a compressible type */
        {"/mode/text?bytes=20000&type=image/png", NULL, 0},
        /* under compress_min_length: compressible, so it varies */
        {"/mode/text?bytes=100", NULL, 1},
        /* a client that takes no coding */
        {"/mode/text?bytes=20000", "", 1},
        {"/mode/text?bytes=20000", "Accept-Encoding: br, gzip;q=0\r\n", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        response r = fetch(d.http, cases[i].path, cases[i].fields != NULL ? cases[i].fields : gz);
        cr_assert(r.status != 0 && r.complete, "%s: %s", cases[i].path, r.head);
        char ce[32];
        int n = head_field(r.head, "Content-Encoding", ce, sizeof ce);
        if (strstr(cases[i].path, "ce=") != NULL) {
            cr_expect_eq(n, 1, "%s: %s", cases[i].path, r.head);
            cr_expect_str_neq(ce, "zstd");
        } else {
            cr_expect_eq(n, 0, "%s: %s", cases[i].path, r.head);
        }
        cr_expect_eq(head_field(r.head, "Vary", NULL, 0), cases[i].vary, "%s: %s", cases[i].path,
                     r.head);
        char v[64];
        cr_expect_eq(head_field(r.head, "ETag", v, sizeof v), 1, "%s", r.head);
        cr_expect_str_eq(v, "\"v1\"", "%s: a strong ETag stays", cases[i].path);
        long want = strtol(strstr(cases[i].path, "bytes=") + 6, NULL, 10);
        cr_expect(is_text(r.body, r.body_len, (size_t)want), "%s: the upstream's bytes",
                  cases[i].path);
        response_free(&r);
    }
    /* HEAD and HTTP/1.0: the body as it is (HTTP/1.0 has no chunks to frame a coded one). */
    response r = ask(d.http, "HEAD /mode/text?bytes=20000 HTTP/1.1\r\nHost: x\r\n"
                             "Accept-Encoding: gzip\r\nConnection: close\r\n\r\n");
    cr_expect_eq(r.status, 200, "%s", r.head);
    cr_expect_eq(head_field(r.head, "Content-Encoding", NULL, 0), 0, "%s", r.head);
    response_free(&r);
    r = ask(d.http, "GET /mode/text?bytes=20000 HTTP/1.0\r\nHost: x\r\n"
                    "Accept-Encoding: gzip\r\n\r\n");
    cr_expect_eq(r.status, 200, "%s", r.head);
    cr_expect_eq(head_field(r.head, "Content-Encoding", NULL, 0), 0, "%s", r.head);
    cr_expect(is_text(r.body, r.body_len, 20000), "HTTP/1.0: the upstream's bytes");
    response_free(&r);
    pair_stop(&u, &d);
}

/* The upstream's Vary is kept, Accept-Encoding added to it unless it names it or is "*". */
Test(proxy_compress, merges_vary)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = cz_start(&u);
    response r = fetch(d.http, "/mode/text?bytes=20000&vary=Origin", AE_GZIP);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_expect_eq(head_field(r.head, "Content-Encoding", NULL, 0), 1, "%s", r.head);
    cr_expect_eq(head_field(r.head, "Vary", NULL, 0), 2, "%s", r.head);
    cr_expect(strstr(r.head, "Vary: Origin\r\n") != NULL, "%s", r.head);
    cr_expect(strstr(r.head, "Vary: Accept-Encoding\r\n") != NULL, "%s", r.head);
    response_free(&r);
    static const char *const named[] = {"/mode/text?bytes=20000&vary=origin,accept-encoding",
                                        "/mode/text?bytes=20000&vary=*"};
    for (int i = 0; i < 2; i++) {
        r = fetch(d.http, named[i], AE_GZIP);
        cr_expect_eq(head_field(r.head, "Content-Encoding", NULL, 0), 1, "%s", r.head);
        cr_expect_eq(head_field(r.head, "Vary", NULL, 0), 1, "%s", r.head);
        response_free(&r);
    }
    pair_stop(&u, &d);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    char *b = malloc(1 << 21);
    cr_assert_not_null(b);
    *len = fread(b, 1, (1 << 21) - 1, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

/* GET path over h2c (curl) with Accept-Encoding: ae; the head and the body (*bn bytes),
 * malloc'd. */
static void h2_fetch(int port, const char *ae, const char *path, char **head, char **body,
                     size_t *bn)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && curl -sS --max-time 15 --http2-prior-knowledge -D h2.head -o h2.body "
             "-H 'Accept-Encoding: %s' 'http://127.0.0.1:%d%s' 2>&1 && echo ok",
             proxy_dir, ae, port, path);
    char *out = run(cmd);
    cr_assert(strstr(out, "ok") != NULL, "curl: %s", out);
    char p[160];
    size_t hn;
    snprintf(p, sizeof p, "%s/h2.head", proxy_dir);
    *head = slurp(p, &hn);
    snprintf(p, sizeof p, "%s/h2.body", proxy_dir);
    *body = slurp(p, bn);
}

/* HTTP/2 (h2c): the coded body in DATA frames, no content-length, Vary and a weak ETag. */
Test(proxy_compress, http2)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = cz_start(&u);
    static const char *const codings[] = {"gzip", "zstd"};
    static const char *const frames[] = {"length", "chunked"};
    char *head, *body;
    size_t bn;
    for (int i = 0; i < 2; i++) {
        char path[128];
        snprintf(path, sizeof path, "/mode/text?bytes=70000&frame=%s", frames[i]);
        h2_fetch(d.http, codings[i], path, &head, &body, &bn);
        cr_expect(strstr(head, "HTTP/2 200") != NULL, "%s", head);
        char want[64];
        snprintf(want, sizeof want, "content-encoding: %s\r\n", codings[i]);
        cr_expect(strstr(head, want) != NULL, "%s", head);
        cr_expect(strstr(head, "content-length") == NULL, "%s", head);
        cr_expect(strstr(head, "vary: Accept-Encoding\r\n") != NULL, "%s", head);
        cr_expect(strstr(head, "etag: W/\"v1\"\r\n") != NULL, "%s", head);
        size_t n;
        char *plain = decode(codings[i], body, bn, &n);
        cr_expect(is_text(plain, n, 70000), "decoded %zu bytes", n);
        free(plain);
        free(head);
        free(body);
    }
    /* The upstream's trailers do not follow a body coded here (nor over HTTP/1.1): a HEADERS
     * frame after the DATA only when the body goes as it came. */
    char cmd[512];
    for (int coded = 0; coded < 2; coded++) {
        snprintf(cmd, sizeof cmd,
                 "timeout 10 nghttp -v -H 'accept-encoding: %s' "
                 "'http://127.0.0.1:%d/mode/text?bytes=3000&frame=chunked"
                 "&trailer=1' 2>&1 | grep -a -c -i 'x-trailer: t'",
                 coded ? "gzip" : "identity", d.http);
        cr_expect_str_eq(run(cmd), coded ? "0\n" : "1\n", "coded %d", coded);
    }
    /* Already coded upstream: passed as it is, its length kept. */
    h2_fetch(d.http, "gzip", "/mode/text?bytes=20000&ce=gzip", &head, &body, &bn);
    cr_expect(strstr(head, "content-encoding: gzip\r\n") != NULL, "%s", head);
    cr_expect(strstr(head, "content-length: 20000\r\n") != NULL, "%s", head);
    cr_expect(is_text(body, bn, 20000), "the upstream's bytes");
    free(head);
    free(body);
    pair_stop(&u, &d);
}

#define BIG (32L << 20)

/* A client that reads a coded body slowly holds magpied's memory to buffer_bytes of coded
 * output and a compression context: the upstream's 32 MiB (of text that codes to ~60%) are
 * not taken in faster than the client reads. The client reads ~1 MiB, 4 KiB at a time, and
 * closes. */
Test(proxy_compress, slow_reader_bounds_memory)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = cz_start(&u);
    for (int i = 0; i < 2; i++) { /* a compression context made on each worker, pools warm */
        response r = fetch(d.http, "/mode/text?bytes=300000&noise=1", AE_GZIP);
        cr_assert_eq(r.status, 200, "%s", r.head);
        response_free(&r);
    }
    long base = rss_kib(d.pid);
    cr_assert_gt(base, 0);
    char req[256];
    snprintf(req, sizeof req,
             "GET /mode/text?bytes=%ld&noise=1&frame=chunked HTTP/1.1\r\nHost: x\r\n"
             "Accept-Encoding: gzip\r\n\r\n",
             BIG);
    slow_reader s;
    slow_open(&s, d.http, d.pid, base, req);
    slow_read(&s, 1L << 20, 0, 2000);
    close(s.fd);
    const char *first = s.first;
    long peak = s.peak;
    cr_assert(strncmp(first, "HTTP/1.1 200 ", 13) == 0, "%.300s", first);
    cr_assert(strstr(first, "Content-Encoding: gzip\r\n") != NULL, "%.300s", first);
    fprintf(stderr, "slow_reader_bounds_memory: VmRSS %ld KiB, peak +%ld KiB\n", base, peak - base);
    cr_assert_lt(peak - base, RSS_SLACK_KIB,
                 "magpied grew by %ld KiB (from %ld) while a client read a coded body slowly",
                 peak - base, base);
    /* The upstream still serves, and magpied too. */
    response r = fetch(d.http, "/mode/text?bytes=3000", AE_GZIP);
    expect_coded(&r, "gzip", 3000);
    response_free(&r);
    pair_stop(&u, &d);
}
