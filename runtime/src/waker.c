/* waker.c: the type-erased waker handle. A waker is a vtable and a data pointer; tasks use
 * the task vtable (task.c), blocked threads and workers their own. The empty waker (vt NULL)
 * is valid everywhere and does nothing.
 */
#include "internal.h"

mp_waker mp_waker_clone(const mp_waker *w)
{
    if (!w->vt)
        return (mp_waker){0};
    return (mp_waker){.vt = w->vt, .data = w->vt->clone(w->data)};
}

void mp_waker_wake(mp_waker *w)
{
    mp_waker taken = *w;
    *w = (mp_waker){0};
    if (taken.vt)
        taken.vt->wake(taken.data);
}

void mp_waker_wake_by_ref(const mp_waker *w)
{
    if (w->vt)
        w->vt->wake_by_ref(w->data);
}

void mp_waker_drop(mp_waker *w)
{
    mp_waker taken = *w;
    *w = (mp_waker){0};
    if (taken.vt)
        taken.vt->drop(taken.data);
}

bool mp_waker_will_wake(const mp_waker *a, const mp_waker *b)
{
    return a->vt == b->vt && a->data == b->data;
}

/* A thread that is not a worker blocks on a word of its own stack. The waker needs no
 * reference count: every blocking call takes its waker back from wherever it registered it
 * before returning, so no clone outlives the frame. */
static void thread_wake(const void *data)
{
    mp__thread_waiter *tw = (mp__thread_waiter *)data;
    /* Release: pairs with the acquire load in mp__thread_waiter_wait(). */
    atomic_store_explicit(&tw->word, 1, memory_order_release);
    mp__futex_wake(&tw->word, 1);
}

static const void *thread_clone(const void *data)
{
    return data;
}

static void thread_drop(const void *data)
{
    (void)data;
}

static const mp_waker_vtable thread_waker_vt = {
    .wake = thread_wake,
    .wake_by_ref = thread_wake,
    .clone = thread_clone,
    .drop = thread_drop,
};

mp_waker mp__thread_waiter_init(mp__thread_waiter *tw)
{
    atomic_init(&tw->word, 0);
    return (mp_waker){.vt = &thread_waker_vt, .data = tw};
}

bool mp__thread_waiter_wait_until(mp__thread_waiter *tw, uint64_t deadline_ms)
{
    /* Acquire: pairs with the release store in thread_wake(), as in mp__thread_waiter_wait(). */
    while (atomic_load_explicit(&tw->word, memory_order_acquire) == 0) {
        if (mp_now_ms() >= deadline_ms)
            return false;
        mp__futex_wait_until(&tw->word, 0, deadline_ms);
    }
    atomic_store_explicit(&tw->word, 0, memory_order_relaxed);
    return true;
}

void mp__thread_waiter_wait(mp__thread_waiter *tw)
{
    /* Acquire: pairs with the release store in thread_wake(). */
    while (atomic_load_explicit(&tw->word, memory_order_acquire) == 0)
        mp__futex_wait(&tw->word, 0);
    atomic_store_explicit(&tw->word, 0, memory_order_relaxed);
}
