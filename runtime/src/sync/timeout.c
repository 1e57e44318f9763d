/* timeout.c: a deadline around any poll. The inner poll runs first, so a wait that is ready
 * wins over a deadline that passed at the same moment; then the timer is polled, which
 * registers the same task waker with the timer wheel. Whichever fires first wakes the task;
 * no protocol of its own beyond the timer's (timer.c) and the inner primitive's. */
#include "internal.h"

mp_poll mp_timeout_poll(mp_timer *t, uint64_t deadline_ms,
                        mp_poll (*poll)(void *arg, mp_context *cx), void *arg, mp_context *cx,
                        int *err)
{
    if (poll(arg, cx) == MP_READY) {
        mp_timer_cancel(t);
        *err = 0;
        return MP_READY;
    }
    if (mp_timer_poll(t, deadline_ms, cx) == MP_READY) {
        *err = -ETIMEDOUT;
        return MP_READY;
    }
    return MP_PENDING;
}
