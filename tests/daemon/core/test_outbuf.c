/* Tests for daemon/core/outbuf.c: appends, partial writes, compaction and growth, lent bytes,
 * the batch room of HTTP/2 bursts. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/outbuf.h"

Test(outbuf, append_consume_reset, .timeout = 5)
{
    md_outbuf b;
    md_outbuf_init(&b);
    cr_assert_eq(md_outbuf_pending(&b), 0);
    cr_assert_eq(md_outbuf_append(&b, "hello ", 6), 0);
    cr_assert_eq(md_outbuf_append(&b, "world", 5), 0);
    cr_assert_eq(md_outbuf_pending(&b), 11);
    cr_assert_eq(memcmp(md_outbuf_pending_data(&b), "hello world", 11), 0);
    md_outbuf_consume(&b, 6);
    cr_assert_eq(md_outbuf_pending(&b), 5);
    cr_assert_eq(memcmp(md_outbuf_pending_data(&b), "world", 5), 0);
    md_outbuf_consume(&b, 100); /* more than pending: just empties it */
    cr_assert_eq(md_outbuf_pending(&b), 0);
    cr_assert_eq(b.head, 0);
    cr_assert_eq(b.len, 0);
    md_outbuf_free(&b);
    cr_assert_null(b.data);
}

/* Nothing appended to a buffer that has no storage yet is no failure (it once was -ENOMEM:
 * reserve found no room in a NULL buffer), and takes none. */
Test(outbuf, appending_nothing_to_an_empty_buffer_succeeds, .timeout = 5)
{
    md_outbuf b;
    md_outbuf_init(&b);
    cr_assert_eq(md_outbuf_append(&b, "", 0), 0);
    cr_assert_eq(md_outbuf_append(&b, NULL, 0), 0);
    cr_assert_null(b.data);
    cr_assert_eq(md_outbuf_pending(&b), 0);
    md_outbuf_free(&b);
}

/* Growth keeps what is still owed, in order, and slides it to the front first. */
Test(outbuf, grow_keeps_pending_bytes, .timeout = 5)
{
    md_outbuf b;
    md_outbuf_init(&b);
    char chunk[1000];
    size_t written = 0, appended = 0;
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < sizeof(chunk); i++)
            chunk[i] = (char)((appended + i) % 251);
        cr_assert_eq(md_outbuf_append(&b, chunk, sizeof(chunk)), 0);
        appended += sizeof(chunk);
        size_t n = (size_t)(round * 37 % 1500);
        if (n > md_outbuf_pending(&b))
            n = md_outbuf_pending(&b);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(md_outbuf_pending_data(&b)[i], (char)((written + i) % 251));
        md_outbuf_consume(&b, n);
        written += n;
    }
    cr_assert_eq(md_outbuf_pending(&b), appended - written);
    for (size_t i = 0; i < md_outbuf_pending(&b); i++)
        cr_assert_eq(md_outbuf_pending_data(&b)[i], (char)((written + i) % 251));
    md_outbuf_free(&b);
}

Test(outbuf, reserve_commit, .timeout = 5)
{
    md_outbuf b;
    md_outbuf_init(&b);
    char *w = md_outbuf_reserve(&b, 100000);
    cr_assert_not_null(w);
    cr_assert_geq(b.cap, 100000);
    memcpy(w, "abc", 3);
    md_outbuf_commit(&b, w + 3);
    cr_assert_eq(md_outbuf_pending(&b), 3);
    cr_assert_eq(md_outbuf_grow(&b, SIZE_MAX), -ENOMEM);
    cr_assert_eq(md_outbuf_pending(&b), 3, "a failed grow loses nothing");
    md_outbuf_free(&b);
}

/* A keep-alive connection frees its buffer between requests: the next request's reuses it
 * from the thread's cache instead of calling malloc, and an empty buffer holds nothing. */
Test(outbuf, freed_first_size_buffer_is_reused, .timeout = 5)
{
    md_outbuf b;
    md_outbuf_init(&b);
    cr_assert_eq(md_outbuf_append(&b, "abc", 3), 0);
    char *first = b.data;
    md_outbuf_free(&b);
    cr_assert_null(b.data);
    cr_assert_eq(b.cap, 0);
    cr_assert_eq(md_outbuf_append(&b, "de", 2), 0);
    cr_assert_eq(b.data, first);
    cr_assert_eq(md_outbuf_pending(&b), 2);
    cr_assert_eq(memcmp(md_outbuf_pending_data(&b), "de", 2), 0);
    md_outbuf_free(&b);
}

/* What b owes is exactly text. */
static void expect_owed(const md_outbuf *b, const char *text)
{
    cr_assert_eq(md_outbuf_pending(b), strlen(text));
    cr_assert_eq(memcmp(md_outbuf_pending_data(b), text, strlen(text)), 0, "owed: %.*s",
                 (int)md_outbuf_pending(b), md_outbuf_pending_data(b));
}

/* Lent bytes are owed in place: no copy, no storage, until something is appended or the owner
 * asks for its own copy; then the source may change without changing what is owed. */
Test(outbuf, lend_then_own, .timeout = 5)
{
    char src[] = "canned response";
    md_outbuf b;
    md_outbuf_init(&b);
    cr_assert_eq(md_outbuf_lend(&b, src, 15), 0);
    cr_assert_eq(md_outbuf_pending_data(&b), src);
    cr_assert_null(b.data);
    md_outbuf_consume(&b, 7);
    cr_assert_eq(md_outbuf_pending_data(&b), src + 7);
    cr_assert_eq(md_outbuf_own(&b), 0);
    cr_assert_null(b.lent);
    cr_assert_not_null(b.data);
    memset(src, 'x', 15);
    expect_owed(&b, "response");
    cr_assert_eq(md_outbuf_own(&b), 0); /* nothing lent: nothing to do */
    md_outbuf_consume(&b, 8);
    expect_owed(&b, "");
    md_outbuf_free(&b);
}

Test(outbuf, append_after_lend_copies_in_order, .timeout = 5)
{
    char src[] = "lent";
    md_outbuf b;
    md_outbuf_init(&b);
    cr_assert_eq(md_outbuf_lend(&b, src, 4), 0);
    cr_assert_eq(md_outbuf_append(&b, "+more", 5), 0);
    cr_assert_null(b.lent);
    src[0] = 'X';
    expect_owed(&b, "lent+more");
    /* Owing something already, a lend is a copy behind it. */
    cr_assert_eq(md_outbuf_lend(&b, "!", 1), 0);
    cr_assert_null(b.lent);
    expect_owed(&b, "lent+more!");
    md_outbuf_free(&b);
}

/* A buffer that keeps storage lends over it, and copies lent bytes into it, reserving and
 * committing as the response writers do; all written, it is empty and lends again. */
Test(outbuf, lend_over_storage_and_reserve, .timeout = 5)
{
    md_outbuf b;
    md_outbuf_init(&b);
    cr_assert_eq(md_outbuf_append(&b, "old", 3), 0);
    md_outbuf_consume(&b, 3);
    char *storage = b.data;
    cr_assert_eq(md_outbuf_lend(&b, "abc", 3), 0);
    cr_assert_eq(md_outbuf_pending_data(&b)[0], 'a');
    char *w = md_outbuf_reserve(&b, 2);
    cr_assert_not_null(w);
    cr_assert_eq(b.data, storage, "room enough: the same storage");
    memcpy(w, "de", 2);
    md_outbuf_commit(&b, w + 2);
    expect_owed(&b, "abcde");
    md_outbuf_consume(&b, 5);
    cr_assert_eq(md_outbuf_lend(&b, "z", 1), 0);
    cr_assert_not_null(b.lent);
    md_outbuf_consume(&b, 1);
    cr_assert_null(b.lent);
    expect_owed(&b, "");
    md_outbuf_free(&b);
    cr_assert_null(b.lent);
}

/* The plain buffers' growth: first, then at least double, never less than asked; contents kept. */
Test(outbuf, bytes_grow_first_then_doubling, .timeout = 5)
{
    char *d = NULL;
    size_t cap = 0;
    cr_assert_eq(md_bytes_grow(&d, &cap, 10, 64), 0);
    cr_assert_eq(cap, 64);
    memcpy(d, "kept", 4);
    cr_assert_eq(md_bytes_grow(&d, &cap, 64, 64), 0); /* fits: nothing changes */
    cr_assert_eq(cap, 64);
    cr_assert_eq(md_bytes_grow(&d, &cap, 65, 64), 0);
    cr_assert_eq(cap, 128);
    cr_assert_eq(md_bytes_grow(&d, &cap, 1000, 64), 0); /* more than double: what was asked */
    cr_assert_eq(cap, 1000);
    cr_assert_eq(memcmp(d, "kept", 4), 0);
    free(d);
    d = NULL;
    cap = 0;
    cr_assert_eq(md_bytes_grow(&d, &cap, 5000, 64), 0); /* a first need above first */
    cr_assert_eq(cap, 5000);
    free(d);
}

/* md_outbuf_batch(): an empty buffer gets MD_OUTBUF_BATCH bytes at once, and the same block
 * comes back from the thread's cache after a free; one that owes bytes is left alone. */
Test(outbuf, batch_room_at_once_and_from_the_cache, .timeout = 5)
{
    md_outbuf b;
    md_outbuf_init(&b);
    cr_assert_eq(md_outbuf_batch(&b), 0);
    cr_assert_eq(b.cap, MD_OUTBUF_BATCH);
    char *first = b.data;
    cr_assert_eq(md_outbuf_append(&b, "frames", 6), 0);
    cr_assert_eq(md_outbuf_batch(&b), 0); /* owes bytes: nothing moves */
    cr_assert_eq(b.data, first);
    char *w = md_outbuf_reserve(&b, MD_OUTBUF_BATCH - 6);
    cr_assert_eq(w, first + 6, "the room is there without a realloc");
    md_outbuf_commit(&b, w + MD_OUTBUF_BATCH - 6);
    md_outbuf_consume(&b, MD_OUTBUF_BATCH);
    md_outbuf_free(&b);
    cr_assert_null(b.data);
    cr_assert_eq(md_outbuf_batch(&b), 0);
    cr_assert_eq(b.data, first, "the block came back from the thread's cache");
    md_outbuf_free(&b);
    /* A buffer with a small block owing nothing trades it for a batch. */
    cr_assert_eq(md_outbuf_append(&b, "x", 1), 0);
    md_outbuf_consume(&b, 1);
    cr_assert_lt(b.cap, MD_OUTBUF_BATCH);
    cr_assert_eq(md_outbuf_batch(&b), 0);
    cr_assert_eq(b.cap, MD_OUTBUF_BATCH);
    md_outbuf_free(&b);
}
