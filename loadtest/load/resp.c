/* resp.c: the response framer of resp.h, a state machine over the bytes as they come.
 *
 * HEAD       collecting the head until the empty line; parse_head() decides what follows
 * BODY_LEN   `remaining` bytes of a Content-Length body
 * BODY_EOF   everything until the server closes
 * CHUNK_*    chunked coding (RFC 9112 §7.1): size in hex, extensions skipped, CRLF, data,
 *            CRLF; after the last (0) chunk, trailer lines until an empty one
 */
#include "resp.h"

#include <string.h>

enum {
    HEAD,
    BODY_LEN,
    BODY_EOF,
    CHUNK_SIZE,
    CHUNK_EXT,
    CHUNK_DATA,
    CHUNK_DATA_CR,
    CHUNK_DATA_LF,
    TRAILER_START,
    TRAILER_LINE,
    TRAILER_END_LF,
};

void ld_resp_start(ld_resp *r, bool head_request)
{
    r->state = HEAD;
    r->head_request = head_request;
    r->close = r->until_eof = false;
    r->status = 0;
    r->remaining = r->chunk_size = 0;
    r->chunk_digits = 0;
    r->head_len = 0;
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static bool name_is(const char *p, size_t n, const char *want)
{
    size_t wl = strlen(want);
    if (n != wl)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)p[i]) != want[i])
            return false;
    return true;
}

/* Does the comma-separated list v[0..n) hold token tok (case-insensitive)? */
static bool has_token(const char *v, size_t n, const char *tok, bool last_only)
{
    size_t i = 0;
    bool found = false;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e > s) {
            found = name_is(v + s, e - s, tok);
            if (found && !last_only)
                return true;
        }
    }
    return found;
}

/* h[0..n) is a whole head, ending in CRLF CRLF. */
static int parse_head(ld_resp *r, const char *h, size_t n)
{
    if (n < 14 || memcmp(h, "HTTP/1.", 7) != 0 || (h[7] != '0' && h[7] != '1') || h[8] != ' ')
        return LD_RESP_BAD_STATUS;
    if (h[9] < '1' || h[9] > '5' || h[10] < '0' || h[10] > '9' || h[11] < '0' || h[11] > '9' ||
        (h[12] != ' ' && h[12] != '\r'))
        return LD_RESP_BAD_STATUS;
    bool http10 = h[7] == '0';
    r->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
    const char *end = h + n - 2; /* the final CRLF */
    const char *line = memchr(h, '\n', n);
    if (!line || line[-1] != '\r')
        return LD_RESP_BAD_STATUS;
    line++;
    bool have_len = false, chunked = false, keep_alive = false, close = false;
    uint64_t len = 0;
    while (line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end + 2 - line));
        if (!eol || eol == line || eol[-1] != '\r')
            return LD_RESP_BAD_HEADER;
        const char *colon = memchr(line, ':', (size_t)(eol - line));
        if (!colon || colon == line)
            return LD_RESP_BAD_HEADER;
        const char *v = colon + 1, *ve = eol - 1;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        size_t nl = (size_t)(colon - line), vl = (size_t)(ve - v);
        switch (lower((unsigned char)line[0])) {
        case 'c':
            if (name_is(line, nl, "content-length")) {
                uint64_t x = 0;
                if (vl == 0 || vl > 18)
                    return LD_RESP_BAD_LENGTH;
                for (size_t i = 0; i < vl; i++) {
                    if (v[i] < '0' || v[i] > '9')
                        return LD_RESP_BAD_LENGTH;
                    x = x * 10 + (uint64_t)(v[i] - '0');
                }
                if (have_len && x != len)
                    return LD_RESP_BAD_LENGTH;
                have_len = true;
                len = x;
            } else if (name_is(line, nl, "connection")) {
                close |= has_token(v, vl, "close", false);
                keep_alive |= has_token(v, vl, "keep-alive", false);
            }
            break;
        case 't':
            if (name_is(line, nl, "transfer-encoding"))
                chunked = has_token(v, vl, "chunked", true);
            break;
        default:
            break;
        }
        line = eol + 1;
    }
    r->close = close || (http10 && !keep_alive);
    if (r->status == 101)
        return LD_RESP_BAD_STATUS; /* no protocol switch is asked for */
    if (r->status < 200) {         /* interim: the real response follows */
        ld_resp_start(r, r->head_request);
        return LD_RESP_OK;
    }
    if (r->head_request || r->status == 204 || r->status == 304)
        r->state = -1; /* done */
    else if (chunked) {
        r->state = CHUNK_SIZE;
        r->chunk_size = 0;
        r->chunk_digits = 0;
    } else if (have_len) {
        r->remaining = len;
        r->state = len ? BODY_LEN : -1;
    } else {
        r->until_eof = true;
        r->close = true;
        r->state = BODY_EOF;
    }
    return LD_RESP_OK;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = lower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

long ld_resp_feed(ld_resp *r, const char *p, size_t n, bool *done)
{
    size_t i = 0;
    *done = false;
    while (i < n) {
        switch (r->state) {
        case HEAD: {
            int rc;
            if (r->head_len == 0) {
                const char *e = memmem(p + i, n - i, "\r\n\r\n", 4);
                if (e) {
                    size_t hl = (size_t)(e + 4 - (p + i));
                    if ((rc = parse_head(r, p + i, hl)) != LD_RESP_OK)
                        return rc;
                    i += hl;
                    break;
                }
            }
            size_t old = r->head_len, room = LD_RESP_HEAD_MAX - old;
            size_t take = n - i < room ? n - i : room;
            memcpy(r->head + old, p + i, take);
            r->head_len += take;
            size_t from = old > 3 ? old - 3 : 0;
            const char *e = memmem(r->head + from, r->head_len - from, "\r\n\r\n", 4);
            if (!e) {
                if (take == room)
                    return LD_RESP_BAD_HEADER;
                i += take;
                break;
            }
            size_t hl = (size_t)(e + 4 - r->head);
            i += hl - old;
            r->head_len = 0;
            if ((rc = parse_head(r, r->head, hl)) != LD_RESP_OK)
                return rc;
            break;
        }
        case BODY_LEN: {
            uint64_t take = n - i < r->remaining ? n - i : r->remaining;
            i += (size_t)take;
            if ((r->remaining -= take) == 0)
                r->state = -1;
            break;
        }
        case BODY_EOF:
            i = n;
            break;
        case CHUNK_SIZE: {
            char c = p[i++];
            int h = hexval((unsigned char)c);
            if (h >= 0) {
                if (++r->chunk_digits > 15)
                    return LD_RESP_BAD_CHUNK;
                r->chunk_size = r->chunk_size * 16 + (uint64_t)h;
            } else if (r->chunk_digits == 0) {
                return LD_RESP_BAD_CHUNK;
            } else if (c == ';' || c == ' ' || c == '\t' || c == '\r') {
                r->state = CHUNK_EXT;
            } else if (c == '\n') {
                goto size_done;
            } else {
                return LD_RESP_BAD_CHUNK;
            }
            break;
        }
        case CHUNK_EXT: /* extensions, up to the LF */
            if (p[i++] != '\n')
                break;
        size_done:
            if (r->chunk_size == 0) {
                r->state = TRAILER_START;
            } else {
                r->remaining = r->chunk_size;
                r->state = CHUNK_DATA;
            }
            break;
        case CHUNK_DATA: {
            uint64_t take = n - i < r->remaining ? n - i : r->remaining;
            i += (size_t)take;
            if ((r->remaining -= take) == 0)
                r->state = CHUNK_DATA_CR;
            break;
        }
        case CHUNK_DATA_CR:
            if (p[i++] != '\r')
                return LD_RESP_BAD_CHUNK;
            r->state = CHUNK_DATA_LF;
            break;
        case CHUNK_DATA_LF:
            if (p[i++] != '\n')
                return LD_RESP_BAD_CHUNK;
            r->state = CHUNK_SIZE;
            r->chunk_size = 0;
            r->chunk_digits = 0;
            break;
        case TRAILER_START: /* an empty line ends the message; anything else is a field */
            if (p[i] == '\r') {
                i++;
                r->state = TRAILER_END_LF;
            } else if (p[i] == '\n') {
                i++;
                r->state = -1;
            } else {
                r->state = TRAILER_LINE;
            }
            break;
        case TRAILER_LINE:
            if (p[i++] == '\n')
                r->state = TRAILER_START;
            break;
        case TRAILER_END_LF:
            if (p[i++] != '\n')
                return LD_RESP_BAD_CHUNK;
            r->state = -1;
            break;
        default:
            break;
        }
        if (r->state == -1) {
            *done = true;
            return (long)i;
        }
    }
    if (r->state == -1)
        *done = true;
    return (long)i;
}

bool ld_resp_eof(ld_resp *r, bool *done)
{
    *done = false;
    if (r->state == BODY_EOF) {
        *done = true;
        return true;
    }
    return r->state == HEAD && r->head_len == 0;
}
