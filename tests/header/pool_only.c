/* A user of the fork-join pool alone: built like core_only.c, then linked against
 * libmagpie.a without libuv and run. The pool's objects need nothing from the reactor. */
#include "magpie_core.h"

#include <stdio.h>

static void sum_range(size_t lo, size_t hi, void *acc, void *arg)
{
    (void)arg; /* mp_pool_fold_fn's signature */
    for (size_t i = lo; i < hi; i++)
        *(uint64_t *)acc += i;
}

static void add(void *left, const void *right, void *arg)
{
    (void)arg; /* mp_pool_combine_fn's signature */
    *(uint64_t *)left += *(const uint64_t *)right;
}

struct job {
    uint64_t sum;
    int rc;
};

static void body(void *arg)
{
    struct job *j = arg;
    const uint64_t zero = 0;
    j->rc =
        mp_pool_parallel_reduce(0, 100000, 0, sizeof zero, &zero, sum_range, add, NULL, &j->sum);
}

int main(void)
{
    mp_pool_config cfg;
    mp_pool_config_init(&cfg);
    cfg.workers = 2;
    mp_pool *pool;
    if (mp_pool_new(&pool, &cfg) != 0)
        return 1;
    struct job j = {0, -1};
    int rc = mp_pool_call(pool, body, &j);
    mp_pool_free(pool);
    if (rc != 0 || j.rc != 0 || j.sum != 100000ull * 99999 / 2) {
        fprintf(stderr, "pool_only: rc %d/%d, sum %llu\n", rc, j.rc, (unsigned long long)j.sum);
        return 1;
    }
    return 0;
}
