/* rwlock.c: a readers-writer lock fair in FIFO phases, as Tokio's: a semaphore of
 * MP_RWLOCK_MAX_READERS permits (semaphore.c) where a reader takes one and a writer takes
 * them all. The semaphore grants strictly in queue order, so a writer waiting at the head
 * holds back every reader that queues after it (no writer starvation by a stream of readers),
 * and when it unlocks, the readers queued behind it are granted together until the next
 * writer in the queue. Cancellation is the semaphore's: a waiter cancelled after its grant
 * gives the permits back. */
#include "internal.h"

void mp_rwlock_init(mp_rwlock *l)
{
    (void)mp_semaphore_init(&l->sem, MP_RWLOCK_MAX_READERS);
}

bool mp_rwlock_try_read(mp_rwlock *l)
{
    return mp_semaphore_try_acquire(&l->sem, 1) == 0;
}

bool mp_rwlock_try_write(mp_rwlock *l)
{
    return mp_semaphore_try_acquire(&l->sem, MP_RWLOCK_MAX_READERS) == 0;
}

mp_poll mp_rwlock_read_poll(mp_rwlock *l, mp_waiter *w, mp_context *cx)
{
    int err; /* always 0: never closed */
    return mp_semaphore_acquire_poll(&l->sem, w, 1, cx, &err);
}

mp_poll mp_rwlock_write_poll(mp_rwlock *l, mp_waiter *w, mp_context *cx)
{
    int err;
    return mp_semaphore_acquire_poll(&l->sem, w, MP_RWLOCK_MAX_READERS, cx, &err);
}

void mp_rwlock_cancel_wait(mp_rwlock *l, mp_waiter *w)
{
    mp_semaphore_cancel_wait(&l->sem, w);
}

void mp_rwlock_read_blocking(mp_rwlock *l)
{
    (void)mp_semaphore_acquire_blocking(&l->sem, 1);
}

void mp_rwlock_write_blocking(mp_rwlock *l)
{
    (void)mp_semaphore_acquire_blocking(&l->sem, MP_RWLOCK_MAX_READERS);
}

void mp_rwlock_read_unlock(mp_rwlock *l)
{
    mp_semaphore_release(&l->sem, 1);
}

void mp_rwlock_write_unlock(mp_rwlock *l)
{
    mp_semaphore_release(&l->sem, MP_RWLOCK_MAX_READERS);
}
