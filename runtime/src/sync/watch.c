/* watch.c: the latest value and a version, and receivers told when the version moves. One
 * spinlock guards the value, the version, the closed flag and the list of waiting receivers
 * (checking and queueing under it: waitq.h). A send stores the value, counts the version up
 * and marks every waiting receiver DONE under the lock, so a receiver that compared its seen
 * version just before the send either saw the new version or is on the list the send empties:
 *
 *   receiver                          sender
 *   version == seen: queue (locked)
 *                                     store, version++, wake all queued (locked)
 *
 * cannot interleave any other way. Values are copied in and out under the lock: a receiver
 * never sees half of one send and half of another.
 */
#include "internal.h"
#include "sync/waitq.h"

int mp_watch_init(mp_watch *w, size_t size, const void *initial)
{
    if (size == 0)
        return -EINVAL;
    w->value = malloc(size);
    if (!w->value)
        return -ENOMEM;
    memcpy(w->value, initial, size);
    atomic_init(&w->lock, 0);
    w->closed = false;
    w->version = 0;
    w->size = size;
    w->head = w->tail = NULL;
    return 0;
}

void mp_watch_destroy(mp_watch *w)
{
    free(w->value);
    w->value = NULL;
}

int mp_watch_send(mp_watch *w, const void *value)
{
    mp__spin_lock(&w->lock);
    if (w->closed) {
        mp__spin_unlock(&w->lock);
        return -EPIPE;
    }
    memcpy(w->value, value, w->size);
    w->version++;
    mp__waitq_ready_all(&w->head, &w->tail, MP__W_DONE);
    mp__spin_unlock(&w->lock);
    return 0;
}

void mp_watch_close(mp_watch *w)
{
    mp__spin_lock(&w->lock);
    w->closed = true;
    mp__waitq_ready_all(&w->head, &w->tail, MP__W_CLOSED);
    mp__spin_unlock(&w->lock);
}

void mp_watch_subscribe(mp_watch *w, mp_watch_rx *rx)
{
    mp_waiter_init(&rx->w);
    mp__spin_lock(&w->lock);
    rx->seen = w->version;
    mp__spin_unlock(&w->lock);
}

uint64_t mp_watch_borrow(mp_watch *w, mp_watch_rx *rx, void *out)
{
    mp__spin_lock(&w->lock);
    memcpy(out, w->value, w->size);
    uint64_t v = rx->seen = w->version;
    mp__spin_unlock(&w->lock);
    return v;
}

/* A node the send or close marked is off the list already; one still WAITING is unlinked
 * when its wait ends. */
static void end_wait_locked(mp_watch *w, mp_watch_rx *rx, mp_waker *old)
{
    if (rx->w.state == MP__W_WAITING)
        mp__waitq_unlink(&w->head, &w->tail, &rx->w);
    mp__waiter_finish(&rx->w, old);
}

static mp_poll changed_attempt(mp_watch *w, mp_watch_rx *rx, const mp_waker *waker, int *err)
{
    mp_waker old = {0};
    mp_poll r = MP_READY;
    mp__spin_lock(&w->lock);
    if (w->version != rx->seen) {
        *err = 0;
        end_wait_locked(w, rx, &old);
    } else if (w->closed) {
        *err = -EPIPE;
        end_wait_locked(w, rx, &old);
    } else if (rx->w.state == MP__W_WAITING) {
        mp__waiter_update(&rx->w, waker, &old);
        r = MP_PENDING;
    } else {
        mp__waiter_finish(&rx->w, &old); /* a stale mark: idle, then queue afresh */
        mp__waitq_push(&w->head, &w->tail, &rx->w, waker);
        r = MP_PENDING;
    }
    mp__spin_unlock(&w->lock);
    mp_waker_drop(&old);
    return r;
}

mp_poll mp_watch_changed_poll(mp_watch *w, mp_watch_rx *rx, mp_context *cx, int *err)
{
    return changed_attempt(w, rx, mp_context_waker(cx), err);
}

void mp_watch_cancel_wait(mp_watch *w, mp_watch_rx *rx)
{
    mp_waker old = {0};
    mp__spin_lock(&w->lock);
    end_wait_locked(w, rx, &old);
    mp__spin_unlock(&w->lock);
    mp_waker_drop(&old);
}

int mp_watch_changed_blocking(mp_watch *w, mp_watch_rx *rx)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    int err;
    while (changed_attempt(w, rx, &me, &err) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return err;
}
