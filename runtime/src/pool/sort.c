/*
 * Parallel sorts, the worked example of mp_pool_join: quicksort partitions sequentially, then
 * joins the two sides, down to SORT_PAR_CUTOFF elements, below which it sorts sequentially
 * (Rayon's par_sort_unstable has the same shape and cutoff). The typed versions come from
 * sort_impl.h with the comparison inlined; mp_pool_sort is the qsort(3)-shaped generic one.
 */
#include <errno.h>
#include <string.h>

#include "pool/pool_internal.h"

#define SORT_PAR_CUTOFF 2000

/* 2 * floor(log2(n)) + 2: beyond this, partitioning is going badly; switch to heapsort. */
static unsigned depth_limit(size_t n)
{
    unsigned d = 0;
    while (n > 1) {
        n >>= 1;
        d++;
    }
    return 2 * d + 2;
}

#define SORT_T       int32_t
#define SORT_NAME(x) i32_##x
#include "pool/sort_impl.h"
#define SORT_T       int64_t
#define SORT_NAME(x) i64_##x
#include "pool/sort_impl.h"
#define SORT_T       uint32_t
#define SORT_NAME(x) u32_##x
#include "pool/sort_impl.h"
#define SORT_T       uint64_t
#define SORT_NAME(x) u64_##x
#include "pool/sort_impl.h"

void mp_pool_sort_i32(int32_t *a, size_t n)
{
    struct i32_task t = {a, n, depth_limit(n)};
    i32_par(&t);
}

void mp_pool_sort_i64(int64_t *a, size_t n)
{
    struct i64_task t = {a, n, depth_limit(n)};
    i64_par(&t);
}

void mp_pool_sort_u32(uint32_t *a, size_t n)
{
    struct u32_task t = {a, n, depth_limit(n)};
    u32_par(&t);
}

void mp_pool_sort_u64(uint64_t *a, size_t n)
{
    struct u64_task t = {a, n, depth_limit(n)};
    u64_par(&t);
}

/* The generic sort: the same algorithm on elements of `size` bytes compared by `cmp`. */

#define SWAP_CHUNK 256 /* large elements are swapped a chunk at a time */

struct gsort {
    char *a;
    size_t n;
    size_t size;
    int (*cmp)(const void *, const void *);
    unsigned depth;
};

static void swap_bytes(char *x, char *y, size_t size)
{
    if (x == y)
        return;
    char tmp[SWAP_CHUNK];
    for (size_t off = 0; off < size; off += SWAP_CHUNK) {
        size_t k = size - off < SWAP_CHUNK ? size - off : SWAP_CHUNK;
        memcpy(tmp, x + off, k);
        memcpy(x + off, y + off, k);
        memcpy(y + off, tmp, k);
    }
}

#define AT(s, i) ((s)->a + (i) * (s)->size)

static void g_insertion(const struct gsort *s)
{
    for (size_t i = 1; i < s->n; i++)
        for (size_t j = i; j > 0 && s->cmp(AT(s, j), AT(s, j - 1)) < 0; j--)
            swap_bytes(AT(s, j), AT(s, j - 1), s->size);
}

static void g_sift(const struct gsort *s, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && s->cmp(AT(s, child), AT(s, child + 1)) < 0)
            child++;
        if (s->cmp(AT(s, root), AT(s, child)) >= 0)
            return;
        swap_bytes(AT(s, root), AT(s, child), s->size);
        root = child;
    }
}

static void g_heapsort(const struct gsort *s)
{
    for (size_t i = s->n / 2; i-- > 0;)
        g_sift(s, i, s->n);
    for (size_t end = s->n; end-- > 1;) {
        swap_bytes(AT(s, 0), AT(s, end), s->size);
        g_sift(s, 0, end);
    }
}

static size_t g_median3(const struct gsort *s, size_t i, size_t j, size_t k)
{
    if (s->cmp(AT(s, i), AT(s, j)) < 0)
        return s->cmp(AT(s, j), AT(s, k)) < 0 ? j : (s->cmp(AT(s, i), AT(s, k)) < 0 ? k : i);
    return s->cmp(AT(s, i), AT(s, k)) < 0 ? i : (s->cmp(AT(s, j), AT(s, k)) < 0 ? k : j);
}

/* As in sort_impl.h; the pivot stays at a[0] during the passes and is compared in place. */
static size_t g_partition(const struct gsort *s, bool *equal_run)
{
    size_t n = s->n;
    swap_bytes(AT(s, 0), AT(s, g_median3(s, n / 4, n / 2, n - n / 4 - 1)), s->size);
    size_t i = 1;
    for (size_t j = 1; j < n; j++) {
        if (s->cmp(AT(s, j), AT(s, 0)) < 0) {
            swap_bytes(AT(s, i), AT(s, j), s->size);
            i++;
        }
    }
    *equal_run = false;
    if (i == 1) {
        for (size_t j = 1; j < n; j++) {
            if (s->cmp(AT(s, 0), AT(s, j)) >= 0) {
                swap_bytes(AT(s, i), AT(s, j), s->size);
                i++;
            }
        }
        *equal_run = true;
    }
    swap_bytes(AT(s, 0), AT(s, i - 1), s->size);
    return i - 1;
}

static void g_par(void *v)
{
    const struct gsort *s = v;
    if (s->n <= 16) {
        g_insertion(s);
        return;
    }
    if (s->depth == 0) {
        g_heapsort(s);
        return;
    }
    bool equal_run;
    size_t m = g_partition(s, &equal_run);
    struct gsort left = {s->a, m, s->size, s->cmp, s->depth - 1};
    struct gsort right = {AT(s, m + 1), s->n - m - 1, s->size, s->cmp, s->depth - 1};
    if (equal_run) {
        g_par(&right);
    } else if (s->n <= SORT_PAR_CUTOFF) {
        g_par(&left);
        g_par(&right);
    } else {
        mp_pool_join(g_par, &left, g_par, &right);
    }
}

void mp_pool_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (size == 0)
        return; /* nothing to order */
    struct gsort s = {base, n, size, cmp, depth_limit(n)};
    g_par(&s);
}
