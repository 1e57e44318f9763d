/* md_outbuf storage: growth by doubling, compaction of written bytes before growing, and
 * release. See outbuf.h for the write protocol the I/O layer follows.
 */
#include "outbuf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

enum { OUTBUF_MIN = 4096 };

void md_outbuf_init(md_outbuf *b)
{
    b->data = NULL;
    b->head = 0;
    b->len = 0;
    b->cap = 0;
}

void md_outbuf_free(md_outbuf *b)
{
    free(b->data);
    md_outbuf_init(b);
}

int md_outbuf_grow(md_outbuf *b, size_t n)
{
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
    size_t cap = b->cap < OUTBUF_MIN ? OUTBUF_MIN : b->cap;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return -ENOMEM;
    b->data = p;
    b->cap = cap;
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
    }
}
