/* Tests of runtime/src/sync/watch.c: versions, merged sends, close, and a sender thread with
 * receiver tasks and threads that always end on the last value. */
#include <criterion/criterion.h>

#include "internal.h"
#include "hand.h"
#include "test_util.h"

Test(watch, versions_merge_and_close)
{
    mp_watch w;
    uint64_t v = 10;
    cr_assert_eq(mp_watch_init(&w, 0, &v), -EINVAL);
    cr_assert_eq(mp_watch_init(&w, sizeof v, &v), 0);
    mp_watch_rx rx;
    mp_watch_subscribe(&w, &rx);
    hand h;
    hand_init(&h);
    int err;
    cr_assert_eq(mp_watch_changed_poll(&w, &rx, &h.cx, &err), MP_PENDING);
    uint64_t out = 0;
    cr_assert_eq(mp_watch_borrow(&w, &rx, &out), 0);
    cr_assert_eq(out, 10);
    v = 11;
    cr_assert_eq(mp_watch_send(&w, &v), 0);
    cr_assert(woken(&h));
    v = 12;
    cr_assert_eq(mp_watch_send(&w, &v), 0);
    cr_assert_eq(mp_watch_changed_poll(&w, &rx, &h.cx, &err), MP_READY);
    cr_assert_eq(err, 0);
    cr_assert_eq(mp_watch_borrow(&w, &rx, &out), 2, "two sends, one look");
    cr_assert_eq(out, 12);
    cr_assert_eq(mp_watch_changed_poll(&w, &rx, &h.cx, &err), MP_PENDING);
    mp_watch_cancel_wait(&w, &rx);
    cr_assert_null(w.head);
    cr_assert_eq(mp_watch_changed_poll(&w, &rx, &h.cx, &err), MP_PENDING);
    mp_watch_close(&w);
    cr_assert(woken(&h));
    cr_assert_eq(mp_watch_changed_poll(&w, &rx, &h.cx, &err), MP_READY);
    cr_assert_eq(err, -EPIPE);
    cr_assert_eq(mp_watch_send(&w, &v), -EPIPE);
    cr_assert_eq(mp_watch_changed_blocking(&w, &rx), -EPIPE);
    cr_assert_eq(mp_watch_borrow(&w, &rx, &out), 2, "the last value stays readable");
    mp_watch_destroy(&w);
}

/* One thread sends 1..N (a pair of equal halves, to catch a torn copy); receiver tasks and
 * threads follow it until the close and must end having seen N. */
#define N 20000

typedef struct pair {
    uint64_t a, b;
} pair;

typedef struct follower {
    mp_task task;
    mp_watch *w;
    mp_watch_rx rx;
    uint64_t last;
    _Atomic int *bad;
} follower;

static void look(mp_watch *w, mp_watch_rx *rx, uint64_t *last, _Atomic int *bad)
{
    pair p;
    mp_watch_borrow(w, rx, &p);
    if (p.a != p.b || p.a < *last)
        atomic_store(bad, 1);
    *last = p.a;
}

static mp_poll follower_poll(mp_task *t, mp_context *cx)
{
    follower *f = mp_container_of(t, follower, task);
    for (;;) {
        int err;
        if (mp_watch_changed_poll(f->w, &f->rx, cx, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == -EPIPE)
            return MP_READY;
        look(f->w, &f->rx, &f->last, f->bad);
    }
}

static void follower_cancel(mp_task *t)
{
    follower *f = mp_container_of(t, follower, task);
    mp_watch_cancel_wait(f->w, &f->rx);
}

static const mp_task_vtable follower_vt = {.poll = follower_poll, .cancel = follower_cancel};

typedef struct thread_follower {
    mp_watch *w;
    uint64_t last;
    _Atomic int *bad;
} thread_follower;

static void *thread_follow(void *arg)
{
    thread_follower *f = arg;
    mp_watch_rx rx;
    mp_watch_subscribe(f->w, &rx);
    while (mp_watch_changed_blocking(f->w, &rx) == 0)
        look(f->w, &rx, &f->last, f->bad);
    look(f->w, &rx, &f->last, f->bad);
    return NULL;
}

Test(watch, receivers_end_on_the_last_value, .timeout = 60)
{
    mp_runtime *rt = test_runtime(3);
    mp_watch w;
    pair p = {0, 0};
    cr_assert_eq(mp_watch_init(&w, sizeof p, &p), 0);
    _Atomic int bad = 0;
    enum { F = 6, T = 2 };
    follower f[F];
    for (int i = 0; i < F; i++) {
        f[i] = (follower){.w = &w, .bad = &bad};
        mp_watch_subscribe(&w, &f[i].rx);
        mp_task_init(&f[i].task, &follower_vt);
        cr_assert_eq(mp_spawn_joinable(rt, &f[i].task), 0);
    }
    thread_follower tf[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        tf[i] = (thread_follower){.w = &w, .bad = &bad};
        pthread_create(&th[i], NULL, thread_follow, &tf[i]);
    }
    for (uint64_t i = 1; i <= N; i++) {
        p = (pair){i, i};
        cr_assert_eq(mp_watch_send(&w, &p), 0);
    }
    mp_watch_close(&w);
    for (int i = 0; i < F; i++) {
        cr_assert_eq(mp_join(&f[i].task), 0);
        cr_assert_eq(f[i].last, N, "task %d ended on %lu", i, (unsigned long)f[i].last);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(tf[i].last, N);
    }
    cr_assert_eq(atomic_load(&bad), 0, "a torn or older value was read");
    cr_assert_null(w.head);
    mp_watch_destroy(&w);
    mp_runtime_free(rt);
}
