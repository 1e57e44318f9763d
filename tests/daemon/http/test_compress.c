/* Compression on the fly (daemon/http/compress.c): Accept-Encoding, the route's keys and media
 * types, and the compressor's stream decoded again with zlib's inflate and
 * ZSTD_decompressStream, raw and chunked, small, empty and larger than its output pieces. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/decode_body.h"
#include "http/compress.h"

TestSuite(compress, .timeout = 30);

enum { G = MD_CODING_GZIP, Z = MD_CODING_ZSTD, BOTH = (1 << G) | (1 << Z) };

static unsigned neg(const char *ae, unsigned enabled)
{
    return md_compress_negotiate(ae, ae != NULL ? strlen(ae) : 0, enabled);
}

Test(compress, negotiate)
{
    cr_expect_eq(neg(NULL, BOTH), MD_CODING_NONE, "no Accept-Encoding: identity");
    cr_expect_eq(neg("", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip", BOTH), G);
    cr_expect_eq(neg("GZip", BOTH), G, "any case");
    cr_expect_eq(neg("x-gzip", BOTH), G);
    cr_expect_eq(neg("zstd", BOTH), Z);
    cr_expect_eq(neg("gzip, deflate, br, zstd", BOTH), Z, "zstd on a tie");
    cr_expect_eq(neg("gzip, zstd", 1 << G), G, "only what the route enables");
    cr_expect_eq(neg("zstd", 1 << G), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q=1.0, zstd;q=0.5", BOTH), G, "the higher weight");
    cr_expect_eq(neg("gzip;q=0.3, zstd;q=0.301", BOTH), Z);
    cr_expect_eq(neg("gzip ; q=0.8 , zstd;q=0.2", BOTH), G, "spaces around parameters");
    cr_expect_eq(neg("gzip;q=0", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q=0.000, zstd;Q=0.", BOTH), MD_CODING_NONE, "every spelling of 0");
    cr_expect_eq(neg("br", BOTH), MD_CODING_NONE, "a coding we do not make");
    cr_expect_eq(neg("identity", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("identity;q=0", BOTH), MD_CODING_NONE, "identity is still sent, never 406");
    cr_expect_eq(neg("identity;q=0, gzip", BOTH), G);
    cr_expect_eq(neg("*", BOTH), Z, "* stands for both");
    cr_expect_eq(neg("*", 1 << G), G);
    cr_expect_eq(neg("*;q=0", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q=0, *", BOTH), Z, "* for what is not named");
    cr_expect_eq(neg("zstd;q=0, *;q=0.5", BOTH), G);
    cr_expect_eq(neg("gzip, gzip;q=0", BOTH), G, "named twice: the higher weight");
    cr_expect_eq(neg("gzip;level=9;q=0.5", BOTH), G, "other parameters ignored");
}

Test(compress, negotiate_hostile)
{
    /* Not qvalues: the element is ignored. */
    cr_expect_eq(neg("gzip;q=5", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q=1.5", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q=1.001", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q=0.0001", BOTH), MD_CODING_NONE, "four decimals");
    cr_expect_eq(neg("gzip;q=99999999999999999999999", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q=-1", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q=", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;q", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("gzip;qux=1;q=0", BOTH), MD_CODING_NONE, "q after another parameter");
    cr_expect_eq(neg("gzip;q=abc, zstd", BOTH), Z, "one bad element, the rest stands");
    cr_expect_eq(neg(",,,;;;===\"\"\"", BOTH), MD_CODING_NONE);
    cr_expect_eq(neg("\x01\x7f\xff", BOTH), MD_CODING_NONE);
    /* Thousands of tokens: linear, and the answer is still right. */
    size_t n = 200000;
    char *big = malloc(n + 16);
    cr_assert_not_null(big);
    size_t w = 0;
    while (w + 8 < n) {
        memcpy(big + w, "foo;q=1,", 8);
        w += 8;
    }
    memcpy(big + w, "gzip", 5);
    cr_expect_eq(md_compress_negotiate(big, w + 4, BOTH), G);
    cr_expect_eq(md_compress_negotiate(big, w, BOTH), MD_CODING_NONE);
    free(big);
}

static int key(md_route_compress *c, const char *k, const char *v)
{
    char msg[256] = "";
    int rc = md_compress_key(c, k, v, msg, sizeof msg);
    if (rc == -EINVAL)
        cr_expect_neq(msg[0], '\0', "a message for %s = %s", k, v);
    return rc;
}

Test(compress, keys)
{
    md_route_compress c;
    md_compress_init(&c);
    cr_expect_eq(c.codings, 0, "off by default");
    cr_expect_eq(c.level_gzip, 1);
    cr_expect_eq(c.level_zstd, 3);
    cr_expect_eq(c.min_length, 512);
    cr_expect_eq(key(&c, "compress", "gzip zstd"), 0);
    cr_expect_eq(c.codings, BOTH);
    cr_expect_eq(key(&c, "compress", "zstd"), 0);
    cr_expect_eq(c.codings, 1 << Z);
    cr_expect_eq(key(&c, "compress", "gzip, zstd"), 0);
    cr_expect_eq(key(&c, "compress", "off"), 0);
    cr_expect_eq(c.codings, 0);
    cr_expect_eq(key(&c, "compress", "br"), -EINVAL);
    cr_expect_eq(key(&c, "compress", "gzip off"), -EINVAL);
    cr_expect_eq(key(&c, "compress", ""), -EINVAL);
    cr_expect_eq(key(&c, "compress_level_gzip", "9"), 0);
    cr_expect_eq(c.level_gzip, 9);
    cr_expect_eq(key(&c, "compress_level_gzip", "0"), -EINVAL);
    cr_expect_eq(key(&c, "compress_level_gzip", "10"), -EINVAL);
    cr_expect_eq(key(&c, "compress_level_zstd", "19"), 0);
    cr_expect_eq(key(&c, "compress_level_zstd", "20"), -EINVAL);
    cr_expect_eq(key(&c, "compress_level_zstd", "x"), -EINVAL);
    cr_expect_eq(key(&c, "compress_min_length", "0"), 0);
    cr_expect_eq(c.min_length, 0);
    cr_expect_eq(key(&c, "compress_min_length", "-1"), -EINVAL);
    cr_expect_eq(key(&c, "compress_types", "text/html, application/JSON text/*"), 0);
    cr_expect_str_eq(c.types, "text/html application/json text/*");
    cr_expect_eq(key(&c, "compress_types", "html"), -EINVAL);
    cr_expect_eq(key(&c, "compress_types", "text/"), -EINVAL);
    cr_expect_eq(key(&c, "compress_types", "*/*x"), -EINVAL);
    cr_expect_eq(key(&c, "compress_types", "text/h\"tml"), -EINVAL);
    char many[400];
    memset(many, 0, sizeof many);
    for (int i = 0; i < 20; i++) /* 280 bytes */
        strcat(many, "text/abcdefgh ");
    cr_expect_eq(key(&c, "compress_types", many), -EINVAL, "longer than kept");
    cr_expect_eq(key(&c, "nope", "1"), -ENOENT);
}

Test(compress, types)
{
    md_route_compress c;
    md_compress_init(&c);
    cr_expect(md_compress_type_ok(&c, "text/html"));
    cr_expect(md_compress_type_ok(&c, "text/plain; charset=utf-8"));
    cr_expect(md_compress_type_ok(&c, "Text/CSS"));
    cr_expect(md_compress_type_ok(&c, "application/json"));
    cr_expect(md_compress_type_ok(&c, "application/javascript"));
    cr_expect(md_compress_type_ok(&c, "image/svg+xml"));
    cr_expect_not(md_compress_type_ok(&c, "image/png"));
    cr_expect_not(md_compress_type_ok(&c, "application/octet-stream"));
    cr_expect_not(md_compress_type_ok(&c, "application/gzip"));
    cr_expect_not(md_compress_type_ok(&c, "text"));
    cr_expect_not(md_compress_type_ok(&c, ""));
    cr_expect_eq(key(&c, "compress_types", "application/x-custom image/*"), 0);
    cr_expect(md_compress_type_ok(&c, "application/x-custom;a=b"));
    cr_expect(md_compress_type_ok(&c, "image/bmp"));
    cr_expect_not(md_compress_type_ok(&c, "text/html"), "the list replaces the default");
    cr_expect_not(md_compress_type_ok(&c, "application/x-customer"));
}

/* A chunked body's data, its framing checked; the length of what follows the last chunk. */
static size_t unchunk(const char *in, size_t n, char *out, size_t *outn)
{
    size_t i = 0;
    *outn = 0;
    for (;;) {
        char *end;
        unsigned long size = strtoul(in + i, &end, 16);
        cr_assert(end > in + i && end + 1 < in + n && end[0] == '\r' && end[1] == '\n',
                  "a chunk-size line at %zu", i);
        i = (size_t)(end - in) + 2;
        if (size == 0) {
            cr_assert(i + 2 <= n && memcmp(in + i, "\r\n", 2) == 0, "the last chunk's CRLF");
            return n - i - 2;
        }
        cr_assert(i + size + 2 <= n, "a whole chunk");
        memcpy(out + *outn, in + i, size);
        *outn += size;
        cr_assert(memcmp(in + i + size, "\r\n", 2) == 0);
        i += size + 2;
    }
}

/* body through a compressor of coding at level, written in pieces of step bytes, decoded. */
static void round_trip(unsigned coding, int level, bool chunked, const char *body, size_t n,
                       size_t step)
{
    md_outbuf out;
    md_outbuf_init(&out);
    md_zstream *z = md_zstream_take(coding, level, step >= n ? n : 0, chunked);
    cr_assert_not_null(z);
    size_t off = 0;
    do {
        size_t k = n - off < step ? n - off : step;
        cr_assert_eq(md_zstream_write(z, &out, body + off, k, off + k == n), 0);
        off += k;
    } while (off < n);
    md_zstream_give(z);
    const char *data = md_outbuf_pending_data(&out);
    size_t len = md_outbuf_pending(&out);
    char *coded = malloc(len + 1), *plain = malloc(n + 64);
    cr_assert(coded != NULL && plain != NULL);
    size_t clen = len;
    if (chunked) {
        cr_expect_eq(unchunk(data, len, coded, &clen), 0, "nothing after the last chunk");
    } else {
        memcpy(coded, data, len);
    }
    size_t got =
        decode_body(coding == MD_CODING_GZIP ? "gzip" : "zstd", coded, clen, plain, n + 64);
    cr_expect_eq(got, n);
    cr_expect(memcmp(plain, body, n) == 0, "the body back");
    free(coded);
    free(plain);
    md_outbuf_free(&out);
}

static char *text(size_t n)
{
    static const char *const words[] = {"magpie ", "zlib ", "stream ", "window ", "the "};
    char *b = malloc(n + 1);
    cr_assert_not_null(b);
    unsigned seed = 7;
    for (size_t i = 0; i < n;) {
        seed = seed * 1103515245 + 12345;
        const char *w = words[(seed >> 16) % 5];
        for (; *w != '\0' && i < n; w++)
            b[i++] = *w;
    }
    return b;
}

static char *noise(size_t n)
{
    char *b = malloc(n);
    cr_assert_not_null(b);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (char)x;
    }
    return b;
}

Test(compress, stream_small_and_empty)
{
    for (unsigned k = G; k <= Z; k++) {
        for (int chunked = 0; chunked < 2; chunked++) {
            round_trip(k, k == G ? 1 : 3, chunked, "hello", 5, 5);
            round_trip(k, k == G ? 1 : 3, chunked, "", 0, 1);
        }
    }
}

Test(compress, stream_large)
{
    size_t n = 3u << 20;
    char *t = text(n), *r = noise(1u << 20);
    for (unsigned k = G; k <= Z; k++) {
        for (int chunked = 0; chunked < 2; chunked++) {
            round_trip(k, k == G ? 6 : 3, chunked, t, n, 16384); /* as static.c feeds it */
            round_trip(k, k == G ? 1 : 1, chunked, t, n, n);     /* one body from memory */
            round_trip(k, 9, chunked, t, 100000, 7);             /* tiny pieces */
            /* Incompressible: more output than one 16 KiB piece per write. */
            round_trip(k, k == G ? 1 : 3, chunked, r, 1u << 20, 1u << 20);
        }
    }
    free(t);
    free(r);
}

/* Contexts come back from the thread's cache at another level and still make whole streams;
 * one dropped half way (a connection closed) is reset before its next body. */
Test(compress, reuse)
{
    char *t = text(200000);
    for (int i = 0; i < 12; i++) {
        unsigned k = i % 2 ? G : Z;
        md_outbuf out;
        md_outbuf_init(&out);
        md_zstream *z = md_zstream_take(k, 1 + i % 9, 0, false);
        cr_assert_not_null(z);
        cr_assert_eq(md_zstream_write(z, &out, t, 100000, false), 0);
        md_zstream_give(z); /* abandoned */
        md_outbuf_free(&out);
        round_trip(k, 1 + (i * 5) % 9, i % 3 == 0, t, 200000, 65536);
    }
    free(t);
    cr_expect_null(md_zstream_take(MD_CODING_NONE, 1, 0, false));
}

Test(compress, metrics)
{
    round_trip(G, 1, false, "0123456789", 10, 10);
    md_outbuf out;
    md_outbuf_init(&out);
    cr_assert_eq(md_compress_metrics(&out), 0);
    cr_assert_eq(md_outbuf_append(&out, "", 1), 0);
    const char *m = md_outbuf_pending_data(&out);
    cr_expect_not_null(strstr(m, "# TYPE magpied_compress_bytes_in_total counter\n"));
    cr_expect_not_null(strstr(m, "magpied_compress_responses_total{coding=\"gzip\"} "));
    cr_expect_not_null(strstr(m, "magpied_compress_bytes_out_total{coding=\"zstd\"} "));
    cr_expect_null(strstr(m, "magpied_compress_responses_total{coding=\"gzip\"} 0\n"),
                   "a gzip body was counted");
    md_outbuf_free(&out);
}
