/* Compression on the fly (compress.h): a route's keys, Accept-Encoding, and the compressor.
 *
 * Memory: a gzip context is zlib's deflate with windowBits 15 (a 32 KiB window, the ratio of
 * gzip -N) and memLevel 8, about 262 KiB ((1 << 17) + (1 << 17) plus its struct), the same as
 * nginx's defaults; a zstd context is the level's parameters with the window and the hash and
 * chain tables held to 2^15 (ZSTD_sizeof_CCtx after a body, zstd 1.5.4: about 305 KiB at
 * level 1, 500 KiB at 3, 430 KiB at 9; 950 KiB, 1.6 MiB and 2.4 MiB with a 128 KiB window and
 * the level's own tables, for a ratio within 2% on a 64 KiB test body). A response holds one
 * context while its body is being compressed, and each piece of output is at most 16 KiB, written
 * to the connection's output, which the handler lets drain before it compresses more (static.c): a
 * slow reader holds one context and one batch of output, never the body.
 */
#include "http/compress.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <zlib.h>
/* ZSTD_getCParams: the level's tables, to hold them to the window (libzstd exports it). */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "core/metrics.h"
#include "core/text.h"
#include "http/routes.h"

/* ---- the keys ---- */

/* Without compress_types: the media types worth compressing (text, and structured text in
 * application/ and image/svg+xml), as nginx's and Caddy's usual lists. */
static const char *const default_types[] = {
    "text/*",
    "application/json",
    "application/javascript",
    "application/x-javascript",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/ld+json",
    "application/manifest+json",
    "application/wasm",
    "image/svg+xml",
    "image/x-icon",
    "font/ttf",
    "font/otf",
    NULL,
};

void md_compress_init(md_route_compress *c)
{
    c->codings = 0;
    c->level_gzip = MD_COMPRESS_GZIP_DEFAULT;
    c->level_zstd = MD_COMPRESS_ZSTD_DEFAULT;
    c->min_length = MD_COMPRESS_MIN_DEFAULT;
    c->types[0] = '\0';
}

/* A media-range of a list: "type/subtype", or a type and "/" then a star, of token bytes. */
static bool media_range_ok(const char *w, size_t n)
{
    const char *slash = memchr(w, '/', n);
    if (slash == NULL || slash == w || slash == w + n - 1)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)w[i];
        bool tok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || strchr("!#$&-^_.+", ch) != NULL;
        if (!tok && !(ch == '/' && w + i == slash) && !(ch == '*' && i == n - 1 && w[i - 1] == '/'))
            return false;
    }
    return true;
}

static int parse_level(const char *value, unsigned max, uint8_t *out, char *msg, size_t msg_len)
{
    uint64_t v;
    if (md_parse_u64(value, 1, max, &v) != 0) {
        md_say(msg, msg_len, "expected an integer in 1..%u, got \"%s\"", max, value);
        return -EINVAL;
    }
    *out = (uint8_t)v;
    return 0;
}

int md_compress_key(md_route_compress *c, const char *key, const char *value, char *msg,
                    size_t msg_len)
{
    if (strcmp(key, "compress") == 0) {
        const char *s = value, *w;
        size_t n;
        unsigned set = 0;
        bool off = false;
        while (md_words_next(&s, &w, &n)) {
            if (n == 4 && memcmp(w, "gzip", 4) == 0) {
                set |= 1u << MD_CODING_GZIP;
            } else if (n == 4 && memcmp(w, "zstd", 4) == 0) {
                set |= 1u << MD_CODING_ZSTD;
            } else if (n == 3 && memcmp(w, "off", 3) == 0) {
                off = true;
            } else {
                md_say(msg, msg_len, "expected gzip, zstd, both, or off, got \"%s\"", value);
                return -EINVAL;
            }
        }
        if ((off && set != 0) || (!off && set == 0)) {
            md_say(msg, msg_len, "expected gzip, zstd, both, or off, got \"%s\"", value);
            return -EINVAL;
        }
        c->codings = (uint8_t)set;
        return 0;
    }
    if (strcmp(key, "compress_level_gzip") == 0)
        return parse_level(value, 9, &c->level_gzip, msg, msg_len);
    if (strcmp(key, "compress_level_zstd") == 0)
        return parse_level(value, 19, &c->level_zstd, msg, msg_len);
    if (strcmp(key, "compress_min_length") == 0) {
        uint64_t v;
        if (md_parse_u64(value, 0, 1073741824, &v) != 0) {
            md_say(msg, msg_len, "expected an integer in 0..1073741824 (bytes), got \"%s\"", value);
            return -EINVAL;
        }
        c->min_length = (uint32_t)v;
        return 0;
    }
    if (strcmp(key, "compress_types") == 0) {
        const char *s = value, *w;
        size_t n, len = 0;
        char buf[MD_COMPRESS_TYPES_MAX];
        while (md_words_next(&s, &w, &n)) {
            if (!media_range_ok(w, n)) {
                md_say(msg, msg_len, "expected media types (text/html, text/*), got \"%.*s\"",
                       (int)(n < 64 ? n : 64), w);
                return -EINVAL;
            }
            if (len + n + 1 >= sizeof buf) {
                md_say(msg, msg_len, "at most %d bytes of media types", MD_COMPRESS_TYPES_MAX - 1);
                return -EINVAL;
            }
            if (len != 0)
                buf[len++] = ' ';
            for (size_t i = 0; i < n; i++)
                buf[len++] = (char)md_ascii_lower((unsigned char)w[i]);
        }
        if (len == 0) {
            md_say(msg, msg_len, "expected media types (text/html, text/*)");
            return -EINVAL;
        }
        buf[len] = '\0';
        memcpy(c->types, buf, len + 1);
        return 0;
    }
    return -ENOENT;
}

/* t[0..tn) (lower case, no parameters) is matched by range r[0..rn) (a type and subtype, or a
 * type's every subtype). */
static bool range_matches(const char *r, size_t rn, const char *t, size_t tn)
{
    if (rn >= 2 && r[rn - 1] == '*' && r[rn - 2] == '/')
        return tn >= rn - 1 && memcmp(r, t, rn - 1) == 0;
    return rn == tn && memcmp(r, t, tn) == 0;
}

bool md_compress_type_ok(const md_route_compress *c, const char *ctype)
{
    char t[MD_COMPRESS_TYPES_MAX];
    size_t tn = 0;
    for (; ctype[tn] != '\0' && ctype[tn] != ';' && ctype[tn] != ' ' && ctype[tn] != '\t'; tn++) {
        if (tn == sizeof t)
            return false;
        t[tn] = (char)md_ascii_lower((unsigned char)ctype[tn]);
    }
    if (c->types[0] == '\0') {
        for (const char *const *r = default_types; *r != NULL; r++)
            if (range_matches(*r, strlen(*r), t, tn))
                return true;
        return false;
    }
    const char *s = c->types, *w;
    size_t n;
    while (md_words_next(&s, &w, &n))
        if (range_matches(w, n, t, tn))
            return true;
    return false;
}

const char *md_coding_name(unsigned coding)
{
    return coding == MD_CODING_ZSTD ? "zstd" : coding == MD_CODING_GZIP ? "gzip" : "identity";
}

/* ---- Accept-Encoding ---- */

/* The weight of a coding's parameters (";q=0.5"), in thousandths: 1000 when none; -1 when
 * a q is not a qvalue (the element is then ignored). */
static int weight(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (p[i] == ';' || p[i] == ' ' || p[i] == '\t'))
            i++;
        size_t start = i;
        while (i < n && p[i] != ';')
            i++;
        size_t end = i;
        while (end > start && (p[end - 1] == ' ' || p[end - 1] == '\t'))
            end--;
        if (end == start || (p[start] != 'q' && p[start] != 'Q') ||
            (end - start > 1 && p[start + 1] != '='))
            continue; /* another parameter: ignored */
        if (end - start == 1)
            return -1; /* "q" without a value */
        const char *v = p + start + 2;
        size_t vn = end - start - 2;
        /* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ) */
        if (vn == 0 || vn > 5 || (v[0] != '0' && v[0] != '1') || (vn > 1 && v[1] != '.'))
            return -1;
        int w = (v[0] - '0') * 1000, scale = 100;
        for (size_t k = 2; k < vn; k++, scale /= 10) {
            if (v[k] < '0' || v[k] > '9')
                return -1;
            w += (v[k] - '0') * scale;
        }
        return w > 1000 ? -1 : w;
    }
    return 1000;
}

unsigned md_compress_negotiate(const char *a, size_t n, unsigned enabled)
{
    if (a == NULL || enabled == 0)
        return MD_CODING_NONE;
    int q_gzip = -1, q_zstd = -1, q_any = -1; /* -1: not named */
    md_list l = md_list_of(a, n);
    const char *e;
    size_t el;
    while (md_list_next(&l, &e, &el)) {
        size_t t = 0;
        while (t < el && e[t] != ';' && e[t] != ' ' && e[t] != '\t')
            t++;
        int w = weight(e + t, el - t);
        if (w < 0)
            continue;
        if (md_ascii_eq_lower(e, t, "gzip") || md_ascii_eq_lower(e, t, "x-gzip"))
            q_gzip = w > q_gzip ? w : q_gzip;
        else if (md_ascii_eq_lower(e, t, "zstd"))
            q_zstd = w > q_zstd ? w : q_zstd;
        else if (t == 1 && e[0] == '*')
            q_any = w > q_any ? w : q_any;
    }
    if (q_gzip < 0)
        q_gzip = q_any;
    if (q_zstd < 0)
        q_zstd = q_any;
    if (!(enabled & (1u << MD_CODING_GZIP)))
        q_gzip = 0;
    if (!(enabled & (1u << MD_CODING_ZSTD)))
        q_zstd = 0;
    if (q_zstd > 0 && q_zstd >= q_gzip)
        return MD_CODING_ZSTD; /* smaller and cheaper than gzip at its default level */
    return q_gzip > 0 ? MD_CODING_GZIP : MD_CODING_NONE;
}

/* ---- the compressor ---- */

enum {
    PIECE = 16384,   /* bytes of output per piece (and chunk) */
    CHUNK_HEAD = 8,  /* "%06x\r\n": a piece's chunk-size, zero-padded (RFC 9112 7.1 allows it) */
    WINDOW_LOG = 15, /* zstd's window (32 KiB, gzip's) and the most its tables get */
};

struct md_zstream {
    uint8_t coding;
    bool chunked, done;
    int level;
    uint64_t in, out; /* bytes, for /metrics */
    z_stream z;       /* gzip: zlib points back at it, so the block never moves */
    ZSTD_CCtx *zc;    /* zstd */
};

/* Bytes in and out, and responses, by coding (1: gzip, 2: zstd); relaxed: counters only. */
static atomic_uint_fast64_t bytes_in[3], bytes_out[3], responses[3];

/* A thread's contexts, by coding, freed when the thread exits. */
struct zcache {
    md_zstream *z[3][MD_ZSTREAM_CACHE];
    unsigned n[3];
};
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void zstream_free(md_zstream *z)
{
    if (z->coding == MD_CODING_GZIP)
        deflateEnd(&z->z);
    else
        ZSTD_freeCCtx(z->zc);
    free(z);
}

static void cache_free(void *p)
{
    struct zcache *c = p;
    for (unsigned k = 0; k < 3; k++)
        for (unsigned i = 0; i < c->n[k]; i++)
            zstream_free(c->z[k][i]);
    free(c);
}

static void cache_key_make(void)
{
    (void)pthread_key_create(&cache_key, cache_free);
}

static struct zcache *cache(void)
{
    (void)pthread_once(&cache_once, cache_key_make);
    struct zcache *c = pthread_getspecific(cache_key);
    if (c == NULL && (c = calloc(1, sizeof *c)) != NULL && pthread_setspecific(cache_key, c) != 0) {
        free(c);
        c = NULL;
    }
    return c;
}

static md_zstream *zstream_new(unsigned coding)
{
    md_zstream *z = calloc(1, sizeof *z);
    if (z == NULL)
        return NULL;
    z->coding = (uint8_t)coding;
    if (coding == MD_CODING_GZIP) {
        /* windowBits 15 + 16: a gzip wrapper; memLevel 8: zlib's default hash. */
        if (deflateInit2(&z->z, MD_COMPRESS_GZIP_DEFAULT, Z_DEFLATED, 15 + 16, 8,
                         Z_DEFAULT_STRATEGY) != Z_OK) {
            free(z);
            return NULL;
        }
    } else if ((z->zc = ZSTD_createCCtx()) == NULL) {
        free(z);
        return NULL;
    }
    return z;
}

/* Sets a (new or reused) context up for a body at level, of length bytes (0: unknown). */
static int zstream_setup(md_zstream *z, int level, uint64_t length)
{
    if (z->coding == MD_CODING_GZIP) {
        if (deflateReset(&z->z) != Z_OK)
            return -EIO;
        /* After a reset nothing is pending: deflateParams only sets the level. */
        return deflateParams(&z->z, level, Z_DEFAULT_STRATEGY) == Z_OK ? 0 : -EIO;
    }
    ZSTD_CCtx *c = z->zc;
    (void)ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    /* The level's parameters with the window and the hash and chain tables held to 2^15: the
     * streaming buffers and the tables follow them. */
    ZSTD_compressionParameters p = ZSTD_getCParams(level, length, 0);
    size_t rc = ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(rc))
        rc = ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, WINDOW_LOG);
    if (!ZSTD_isError(rc))
        rc = ZSTD_CCtx_setParameter(c, ZSTD_c_hashLog,
                                    p.hashLog < WINDOW_LOG ? (int)p.hashLog : WINDOW_LOG);
    if (!ZSTD_isError(rc))
        rc = ZSTD_CCtx_setParameter(c, ZSTD_c_chainLog,
                                    p.chainLog < WINDOW_LOG ? (int)p.chainLog : WINDOW_LOG);
    if (!ZSTD_isError(rc) && length != 0)
        rc = ZSTD_CCtx_setPledgedSrcSize(c, length);
    return ZSTD_isError(rc) ? -EIO : 0;
}

md_zstream *md_zstream_take(unsigned coding, int level, uint64_t length, bool chunked)
{
    if (coding != MD_CODING_GZIP && coding != MD_CODING_ZSTD)
        return NULL;
    struct zcache *c = cache();
    md_zstream *z = NULL;
    if (c != NULL && c->n[coding] != 0)
        z = c->z[coding][--c->n[coding]];
    else
        z = zstream_new(coding);
    if (z == NULL)
        return NULL;
    if (zstream_setup(z, level, length) != 0) {
        zstream_free(z);
        return NULL;
    }
    z->level = level;
    z->chunked = chunked;
    z->done = false;
    z->in = z->out = 0;
    return z;
}

void md_zstream_give(md_zstream *z)
{
    if (z == NULL)
        return;
    unsigned k = z->coding;
    if (z->done) { /* relaxed: counters, nothing is published through them */
        atomic_fetch_add_explicit(&responses[k], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&bytes_in[k], z->in, memory_order_relaxed);
        atomic_fetch_add_explicit(&bytes_out[k], z->out, memory_order_relaxed);
    }
    struct zcache *c = cache();
    if (c != NULL && c->n[k] < MD_ZSTREAM_CACHE)
        c->z[k][c->n[k]++] = z;
    else
        zstream_free(z);
}

/* One step of the compressor: consumes from *in (*len left) into dst (cap bytes): how many
 * bytes it wrote, with *more set while it holds output for another step, *end once the
 * stream is finished (last). -EIO on the library's error. */
static ssize_t step(md_zstream *z, const char **in, size_t *len, bool last, char *dst, size_t cap,
                    bool *end)
{
    if (z->coding == MD_CODING_GZIP) {
        z->z.next_in = (Bytef *)(uintptr_t)*in;
        z->z.avail_in = (uInt)*len;
        z->z.next_out = (Bytef *)dst;
        z->z.avail_out = (uInt)cap;
        int rc = deflate(&z->z, last ? Z_FINISH : Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
            return -EIO;
        *in += *len - z->z.avail_in;
        *len = z->z.avail_in;
        *end = rc == Z_STREAM_END;
        return (ssize_t)(cap - z->z.avail_out);
    }
    ZSTD_inBuffer ib = {*in, *len, 0};
    ZSTD_outBuffer ob = {dst, cap, 0};
    size_t left = ZSTD_compressStream2(z->zc, &ob, &ib, last ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(left))
        return -EIO;
    *in += ib.pos;
    *len -= ib.pos;
    *end = last && left == 0;
    return (ssize_t)ob.pos;
}

int md_zstream_write(md_zstream *z, md_outbuf *out, const char *in, size_t len, bool last)
{
    if (z->done)
        return len == 0 ? 0 : -EIO;
    z->in += len;
    size_t head = z->chunked ? CHUNK_HEAD : 0, tail = z->chunked ? 2 : 0;
    for (;;) {
        char *w = md_outbuf_reserve(out, head + PIECE + tail + 5);
        if (w == NULL)
            return -ENOMEM;
        bool end = false;
        ssize_t n = step(z, &in, &len, last, w + head, PIECE, &end);
        if (n < 0)
            return (int)n;
        if (n > 0) {
            z->out += (uint64_t)n;
            char *e = w + head + n;
            if (z->chunked) {
                static const char hex[] = "0123456789abcdef";
                for (int d = 0; d < 6; d++) /* n < 2^24 */
                    w[d] = hex[((size_t)n >> (4 * (5 - d))) & 15];
                memcpy(w + 6, "\r\n", 2);
                memcpy(e, "\r\n", 2);
                e += 2;
            }
            md_outbuf_commit(out, e);
        }
        if (end) {
            z->done = true;
            return z->chunked ? md_outbuf_append(out, "0\r\n\r\n", 5) : 0;
        }
        /* Input left, or a full piece (the compressor may hold more): another step. */
        if (len == 0 && (size_t)n < PIECE && !last)
            return 0;
    }
}

int md_compress_metrics(md_outbuf *out)
{
    unsigned long long v[3][3];
    for (unsigned k = 1; k < 3; k++) {
        v[k][0] = atomic_load_explicit(&responses[k], memory_order_relaxed);
        v[k][1] = atomic_load_explicit(&bytes_in[k], memory_order_relaxed);
        v[k][2] = atomic_load_explicit(&bytes_out[k], memory_order_relaxed);
    }
    int rc = md_metrics_family(out, 0, "magpied_compress_responses_total", "counter",
                               "Responses compressed on the fly, by coding.",
                               "magpied_compress_responses_total{coding=\"gzip\"} %llu\n"
                               "magpied_compress_responses_total{coding=\"zstd\"} %llu\n",
                               v[1][0], v[2][0]);
    rc = md_metrics_family(out, rc, "magpied_compress_bytes_in_total", "counter",
                           "Bytes of bodies before compression on the fly, by coding.",
                           "magpied_compress_bytes_in_total{coding=\"gzip\"} %llu\n"
                           "magpied_compress_bytes_in_total{coding=\"zstd\"} %llu\n",
                           v[1][1], v[2][1]);
    return md_metrics_family(out, rc, "magpied_compress_bytes_out_total", "counter",
                             "Bytes of bodies after compression on the fly, by coding.",
                             "magpied_compress_bytes_out_total{coding=\"gzip\"} %llu\n"
                             "magpied_compress_bytes_out_total{coding=\"zstd\"} %llu\n",
                             v[1][2], v[2][2]);
}
