/* Tests of runtime/src/idle.c: searching and parked accounting, the parked bitmap past 64
 * workers, the searcher cap, lazily handed-out slots and retired ones. */
#include <criterion/criterion.h>

#include "internal.h"

static unsigned searching(mp__idle *i)
{
    return (unsigned)(atomic_load(&i->state) & 0xffffffffu);
}

static unsigned unparked(mp__idle *i)
{
    return (unsigned)(atomic_load(&i->state) >> 32);
}

Test(idle, slots_are_handed_out_lazily_then_parked_workers_are_woken)
{
    mp__idle idle;
    cr_assert_eq(mp__idle_init(&idle, 3), 0);
    unsigned idx;
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_SPAWN);
    cr_assert_eq(idx, 0);
    cr_assert_eq(searching(&idle), 1);
    cr_assert_eq(unparked(&idle), 1);
    /* Someone is searching: no second wake. */
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_NONE);
    cr_assert(mp__idle_transition_from_searching(&idle), "it was the last searcher");
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_SPAWN);
    cr_assert_eq(idx, 1);
    /* Worker 1 starts as the searcher, finds nothing and parks: it was the last one. */
    cr_assert(mp__idle_transition_to_parked(&idle, 1, true));
    cr_assert_eq(unparked(&idle), 1);
    cr_assert_eq(searching(&idle), 0);
    cr_assert(mp__idle_is_parked(&idle, 1));
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_UNPARK,
                 "a parked worker is preferred to a new thread");
    cr_assert_eq(idx, 1);
    cr_assert_not(mp__idle_is_parked(&idle, 1));
    cr_assert_eq(searching(&idle), 1);
    cr_assert_eq(unparked(&idle), 2);
    mp__idle_destroy(&idle);
}

Test(idle, last_searcher_to_park_is_told)
{
    mp__idle idle;
    cr_assert_eq(mp__idle_init(&idle, 4), 0);
    unsigned idx;
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_SPAWN);
        mp__idle_transition_from_searching(&idle);
    }
    cr_assert_eq(unparked(&idle), 4);
    cr_assert(mp__idle_transition_to_searching(&idle));
    cr_assert(mp__idle_transition_to_searching(&idle));
    cr_assert_not(mp__idle_transition_to_searching(&idle), "at most half the workers search");
    cr_assert_not(mp__idle_transition_to_parked(&idle, 0, true));
    cr_assert(mp__idle_transition_to_parked(&idle, 1, true), "the last searcher parks");
    cr_assert_not(mp__idle_transition_to_parked(&idle, 2, false));
    cr_assert_eq(unparked(&idle), 1);
    cr_assert_eq(searching(&idle), 0);
    mp__idle_destroy(&idle);
}

Test(idle, bitmap_past_64_workers)
{
    enum { W = 200 };
    mp__idle idle;
    cr_assert_eq(mp__idle_init(&idle, W), 0);
    unsigned idx;
    for (unsigned i = 0; i < W; i++) {
        cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_SPAWN);
        cr_assert_eq(idx, i);
        mp__idle_transition_from_searching(&idle);
    }
    /* Park a few scattered workers, in and beyond the first word. */
    unsigned parked[] = {199, 64, 130, 3};
    for (unsigned i = 0; i < 4; i++)
        mp__idle_transition_to_parked(&idle, parked[i], false);
    cr_assert_eq(unparked(&idle), W - 4);
    unsigned want[] = {3, 64, 130, 199}; /* the lowest parked index first */
    for (unsigned i = 0; i < 4; i++) {
        cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_UNPARK);
        cr_assert_eq(idx, want[i]);
        mp__idle_transition_from_searching(&idle);
    }
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_NONE, "everyone is up");
    /* A worker woken directly leaves the parked set by itself, once. */
    mp__idle_transition_to_parked(&idle, 150, false);
    cr_assert(mp__idle_unpark_self(&idle, 150));
    cr_assert_not(mp__idle_unpark_self(&idle, 150));
    cr_assert_eq(unparked(&idle), W);
    mp__idle_destroy(&idle);
}

Test(idle, failed_slot_is_handed_out_again)
{
    mp__idle idle;
    cr_assert_eq(mp__idle_init(&idle, 2), 0);
    unsigned idx;
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_SPAWN);
    cr_assert_eq(idx, 0);
    cr_assert_eq(mp__idle_spawning(&idle), 1);
    mp__idle_spawn_failed(&idle, idx);
    mp__idle_spawn_settled(&idle);
    cr_assert_eq(mp__idle_spawning(&idle), 0);
    cr_assert_eq(searching(&idle), 0);
    cr_assert_eq(unparked(&idle), 0);
    /* No spawning allowed: nobody is parked, so nothing to do. */
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, false), MP__NOTIFY_NONE);
    /* The failed slot comes back before the unstarted one. */
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_SPAWN);
    cr_assert_eq(idx, 0);
    mp__idle_spawn_settled(&idle);
    mp__idle_transition_from_searching(&idle);
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_SPAWN);
    cr_assert_eq(idx, 1);
    mp__idle_spawn_settled(&idle);
    mp__idle_transition_from_searching(&idle);
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_NONE,
                 "both workers are awake");
    cr_assert_eq(mp__idle_close(&idle), 2);
    mp__idle_transition_to_parked(&idle, 1, false);
    cr_assert_eq(mp__idle_worker_to_notify(&idle, &idx, true), MP__NOTIFY_UNPARK);
    cr_assert_eq(idx, 1);
    /* Closed: no slot is handed out any more. */
    cr_assert_not(mp__idle_take_slot(&idle, &idx));
    mp__idle_destroy(&idle);
}
