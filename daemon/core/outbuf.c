/* md_outbuf storage: growth by doubling, compaction of written bytes before growing, and
 * release. See outbuf.h for the write protocol the I/O layer follows.
 *
 * A connection frees its buffer whenever it goes idle between requests, so a keep-alive
 * connection would malloc and free one per request. Buffers of the first size go back to a
 * small cache of the thread's instead (libmagpie's mp_block_cache): no locking, and bounded,
 * so idle connections still hold nothing. It keeps a burst's worth: each HTTP/2 stream has a
 * buffer of its own, and one read begins up to a connection's concurrent streams at once. An
 * HTTP/2 connection's DATA bursts, and a TLS stream's records of a large write, take
 * MD_OUTBUF_BATCH bytes at once (md_outbuf_batch()), from a second such cache.
 */
#include "core/outbuf.h"

#include "magpie_core.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

enum { OUTBUF_MIN = 4096, OUTBUF_CACHE = 16, BATCH_CACHE = 4 };

static mp_block_cache cache = MP_BLOCK_CACHE_INIT(OUTBUF_MIN, OUTBUF_CACHE);
/* md_outbuf_batch()'s blocks: a worker writes one connection's burst at a time (over TLS, its
 * plaintext and its records), so a few. */
static mp_block_cache batch_cache = MP_BLOCK_CACHE_INIT(MD_OUTBUF_BATCH, BATCH_CACHE);

void md_outbuf_init(md_outbuf *b)
{
    b->data = NULL;
    b->lent = NULL;
    b->head = 0;
    b->len = 0;
    b->cap = 0;
}

void md_outbuf_free(md_outbuf *b)
{
    if (b->cap == OUTBUF_MIN)
        mp_block_cache_give(&cache, b->data);
    else if (b->cap == MD_OUTBUF_BATCH)
        mp_block_cache_give(&batch_cache, b->data);
    else
        free(b->data);
    md_outbuf_init(b);
}

/* The lent bytes still owed move into owned storage with room for n more after them. */
static int take_lent(md_outbuf *b, size_t n)
{
    const char *src = b->lent + b->head;
    size_t owed = b->len - b->head;
    b->lent = NULL;
    b->head = b->len = 0; /* the storage, if any, holds nothing owed while lending */
    if (n > SIZE_MAX / 2 - owed || (b->cap < owed + n && md_outbuf_grow(b, owed + n) != 0)) {
        b->lent = src;
        b->len = owed;
        return -ENOMEM;
    }
    memcpy(b->data, src, owed);
    b->len = owed;
    return 0;
}

int md_outbuf_grow(md_outbuf *b, size_t n)
{
    if (b->lent != NULL)
        return take_lent(b, n);
    /* Written bytes at the front are dead: slide the owed ones down before allocating. */
    if (b->head != 0) {
        memmove(b->data, b->data + b->head, b->len - b->head);
        b->len -= b->head;
        b->head = 0;
        if (b->cap - b->len >= n)
            return 0;
    }
    if (n > SIZE_MAX / 2 - b->len)
        return -ENOMEM;
    size_t need = b->len + n;
    if (b->data == NULL && need <= OUTBUF_MIN) {
        /* The first size comes from the thread's cache (or malloc, when it has none). */
        if ((b->data = mp_block_cache_take(&cache)) == NULL)
            return -ENOMEM;
        b->cap = OUTBUF_MIN;
        return 0;
    }
    return md_bytes_grow(&b->data, &b->cap, need, OUTBUF_MIN);
}

int md_bytes_grow(char **data, size_t *cap, size_t need, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap == 0 ? first : *cap <= SIZE_MAX / 2 ? *cap * 2 : SIZE_MAX;
    if (n < need)
        n = need;
    char *p = realloc(*data, n);
    if (p == NULL)
        return -ENOMEM;
    *data = p;
    *cap = n;
    return 0;
}

void md_outbuf_consume(md_outbuf *b, size_t n)
{
    if (n > b->len - b->head)
        n = b->len - b->head;
    b->head += n;
    if (b->head == b->len) {
        b->head = 0;
        b->len = 0;
        b->lent = NULL;
    }
}

int md_outbuf_lend(md_outbuf *b, const char *p, size_t n)
{
    if (b->len != b->head || n == 0)
        return md_outbuf_append(b, p, n);
    b->lent = p;
    b->head = 0;
    b->len = n;
    return 0;
}

int md_outbuf_own(md_outbuf *b)
{
    return b->lent != NULL ? take_lent(b, 0) : 0;
}

int md_outbuf_batch(md_outbuf *b)
{
    if (b->len != b->head || b->cap >= MD_OUTBUF_BATCH)
        return 0;
    char *p = mp_block_cache_take(&batch_cache);
    if (p == NULL)
        return -ENOMEM;
    md_outbuf_free(b);
    b->data = p;
    b->cap = MD_OUTBUF_BATCH;
    return 0;
}
