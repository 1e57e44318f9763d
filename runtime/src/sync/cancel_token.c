/* cancel_token.c: a flag set once, waiters told of it, and children cancelled with their
 * parent. Each token has a spinlock over its waiters and its list of children; the flag is
 * set under the lock and is also an atomic, so mp_cancel_token_is_cancelled() reads it
 * without locking.
 *
 * Waiters check the flag and queue under the lock, and the cancel sets it and wakes the whole
 * list under the same lock (waitq.h), so no waiter is missed. The race the children bring is
 * a child created while its parent is being cancelled:
 *
 *   thread A                           thread B
 *   cancel(parent): flag, walk children
 *                                      init_child(c, parent): link c
 *   -> c missed the walk and is never cancelled
 *
 * init_child links the child and copies the flag under the parent's lock, and the cancel
 * sets the flag and walks the children under it, so c is either walked or born cancelled.
 * Locks are taken parent first, then child, on every path (cancel walks down; init_child and
 * destroy lock the parent only), so no two paths wait for each other in a cycle. Children
 * must be destroyed before their parent: a child keeps a pointer to it.
 */
#include "internal.h"
#include "sync/waitq.h"

void mp_cancel_token_init(mp_cancel_token *t)
{
    atomic_init(&t->lock, 0);
    atomic_init(&t->cancelled, false);
    t->parent = t->children = t->prev = t->next = NULL;
    t->head = t->tail = NULL;
}

void mp_cancel_token_init_child(mp_cancel_token *child, mp_cancel_token *parent)
{
    mp_cancel_token_init(child);
    child->parent = parent;
    mp__spin_lock(&parent->lock);
    MP__LIST_PUSH_FRONT(parent->children, child, prev, next);
    /* Relaxed: read and written under parent->lock, which orders it. The child is not yet
     * shared with anyone, so its own flag needs no ordering either. */
    if (atomic_load_explicit(&parent->cancelled, memory_order_relaxed))
        atomic_store_explicit(&child->cancelled, true, memory_order_relaxed);
    mp__spin_unlock(&parent->lock);
}

int mp_cancel_token_destroy(mp_cancel_token *t)
{
    int rc = 0;
    mp_cancel_token *p = t->parent;
    if (p)
        mp__spin_lock(&p->lock);
    mp__spin_lock(&t->lock);
    if (t->children || t->head) {
        rc = -EBUSY;
    } else if (p) {
        MP__LIST_UNLINK(p->children, t, prev, next);
        t->prev = t->next = NULL;
        t->parent = NULL;
    }
    mp__spin_unlock(&t->lock);
    if (p)
        mp__spin_unlock(&p->lock);
    return rc;
}

/* Cancel t and its subtree; the caller holds t's parent's lock, or nothing for the root. */
static void cancel_tree(mp_cancel_token *t)
{
    mp__spin_lock(&t->lock);
    /* Relaxed load: under the lock, which orders it against the last store. */
    if (!atomic_load_explicit(&t->cancelled, memory_order_relaxed)) {
        /* Release: what the canceller wrote before cancelling is seen by a thread that finds
         * the flag set; pairs with the acquire load in mp_cancel_token_is_cancelled(). */
        atomic_store_explicit(&t->cancelled, true, memory_order_release);
        mp__waitq_ready_all(&t->head, &t->tail, MP__W_DONE);
    }
    /* Walk the children even when t was cancelled before: a child initialised since then was
     * born cancelled, so this costs a lock each and misses nothing. */
    for (mp_cancel_token *c = t->children; c; c = c->next)
        cancel_tree(c);
    mp__spin_unlock(&t->lock);
}

void mp_cancel_token_cancel(mp_cancel_token *t)
{
    /* Acquire: pairs with the release store in cancel_tree(). Already cancelled means the
     * whole subtree was (children born since are born cancelled): nothing to do. */
    if (atomic_load_explicit(&t->cancelled, memory_order_acquire))
        return;
    cancel_tree(t);
}

bool mp_cancel_token_is_cancelled(const mp_cancel_token *t)
{
    /* Acquire: pairs with the release store in cancel_tree(). */
    return atomic_load_explicit(&t->cancelled, memory_order_acquire);
}

static mp_poll wait_attempt(mp_cancel_token *t, mp_waiter *w, const mp_waker *waker)
{
    mp_waker old = {0};
    mp_poll r = MP_PENDING;
    mp__spin_lock(&t->lock);
    /* Relaxed: under the lock that the cancel holds when it stores. */
    if (atomic_load_explicit(&t->cancelled, memory_order_relaxed)) {
        if (w->state == MP__W_WAITING)
            mp__waitq_unlink(&t->head, &t->tail, w);
        mp__waiter_finish(w, &old);
        r = MP_READY;
    } else if (w->state == MP__W_WAITING) {
        mp__waiter_update(w, waker, &old);
    } else {
        mp__waitq_push(&t->head, &t->tail, w, waker);
    }
    mp__spin_unlock(&t->lock);
    mp_waker_drop(&old);
    return r;
}

mp_poll mp_cancel_token_poll(mp_cancel_token *t, mp_waiter *w, mp_context *cx)
{
    return wait_attempt(t, w, mp_context_waker(cx));
}

void mp_cancel_token_cancel_wait(mp_cancel_token *t, mp_waiter *w)
{
    mp_waker old = {0};
    mp__spin_lock(&t->lock);
    if (w->state == MP__W_WAITING)
        mp__waitq_unlink(&t->head, &t->tail, w);
    mp__waiter_finish(w, &old);
    mp__spin_unlock(&t->lock);
    mp_waker_drop(&old);
}

void mp_cancel_token_wait_blocking(mp_cancel_token *t)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    mp_waiter w;
    mp_waiter_init(&w);
    while (wait_attempt(t, &w, &me) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
}
