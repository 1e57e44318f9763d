/* HTTP/1.1 response heads: the status table, the per-second Date block, the head writer, and
 * the text of a relayed response (its head, chunks, last chunk).
 *
 * Every response magpied sends is "HTTP/1.1 <status>", Date, Server, then Connection when it
 * differs from the request version's default, Allow for 405, Content-Type and Content-Length.
 * Everything constant is a precomputed string; per response only the length is formatted.
 */
#ifndef MD_RESPONSE_H
#define MD_RESPONSE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/outbuf.h"

/* The longest head md_http_put_head() writes: the longest status line, the Date block,
 * Connection, Allow, the longest Content-Type and a 20-digit Content-Length, with room. */
#define MD_HTTP_HEAD_MAX 384

typedef struct md_http_status {
    uint16_t code;
    uint8_t line_len, body_len;
    const char *line; /* "HTTP/1.1 404 Not Found\r\n" */
    const char *body; /* "Not Found\n", the body of an error response */
} md_http_status;

/* The entry for code; 500's for a code the table lacks. */
const md_http_status *md_http_status_of(unsigned code);

/* Makes the calling thread's Date block current (clock NULL: time()). Cheap when the second
 * has not changed; call once per batch of responses. */
void md_http_date_refresh(time_t (*clock)(void));

/* The Date block's IMF-fixdate alone (*len bytes, not NUL-terminated): HTTP/2's date field. */
const char *md_http_date_value(size_t *len);
/* The second the Date block says: the responses' origination date. */
time_t md_http_date_now(void);

/* The length of a body whose length is not known when its head goes (one compressed on the
 * fly): HTTP/1.1 says Transfer-Encoding: chunked, HTTP/2 no content-length. */
#define MD_HTTP_LENGTH_CODED UINT64_MAX

/* Writes a head at w (MD_HTTP_HEAD_MAX bytes of room) and returns its end. close: say
 * "Connection: close"; otherwise http10 says "Connection: keep-alive". allow may be NULL. */
char *md_http_put_head(char *w, const md_http_status *st, bool close, bool http10,
                       const char *allow, const char *ctype, uint64_t length);

/* The same, with more header lines (each ending in CRLF; fields_len bytes) after Allow: room
 * for MD_HTTP_HEAD_MAX + fields_len bytes at w. */
char *md_http_put_head_fields(char *w, const md_http_status *st, bool close, bool http10,
                              const char *allow, const char *fields, size_t fields_len,
                              const char *ctype, uint64_t length);

/* A relayed response's head (a proxied one: the upstream's status, reason and end-to-end
 * fields, "Name: value" CRLF lines) as HTTP/1.1 text, for request.c's relay calls. How its body
 * is framed: */
typedef enum md_http1_framing {
    MD_HTTP1_NO_BODY, /* HEAD, 204, 304: the fields say what they say, nothing is added */
    MD_HTTP1_LENGTH,  /* Content-Length: length */
    MD_HTTP1_CHUNKED, /* Transfer-Encoding: chunked (md_http1_put_chunk, md_http1_put_last) */
    MD_HTTP1_CLOSE,   /* the body ends with the connection (an HTTP/1.0 client's) */
    MD_HTTP1_UPGRADE, /* a 101: Connection: upgrade, and the tunnel's bytes follow */
} md_http1_framing;

/* The status line ("HTTP/1.1 <status> <reason>"; reason may be empty), the fields, the
 * framing's field, Connection (close when close or the framing is MD_HTTP1_CLOSE; upgrade for
 * a 101; keep-alive to an HTTP/1.0 client that keeps it) and the empty line. 0 or -ENOMEM. */
int md_http1_put_relayed(md_outbuf *out, unsigned status, const char *reason, size_t reason_len,
                         const char *fields, size_t fields_len, md_http1_framing framing,
                         uint64_t length, bool close, bool http10);
/* An interim response (1xx but 101): the status line, the fields, the empty line. */
int md_http1_put_interim(md_outbuf *out, unsigned status, const char *reason, size_t reason_len,
                         const char *fields, size_t fields_len);
/* One chunk of len bytes (none for 0); the last chunk with its trailer fields (may be none). 0 or
 * -ENOMEM. */
int md_http1_put_chunk(md_outbuf *out, const char *data, size_t len);
int md_http1_put_last(md_outbuf *out, const char *trailers, size_t trailers_len);

/* Slots for md_http_canned(): one per static body a caller serves often; and the most bytes
 * of a canned response (head, fields and body). */
#define MD_HTTP_CANNED_SLOTS 8
#define MD_HTTP_CANNED_MAX   1024

/* The whole keep-alive HTTP/1.1 200 response with these fields (flen bytes of "Name: value"
 * CRLF lines, or none: a route's added header fields) and this body, from a per-thread cache
 * that is rebuilt when the Date second changes: the hot GET is one memcpy. (slot, tag)
 * identifies the (ctype, fields, body) triple and must always be used with the same one: a
 * route's index and its table's id, so that a reload's new table never gets the old one's
 * bytes. *len gets the length; NULL when the slot is out of range or the response does not
 * fit. */
const char *md_http_canned(unsigned slot, uint64_t tag, const char *ctype, const char *fields,
                           size_t flen, const char *body, size_t body_len, size_t *len);

#endif
