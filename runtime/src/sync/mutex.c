/* mutex.c: a lock for tasks, held across polls: a semaphore of one permit (semaphore.c),
 * which makes it FIFO-fair (unlock hands the lock to the head waiter, so a newcomer's
 * try_lock cannot barge past the queue) and cancellation-safe (a waiter cancelled after the
 * lock was handed to it passes it on, in mp_semaphore_cancel_wait()). The semaphore's
 * spinlock orders the holders: what one wrote before mp_mutex_unlock() is seen by the next
 * after its lock returned. */
#include "internal.h"

void mp_mutex_init(mp_mutex *m)
{
    (void)mp_semaphore_init(&m->sem, 1);
}

bool mp_mutex_try_lock(mp_mutex *m)
{
    return mp_semaphore_try_acquire(&m->sem, 1) == 0;
}

mp_poll mp_mutex_lock_poll(mp_mutex *m, mp_waiter *w, mp_context *cx)
{
    int err; /* always 0: a mutex is never closed */
    return mp_semaphore_acquire_poll(&m->sem, w, 1, cx, &err);
}

void mp_mutex_cancel_wait(mp_mutex *m, mp_waiter *w)
{
    mp_semaphore_cancel_wait(&m->sem, w);
}

void mp_mutex_lock_blocking(mp_mutex *m)
{
    (void)mp_semaphore_acquire_blocking(&m->sem, 1);
}

void mp_mutex_unlock(mp_mutex *m)
{
    mp_semaphore_release(&m->sem, 1);
}
