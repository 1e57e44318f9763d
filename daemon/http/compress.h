/* A route's compression on the fly (compress = gzip zstd), as nginx's gzip module and Caddy's
 * encode: the keys, the choice of a coding from Accept-Encoding, and the streaming compressor
 * a response's body passes through (zlib's deflate with a gzip wrapper, or zstd).
 *
 * request.c asks md_compress_plan() at every response head of a route with compression on
 * (one branch for the others): whether the response varies by Accept-Encoding (Vary) and which
 * coding, if any, its body gets. A compressed body has no Content-Length: chunked over
 * HTTP/1.1, DATA frames until END_STREAM over HTTP/2. The compressor (md_zstream) writes the
 * coded body into the connection's output, framed, a bounded piece at a time; contexts are
 * reused through a cache of each thread's (at most MD_ZSTREAM_CACHE per coding), so a
 * response does not allocate a fresh one.
 */
#ifndef MD_COMPRESS_H
#define MD_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/outbuf.h"

enum md_coding {
    MD_CODING_NONE = 0,
    MD_CODING_GZIP = 1,
    MD_CODING_ZSTD = 2,
};

enum {
    MD_COMPRESS_TYPES_MAX = 192,   /* bytes of compress_types, with its NUL */
    MD_COMPRESS_MIN_DEFAULT = 512, /* compress_min_length */
    MD_COMPRESS_GZIP_DEFAULT = 1,  /* compress_level_gzip, as nginx's gzip_comp_level */
    MD_COMPRESS_ZSTD_DEFAULT = 3,  /* compress_level_zstd, zstd's own default */
    MD_ZSTREAM_CACHE = 4,          /* contexts kept per thread and coding */
};

/* A route's keys. Zero (codings 0) is off; md_compress_init() sets the defaults. */
typedef struct md_route_compress {
    uint8_t codings;    /* bits (1 << enum md_coding); 0: off */
    uint8_t level_gzip; /* 1..9 */
    uint8_t level_zstd; /* 1..19 */
    uint32_t min_length;
    char types[MD_COMPRESS_TYPES_MAX]; /* "a/b c/any" ranges, lower case, spaced; "": default */
} md_route_compress;

void md_compress_init(md_route_compress *c);
/* compress, compress_level_gzip, compress_level_zstd, compress_min_length, compress_types:
 * 0, -ENOENT for another key, or -EINVAL with msg. */
int md_compress_key(md_route_compress *c, const char *key, const char *value, char *msg,
                    size_t msg_len);

/* The coding to use for an Accept-Encoding value (a[0..n); NULL: none sent, identity) among
 * enabled (bits of enum md_coding): the one with the highest weight (q), zstd on a tie;
 * "x-gzip" is gzip, "*" stands for any coding not named; a weight of 0, or one that is not
 * a qvalue (RFC 9110 12.4.2: 0 to 1, three decimals at most), excludes a coding.
 * MD_CODING_NONE when none is acceptable (identity is then sent: never 406). */
unsigned md_compress_negotiate(const char *a, size_t n, unsigned enabled);

/* Whether the media type ctype ("text/html; charset=utf-8") is one of c's types. */
bool md_compress_type_ok(const md_route_compress *c, const char *ctype);

/* "gzip", "zstd". */
const char *md_coding_name(unsigned coding);

/* A streaming compressor for one response body. chunked: frame what it writes as HTTP/1.1
 * chunks (and end with the last chunk); else raw (HTTP/2's DATA). length: the body's, when
 * known (the context may size itself to it); 0: unknown. NULL: out of memory. */
typedef struct md_zstream md_zstream;
md_zstream *md_zstream_take(unsigned coding, int level, uint64_t length, bool chunked);
/* len bytes of the body through the compressor into out; last: the body ends with them (the
 * coded stream is finished and, chunked, the last chunk written). Output is written in pieces
 * of at most 16 KiB as the compressor makes them. 0, -ENOMEM (out could not grow), -EIO (the
 * library failed). */
int md_zstream_write(md_zstream *z, md_outbuf *out, const char *in, size_t len, bool last);
/* Done with it (finished or not): the context goes back to the thread's cache. */
void md_zstream_give(md_zstream *z);

/* /metrics: magpied_compress_{responses,bytes_in,bytes_out}_total{coding}. 0 or -ENOMEM. */
int md_compress_metrics(md_outbuf *out);

#endif
