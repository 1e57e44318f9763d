/* Tests for runtime/src/pool/join.c: mp_pool_join against sequential results, a join tree of
 * 10^6 nodes that must spread across workers, and a 10^4-deep join chain on a grown worker
 * stack with a tiny initial deque. Every test ends with mp_pool_free (ASan checks leaks). */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "magpie.h"
#include "test_util.h"

static mp_pool *make_pool(size_t threads, size_t stack, size_t capacity)
{
    mp_pool_config cfg;
    mp_pool *p = NULL;
    mp_pool_config_init(&cfg);
    cfg.workers = threads;
    cfg.stack_size = stack;
    cfg.deque_capacity = capacity;
    cr_assert_eq(mp_pool_new(&p, &cfg), 0);
    return p;
}

/* fib with one join per node */

struct fib {
    int n;
    long r;
};

static void fib(void *v)
{
    struct fib *f = v;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    struct fib a = {f->n - 1, 0}, b = {f->n - 2, 0};
    mp_pool_join(fib, &a, fib, &b);
    f->r = a.r + b.r;
}

static long fib_seq(int n)
{
    return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2);
}

Test(join, fib_matches_sequential, .timeout = 60)
{
    for (size_t threads = 1; threads <= 4; threads++) {
        mp_pool *p = make_pool(threads, 0, 0);
        for (int n = 0; n <= 24; n += 3) {
            struct fib f = {n, -1};
            cr_assert_eq(mp_pool_call(p, fib, &f), 0);
            cr_assert_eq(f.r, fib_seq(n), "threads %zu fib(%d) = %ld", threads, n, f.r);
        }
        mp_pool_free(p);
    }
}

Test(join, outside_a_pool_runs_sequentially)
{
    struct fib f = {15, 0};
    fib(&f);
    cr_assert_eq(f.r, fib_seq(15));
    cr_assert_eq(mp_pool_worker_index(), -1);
}

/* A deep, unbalanced tree: each node splits its weight at a pseudo-random point, so one side
 * is often tiny and the other deep. */

struct ub {
    uint64_t seed;
    unsigned weight;
    uint64_t sum;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static void unbalanced(void *v)
{
    struct ub *u = v;
    if (u->weight <= 1) {
        u->sum = mix(u->seed);
        return;
    }
    unsigned cut = 1 + (unsigned)(mix(u->seed) % (u->weight - 1));
    struct ub a = {u->seed * 2 + 1, cut, 0}, b = {u->seed * 2 + 2, u->weight - cut, 0};
    mp_pool_join(unbalanced, &a, unbalanced, &b);
    u->sum = a.sum ^ (b.sum * 31);
}

Test(join, deep_unbalanced_tree_matches_sequential, .timeout = 60)
{
    uint64_t seed = test_seed_or(7);
    struct ub seq = {seed, 200000, 0};
    unbalanced(&seq); /* no worker here: runs sequentially */
    mp_pool *p = make_pool(3, 0, 2);
    for (int rep = 0; rep < 3; rep++) {
        struct ub par = {seed, 200000, 0};
        cr_assert_eq(mp_pool_call(p, unbalanced, &par), 0);
        cr_assert_eq(par.sum, seq.sum);
    }
    mp_pool_free(p);
}

/* A join tree of 10^6 leaves. The leftmost leaf does not return until some other worker has
 * run a leaf, so the test proves work spreads without asserting anything about timing: if
 * stealing or waking were broken it would hang and fail on the timeout. */

enum { TREE_LEAVES = 1000000 };

struct tree_shared {
    _Atomic long leaves;
    _Atomic int first_worker;
    _Atomic bool others_ran;
};

struct tree {
    struct tree_shared *sh;
    long lo, hi;
};

static void tree(void *v)
{
    struct tree *t = v;
    if (t->hi - t->lo == 1) {
        struct tree_shared *sh = t->sh;
        atomic_fetch_add_explicit(&sh->leaves, 1, memory_order_relaxed);
        /* Relaxed throughout: plain flags between leaves; the join's latches order the
         * results for the test body. */
        int me = mp_pool_worker_index();
        int first = atomic_load_explicit(&sh->first_worker, memory_order_relaxed);
        if (t->lo == 0) {
            atomic_store_explicit(&sh->first_worker, me, memory_order_relaxed);
            while (!atomic_load_explicit(&sh->others_ran, memory_order_relaxed))
                sched_yield();
        } else if (first >= 0 && me != first) {
            atomic_store_explicit(&sh->others_ran, true, memory_order_relaxed);
        }
        return;
    }
    long mid = t->lo + (t->hi - t->lo) / 2;
    struct tree a = {t->sh, t->lo, mid}, b = {t->sh, mid, t->hi};
    mp_pool_join(tree, &a, tree, &b);
}

Test(join, million_node_tree_spreads_across_workers, .timeout = 120)
{
    mp_pool *p = make_pool(4, 0, 0);
    struct tree_shared sh;
    atomic_init(&sh.leaves, 0);
    atomic_init(&sh.first_worker, -1);
    atomic_init(&sh.others_ran, false);
    struct tree root = {&sh, 0, TREE_LEAVES};
    cr_assert_eq(mp_pool_call(p, tree, &root), 0);
    cr_assert_eq(atomic_load_explicit(&sh.leaves, memory_order_relaxed), TREE_LEAVES);
    cr_assert(atomic_load_explicit(&sh.others_ran, memory_order_relaxed));
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_gt(st.stolen, 0);
    cr_assert_geq(st.workers_started, 2);
    mp_pool_free(p);
}

/* A chain 10^4 joins deep: join(chain(d - 1), leaf). Each level also keeps 1 KiB on the stack,
 * about 10 MiB in all, more than the default 8 MiB stack would take; the deque starts with 4
 * slots and must grow to hold the pending leaves. */

enum { CHAIN_DEPTH = 10000 };

struct chain {
    int depth;
    _Atomic long *leaves;
    long sum;
};

static void chain_leaf(void *v)
{
    struct chain *c = v;
    atomic_fetch_add_explicit(c->leaves, 1, memory_order_relaxed);
    c->sum = 1;
}

static void chain(void *v)
{
    struct chain *c = v;
    volatile char pad[1024];
    pad[0] = (char)c->depth;
    pad[sizeof(pad) - 1] = pad[0];
    if (c->depth == 0) {
        c->sum = 0;
        return;
    }
    struct chain down = {c->depth - 1, c->leaves, 0}, leaf = {0, c->leaves, 0};
    mp_pool_join(chain, &down, chain_leaf, &leaf);
    c->sum = down.sum + leaf.sum + (pad[sizeof(pad) - 1] == (char)c->depth ? 0 : 1000000);
}

Test(join, ten_thousand_deep_on_grown_stack, .timeout = 120)
{
    /* On the threads: the caller slot would run the chain on this thread's own stack. */
    mp_pool_config cfg;
    mp_pool *p = NULL;
    mp_pool_config_init(&cfg);
    cfg.workers = 2;
    cfg.stack_size = (size_t)64 << 20;
    cfg.deque_capacity = 4;
    cfg.calls_on_workers = true;
    cr_assert_eq(mp_pool_new(&p, &cfg), 0);
    _Atomic long leaves;
    atomic_init(&leaves, 0);
    for (int rep = 0; rep < 3; rep++) {
        atomic_store_explicit(&leaves, 0, memory_order_relaxed);
        struct chain c = {CHAIN_DEPTH, &leaves, 0};
        cr_assert_eq(mp_pool_call(p, chain, &c), 0);
        cr_assert_eq(c.sum, CHAIN_DEPTH);
        cr_assert_eq(atomic_load_explicit(&leaves, memory_order_relaxed), CHAIN_DEPTH);
    }
    mp_pool_free(p);
}
