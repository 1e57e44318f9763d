/* select.c: poll several waits, report the first ready. Nothing cross-thread of its own: each
 * arm registers the task's waker with its primitive as a lone poll would, so whichever
 * becomes ready first wakes the task, and the primitives' own protocols lose no wake-up. The
 * arms that did not win are still waiting; the caller cancels them (or polls them again). */
#include "internal.h"

mp_poll mp_select_poll(const mp_select_arm *arms, size_t n, mp_context *cx, size_t *which)
{
    for (size_t i = 0; i < n; i++) {
        if (arms[i].poll(arms[i].arg, cx) == MP_READY) {
            *which = i;
            return MP_READY;
        }
    }
    return MP_PENDING;
}
