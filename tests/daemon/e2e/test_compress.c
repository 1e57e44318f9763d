/* End-to-end tests of compression on the fly (daemon/http/compress.c, request.c's filter,
 * static.c's coded bodies) against a real magpied: gzip and zstd bodies decode to the file,
 * Vary, the weak ETag, no Accept-Ranges; what is never compressed (a range, a 304, HEAD's
 * body, a small file, a type not listed, a precompressed file, HTTP/1.0); hostile
 * Accept-Encoding values; a slow reader of a large coded body while the server's memory stays
 * bounded; HTTP/2 (h2c); /metrics; and magpied -t on bad keys.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/decode_body.h"
#include "daemon/magpied_harness.h"
#include "test_net.h"

static char dir[64];
static daemon_proc d;

enum { BIG = 16u << 20 }; /* the slow reader's file: random bytes, so its coded body is as big */

static void setup(void)
{
    harness_dir_make(dir, sizeof dir, "compress");
    /* page.html: 200 KB of text; tiny.txt under the minimum; pic.png not a listed type;
     * style.css with style.css.gz beside it; noise.txt random (incompressible) text/plain. */
    harness_sh(
        "cd %s && mkdir -p www && "
        "for i in $(seq 1 4000); do echo \"<p>line $i of the magpie page, compressible</p>\"; "
        "done > www/page.html && printf 'tiny\\n' > www/tiny.txt && "
        "head -c 5000 /dev/zero > www/pic.png && "
        "for i in $(seq 1 200); do echo 'body { color: red }'; done > www/style.css && "
        "gzip -k www/style.css && cp www/page.html www/z.html && printf 'ZSTDFILE' > "
        "www/z.html.zst "
        "&& "
        "head -c %u /dev/urandom > www/noise.txt",
        dir, BIG);
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "[http]\nlisten = 127.0.0.1:0\nhttp2 = on\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"
            "[route /]\nhandler = static\nroot = %s/www\nprecompressed = on\n"
            "compress = gzip zstd\ncompress_level_gzip = 6\n"
            "[route = /metrics]\nhandler = metrics\ncompress = gzip\n",
            dir);
    fclose(f);
    d = start_with(conf, NULL, NULL);
}

static void teardown(void)
{
    if (d.pid > 0)
        stop(&d);
    harness_dir_remove(dir);
}

TestSuite(compress_e2e, .init = setup, .fini = teardown, .timeout = 120);

/* A whole response (until the server closes: Connection: close), in a buffer to free. */
static char *fetch(const char *req, size_t *len)
{
    size_t cap = 1u << 20, got = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    int fd = test_connect(d.http);
    test_write_all(fd, req, strlen(req));
    for (;;) {
        if (cap - got < 65536) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        cr_assert_gt(poll(&pfd, 1, 20000), 0, "the response came in time");
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *len = got;
    return buf;
}

static char *get(const char *path, const char *fields, size_t *len)
{
    char req[16384];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", path,
             fields);
    return fetch(req, len);
}

/* A field's value (to the end of its line), or NULL; in a static buffer. */
static const char *field(const char *resp, const char *name)
{
    static char v[256];
    char key[64];
    snprintf(key, sizeof key, "\r\n%s: ", name);
    const char *at = strstr(resp, key);
    const char *end = strstr(resp, "\r\n\r\n");
    if (at == NULL || at > end)
        return NULL;
    at += strlen(key);
    size_t n = strcspn(at, "\r");
    snprintf(v, sizeof v, "%.*s", (int)n, at);
    return v;
}

static char *file(const char *name, size_t *len)
{
    char path[160];
    snprintf(path, sizeof path, "%s/www/%s", dir, name);
    return harness_slurp(path, len);
}

/* The body of a chunked response, unframed into out (its length). */
static size_t unchunk(const char *body, size_t n, char *out)
{
    size_t i = 0, w = 0;
    for (;;) {
        char *end;
        unsigned long size = strtoul(body + i, &end, 16);
        cr_assert(end > body + i && end + 1 < body + n && end[0] == '\r', "chunk-size at %zu", i);
        i = (size_t)(end - body) + 2;
        if (size == 0) {
            cr_assert_eq(n - i, 2, "the last chunk, then CRLF, then nothing");
            return w;
        }
        cr_assert_leq(i + size + 2, n);
        memcpy(out + w, body + i, size);
        w += size;
        i += size + 2;
    }
}

/* GET name with ae; the response is coded with want, and decodes to the file. */
static void expect_coded(const char *name, const char *ae, const char *want)
{
    char fields[256];
    snprintf(fields, sizeof fields, "Accept-Encoding: %s\r\n", ae);
    char path[128];
    snprintf(path, sizeof path, "/%s", name);
    size_t n, flen;
    char *r = get(path, fields, &n);
    char *orig = file(name, &flen);
    cr_assert(strncmp(r, "HTTP/1.1 200 ", 13) == 0, "%.300s", r);
    const char *ce = field(r, "Content-Encoding");
    cr_assert_not_null(ce, "coded: %.400s", r);
    cr_expect_str_eq(ce, want);
    cr_expect_str_eq(field(r, "Transfer-Encoding"), "chunked");
    cr_expect_null(field(r, "Content-Length"));
    cr_expect_null(field(r, "Accept-Ranges"), "no ranges of a coded body");
    cr_expect_str_eq(field(r, "Vary"), "Accept-Encoding");
    const char *etag = field(r, "ETag");
    cr_expect(etag != NULL && strncmp(etag, "W/\"", 3) == 0, "a weak ETag: %s", etag);
    const char *body = strstr(r, "\r\n\r\n") + 4;
    char *coded = malloc(n), *plain = malloc(flen + 1024);
    size_t clen = unchunk(body, n - (size_t)(body - r), coded);
    cr_expect_lt(clen, flen, "smaller");
    size_t got = decode_body(want, coded, clen, plain, flen + 1024);
    cr_expect_eq(got, flen);
    cr_expect(memcmp(plain, orig, flen) == 0, "the file's bytes");
    free(coded);
    free(plain);
    free(orig);
    free(r);
}

Test(compress_e2e, gzip_and_zstd)
{
    expect_coded("page.html", "gzip", "gzip");
    expect_coded("page.html", "zstd", "zstd");
    expect_coded("page.html", "gzip, deflate, br, zstd", "zstd");
    expect_coded("page.html", "gzip;q=1, zstd;q=0.5", "gzip");
    expect_coded("page.html", "*", "zstd");
    expect_coded("page.html", "identity;q=0, x-gzip", "gzip");
}

/* Keep-alive: two coded responses and a plain one on one connection, each framed whole. */
Test(compress_e2e, keep_alive)
{
    const char *req = "GET /page.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
                      "GET /page.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: zstd\r\n\r\n"
                      "GET /tiny.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    size_t n;
    char *r = fetch(req, &n);
    const char *p = r;
    int seen = 0;
    while ((p = memmem(p, n - (size_t)(p - r), "HTTP/1.1 200 OK", 15)) != NULL) { /* binary */
        seen++;
        p++;
    }
    cr_expect_eq(seen, 3, "three responses");
    cr_expect(n > 5 && strcmp(r + n - 5, "tiny\n") == 0, "the last one whole after two chunked");
    free(r);
}

Test(compress_e2e, identity_cases)
{
    size_t n;
    char *r = get("/page.html", "", &n); /* no Accept-Encoding */
    cr_expect_null(field(r, "Content-Encoding"));
    cr_expect_not_null(field(r, "Content-Length"));
    cr_expect_str_eq(field(r, "Vary"), "Accept-Encoding", "compressible: Vary all the same");
    cr_expect(strncmp(field(r, "ETag"), "\"", 1) == 0, "strong");
    free(r);
    r = get("/page.html", "Accept-Encoding: br, identity\r\n", &n);
    cr_expect_null(field(r, "Content-Encoding"));
    free(r);
    r = get("/tiny.txt", "Accept-Encoding: gzip\r\n", &n); /* under compress_min_length */
    cr_expect_null(field(r, "Content-Encoding"));
    cr_expect_str_eq(field(r, "Content-Length"), "5");
    cr_expect_str_eq(field(r, "Vary"), "Accept-Encoding");
    free(r);
    r = get("/pic.png", "Accept-Encoding: gzip\r\n", &n); /* not a listed type */
    cr_expect_null(field(r, "Content-Encoding"));
    cr_expect_str_eq(field(r, "Content-Length"), "5000");
    free(r);
    /* HTTP/1.0: no chunked framing, so the identity body. */
    r = fetch("GET /page.html HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n", &n);
    cr_expect(strncmp(r, "HTTP/1.1 200 ", 13) == 0);
    cr_expect_null(field(r, "Content-Encoding"));
    cr_expect_not_null(field(r, "Content-Length"));
    free(r);
}

Test(compress_e2e, range_304_head)
{
    size_t n;
    char *r = get("/page.html", "Accept-Encoding: gzip\r\nRange: bytes=0-99\r\n", &n);
    cr_expect(strncmp(r, "HTTP/1.1 206 ", 13) == 0, "%.200s", r);
    cr_expect_null(field(r, "Content-Encoding"), "a range is of the identity body");
    cr_expect_str_eq(field(r, "Content-Length"), "100");
    cr_expect_str_eq(field(r, "Vary"), "Accept-Encoding");
    free(r);

    r = get("/page.html", "Accept-Encoding: gzip\r\n", &n);
    char etag[128];
    snprintf(etag, sizeof etag, "%s", field(r, "ETag"));
    free(r);
    char fields[256];
    snprintf(fields, sizeof fields, "Accept-Encoding: gzip\r\nIf-None-Match: %s\r\n", etag);
    r = get("/page.html", fields, &n);
    cr_expect(strncmp(r, "HTTP/1.1 304 ", 13) == 0, "the weak tag validates: %.200s", r);
    cr_expect_null(field(r, "Content-Encoding"));
    cr_expect_str_eq(field(r, "ETag"), etag, "the same tag the 200 said");
    cr_expect_str_eq(field(r, "Vary"), "Accept-Encoding");
    cr_expect_eq(strlen(strstr(r, "\r\n\r\n")), 4, "no body");
    free(r);

    r = fetch("HEAD /page.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: zstd\r\n"
              "Connection: close\r\n\r\n",
              &n);
    cr_expect(strncmp(r, "HTTP/1.1 200 ", 13) == 0);
    cr_expect_str_eq(field(r, "Content-Encoding"), "zstd", "the head a GET would get");
    cr_expect_str_eq(field(r, "Vary"), "Accept-Encoding");
    cr_expect_eq(strlen(strstr(r, "\r\n\r\n")), 4, "no body");
    free(r);
}

/* A precompressed file is served as it is: never compressed again. */
Test(compress_e2e, precompressed_preferred)
{
    size_t n, glen;
    char *r = get("/style.css", "Accept-Encoding: gzip, zstd\r\n", &n);
    char *gz = file("style.css.gz", &glen);
    cr_expect_str_eq(field(r, "Content-Encoding"), "gzip");
    char want[32];
    snprintf(want, sizeof want, "%zu", glen);
    cr_expect_str_eq(field(r, "Content-Length"), want, "the .gz file, not chunked");
    const char *body = strstr(r, "\r\n\r\n") + 4;
    cr_expect(memcmp(body, gz, glen) == 0, "its bytes");
    const char *vary = strstr(r, "Vary: Accept-Encoding");
    cr_expect(vary != NULL && strstr(vary + 1, "Vary: Accept-Encoding") == NULL, "Vary once");
    free(gz);
    free(r);
    /* FILE.zst for a client that takes zstd. */
    r = get("/z.html", "Accept-Encoding: zstd\r\n", &n);
    cr_expect_str_eq(field(r, "Content-Encoding"), "zstd");
    cr_expect_str_eq(field(r, "Content-Length"), "8");
    cr_expect(strcmp(strstr(r, "\r\n\r\n") + 4, "ZSTDFILE") == 0, "the .zst file's bytes");
    free(r);
    expect_coded("z.html", "gzip", "gzip"); /* no .gz beside it: on the fly */
}

/* Accept-Encoding values that are garbage, out of range or huge: a sane answer, never a
 * crash. */
Test(compress_e2e, hostile_accept_encoding)
{
    static const char *const bad[] = {
        "gzip;q=99", "gzip;q=1e9", "gzip;q=-0", "gzip;q=0.99999999999999999999",
        ";;;,,,q=",  "\"gzip\"",   "gzip;q",    "*;q=2",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char fields[256];
        snprintf(fields, sizeof fields, "Accept-Encoding: %s\r\n", bad[i]);
        size_t n;
        char *r = get("/page.html", fields, &n);
        cr_expect(strncmp(r, "HTTP/1.1 200 ", 13) == 0, "%s: %.100s", bad[i], r);
        cr_expect_null(field(r, "Content-Encoding"), "%s: identity", bad[i]);
        free(r);
    }
    /* Thousands of tokens (within the header limits): the value is longer than the request
     * keeps, so it reads as absent. */
    char *fields = malloc(12000);
    strcpy(fields, "Accept-Encoding: ");
    for (int i = 0; i < 1500; i++)
        strcat(fields, "x;q=1, ");
    strcat(fields, "gzip\r\n");
    size_t n;
    char *r = get("/page.html", fields, &n);
    cr_expect(strncmp(r, "HTTP/1.1 200 ", 13) == 0, "%.100s", r);
    cr_expect_null(field(r, "Content-Encoding"));
    free(r);
    free(fields);
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    long kb = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* A client that reads a 16 MiB coded body slowly (a small receive buffer, small reads with
 * pauses): the body is whole, and the server holds a bounded part of it meanwhile. */
Test(compress_e2e, slow_reader_bounded)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.http)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    long before = rss_kb(d.pid);
    const char *req = "GET /noise.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n"
                      "Connection: close\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    size_t cap = BIG + (BIG >> 2), got = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    long peak = 0;
    for (int i = 0;; i++) {
        if (i < 40) { /* the slow part: 40 reads of 1 KiB, 25 ms apart */
            usleep(25000);
            long now = rss_kb(d.pid);
            peak = now > peak ? now : peak;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        cr_assert_gt(poll(&pfd, 1, 20000), 0);
        ssize_t n = read(fd, buf + got, i < 40 ? 1024 : cap - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        cr_assert_lt(got, cap - 1);
    }
    close(fd);
    buf[got] = '\0';
    cr_expect_str_eq(field(buf, "Content-Encoding"), "gzip");
    /* Bounded: the server held far less than the 16 MiB body while the client stalled (a
     * context, a batch of output, the kernel's buffers). */
    cr_expect_lt(peak - before, 8192, "RSS grew by %ld KiB", peak - before);
    const char *body = strstr(buf, "\r\n\r\n") + 4;
    char *coded = malloc(got);
    size_t clen = unchunk(body, got - (size_t)(body - buf), coded);
    size_t flen;
    char *orig = file("noise.txt", &flen);
    char *plain = malloc(flen + 1024);
    cr_expect_eq(decode_body("gzip", coded, clen, plain, flen + 1024), flen);
    cr_expect(memcmp(plain, orig, flen) == 0, "the file's bytes");
    free(plain);
    free(orig);
    free(coded);
    free(buf);
}

/* HTTP/2 (h2c by prior knowledge): the coded body in DATA frames, no content-length. */
Test(compress_e2e, http2)
{
    static const char *const codings[] = {"gzip", "zstd"};
    for (int i = 0; i < 2; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "curl -s --http2-prior-knowledge -D %s/h2.head -o %s/h2.body "
                 "-H 'Accept-Encoding: %s' http://127.0.0.1:%d/page.html && echo ok",
                 dir, dir, codings[i], d.http);
        char *out = run(cmd);
        cr_assert(out != NULL && strstr(out, "ok") != NULL, "curl");
        size_t hn, bn, flen;
        char *head = file("../h2.head", &hn), *body = file("../h2.body", &bn);
        char *orig = file("page.html", &flen);
        cr_expect(strstr(head, "HTTP/2 200") != NULL, "%s", head);
        char want[64];
        snprintf(want, sizeof want, "content-encoding: %s\r\n", codings[i]);
        cr_expect(strstr(head, want) != NULL, "%s", head);
        cr_expect(strstr(head, "content-length") == NULL, "%s", head);
        char *plain = malloc(flen + 1024);
        cr_expect_eq(decode_body(codings[i], body, bn, plain, flen + 1024), flen);
        cr_expect(memcmp(plain, orig, flen) == 0, "the file's bytes");
        free(plain);
        free(orig);
        free(head);
        free(body);
    }
}

/* /metrics is a produced body: coded too, and it counts what was coded. */
Test(compress_e2e, metrics)
{
    expect_coded("page.html", "gzip", "gzip");
    size_t n;
    char *r = get("/metrics", "", &n);
    cr_expect_null(field(r, "Content-Encoding"));
    cr_expect_str_eq(field(r, "Vary"), "Accept-Encoding");
    cr_expect(strstr(r, "magpied_compress_bytes_in_total{coding=\"gzip\"} ") != NULL);
    cr_expect(strstr(r, "magpied_compress_responses_total{coding=\"gzip\"} 0\n") == NULL);
    free(r);
    r = get("/metrics", "Accept-Encoding: gzip\r\n", &n);
    cr_expect_str_eq(field(r, "Content-Encoding"), "gzip");
    free(r);
}

/* magpied -t: each bad key named with its file and line. */
Test(compress_e2e, check_keys)
{
    static const char *const cases[][2] = {
        {"compress = br", ":7: [route /] compress: expected gzip, zstd"},
        {"compress_level_gzip = 10", ":7: [route /] compress_level_gzip: expected an integer"},
        {"compress_level_zstd = 0", ":7: [route /] compress_level_zstd: expected an integer"},
        {"compress_min_length = x", ":7: [route /] compress_min_length: expected an integer"},
        {"compress_types = html", ":7: [route /] compress_types: expected media types"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[route /]\nhandler = static\n"
                 "%s\nroot = /tmp\n",
                 cases[i][0]);
        char *out = check_conf(dir, text);
        cr_expect(strstr(out, cases[i][1]) != NULL && strstr(out, "rc=1") != NULL, "%s: %s",
                  cases[i][0], out);
    }
    /* The proxy codes what it relays (proxy_msg.h): accepted there. */
    char *out = check_conf(dir, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[upstream app]\n"
                                "server = 127.0.0.1:9\n[route /]\nhandler = proxy\nupstream = app\n"
                                "compress = gzip\n");
    cr_expect(strstr(out, "is valid") != NULL && strstr(out, "rc=0") != NULL, "%s", out);
}
