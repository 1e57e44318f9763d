/* chan.c: a bounded multi-producer, single-consumer channel of pointers. One spinlock (held
 * for a few instructions) guards the ring, the receiver's waker and the FIFO list of senders
 * waiting for room. Senders are served in order: a sender that is not queued may only send
 * past an empty wait list, and a queued one only from its head. Whoever frees room or leaves
 * the head of the list wakes the next sender, so no capacity wake is lost when a waiting
 * sender gives up. The receiver's waker is taken out under the lock and woken after it; a
 * queued sender's is woken by reference under it (wake_next_sender_locked() says why).
 *
 * Capacity 0 is a rendezvous: there is no ring, a sender queues with its value in its wait
 * node and wakes the receiver, and the receiver takes the value of the head sender, unlinks
 * it, marks it taken and wakes it by reference under the lock (take_from_sender_locked()).
 * The sender learns the outcome under the lock too: taken (sent), or the close (-EPIPE).
 */
#include "internal.h"

int mp_chan_init(mp_chan *c, uint32_t capacity)
{
    c->slots = NULL;
    if (capacity > 0 && !(c->slots = calloc(capacity, sizeof *c->slots)))
        return -ENOMEM;
    atomic_init(&c->lock, 0);
    c->cap = capacity;
    c->head = c->len = 0;
    c->closed = false;
    c->rx_waker = (mp_waker){0};
    c->tx_head = c->tx_tail = NULL;
    return 0;
}

void mp_chan_destroy(mp_chan *c)
{
    mp_waker_drop(&c->rx_waker);
    free(c->slots);
    c->slots = NULL;
}

static void unlink_waiter(mp_chan *c, mp_chan_waiter *w)
{
    MP__LIST_UNLINK_TAIL(c->tx_head, c->tx_tail, w, prev, next);
    w->prev = w->next = NULL;
    w->queued = false;
}

/* Under the lock: wake the head sender if there is room for it. By reference and under the
 * lock, because the sender stays queued: once the lock is let go it may poll, send and
 * return, and a blocked thread's waker points into its stack frame:
 *
 *   receiver                          sender thread (head)
 *   recv, clone the head's waker
 *   unlock
 *                                     (woken by an earlier wake) send, unlink, return
 *   wake the clone                    -> writes into a frame that is gone
 *
 * Under the lock the sender cannot leave: it takes the lock to unlink itself. */
static void wake_next_sender_locked(mp_chan *c)
{
    if (c->tx_head && c->len < c->cap)
        mp_waker_wake_by_ref(&c->tx_head->waker);
}

static void push_locked(mp_chan *c, void *value)
{
    c->slots[(c->head + c->len) % c->cap] = value;
    c->len++;
}

int mp_chan_try_send(mp_chan *c, void *value)
{
    mp__spin_lock(&c->lock);
    if (c->closed) {
        mp__spin_unlock(&c->lock);
        return -EPIPE;
    }
    if (c->len == c->cap || c->tx_head) {
        mp__spin_unlock(&c->lock);
        return -EAGAIN;
    }
    push_locked(c, value);
    mp_waker rx = c->rx_waker;
    c->rx_waker = (mp_waker){0};
    mp__spin_unlock(&c->lock);
    mp_waker_wake(&rx);
    return 0;
}

/* One attempt for a sender that may wait. PENDING leaves w queued with a clone of waker. */
static mp_poll send_attempt(mp_chan *c, mp_chan_waiter *w, void *value, const mp_waker *waker,
                            int *err)
{
    mp_waker rx = {0}, old = {0};
    mp_poll r = MP_READY;
    mp__spin_lock(&c->lock);
    if (w->taken) { /* rendezvous: the receiver took the value (and unlinked w) */
        w->taken = false;
        old = w->waker;
        w->waker = (mp_waker){0};
        *err = 0;
    } else if (c->closed) {
        if (w->queued)
            unlink_waiter(c, w);
        old = w->waker;
        w->waker = (mp_waker){0};
        *err = -EPIPE;
    } else if (c->len < c->cap && (w->queued ? c->tx_head == w : c->tx_head == NULL)) {
        if (w->queued)
            unlink_waiter(c, w);
        old = w->waker;
        w->waker = (mp_waker){0};
        push_locked(c, value);
        rx = c->rx_waker;
        c->rx_waker = (mp_waker){0};
        wake_next_sender_locked(c);
        *err = 0;
    } else {
        if (!w->queued) {
            MP__LIST_PUSH_BACK(c->tx_head, c->tx_tail, w, prev, next);
            w->queued = true;
            w->taken = false;
            w->value = value;
            if (c->cap == 0) { /* rendezvous: the receiver may take it now */
                rx = c->rx_waker;
                c->rx_waker = (mp_waker){0};
            }
        }
        if (!mp_waker_will_wake(&w->waker, waker)) {
            old = w->waker;
            w->waker = mp_waker_clone(waker);
        }
        r = MP_PENDING;
    }
    mp__spin_unlock(&c->lock);
    mp_waker_drop(&old);
    mp_waker_wake(&rx);
    return r;
}

mp_poll mp_chan_send_poll(mp_chan *c, mp_chan_waiter *w, void *value, mp_context *cx, int *err)
{
    return send_attempt(c, w, value, mp_context_waker(cx), err);
}

bool mp_chan_cancel_send(mp_chan *c, mp_chan_waiter *w)
{
    mp_waker old = {0};
    mp__spin_lock(&c->lock);
    if (w->queued) {
        bool was_head = c->tx_head == w;
        unlink_waiter(c, w);
        if (was_head)
            wake_next_sender_locked(c);
    }
    bool taken = w->taken;
    w->taken = false;
    old = w->waker;
    w->waker = (mp_waker){0};
    mp__spin_unlock(&c->lock);
    mp_waker_drop(&old);
    return taken;
}

int mp_chan_send_blocking(mp_chan *c, void *value)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    mp_chan_waiter w = {0};
    int err;
    while (send_attempt(c, &w, value, &me, &err) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return err;
}

/* Rendezvous, under the lock: take the head sender's value. The sender is woken by reference
 * under the lock, as in wake_next_sender_locked(): it reads taken under the lock before it
 * may return and free its node. */
static void take_from_sender_locked(mp_chan *c, void **value)
{
    mp_chan_waiter *w = c->tx_head;
    *value = w->value;
    unlink_waiter(c, w);
    w->taken = true;
    mp_waker_wake_by_ref(&w->waker);
}

/* Under the lock. 0, -EAGAIN, -EPIPE; on 0 the head sender is woken. */
static int recv_locked(mp_chan *c, void **value)
{
    if (c->len == 0 && c->cap == 0 && c->tx_head && !c->closed) {
        take_from_sender_locked(c, value);
        return 0;
    }
    if (c->len == 0)
        return c->closed ? -EPIPE : -EAGAIN;
    *value = c->slots[c->head];
    c->head = (c->head + 1) % c->cap;
    c->len--;
    wake_next_sender_locked(c);
    return 0;
}

int mp_chan_try_recv(mp_chan *c, void **value)
{
    mp__spin_lock(&c->lock);
    int rc = recv_locked(c, value);
    mp__spin_unlock(&c->lock);
    return rc;
}

static mp_poll recv_attempt(mp_chan *c, const mp_waker *waker, void **value, int *err)
{
    mp_waker old = {0};
    mp__spin_lock(&c->lock);
    int rc = recv_locked(c, value);
    if (rc == -EAGAIN && !mp_waker_will_wake(&c->rx_waker, waker)) {
        old = c->rx_waker;
        c->rx_waker = mp_waker_clone(waker);
    } else if (rc != -EAGAIN && mp_waker_will_wake(&c->rx_waker, waker)) {
        old = c->rx_waker; /* done waiting: do not keep a clone around */
        c->rx_waker = (mp_waker){0};
    }
    mp__spin_unlock(&c->lock);
    mp_waker_drop(&old);
    if (rc == -EAGAIN)
        return MP_PENDING;
    *err = rc;
    return MP_READY;
}

mp_poll mp_chan_recv_poll(mp_chan *c, mp_context *cx, void **value, int *err)
{
    return recv_attempt(c, mp_context_waker(cx), value, err);
}

int mp_chan_recv_blocking(mp_chan *c, void **value)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    int err;
    while (recv_attempt(c, &me, value, &err) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return err;
}

void mp_chan_cancel_recv(mp_chan *c)
{
    mp__spin_lock(&c->lock);
    mp_waker rx = c->rx_waker;
    c->rx_waker = (mp_waker){0};
    mp__spin_unlock(&c->lock);
    mp_waker_drop(&rx);
}

void mp_chan_close(mp_chan *c)
{
    mp__spin_lock(&c->lock);
    c->closed = true;
    mp_waker rx = c->rx_waker;
    c->rx_waker = (mp_waker){0};
    /* Every queued sender must look again and see the close. Their nodes stay queued until
     * they do (they unlink themselves), so waking by reference under the lock is safe. */
    for (mp_chan_waiter *w = c->tx_head; w; w = w->next)
        mp_waker_wake_by_ref(&w->waker);
    mp__spin_unlock(&c->lock);
    mp_waker_wake(&rx);
}
