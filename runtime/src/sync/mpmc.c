/* mpmc.c: a bounded multi-producer, multi-consumer channel of pointers. One spinlock guards
 * the ring and two FIFO lists of waiting nodes, senders (waiting for room) and receivers
 * (waiting for a value); checking and queueing happen under it (waitq.h).
 *
 * Each side is served in order: a node that is not queued may only go ahead past an empty
 * list of its side, and a queued one only from the head. A change that lets the head go
 * ahead wakes it and leaves it queued; it unlinks itself when it polls.
 * The race that matters is a woken head that gives up instead:
 *
 *   sender                          receiver R1 (head)        receiver R2 (behind R1)
 *   push v, wake R1
 *                                   cancelled: unlink
 *                                   -> v sits in the ring, R2 sleeps: lost wake-up
 *
 * so whoever leaves the head of a list (by taking its turn or by giving up) wakes the next
 * node of that list when the condition still holds for it: room for the next sender, a value
 * (or the close) for the next receiver. The close itself has the same shape:
 *
 *   close: wake R1, R2 (by ref)       R1 (head): takes the last value
 *                                     R2 polls: value left, not its turn: waits again
 *   -> R2 waits for ever on a closed, drained channel
 *
 * which the same rule fixes: R1 leaving the head of a closed channel wakes R2. Close wakes every
 * node by reference; each unlinks itself when it sees the close.
 *
 * Every such wake is by reference, under the lock, because the node stays queued:
 *
 *   receiver A                        receiver B                 sender thread S (head)
 *   take, clone S's waker, unlock
 *                                     take, clone S's waker
 *                                                                woken: send, return
 *   wake the clone                    -> S's frame (its waker's word) is gone
 *
 * Under the lock S cannot be between "woken" and "return": it must take the lock to unlink.
 */
#include "internal.h"
#include "sync/waitq.h"

int mp_mpmc_init(mp_mpmc *q, uint32_t capacity)
{
    if (capacity == 0)
        return -EINVAL;
    q->slots = calloc(capacity, sizeof *q->slots);
    if (!q->slots)
        return -ENOMEM;
    atomic_init(&q->lock, 0);
    q->cap = capacity;
    q->head = q->len = 0;
    q->closed = false;
    q->tx_head = q->tx_tail = q->rx_head = q->rx_tail = NULL;
    return 0;
}

void mp_mpmc_destroy(mp_mpmc *q)
{
    free(q->slots);
    q->slots = NULL;
}

/* Under the lock: wake the head sender if it fits, and the head receiver if a value waits or
 * the channel is closed (once closed, each receiver that takes the last value, or learns
 * there is none, wakes the next, which must see the end for itself). By reference and under
 * the lock: the node stays queued, so its owner may poll, finish and return at any moment
 * after the lock is let go, and a blocked thread's waker points into its stack frame. A clone
 * woken after the unlock could land in a frame that is gone. */
static void wake_next_sender_locked(mp_mpmc *q)
{
    if (q->tx_head && q->len < q->cap && !q->closed)
        mp_waker_wake_by_ref(&q->tx_head->waker);
}

static void wake_next_receiver_locked(mp_mpmc *q)
{
    if (q->rx_head && (q->len > 0 || q->closed))
        mp_waker_wake_by_ref(&q->rx_head->waker);
}

/* May a node of this side go ahead now? */
static bool my_turn(mp_waiter *w, mp_waiter *head)
{
    return w ? (w->state == MP__W_WAITING ? head == w : head == NULL) : head == NULL;
}

/* One attempt at sending. w NULL: try_send (never queues). */
static mp_poll send_attempt(mp_mpmc *q, mp_waiter *w, void *value, const mp_waker *waker, int *err)
{
    mp_waker old = {0};
    mp_poll r = MP_READY;
    mp__spin_lock(&q->lock);
    bool queued = w && w->state == MP__W_WAITING;
    if (q->closed || (q->len < q->cap && my_turn(w, q->tx_head))) {
        if (queued)
            mp__waitq_unlink(&q->tx_head, &q->tx_tail, w);
        if (w)
            mp__waiter_finish(w, &old);
        if (q->closed) {
            *err = -EPIPE;
        } else {
            q->slots[(q->head + q->len) % q->cap] = value;
            q->len++;
            *err = 0;
            wake_next_receiver_locked(q);
        }
        wake_next_sender_locked(q);
    } else if (!w) {
        *err = -EAGAIN;
    } else {
        if (queued)
            mp__waiter_update(w, waker, &old);
        else
            mp__waitq_push(&q->tx_head, &q->tx_tail, w, waker);
        r = MP_PENDING;
    }
    mp__spin_unlock(&q->lock);
    mp_waker_drop(&old);
    return r;
}

int mp_mpmc_try_send(mp_mpmc *q, void *value)
{
    int err;
    (void)send_attempt(q, NULL, value, NULL, &err);
    return err;
}

mp_poll mp_mpmc_send_poll(mp_mpmc *q, mp_waiter *w, void *value, mp_context *cx, int *err)
{
    return send_attempt(q, w, value, mp_context_waker(cx), err);
}

int mp_mpmc_send_blocking(mp_mpmc *q, void *value)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    mp_waiter w;
    mp_waiter_init(&w);
    int err;
    while (send_attempt(q, &w, value, &me, &err) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return err;
}

void mp_mpmc_cancel_send(mp_mpmc *q, mp_waiter *w)
{
    mp_waker old = {0};
    mp__spin_lock(&q->lock);
    if (w->state == MP__W_WAITING) {
        bool was_head = q->tx_head == w;
        mp__waitq_unlink(&q->tx_head, &q->tx_tail, w);
        if (was_head)
            wake_next_sender_locked(q);
    }
    mp__waiter_finish(w, &old);
    mp__spin_unlock(&q->lock);
    mp_waker_drop(&old);
}

/* One attempt at receiving. w NULL: try_recv. */
static mp_poll recv_attempt(mp_mpmc *q, mp_waiter *w, const mp_waker *waker, void **value, int *err)
{
    mp_waker old = {0};
    mp_poll r = MP_READY;
    mp__spin_lock(&q->lock);
    bool queued = w && w->state == MP__W_WAITING;
    bool drained = q->closed && q->len == 0;
    if (drained || (q->len > 0 && my_turn(w, q->rx_head))) {
        if (queued)
            mp__waitq_unlink(&q->rx_head, &q->rx_tail, w);
        if (w)
            mp__waiter_finish(w, &old);
        if (drained) {
            *err = -EPIPE;
        } else {
            *value = q->slots[q->head];
            q->head = (q->head + 1) % q->cap;
            q->len--;
            *err = 0;
            wake_next_sender_locked(q);
        }
        wake_next_receiver_locked(q);
    } else if (!w) {
        *err = -EAGAIN;
    } else {
        if (queued)
            mp__waiter_update(w, waker, &old);
        else
            mp__waitq_push(&q->rx_head, &q->rx_tail, w, waker);
        r = MP_PENDING;
    }
    mp__spin_unlock(&q->lock);
    mp_waker_drop(&old);
    return r;
}

int mp_mpmc_try_recv(mp_mpmc *q, void **value)
{
    int err;
    (void)recv_attempt(q, NULL, NULL, value, &err);
    return err;
}

mp_poll mp_mpmc_recv_poll(mp_mpmc *q, mp_waiter *w, mp_context *cx, void **value, int *err)
{
    return recv_attempt(q, w, mp_context_waker(cx), value, err);
}

int mp_mpmc_recv_blocking(mp_mpmc *q, void **value)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    mp_waiter w;
    mp_waiter_init(&w);
    int err;
    while (recv_attempt(q, &w, &me, value, &err) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return err;
}

void mp_mpmc_cancel_recv(mp_mpmc *q, mp_waiter *w)
{
    mp_waker old = {0};
    mp__spin_lock(&q->lock);
    if (w->state == MP__W_WAITING) {
        bool was_head = q->rx_head == w;
        mp__waitq_unlink(&q->rx_head, &q->rx_tail, w);
        if (was_head)
            wake_next_receiver_locked(q);
    }
    mp__waiter_finish(w, &old);
    mp__spin_unlock(&q->lock);
    mp_waker_drop(&old);
}

void mp_mpmc_close(mp_mpmc *q)
{
    mp__spin_lock(&q->lock);
    q->closed = true;
    /* Every queued node must look again and see the close. They stay queued until they do
     * (each unlinks itself), so waking them by reference under the lock is safe. */
    for (mp_waiter *w = q->tx_head; w; w = w->next)
        mp_waker_wake_by_ref(&w->waker);
    for (mp_waiter *w = q->rx_head; w; w = w->next)
        mp_waker_wake_by_ref(&w->waker);
    mp__spin_unlock(&q->lock);
}
