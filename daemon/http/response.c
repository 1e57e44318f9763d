/* HTTP/1.x response heads for the request layer (request.c): the status table, the Date block
 * cached per thread and per second (RFC 9110 IMF-fixdate), and the head writer.
 *
 * The Date block is thread-local: every connection a worker serves shares one, and no thread
 * ever writes another's, so it needs no synchronisation.
 */
#include "http/response.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/httpdate.h"

#define STATUS(code, text)                                                                         \
    {                                                                                              \
        code, sizeof("HTTP/1.1 " #code " " text "\r\n") - 1, sizeof(text "\n") - 1,                \
            "HTTP/1.1 " #code " " text "\r\n", text "\n"                                           \
    }

static const md_http_status statuses[] = {
    STATUS(200, "OK"),
    STATUS(206, "Partial Content"),
    STATUS(301, "Moved Permanently"),
    STATUS(302, "Found"),
    STATUS(303, "See Other"),
    STATUS(307, "Temporary Redirect"),
    STATUS(304, "Not Modified"),
    STATUS(308, "Permanent Redirect"),
    STATUS(400, "Bad Request"),
    STATUS(401, "Unauthorized"),
    STATUS(403, "Forbidden"),
    STATUS(404, "Not Found"),
    STATUS(405, "Method Not Allowed"),
    STATUS(408, "Request Timeout"),
    STATUS(413, "Content Too Large"),
    STATUS(414, "URI Too Long"),
    STATUS(416, "Range Not Satisfiable"),
    STATUS(410, "Gone"),
    STATUS(412, "Precondition Failed"),
    STATUS(417, "Expectation Failed"),
    STATUS(421, "Misdirected Request"),
    STATUS(429, "Too Many Requests"),
    STATUS(431, "Request Header Fields Too Large"),
    STATUS(500, "Internal Server Error"),
    STATUS(501, "Not Implemented"),
    STATUS(502, "Bad Gateway"),
    STATUS(503, "Service Unavailable"),
    STATUS(504, "Gateway Timeout"),
    STATUS(505, "HTTP Version Not Supported"),
};

#define NSTATUSES (sizeof(statuses) / sizeof(statuses[0]))

const md_http_status *md_http_status_of(unsigned code)
{
    for (size_t i = 0; i < NSTATUSES; i++)
        if (statuses[i].code == code)
            return &statuses[i];
    return md_http_status_of(500);
}

/* "Date: <IMF-fixdate>\r\nServer: magpied\r\n" */
static _Thread_local struct {
    time_t sec;
    size_t len;
    char text[sizeof "Date: \r\nServer: magpied\r\n" + MD_HTTPDATE_LEN];
} date_block = {.sec = (time_t)-1};

void md_http_date_refresh(time_t (*clock)(void))
{
    time_t now = clock != NULL ? clock() : time(NULL);
    if (now == date_block.sec)
        return;
    static const char head[] = "Date: ", tail[] = "\r\nServer: magpied\r\n";
    char *w = date_block.text;
    memcpy(w, head, sizeof head - 1);
    w += sizeof head - 1;
    w += md_httpdate_format(now, w);
    memcpy(w, tail, sizeof tail - 1);
    w += sizeof tail - 1;
    date_block.len = (size_t)(w - date_block.text);
    date_block.sec = now;
}

const char *md_http_date_value(size_t *len)
{
    *len = MD_HTTPDATE_LEN;
    return date_block.text + sizeof "Date: " - 1;
}

time_t md_http_date_now(void)
{
    return date_block.sec;
}

#define PUT(w, lit) (memcpy((w), (lit), sizeof(lit) - 1), (w) + sizeof(lit) - 1)

static char *put_bytes(char *w, const void *p, size_t n)
{
    memcpy(w, p, n);
    return w + n;
}

static char *put_u64(char *w, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n != 0)
        *w++ = tmp[--n];
    return w;
}

char *md_http_put_head_fields(char *w, const md_http_status *st, bool close, bool http10,
                              const char *allow, const char *fields, size_t fields_len,
                              const char *ctype, uint64_t length)
{
    w = put_bytes(w, st->line, st->line_len);
    w = put_bytes(w, date_block.text, date_block.len);
    if (close)
        w = PUT(w, "Connection: close\r\n");
    else if (http10)
        w = PUT(w, "Connection: keep-alive\r\n");
    if (allow != NULL) {
        w = PUT(w, "Allow: ");
        w = put_bytes(w, allow, strlen(allow));
        w = PUT(w, "\r\n");
    }
    if (fields != NULL)
        w = put_bytes(w, fields, fields_len);
    /* A 304 has no content, and says no length (RFC 9110 8.6 allows the 200's; nginx and
     * Apache send none, and clients built on the old http_parser, wrk among them, would
     * wait for that many body bytes), nor a type: representation metadata that guides no
     * cache update, which RFC 9110 15.4.5 says not to send. */
    if (st->code == 304)
        return PUT(w, "\r\n");
    w = PUT(w, "Content-Type: ");
    w = put_bytes(w, ctype, strlen(ctype));
    if (length == MD_HTTP_LENGTH_CODED)
        return PUT(w, "\r\nTransfer-Encoding: chunked\r\n\r\n");
    w = PUT(w, "\r\nContent-Length: ");
    w = put_u64(w, length);
    return PUT(w, "\r\n\r\n");
}

char *md_http_put_head(char *w, const md_http_status *st, bool close, bool http10,
                       const char *allow, const char *ctype, uint64_t length)
{
    return md_http_put_head_fields(w, st, close, http10, allow, NULL, 0, ctype, length);
}

/* The status line of a relayed head: the status and reason as the upstream gave them. */
static int put_status_line(md_outbuf *out, unsigned status, const char *reason, size_t rlen,
                           size_t more)
{
    char *w = md_outbuf_reserve(out, 16 + rlen + more);
    if (w == NULL)
        return -ENOMEM;
    w = PUT(w, "HTTP/1.1 ");
    w = put_u64(w, status);
    *w++ = ' ';
    if (rlen != 0)
        w = put_bytes(w, reason, rlen);
    md_outbuf_commit(out, PUT(w, "\r\n"));
    return 0;
}

int md_http1_put_relayed(md_outbuf *out, unsigned status, const char *reason, size_t reason_len,
                         const char *fields, size_t fields_len, md_http1_framing framing,
                         uint64_t length, bool close, bool http10)
{
    /* the framing's field and Connection: at most 64 bytes */
    if (put_status_line(out, status, reason, reason_len, fields_len + 64) != 0)
        return -ENOMEM;
    char *w = out->data + out->len;
    if (fields_len != 0)
        w = put_bytes(w, fields, fields_len);
    if (framing == MD_HTTP1_LENGTH) {
        w = PUT(w, "Content-Length: ");
        w = put_u64(w, length);
        w = PUT(w, "\r\n");
    } else if (framing == MD_HTTP1_CHUNKED) {
        w = PUT(w, "Transfer-Encoding: chunked\r\n");
    }
    if (framing == MD_HTTP1_UPGRADE)
        w = PUT(w, "Connection: upgrade\r\n\r\n");
    else if (close || framing == MD_HTTP1_CLOSE)
        w = PUT(w, "Connection: close\r\n\r\n");
    else if (http10)
        w = PUT(w, "Connection: keep-alive\r\n\r\n");
    else
        w = PUT(w, "\r\n");
    md_outbuf_commit(out, w);
    return 0;
}

int md_http1_put_interim(md_outbuf *out, unsigned status, const char *reason, size_t reason_len,
                         const char *fields, size_t fields_len)
{
    if (put_status_line(out, status, reason, reason_len, fields_len + 2) != 0)
        return -ENOMEM;
    char *w = out->data + out->len;
    if (fields_len != 0)
        w = put_bytes(w, fields, fields_len);
    md_outbuf_commit(out, PUT(w, "\r\n"));
    return 0;
}

int md_http1_put_chunk(md_outbuf *out, const char *data, size_t len)
{
    if (len == 0)
        return 0; /* a chunk of none would be the last */
    char *w = md_outbuf_reserve(out, 16 + 2 + len + 2);
    if (w == NULL)
        return -ENOMEM;
    static const char hex[] = "0123456789abcdef";
    char size[16];
    size_t n = 0;
    for (size_t v = len; v != 0; v >>= 4)
        size[n++] = hex[v & 15];
    while (n != 0)
        *w++ = size[--n];
    w = PUT(w, "\r\n");
    w = put_bytes(w, data, len);
    md_outbuf_commit(out, PUT(w, "\r\n"));
    return 0;
}

int md_http1_put_last(md_outbuf *out, const char *trailers, size_t trailers_len)
{
    char *w = md_outbuf_reserve(out, 3 + trailers_len + 2);
    if (w == NULL)
        return -ENOMEM;
    w = PUT(w, "0\r\n");
    if (trailers_len != 0)
        w = put_bytes(w, trailers, trailers_len);
    md_outbuf_commit(out, PUT(w, "\r\n"));
    return 0;
}

/* Whole responses, per thread; valid while sec matches the Date block's. */
static _Thread_local struct {
    time_t sec;
    uint64_t tag; /* whose response it is (a route table's id) */
    size_t len;
    char text[MD_HTTP_CANNED_MAX];
} canned[MD_HTTP_CANNED_SLOTS];

/* The slot's response for this second, built once per second per thread: out of the way of
 * the hit below, whose frame would otherwise carry this one's head buffer. */
static __attribute__((noinline)) const char *canned_build(unsigned slot, uint64_t tag,
                                                          const char *ctype, const char *fields,
                                                          size_t flen, const char *body,
                                                          size_t body_len)
{
    char head[MD_HTTP_HEAD_MAX + MD_HTTP_CANNED_MAX];
    char *w = md_http_put_head_fields(head, md_http_status_of(200), false, false, NULL, fields,
                                      flen, ctype, body_len);
    size_t hlen = (size_t)(w - head);
    if (hlen + body_len > sizeof(canned[slot].text))
        return NULL;
    memcpy(canned[slot].text, head, hlen);
    memcpy(canned[slot].text + hlen, body, body_len);
    canned[slot].len = hlen + body_len;
    canned[slot].sec = date_block.sec;
    canned[slot].tag = tag;
    return canned[slot].text;
}

const char *md_http_canned(unsigned slot, uint64_t tag, const char *ctype, const char *fields,
                           size_t flen, const char *body, size_t body_len, size_t *len)
{
    if (slot >= MD_HTTP_CANNED_SLOTS || body_len > MD_HTTP_CANNED_MAX / 2 ||
        flen > MD_HTTP_CANNED_MAX)
        return NULL;
    if ((canned[slot].sec != date_block.sec || canned[slot].tag != tag || canned[slot].len == 0) &&
        canned_build(slot, tag, ctype, fields, flen, body, body_len) == NULL)
        return NULL;
    *len = canned[slot].len;
    return canned[slot].text;
}
