/* A waiter polled by hand, as a task would poll it, for the sync primitives' tests: its waker
 * counts wakes in a thread waiter's word, so a test sees whether (and when) it was woken
 * without a runtime. */
#ifndef TEST_SYNC_HAND_H
#define TEST_SYNC_HAND_H

#include "internal.h"

typedef struct hand {
    mp__thread_waiter tw;
    mp_context cx;
    mp_waiter w;
} hand;

static inline void hand_init(hand *h)
{
    h->cx = (mp_context){.waker = mp__thread_waiter_init(&h->tw)};
    mp_waiter_init(&h->w);
}

/* Whether the waker was called since the last look (and forget it). */
static inline bool woken(hand *h)
{
    return atomic_exchange(&h->tw.word, 0) != 0;
}

#endif
