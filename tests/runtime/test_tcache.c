/* Tests of runtime/src/tcache.c: the registry and exit hook of the per-thread caches. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "internal.h"
#include "test_util.h"

typedef struct counted {
    mp__tcache tc;
    long used; /* owner only, like a cache's counters */
} counted;

static long retired;                /* guarded by cls.mu */
static _Atomic int retires, drains; /* what the exit hook called, for the test */
static _Thread_local counted mine;
static _Thread_local counted other_kind; /* a second class on the same thread */

static void retire_locked(mp__tcache *tc)
{
    retired += mp_container_of(tc, counted, tc)->used;
    atomic_fetch_add(&retires, 1);
}

static void drain(mp__tcache *tc)
{
    mp_container_of(tc, counted, tc)->used = 0;
    atomic_fetch_add(&drains, 1);
}

static mp__tcache_class cls = MP__TCACHE_CLASS_INIT(retire_locked, drain);
static mp__tcache_class cls_no_stats = MP__TCACHE_CLASS_INIT(NULL, drain);

/* The sum a stats call would give: live threads' counts plus the exited threads'. */
static long total(void)
{
    pthread_mutex_lock(&cls.mu);
    long sum = retired;
    for (mp__tcache *tc = cls.head; tc; tc = tc->next)
        sum += mp_container_of(tc, counted, tc)->used;
    pthread_mutex_unlock(&cls.mu);
    return sum;
}

static void *use_both(void *arg)
{
    pthread_barrier_t *b = arg;
    if (!mine.tc.registered)
        mp__tcache_register(&cls, &mine.tc);
    if (!other_kind.tc.registered)
        mp__tcache_register(&cls_no_stats, &other_kind.tc);
    mine.used = 5;
    pthread_barrier_wait(b); /* registered: the main thread counts us */
    pthread_barrier_wait(b);
    return NULL;
}

Test(tcache, a_leaving_thread_is_retired_and_drained_and_counted_once, .timeout = 30)
{
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    pthread_t th;
    long before = total();
    pthread_create(&th, NULL, use_both, &b);
    pthread_barrier_wait(&b);
    cr_assert_eq(total(), before + 5, "a live thread's count is in the registry");
    pthread_barrier_wait(&b);
    pthread_join(th, NULL);
    cr_assert_eq(total(), before + 5, "and after its exit in the retired total, once");
    cr_assert_eq(atomic_load(&retires), 1, "only the class with statistics folds");
    cr_assert_eq(atomic_load(&drains), 2, "both of the thread's caches were drained");
    pthread_mutex_lock(&cls.mu);
    cr_assert_null(cls.head, "nothing is left registered");
    pthread_mutex_unlock(&cls.mu);
    pthread_barrier_destroy(&b);
}
