/* md_outbuf: the bytes a connection owes its peer.
 *
 * The sans-I/O core (http/http1.c, through http/request.c) appends whole responses here; the I/O
 * layer writes the pending bytes with one write, reports how much the kernel took with
 * md_outbuf_consume(), and appends never move bytes that are still owed. One buffer per connection
 * is enough, and it is reused.
 *
 * A response that is already whole in memory elsewhere (a canned one, response.c) is lent
 * rather than copied when nothing else is owed: the buffer then points at it, and the first
 * append, or md_outbuf_own(), copies it in. Lent bytes may change once the caller's thread
 * moves on, so whoever stops before writing them all calls md_outbuf_own() first.
 */
#ifndef MD_OUTBUF_H
#define MD_OUTBUF_H

#include <errno.h>
#include <stddef.h>
#include <string.h>

typedef struct md_outbuf {
    char *data;       /* owned storage, cap bytes */
    const char *lent; /* when not NULL, the owed bytes are lent[head..len), not data's */
    size_t head;      /* first byte not yet written */
    size_t len;       /* end of the bytes appended */
    size_t cap;
} md_outbuf;

/* The one growth rule of the daemon's byte buffers: md_outbuf's storage, and the plain
 * (data, cap) buffers that gather bytes rather than owe them: the request's kept fields and
 * gathered body (http/request.c), a proxied response's kept fields (proxy_msg.c), the proxy's
 * framed body span (handlers/proxy.c). Those stay plain on purpose: an md_outbuf is 40 bytes, with
 * a write position and lending they never use, and two of them sit in every connection's
 * md_http_conn. Makes *data hold at least need bytes, keeping its contents: the first
 * capacity is first (or need, if more), after that at least double the last. 0 or -ENOMEM
 * (*data and *cap unchanged). */
int md_bytes_grow(char **data, size_t *cap, size_t need, size_t first);

void md_outbuf_init(md_outbuf *b);
/* Frees the storage; the buffer is empty and usable again afterwards. */
void md_outbuf_free(md_outbuf *b);
/* Makes room for n more bytes after len. 0 or -ENOMEM. */
int md_outbuf_grow(md_outbuf *b, size_t n);
/* The kernel took n bytes from the front. Resets to empty when everything is written. */
void md_outbuf_consume(md_outbuf *b, size_t n);
/* Owes p[0..n) without copying it when nothing else is owed (p must stay as it is until the
 * bytes are written or md_outbuf_own() is called); appends a copy otherwise. 0 or -ENOMEM. */
int md_outbuf_lend(md_outbuf *b, const char *p, size_t n);
/* Lent bytes still owed are copied into the buffer's own storage. 0 or -ENOMEM (nothing is
 * lost: they stay lent). */
int md_outbuf_own(md_outbuf *b);

/* The storage md_outbuf_batch() gives: a burst of frames written at once (HTTP/2's DATA, up to
 * conn_http.c's 64 KiB a write, and one frame more), or the TLS records of such a write
 * (tls_stream.c's ciphertext). */
#define MD_OUTBUF_BATCH (96u * 1024u)
/* Gives a buffer that owes nothing MD_OUTBUF_BATCH bytes of storage at once, from a small
 * cache of the thread's (md_outbuf_free() gives it back there), rather than growing it by
 * doubling: each step a realloc that copies, and past glibc's mmap threshold an mmap and a
 * munmap per burst. A buffer that owes bytes, or has the room, is left as it is. 0 or -ENOMEM. */
int md_outbuf_batch(md_outbuf *b);

static inline size_t md_outbuf_pending(const md_outbuf *b)
{
    return b->len - b->head;
}

static inline const char *md_outbuf_pending_data(const md_outbuf *b)
{
    return (b->lent != NULL ? b->lent : b->data) + b->head;
}

/* Room for n bytes at the end; the caller writes them and calls md_outbuf_commit(). Lent
 * bytes are copied in first (md_outbuf_grow()). */
static inline char *md_outbuf_reserve(md_outbuf *b, size_t n)
{
    if ((b->lent != NULL || b->cap - b->len < n) && md_outbuf_grow(b, n) != 0)
        return NULL;
    return b->data + b->len;
}

static inline void md_outbuf_commit(md_outbuf *b, const char *end)
{
    b->len = (size_t)(end - b->data);
}

static inline int md_outbuf_append(md_outbuf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0; /* an empty buffer has no storage, where reserve would find no room */
    char *dst = md_outbuf_reserve(b, n);
    if (dst == NULL)
        return -ENOMEM;
    memcpy(dst, p, n);
    b->len += n;
    return 0;
}

#endif
