/* Stream invariants of daemon/http/http1.c: the same bytes, however the reads split them, give
 * byte-identical output and the same final want (split at every offset, byte by byte, and at
 * random multi-way splits of mutated input); output past the high-water mark pauses parsing
 * and resumes where it stopped.
 */
#include "daemon/http_harness.h"
#include "test_util.h"

TestSuite(http1_split, .init = server_setup, .timeout = 60);

struct result {
    char *out;
    size_t len;
    int want;
};

/* Feeds in[0..len) in pieces ending at cuts[0..ncuts) (increasing), then the rest. */
static struct result run_cuts(const char *in, size_t len, const size_t *cuts, size_t ncuts)
{
    struct session s;
    session_open(&s);
    size_t at = 0;
    for (size_t i = 0; i <= ncuts && s.want != MD_HTTP_WANT_CLOSE; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        feed_at(&s, T0, in + at, end - at);
        at = end;
    }
    struct result r = {malloc(md_outbuf_pending(&s.out) + 1), md_outbuf_pending(&s.out), s.want};
    cr_assert_not_null(r.out);
    if (r.len != 0)
        memcpy(r.out, md_outbuf_pending_data(&s.out), r.len);
    session_close(&s);
    return r;
}

static void expect_same(const struct result *ref, const struct result *got, const char *in,
                        size_t len, const char *how)
{
    cr_assert(
        got->want == ref->want && got->len == ref->len && memcmp(got->out, ref->out, ref->len) == 0,
        "%s changes the result (want %d vs %d)\n  input: %s\n  whole: %s\n  split: %s", how,
        got->want, ref->want, show(in, len), show(ref->out, ref->len), show(got->out, got->len));
}

/* Split at every offset, and byte by byte. */
static void check_splits(const char *in, size_t len)
{
    struct result ref = run_cuts(in, len, NULL, 0);
    for (size_t k = 1; k < len; k++) {
        struct result r = run_cuts(in, len, &k, 1);
        char how[64];
        snprintf(how, sizeof(how), "a split at %zu", k);
        expect_same(&ref, &r, in, len, how);
        free(r.out);
    }
    size_t *cuts = malloc(len * sizeof(*cuts));
    cr_assert_not_null(cuts);
    for (size_t k = 0; k + 1 < len; k++)
        cuts[k] = k + 1;
    struct result r = run_cuts(in, len, cuts, len > 0 ? len - 1 : 0);
    expect_same(&ref, &r, in, len, "feeding byte by byte");
    free(r.out);
    free(cuts);
    free(ref.out);
}

static void check_splits_str(const char *in)
{
    check_splits(in, strlen(in));
}

static const char mixed[] =
    "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    "HEAD /healthz HTTP/1.1\r\nHost: a\r\nUser-Agent: test\r\n\r\n"
    "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world"
    "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n"
    "\r\n"
    "GET /nope?x=y HTTP/1.1\r\nHost: a\r\n\r\n"
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
    "GET http://example.com/healthz HTTP/1.1\r\nHost: example.com\r\nX-Empty:\r\n"
    "X-Spaces:   v  \r\n\r\n"
    "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    "GET / HTTP/1.1\r\nHost: a\r\n\r\n";

Test(http1_split, mixed_pipeline)
{
    check_splits(mixed, sizeof(mixed) - 1);
    expect_no_leaks();
}

/* Expect: 100-continue is the one place where the split shows, by design: the 100 (or, for a
 * refused target, its final status and a close) goes out only when a read ends exactly at the
 * head, since a client that sent body bytes with its head is not waiting for one (RFC 9110
 * 10.1.1). Every other split gives the whole's output. */
Test(http1_split, expect_100_continue_shows_only_where_a_read_ends_at_the_head)
{
    static const char in[] =
        "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi"
        "POST /x HTTP/1.1\r\nhost: a\r\nEXPECT: 100-CONTINUE\r\nTransfer-Encoding: chunked\r\n\r\n"
        "1\r\nz\r\n0\r\n\r\n"
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    size_t len = sizeof(in) - 1;
    size_t end1 = (size_t)(strstr(in, "\r\n\r\n") - in) + 4;
    size_t end2 = (size_t)(strstr(in + end1, "\r\n\r\n") - in) + 4;
    struct result ref = run_cuts(in, len, NULL, 0);
    ref.out[ref.len] = '\0'; /* for strstr(): run_cuts() leaves a byte for it */
    cr_assert_eq(ref.want, MD_HTTP_WANT_READ);
    cr_assert(strstr(ref.out, "100 Continue") == NULL);
    for (size_t k = 1; k < len; k++) {
        struct result r = run_cuts(in, len, &k, 1);
        if (k == end1) {
            /* The 100, then the same. */
            cr_assert(r.want == ref.want && r.len == ref.len + strlen(cont) &&
                          memcmp(r.out, cont, strlen(cont)) == 0 &&
                          memcmp(r.out + strlen(cont), ref.out, ref.len) == 0,
                      "split at the first head: %s", show(r.out, r.len));
        } else if (k == end2) {
            /* /x is 404: its status at once, and a close. */
            const char *first = strstr(ref.out, "HTTP/1.1 404");
            cr_assert_not_null(first);
            size_t keep = (size_t)(first - ref.out);
            static const char closing[] = "HTTP/1.1 404 Not Found\r\n" DATE
                                          "Connection: close\r\nContent-Type: text/plain\r\n"
                                          "Content-Length: 10\r\n\r\nNot Found\n";
            cr_assert(r.want == MD_HTTP_WANT_CLOSE && r.len == keep + strlen(closing) &&
                          memcmp(r.out, ref.out, keep) == 0 &&
                          memcmp(r.out + keep, closing, strlen(closing)) == 0,
                      "split at the second head: %s", show(r.out, r.len));
        } else {
            char how[64];
            snprintf(how, sizeof(how), "a split at %zu", k);
            expect_same(&ref, &r, in, len, how);
        }
        free(r.out);
    }
    free(ref.out);
    expect_no_leaks();
}

Test(http1_split, malformed_and_smuggling)
{
    char in[4096];
    /* A HEAD whose target is bad: whether its 400 has a body must not depend on the split. */
    check_splits_str("GET / HTTP/1.1\r\nHost: a\r\n\r\nHEAD z HTTP/1.1\r\nHost: a\r\n\r\n");
    for (size_t i = 0; i < NMALFORMED; i++) {
        snprintf(in, sizeof(in), "GET / HTTP/1.1\r\nHost: a\r\n\r\n%s", malformed[i]);
        check_splits_str(in);
    }
    for (size_t i = 0; i < NSMUGGLING; i++) {
        snprintf(in, sizeof(in), "GET / HTTP/1.1\r\nHost: a\r\n\r\n%sGET / HTTP/1.1\r\n\r\n",
                 smuggling[i]);
        check_splits_str(in);
    }
    expect_no_leaks();
}

/* The request-line and field checks that look at bytes one span at a time: Host values,
 * target bytes, "*", OPTIONS, CONNECT, versions, chunk ends, an empty Transfer-Encoding. */
Test(http1_split, rfc_rules)
{
    static const char *const tails[] = {
        "GET / HTTP/1.1\r\nHost: user@host\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a, b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost:   \r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
        "GET /a{b HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /a\x80 HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET * HTTP/1.1\r\nHost: a\r\n\r\n",
        "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
        "GET / HTTP/9.9\r\nHost: a\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\nabcXY0\r\n\r\n",
        /* A method llhttp does not know is 501 however the line is split, garbage 400. */
        "BREW /pot HTTP/1.1\r\nHost: a\r\n\r\n",
        "PATCHX / HTTP/1.1\r\nHost: a\r\n\r\n",
        "PO9ST / HTTP/1.1\r\n\r\n",
        "FOO / HTTP/1.1\nHost: a\r\n\r\n",
        "FOO / HTTP/x.1\r\n\r\n",
        "FOO\t/ HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
        "GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n",
    };
    char in[4096];
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
        snprintf(in, sizeof(in),
                 "GET / HTTP/1.1\r\nHost: [::1]:80  \r\n\r\n%s"
                 "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
                 tails[i]);
        check_splits_str(in);
    }
    check_splits_str("OPTIONS * HTTP/1.1\r\nHost: a:1\r\n\r\nOPTIONS /echo HTTP/1.2\r\nHost: a\r\n"
                     "\r\nPOST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3;a;b=\"c\";d=e\r\nabc\r\n0\r\n\r\nGET /?q=%41 HTTP/1.1\r\nHost: a\r\n\r\n");
    expect_no_leaks();
}

Test(http1_split, limits)
{
    char in[4096];
    srv.limits.max_header_bytes = 300;
    srv.limits.max_request_line = 100;
    srv.limits.max_headers = 4;
    srv.limits.max_body_bytes = 16;
    /* Heads at 299, 300 and 301 bytes: the exact-count path. */
    for (size_t size = 299; size <= 301; size++) {
        size_t fixed = strlen("GET / HTTP/1.1\r\nHost: a\r\nX: \r\n\r\n");
        int n = sprintf(in, "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nX: ");
        memset(in + n, 'v', size - fixed);
        sprintf(in + n + size - fixed, "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
        check_splits_str(in);
    }
    check_splits_str("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"
                     "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n");
    memset(in, 0, sizeof(in));
    int n = sprintf(in, "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /");
    memset(in + n, 'a', 120);
    sprintf(in + n + 120, " HTTP/1.1\r\nHost: a\r\n\r\n");
    check_splits_str(in);
    check_splits_str("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 16\r\n\r\n0123456789abcdef"
                     "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "10\r\n0123456789abcdef\r\n1\r\nx\r\n0\r\n\r\n");
    check_splits_str("POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                     "Content-Length: 17\r\n\r\n");
    expect_no_leaks();
}

/* Output past MD_HTTP_OUT_HIGH_WATER stops the parser; the rest is fed again. */
Test(http1_split, high_water_pauses_and_resumes)
{
    enum { BODY = 64 * 1024, N = 8 };
    static char in[N * (BODY + 128)];
    size_t len = 0;
    for (int i = 0; i < N; i++) {
        len +=
            (size_t)sprintf(in + len,
                            "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "%x\r\n",
                            BODY);
        memset(in + len, 'a' + i, BODY);
        len += BODY;
        len += (size_t)sprintf(in + len, "\r\n0\r\n\r\n");
    }
    struct session s;
    session_open(&s);
    feed_at(&s, T0, in, len);
    cr_assert_gt(s.flushes, 0, "never paused");
    cr_assert_eq(s.want, MD_HTTP_WANT_READ);
    /* N responses, in order, each with its own body. */
    const char *p = md_outbuf_pending_data(&s.out);
    size_t left = md_outbuf_pending(&s.out);
    for (int i = 0; i < N; i++) {
        const char *body = memmem(p, left, "\r\n\r\n", 4);
        cr_assert_not_null(body);
        body += 4;
        cr_assert_geq(left - (size_t)(body - p), (size_t)BODY);
        for (size_t k = 0; k < BODY; k += 4099)
            cr_assert_eq(body[k], 'a' + i);
        left -= (size_t)(body + BODY - p);
        p = body + BODY;
    }
    cr_assert_eq(left, 0);
    session_close(&s);

    /* And the pauses do not depend on how the input was read. */
    struct result ref = run_cuts(in, len, NULL, 0);
    size_t cuts[] = {1000, 70000, 200000, 300001};
    struct result r = run_cuts(in, len, cuts, 4);
    expect_same(&ref, &r, "(8 chunked echoes)", 18, "splitting");
    free(r.out);
    free(ref.out);
    expect_no_leaks();
}

/* xorshift64*, seeded from MP_TEST_SEED when set (MAGPIE_FUZZ_ITERS sets the rounds). */
static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * UINT64_C(2685821657736338717);
}

static void rng_seed(void)
{
    rng_state = test_seed_or(UINT64_C(0x9e3779b97f4a7c15));
}

/* Mutations aimed at the parser's seams: line ends, separators, digits, NUL, high bytes. */
static size_t mutate(char *buf, size_t len, size_t cap)
{
    static const char pieces[][8] = {"\r\n",  "\n",       "\r",      " ", "\t", ":",
                                     "\0",    "\xff",     "0",       "9", ";",  ",",
                                     "\r\n ", "\r\n\r\n", "chunked", "-1"};
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits && len > 0; e++) {
        size_t at = (size_t)(rng() % len);
        switch (rng() % 4) {
        case 0: /* replace a byte */
            buf[at] = (char)(rng() & 0xff);
            break;
        case 1: { /* insert a piece */
            const char *p = pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
            size_t n = p[0] == '\0' ? 1 : strlen(p);
            if (len + n <= cap) {
                memmove(buf + at + n, buf + at, len - at);
                memcpy(buf + at, p, n);
                len += n;
            }
            break;
        }
        case 2: { /* delete a few bytes */
            size_t n = 1 + (size_t)(rng() % 8);
            if (at + n > len)
                n = len - at;
            memmove(buf + at, buf + at + n, len - at - n);
            len -= n;
            break;
        }
        default: /* truncate */
            len = at;
            break;
        }
    }
    return len;
}

Test(http1_split, fuzzed_input_splits_the_same)
{
    static char buf[4096];
    rng_seed();
    srv.limits.max_header_bytes = 512;
    srv.limits.max_request_line = 128;
    srv.limits.max_body_bytes = 64;
    const char *seeds[NMALFORMED + NSMUGGLING + 1];
    size_t nseeds = 0;
    seeds[nseeds++] = mixed;
    for (size_t i = 0; i < NMALFORMED; i++)
        seeds[nseeds++] = malformed[i];
    for (size_t i = 0; i < NSMUGGLING; i++)
        seeds[nseeds++] = smuggling[i];
    const char *env = getenv("MAGPIE_FUZZ_ITERS");
    long iters = env != NULL ? strtol(env, NULL, 0) : 4000;
    for (long iter = 0; iter < iters; iter++) {
        const char *seed = seeds[rng() % nseeds];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        len = mutate(buf, len, sizeof(buf));
        struct result ref = run_cuts(buf, len, NULL, 0);
        size_t cuts[6], ncuts = 0;
        for (size_t k = 0; k < 6 && len > 1; k++) {
            size_t c = 1 + (size_t)(rng() % (len - 1));
            if (ncuts == 0 || c > cuts[ncuts - 1])
                cuts[ncuts++] = c;
        }
        struct result r = run_cuts(buf, len, cuts, ncuts);
        expect_same(&ref, &r, buf, len, "a random split");
        free(r.out);
        /* Whatever came out is whole responses: each starts with a status line. */
        cr_assert(ref.len == 0 || memcmp(ref.out, "HTTP/1.1 ", 9) == 0);
        free(ref.out);
    }
    expect_no_leaks();
}

/* Arbitrary bytes: nothing crashes, nothing leaks (under ASan), and the connection ends. */
Test(http1_split, random_bytes)
{
    static char buf[2048];
    rng_seed();
    for (int iter = 0; iter < 2000; iter++) {
        size_t len = (size_t)(rng() % sizeof(buf));
        for (size_t i = 0; i < len; i++)
            buf[i] = (char)(rng() & 0xff);
        if (iter % 2 == 0)
            memcpy(buf, "POST /echo HTTP/1.1\r\n", len < 21 ? len : 21);
        struct result r = run_cuts(buf, len, NULL, 0);
        free(r.out);
    }
    expect_no_leaks();
}
