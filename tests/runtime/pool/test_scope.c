/* Tests for runtime/src/pool/scope.c: spawns all finish before the scope returns, including
 * thousands of them and spawns of spawns; outside a pool everything runs inline. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "magpie.h"
#include "test_util.h"

static mp_pool *make_pool(size_t threads, size_t capacity)
{
    mp_pool_config cfg;
    mp_pool *p = NULL;
    mp_pool_config_init(&cfg);
    cfg.workers = threads;
    cfg.deque_capacity = capacity;
    cr_assert_eq(mp_pool_new(&p, &cfg), 0);
    return p;
}

enum { SPAWNS = 5000 };

struct flat {
    mp_pool_task *tasks;
    long *slots;
    _Atomic long sum;
};

struct flat_item {
    struct flat *f;
    long i;
};

static void flat_job(mp_pool_scope_ctx *scope, void *v)
{
    (void)scope;
    struct flat_item *it = v;
    it->f->slots[it->i] = it->i;
    atomic_fetch_add_explicit(&it->f->sum, it->i, memory_order_relaxed);
}

static struct flat_item *items;

static void flat_body(mp_pool_scope_ctx *scope, void *v)
{
    struct flat *f = v;
    for (long i = 0; i < SPAWNS; i++) {
        items[i] = (struct flat_item){f, i};
        mp_pool_spawn(scope, &f->tasks[i], flat_job, &items[i]);
    }
}

static void run_flat(void *v)
{
    mp_pool_scope(flat_body, v);
}

static void check_flat(mp_pool *p)
{
    struct flat f;
    f.tasks = calloc(SPAWNS, sizeof(*f.tasks));
    f.slots = calloc(SPAWNS, sizeof(*f.slots));
    items = calloc(SPAWNS, sizeof(*items));
    cr_assert(f.tasks && f.slots && items);
    for (long i = 0; i < SPAWNS; i++)
        f.slots[i] = -1;
    atomic_init(&f.sum, 0);
    if (p != NULL)
        cr_assert_eq(mp_pool_call(p, run_flat, &f), 0);
    else
        run_flat(&f);
    /* Everything spawned is done once the scope (and so the call) has returned. */
    for (long i = 0; i < SPAWNS; i++)
        cr_assert_eq(f.slots[i], i);
    cr_assert_eq(atomic_load_explicit(&f.sum, memory_order_relaxed),
                 (long)SPAWNS * (SPAWNS - 1) / 2);
    free(f.tasks);
    free(f.slots);
    free(items);
}

Test(scope, thousands_of_spawns_all_done_on_return, .timeout = 60)
{
    mp_pool *p = make_pool(4, 0);
    for (int rep = 0; rep < 5; rep++)
        check_flat(p);
    mp_pool_free(p);
}

Test(scope, thousands_of_spawns_tiny_deque, .timeout = 60)
{
    mp_pool *p = make_pool(2, 2);
    check_flat(p);
    mp_pool_free(p);
}

Test(scope, outside_a_pool_spawns_run_inline)
{
    check_flat(NULL);
}

/* Spawns that spawn: a binary tree of depth 13 (16383 jobs), storage indexed by node. */

enum { TREE_DEPTH = 13, TREE_NODES = (1 << (TREE_DEPTH + 1)) - 1 };

struct ntree {
    mp_pool_task *tasks;
    _Atomic int *ran;
};

static struct ntree nt;

static void node(mp_pool_scope_ctx *scope, void *v)
{
    size_t id = (size_t)(uintptr_t)v;
    atomic_fetch_add_explicit(&nt.ran[id], 1, memory_order_relaxed);
    for (size_t c = 2 * id + 1; c <= 2 * id + 2; c++) {
        if (c < TREE_NODES)
            mp_pool_spawn(scope, &nt.tasks[c], node, (void *)(uintptr_t)c);
    }
}

static void tree_body(mp_pool_scope_ctx *scope, void *v)
{
    (void)v;
    mp_pool_spawn(scope, &nt.tasks[0], node, (void *)(uintptr_t)0);
}

static void run_tree(void *v)
{
    mp_pool_scope(tree_body, v);
}

Test(scope, spawns_of_spawns_finish_before_return, .timeout = 60)
{
    mp_pool *p = make_pool(3, 0);
    nt.tasks = calloc(TREE_NODES, sizeof(*nt.tasks));
    nt.ran = calloc(TREE_NODES, sizeof(*nt.ran));
    cr_assert(nt.tasks && nt.ran);
    for (int rep = 0; rep < 3; rep++) {
        for (size_t i = 0; i < TREE_NODES; i++)
            atomic_store_explicit(&nt.ran[i], 0, memory_order_relaxed);
        cr_assert_eq(mp_pool_call(p, run_tree, NULL), 0);
        for (size_t i = 0; i < TREE_NODES; i++)
            cr_assert_eq(atomic_load_explicit(&nt.ran[i], memory_order_relaxed), 1, "node %zu", i);
    }
    free(nt.tasks);
    free((void *)nt.ran);
    mp_pool_free(p);
}

/* A scope with no spawns returns at once; scopes nest inside joins. */

static void empty_body(mp_pool_scope_ctx *scope, void *v)
{
    (void)scope;
    *(int *)v += 1;
}

static void nested(void *v)
{
    int *n = v;
    mp_pool_scope(empty_body, n);
}

static void join_of_scopes(void *v)
{
    int *n = v;
    mp_pool_join(nested, &n[0], nested, &n[1]);
}

Test(scope, empty_and_nested_in_join, .timeout = 30)
{
    mp_pool *p = make_pool(2, 0);
    int n[2] = {0, 0};
    for (int i = 0; i < 100; i++)
        cr_assert_eq(mp_pool_call(p, join_of_scopes, n), 0);
    cr_assert_eq(n[0], 100);
    cr_assert_eq(n[1], 100);
    mp_pool_free(p);
}
