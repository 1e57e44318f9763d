/* barrier.c: n parties meet, then all go on. One spinlock guards the count of arrivals and
 * the list of parties waiting (checking and queueing under it: waitq.h). The party that
 * arrives last is the round's leader: it resets the count and marks every waiting node DONE
 * under the lock, so the next round can begin at once without mixing with this one. The race
 * that matters is a party that gives up:
 *
 *   party A (waiting, arrived = 1 of 2)      party B
 *   cancelled: unlink                        arrives: arrived = 2, round complete
 *   -> B passed a round that A left: B goes on alone, and A's next wait counts twice
 *
 * mp_barrier_cancel_wait() therefore takes back the arrival of a node still WAITING, under
 * the lock, and leaves alone a node already DONE (its round is complete; it counted).
 */
#include "internal.h"
#include "sync/waitq.h"

int mp_barrier_init(mp_barrier *b, uint32_t n)
{
    if (n == 0)
        return -EINVAL;
    atomic_init(&b->lock, 0);
    b->n = n;
    b->arrived = 0;
    b->head = b->tail = NULL;
    return 0;
}

static mp_poll wait_attempt(mp_barrier *b, mp_waiter *w, const mp_waker *waker, bool *leader)
{
    mp_waker old = {0};
    mp_poll r = MP_READY;
    mp__spin_lock(&b->lock);
    switch (w->state) {
    case MP__W_DONE:
        mp__waiter_finish(w, &old);
        *leader = false;
        break;
    case MP__W_WAITING:
        mp__waiter_update(w, waker, &old);
        r = MP_PENDING;
        break;
    default:
        if (++b->arrived == b->n) {
            b->arrived = 0;
            mp__waitq_ready_all(&b->head, &b->tail, MP__W_DONE);
            *leader = true;
        } else {
            mp__waitq_push(&b->head, &b->tail, w, waker);
            r = MP_PENDING;
        }
    }
    mp__spin_unlock(&b->lock);
    mp_waker_drop(&old);
    return r;
}

mp_poll mp_barrier_wait_poll(mp_barrier *b, mp_waiter *w, mp_context *cx, bool *leader)
{
    return wait_attempt(b, w, mp_context_waker(cx), leader);
}

void mp_barrier_cancel_wait(mp_barrier *b, mp_waiter *w)
{
    mp_waker old = {0};
    mp__spin_lock(&b->lock);
    if (w->state == MP__W_WAITING) {
        mp__waitq_unlink(&b->head, &b->tail, w);
        b->arrived--;
    }
    mp__waiter_finish(w, &old);
    mp__spin_unlock(&b->lock);
    mp_waker_drop(&old);
}

bool mp_barrier_wait_blocking(mp_barrier *b)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    mp_waiter w;
    mp_waiter_init(&w);
    bool leader = false;
    while (wait_attempt(b, &w, &me, &leader) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return leader;
}
