/* Tests for runtime/src/pool/sort.c: the typed and generic parallel sorts against qsort(3),
 * on random data and on the shapes that break naive quicksorts. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "magpie.h"
#include "test_util.h"

static mp_pool *pool;

static void setup(void)
{
    mp_pool_config cfg;
    mp_pool_config_init(&cfg);
    cfg.workers = 3;
    cr_assert_eq(mp_pool_new(&pool, &cfg), 0);
}

static void teardown(void)
{
    mp_pool_free(pool);
}

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

enum shape { RANDOM, SORTED, REVERSED, ALL_EQUAL, FEW_VALUES, SAWTOOTH, ORGAN_PIPE, SHAPES };

static int64_t value(enum shape s, size_t i, size_t n)
{
    switch (s) {
    case RANDOM:
        return (int64_t)next();
    case SORTED:
        return (int64_t)i;
    case REVERSED:
        return (int64_t)(n - i);
    case ALL_EQUAL:
        return 42;
    case FEW_VALUES:
        return (int64_t)(next() % 4);
    case SAWTOOTH:
        return (int64_t)(i % 1000);
    default:
        return (int64_t)(i < n / 2 ? i : n - i);
    }
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}
static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

struct job {
    int type; /* 0 i32, 1 i64, 2 u32, 3 u64 */
    void *a;
    size_t n;
};

static void run_sort(void *v)
{
    struct job *j = v;
    switch (j->type) {
    case 0:
        mp_pool_sort_i32(j->a, j->n);
        break;
    case 1:
        mp_pool_sort_i64(j->a, j->n);
        break;
    case 2:
        mp_pool_sort_u32(j->a, j->n);
        break;
    default:
        mp_pool_sort_u64(j->a, j->n);
        break;
    }
}

static void check_typed(int type, size_t n, enum shape s)
{
    static const size_t sizes[] = {4, 8, 4, 8};
    static int (*const cmps[])(const void *, const void *) = {cmp_i32, cmp_i64, cmp_u32, cmp_u64};
    size_t es = sizes[type];
    char *a = malloc(n * es + 1), *b = malloc(n * es + 1);
    cr_assert(a && b);
    for (size_t i = 0; i < n; i++) {
        int64_t v = value(s, i, n);
        if (es == 4) {
            int32_t x = (int32_t)v;
            memcpy(a + i * es, &x, es);
        } else {
            memcpy(a + i * es, &v, es);
        }
    }
    memcpy(b, a, n * es);
    qsort(b, n, es, cmps[type]);
    struct job j = {type, a, n};
    cr_assert_eq(mp_pool_call(pool, run_sort, &j), 0);
    cr_assert(memcmp(a, b, n * es) == 0, "type %d n %zu shape %d differs from qsort", type, n, s);
    free(a);
    free(b);
}

Test(sort, typed_sorts_match_qsort, .init = setup, .fini = teardown, .timeout = 120)
{
    static const size_t ns[] = {0, 1, 2, 3, 24, 25, 100, 1999, 2001, 5000, 100000};
    for (int type = 0; type < 4; type++)
        for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
            for (enum shape s = 0; s < SHAPES; s++)
                check_typed(type, ns[k], s);
}

Test(sort, million_random_i32, .init = setup, .fini = teardown, .timeout = 120)
{
    check_typed(0, 1000000, RANDOM);
    check_typed(0, 1000000, FEW_VALUES);
}

/* Generic: 12-byte records ordered by key, compared through a callback. */

struct rec {
    int32_t key;
    uint32_t a, b;
};

static int cmp_rec(const void *x, const void *y)
{
    const struct rec *r = x, *s = y;
    if (r->key != s->key)
        return (r->key > s->key) - (r->key < s->key);
    return (r->a > s->a) - (r->a < s->a);
}

struct gjob {
    struct rec *r;
    size_t n;
};

static void run_generic(void *v)
{
    struct gjob *g = v;
    mp_pool_sort(g->r, g->n, sizeof(struct rec), cmp_rec);
}

Test(sort, generic_sort_matches_qsort, .init = setup, .fini = teardown, .timeout = 120)
{
    static const size_t ns[] = {0, 1, 17, 2000, 2001, 50000};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        for (enum shape s = 0; s < SHAPES; s++) {
            size_t n = ns[k];
            struct rec *a = malloc(n * sizeof(*a) + 1), *b = malloc(n * sizeof(*b) + 1);
            cr_assert(a && b);
            for (size_t i = 0; i < n; i++)
                a[i] = (struct rec){(int32_t)value(s, i, n), (uint32_t)i, 0};
            memcpy(b, a, n * sizeof(*a));
            qsort(b, n, sizeof(*b), cmp_rec);
            struct gjob g = {a, n};
            cr_assert_eq(mp_pool_call(pool, run_generic, &g), 0);
            cr_assert(memcmp(a, b, n * sizeof(*a)) == 0, "n %zu shape %d", n, s);
            free(a);
            free(b);
        }
    }
    mp_pool_sort(NULL, 0, 0, cmp_rec); /* nothing to sort, nothing touched */
}

/* Elements larger than the swap's 256-byte chunk are swapped a chunk at a time. */
struct big {
    int32_t key;
    unsigned char pad[600];
};

static int cmp_big(const void *x, const void *y)
{
    const struct big *a = x, *b = y;
    return (a->key > b->key) - (a->key < b->key);
}

struct bigjob {
    struct big *a;
    size_t n;
};

static void run_big(void *v)
{
    struct bigjob *j = v;
    mp_pool_sort(j->a, j->n, sizeof(struct big), cmp_big);
}

Test(sort, generic_sort_of_elements_larger_than_a_swap_chunk, .init = setup, .fini = teardown,
     .timeout = 60)
{
    enum { N = 3000 };
    struct big *a = malloc(N * sizeof *a);
    cr_assert(a);
    for (size_t i = 0; i < N; i++) {
        a[i].key = (int32_t)((i * 7919u) % N);
        memset(a[i].pad, (unsigned char)a[i].key, sizeof a[i].pad);
    }
    struct bigjob j = {a, N};
    cr_assert_eq(mp_pool_call(pool, run_big, &j), 0);
    for (size_t i = 0; i < N; i++) {
        cr_assert_eq(a[i].key, (int32_t)i);
        for (size_t k = 0; k < sizeof a[i].pad; k++)
            cr_assert_eq(a[i].pad[k], (unsigned char)i, "element %zu byte %zu", i, k);
    }
    free(a);
}

Test(sort, outside_a_pool_sorts_sequentially)
{
    int32_t a[] = {5, -1, 3, 3, 0, 9, -7};
    mp_pool_sort_i32(a, 7);
    int32_t want[] = {-7, -1, 0, 3, 3, 5, 9};
    cr_assert(memcmp(a, want, sizeof(a)) == 0);
}
