/* A body coded by magpied's compressor (http/compress.c) decoded again with the libraries'
 * own decoders, for the suites that check it: the unit suite and the end-to-end ones (static
 * files, proxied responses). Include after criterion.h. */
#ifndef TESTS_DAEMON_DECODE_BODY_H
#define TESTS_DAEMON_DECODE_BODY_H

#include <stdint.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

/* in[0..n) decoded by coding ("gzip" or "zstd") into out[0..cap); its length. Fails the test
 * unless in is one whole gzip stream or zstd frame with nothing after it. */
static inline size_t decode_body(const char *coding, const char *in, size_t n, char *out,
                                 size_t cap)
{
    if (strcmp(coding, "gzip") == 0) {
        z_stream s = {0};
        cr_assert_eq(inflateInit2(&s, 15 + 16), Z_OK);
        s.next_in = (Bytef *)(uintptr_t)in;
        s.avail_in = (uInt)n;
        s.next_out = (Bytef *)out;
        s.avail_out = (uInt)cap;
        cr_assert_eq(inflate(&s, Z_FINISH), Z_STREAM_END, "a whole gzip stream");
        cr_assert_eq(s.avail_in, 0, "bytes after the gzip stream");
        size_t got = cap - s.avail_out;
        inflateEnd(&s);
        return got;
    }
    cr_assert_str_eq(coding, "zstd");
    ZSTD_DStream *z = ZSTD_createDStream();
    cr_assert_not_null(z);
    ZSTD_inBuffer ib = {in, n, 0};
    ZSTD_outBuffer ob = {out, cap, 0};
    size_t left = 1;
    while (ib.pos < ib.size) {
        left = ZSTD_decompressStream(z, &ob, &ib);
        cr_assert(!ZSTD_isError(left), "%s", ZSTD_getErrorName(left));
    }
    cr_assert_eq(left, 0, "a whole zstd frame");
    ZSTD_freeDStream(z);
    return ob.pos;
}

#endif
