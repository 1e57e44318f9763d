/* Tests of runtime/src/sync/rwlock.c: readers share, writers exclude, FIFO phases (a writer is
 * not starved by a stream of readers; the readers behind it go in together after it), cancel
 * of a granted writer, and tasks and threads checking the invariant. */
#include <criterion/criterion.h>

#include "internal.h"
#include "hand.h"
#include "test_util.h"

Test(rwlock, readers_share_writers_exclude)
{
    mp_rwlock l;
    mp_rwlock_init(&l);
    cr_assert(mp_rwlock_try_read(&l));
    cr_assert(mp_rwlock_try_read(&l));
    cr_assert_not(mp_rwlock_try_write(&l));
    mp_rwlock_read_unlock(&l);
    mp_rwlock_read_unlock(&l);
    cr_assert(mp_rwlock_try_write(&l));
    cr_assert_not(mp_rwlock_try_read(&l));
    cr_assert_not(mp_rwlock_try_write(&l));
    mp_rwlock_write_unlock(&l);
    mp_rwlock_read_blocking(&l);
    mp_rwlock_read_unlock(&l);
    mp_rwlock_write_blocking(&l);
    mp_rwlock_write_unlock(&l);
}

/* Readers hold the lock; a writer queues; readers that come later queue behind it instead of
 * joining the readers inside, and get in together once the writer is done. */
Test(rwlock, writer_not_starved_by_later_readers)
{
    mp_rwlock l;
    mp_rwlock_init(&l);
    cr_assert(mp_rwlock_try_read(&l));
    hand w, r[3];
    hand_init(&w);
    cr_assert_eq(mp_rwlock_write_poll(&l, &w.w, &w.cx), MP_PENDING);
    cr_assert_not(mp_rwlock_try_read(&l), "a later reader would pass the writer");
    for (int i = 0; i < 3; i++) {
        hand_init(&r[i]);
        cr_assert_eq(mp_rwlock_read_poll(&l, &r[i].w, &r[i].cx), MP_PENDING);
    }
    mp_rwlock_read_unlock(&l);
    cr_assert(woken(&w));
    for (int i = 0; i < 3; i++)
        cr_assert_not(woken(&r[i]));
    cr_assert_eq(mp_rwlock_write_poll(&l, &w.w, &w.cx), MP_READY);
    mp_rwlock_write_unlock(&l);
    for (int i = 0; i < 3; i++) {
        cr_assert(woken(&r[i]), "reader %d was left behind", i);
        cr_assert_eq(mp_rwlock_read_poll(&l, &r[i].w, &r[i].cx), MP_READY);
    }
    for (int i = 0; i < 3; i++)
        mp_rwlock_read_unlock(&l);
    cr_assert(mp_rwlock_try_write(&l));
}

/* A writer granted and then cancelled gives the whole lock back to the readers queued. */
Test(rwlock, cancel_of_granted_writer)
{
    mp_rwlock l;
    mp_rwlock_init(&l);
    cr_assert(mp_rwlock_try_read(&l));
    hand w, r;
    hand_init(&w);
    hand_init(&r);
    cr_assert_eq(mp_rwlock_write_poll(&l, &w.w, &w.cx), MP_PENDING);
    cr_assert_eq(mp_rwlock_read_poll(&l, &r.w, &r.cx), MP_PENDING);
    mp_rwlock_read_unlock(&l);
    cr_assert(woken(&w));
    mp_rwlock_cancel_wait(&l, &w.w);
    cr_assert(woken(&r));
    cr_assert_eq(mp_rwlock_read_poll(&l, &r.w, &r.cx), MP_READY);
    mp_rwlock_read_unlock(&l);
    cr_assert(mp_rwlock_try_write(&l), "the lock was lost");
}

/* Readers (tasks, looping) and writers (tasks and threads) on one lock: never a writer with
 * anyone else inside, and every writer finishes while readers keep coming. */
typedef struct shared {
    mp_rwlock l;
    _Atomic int readers, writers, bad, writers_done;
} shared;

typedef struct user {
    mp_task task;
    shared *sh;
    mp_waiter w;
    bool writer, holding;
    int left;
} user;

static mp_poll user_poll(mp_task *t, mp_context *cx)
{
    user *u = mp_container_of(t, user, task);
    for (;;) {
        if (u->holding) {
            u->holding = false;
            if (u->writer) {
                atomic_fetch_sub(&u->sh->writers, 1);
                mp_rwlock_write_unlock(&u->sh->l);
            } else {
                atomic_fetch_sub(&u->sh->readers, 1);
                mp_rwlock_read_unlock(&u->sh->l);
            }
            if (--u->left == 0) {
                if (u->writer)
                    atomic_fetch_add(&u->sh->writers_done, 1);
                return MP_READY;
            }
        }
        mp_poll p = u->writer ? mp_rwlock_write_poll(&u->sh->l, &u->w, cx)
                              : mp_rwlock_read_poll(&u->sh->l, &u->w, cx);
        if (p == MP_PENDING)
            return MP_PENDING;
        if (u->writer) {
            if (atomic_fetch_add(&u->sh->writers, 1) != 0 || atomic_load(&u->sh->readers) != 0)
                atomic_store(&u->sh->bad, 1);
        } else {
            atomic_fetch_add(&u->sh->readers, 1);
            if (atomic_load(&u->sh->writers) != 0)
                atomic_store(&u->sh->bad, 1);
        }
        u->holding = true;
        return mp_yield(cx);
    }
}

static const mp_task_vtable user_vt = {.poll = user_poll};

static void *thread_writer(void *arg)
{
    shared *sh = arg;
    for (int i = 0; i < 200; i++) {
        mp_rwlock_write_blocking(&sh->l);
        if (atomic_fetch_add(&sh->writers, 1) != 0 || atomic_load(&sh->readers) != 0)
            atomic_store(&sh->bad, 1);
        atomic_fetch_sub(&sh->writers, 1);
        mp_rwlock_write_unlock(&sh->l);
    }
    return NULL;
}

Test(rwlock, tasks_and_threads, .timeout = 120)
{
    mp_runtime *rt = test_runtime(4);
    shared sh = {0};
    mp_rwlock_init(&sh.l);
    enum { R = 24, W = 4 };
    user *u = calloc(R + W, sizeof *u);
    for (int i = 0; i < R + W; i++) {
        u[i] = (user){.sh = &sh, .writer = i >= R, .left = i >= R ? 100 : 400};
        mp_waiter_init(&u[i].w);
        mp_task_init(&u[i].task, &user_vt);
        cr_assert_eq(mp_spawn_joinable(rt, &u[i].task), 0);
    }
    pthread_t th;
    pthread_create(&th, NULL, thread_writer, &sh);
    for (int i = 0; i < R + W; i++)
        cr_assert_eq(mp_join(&u[i].task), 0);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&sh.bad), 0, "a writer shared the lock");
    cr_assert_eq(atomic_load(&sh.writers_done), W);
    cr_assert(mp_rwlock_try_write(&sh.l));
    mp_runtime_free(rt);
    free(u);
}
