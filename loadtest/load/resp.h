/* resp.h: framing HTTP/1.1 responses as they arrive, in pieces of any size.
 *
 * The parser finds where each response ends and what its status is; it keeps no body. The
 * head (status line and header fields) is read in place when a piece holds it whole, and
 * copied into the parser only when it is split across pieces. Framing follows RFC 9112 §6.3:
 * no body for 1xx, 204, 304 and a response to HEAD; else chunked when Transfer-Encoding ends
 * in chunked; else Content-Length; else the body runs until the server closes. 1xx responses
 * are interim: they are skipped and the response after them is the one reported.
 */
#ifndef LOADTEST_LOAD_RESP_H
#define LOADTEST_LOAD_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LD_RESP_HEAD_MAX 16384

enum ld_resp_err {
    LD_RESP_OK = 0,
    LD_RESP_BAD_STATUS = -1, /* not "HTTP/1.x NNN ..." */
    LD_RESP_BAD_HEADER = -2, /* a field line without a colon, or a head over LD_RESP_HEAD_MAX */
    LD_RESP_BAD_LENGTH = -3, /* Content-Length not a number, or two that differ */
    LD_RESP_BAD_CHUNK = -4,  /* a chunk size line or a chunk's CRLF that is wrong */
};

typedef struct ld_resp {
    int state;
    bool head_request;  /* the response answers a HEAD: no body */
    bool close;         /* Connection: close, or HTTP/1.0 without keep-alive */
    bool until_eof;     /* the body runs until the server closes */
    int status;         /* of the response being read, then of the one completed */
    uint64_t remaining; /* body or chunk bytes still to come */
    uint64_t chunk_size;
    unsigned chunk_digits;
    size_t head_len; /* bytes in head[] of a head split across pieces */
    char head[LD_RESP_HEAD_MAX];
} ld_resp;

/* Ready for a response (to a HEAD request if head_request). */
void ld_resp_start(ld_resp *r, bool head_request);
/* Feed n bytes. Returns how many were used (<= n), and sets *done when a response ended at
 * that point (r->status, r->close tell about it; call ld_resp_start before feeding the rest);
 * or a negative ld_resp_err, after which the connection's framing is lost. */
long ld_resp_feed(ld_resp *r, const char *p, size_t n, bool *done);
/* The server closed: true when that ends the response being read (a body until close, or
 * nothing begun), false when it cut a response short. */
bool ld_resp_eof(ld_resp *r, bool *done);

#endif
