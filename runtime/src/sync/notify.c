/* notify.c: wake one waiter or all of them. A notify_one with nobody waiting leaves a permit
 * that the next wait consumes at once, so a notification sent just before the wait is not
 * lost. Waiters are intrusive nodes in a FIFO list under a spinlock. A waiter that was picked
 * by notify_one but gives up (mp_notify_cancel) passes the notification on to the next
 * waiter, or back to the permit.
 */
#include "internal.h"

enum { W_IDLE, W_WAITING, W_NOTIFIED_ONE, W_NOTIFIED_ALL };

void mp_notify_init(mp_notify *n)
{
    atomic_init(&n->lock, 0);
    n->permit = false;
    n->head = n->tail = NULL;
}

void mp_notify_waiter_init(mp_notify_waiter *w)
{
    w->prev = w->next = NULL;
    w->waker = (mp_waker){0};
    w->state = W_IDLE;
}

static void unlink_locked(mp_notify *n, mp_notify_waiter *w)
{
    MP__LIST_UNLINK_TAIL(n->head, n->tail, w, prev, next);
    w->prev = w->next = NULL;
}

/* Under the lock: hand one notification to the first waiter, or store a permit. */
static mp_waker notify_one_locked(mp_notify *n)
{
    mp_notify_waiter *w = n->head;
    if (!w) {
        n->permit = true;
        return (mp_waker){0};
    }
    unlink_locked(n, w);
    w->state = W_NOTIFIED_ONE;
    mp_waker k = w->waker;
    w->waker = (mp_waker){0};
    return k;
}

void mp_notify_one(mp_notify *n)
{
    mp__spin_lock(&n->lock);
    mp_waker k = notify_one_locked(n);
    mp__spin_unlock(&n->lock);
    mp_waker_wake(&k);
}

void mp_notify_all(mp_notify *n)
{
    mp__spin_lock(&n->lock);
    /* Each node stays valid until its owner sees W_NOTIFIED_ALL under this lock, so it is
     * woken by reference here and its waker dropped by its owner. */
    for (mp_notify_waiter *w = n->head, *next; w; w = next) {
        next = w->next;
        w->prev = w->next = NULL;
        w->state = W_NOTIFIED_ALL;
        mp_waker_wake_by_ref(&w->waker);
    }
    n->head = n->tail = NULL;
    mp__spin_unlock(&n->lock);
}

static mp_poll wait_attempt(mp_notify *n, mp_notify_waiter *w, const mp_waker *waker)
{
    mp_waker old = {0};
    mp_poll r = MP_PENDING;
    mp__spin_lock(&n->lock);
    switch (w->state) {
    case W_NOTIFIED_ONE:
    case W_NOTIFIED_ALL:
        old = w->waker;
        w->waker = (mp_waker){0};
        w->state = W_IDLE;
        r = MP_READY;
        break;
    case W_IDLE:
        if (n->permit) {
            n->permit = false;
            r = MP_READY;
            break;
        }
        w->state = W_WAITING;
        MP__LIST_PUSH_BACK(n->head, n->tail, w, prev, next);
        w->waker = mp_waker_clone(waker);
        break;
    case W_WAITING:
        if (!mp_waker_will_wake(&w->waker, waker)) {
            old = w->waker;
            w->waker = mp_waker_clone(waker);
        }
        break;
    }
    mp__spin_unlock(&n->lock);
    mp_waker_drop(&old);
    return r;
}

mp_poll mp_notify_poll(mp_notify *n, mp_notify_waiter *w, mp_context *cx)
{
    return wait_attempt(n, w, mp_context_waker(cx));
}

void mp_notify_cancel(mp_notify *n, mp_notify_waiter *w)
{
    mp_waker old = {0}, pass = {0};
    mp__spin_lock(&n->lock);
    if (w->state == W_WAITING)
        unlink_locked(n, w);
    else if (w->state == W_NOTIFIED_ONE)
        pass = notify_one_locked(n);
    old = w->waker;
    w->waker = (mp_waker){0};
    w->state = W_IDLE;
    mp__spin_unlock(&n->lock);
    mp_waker_drop(&old);
    mp_waker_wake(&pass);
}

void mp_notify_wait_blocking(mp_notify *n)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    mp_notify_waiter w;
    mp_notify_waiter_init(&w);
    while (wait_attempt(n, &w, &me) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
}
