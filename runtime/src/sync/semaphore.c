/* semaphore.c: permits taken n at a time in strict FIFO order, granted by the releaser. One
 * spinlock guards the count, the closed flag and the list of waiters (waitq.h says why
 * checking and queueing under it loses no wake-up).
 *
 * Permits are handed over, not raced for: mp_semaphore_release() takes the head waiter's n
 * permits out of the count, unlinks it and marks it DONE before it wakes it, so a newcomer's
 * try_acquire between that wake and the waiter's next poll cannot take them. That makes one
 * race matter, a waiter cancelled after the grant:
 *
 *   releaser                        waiter's task
 *   avail -= w->n, w DONE, wake
 *                                   cancel callback: unlink?  (w is no longer queued)
 *                                   -> the n permits belong to nobody: lost for ever
 *
 * and the fix is that mp_semaphore_cancel_wait() looks at the node's state under the lock:
 * WAITING is unlinked (and if it was the head, the waiters behind it may fit now), DONE gives
 * its permits back and grants them on. A large request at the head blocks the small ones
 * behind it (nobody passes the head), so it is never starved by them.
 */
#include "internal.h"
#include "sync/waitq.h"

int mp_semaphore_init(mp_semaphore *s, uint32_t permits)
{
    if (permits > MP_SEMAPHORE_MAX_PERMITS)
        return -EINVAL;
    atomic_init(&s->lock, 0);
    s->closed = false;
    s->avail = permits;
    s->head = s->tail = NULL;
    return 0;
}

/* Under the lock: grant the head waiters whose requests fit, in order. */
static void grant_locked(mp_semaphore *s)
{
    while (s->head && s->avail >= s->head->n) {
        s->avail -= s->head->n;
        mp__waitq_ready(&s->head, &s->tail, s->head, MP__W_DONE);
    }
}

static bool bad_n(uint32_t n)
{
    return n == 0 || n > MP_SEMAPHORE_MAX_PERMITS;
}

int mp_semaphore_try_acquire(mp_semaphore *s, uint32_t n)
{
    if (bad_n(n))
        return -EINVAL;
    int rc = -EAGAIN;
    mp__spin_lock(&s->lock);
    if (s->closed) {
        rc = -EPIPE;
    } else if (!s->head && s->avail >= n) {
        s->avail -= n;
        rc = 0;
    }
    mp__spin_unlock(&s->lock);
    return rc;
}

static mp_poll acquire_attempt(mp_semaphore *s, mp_waiter *w, uint32_t n, const mp_waker *waker,
                               int *err)
{
    if (bad_n(n)) {
        *err = -EINVAL;
        return MP_READY;
    }
    mp_waker old = {0};
    mp_poll r = MP_READY;
    mp__spin_lock(&s->lock);
    switch (w->state) {
    case MP__W_DONE:
        mp__waiter_finish(w, &old);
        *err = 0;
        break;
    case MP__W_CLOSED:
        mp__waiter_finish(w, &old);
        *err = -EPIPE;
        break;
    case MP__W_WAITING:
        mp__waiter_update(w, waker, &old);
        r = MP_PENDING;
        break;
    default:
        if (s->closed) {
            *err = -EPIPE;
        } else if (!s->head && s->avail >= n) {
            s->avail -= n;
            *err = 0;
        } else {
            w->n = n;
            mp__waitq_push(&s->head, &s->tail, w, waker);
            r = MP_PENDING;
        }
    }
    mp__spin_unlock(&s->lock);
    mp_waker_drop(&old);
    return r;
}

mp_poll mp_semaphore_acquire_poll(mp_semaphore *s, mp_waiter *w, uint32_t n, mp_context *cx,
                                  int *err)
{
    return acquire_attempt(s, w, n, mp_context_waker(cx), err);
}

void mp_semaphore_cancel_wait(mp_semaphore *s, mp_waiter *w)
{
    mp_waker old = {0};
    mp__spin_lock(&s->lock);
    if (w->state == MP__W_WAITING) {
        bool was_head = s->head == w;
        mp__waitq_unlink(&s->head, &s->tail, w);
        if (was_head)
            grant_locked(s); /* the ones behind it may fit where it did not */
    } else if (w->state == MP__W_DONE) {
        s->avail += w->n; /* granted but never taken: give them on */
        grant_locked(s);
    }
    mp__waiter_finish(w, &old);
    mp__spin_unlock(&s->lock);
    mp_waker_drop(&old);
}

int mp_semaphore_acquire_blocking(mp_semaphore *s, uint32_t n)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    mp_waiter w;
    mp_waiter_init(&w);
    int err;
    while (acquire_attempt(s, &w, n, &me, &err) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return err;
}

void mp_semaphore_release(mp_semaphore *s, uint32_t n)
{
    mp__spin_lock(&s->lock);
    s->avail += n;
    grant_locked(s);
    mp__spin_unlock(&s->lock);
}

void mp_semaphore_close(mp_semaphore *s)
{
    mp__spin_lock(&s->lock);
    s->closed = true;
    mp__waitq_ready_all(&s->head, &s->tail, MP__W_CLOSED);
    mp__spin_unlock(&s->lock);
}

uint64_t mp_semaphore_available(mp_semaphore *s)
{
    mp__spin_lock(&s->lock);
    uint64_t a = s->avail;
    mp__spin_unlock(&s->lock);
    return a;
}
