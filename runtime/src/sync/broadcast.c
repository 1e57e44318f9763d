/* broadcast.c: a ring of the last `cap` values sent, and receivers that each keep their own
 * position (a sequence number) in the stream. One spinlock guards the ring, the count of
 * values sent (tail), the closed flag and the list of waiting receivers; a receiver compares
 * its position with tail and queues itself under it, and a send appends and marks every
 * waiting receiver DONE under it (waitq.h), so no send passes a receiver unseen:
 *
 *   receiver                          sender
 *   pos == tail: queue (locked)
 *                                     copy in, tail++, wake all queued (locked)
 *
 * A sender never waits for receivers: value number s lives in slot s % cap until value
 * s + cap overwrites it. A receiver whose position fell more than cap behind tail lost
 * tail - cap - pos values: it is told how many (-EOVERFLOW) and moved to the oldest value
 * still kept, so every value sent is either received or counted as missed, never both.
 */
#include "internal.h"
#include "sync/waitq.h"

int mp_broadcast_init(mp_broadcast *b, uint32_t capacity, size_t size)
{
    if (capacity == 0 || size == 0)
        return -EINVAL;
    b->ring = calloc(capacity, size);
    if (!b->ring)
        return -ENOMEM;
    atomic_init(&b->lock, 0);
    b->closed = false;
    b->cap = capacity;
    b->size = size;
    b->tail = 0;
    b->head = b->wtail = NULL;
    return 0;
}

void mp_broadcast_destroy(mp_broadcast *b)
{
    free(b->ring);
    b->ring = NULL;
}

int mp_broadcast_send(mp_broadcast *b, const void *value)
{
    mp__spin_lock(&b->lock);
    if (b->closed) {
        mp__spin_unlock(&b->lock);
        return -EPIPE;
    }
    memcpy(b->ring + (b->tail % b->cap) * b->size, value, b->size);
    b->tail++;
    mp__waitq_ready_all(&b->head, &b->wtail, MP__W_DONE);
    mp__spin_unlock(&b->lock);
    return 0;
}

void mp_broadcast_close(mp_broadcast *b)
{
    mp__spin_lock(&b->lock);
    b->closed = true;
    mp__waitq_ready_all(&b->head, &b->wtail, MP__W_CLOSED);
    mp__spin_unlock(&b->lock);
}

void mp_broadcast_subscribe(mp_broadcast *b, mp_broadcast_rx *rx)
{
    mp_waiter_init(&rx->w);
    mp__spin_lock(&b->lock);
    rx->pos = b->tail;
    mp__spin_unlock(&b->lock);
}

/* Under the lock: 0, -EAGAIN, -EPIPE or -EOVERFLOW, as mp_broadcast_try_recv() says. */
static int recv_locked(mp_broadcast *b, mp_broadcast_rx *rx, void *out, uint64_t *missed)
{
    if (b->tail - rx->pos > b->cap) {
        uint64_t oldest = b->tail - b->cap;
        *missed = oldest - rx->pos;
        rx->pos = oldest;
        return -EOVERFLOW;
    }
    if (rx->pos == b->tail)
        return b->closed ? -EPIPE : -EAGAIN;
    memcpy(out, b->ring + (rx->pos % b->cap) * b->size, b->size);
    rx->pos++;
    return 0;
}

static void end_wait_locked(mp_broadcast *b, mp_broadcast_rx *rx, mp_waker *old)
{
    if (rx->w.state == MP__W_WAITING)
        mp__waitq_unlink(&b->head, &b->wtail, &rx->w);
    mp__waiter_finish(&rx->w, old);
}

int mp_broadcast_try_recv(mp_broadcast *b, mp_broadcast_rx *rx, void *out, uint64_t *missed)
{
    mp__spin_lock(&b->lock);
    int rc = recv_locked(b, rx, out, missed);
    mp__spin_unlock(&b->lock);
    return rc;
}

static mp_poll recv_attempt(mp_broadcast *b, mp_broadcast_rx *rx, const mp_waker *waker, void *out,
                            uint64_t *missed, int *err)
{
    mp_waker old = {0};
    mp_poll r = MP_READY;
    mp__spin_lock(&b->lock);
    int rc = recv_locked(b, rx, out, missed);
    if (rc != -EAGAIN) {
        *err = rc;
        end_wait_locked(b, rx, &old);
    } else if (rx->w.state == MP__W_WAITING) {
        mp__waiter_update(&rx->w, waker, &old);
        r = MP_PENDING;
    } else {
        mp__waiter_finish(&rx->w, &old); /* a stale mark: idle, then queue afresh */
        mp__waitq_push(&b->head, &b->wtail, &rx->w, waker);
        r = MP_PENDING;
    }
    mp__spin_unlock(&b->lock);
    mp_waker_drop(&old);
    return r;
}

mp_poll mp_broadcast_recv_poll(mp_broadcast *b, mp_broadcast_rx *rx, mp_context *cx, void *out,
                               uint64_t *missed, int *err)
{
    return recv_attempt(b, rx, mp_context_waker(cx), out, missed, err);
}

void mp_broadcast_cancel_wait(mp_broadcast *b, mp_broadcast_rx *rx)
{
    mp_waker old = {0};
    mp__spin_lock(&b->lock);
    end_wait_locked(b, rx, &old);
    mp__spin_unlock(&b->lock);
    mp_waker_drop(&old);
}

int mp_broadcast_recv_blocking(mp_broadcast *b, mp_broadcast_rx *rx, void *out, uint64_t *missed)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    int err;
    while (recv_attempt(b, rx, &me, out, missed, &err) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return err;
}
