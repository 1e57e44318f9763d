/* inject.c: the global run queue. An intrusive singly linked list (through mp_task.next)
 * under a mutex, with the length mirrored in an atomic so that workers can see it is empty
 * without taking the lock. Tasks arrive here from threads that are not workers, from ring
 * overflows (half a ring in one lock), and from workers that are parking. Closing it at
 * shutdown makes every later push fail, and the pusher keeps the task.
 */
#include "internal.h"

int mp__inject_init(mp__inject *inj)
{
    int rc = pthread_mutex_init(&inj->mu, NULL);
    if (rc != 0)
        return -rc;
    inj->head = inj->tail = NULL;
    inj->closed = false;
    atomic_init(&inj->len, 0);
    return 0;
}

void mp__inject_destroy(mp__inject *inj)
{
    pthread_mutex_destroy(&inj->mu);
}

bool mp__inject_push_batch(mp__inject *inj, mp_task *first, mp_task *last, size_t n)
{
    last->next = NULL;
    pthread_mutex_lock(&inj->mu);
    if (inj->closed) {
        pthread_mutex_unlock(&inj->mu);
        return false;
    }
    if (inj->tail)
        inj->tail->next = first;
    else
        inj->head = first;
    inj->tail = last;
    /* Relaxed: the mutex orders the list; len is a hint read lock-free, and the park
     * protocol's seq_cst fences (idle.c) order it against the parked-worker check. */
    atomic_store_explicit(&inj->len, atomic_load_explicit(&inj->len, memory_order_relaxed) + n,
                          memory_order_relaxed);
    pthread_mutex_unlock(&inj->mu);
    return true;
}

bool mp__inject_push(mp__inject *inj, mp_task *t)
{
    return mp__inject_push_batch(inj, t, t, 1);
}

size_t mp__inject_pop_batch(mp__inject *inj, mp_task **out, size_t max)
{
    /* Relaxed: a stale zero only means we look again later (see mp__inject_push_batch). */
    if (max == 0 || atomic_load_explicit(&inj->len, memory_order_relaxed) == 0)
        return 0;
    pthread_mutex_lock(&inj->mu);
    size_t n = 0;
    while (n < max && inj->head) {
        mp_task *t = inj->head;
        inj->head = t->next;
        t->next = NULL;
        out[n++] = t;
    }
    if (!inj->head)
        inj->tail = NULL;
    atomic_store_explicit(&inj->len, atomic_load_explicit(&inj->len, memory_order_relaxed) - n,
                          memory_order_relaxed);
    pthread_mutex_unlock(&inj->mu);
    return n;
}

mp_task *mp__inject_pop(mp__inject *inj)
{
    mp_task *t = NULL;
    return mp__inject_pop_batch(inj, &t, 1) ? t : NULL;
}

size_t mp__inject_len(mp__inject *inj)
{
    return atomic_load_explicit(&inj->len, memory_order_relaxed);
}

void mp__inject_close(mp__inject *inj)
{
    pthread_mutex_lock(&inj->mu);
    inj->closed = true;
    pthread_mutex_unlock(&inj->mu);
}
