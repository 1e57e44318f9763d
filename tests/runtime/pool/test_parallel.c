/* Tests for runtime/src/pool/parallel.c: parallel_for covers every index exactly once, a
 * parallel sum and a non-commutative reduce match the sequential answers, and without a grain
 * a loop splits as demand asks: little when nobody is idle, more when a worker is. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "magpie.h"
#include "pool/pool_internal.h"
#include "test_util.h"

static mp_pool *make_pool(size_t threads)
{
    mp_pool_config cfg;
    mp_pool *p = NULL;
    mp_pool_config_init(&cfg);
    cfg.workers = threads;
    cr_assert_eq(mp_pool_new(&p, &cfg), 0);
    return p;
}

enum { N_FOR = 1000000 };

struct cover {
    _Atomic unsigned char *hits;
    size_t begin, end, grain;
    int rc;
    _Atomic size_t max_piece;
};

static void mark(size_t lo, size_t hi, void *v)
{
    struct cover *c = v;
    size_t piece = hi - lo;
    /* Relaxed: counters read after the call returns, which orders them. */
    size_t seen = atomic_load_explicit(&c->max_piece, memory_order_relaxed);
    while (piece > seen &&
           !atomic_compare_exchange_weak_explicit(&c->max_piece, &seen, piece, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
    for (size_t i = lo; i < hi; i++)
        atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
}

static void run_cover(void *v)
{
    struct cover *c = v;
    c->rc = mp_pool_parallel_for(c->begin, c->end, c->grain, mark, c);
}

Test(parallel, for_covers_each_index_once, .timeout = 60)
{
    mp_pool *p = make_pool(3);
    struct cover c;
    c.hits = calloc(N_FOR, 1);
    cr_assert_not_null(c.hits);
    size_t grains[] = {0, 1, 7, 1000, N_FOR * 2};
    for (size_t g = 0; g < sizeof(grains) / sizeof(grains[0]); g++) {
        for (size_t i = 0; i < N_FOR; i++)
            atomic_store_explicit(&c.hits[i], 0, memory_order_relaxed);
        c.begin = 3;
        c.end = N_FOR;
        c.grain = grains[g];
        atomic_init(&c.max_piece, 0);
        cr_assert_eq(mp_pool_call(p, run_cover, &c), 0);
        cr_assert_eq(c.rc, 0);
        for (size_t i = 0; i < N_FOR; i++)
            cr_assert_eq(atomic_load_explicit(&c.hits[i], memory_order_relaxed), i >= 3,
                         "grain %zu index %zu", grains[g], i);
        if (grains[g] != 0)
            cr_assert_leq(atomic_load_explicit(&c.max_piece, memory_order_relaxed), grains[g]);
    }
    free((void *)c.hits);
    mp_pool_free(p);
}

Test(parallel, for_rejects_reversed_range_and_accepts_empty)
{
    cr_assert_eq(mp_pool_parallel_for(5, 4, 1, mark, NULL), -EINVAL);
    cr_assert_eq(mp_pool_parallel_for(5, 5, 1, mark, NULL), 0);
}

/* Sum of 10^7 integers. */

enum { N_SUM = 10000000 };

static int *sum_input;

static void fold_sum(size_t lo, size_t hi, void *acc, void *arg)
{
    (void)arg;
    long long s = *(long long *)acc;
    for (size_t i = lo; i < hi; i++)
        s += sum_input[i];
    *(long long *)acc = s;
}

static void combine_sum(void *left, const void *right, void *arg)
{
    (void)arg;
    *(long long *)left += *(const long long *)right;
}

struct sum_call {
    size_t grain;
    long long result;
    int rc;
};

static void run_sum(void *v)
{
    struct sum_call *s = v;
    long long zero = 0;
    s->rc = mp_pool_parallel_reduce(0, N_SUM, s->grain, sizeof(long long), &zero, fold_sum,
                                    combine_sum, NULL, &s->result);
}

Test(parallel, sum_of_ten_million_matches_sequential, .timeout = 60)
{
    sum_input = malloc(N_SUM * sizeof(int));
    cr_assert_not_null(sum_input);
    long long expect = 0;
    unsigned x = 1;
    for (size_t i = 0; i < N_SUM; i++) {
        x = x * 1664525u + 1013904223u;
        sum_input[i] = (int)(x >> 8) - (1 << 23);
        expect += sum_input[i];
    }
    mp_pool *p = make_pool(2);
    size_t grains[] = {0, 4096, 100000};
    for (size_t g = 0; g < 3; g++) {
        struct sum_call s = {grains[g], 0, -1};
        cr_assert_eq(mp_pool_call(p, run_sum, &s), 0);
        cr_assert_eq(s.rc, 0);
        cr_assert_eq(s.result, expect);
    }
    mp_pool_free(p);
    free(sum_input);
}

/* A non-commutative reduce: the accumulator is the covered interval, and combining checks
 * that the left one ends where the right one starts. */

struct span {
    size_t lo, hi;
    int ok; /* 1 while every combine was in order; identity has lo > hi */
};

static void fold_span(size_t lo, size_t hi, void *acc, void *arg)
{
    (void)arg;
    struct span *s = acc;
    *s = (struct span){lo, hi, 1};
}

static void combine_span(void *left, const void *right, void *arg)
{
    (void)arg;
    struct span *l = left;
    const struct span *r = right;
    l->ok = l->ok && r->ok && l->hi == r->lo;
    l->hi = r->hi;
}

struct span_call {
    size_t grain;
    struct span out;
};

static void run_span(void *v)
{
    struct span_call *c = v;
    struct span id = {1, 0, 1};
    cr_assert_eq(mp_pool_parallel_reduce(10, 100010, c->grain, sizeof(id), &id, fold_span,
                                         combine_span, NULL, &c->out),
                 0);
}

Test(parallel, reduce_combines_in_index_order, .timeout = 60)
{
    /* fold_span overwrites its accumulator: grain 0 runs a piece in chunks, and each chunk
     * must start from the identity and be combined in order. */
    mp_pool *p = make_pool(4);
    for (int rep = 0; rep < 10; rep++) {
        struct span_call c = {rep % 2 == 0 ? 3 : 0, {0, 0, 0}};
        cr_assert_eq(mp_pool_call(p, run_span, &c), 0);
        cr_assert_eq(c.out.ok, 1, "grain %zu", c.grain);
        cr_assert_eq(c.out.lo, 10);
        cr_assert_eq(c.out.hi, 100010);
    }
    mp_pool_free(p);
}

/* Without a grain, on a pool nobody else works in: log2(workers) halvings, then 16 chunks per
 * piece and no more splits. A pool of 1 splits once: 2 pieces, 32 body calls. */

struct calls {
    _Atomic unsigned n;
    _Atomic size_t max_piece;
};

static void count_call(size_t lo, size_t hi, void *v)
{
    struct calls *c = v;
    /* Relaxed: counters read after the call returns. */
    atomic_fetch_add_explicit(&c->n, 1, memory_order_relaxed);
    if (hi - lo > atomic_load_explicit(&c->max_piece, memory_order_relaxed))
        atomic_store_explicit(&c->max_piece, hi - lo, memory_order_relaxed);
}

static void run_count(void *v)
{
    cr_assert_eq(mp_pool_parallel_for(0, 64000, 0, count_call, v), 0);
}

Test(parallel, a_loop_nobody_steals_from_splits_little, .timeout = 30)
{
    mp_pool *p = make_pool(1);
    struct calls c;
    atomic_init(&c.n, 0);
    atomic_init(&c.max_piece, 0);
    cr_assert_eq(mp_pool_call(p, run_count, &c), 0);
    cr_assert_eq(atomic_load_explicit(&c.n, memory_order_relaxed), 32);
    cr_assert_eq(atomic_load_explicit(&c.max_piece, memory_order_relaxed), 64000 / 32);
    mp_pool_free(p);
}

/* A piece that may not split any more still gives an idle worker part of itself. The caller's
 * first piece [0, N/4) waits in its first chunk until the thread has finished everything else
 * and gone to sleep, with nothing left to steal; then it waits, in its next chunk, for the
 * thread to run an index below N/4. Only a split of the running piece can give it one. */

enum { N_LAZY = 1 << 16 };

struct lazy {
    mp_pool *pool;
    int caller; /* the caller slot's index */
    _Atomic bool thread_got_a_part;
    _Atomic bool timed_out;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool wait_for(struct lazy *l, bool (*cond)(struct lazy *))
{
    if (atomic_load_explicit(&l->timed_out, memory_order_relaxed))
        return false; /* failed already: let the loop finish */
    double deadline = now_s() + 10;
    while (now_s() < deadline) {
        if (cond(l))
            return true;
        sched_yield();
    }
    /* Relaxed: read after the call. */
    atomic_store_explicit(&l->timed_out, true, memory_order_relaxed);
    return false;
}

/* Asleep, not merely idle: an idle thread may be between taking our last job and counting
 * itself busy, and would then not be idle when our piece looks. Asleep, it stays idle until
 * our split wakes it. */
static bool thread_asleep_and_nothing_to_steal(struct lazy *l)
{
    return mp__sleep_sleeping(mp__pool_sleep_load(&l->pool->sleep)) > 0 &&
           mp__pool_deque_is_empty(&mp__pool_current->deque);
}

static bool thread_got_a_part(struct lazy *l)
{
    return atomic_load_explicit(&l->thread_got_a_part, memory_order_relaxed);
}

static void lazy_body(size_t lo, size_t hi, void *v)
{
    struct lazy *l = v;
    if (lo >= N_LAZY / 4)
        return; /* the rest of the loop: nothing to do */
    if (mp_pool_worker_index() != l->caller) {
        atomic_store_explicit(&l->thread_got_a_part, true, memory_order_relaxed);
        return;
    }
    (void)hi;
    if (lo == 0)
        wait_for(l, thread_asleep_and_nothing_to_steal);
    else
        wait_for(l, thread_got_a_part);
}

static void run_lazy(void *v)
{
    struct lazy *l = v;
    l->caller = mp_pool_worker_index();
    cr_assert_eq(mp_pool_parallel_for(0, N_LAZY, 0, lazy_body, l), 0);
}

Test(parallel, an_idle_worker_gets_part_of_a_running_piece, .timeout = 60)
{
    struct lazy l = {.pool = make_pool(2)};
    atomic_init(&l.thread_got_a_part, false);
    atomic_init(&l.timed_out, false);
    cr_assert_eq(mp_pool_call(l.pool, run_lazy, &l), 0);
    cr_assert_not(atomic_load_explicit(&l.timed_out, memory_order_relaxed),
                  "the idle thread never got part of the caller's running piece");
    cr_assert(atomic_load_explicit(&l.thread_got_a_part, memory_order_relaxed));
    mp_pool_free(l.pool);
}

Test(parallel, reduce_rejects_bad_arguments_and_handles_empty)
{
    long long zero = 7, out = 0;
    cr_assert_eq(mp_pool_parallel_reduce(2, 1, 0, 8, &zero, fold_sum, combine_sum, NULL, &out),
                 -EINVAL);
    cr_assert_eq(mp_pool_parallel_reduce(0, 1, 0, 0, &zero, fold_sum, combine_sum, NULL, &out),
                 -EINVAL);
    cr_assert_eq(mp_pool_parallel_reduce(0, 1, 0, MP_POOL_REDUCE_MAX_ACC + 1, &zero, fold_sum,
                                         combine_sum, NULL, &out),
                 -EINVAL);
    cr_assert_eq(mp_pool_parallel_reduce(4, 4, 0, 8, &zero, fold_sum, combine_sum, NULL, &out), 0);
    cr_assert_eq(out, 7, "an empty range yields the identity");
}
