/* HTTP/2 over nghttp2 (http2.h): the session's callbacks, streams as md_http_req, the head
 * writer, flow control of request bodies, the deadlines and the defences, and the session's
 * allocator (whose frame buffer and empty stream map a quiet session gives back).
 *
 * A stream's way: HEADERS begin it (on_begin_headers: a block of its own, the request zeroed),
 * each field fills the request as http1.c's callbacks do (method, target, the kept fields,
 * Content-Length), the end of the block is the head (head_done: the refusals, the route, the
 * handler's on_head), DATA spans go to md__http_req_body, END_STREAM completes it
 * (md__http_req_answer). The response head goes to nghttp2 from h2_head (md_http_wire), with a
 * data source over the stream's output buffer, whose DATA frames are written without nghttp2's
 * copy (data_read, data_send); a source with nothing to give yet defers, and is resumed once
 * the handler appended more or finished. A handler that fails resets the
 * stream (RST_STREAM INTERNAL_ERROR). A relayed head (the proxy's) goes through h2_relay: the
 * upstream's status and fields, content-length when known.
 *
 * Request bodies: nghttp2's automatic WINDOW_UPDATE is off. Bytes a handler has taken (gathered
 * up to max_body_bytes, discarded) are given back at once; bytes a streaming handler turned
 * into output (echo) only once that output has left, so a peer that sends but does not read
 * is held back by its own window. A piping handler's (the proxy's) wait in the stream until
 * it asks for the next span, and go back to the windows as it takes them.
 *
 * Defences, each ending the session with GOAWAY, never holding up other connections: nghttp2's
 * own (a SETTINGS frame of more than MD_H2_MAX_SETTINGS entries, more than
 * MD_H2_MAX_OUTBOUND_ACK ACKs owed to a peer that does not read, more than 8 CONTINUATION
 * frames, the stream reset rate limit against Rapid Reset, CVE-2023-44487), and a token bucket
 * of ours for frames that cost us work but carry no request: PING, SETTINGS, PRIORITY,
 * RST_STREAM, DATA without data (padding aside) or END_STREAM (CVE-2019-9512, -9515, -9518),
 * and the frames nghttp2 ignores without a callback, counted as they are read: DATA or
 * HEADERS on a stream it no longer holds, unknown frame types (next_data). WINDOW_UPDATE is
 * not counted: a client reading large bodies on many streams sends thousands, legitimately. A
 * header block larger than max_header_bytes (counted as RFC 9113 6.5.2 does, 32 bytes per field
 * more, after HPACK: an HPACK bomb is counted decoded) or with more than max_headers fields gets
 * 431 on its stream.
 */
#include "http/http2.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/text.h"
#include "http/request_internal.h"
#include "http/response.h"
#include "http/routes.h"

/* A stream's output past which its handler is not polled (its io->write says pending) and a
 * streaming one's request body is not given back to the peer's window. */
#define STREAM_OUT_HIGH (64u * 1024u)
/* The most of a piped request body (the proxy's) a handler gets at once. */
#define PIPE_SPAN (16u * 1024u)
/* SETTINGS entries one frame may carry. */
#define MD_H2_MAX_SETTINGS 32
/* ACKs (SETTINGS, PING) queued for a peer that does not read them. */
#define MD_H2_MAX_OUTBOUND_ACK 1000
/* Rapid Reset: streams the peer may reset in a burst, then per second. */
#define RESET_BURST 200
#define RESET_RATE  50
/* Cheap frames (see the top): a burst, then per second. */
#define CHEAP_BURST 1000
#define CHEAP_RATE  100
/* The bytes of a response head's names and values a stream keeps for nghttp2 (keep_head). */
#define HEAD_KEEP 640
/* The first room md_h2_conn_send makes in an empty output for the frames it is to write. */
#define SEND_FIRST (16u * 1024u)
/* The connection's receive window, for all its streams' bodies together. */
#define CONN_WINDOW (1u << 20)
/* A graceful stop's two GOAWAYs (RFC 9113 6.8): first a notice naming the highest stream id
 * there can be, with a PING behind it; then the final one, naming the last stream processed,
 * once the PING's ACK shows the peer has read the notice (a stream it opened meanwhile is
 * served, not refused), or NOTICE_WAIT after the notice when no ACK comes. */
#define NOTICE_WAIT_NS (UINT64_C(1000) * 1000000u)
static const uint8_t notice_ping[8] = {'m', 'a', 'g', 'p', 'i', 'e', 'd', 'n'};
/* The stream ids a client skipped that a connection remembers (the latest gaps). */
#define ID_GAPS 4
/* The streams closed on the peer's side (END_STREAM or its RST_STREAM) that a connection
 * remembers, the latest: a DATA or HEADERS on one is a STREAM_CLOSED error (on_begin_frame,
 * md_h2_conn_feed). */
#define ID_CLOSED 8

static _Atomic uint64_t h2_conns, h2_streams, h2_refused, h2_releases;

typedef struct h2_stream {
    struct md_h2_conn *h;
    struct h2_stream *prev, *next;
    int32_t id;
    uint16_t status;  /* an error decided while the head came (431, 414, 400, 501, 413) */
    bool head_done;   /* the header block is complete */
    bool req_done;    /* END_STREAM came */
    bool early;       /* answered (or reset) before its body: the rest of it is dropped */
    bool answered;    /* the response's HEADERS were submitted */
    bool has_body;    /* ... with a data source */
    bool resp_done;   /* the handler is done: the source ends once out is drained */
    bool deferred;    /* the source said NGHTTP2_ERR_DEFERRED */
    bool blocked;     /* its handler's io->write found out full */
    bool more;        /* its handler said MD_PENDING_MORE */
    bool reset;       /* RST_STREAM submitted */
    bool peer_reset;  /* RST_STREAM came */
    bool has_length;  /* content-length came */
    bool trailer;     /* a trailer field came: the body's trailers are announced */
    bool expect;      /* expect: 100-continue came (another expectation is a 417) */
    bool kept_target; /* :path begins r.kept (keep_fields) */
    bool kept_host;   /* ... and :authority as Host follows it */
    bool malformed;   /* reset with PROTOCOL_ERROR at the head's end (RFC 9113 8.1.1) */
    uint32_t hostlen; /* the authority's length, :authority's or Host's (r.host: its start) */
    uint32_t fields;  /* header fields */
    uint64_t hbytes;  /* header list size (RFC 9113 6.5.2) */
    uint64_t length;  /* content-length */
    uint64_t body;    /* DATA bytes so far */
    uint64_t body_ns; /* when the head completed (min_body_rate's base) */
    /* Its last DATA, or when its window last opened (its head; a span taken): the pause
     * body_timeout_ms bounds. PINGs and WINDOW_UPDATEs do not count. */
    uint64_t data_ns;
    size_t unconsumed; /* DATA bytes not yet given back to the windows */
    md_outbuf out;     /* the response body owed */
    md_outbuf in;      /* MD_BODY_PIPE: DATA not yet given to the handler (within the window) */
    /* Bytes its handler lent (md_http_io.lend): owed after out's, written from where they are
     * into the connection's output; release(arg) once they all went, or at the stream's end. */
    const char *lent;
    size_t lent_len;
    void (*lent_release)(void *arg);
    void *lent_arg;
    char *authority; /* with keep_fields: :authority, for the kept block's Host */
    size_t authority_len;
    char *trailers; /* a relayed response's trailers ("Name: value" CRLF), until its end */
    size_t trailers_len;
    char *cookie;    /* with keep_fields: the cookie fields, joined with "; " (RFC 9113 8.2.3) */
    char *long_host; /* an authority longer than r.host keeps, whole, for same_authority() */
    size_t cookie_len, cookie_cap;
    char head[HEAD_KEEP]; /* the response head's strings (keep_head) */
    md_http_req r;        /* last: the large part */
} h2_stream;

struct md_h2_conn {
    nghttp2_session *s;
    md_http_server *srv;
    struct md_http_link *link; /* the connection's, for srv's hooks */
    uint64_t now_ns;
    uint64_t sent_ns; /* the last DATA a stream sent */
    /* Since when some stream has owed output without a pause (0: none owes any), and how many
     * DATA bytes had gone by then: min_send_rate's base, and send_timeout_ms's when later than
     * the last DATA. A window opened a byte at a time moves sent_ns, not this. */
    uint64_t owed_ns;
    uint64_t owed_sent;
    uint64_t data_sent;        /* DATA bytes sent */
    uint64_t idle_ns;          /* when the last stream closed (or the session began) */
    uint64_t tokens_ns;        /* the cheap-frame bucket's last refill */
    uint32_t tokens;           /* the cheap-frame bucket */
    uint32_t nstreams;         /* streams with a block */
    uint64_t requests;         /* streams begun */
    int32_t last_id;           /* the highest stream id of the peer's HEADERS */
    uint8_t gap_next;          /* the slot in gaps the next skip takes */
    int32_t gaps[8];           /* ID_GAPS runs of ids skipped: first, last */
    uint8_t closed_next;       /* the slot in closed the next stream takes */
    int32_t closed[ID_CLOSED]; /* streams the peer closed, the latest (0: none) */
    uint8_t hd_len;            /* md_h2_conn_feed's frame header so far, in hd */
    uint8_t hd[9];
    uint32_t skip;      /* the bytes it passes before the next frame header (the preface first) */
    bool refused;       /* ended on the peer's account (flood, abuse) */
    bool draining;      /* a GOAWAY went: the stop's notice, or the last request's */
    uint64_t notice_ns; /* when the stop's notice went; 0: none, or the final GOAWAY went */
    md_outbuf *sending; /* md_h2_conn_send's output, for data_send */
    size_t send_max;    /* ... and its bound */
    h2_stream *streams; /* every stream with a block */
    /* nghttp2's frame buffer (its session's first NGHTTP2_FRAMEBUF_CHUNKLEN chunk, which it
     * keeps for the session's life), allocated page-aligned by the session's allocator
     * (h2_realloc) so that a quiet session can give its pages back (md_h2_conn_release). */
    void *framebuf;
    size_t framebuf_len;   /* whole pages */
    bool framebuf_touched; /* frames were written since the last release */
    uint64_t out_ns;       /* the last frames written */
    /* The stream map's table (the session's calloc of whole pages), page-aligned too: a map
     * that holds no stream is all zeros, and a page of zeros can go back as it is. */
    void *table;
    size_t table_len;
};
_Static_assert(sizeof(((md_h2_conn *)0)->gaps) == 2 * ID_GAPS * sizeof(int32_t), "two ids a run");

/* The session's allocator (nghttp2_mem): the C library's, but for the frame buffer. */
enum { PAGE = 4096, FRAMEBUF_MIN = 16384 };

static void *h2_malloc(size_t size, void *ud)
{
    (void)ud;
    return malloc(size);
}

static void h2_free(void *ptr, void *ud)
{
    md_h2_conn *h = ud;
    if (ptr != NULL && ptr == h->framebuf)
        h->framebuf = NULL;
    if (ptr != NULL && ptr == h->table)
        h->table = NULL;
    free(ptr);
}

/* nghttp2 callocs whole pages only for its stream map's table: 4 KiB at the session's start,
 * twice as much when more than 3/4 of it fills (the old one freed after). The latest is the
 * one to watch. */
static void *h2_calloc(size_t n, size_t size, void *ud)
{
    md_h2_conn *h = ud;
    if (size == 0 || n > SIZE_MAX / size || n * size < PAGE || n * size % PAGE != 0)
        return calloc(n, size);
    void *p = aligned_alloc(PAGE, n * size);
    if (p == NULL)
        return NULL;
    memset(p, 0, n * size);
    h->table = p;
    h->table_len = n * size;
    return p;
}

/* nghttp2 makes a buffer's chunk with realloc(NULL, size): the session's first chunk of at
 * least FRAMEBUF_MIN is its frame buffer, kept for its life (more chunks, for a frame larger
 * than one, are freed once it is sent). That one is whole pages, page-aligned. */
static void *h2_realloc(void *ptr, size_t size, void *ud)
{
    md_h2_conn *h = ud;
    bool fb = ptr != NULL ? ptr == h->framebuf : h->framebuf == NULL && size >= FRAMEBUF_MIN;
    if (!fb)
        return realloc(ptr, size);
    size_t len = (size + PAGE - 1) / PAGE * PAGE;
    void *p = aligned_alloc(PAGE, len);
    if (p == NULL)
        return NULL;
    if (ptr != NULL) {
        memcpy(p, ptr, size < h->framebuf_len ? size : h->framebuf_len);
        free(ptr);
    }
    h->framebuf = p;
    h->framebuf_len = len;
    h->framebuf_touched = true;
    return p;
}

bool md_h2_is_preface(const char *data, size_t len)
{
    if (len < 4)
        return false;
    return memcmp(data, MD_H2_PREFACE, len < MD_H2_PREFACE_LEN ? len : MD_H2_PREFACE_LEN) == 0;
}

static h2_stream *stream_of(const md_http_req *r)
{
    return (h2_stream *)(void *)((char *)r - offsetof(h2_stream, r));
}

/* The response body bytes the stream owes: its output's, then what its handler lent. */
static size_t owed(const h2_stream *st)
{
    return md_outbuf_pending(&st->out) + st->lent_len;
}

/* The lent bytes are no longer needed (all written, or the stream ends): their owner's. */
static void lent_release(h2_stream *st)
{
    if (st->lent_release == NULL)
        return;
    void (*release)(void *) = st->lent_release;
    st->lent_release = NULL;
    st->lent = NULL;
    st->lent_len = 0;
    release(st->lent_arg);
}

static void enter(md_h2_conn *h, h2_stream *st)
{
    md__http_req_enter(&st->r, h->now_ns, &st->out);
}

static void reset(h2_stream *st, uint32_t code)
{
    if (st->reset)
        return;
    st->reset = true;
    st->early = true;
    (void)nghttp2_submit_rst_stream(st->h->s, NGHTTP2_FLAG_NONE, st->id, code);
}

/* Gives n bytes of DATA back to the stream's and the connection's windows. */
static void consume(md_h2_conn *h, int32_t id, size_t n)
{
    if (n != 0)
        (void)nghttp2_session_consume(h->s, id, n);
}

/* ---- the head writer (md_http_wire) ---- */

static bool submit_trailers(h2_stream *st);

/* DATA without copies: the source only says how much of the stream's output the next frame
 * carries (NGHTTP2_DATA_FLAG_NO_COPY), and data_send writes the frame's header and those bytes
 * straight from the stream's output into the connection's, rather than into nghttp2's buffer
 * first and from there into the connection's output. */
static ssize_t data_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user)
{
    (void)s; /* nghttp2's shape: the stream is the source */
    (void)id;
    (void)buf;
    (void)user;
    h2_stream *st = src->ptr;
    size_t have = owed(st);
    size_t n = have < length ? have : length;
    if (n == have && st->resp_done) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (submit_trailers(st))
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    } else if (n == 0) {
        st->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    return (ssize_t)n;
}

/* The DATA frame data_read sized: its header, then length bytes of the stream's output and
 * after them of what its handler lent (no padding is asked for; written all the same if
 * nghttp2 adds it). This is the one copy of a body in user space: from the handler's bytes (a
 * file's kept in the open-file cache) or the stream's output into the connection's. Past the
 * connection's bound (md_h2_conn_send's max) the session pauses until the output has left. */
static int data_send(nghttp2_session *s, nghttp2_frame *f, const uint8_t *framehd, size_t length,
                     nghttp2_data_source *src, void *user)
{
    (void)s;
    h2_stream *st = src->ptr;
    md_h2_conn *h = user;
    md_outbuf *out = h->sending;
    size_t pad = f->data.padlen;
    char *w = md_outbuf_reserve(out, 9 + pad + length);
    if (w == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    memcpy(w, framehd, 9);
    w += 9;
    if (pad > 0)
        *w++ = (char)(pad - 1);
    size_t from_out = md_outbuf_pending(&st->out);
    if (from_out > length)
        from_out = length;
    if (from_out != 0)
        memcpy(w, md_outbuf_pending_data(&st->out), from_out);
    md_outbuf_consume(&st->out, from_out);
    if (length > from_out) { /* data_read sized the frame within owed(): the rest is lent */
        size_t n = length - from_out;
        memcpy(w + from_out, st->lent, n);
        st->lent += n;
        st->lent_len -= n;
        if (st->lent_len == 0)
            lent_release(st);
    }
    w += length;
    if (pad > 1) {
        memset(w, 0, pad - 1);
        w += pad - 1;
    }
    md_outbuf_commit(out, w);
    if (length != 0)
        h->sent_ns = h->now_ns;
    h->data_sent += length;
    if (md_outbuf_pending(&st->out) == 0 && st->out.data != NULL && st->out.cap > STREAM_OUT_HIGH)
        md_outbuf_free(&st->out); /* a whole large body left: its buffer goes too */
    return md_outbuf_pending(out) >= h->send_max ? NGHTTP2_ERR_PAUSE : 0;
}

/* Fields a response over HTTP/2 never carries (RFC 9113 8.2.2); name is lower-case. */
static bool connection_specific(const char *name, size_t len)
{
    switch (len) {
    case 7:
        return memcmp(name, "upgrade", 7) == 0;
    case 10:
        return memcmp(name, "connection", 10) == 0 || memcmp(name, "keep-alive", 10) == 0;
    case 16:
        return memcmp(name, "proxy-connection", 16) == 0;
    case 17:
        return memcmp(name, "transfer-encoding", 17) == 0;
    default:
        return false;
    }
}

/* The head's strings go into the stream's block, which outlives its HEADERS frame (the block
 * goes at the stream's close, after the frame went or was dropped), so that nghttp2 neither
 * copies nor lower-cases them again (NGHTTP2_NV_FLAG_NO_COPY_*). A head too large for
 * st->head is left to nghttp2's copy. names..names_end: the lower-cased field names, which
 * live on submit_head's stack; the other names are literals. */
static void keep_head(h2_stream *st, nghttp2_nv *nv, size_t n, const char *names,
                      const char *names_end)
{
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        bool ours = (const char *)nv[i].name >= names && (const char *)nv[i].name < names_end;
        need += nv[i].valuelen + (ours ? nv[i].namelen : 0);
    }
    if (need > sizeof st->head)
        return;
    char *w = st->head;
    for (size_t i = 0; i < n; i++) {
        if ((const char *)nv[i].name >= names && (const char *)nv[i].name < names_end) {
            memcpy(w, nv[i].name, nv[i].namelen);
            nv[i].name = (uint8_t *)w;
            w += nv[i].namelen;
        }
        if (nv[i].valuelen != 0)
            memcpy(w, nv[i].value, nv[i].valuelen);
        nv[i].value = (uint8_t *)w;
        w += nv[i].valuelen;
        nv[i].flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
    }
}

/* "Name: value" CRLF lines as nghttp2's pairs, the names lower-cased (RFC 9113 8.2.1) into
 * names (fields_len bytes), the connection-specific ones left out; nv has room for one per
 * line. The pairs written. */
static size_t fields_nv(const char *fields, size_t fields_len, char *names, nghttp2_nv *nv)
{
    size_t n = 0;
    const char *p = fields, *end = fields != NULL ? fields + fields_len : NULL;
    char *w = names;
    while (p != NULL && p < end) {
        const char *eol = memchr(p, '\r', (size_t)(end - p));
        if (eol == NULL)
            eol = end;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon != NULL && colon > p) {
            size_t nlen = (size_t)(colon - p);
            for (size_t i = 0; i < nlen; i++)
                w[i] = (char)md_ascii_lower((unsigned char)p[i]);
            const char *v = colon + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            if (!connection_specific(w, nlen))
                nv[n++] = (nghttp2_nv){(uint8_t *)w, (uint8_t *)(uintptr_t)v, nlen,
                                       (size_t)(eol - v), NGHTTP2_NV_FLAG_NONE};
            w += nlen;
        }
        p = eol + 2;
    }
    return n;
}

/* The "Name: value" CRLF lines in fields: a bound on the pairs fields_nv() writes. */
static size_t field_lines(const char *fields, size_t fields_len)
{
    size_t n = 0;
    for (size_t at = 0; fields != NULL && at < fields_len; n++) {
        const char *nl = memchr(fields + at, '\n', fields_len - at);
        if (nl == NULL)
            break;
        at = (size_t)(nl - fields) + 1;
    }
    return n;
}

/* The stream's trailers as a HEADERS frame that ends it, in place of DATA's END_STREAM. true
 * when they went (nghttp2 copies them); false: none, or no memory (the stream ends without). */
static bool submit_trailers(h2_stream *st)
{
    if (st->trailers == NULL)
        return false;
    size_t nfields = field_lines(st->trailers, st->trailers_len);
    nghttp2_nv *nv = malloc((nfields + 1) * sizeof *nv);
    char *names = malloc(st->trailers_len + 1);
    bool sent = false;
    if (nv != NULL && names != NULL) {
        size_t n = fields_nv(st->trailers, st->trailers_len, names, nv);
        sent = n != 0 && nghttp2_submit_trailer(st->h->s, st->id, nv, n) == 0;
    }
    free(nv);
    free(names);
    free(st->trailers);
    st->trailers = NULL;
    return sent;
}

#define NV(n, v, vl)                                                                               \
    ((nghttp2_nv){(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE})

/* HEADERS for the stream: :status, then (ours) date and server, the fields given (names
 * lower-cased), then allow and content-type when given, content-length unless unknown. */
static int submit_head(h2_stream *st, unsigned status, bool ours, const char *allow,
                       const char *fields, size_t fields_len, const char *ctype, uint64_t length)
{
    md_http_req *r = &st->r;
    md_h2_conn *h = st->h;
    if (st->answered || st->reset)
        return 0; /* a second head (a handler's error after its head): the stream is reset */
    /* The handler's fields as name/value pairs, names lower-cased (RFC 9113 8.2.1) into one
     * buffer: nghttp2 copies them all at the submit. */
    size_t nfields = field_lines(fields, fields_len);
    nghttp2_nv stack_nv[16];
    char stack_names[512];
    nghttp2_nv *nv = stack_nv;
    char *names = stack_names;
    if (nfields + 7 > sizeof stack_nv / sizeof stack_nv[0] || fields_len > sizeof stack_names) {
        nv = malloc((nfields + 7) * sizeof *nv);
        names = malloc(fields_len + 1);
        if (nv == NULL || names == NULL) {
            free(nv);
            free(names);
            return -ENOMEM;
        }
    }
    size_t n = 0;
    char code[4] = {(char)('0' + status / 100 % 10), (char)('0' + status / 10 % 10),
                    (char)('0' + status % 10), 0};
    nv[n++] = NV(":status", code, 3);
    size_t dlen;
    if (ours) {
        const char *date = md_http_date_value(&dlen);
        nv[n++] = NV("date", date, dlen);
        nv[n++] = NV("server", "magpied", 7);
    }
    n += fields_nv(fields, fields_len, names, nv + n);
    if (allow != NULL)
        nv[n++] = NV("allow", allow, strlen(allow));
    if (ctype != NULL && status != 304) /* as over HTTP/1.1 (response.c) */
        nv[n++] = NV("content-type", ctype, strlen(ctype));
    char len_text[24];
    /* Unknown (a relayed body) or coded (compressed on the fly): DATA until END_STREAM. */
    _Static_assert(MD_HTTP_LENGTH_CODED == MD_HTTP_LENGTH_UNKNOWN, "one test covers both");
    if (status != 304 && length != MD_HTTP_LENGTH_UNKNOWN) {
        size_t l = 0;
        char tmp[20];
        uint64_t v = length;
        do {
            tmp[l++] = (char)('0' + v % 10);
            v /= 10;
        } while (v != 0);
        for (size_t i = 0; i < l; i++)
            len_text[i] = tmp[l - 1 - i];
        nv[n++] = NV("content-length", len_text, l);
    }
    bool body = !md_http_req_is_head(r) && status != 304 && status != 204 && length != 0;
    keep_head(st, nv, n, names, names + fields_len);
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = data_read};
    int rc = nghttp2_submit_response(h->s, st->id, nv, n, body ? &prd : NULL);
    if (nv != stack_nv) {
        free(nv);
        free(names);
    }
    if (rc != 0)
        return -ENOMEM;
    st->answered = true;
    st->has_body = body;
    return 0;
}

static int h2_head(md_http_req *r, unsigned status, const char *allow, const char *fields,
                   size_t fields_len, const char *ctype, uint64_t length)
{
    return submit_head(stream_of(r), status, true, allow, fields, fields_len, ctype, length);
}

/* A relayed head (the proxy's): the upstream's Date and Server, not ours. */
static int h2_relay(md_http_req *r, unsigned status, const char *fields, size_t fields_len,
                    uint64_t length)
{
    return submit_head(stream_of(r), status, false, NULL, fields, fields_len, NULL, length);
}

/* A relayed body's trailers: held until its source ends (data_read). */
static int h2_trailers(md_http_req *r, const char *fields, size_t fields_len)
{
    h2_stream *st = stream_of(r);
    if (!st->answered || !st->has_body || st->reset || st->trailers != NULL || fields_len == 0)
        return 0; /* no body to follow (HEAD): nothing to end with them */
    st->trailers = malloc(fields_len);
    if (st->trailers == NULL)
        return -ENOMEM;
    memcpy(st->trailers, fields, fields_len);
    st->trailers_len = fields_len;
    return 0;
}

/* An interim response (1xx but 101) as HEADERS without END_STREAM before the final one (RFC
 * 9113 8.1); nghttp2 copies the pairs. */
static int h2_interim(md_http_req *r, unsigned status, const char *fields, size_t fields_len)
{
    h2_stream *st = stream_of(r);
    if (st->answered || st->reset || status < 100 || status > 199 || status == 101)
        return 0;
    size_t nfields = field_lines(fields, fields_len);
    nghttp2_nv *nv = malloc((nfields + 1) * sizeof *nv);
    char *names = malloc(fields_len + 1);
    int rc = -ENOMEM;
    if (nv != NULL && names != NULL) {
        char code[3] = {'1', (char)('0' + status / 10 % 10), (char)('0' + status % 10)};
        nv[0] = NV(":status", code, 3);
        size_t n = 1 + fields_nv(fields, fields_len, names, nv + 1);
        rc = nghttp2_submit_headers(st->h->s, NGHTTP2_FLAG_NONE, st->id, NULL, nv, n, NULL) < 0
                 ? -ENOMEM
                 : 0;
    }
    free(nv);
    free(names);
    return rc;
}

static const md_http_wire h2_wire = {
    .head = h2_head, .relay = h2_relay, .trailers = h2_trailers, .interim = h2_interim};

/* ---- streams ---- */

/* A stream's block (4.6 KB, mostly its md_http_req) comes from a cache of the worker's
 * (libmagpie's mp_block_cache) rather than from malloc, whose large-chunk path was a tenth of
 * a small request's cost: a connection begins and ends its streams in bursts (one read's
 * HEADERS, one write's END_STREAMs), so the thread keeps a burst's worth. The connection's
 * task may end a stream on another worker than the one that began it; the block then joins
 * that worker's cache (mp_block_cache allows it). */
static mp_block_cache stream_cache = MP_BLOCK_CACHE_INIT(sizeof(h2_stream), MP_BLOCK_CACHE_KEEP);

static void stream_free(md_h2_conn *h, h2_stream *st)
{
    lent_release(st); /* before the cancel: lent bytes may be the handler's own */
    if (st->r.pending != NULL) {
        md_http_pending *p = st->r.pending;
        st->r.pending = NULL;
        p->cancel(p);
    }
    md__http_req_fini(&st->r);
    md_outbuf_free(&st->out);
    md_outbuf_free(&st->in);
    free(st->authority);
    free(st->long_host);
    free(st->trailers);
    free(st->cookie);
    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        h->streams = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    h->nstreams--;
    if (h->nstreams == 0)
        h->idle_ns = h->now_ns;
    mp_block_cache_give(&stream_cache, st);
}

/* The handler is done with the response (or will write no more of it): its source ends. */
static void finish(h2_stream *st)
{
    st->resp_done = true;
    if (!st->answered)
        reset(st, NGHTTP2_INTERNAL_ERROR); /* done without a head: nothing to send */
    else if (!st->has_body) {
        lent_release(st);
        md_outbuf_free(&st->out);
    }
}

/* A piping handler's body is done with (it answered, failed, or the stream ended early): what
 * the stream held of it goes back to the windows, and what still comes is dropped. */
static void drop_pipe(h2_stream *st)
{
    if (!st->r.piping)
        return;
    st->early = true;
    consume(st->h, st->id, md_outbuf_pending(&st->in));
    md_outbuf_free(&st->in);
}

/* An error response of the core's, on a stream whose body is then dropped. */
static void answer_error(h2_stream *st, unsigned code)
{
    st->early = true;
    drop_pipe(st);
    if (st->r.pending != NULL && !st->answered) {
        md_http_pending *p = st->r.pending; /* a piping handler: the core's answer instead */
        st->r.pending = NULL;
        p->cancel(p);
    }
    if (st->answered) {
        reset(st, NGHTTP2_INTERNAL_ERROR);
        return;
    }
    if (md__http_respond_error(&st->r, code, false, NULL) != 0) {
        reset(st, NGHTTP2_INTERNAL_ERROR);
        return;
    }
    finish(st);
}

/* The request is complete: what the core answers, else the handler's on_req. */
static void answer(h2_stream *st)
{
    md_http_req *r = &st->r;
    if (r->streaming) {
        finish(st);
        return;
    }
    if (r->piping)
        return; /* the handler pended at the head: its poll answers */
    int rc = md__http_req_answer(r);
    if (rc < 0)
        reset(st, NGHTTP2_INTERNAL_ERROR);
    else if (rc != MD_HANDLER_PENDING)
        finish(st);
}

static int kept_close(h2_stream *st);

static void head_done(md_h2_conn *h, h2_stream *st, bool end)
{
    md_http_req *r = &st->r;
    const md_http_limits *l = &h->srv->limits;
    st->head_done = true;
    st->body_ns = st->data_ns = h->now_ns;
    if (st->malformed) {
        reset(st, NGHTTP2_PROTOCOL_ERROR);
        return;
    }
    if (st->status == 0 && !r->method_done)
        st->status = 501; /* a method magpied does not know */
    if (st->status == 0 && r->method == MD_CONNECT)
        st->status = 501; /* not a proxy: nothing to tunnel to */
    if (st->status == 0 && st->has_length && st->length > l->max_body_bytes)
        st->status = 413;
    if (st->status != 0) {
        answer_error(st, st->status);
        return;
    }
    if (h->srv->keep_fields && kept_close(st) != 0) {
        answer_error(st, 500);
        return;
    }
    md__http_req_route(r);
    /* A refusal (404, 401, 403, 405, 429, ...) needs none of the body: answered at once, the
     * rest of the body dropped as it comes (its DATA still credited to the windows). */
    if (!end && md__http_req_refusal(r) != 0) {
        st->early = true;
        answer(st);
        return;
    }
    /* The client waits for our word before it sends the body (RFC 9110 10.1.1), as over
     * HTTP/1.1 (http1.c's head_done): a 100 once nothing refuses the request. */
    if (!end && st->expect) {
        if (h2_interim(r, 100, NULL, 0) != 0) {
            reset(st, NGHTTP2_INTERNAL_ERROR);
            return;
        }
        r->continued = true;
    }
    /* A body without Content-Length is, for a handler, one of unknown length (HTTP/1.1's
     * chunked); none at all when END_STREAM ended the head. So is one whose head announces
     * trailers (a Trailer field): relayed as HTTP/1.1, only a chunked body carries them
     * (nghttp2 still holds the DATA to the Content-Length). */
    bool chunked = !end && (!st->has_length || st->trailer);
    if (md__http_req_wants_head(r) &&
        md__http_req_head(r, st->has_length && !chunked ? st->length : 0, chunked) != 0) {
        reset(st, NGHTTP2_INTERNAL_ERROR);
        return;
    }
    if (r->piping)
        r->pipe_read = true; /* the body's first span goes to the handler as it comes */
}

/* ---- the request's fields ---- */

/* Header names kept for handlers, in md_http_field's order. */
static const char *const kept_names[MD_HTTP_FIELDS] = {
    [MD_FIELD_IF_NONE_MATCH] = "if-none-match",
    [MD_FIELD_IF_MODIFIED_SINCE] = "if-modified-since",
    [MD_FIELD_RANGE] = "range",
    [MD_FIELD_IF_RANGE] = "if-range",
    [MD_FIELD_ACCEPT_ENCODING] = "accept-encoding",
    [MD_FIELD_IF_MATCH] = "if-match",
    [MD_FIELD_IF_UNMODIFIED_SINCE] = "if-unmodified-since",
    [MD_FIELD_AUTHORIZATION] = "authorization",
    [MD_FIELD_X_FORWARDED_FOR] = "x-forwarded-for",
    [MD_FIELD_FORWARDED] = "forwarded",
};

static bool name_is(const uint8_t *name, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(name, lit, len) == 0;
}

/* md_http_req_head()'s block (md_http_server.keep_fields), as http1.c keeps it: the target,
 * CRLF, then each field as "name: value" CRLF; :authority first as Host, the cookie fields
 * last, joined into one. 0 or -ENOMEM. */
static int kept_add(md_http_req *r, const char *a, size_t alen, const char *b, size_t blen,
                    const char *c, size_t clen)
{
    if (md_bytes_grow(&r->kept, &r->kept_cap, r->kept_len + alen + blen + clen, 1024) != 0)
        return -ENOMEM;
    memcpy(r->kept + r->kept_len, a, alen);
    if (blen != 0)
        memcpy(r->kept + r->kept_len + alen, b, blen);
    if (clen != 0)
        memcpy(r->kept + r->kept_len + alen + blen, c, clen);
    r->kept_len += alen + blen + clen;
    return 0;
}

/* :path, whole (r.target keeps only MD_HTTP_TARGET_MAX bytes of it). */
static int kept_path(h2_stream *st, const uint8_t *v, size_t len)
{
    md_http_req *r = &st->r;
    if (st->kept_target)
        return 0;
    st->kept_target = true;
    r->kept_len = 0;
    r->kept_target = (uint32_t)len;
    return kept_add(r, (const char *)v, len, "\r\n", 2, NULL, 0);
}

/* Host, once the pseudo-header fields are all in (they come first). */
static int kept_begin(h2_stream *st)
{
    md_http_req *r = &st->r;
    if (st->kept_host)
        return 0;
    if (!st->kept_target && kept_path(st, (const uint8_t *)r->target, r->target_len) != 0)
        return -ENOMEM;
    st->kept_host = true;
    if (st->authority != NULL &&
        kept_add(r, "host: ", 6, st->authority, st->authority_len, "\r\n", 2) != 0)
        return -ENOMEM;
    return 0;
}

static int keep_pseudo(h2_stream *st, const uint8_t *name, size_t namelen, const uint8_t *value,
                       size_t valuelen)
{
    if (name_is(name, namelen, ":path"))
        return kept_path(st, value, valuelen);
    if (!name_is(name, namelen, ":authority") || st->authority != NULL)
        return 0;
    st->authority = malloc(valuelen + 1);
    if (st->authority == NULL)
        return -ENOMEM;
    memcpy(st->authority, value, valuelen);
    st->authority_len = valuelen;
    return 0;
}

static int kept_close(h2_stream *st)
{
    if (kept_begin(st) != 0)
        return -ENOMEM;
    if (st->cookie == NULL)
        return 0;
    return kept_add(&st->r, "cookie: ", 8, st->cookie, st->cookie_len, "\r\n", 2);
}

static int kept_field(h2_stream *st, const uint8_t *name, size_t namelen, const uint8_t *value,
                      size_t valuelen)
{
    if (kept_begin(st) != 0)
        return -ENOMEM;
    if (name_is(name, namelen, "cookie")) {
        size_t need = st->cookie_len + 2 + valuelen;
        if (md_bytes_grow(&st->cookie, &st->cookie_cap, need, 256) != 0)
            return -ENOMEM;
        if (st->cookie_len != 0) {
            memcpy(st->cookie + st->cookie_len, "; ", 2);
            st->cookie_len += 2;
        }
        memcpy(st->cookie + st->cookie_len, value, valuelen);
        st->cookie_len += valuelen;
        return 0;
    }
    return kept_add(&st->r, (const char *)name, namelen, ": ", 2, (const char *)value, valuelen) ||
                   kept_add(&st->r, "\r\n", 2, NULL, 0, NULL, 0)
               ? -ENOMEM
               : 0;
}

/* A field that comes twice joins the kept value with ", ", as HTTP/1.1's lines do. */
static void keep_field(md_http_req *r, md_http_field f, const uint8_t *v, size_t len)
{
    if (r->field_len[f] != 0)
        md__http_req_keep(r, f, ", ", 2);
    md__http_req_keep(r, f, (const char *)v, len);
}

static void set_method(md_http_req *r, const uint8_t *v, size_t len)
{
    /* llhttp's HTTP methods, 0 .. 33 (routes.c's HTTP_METHODS): past them it has RTSP's. */
    for (unsigned m = 0; m < 34; m++) {
        const char *name = md_method_name(m);
        if (strlen(name) == len && memcmp(name, v, len) == 0) {
            r->method = (uint8_t)m;
            r->method_done = true;
            return;
        }
    }
}

/* :path, as http1.c's on_url keeps a target: the bytes of RFC 3986 (nghttp2 has checked
 * there are no controls or spaces), no fragment, the path before '?'. 0 or an error status. */
static unsigned set_target(md_h2_conn *h, md_http_req *r, const uint8_t *v, size_t len)
{
    if (len + 16 > h->srv->limits.max_request_line)
        return 414;
    if (memchr(v, '#', len) != NULL)
        return 400;
    const uint8_t *q = memchr(v, '?', len);
    if (q != NULL) {
        r->path_done = true;
        r->path_len = (uint32_t)(q - v);
    }
    size_t keep = len < MD_HTTP_TARGET_MAX ? len : MD_HTTP_TARGET_MAX;
    memcpy(r->target, v, keep);
    r->target_len = (uint32_t)keep;
    r->target_full = keep < len;
    if (len == 1 && v[0] == '*')
        r->asterisk = true;
    return 0;
}

/* ---- nghttp2's callbacks ---- */

static h2_stream *stream_get(md_h2_conn *h, int32_t id)
{
    return nghttp2_session_get_stream_user_data(h->s, id);
}

/* Frames that cost us work and carry no request: false once the peer has sent too many. */
static bool cheap_frame(md_h2_conn *h)
{
    uint64_t refill = (h->now_ns - h->tokens_ns) / (UINT64_C(1000000000) / CHEAP_RATE);
    if (refill != 0) {
        h->tokens = h->tokens + refill > CHEAP_BURST ? CHEAP_BURST : h->tokens + (uint32_t)refill;
        h->tokens_ns = h->now_ns;
    }
    if (h->tokens == 0) {
        if (!h->refused) {
            h->refused = true;
            atomic_fetch_add_explicit(&h2_refused, 1, memory_order_relaxed);
            (void)nghttp2_session_terminate_session(h->s, NGHTTP2_ENHANCE_YOUR_CALM);
        }
        return false;
    }
    h->tokens--;
    return true;
}

/* The stop's final GOAWAY, naming the last stream processed: the streams up to it finish,
 * later ones are refused, then the connection closes. */
static void final_goaway(md_h2_conn *h)
{
    h->notice_ns = 0;
    (void)nghttp2_submit_goaway(h->s, NGHTTP2_FLAG_NONE,
                                nghttp2_session_get_last_proc_stream_id(h->s), NGHTTP2_NO_ERROR,
                                NULL, 0);
}

/* nghttp2 keeps no closed stream (nghttp2_option_set_no_closed_streams: each would hold ~270
 * bytes until the connection closes, up to 100 of them on an idle one), so it ignores a frame
 * on any stream below the peer's highest that it no longer holds: it cannot tell one it reset,
 * whose late DATA and trailers must be ignored (RFC 9113 5.1), from one never opened, or from
 * one the peer had closed. Told apart here, from a little memory of the latest:
 * - a HEADERS on an id the peer skipped opens a stream out of order: a connection error
 *   PROTOCOL_ERROR (RFC 9113 5.1.1); the latest ID_GAPS runs of skipped ids;
 * - a DATA or HEADERS on a stream the peer had closed (its END_STREAM or RST_STREAM came) is
 *   a connection error STREAM_CLOSED (5.1); the latest ID_CLOSED of them (on_stream_close).
 * Older ones are ignored, as nghttp2 does. */
static bool closed_by_peer(const md_h2_conn *h, int32_t id)
{
    for (unsigned i = 0; i < ID_CLOSED; i++)
        if (h->closed[i] == id)
            return true;
    return false;
}

/* nghttp2 calls it for a HEADERS it then ignores, but not for an ignored DATA: that one
 * md_h2_conn_feed finds. */
static int on_begin_frame(nghttp2_session *s, const nghttp2_frame_hd *hd, void *user)
{
    md_h2_conn *h = user;
    int32_t id = hd->stream_id;
    if (hd->type != NGHTTP2_HEADERS || id <= 0 || id % 2 == 0)
        return 0; /* stream 0 and even ids: nghttp2's errors */
    if (id <= h->last_id && closed_by_peer(h, id)) {
        (void)nghttp2_session_terminate_session(s, NGHTTP2_STREAM_CLOSED);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (id > h->last_id) {
        int32_t next = h->last_id > 0 ? h->last_id + 2 : 1; /* client ids are odd */
        if (id > next) {
            h->gaps[2 * h->gap_next] = next;
            h->gaps[2 * h->gap_next + 1] = id - 2;
            h->gap_next = (uint8_t)((h->gap_next + 1) % ID_GAPS);
        }
        h->last_id = id;
        return 0;
    }
    for (unsigned i = 0; i < ID_GAPS; i++)
        if (id >= h->gaps[2 * i] && id <= h->gaps[2 * i + 1]) {
            (void)nghttp2_session_terminate_session(s, NGHTTP2_PROTOCOL_ERROR);
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
    /* A HEADERS on a stream no longer held (one reset, or closed long ago): nghttp2 decodes
     * it for HPACK's sake and drops it, calling nothing else: a cheap frame. */
    if (stream_get(h, id) == NULL && !cheap_frame(h))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    (void)s; /* the session is h's */
    md_h2_conn *h = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers: counted by nghttp2's limits, dropped */
    /* The request boundary, with no stream open: the connection may move to the newest
     * generation of settings (a reload's), as an HTTP/1.1 one does between requests. */
    if (h->nstreams == 0 && h->srv->request_begin != NULL) {
        h->srv = h->srv->request_begin(h->link, h->srv);
    }
    h2_stream *st = mp_block_cache_take(&stream_cache);
    if (st == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    memset(st, 0, offsetof(h2_stream, r) + offsetof(md_http_req, target));
    md__http_req_init(&st->r, h->srv, h->link);
    st->r.wire = &h2_wire;
    st->r.keep_alive = true;
    st->r.http_major = 2;
    st->r.http_minor = 0;
    st->r.start_ns = h->now_ns;
    md_outbuf_init(&st->out);
    st->h = h;
    st->id = f->hd.stream_id;
    st->next = h->streams;
    if (h->streams != NULL)
        h->streams->prev = st;
    h->streams = st;
    h->nstreams++;
    h->requests++;
    atomic_fetch_add_explicit(&h2_streams, 1, memory_order_relaxed);
    nghttp2_session_set_stream_user_data(h->s, st->id, st);
    /* The last request a connection may make ([limits] max_requests_per_connection): GOAWAY
     * names this stream last; it finishes, later ones are refused, then the close. */
    uint32_t max = h->srv->limits.max_requests_per_connection;
    if (max != 0 && h->requests >= max && !h->draining) {
        h->draining = true;
        (void)nghttp2_submit_goaway(h->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR, NULL, 0);
    }
    return 0;
}

/* A trailer field as "name: value" CRLF in r.trailers (md_http_req_trailers), as http1.c keeps
 * a chunked body's: past max_header_bytes all of them are dropped. */
static void keep_trailer(md_h2_conn *h, md_http_req *r, const uint8_t *name, size_t namelen,
                         const uint8_t *value, size_t valuelen)
{
    size_t len = namelen + valuelen + 4;
    if (r->trailers_over)
        return;
    if (r->trailers_len + len > h->srv->limits.max_header_bytes ||
        md_bytes_grow(&r->trailers, &r->trailers_cap, r->trailers_len + len, 256) != 0) {
        r->trailers_over = true;
        return;
    }
    char *w = r->trailers + r->trailers_len;
    memcpy(w, name, namelen);
    memcpy(w + namelen, ": ", 2);
    memcpy(w + namelen + 2, value, valuelen);
    memcpy(w + namelen + 2 + valuelen, "\r\n", 2);
    r->trailers_len += len;
}

/* The authority that chooses the request's site (request.c): :authority, or Host. */
/* The stream's authority (:authority's, or the first Host's): its first bytes in r.host, all
 * of it in st->long_host when longer. 0 or -ENOMEM. */
static int set_host(h2_stream *st, const uint8_t *v, size_t len)
{
    md_http_req *r = &st->r;
    size_t n = len < MD_HTTP_FIELD_KEEP ? len : MD_HTTP_FIELD_KEEP;
    memcpy(r->host, v, n);
    r->host_len = (uint16_t)n;
    st->hostlen = (uint32_t)len;
    free(st->long_host);
    st->long_host = NULL;
    if (len <= MD_HTTP_FIELD_KEEP)
        return 0;
    st->long_host = malloc(len);
    if (st->long_host == NULL)
        return -ENOMEM;
    memcpy(st->long_host, v, len);
    return 0;
}

/* Whether a Host value names the stream's authority (set_host), case aside. */
static bool same_authority(const h2_stream *st, const uint8_t *v, size_t vlen)
{
    if (vlen != st->hostlen)
        return false;
    const char *a = st->long_host != NULL ? st->long_host : st->r.host;
    for (size_t i = 0; i < vlen; i++)
        if (md_ascii_lower((unsigned char)a[i]) != md_ascii_lower(v[i]))
            return false;
    return true;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    (void)s;
    (void)flags;
    md_h2_conn *h = user;
    h2_stream *st = stream_get(h, f->hd.stream_id);
    if (st == NULL || st->status != 0)
        return 0; /* a head already refused: only nghttp2's limits count */
    if (st->head_done) {
        /* Trailers (nghttp2 has refused a pseudo-header in them, and resets a block without
         * END_STREAM): kept as HTTP/1.1's chunked ones are, for the proxy to pass on. */
        if (h->srv->keep_fields && !st->early && namelen != 0 && name[0] != ':')
            keep_trailer(h, &st->r, name, namelen, value, valuelen);
        return 0;
    }
    const md_http_limits *l = &h->srv->limits;
    st->hbytes += namelen + valuelen + 32;
    if (++st->fields > l->max_headers || st->hbytes > l->max_header_bytes) {
        st->status = 431;
        return 0;
    }
    md_http_req *r = &st->r;
    if (namelen != 0 && name[0] == ':') {
        if (name_is(name, namelen, ":method"))
            set_method(r, value, valuelen);
        else if (name_is(name, namelen, ":path"))
            st->status = (uint16_t)set_target(h, r, value, valuelen);
        else if (name_is(name, namelen, ":authority")) {
            if (set_host(st, value, valuelen) != 0)
                st->status = 500;
            /* RFC 9113 8.3.1: no userinfo; and the shape RFC 3986 gives an authority. */
            if (!md_http_authority_ok((const char *)value, valuelen))
                st->malformed = true;
        }
        if (h->srv->keep_fields && st->status == 0 &&
            keep_pseudo(st, name, namelen, value, valuelen) != 0)
            st->status = 500;
        return 0;
    }
    if (h->srv->keep_fields && kept_field(st, name, namelen, value, valuelen) != 0) {
        st->status = 500;
        return 0;
    }
    if (name_is(name, namelen, "host")) {
        /* RFC 9113 8.3.1: a Host that names another than :authority is malformed (as a
         * second Host naming another over HTTP/1.1 is a 400). */
        if (st->hostlen == 0) {
            if (set_host(st, value, valuelen) != 0)
                st->status = 500;
            if (!md_http_authority_ok((const char *)value, valuelen))
                st->malformed = true;
        } else if (!same_authority(st, value, valuelen)) {
            st->malformed = true;
        }
        return 0;
    }
    if (name_is(name, namelen, "trailer")) {
        st->trailer = true;
        return 0;
    }
    if (name_is(name, namelen, "expect")) {
        /* 100-continue is the one expectation (RFC 9110 10.1.1); any other is a 417. */
        if (md_ascii_eq_ci((const char *)value, valuelen, "100-continue", 12))
            st->expect = true;
        else
            st->status = 417;
        return 0;
    }
    if (name_is(name, namelen, "content-length")) {
        uint64_t v;
        /* nghttp2 NUL-terminates values, and has checked the field is one number. */
        if (md_parse_u64((const char *)value, 0, UINT64_MAX, &v) == 0) {
            st->has_length = true;
            st->length = v;
            r->has_length = true;
        }
        return 0;
    }
    if (h->srv->access_log != NULL) {
        if (name_is(name, namelen, "referer")) {
            size_t n = valuelen < MD_HTTP_FIELD_KEEP ? valuelen : MD_HTTP_FIELD_KEEP;
            memcpy(r->referer, value, n);
            r->referer_len = (uint16_t)n;
            return 0;
        }
        if (name_is(name, namelen, "user-agent")) {
            size_t n = valuelen < MD_HTTP_FIELD_KEEP ? valuelen : MD_HTTP_FIELD_KEEP;
            memcpy(r->user_agent, value, n);
            r->user_agent_len = (uint16_t)n;
            return 0;
        }
    }
    for (unsigned i = 0; i < MD_HTTP_FIELDS; i++)
        if (name_is(name, namelen, kept_names[i])) {
            keep_field(r, (md_http_field)i, value, valuelen);
            break;
        }
    return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    (void)s;
    md_h2_conn *h = user;
    switch (f->hd.type) {
    case NGHTTP2_PING:
        if ((f->hd.flags & NGHTTP2_FLAG_ACK) && h->notice_ns != 0 &&
            memcmp(f->ping.opaque_data, notice_ping, sizeof notice_ping) == 0)
            final_goaway(h); /* the peer has read the notice */
        if (!cheap_frame(h))
            return 0;
        break;
    case NGHTTP2_RST_STREAM: /* PRIORITY is counted as md_h2_conn_feed reads it */
        if (!cheap_frame(h))
            return 0;
        break;
    case NGHTTP2_SETTINGS:
        if (!(f->hd.flags & NGHTTP2_FLAG_ACK) && !cheap_frame(h))
            return 0;
        break;
    case NGHTTP2_DATA: /* empty: no data but its padding (padlen counts the Pad Length too) */
        if (f->hd.length == f->data.padlen && !(f->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
            !cheap_frame(h))
            return 0;
        break;
    case NGHTTP2_GOAWAY:
        /* The peer is going: nghttp2 ends the session once its streams are done. Ours goes
         * first, naming the last stream processed (RFC 9113 6.8: an endpoint SHOULD send a
         * GOAWAY before it closes), unless one has gone already. */
        if (!h->draining && h->notice_ns == 0) {
            h->draining = true;
            final_goaway(h);
        }
        return 0;
    default:
        break;
    }
    /* A trailer block that names its own stream as its dependency (RFC 9113 5.3.1: a stream
     * cannot depend on itself, a stream error PROTOCOL_ERROR), which nghttp2 checks only on a
     * HEADERS that opens a stream. */
    h2_stream *st = f->hd.stream_id != 0 ? stream_get(h, f->hd.stream_id) : NULL;
    if (st == NULL)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_HEADERS &&
        (f->hd.flags & NGHTTP2_FLAG_PRIORITY) && f->headers.pri_spec.stream_id == f->hd.stream_id) {
        reset(st, NGHTTP2_PROTOCOL_ERROR);
        return 0;
    }
    if (f->hd.type == NGHTTP2_RST_STREAM)
        st->peer_reset = true; /* its close follows */
    enter(h, st);
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
        head_done(h, st, (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0);
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM) && !st->req_done) {
        st->req_done = true;
        /* A piping handler's body is done once it has been given the last span. */
        st->r.body_done = !st->r.piping || md_outbuf_pending(&st->in) == 0;
        if (!st->early)
            answer(st);
    }
    return 0;
}

/* MD_BODY_PIPE: the next span of what the stream holds goes to the handler, when it asked
 * for one (pipe_read); its bytes go back to the windows (the handler passes a span on before
 * it asks for the next, so the peer sends as fast as the handler's sink takes it). true when
 * a span went. */
static bool pipe_feed(md_h2_conn *h, h2_stream *st)
{
    md_http_req *r = &st->r;
    size_t n = md_outbuf_pending(&st->in);
    if (!r->pipe_read || r->pending == NULL || n == 0)
        return false;
    if (n > PIPE_SPAN)
        n = PIPE_SPAN;
    enter(h, st);
    int rc = md__http_req_body(r, md_outbuf_pending_data(&st->in), n);
    md_outbuf_consume(&st->in, n);
    consume(h, st->id, n);
    st->data_ns = h->now_ns; /* its window opens: the peer may send on from now */
    if (rc != 0) {
        reset(st, NGHTTP2_INTERNAL_ERROR);
        drop_pipe(st);
        return false;
    }
    r->pipe_read = false;
    if (md_outbuf_pending(&st->in) == 0) {
        md_outbuf_free(&st->in);
        r->body_done = st->req_done;
    }
    return true;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *user)
{
    (void)s;
    (void)flags;
    md_h2_conn *h = user;
    h2_stream *st = stream_get(h, id);
    if (st == NULL || st->early || !st->head_done) {
        consume(h, id, len); /* dropped, but the window is the peer's again */
        return 0;
    }
    enter(h, st);
    st->body += len;
    st->data_ns = h->now_ns;
    if (st->body > h->srv->limits.max_body_bytes) {
        consume(h, id, len);
        answer_error(st, 413);
        return 0;
    }
    if (st->r.piping) {
        /* Held until the handler asks for it (MD_PENDING_READ), and given back to the windows
         * only then: the peer's window bounds what a stream holds. */
        if (md_outbuf_append(&st->in, (const char *)data, len) != 0) {
            consume(h, id, len);
            reset(st, NGHTTP2_INTERNAL_ERROR);
            return 0;
        }
        (void)pipe_feed(h, st);
        return 0;
    }
    int rc = md__http_req_body(&st->r, (const char *)data, len);
    if (rc != 0) {
        consume(h, id, len);
        if (rc == 500)
            answer_error(st, 500);
        else
            reset(st, NGHTTP2_INTERNAL_ERROR);
        return 0;
    }
    if (st->r.streaming)
        st->unconsumed += len; /* given back once its echo has left (md_h2_conn_run) */
    else
        consume(h, id, len);
    return 0;
}

/* A GOAWAY with an error, whoever decided it (nghttp2's own limits too): refused. */
static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    (void)s;
    md_h2_conn *h = user;
    if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code != NGHTTP2_NO_ERROR && !h->refused) {
        h->refused = true;
        atomic_fetch_add_explicit(&h2_refused, 1, memory_order_relaxed);
    }
    /* A complete response before the complete request (a 413, a refusal, a proxied early
     * answer): the rest of the body is read and dropped, each DATA credited to the windows
     * (on_data; on_stream_close what the stream held). No RST_STREAM NO_ERROR asks the client
     * to stop (RFC 9113 8.1 allows it): curl 7.88, Debian 12's, then failed the request with
     * its response unread now and then (error 92), even with the reset in a write of its
     * own after the response's. */
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        h2_stream *st = stream_get(h, f->hd.stream_id);
        if (st != NULL && !st->req_done)
            st->early = true; /* the rest of its body is dropped */
    }
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
    (void)s;
    (void)code;
    md_h2_conn *h = user;
    h2_stream *st = stream_get(h, id);
    if (st != NULL) {
        /* DATA the stream held and never gave back: the connection's window has it again
         * (the stream's is gone with it). */
        size_t held = st->unconsumed + md_outbuf_pending(&st->in);
        if (held != 0)
            (void)nghttp2_session_consume_connection(h->s, held);
        if (st->req_done || st->peer_reset) { /* nothing more may come on it */
            h->closed[h->closed_next] = id;
            h->closed_next = (uint8_t)((h->closed_next + 1) % ID_CLOSED);
        }
        stream_free(h, st);
    }
    return 0;
}

/* ---- the driving API ---- */

md_http_server *md_h2_conn_server(const md_h2_conn *h)
{
    return h->srv;
}

int md_h2_conn_new(md_h2_conn **out, md_http_server *srv, struct md_http_link *link,
                   uint64_t now_ns)
{
    md_h2_conn *h = calloc(1, sizeof *h);
    if (h == NULL)
        return -ENOMEM;
    h->srv = srv;
    h->link = link;
    h->now_ns = h->sent_ns = h->idle_ns = h->tokens_ns = now_ns;
    h->tokens = CHEAP_BURST;
    h->skip = MD_H2_PREFACE_LEN; /* md_h2_conn_feed's frames begin after it */
    nghttp2_session_callbacks *cb;
    nghttp2_option *opt;
    if (nghttp2_session_callbacks_new(&cb) != 0) {
        free(h);
        return -ENOMEM;
    }
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        free(h);
        return -ENOMEM;
    }
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_send_data_callback(cb, data_send);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_settings(opt, MD_H2_MAX_SETTINGS);
    nghttp2_option_set_max_outbound_ack(opt, MD_H2_MAX_OUTBOUND_ACK);
    nghttp2_option_set_stream_reset_rate_limit(opt, RESET_BURST, RESET_RATE);
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_no_closed_streams(opt, 1); /* on_begin_frame has what they told */
    /* Copied by nghttp2 into the session. */
    nghttp2_mem mem = {h, h2_malloc, h2_free, h2_calloc, h2_realloc};
    int rc = nghttp2_session_server_new3(&h->s, cb, h, opt, &mem);
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    if (rc != 0) {
        free(h);
        return -ENOMEM;
    }
    const md_http_limits *l = &srv->limits;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, l->http2_max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, l->http2_window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, l->max_header_bytes},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    };
    if (nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
        nghttp2_session_set_local_window_size(h->s, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0) {
        nghttp2_session_del(h->s);
        free(h);
        return -ENOMEM;
    }
    atomic_fetch_add_explicit(&h2_conns, 1, memory_order_relaxed);
    *out = h;
    return 0;
}

/* Follows the frame headers from one read to the next (h->hd, h->skip), from *scan in
 * data[0, len): where the next DATA frame's header begins in data (len: none), *scan past it,
 * *id its stream. On the way, PRIORITY frames and frames of a type nghttp2 ignores take from
 * the cheap-frame budget: nghttp2 calls back for neither when it ignores them (a PRIORITY on
 * a stream it no longer holds, an unknown type), so a flood of them would cost parsing and
 * nothing else would count it. */
static size_t next_data(md_h2_conn *h, const uint8_t *data, size_t len, size_t *scan, int32_t *id)
{
    size_t at = *scan;
    while (at < len) {
        if (h->skip != 0) {
            size_t n = len - at < h->skip ? len - at : h->skip;
            at += n;
            h->skip -= (uint32_t)n;
            continue;
        }
        size_t begin = at;
        while (h->hd_len < sizeof h->hd && at < len)
            h->hd[h->hd_len++] = data[at++];
        if (h->hd_len < sizeof h->hd)
            break;
        h->hd_len = 0;
        h->skip = (uint32_t)h->hd[0] << 16 | (uint32_t)h->hd[1] << 8 | h->hd[2];
        if (h->hd[3] == NGHTTP2_DATA) {
            *id = (int32_t)(((uint32_t)h->hd[5] & 0x7f) << 24 | (uint32_t)h->hd[6] << 16 |
                            (uint32_t)h->hd[7] << 8 | h->hd[8]);
            *scan = at;
            return begin;
        }
        if (h->hd[3] == NGHTTP2_PRIORITY || h->hd[3] > NGHTTP2_CONTINUATION)
            (void)cheap_frame(h); /* over budget: the session is ended (GOAWAY) */
    }
    *scan = len;
    return len;
}

int md_h2_conn_feed(md_h2_conn *h, uint64_t now_ns, const char *data, size_t len)
{
    h->now_ns = now_ns;
    md_http_date_refresh(h->srv->clock);
    md__http_account_bytes(h->srv, MD_LISTENER_HTTP, len, 0);
    /* A DATA frame on a stream the peer had closed is a connection error STREAM_CLOSED (RFC
     * 9113 5.1), which nghttp2, keeping no closed stream, would ignore (on_begin_frame). The
     * bytes before each DATA frame go to nghttp2 first, so that a stream they close is closed
     * when the frame's is looked up. */
    const uint8_t *p = (const uint8_t *)data;
    ssize_t rc = 0;
    size_t fed = 0, scan = 0;
    int32_t id;
    for (size_t at; rc >= 0 && (at = next_data(h, p, len, &scan, &id)) < len;) {
        if (at > fed) {
            rc = nghttp2_session_mem_recv(h->s, p + fed, at - fed);
            fed = at;
        }
        if (rc >= 0 && id > 0 && id <= h->last_id && closed_by_peer(h, id)) {
            (void)nghttp2_session_terminate_session(h->s, NGHTTP2_STREAM_CLOSED);
            rc = NGHTTP2_ERR_CALLBACK_FAILURE;
        } else if (rc >= 0 && id > 0 && id <= h->last_id && stream_get(h, id) == NULL &&
                   !cheap_frame(h)) {
            rc = NGHTTP2_ERR_CALLBACK_FAILURE; /* DATA nghttp2 ignores: over the budget */
        }
    }
    if (rc >= 0 && fed < len)
        rc = nghttp2_session_mem_recv(h->s, p + fed, len - fed);
    if (rc >= 0)
        return 0;
    if (rc == NGHTTP2_ERR_NOMEM)
        return -ENOMEM;
    /* A bad preface, a flood (ACKs a peer does not read), a callback's failure: a GOAWAY is
     * tried on the way out, nothing more is read. */
    if (!h->refused) {
        h->refused = true;
        atomic_fetch_add_explicit(&h2_refused, 1, memory_order_relaxed);
    }
    (void)nghttp2_session_terminate_session(
        h->s, rc == NGHTTP2_ERR_FLOODED ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
    return rc == NGHTTP2_ERR_BAD_CLIENT_MAGIC ? -EPROTO : 0;
}

/* The io a stream's pending handler gets: writes go to the stream's output, which DATA frames
 * drain, and lent bytes follow it there without a copy (data_send); no socket, no sendfile. */
struct h2_io {
    md_http_io io;
    h2_stream *st;
};

static mp_poll stream_write(md_http_io *io, mp_context *cx, const char *data, size_t len, int *err)
{
    (void)cx; /* the connection's task polls the stream again once its output drained */
    h2_stream *st = ((struct h2_io *)(void *)io)->st;
    if (owed(st) >= STREAM_OUT_HIGH || st->lent_release != NULL) {
        st->blocked = true; /* nothing goes after lent bytes until they are released */
        return MP_PENDING;
    }
    *err = md_outbuf_append(&st->out, data, len);
    return MP_READY;
}

static mp_poll stream_lend(md_http_io *io, mp_context *cx, const char *data, size_t len,
                           void (*release)(void *arg), void *arg, int *err)
{
    (void)cx; /* as stream_write */
    h2_stream *st = ((struct h2_io *)(void *)io)->st;
    if (owed(st) >= STREAM_OUT_HIGH || st->lent_release != NULL) {
        st->blocked = true;
        return MP_PENDING;
    }
    *err = 0;
    st->lent = data;
    st->lent_len = len;
    st->lent_release = release;
    st->lent_arg = arg;
    if (len == 0 || st->reset || (st->answered && !st->has_body))
        lent_release(st); /* nothing of it will be sent (a HEAD's, a reset stream's) */
    return MP_READY;
}

bool md_h2_conn_run(md_h2_conn *h, mp_context *cx, uint64_t now_ns)
{
    h->now_ns = now_ns;
    md_http_date_refresh(h->srv->clock);
    bool moved = false;
    for (h2_stream *st = h->streams; st != NULL; st = st->next) {
        size_t due = owed(st);
        if (st->unconsumed != 0 && due < STREAM_OUT_HIGH) {
            consume(h, st->id, st->unconsumed);
            st->unconsumed = 0;
            st->data_ns = now_ns; /* as pipe_feed's */
            moved = true;
        }
        md_http_pending *p = st->r.pending;
        if (p == NULL || st->reset)
            continue;
        if ((st->blocked && due >= STREAM_OUT_HIGH / 2) || (st->more && due != 0))
            continue;
        if (st->lent_release != NULL)
            continue; /* polled again once its lent bytes went: nothing goes after them */
        if (st->r.piping && st->r.pipe_read && !st->r.body_done)
            continue; /* it waits for the peer's next DATA (on_data gives it) */
        st->blocked = st->more = false;
        bool answered = st->answered;
        struct h2_io io = {{.fd = -1, .write = stream_write, .lend = stream_lend}, st};
        enter(h, st);
        int rc = p->poll(p, &st->r, cx, &io.io, &st->out);
        if (rc == MD_PENDING_WAIT) {
            if (owed(st) != due || st->answered != answered)
                moved = true;
            continue;
        }
        moved = true;
        if (rc == MD_PENDING_READ && st->r.piping && !st->r.body_done) {
            st->r.pipe_read = true; /* the span is passed on: the next, when there is one */
            (void)pipe_feed(h, st);
        } else if (rc == MD_PENDING_MORE || rc == MD_PENDING_READ) {
            st->more = true;
        } else if (rc < 0) {
            st->r.pending = NULL;
            reset(st, NGHTTP2_INTERNAL_ERROR); /* ended short: nothing more is its content */
            drop_pipe(st);
        } else {
            st->r.pending = NULL;
            finish(st);
            drop_pipe(st); /* answered: the rest of the body is not read */
        }
    }
    return moved;
}

int md_h2_conn_send(md_h2_conn *h, md_outbuf *out, size_t max)
{
    size_t due = 0; /* body bytes the streams owe */
    for (h2_stream *st = h->streams; st != NULL; st = st->next) {
        if (st->deferred && (owed(st) != 0 || st->resp_done)) {
            st->deferred = false;
            (void)nghttp2_session_resume_data(h->s, st->id);
        }
        if (st->answered && st->has_body)
            due += owed(st);
    }
    if (due == 0) {
        h->owed_ns = 0;
    } else if (h->owed_ns == 0) {
        h->owed_ns = h->now_ns;
        h->owed_sent = h->data_sent;
    }
    /* A burst of responses (a read's worth of streams, each answered at once) is some KiB of
     * frames: room for them at once, rather than a first buffer grown by realloc (each time a
     * copy when the heap cannot extend it in place); a burst of DATA larger than that, a
     * batch's room (outbuf.h) from the thread's cache. */
    if (md_outbuf_pending(out) == 0 && nghttp2_session_want_write(h->s)) {
        if (due > SEND_FIRST && max > SEND_FIRST) {
            if (md_outbuf_batch(out) != 0)
                return -ENOMEM;
        } else if (out->cap < SEND_FIRST) {
            md_outbuf_free(out);
            if (md_outbuf_grow(out, SEND_FIRST) != 0)
                return -ENOMEM;
        }
    }
    size_t before = md_outbuf_pending(out);
    h->sending = out;
    h->send_max = max;
    while (md_outbuf_pending(out) < max) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(h->s, &data);
        if (n < 0)
            return n == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
        if (n == 0)
            break;
        if (md_outbuf_append(out, data, (size_t)n) != 0)
            return -ENOMEM;
    }
    size_t after = md_outbuf_pending(out);
    md__http_account_bytes(h->srv, MD_LISTENER_HTTP, 0, after > before ? after - before : 0);
    if (after > before) {
        h->framebuf_touched = true;
        h->out_ns = h->now_ns;
    }
    return 0;
}

uint64_t md_h2_conn_release_at(const md_h2_conn *h)
{
    if (h->framebuf == NULL || !h->framebuf_touched || h->nstreams != 0)
        return UINT64_MAX;
    uint64_t quiet = h->out_ns > h->idle_ns ? h->out_ns : h->idle_ns;
    return quiet + MD_H2_RELEASE_NS;
}

static bool page_is_zero(const void *page)
{
    const uint64_t *w = page;
    uint64_t any = 0;
    for (size_t i = 0; i < PAGE / sizeof *w; i++)
        any |= w[i];
    return any == 0;
}

size_t md_h2_conn_release(md_h2_conn *h)
{
    /* Nothing queued: no frame half written into the buffer. What nghttp2 writes next, it
     * writes before it reads; a page given back reads as zeros. */
    if (h->framebuf == NULL || !h->framebuf_touched || h->nstreams != 0 ||
        nghttp2_session_want_write(h->s))
        return 0;
    size_t given = 0;
    if (madvise(h->framebuf, h->framebuf_len, MADV_DONTNEED) == 0) /* best effort */
        given += h->framebuf_len;
    /* The map's pages that hold no stream: given back, they read as the zeros they held. */
    for (size_t off = 0; h->table != NULL && off < h->table_len; off += PAGE) {
        char *page = (char *)h->table + off;
        if (page_is_zero(page) && madvise(page, PAGE, MADV_DONTNEED) == 0)
            given += PAGE;
    }
    h->framebuf_touched = false;
    atomic_fetch_add_explicit(&h2_releases, 1, memory_order_relaxed);
    return given;
}

bool md_h2_conn_done(const md_h2_conn *h)
{
    return !nghttp2_session_want_read(h->s) && !nghttp2_session_want_write(h->s);
}

/* Whether the stream waits for more of its request from the peer. A piping handler that
 * holds a span, or DATA not yet given to it, waits on its sink, not on the peer. */
static bool stream_reading(const h2_stream *st)
{
    return !st->req_done && !st->early &&
           (!st->r.piping || (st->r.pipe_read && md_outbuf_pending(&st->in) == 0));
}

/* min_body_rate on a stream's body, as http1.c's on a connection's: after the grace, once the
 * time since its head exceeds body / rate. Only for a body the core takes (gathered or
 * dropped): a streamed or piped one goes at its sink's pace, which holds the peer's window
 * shut (the body timeout still applies to it). UINT64_MAX: none. */
static uint64_t rate_deadline(const md_h2_conn *h, const h2_stream *st)
{
    const md_http_limits *l = &h->srv->limits;
    if (l->min_body_rate == 0 || !st->head_done || st->r.piping || st->r.streaming ||
        !stream_reading(st))
        return UINT64_MAX;
    uint64_t grace = (uint64_t)l->min_rate_grace_ms * UINT64_C(1000000);
    uint64_t due = st->body * UINT64_C(1000000000) / l->min_body_rate;
    return st->body_ns + (due > grace ? due : grace);
}

/* body_timeout_ms on a stream that waits for more of its request: from its last DATA, or
 * from when its window last opened. UINT64_MAX: none. */
static uint64_t body_deadline(const md_h2_conn *h, const h2_stream *st)
{
    const md_http_limits *l = &h->srv->limits;
    if (!stream_reading(st))
        return UINT64_MAX;
    return st->data_ns + l->body_timeout_ms * UINT64_C(1000000);
}

/* The send limits, while some stream owes the peer output (its window, or the socket, holds
 * it back): send_timeout_ms from the last DATA or the wait's start, whichever is later, and
 * min_send_rate (as a blocked HTTP/1.1 write's, conn.c) on the DATA since the wait began, so
 * that a window opened a byte at a time does not hold a stream for ever. *rate: the
 * deadline is min_send_rate's. UINT64_MAX: none. */
static uint64_t send_deadline(const md_h2_conn *h, bool *rate)
{
    const md_http_limits *l = &h->srv->limits;
    const uint64_t ms = UINT64_C(1000000);
    *rate = false;
    if (h->owed_ns == 0)
        return UINT64_MAX;
    uint64_t at = UINT64_MAX;
    if (l->send_timeout_ms != 0)
        at = (h->sent_ns > h->owed_ns ? h->sent_ns : h->owed_ns) + l->send_timeout_ms * ms;
    if (l->min_send_rate != 0) {
        uint64_t grace = (uint64_t)l->min_rate_grace_ms * ms;
        uint64_t sent = h->data_sent - h->owed_sent; /* in two steps: no overflow past 18 GB */
        uint64_t due = sent / l->min_send_rate * UINT64_C(1000000000) +
                       sent % l->min_send_rate * UINT64_C(1000000000) / l->min_send_rate;
        uint64_t r = h->owed_ns + (due > grace ? due : grace);
        if (r < at) {
            at = r;
            *rate = true;
        }
    }
    return at;
}

static uint64_t limits_deadline(const md_h2_conn *h)
{
    const md_http_limits *l = &h->srv->limits;
    const uint64_t ms = UINT64_C(1000000);
    if (h->nstreams == 0) {
        uint32_t t = h->requests == 0 || l->keepalive_timeout_ms == 0 ? l->header_timeout_ms
                                                                      : l->keepalive_timeout_ms;
        /* From the last stream's end, not the last frame: PINGs do not keep it open. */
        return h->idle_ns + t * ms;
    }
    bool rate;
    uint64_t at = send_deadline(h, &rate);
    for (const h2_stream *st = h->streams; st != NULL; st = st->next) {
        uint64_t r = rate_deadline(h, st);
        at = r < at ? r : at;
        r = body_deadline(h, st);
        at = r < at ? r : at;
    }
    return at;
}

uint64_t md_h2_conn_deadline(const md_h2_conn *h)
{
    uint64_t at = limits_deadline(h);
    if (h->notice_ns != 0 && h->notice_ns + NOTICE_WAIT_NS < at)
        at = h->notice_ns + NOTICE_WAIT_NS;
    return at;
}

md_http_expired md_h2_conn_timeout(md_h2_conn *h, uint64_t now_ns, bool *send_stall)
{
    *send_stall = false;
    h->now_ns = now_ns;
    if (h->notice_ns != 0 && now_ns >= h->notice_ns + NOTICE_WAIT_NS)
        final_goaway(h); /* no ACK came: the final GOAWAY all the same */
    if (now_ns < md_h2_conn_deadline(h))
        return MD_HTTP_EXPIRED_NONE;
    /* A stream whose body is too slow, or paused past body_timeout_ms, gets 408 (its body
     * dropped, its window given back); the connection and its other streams go on. */
    bool slow = false;
    for (h2_stream *st = h->streams; st != NULL; st = st->next) {
        if (now_ns >= rate_deadline(h, st) || now_ns >= body_deadline(h, st)) {
            enter(h, st);
            answer_error(st, 408);
            slow = true;
        }
    }
    if (slow && now_ns < md_h2_conn_deadline(h))
        return MD_HTTP_EXPIRED_NONE;
    md_http_expired why = MD_HTTP_EXPIRED_NONE;
    bool rate;
    if (h->nstreams == 0)
        why = h->requests == 0 ? MD_HTTP_EXPIRED_HEADER : MD_HTTP_EXPIRED_KEEPALIVE;
    else if (now_ns >= send_deadline(h, &rate) && rate)
        why = MD_HTTP_EXPIRED_SEND_RATE; /* a window opened too slowly */
    else
        *send_stall = true; /* a window held at zero for send_timeout_ms */
    (void)nghttp2_session_terminate_session(h->s, NGHTTP2_NO_ERROR);
    return why;
}

void md_h2_conn_drain(md_h2_conn *h, uint64_t now_ns)
{
    if (h->draining)
        return;
    h->draining = true;
    if (nghttp2_submit_shutdown_notice(h->s) != 0 ||
        nghttp2_submit_ping(h->s, NGHTTP2_FLAG_NONE, notice_ping) != 0) {
        final_goaway(h); /* no memory for the notice: the final GOAWAY at once */
        return;
    }
    h->notice_ns = now_ns != 0 ? now_ns : 1;
}

uint32_t md_h2_conn_streams(const md_h2_conn *h)
{
    return h->nstreams;
}

bool md_h2_conn_refused(const md_h2_conn *h)
{
    return h->refused;
}

void md_h2_conn_free(md_h2_conn *h)
{
    if (h == NULL)
        return;
    while (h->streams != NULL)
        stream_free(h, h->streams);
    nghttp2_session_del(h->s); /* the streams' user data is gone: no callback runs now */
    free(h);
}

int md_h2_metrics_text(md_outbuf *out)
{
    char buf[900];
    int n = snprintf(
        buf, sizeof buf,
        "# HELP magpied_http2_connections_total Connections that spoke HTTP/2 (h2, h2c).\n"
        "# TYPE magpied_http2_connections_total counter\n"
        "magpied_http2_connections_total %llu\n"
        "# HELP magpied_http2_streams_total HTTP/2 requests (streams) begun.\n"
        "# TYPE magpied_http2_streams_total counter\n"
        "magpied_http2_streams_total %llu\n"
        "# HELP magpied_http2_refused_total HTTP/2 sessions ended for a flood or a protocol "
        "error (GOAWAY).\n"
        "# TYPE magpied_http2_refused_total counter\n"
        "magpied_http2_refused_total %llu\n"
        "# HELP magpied_http2_quiet_releases_total Times a quiet HTTP/2 session gave its frame "
        "buffer's and empty stream index's pages back.\n"
        "# TYPE magpied_http2_quiet_releases_total counter\n"
        "magpied_http2_quiet_releases_total %llu\n",
        (unsigned long long)atomic_load_explicit(&h2_conns, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&h2_streams, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&h2_refused, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&h2_releases, memory_order_relaxed));
    return md_outbuf_append(out, buf, (size_t)n);
}
