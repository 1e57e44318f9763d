/* Tests of loadtest/load/resp.c: framing responses whole, split at every byte, pipelined. */
#include <criterion/criterion.h>
#include <string.h>

#include "resp.h"

static ld_resp r;

/* Feed text in pieces of `piece` bytes; returns the number of responses completed, with
 * their statuses in st[] and in *nerr the error if one came (0 otherwise). */
static int feed_all(const char *text, size_t len, size_t piece, bool head, int *st, int *nerr)
{
    int n = 0;
    *nerr = 0;
    ld_resp_start(&r, head);
    size_t off = 0;
    while (off < len) {
        size_t chunk = len - off < piece ? len - off : piece;
        size_t used_here = 0;
        while (used_here < chunk) {
            bool done;
            long u = ld_resp_feed(&r, text + off + used_here, chunk - used_here, &done);
            if (u < 0) {
                *nerr = (int)u;
                return n;
            }
            used_here += (size_t)u;
            if (done) {
                st[n++] = r.status;
                ld_resp_start(&r, head);
            } else {
                cr_assert_eq(used_here, chunk, "a piece was left unused without an end");
            }
        }
        off += chunk;
    }
    return n;
}

static void expect(const char *text, bool head, int responses, const int *statuses)
{
    size_t len = strlen(text);
    for (size_t piece = 1; piece <= len; piece = piece < 8 ? piece + 1 : piece * 2) {
        int st[16], err;
        int n = feed_all(text, len, piece, head, st, &err);
        cr_assert_eq(err, 0, "piece %zu: error %d", piece, err);
        cr_assert_eq(n, responses, "piece %zu: %d responses", piece, n);
        for (int i = 0; i < n; i++)
            cr_assert_eq(st[i], statuses[i]);
        cr_assert_eq(r.head_len, 0);
    }
}

static int error_of(const char *text)
{
    int st[16], err;
    feed_all(text, strlen(text), strlen(text), false, st, &err);
    return err;
}

Test(resp, content_length)
{
    expect("HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\n"
           "Hello, World!",
           false, 1, (int[]){200});
}

Test(resp, pipelined_responses_in_one_piece)
{
    expect("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
           "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
           "HTTP/1.1 201 Created\r\nCONTENT-LENGTH:   3  \r\n\r\nabc",
           false, 3, (int[]){200, 404, 201});
}

Test(resp, chunked_with_extensions_and_trailers)
{
    expect("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
           "5;name=value\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n"
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
           false, 2, (int[]){200, 200});
}

Test(resp, no_body_for_head_204_304)
{
    expect("HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n", true, 1, (int[]){200});
    expect("HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
           false, 2, (int[]){204, 304});
}

Test(resp, interim_responses_are_skipped)
{
    expect("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", false, 1,
           (int[]){200});
}

Test(resp, close_is_seen)
{
    bool done;
    const char *a = "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n";
    ld_resp_start(&r, false);
    cr_assert_eq(ld_resp_feed(&r, a, strlen(a), &done), (long)strlen(a));
    cr_assert(done && r.close);
    const char *b = "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    ld_resp_start(&r, false);
    ld_resp_feed(&r, b, strlen(b), &done);
    cr_assert(done && r.close);
    const char *c = "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n";
    ld_resp_start(&r, false);
    ld_resp_feed(&r, c, strlen(c), &done);
    cr_assert(done && !r.close);
}

Test(resp, body_until_close)
{
    bool done;
    const char *a = "HTTP/1.1 200 OK\r\n\r\nsome bytes";
    ld_resp_start(&r, false);
    cr_assert_eq(ld_resp_feed(&r, a, strlen(a), &done), (long)strlen(a));
    cr_assert(!done && r.until_eof && r.close);
    cr_assert(ld_resp_eof(&r, &done));
    cr_assert(done);
    /* A close in the middle of a Content-Length body cuts the response short. */
    const char *b = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    ld_resp_start(&r, false);
    ld_resp_feed(&r, b, strlen(b), &done);
    cr_assert_not(ld_resp_eof(&r, &done));
    cr_assert_not(done);
    /* Between responses it cuts nothing. */
    ld_resp_start(&r, false);
    cr_assert(ld_resp_eof(&r, &done));
    cr_assert_not(done);
}

Test(resp, malformed_responses)
{
    cr_assert_eq(error_of("HTTP/2 200 OK\r\n\r\n"), LD_RESP_BAD_STATUS);
    cr_assert_eq(error_of("HTTP/1.1 20 OK\r\n\r\n"), LD_RESP_BAD_STATUS);
    cr_assert_eq(error_of("HTTP/1.1 999 OK\r\n\r\n"), LD_RESP_BAD_STATUS);
    cr_assert_eq(error_of("HTTP/1.1 101 Switching\r\n\r\n"), LD_RESP_BAD_STATUS);
    cr_assert_eq(error_of("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"), LD_RESP_BAD_HEADER);
    cr_assert_eq(error_of("HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n"), LD_RESP_BAD_LENGTH);
    cr_assert_eq(error_of("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
                 LD_RESP_BAD_LENGTH);
    cr_assert_eq(error_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
                 LD_RESP_BAD_CHUNK);
    cr_assert_eq(error_of("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n"),
                 LD_RESP_BAD_CHUNK);
    /* The same Content-Length twice is allowed. */
    cr_assert_eq(error_of("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"), 0);
}

Test(resp, a_head_too_large_is_an_error)
{
    static char big[LD_RESP_HEAD_MAX + 200];
    strcpy(big, "HTTP/1.1 200 OK\r\nX: ");
    size_t n = strlen(big);
    memset(big + n, 'a', sizeof big - n - 1);
    bool done;
    ld_resp_start(&r, false);
    long u = ld_resp_feed(&r, big, 100, &done); /* split: goes to the copy path */
    cr_assert_eq(u, 100);
    u = ld_resp_feed(&r, big + 100, sizeof big - 101, &done);
    cr_assert_eq(u, LD_RESP_BAD_HEADER);
}
