/* End-to-end tests of the static handler (daemon/http/handlers/static/static.c) against a real
 * magpied serving a temporary tree: content and types, index and no listings, the traversal
 * shapes on raw sockets (curl would normalise them away), dotfiles, symlinks out of the root,
 * FIFOs, validators and 304, ranges, precompressed variants, a large file by sendfile to a
 * slow reader, a file replaced under the server, and the open-file cache (its metrics, its
 * window, a reload that turns it off).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"
#include "test_net.h"

static char dir[64];
static daemon_proc d;

/* The open-file cache's window in these tests: a replaced file is served new after it. */
enum { VALID_MS = 100 };

/* The tree: www/ is the root; outside/ is beside it, for symlinks that leave the root. */
static void setup(void)
{
    harness_dir_make(dir, sizeof dir, "static");
    harness_sh(
        "cd %s && mkdir -p www/sub www/empty www/.git outside 'www/a b%%c' && "
        "printf 'hello index\\n' > www/index.html && printf 'sub index\\n' > www/sub/index.html && "
        "printf 'a{}\\n' > www/sub/a.css && printf 'secret\\n' > www/.env && "
        "printf 'x\\n' > www/.git/config && printf 'outside\\n' > outside/secret.txt && "
        "ln -s ../outside/secret.txt www/escape && ln -s /etc/passwd www/passwd && "
        "ln -s index.html www/inside.html && mkfifo www/fifo && "
        "printf 'body { color: red }\\n' > www/style.css && gzip -k www/style.css && "
        "printf 'js' > www/app.js && printf 'BR' > www/app.js.br && "
        "head -c 3000000 /dev/urandom > www/big.bin && printf '0123456789' > www/ten.txt",
        dir);
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "[http]\nlisten = 127.0.0.1:0\nhttp2 = on\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"
            "[route /]\nhandler = static\nroot = %s/www\nprecompressed = on\n"
            "[route = /healthz]\nhandler = health\n[route = /metrics]\nhandler = metrics\n"
            "[route /proc/self]\nhandler = static\nroot = /\n"
            "[static]\nopen_file_cache_valid_ms = %d\n",
            dir, VALID_MS);
    fclose(f);
    d = start_with(conf, NULL, NULL);
}

static void teardown(void)
{
    if (d.pid > 0)
        stop(&d);
    harness_dir_remove(dir);
}

TestSuite(static_e2e, .init = setup, .fini = teardown, .timeout = 60);

/* One request with Connection: close on a new connection; the whole response. */
static char *ask(const char *req)
{
    static char resp[16384];
    int fd = test_connect(d.http);
    test_write_all(fd, req, strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    return resp;
}

static char *get_with(const char *target, const char *fields)
{
    char req[1024];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", target,
             fields);
    return ask(req);
}

static char *get(const char *target)
{
    return get_with(target, "");
}

static void expect(const char *resp, const char *status, const char *part)
{
    cr_expect(strncmp(resp, status, strlen(status)) == 0, "want %s, got: %.300s", status, resp);
    if (part != NULL)
        cr_expect(strstr(resp, part) != NULL, "no \"%s\" in: %.300s", part, resp);
}

/* A field's value from a response (to the end of its line), in a static buffer. */
static const char *field(const char *resp, const char *name)
{
    static char v[256];
    char key[64];
    snprintf(key, sizeof key, "\r\n%s: ", name);
    const char *at = strstr(resp, key);
    cr_assert_not_null(at, "no %s in %.300s", name, resp);
    at += strlen(key);
    size_t n = strcspn(at, "\r");
    snprintf(v, sizeof v, "%.*s", (int)n, at);
    return v;
}

Test(static_e2e, files_index_types_and_no_listings)
{
    expect(get("/"), "HTTP/1.1 200", "\r\n\r\nhello index\n");
    expect(get("/"), "HTTP/1.1 200", "Content-Type: text/html\r\n");
    expect(get("/index.html"), "HTTP/1.1 200", "Accept-Ranges: bytes\r\n");
    expect(get("/sub/"), "HTTP/1.1 200", "\r\n\r\nsub index\n");
    expect(get("/sub"), "HTTP/1.1 301", "Location: /sub/\r\n");
    /* The Location is a URI: the decoded name encoded again. */
    expect(get("/a%20b%25c"), "HTTP/1.1 301", "Location: /a%20b%25c/\r\n");
    /* The query goes on with it. */
    expect(get("/sub?page=2&q=a%20b"), "HTTP/1.1 301", "Location: /sub/?page=2&q=a%20b\r\n");
    /* A query longer than the 1024 bytes of target kept is not dropped from it: 414; a path
     * that long names no file magpied could route to: 414 (RFC 9112 3). A long query on a
     * file is served. */
    char longq[1100], req[1400];
    memset(longq, 'q', sizeof longq - 1);
    longq[sizeof longq - 1] = '\0';
    snprintf(req, sizeof req, "GET /sub?%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
             longq);
    expect(ask(req), "HTTP/1.1 414", NULL);
    snprintf(req, sizeof req, "GET /%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", longq);
    expect(ask(req), "HTTP/1.1 414", NULL);
    snprintf(req, sizeof req, "GET /ten.txt?%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
             longq);
    expect(ask(req), "HTTP/1.1 200", "0123456789");
    expect(get("/sub/a.css"), "HTTP/1.1 200", "Content-Type: text/css\r\n");
    expect(get("/ten.txt"), "HTTP/1.1 200", "Content-Type: text/plain\r\n");
    expect(get("/empty/"), "HTTP/1.1 403", NULL); /* no index, no listing */
    expect(get("/nope"), "HTTP/1.1 404", NULL);
    /* A directory's path that names no directory is 404, as nginx's; twice, the second from
     * the open-file cache's memory of the missing index. */
    for (int i = 0; i < 2; i++) {
        expect(get("/nope/"), "HTTP/1.1 404", NULL);
        expect(get("/sub/nope/"), "HTTP/1.1 404", NULL);
        expect(get("/ten.txt/"), "HTTP/1.1 404", NULL);
        expect(get("/empty/"), "HTTP/1.1 403", NULL);
    }
    expect(get("/inside.html"), "HTTP/1.1 200", "hello index"); /* a symlink inside is fine */
    char *r = ask("HEAD /ten.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    expect(r, "HTTP/1.1 200", "Content-Length: 10\r\n");
    cr_expect(strstr(r, "0123456789") == NULL, "HEAD sent a body: %s", r);
    expect(get("/healthz"), "HTTP/1.1 200", "ok"); /* the exact route beside the prefix one */
    expect(ask("POST /ten.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: "
               "close\r\n\r\n"),
           "HTTP/1.1 405", "Allow: GET, HEAD, OPTIONS\r\n");
}

/* Nothing outside the root, in any encoding, and never a hang. */
Test(static_e2e, traversal_shapes_dotfiles_symlinks_fifos)
{
    const char *bad_request[] = {
        "/../outside/secret.txt",
        "/%2e%2e/outside/secret.txt",
        "/%2E%2E/outside/secret.txt",
        "/sub/../../outside/secret.txt",
        "/.%2e/outside/secret.txt",
        "/sub%2f..%2f..%2fetc",
        "/index.html%00.txt",
        "/sub%5c..%5cindex.html",
        "/sub\\..\\index.html",
        "/%252e%252e/x",
        "/index.html#x",
    };
    for (size_t i = 0; i < sizeof bad_request / sizeof bad_request[0]; i++) {
        char *r = get(bad_request[i]);
        cr_expect(strncmp(r, "HTTP/1.1 400", 12) == 0 || strncmp(r, "HTTP/1.1 404", 12) == 0,
                  "%s: %.200s", bad_request[i], r);
        cr_expect(strstr(r, "outside") == NULL && strstr(r, "root:") == NULL, "%s leaked: %s",
                  bad_request[i], r);
    }
    expect(get("/sub/../index.html"), "HTTP/1.1 200", "hello index"); /* inside: fine */
    expect(get("//index.html"), "HTTP/1.1 200", "hello index");
    expect(get("/./sub/./a.css"), "HTTP/1.1 200", "a{}");
    /* An escaped slash is a slash, as nginx reads it: the same file (a name with a '/' in it
     * cannot exist). */
    expect(get("/sub%2Fa.css"), "HTTP/1.1 200", "a{}");
    expect(get("/sub%2f%2E%2E%2Fsub%2fa.css"), "HTTP/1.1 200", "a{}");
    expect(get("/escape"), "HTTP/1.1 404", NULL);
    expect(get("/passwd"), "HTTP/1.1 404", NULL);
    expect(get("/.env"), "HTTP/1.1 404", NULL);
    expect(get("/.git/config"), "HTTP/1.1 404", NULL);
    expect(get("/%2eenv"), "HTTP/1.1 404", NULL);
    expect(get("/fifo"), "HTTP/1.1 403", NULL);
    expect(get("/healthz"), "HTTP/1.1 200", "ok");
}

/* A file the daemon may not read is 403. Root reads any file, so as root a second magpied is
 * started as nobody (setpriv) on the same tree for this one check. */
Test(static_e2e, unreadable_file_is_403)
{
    harness_sh("printf x > %s/www/locked.txt && chmod 000 %s/www/locked.txt", dir, dir);
    if (geteuid() != 0) {
        expect(get("/locked.txt"), "HTTP/1.1 403", NULL);
        return;
    }
    char exe[PATH_MAX + 32], cmd[PATH_MAX + 512];
    magpied_path(exe, sizeof exe);
    int port = free_port();
    harness_sh(
        "chmod a+rx %s %s/www && printf '[http]\\nlisten = 127.0.0.1:%d\\n[echo]\\nlisten =\\n"
        "[route /]\\nhandler = static\\nroot = %s/www\\n' > %s/nobody.conf",
        dir, dir, port, dir, dir);
    snprintf(cmd, sizeof cmd,
             "timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups %s -c %s/nobody.conf "
             ">%s/nobody.out 2>&1 & echo $!",
             exe, dir, dir);
    int pid = atoi(run(cmd));
    cr_assert_gt(pid, 0);
    int code = 0;
    for (int i = 0; i < 200 && code == 0; i++) {
        usleep(25000);
        snprintf(cmd, sizeof cmd, "grep -c listening %s/nobody.out", dir);
        if (atoi(run(cmd)) > 0)
            code = http_status(port, "/locked.txt");
    }
    int ok = http_status(port, "/ten.txt");
    kill(pid, SIGTERM);
    cr_expect_eq(code, 403);
    cr_expect_eq(ok, 200, "the same daemon serves a readable file");
}

/* /ten.txt's ETag and Last-Modified, from a plain GET. */
static void ten_validators(char etag[128], char lm[64])
{
    char *r = get("/ten.txt");
    expect(r, "HTTP/1.1 200", NULL);
    snprintf(etag, 128, "%s", field(r, "ETag"));
    snprintf(lm, 64, "%s", field(r, "Last-Modified"));
    cr_assert_eq(etag[0], '"');
}

Test(static_e2e, validators_and_304)
{
    char etag[128], lm[64], f[300], *r;
    ten_validators(etag, lm);
    snprintf(f, sizeof f, "If-None-Match: %s\r\n", etag);
    r = get_with("/ten.txt", f);
    expect(r, "HTTP/1.1 304", NULL);
    cr_expect(strstr(r, "0123456789") == NULL, "a 304 with a body: %s", r);
    cr_expect(strstr(r, "Content-Length") == NULL, "a 304 says no length: %s", r);
    snprintf(f, sizeof f, "If-None-Match: \"other\", W/%s\r\n", etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 304", NULL); /* weak comparison */
    expect(get_with("/ten.txt", "If-None-Match: *\r\n"), "HTTP/1.1 304", NULL);
    expect(get_with("/ten.txt", "If-None-Match: \"other\"\r\n"), "HTTP/1.1 200", "0123456789");
    snprintf(f, sizeof f, "If-Modified-Since: %s\r\n", lm);
    expect(get_with("/ten.txt", f), "HTTP/1.1 304", NULL);
    expect(get_with("/ten.txt", "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"),
           "HTTP/1.1 200", NULL);
    /* If-None-Match wins over If-Modified-Since. */
    snprintf(f, sizeof f, "If-None-Match: \"other\"\r\nIf-Modified-Since: %s\r\n", lm);
    expect(get_with("/ten.txt", f), "HTTP/1.1 200", NULL);

    /* Replaced by rename: new content, new ETag, once the open-file cache's window passed. */
    harness_sh("printf 'abcdefghij' > %s/www/ten.new && mv %s/www/ten.new %s/www/ten.txt", dir, dir,
               dir);
    usleep((VALID_MS + 50) * 1000);
    r = get("/ten.txt");
    expect(r, "HTTP/1.1 200", "\r\n\r\nabcdefghij");
    cr_expect_str_neq(field(r, "ETag"), etag);
    snprintf(f, sizeof f, "If-None-Match: %s\r\n", etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 200", "abcdefghij");
}

/* A file dated in the future is served as dated now (RFC 9110 8.8.2.1: no Last-Modified later
 * than the Date), one dated before 1970 as 1970-01-01; either way the date sent is the one the
 * conditionals compare with, so If-Range and If-Modified-Since with it match. */
Test(static_e2e, last_modified_is_never_after_the_date_nor_before_1970)
{
    harness_sh("printf 'abcdefghij' > %s/www/future.txt && touch -d '2099-01-01 00:00:00 UTC' "
               "%s/www/future.txt && printf 'abcdefghij' > %s/www/old.txt && "
               "touch -d '1960-01-01 00:00:00 UTC' %s/www/old.txt",
               dir, dir, dir, dir);
    char *r = get("/future.txt");
    expect(r, "HTTP/1.1 200", "abcdefghij");
    char date[64], lm[64], f[200];
    snprintf(date, sizeof date, "%s", field(r, "Date"));
    snprintf(lm, sizeof lm, "%s", field(r, "Last-Modified"));
    cr_expect(strstr(lm, "2099") == NULL, "%s", lm);
    cr_expect_str_eq(lm, date, "dated as the response");
    r = get("/old.txt");
    expect(r, "HTTP/1.1 200", "abcdefghij");
    snprintf(lm, sizeof lm, "%s", field(r, "Last-Modified"));
    cr_expect_str_eq(lm, "Thu, 01 Jan 1970 00:00:00 GMT");
    snprintf(f, sizeof f, "Range: bytes=0-0\r\nIf-Range: %s\r\n", lm);
    expect(get_with("/old.txt", f), "HTTP/1.1 206", "\r\n\r\na");
    snprintf(f, sizeof f, "If-Modified-Since: %s\r\n", lm);
    expect(get_with("/old.txt", f), "HTTP/1.1 304", NULL);
}

/* A 304's head is the listed fields and nothing else, over HTTP/1.1 and HTTP/2: its
 * validators were once written without an end, and the head took whatever followed them on
 * the stack (an earlier response's Content-Range, or bytes that are no field at all). Each
 * 304 comes after a 206 and a 412, whose heads leave such lines where the 304's end. */
Test(static_e2e, a_304_head_holds_only_its_fields)
{
    /* RFC 9110 15.4.5's fields (a 200 here would have no Cache-Control, Expires or
     * Content-Location), Last-Modified, and the connection's. No Content-Type. */
    static const char *const allowed[] = {"Date",          "Server", "ETag",
                                          "Last-Modified", "Vary",   "Connection"};
    for (int i = 0; i < 40; i++) {
        get_with("/big.bin", "Range: bytes=1-2\r\n");
        get_with("/ten.txt", "If-Match: \"nope\"\r\n");
        char *r = get_with(i % 2 ? "/big.bin" : "/ten.txt", "If-None-Match: *\r\n");
        expect(r, "HTTP/1.1 304", NULL);
        char *end = strstr(r, "\r\n\r\n");
        cr_assert_not_null(end, "%s", r);
        end[2] = '\0';
        for (char *line = strstr(r, "\r\n") + 2; *line != '\0'; line = strstr(line, "\r\n") + 2) {
            size_t nl = strcspn(line, ":\r");
            bool ok = false;
            for (size_t k = 0; k < sizeof allowed / sizeof allowed[0]; k++)
                ok |= strlen(allowed[k]) == nl && strncmp(line, allowed[k], nl) == 0;
            cr_assert(ok && line[nl] == ':', "round %d, a line no 304 has: \"%.*s\"", i,
                      (int)strcspn(line, "\r"), line);
            for (const char *c = line; *c != '\r'; c++)
                cr_assert((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f,
                          "round %d: byte 0x%02x in a 304's head", i, (unsigned char)*c);
        }
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "curl -s --http2-prior-knowledge -D - -o /dev/null -H 'If-None-Match: *' "
             "http://127.0.0.1:%d/ten.txt | tr -d '\\r' | grep -v '^$' | grep -v '^HTTP' | cut -d: "
             "-f1 | sort | "
             "tr '\\n' ' '",
             d.http);
    cr_assert_str_eq(run(cmd), "date etag last-modified server vary ");
}

/* If-Match and If-Unmodified-Since (412 when false, checked before the 304 conditions), and
 * the three HTTP-date forms a recipient must accept (RFC 9110 5.6.7). */
Test(static_e2e, preconditions_and_date_forms)
{
    char etag[128], lm[64], f[400];
    ten_validators(etag, lm);
    snprintf(f, sizeof f, "If-Match: \"other\", %s\r\n", etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 200", "0123456789");
    expect(get_with("/ten.txt", "If-Match: *\r\n"), "HTTP/1.1 200", "0123456789");
    expect(get_with("/ten.txt", "If-Match: \"other\"\r\n"), "HTTP/1.1 412", NULL);
    /* An empty list names no tag: If-Match is false, If-None-Match true (RFC 9110 13.1.1-2). */
    expect(get_with("/ten.txt", "If-Match: \r\n"), "HTTP/1.1 412", NULL);
    expect(get_with("/ten.txt", "If-Match:\r\n"), "HTTP/1.1 412", NULL);
    expect(get_with("/ten.txt", "If-None-Match: \r\n"), "HTTP/1.1 200", "0123456789");
    snprintf(f, sizeof f, "If-Match: \r\nIf-Match: %s\r\n", etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 200", "0123456789");
    snprintf(f, sizeof f, "If-Match: W/%s\r\n", etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 412", NULL); /* strong comparison */
    snprintf(f, sizeof f, "If-Unmodified-Since: %s\r\n", lm);
    expect(get_with("/ten.txt", f), "HTTP/1.1 200", "0123456789");
    expect(get_with("/ten.txt", "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"),
           "HTTP/1.1 412", NULL);
    expect(get_with("/ten.txt", "If-Unmodified-Since: yesterday\r\n"), "HTTP/1.1 200", NULL);
    /* If-Match decides; If-Unmodified-Since is then not looked at. */
    snprintf(f, sizeof f, "If-Match: %s\r\nIf-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n",
             etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 200", NULL);
    /* A failed If-Match wins over a matching If-None-Match: 412, not 304. */
    snprintf(f, sizeof f, "If-Match: \"other\"\r\nIf-None-Match: %s\r\n", etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 412", NULL);

    struct tm tm = {0};
    cr_assert_not_null(strptime(lm, "%a, %d %b %Y %H:%M:%S GMT", &tm));
    char d850[64], dasc[64];
    strftime(d850, sizeof d850, "%A, %d-%b-%y %H:%M:%S GMT", &tm);
    strftime(dasc, sizeof dasc, "%a %b %e %H:%M:%S %Y", &tm);
    snprintf(f, sizeof f, "If-Modified-Since: %s\r\n", d850);
    expect(get_with("/ten.txt", f), "HTTP/1.1 304", NULL);
    snprintf(f, sizeof f, "If-Modified-Since: %s\r\n", dasc);
    expect(get_with("/ten.txt", f), "HTTP/1.1 304", NULL);
    expect(get_with("/ten.txt", "If-Modified-Since: Saturday, 01-Jan-00 00:00:00 GMT\r\n"),
           "HTTP/1.1 200", NULL);
    expect(get_with("/ten.txt", "If-Modified-Since: Sat Jan  1 00:00:00 2000\r\n"), "HTTP/1.1 200",
           NULL);
}

Test(static_e2e, ranges)
{
    char *r = get_with("/ten.txt", "Range: bytes=2-4\r\n");
    expect(r, "HTTP/1.1 206", "Content-Range: bytes 2-4/10\r\n");
    expect(r, "HTTP/1.1 206", "Content-Length: 3\r\n\r\n234");
    expect(get_with("/ten.txt", "Range: bytes=7-\r\n"), "HTTP/1.1 206", "\r\n\r\n789");
    expect(get_with("/ten.txt", "Range: bytes=-2\r\n"), "HTTP/1.1 206", "bytes 8-9/10");
    expect(get_with("/ten.txt", "Range: bytes=5-100\r\n"), "HTTP/1.1 206", "bytes 5-9/10");
    expect(get_with("/ten.txt", "Range: bytes=10-\r\n"), "HTTP/1.1 416",
           "Content-Range: bytes */10\r\n");
    /* Several: multipart (byteranges_* below); one satisfiable among them: a single part. */
    expect(get_with("/ten.txt", "Range: bytes=0-1,4-5\r\n"), "HTTP/1.1 206",
           "Content-Type: multipart/byteranges; boundary=");
    expect(get_with("/ten.txt", "Range: bytes=20-, 3-4\r\n"), "HTTP/1.1 206",
           "Content-Range: bytes 3-4/10\r\n");
    expect(get_with("/ten.txt", "Range: bytes=20-,30-40\r\n"), "HTTP/1.1 416", "bytes */10");
    expect(get_with("/ten.txt", "Range: bytes=x\r\n"), "HTTP/1.1 200", "0123456789");
    expect(get_with("/ten.txt", "Range: bytes=2-4\r\nIf-Range: \"stale\"\r\n"), "HTTP/1.1 200",
           "0123456789");
    char etag[128], f[300];
    snprintf(etag, sizeof etag, "%s", field(get("/ten.txt"), "ETag"));
    snprintf(f, sizeof f, "Range: bytes=2-4\r\nIf-Range: %s\r\n", etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 206", "\r\n\r\n234");
    snprintf(f, sizeof f, "Range: bytes=2-4\r\nIf-Range: W/%s\r\n", etag);
    expect(get_with("/ten.txt", f), "HTTP/1.1 200", NULL); /* If-Range compares strongly */
}

Test(static_e2e, precompressed_variant)
{
    char *r = get_with("/style.css", "Accept-Encoding: br, gzip\r\n");
    expect(r, "HTTP/1.1 200", "Content-Encoding: gzip\r\n");
    expect(r, "HTTP/1.1 200", "Vary: Accept-Encoding\r\n");
    expect(r, "HTTP/1.1 200", "Content-Type: text/css\r\n");
    r = get_with("/style.css", "Accept-Encoding: gzip;q=0\r\n");
    expect(r, "HTTP/1.1 200", "body { color: red }");
    cr_expect(strstr(r, "Content-Encoding") == NULL, "%s", r);
    r = get("/style.css");
    expect(r, "HTTP/1.1 200", "Vary: Accept-Encoding\r\n");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "curl -s --compressed http://127.0.0.1:%d/style.css", d.http);
    cr_expect_str_eq(run(cmd), "body { color: red }\n");
    /* .br first where it exists and is accepted; the .gz otherwise; the file itself last. */
    expect(get_with("/app.js", "Accept-Encoding: gzip, br\r\n"), "HTTP/1.1 200",
           "Content-Encoding: br\r\n");
    r = get_with("/app.js", "Accept-Encoding: gzip\r\n");
    expect(r, "HTTP/1.1 200", "\r\n\r\njs");
    cr_expect(strstr(r, "Content-Encoding") == NULL, "%s", r);
    expect(get_with("/style.css", "Accept-Encoding: br;q=0, gzip\r\n"), "HTTP/1.1 200",
           "Content-Encoding: gzip\r\n");
    /* "*" stands for the codings the list does not name (RFC 9110 12.5.3): a gzip refused by
     * name stays refused; x-gzip is gzip (8.4.1.3). */
    expect(get_with("/style.css", "Accept-Encoding: *\r\n"), "HTTP/1.1 200",
           "Content-Encoding: gzip\r\n");
    r = get_with("/style.css", "Accept-Encoding: gzip;q=0, *\r\n");
    expect(r, "HTTP/1.1 200", "body { color: red }");
    cr_expect(strstr(r, "Content-Encoding") == NULL, "%s", r);
    r = get_with("/style.css", "Accept-Encoding: *;q=0\r\n");
    cr_expect(strstr(r, "Content-Encoding") == NULL, "%s", r);
    expect(get_with("/style.css", "Accept-Encoding: x-gzip\r\n"), "HTTP/1.1 200",
           "Content-Encoding: gzip\r\n");
    expect(get_with("/style.css", "Accept-Encoding: gzip, *;q=0\r\n"), "HTTP/1.1 200",
           "Content-Encoding: gzip\r\n");
}

/* 3 MB by sendfile, once at full speed and once to a reader that takes 1 MB/s (the socket
 * fills, so the bounded-write fallback runs), and pipelined behind a request. */
Test(static_e2e, large_file_whole_to_fast_and_slow_readers)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "curl -s http://127.0.0.1:%d/big.bin | cmp - %s/www/big.bin && echo same", d.http,
             dir);
    cr_expect_str_eq(run(cmd), "same\n");
    snprintf(cmd, sizeof cmd,
             "curl -s --limit-rate 1M http://127.0.0.1:%d/big.bin | cmp - %s/www/big.bin && "
             "echo same",
             d.http, dir);
    cr_expect_str_eq(run(cmd), "same\n");
    snprintf(cmd, sizeof cmd,
             "curl -s http://127.0.0.1:%d/big.bin http://127.0.0.1:%d/ten.txt | head -c 3000010 "
             "| tail -c 10",
             d.http, d.http);
    cr_expect_str_eq(run(cmd), "0123456789");
}

/* A client that asks for a large file and never reads: the sendfile waits for it within the
 * send limits, then the connection closes; nothing hangs. A daemon of its own, with
 * send_timeout_ms = 1000 (the suite's keeps the default: curl --limit-rate above may pause
 * longer than a second). */
Test(static_e2e, a_peer_that_never_reads_a_large_file_is_closed_by_the_send_timeout)
{
    harness_sh("head -c 33554432 /dev/zero > %s/www/huge.bin", dir);
    char conf[128];
    snprintf(conf, sizeof conf, "%s/short.conf", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"
            "[limits]\nsend_timeout_ms = 1000\n[route /]\nhandler = static\nroot = %s/www\n",
            dir);
    fclose(f);
    daemon_proc d2 = start_with(conf, NULL, NULL);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 65536; /* so the kernel cannot take the whole file for the client */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d2.http)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *req = "GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    sleep(3); /* well past the send timeout, reading nothing */
    size_t total = 0;
    static char buf[1 << 16];
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (ssize_t k; (k = read(fd, buf, sizeof buf)) > 0;)
        total += (size_t)k;
    close(fd);
    cr_expect_lt(total, (size_t)33554432, "the connection closed before the end: %zu", total);
    cr_expect_gt(total, 0);
    stop(&d2);
    expect(get("/ten.txt"), "HTTP/1.1 200", NULL);
}

/* Its pages written back and dropped from the page cache, so RWF_NOWAIT refuses them; true
 * when the kernel did drop its first page (DONTNEED is advice: pages still on a per-CPU list
 * stay). */
static bool drop_from_cache(const char *rel)
{
    char path[256];
    snprintf(path, sizeof path, "%s/www/%s", dir, rel);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0, "%s", path);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    void *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    unsigned char in_core = 1;
    if (m != MAP_FAILED) {
        mincore(m, 4096, &in_core);
        munmap(m, 4096);
    }
    close(fd);
    return (in_core & 1) == 0;
}

static unsigned long long blocking_jobs(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "curl -s http://127.0.0.1:%d/metrics | grep '^magpie_blocking_jobs_total '", d.http);
    const char *line = run(cmd);
    unsigned long long jobs = 0;
    cr_assert_eq(sscanf(line, "magpie_blocking_jobs_total %llu", &jobs), 1, "%s", line);
    return jobs;
}

/* A cold file, small or large, is read on the runtime's blocking pool, not on a worker; the
 * bytes are the file's. A read with RWF_NOWAIT that finds no page starts the kernel's
 * readahead, and on a fast disk the pages can be in by the next attempt (about one time in a
 * hundred here, more under ThreadSanitizer), which then copies them without waiting: so fresh
 * files are tried up to eight times, and one of the tries must have gone to the pool. */
Test(static_e2e, a_file_not_in_the_page_cache_is_read_on_the_blocking_pool)
{
    int dropped_tries = 0;
    for (int attempt = 0; attempt < 8; attempt++) {
        harness_sh(
            "cd %s/www && head -c 9000 /dev/urandom > cold.dat && head -c 2500000 /dev/urandom > "
            "cold.bin",
            dir);
        bool dropped = drop_from_cache("cold.dat");
        dropped |= drop_from_cache("cold.bin");
        unsigned long long before = blocking_jobs();
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "curl -s http://127.0.0.1:%d/cold.dat | cmp - %s/www/cold.dat && "
                 "curl -s http://127.0.0.1:%d/cold.bin | cmp - %s/www/cold.bin && echo same",
                 d.http, dir, d.http, dir);
        cr_assert_str_eq(run(cmd), "same\n");
        if (!dropped)
            continue; /* DONTNEED is advice: the kernel kept a page */
        dropped_tries++;
        if (blocking_jobs() > before)
            return;
    }
    if (dropped_tries == 0)
        cr_log_warn("the kernel kept the files' pages: only the bytes were checked");
    else
        cr_assert_fail("no read of %d cold tries went to the blocking pool", dropped_tries);
}

/* GET rel with Range (and more fields: "-H 'Name: v' ..."), over HTTP/1.1 or h2c (curl), as a
 * multipart/byteranges 206 whose parts must be want[0..n) of the file, in that order, each
 * with Content-Type ctype, and whose Content-Length is its body's. */
static void expect_parts(const char *rel, const char *range, bool h2, const char *ctype,
                         const unsigned long long want[][2], int n)
{
    char head[128], body[128], cmd[1024];
    snprintf(head, sizeof head, "%s/parts.head", dir);
    snprintf(body, sizeof body, "%s/parts.body", dir);
    snprintf(cmd, sizeof cmd, "curl -s %s -D %s -o %s -H 'Range: %s' http://127.0.0.1:%d/%s",
             h2 ? "--http2-prior-knowledge" : "", head, body, range, d.http, rel);
    run(cmd);
    size_t hlen, blen, flen;
    char *h = harness_slurp(head, &hlen), *b = harness_slurp(body, &blen);
    char path[256];
    snprintf(path, sizeof path, "%s/www/%s", dir, rel);
    char *file = harness_slurp(path, &flen);
    cr_assert(strncmp(h, h2 ? "HTTP/2 206" : "HTTP/1.1 206", h2 ? 10 : 12) == 0, "%.300s", h);
    const char *ct = strcasestr(h, "\ncontent-type: multipart/byteranges; boundary=");
    cr_assert_not_null(ct, "%.400s", h);
    char boundary[80];
    cr_assert_eq(sscanf(strchr(ct, '=') + 1, "%70[^\r\n]", boundary), 1);
    const char *cl = strcasestr(h, "\ncontent-length: ");
    cr_assert_not_null(cl, "%.400s", h);
    cr_expect_eq(strtoull(cl + 17, NULL, 10), blen, "Content-Length against the body");
    size_t at = 0, bl = strlen(boundary);
    for (int i = 0; i < n; i++) {
        /* The delimiter (after a CRLF but for the first), the part's head, its bytes. */
        if (i > 0) {
            cr_assert(at + 2 <= blen && memcmp(b + at, "\r\n", 2) == 0, "part %d", i);
            at += 2;
        }
        cr_assert(at + 2 + bl + 2 <= blen && memcmp(b + at, "--", 2) == 0 &&
                      memcmp(b + at + 2, boundary, bl) == 0 &&
                      memcmp(b + at + 2 + bl, "\r\n", 2) == 0,
                  "part %d's delimiter at %zu", i, at);
        at += 2 + bl + 2;
        const char *end = memmem(b + at, blen - at, "\r\n\r\n", 4);
        cr_assert_not_null(end, "part %d's head", i);
        char ph[512], want_ct[160], want_cr[96];
        snprintf(ph, sizeof ph, "%.*s\r\n", (int)(end - (b + at)), b + at);
        snprintf(want_ct, sizeof want_ct, "Content-Type: %s\r\n", ctype);
        snprintf(want_cr, sizeof want_cr, "Content-Range: bytes %llu-%llu/%zu\r\n", want[i][0],
                 want[i][1], flen);
        cr_expect(strstr(ph, want_ct) != NULL, "part %d: %s", i, ph);
        cr_expect(strstr(ph, want_cr) != NULL, "part %d: %s (want %s)", i, ph, want_cr);
        at = (size_t)(end - b) + 4;
        size_t len = (size_t)(want[i][1] - want[i][0] + 1);
        cr_assert(at + len <= blen, "part %d cut short", i);
        cr_expect(memcmp(b + at, file + want[i][0], len) == 0, "part %d's bytes", i);
        at += len;
    }
    char closing[96];
    int cl_len = snprintf(closing, sizeof closing, "\r\n--%s--\r\n", boundary);
    cr_expect(blen - at == (size_t)cl_len && memcmp(b + at, closing, (size_t)cl_len) == 0,
              "the closing delimiter ends the body (%zu bytes after the last part)", blen - at);
    free(h);
    free(b);
    free(file);
}

/* Several ranges: multipart/byteranges (RFC 9110 14.6) in the order asked, over HTTP/1.1 and
 * HTTP/2, from a small file (its kept bytes), a large one (sendfile: parts of more than one
 * piece) and a cold one (read on the blocking pool); a HEAD's length is the GET's body's. */
Test(static_e2e, byteranges_several_ranges_are_multipart)
{
    static const unsigned long long ten[][2] = {{0, 1}, {4, 5}, {8, 9}};
    for (int h2 = 0; h2 < 2; h2++) {
        expect_parts("ten.txt", "bytes=0-1,4-5,8-", h2, "text/plain", ten, 3);
        expect_parts("ten.txt", "bytes=0-1,,  4-5 ,-2", h2, "text/plain", ten, 3);
        /* Out of order, unsatisfiable ones dropped, overlapping within the file's size. */
        static const unsigned long long big[][2] = {
            {2999900, 2999999}, {0, 99}, {1000000, 2500000}, {50, 60}};
        expect_parts("big.bin", "bytes=-100, 0-99, 5000000-, 1000000-2500000, 50-60", h2,
                     "application/octet-stream", big, 4);
    }
    /* The boundary is fresh per response. */
    char first[128];
    snprintf(first, sizeof first, "%s",
             field(get_with("/ten.txt", "Range: bytes=0-0,2-2\r\n"), "Content-Type"));
    cr_expect_str_neq(first,
                      field(get_with("/ten.txt", "Range: bytes=0-0,2-2\r\n"), "Content-Type"));
    char req[256];
    snprintf(req, sizeof req,
             "HEAD /ten.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1,4-6\r\nConnection: "
             "close\r\n\r\n"); /* text: the GET's body below is measured with strlen() */
    char *r = ask(req);
    expect(r, "HTTP/1.1 206", "multipart/byteranges");
    cr_expect(strstr(r, "\r\n\r\n")[4] == '\0', "a HEAD has no body: %s", r);
    char get_req[256];
    snprintf(get_req, sizeof get_req, "GET%s", req + 4);
    const char *len_head = field(r, "Content-Length");
    char head_len[32];
    snprintf(head_len, sizeof head_len, "%s", len_head);
    char *g = ask(get_req);
    cr_expect_str_eq(field(g, "Content-Length"), head_len);
    cr_expect_eq(strlen(strstr(g, "\r\n\r\n") + 4), strtoull(head_len, NULL, 10));

    for (int attempt = 0; attempt < 4; attempt++) {
        harness_sh("cd %s/www && head -c 2500000 /dev/urandom > coldparts.bin", dir);
        drop_from_cache("coldparts.bin");
        static const unsigned long long cold[][2] = {{100, 20099}, {2400000, 2499999}};
        expect_parts("coldparts.bin", "bytes=100-20099,2400000-", attempt & 1,
                     "application/octet-stream", cold, 2);
    }
}

/* What is refused stays the whole file: more bytes than the file has (overlaps: the
 * amplification of CVE-2011-3192), more than 16 ranges, a list that is not one; no range
 * satisfiable is 416; a stale If-Range is the whole file too. */
Test(static_e2e, byteranges_refused_shapes_get_the_whole_file)
{
    expect(get_with("/ten.txt", "Range: bytes=0-5,3-9\r\n"), "HTTP/1.1 200", "\r\n\r\n0123456789");
    expect(get_with("/ten.txt", "Range: bytes=0-1;4-5\r\n"), "HTTP/1.1 200", "\r\n\r\n0123456789");
    expect(get_with("/ten.txt", "Range: bytes=0-1 4-5\r\n"), "HTTP/1.1 200", "\r\n\r\n0123456789");
    expect(get_with("/ten.txt", "Range: bytes=0-1,5-4\r\n"), "HTTP/1.1 200", "\r\n\r\n0123456789");
    expect(get_with("/ten.txt", "Range: bytes=,\r\n"), "HTTP/1.1 200", "\r\n\r\n0123456789");
    char many[512] = "Range: bytes=";
    for (int i = 0; i < 17; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s%d-%d", i ? "," : "", i, i);
    strcat(many, "\r\n");
    expect(get_with("/big.bin", many), "HTTP/1.1 200", "Content-Length: 3000000\r\n");
    many[strlen(many) - 2 - strlen(",16-16")] = '\0'; /* 16 of them: served */
    strcat(many, "\r\n");
    expect(get_with("/big.bin", many), "HTTP/1.1 206", "multipart/byteranges");
    expect(get_with("/ten.txt", "Range: bytes=0-1,4-5\r\nIf-Range: \"stale\"\r\n"), "HTTP/1.1 200",
           "\r\n\r\n0123456789");
    /* Each part of ten 1-byte ranges of a 10-byte file: no more bytes than it has. */
    expect(get_with("/ten.txt", "Range: bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8,9-9\r\n"),
           "HTTP/1.1 206", "Content-Range: bytes 9-9/10\r\n\r\n9\r\n--");
}

/* A file cut short while it is sent: the response ends short, with a close, never padded
 * and never a hang; the daemon goes on serving. The file (64 MiB, sparse) is larger than the
 * kernel's autotuned buffers on both sides can take before the client reads again (tcp_wmem's
 * 4 MiB and tcp_rmem's 6 MiB at most), so the truncate lands mid-send. */
Test(static_e2e, file_shrinking_mid_send_ends_with_a_close)
{
    harness_sh("truncate -s 64M %s/www/shrink.bin", dir);
    int fd = test_connect(d.http);
    const char *req = "GET /shrink.bin HTTP/1.1\r\nHost: x\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    char head[4096];
    ssize_t n = read(fd, head, sizeof head); /* the head and a first piece; then stop reading */
    cr_assert_gt(n, 0);
    harness_sh("truncate -s 100000 %s/www/shrink.bin", dir);
    size_t total = 0;
    static char buf[1 << 16];
    for (;;) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k <= 0)
            break;
        total += (size_t)k;
    }
    close(fd);
    cr_expect_lt(total + (size_t)n, (size_t)64 << 20, "the whole length arrived after a truncate");
    expect(get("/ten.txt"), "HTTP/1.1 200", NULL);
}

/* A counter or gauge from /metrics (the whole line's value). */
static unsigned long long metric(const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "curl -s http://127.0.0.1:%d/metrics | grep '^%s '", d.http, name);
    const char *line = run(cmd);
    unsigned long long v = 0;
    cr_assert_eq(sscanf(line + strlen(name), " %llu", &v), 1, "%s: %s", name, line);
    return v;
}

#define OFC "magpied_static_open_file_cache_"

/* Repeated requests are served from a worker's open-file cache: hits move, the file's
 * descriptor is counted; within the window a file replaced by rename is served whole, old or
 * new, never mixed; after it, new with a new ETag. */
Test(static_e2e, open_file_cache_hits_and_replaced_file_after_the_window)
{
    unsigned long long hits0 = metric(OFC "hits_total");
    char etag[128];
    snprintf(etag, sizeof etag, "%s", field(get("/ten.txt"), "ETag"));
    /* Two workers: a few keep-alive requests reach both (and each worker's second is a hit). */
    int fd = test_connect(d.http);
    char resp[4096];
    for (int i = 0; i < 8; i++) {
        const char *req = "GET /ten.txt HTTP/1.1\r\nHost: x\r\n\r\n";
        test_write_all(fd, req, strlen(req));
        read_some(fd, resp, sizeof resp, "0123456789", 1);
    }
    close(fd);
    cr_expect_gt(metric(OFC "hits_total"), hits0, "no hit after 9 requests");
    cr_expect_geq(metric(OFC "misses_total"), 1);
    cr_expect_geq(metric(OFC "open_fds"), 1);
    cr_expect_geq(metric(OFC "entries"), 1);
    /* A 10-byte file: its bytes kept with the entry (open_file_cache_bytes_max), no pread. */
    cr_expect_geq(metric(OFC "kept_bytes"), 10);

    harness_sh("printf 'ABCDEFGHIJ' > %s/www/ten.new && mv %s/www/ten.new %s/www/ten.txt", dir, dir,
               dir);
    char *r = get("/ten.txt");
    if (strstr(r, "0123456789") != NULL) /* still the cached one: whole, with its own ETag */
        cr_expect_str_eq(field(r, "ETag"), etag);
    else
        expect(r, "HTTP/1.1 200", "\r\n\r\nABCDEFGHIJ");
    usleep((VALID_MS + 50) * 1000);
    r = get("/ten.txt");
    expect(r, "HTTP/1.1 200", "\r\n\r\nABCDEFGHIJ");
    cr_expect_str_neq(field(r, "ETag"), etag);
    cr_expect_geq(metric(OFC "expired_total"), 1);
}

/* A missing file: 404s within the window come from the workers' negative entries (no open:
 * counted apart), and a file created meanwhile is served once the window has passed. */
Test(static_e2e, missing_file_remembered_then_seen_once_created)
{
    unsigned long long neg0 = metric(OFC "negative_hits_total");
    /* Two workers: at most one open each. */
    for (int i = 0; i < 10; i++)
        expect(get("/later.txt"), "HTTP/1.1 404", NULL);
    cr_expect_geq(metric(OFC "negative_hits_total") - neg0, 8, "10 requests, 2 workers");
    harness_sh("printf 'now here' > %s/www/later.new && mv %s/www/later.new %s/www/later.txt", dir,
               dir, dir);
    usleep((VALID_MS + 50) * 1000);
    expect(get("/later.txt"), "HTTP/1.1 200", "\r\n\r\nnow here");
    harness_sh("rm %s/www/later.txt", dir);
}

/* SIGHUP with open_file_cache_entries = 0: the cache is off from the next request on (its
 * entries are closed), and files are still served. */
Test(static_e2e, reload_turns_the_open_file_cache_off)
{
    expect(get("/ten.txt"), "HTTP/1.1 200", NULL);
    expect(get("/ten.txt"), "HTTP/1.1 200", NULL);
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    FILE *f = fopen(conf, "a");
    cr_assert_not_null(f);
    fprintf(f, "open_file_cache_entries = 0\n");
    fclose(f);
    kill(d.pid, SIGHUP);
    for (int i = 0; i < 250 && metric("magpied_reloads_total{result=\"success\"}") == 0; i++)
        usleep(20000);
    cr_assert_eq(metric("magpied_reloads_total{result=\"success\"}"), 1);
    /* Each worker drops its entries at its next static request. */
    for (int i = 0; i < 8; i++)
        expect(get("/ten.txt"), "HTTP/1.1 200", "0123456789");
    unsigned long long hits = metric(OFC "hits_total");
    for (int i = 0; i < 4; i++)
        expect(get("/ten.txt"), "HTTP/1.1 200", "0123456789");
    cr_expect_eq(metric(OFC "hits_total"), hits, "a hit with the cache off");
}

/* A file truncated while its descriptor is cached: within the window its cached size is
 * announced, and the body ends at the new end with a close (never padded); after the window,
 * the new size. */
Test(static_e2e, shrunk_cached_file_ends_short_with_a_close)
{
    harness_sh("head -c 100000 /dev/urandom > %s/www/cut.bin", dir);
    expect(get("/cut.bin"), "HTTP/1.1 200", "Content-Length: 100000\r\n");
    char path[128];
    snprintf(path, sizeof path, "%s/www/cut.bin", dir);
    cr_assert_eq(truncate(path, 20000), 0);
    int fd = test_connect(d.http);
    const char *req = "GET /cut.bin HTTP/1.1\r\nHost: x\r\n\r\n"; /* keep-alive asked */
    test_write_all(fd, req, strlen(req));
    static char buf[200000];
    size_t total = 0;
    for (;;) { /* to the close: the daemon closes a response it ended short */
        ssize_t k = read(fd, buf + total, sizeof buf - 1 - total);
        if (k <= 0)
            break;
        total += (size_t)k;
        buf[total] = '\0';
        if (strstr(buf, "Content-Length: 20000\r\n") != NULL) /* the window had passed */
            break;
    }
    close(fd);
    buf[total] = '\0';
    const char *body = strstr(buf, "\r\n\r\n");
    cr_assert_not_null(body, "%.300s", buf);
    size_t blen = total - (size_t)(body + 4 - buf);
    if (strstr(buf, "Content-Length: 100000\r\n") != NULL)
        cr_expect_leq(blen, 20000, "bytes past the new end");
    else
        expect(buf, "HTTP/1.1 200", "Content-Length: 20000\r\n");
    expect(get("/ten.txt"), "HTTP/1.1 200", NULL);
}

/* An open the kernel cannot do from its caches alone (openat2's RESOLVE_CACHED refuses
 * /proc/self, whose link proc resolves per process) goes to the blocking pool while the
 * response waits, and every answer still comes: a file, a directory's redirect, a 404, and
 * keep-alive after them. */
Test(static_e2e, an_open_that_would_wait_runs_on_the_blocking_pool)
{
    unsigned long long jobs0 = metric("magpie_blocking_jobs_total");
    expect(get("/proc/self/status"), "HTTP/1.1 200", "ETag: \"");
    expect(get("/proc/self/fd"), "HTTP/1.1 301", "Location: /proc/self/fd/\r\n");
    expect(get("/proc/self/nope"), "HTTP/1.1 404", NULL);
    expect(get("/proc/self/fd/0"), "HTTP/1.1 404", NULL); /* a magic link: never followed */
    /* Which of these the kernel can open from its caches alone depends on what the process
     * touched before (its /metrics reads files under /proc/self): not every one need go to
     * the pool, but /proc/self/nope does, always (proc keeps no negative dentry: RESOLVE_CACHED
     * cannot tell its absence without the lookup). */
    cr_expect_geq(metric("magpie_blocking_jobs_total"), jobs0 + 1, "opens on the pool");
    int fd = test_connect(d.http);
    const char *req = "GET /proc/self/status HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /ten.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    char resp[8192];
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    expect(resp, "HTTP/1.1 200", "0123456789"); /* pipelined behind the pending open */
}
