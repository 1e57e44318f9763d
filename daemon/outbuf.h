/* md_outbuf: the bytes a connection owes its peer.
 *
 * The sans-I/O core (http.c) appends whole responses here; the I/O
 * layer writes data[head..len) with one write/writev, reports how much the kernel took with
 * md_outbuf_consume(), and appends never move bytes that are still owed. One buffer per
 * connection is enough, and it is reused: steady keep-alive traffic allocates nothing.
 */
#ifndef MD_OUTBUF_H
#define MD_OUTBUF_H

#include <errno.h>
#include <stddef.h>
#include <string.h>

typedef struct md_outbuf {
    char *data;
    size_t head; /* first byte not yet written */
    size_t len;  /* end of the bytes appended */
    size_t cap;
} md_outbuf;

void md_outbuf_init(md_outbuf *b);
/* Frees the storage; the buffer is empty and usable again afterwards. */
void md_outbuf_free(md_outbuf *b);
/* Makes room for n more bytes after len. 0 or -ENOMEM. */
int md_outbuf_grow(md_outbuf *b, size_t n);
/* The kernel took n bytes from the front. Resets to empty when everything is written. */
void md_outbuf_consume(md_outbuf *b, size_t n);

static inline size_t md_outbuf_pending(const md_outbuf *b)
{
    return b->len - b->head;
}

static inline const char *md_outbuf_pending_data(const md_outbuf *b)
{
    return b->data + b->head;
}

/* Room for n bytes at the end; the caller writes them and calls md_outbuf_commit(). */
static inline char *md_outbuf_reserve(md_outbuf *b, size_t n)
{
    if (b->cap - b->len < n && md_outbuf_grow(b, n) != 0)
        return NULL;
    return b->data + b->len;
}

static inline void md_outbuf_commit(md_outbuf *b, const char *end)
{
    b->len = (size_t)(end - b->data);
}

static inline int md_outbuf_append(md_outbuf *b, const void *p, size_t n)
{
    char *dst = md_outbuf_reserve(b, n);
    if (dst == NULL)
        return -ENOMEM;
    if (n != 0)
        memcpy(dst, p, n);
    b->len += n;
    return 0;
}

#endif
