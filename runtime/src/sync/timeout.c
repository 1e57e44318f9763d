/* timeout.c: deadlines around any wait (magpie_core.h, "Deadlines"): mp_timeout_poll() for a
 * task, mp_wait_until() for a plain thread. Neither has a protocol of its own: each polls the
 * wait (which registers a waker under its primitive's lock), waits for that waker or the
 * deadline, and at the deadline calls the wait's cancel, which takes the waker back under the
 * same lock and settles the race with a wake that comes at the deadline: what the primitive
 * handed over is given back, or the cancel says the wait completed.
 *
 * The inner wait is polled first, so a wait that is ready wins over a deadline that passed at
 * the same moment; mp_wait_until() polls it once more after the deadline for the same reason
 * (its wake may have come just before). */
#include "internal.h"

mp_poll mp_timeout_poll(mp_timer *t, uint64_t deadline_ms, const mp_wait *w, mp_context *cx,
                        int *err)
{
    if (w->poll(w->arg, cx) == MP_READY) {
        mp_timer_cancel(t);
        *err = 0;
        return MP_READY;
    }
    if (mp_timer_poll(t, deadline_ms, cx) == MP_READY) {
        /* The timer is disarmed by its ready poll; the wait is withdrawn here. */
        *err = w->cancel(w->arg) ? 0 : -ETIMEDOUT;
        return MP_READY;
    }
    return MP_PENDING;
}

/* A plain thread's context: its waker is the thread's futex word (waker.c), which keeps no
 * reference count, so every path out of here leaves no clone of it in the primitive: a ready
 * poll keeps none (mp_wait's contract), and a timed-out one is cancelled. */
int mp_wait_until(const mp_wait *w, uint64_t deadline_ms)
{
    if (mp__tls_worker)
        return -EDEADLK;
    mp__thread_waiter tw;
    mp_context cx = {.waker = mp__thread_waiter_init(&tw), .task = NULL, .yielded = false};
    for (;;) {
        if (w->poll(w->arg, &cx) == MP_READY)
            return 0;
        if (mp_now_ms() >= deadline_ms)
            return w->cancel(w->arg) ? 0 : -ETIMEDOUT;
        mp__thread_waiter_wait_until(&tw, deadline_ms); /* then poll again, whichever came */
    }
}
