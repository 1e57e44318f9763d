/* Tests of runtime/src/state.c: every transition of the state word from every state it
 * accepts, and the ones it must refuse (they abort: an impossible state is a bug, not an
 * error). */
#include <criterion/criterion.h>
#include <signal.h>

#include "internal.h"

#define R      MP__T_RUNNING
#define C      MP__T_COMPLETE
#define S      MP__T_SCHEDULED
#define N      MP__T_NOTIFIED
#define X      MP__T_CANCELLED
#define JI     MP__T_JOIN_INTEREST
#define JW     MP__T_JOIN_WAKER
#define REF(n) ((uint64_t)(n)*MP__T_REF_ONE)

static _Atomic int released;
static void count_release(mp_task *t)
{
    (void)t;
    atomic_fetch_add(&released, 1);
}

static mp_poll never_poll(mp_task *t, mp_context *cx)
{
    (void)t; /* the vtable's signature */
    (void)cx;
    return MP_PENDING;
}

static const mp_task_vtable bare_vt = {.poll = never_poll, .release = count_release};

static mp_task bare(uint64_t state)
{
    mp_task t;
    mp_task_init(&t, &bare_vt);
    atomic_store(&t.state, state);
    return t;
}

static uint64_t st(mp_task *t)
{
    return atomic_load(&t->state);
}

/* Transitions, state by state. */

Test(state, to_spawned_and_back)
{
    mp_task t = bare(0);
    cr_assert(mp__task_transition_to_spawned(&t, false));
    cr_assert_eq(st(&t), S | REF(1));
    cr_assert_not(mp__task_transition_to_spawned(&t, false), "spawned twice");
    mp__task_transition_to_unspawned(&t);
    cr_assert_eq(st(&t), 0);
    cr_assert(mp__task_transition_to_spawned(&t, true));
    cr_assert_eq(st(&t), S | JI | REF(2), "the join handle's reference too");
}

Test(state, to_running)
{
    mp_task t = bare(S | REF(2));
    cr_assert_eq(mp__task_transition_to_running(&t), MP__TO_RUNNING_OK);
    cr_assert_eq(st(&t), R | REF(2));

    t = bare(S | X | REF(2));
    cr_assert_eq(mp__task_transition_to_running(&t), MP__TO_RUNNING_CANCELLED);
    cr_assert_eq(st(&t), R | X | REF(2));

    /* Claimed by shutdown (or complete) while queued: the queue entry is stale. */
    t = bare(S | R | X | REF(2));
    cr_assert_eq(mp__task_transition_to_running(&t), MP__TO_RUNNING_FAILED);
    cr_assert_eq(st(&t), R | X | REF(2));
    t = bare(S | C | REF(1));
    cr_assert_eq(mp__task_transition_to_running(&t), MP__TO_RUNNING_FAILED);
    cr_assert_eq(st(&t), C | REF(1));
}

Test(state, to_idle)
{
    mp_task t = bare(R | REF(2));
    cr_assert_eq(mp__task_transition_to_idle(&t, false), MP__TO_IDLE_OK);
    cr_assert_eq(st(&t), REF(1), "idle, run reference dropped");

    t = bare(R | N | REF(2));
    cr_assert_eq(mp__task_transition_to_idle(&t, false), MP__TO_IDLE_REQUEUE);
    cr_assert_eq(st(&t), S | REF(2), "woken while running: queued again, reference kept");

    t = bare(R | REF(2));
    cr_assert_eq(mp__task_transition_to_idle(&t, true), MP__TO_IDLE_REQUEUE, "yield");
    cr_assert_eq(st(&t), S | REF(2));

    t = bare(R | X | N | REF(2));
    cr_assert_eq(mp__task_transition_to_idle(&t, false), MP__TO_IDLE_CANCELLED);
    cr_assert_eq(st(&t), R | X | N | REF(2), "still running: the caller cancels it");

    t = bare(R | REF(1));
    cr_assert_eq(mp__task_transition_to_idle(&t, false), MP__TO_IDLE_DEALLOC);
    cr_assert_eq(st(&t), 0);
}

Test(state, to_idle_when_not_running_aborts, .signal = SIGABRT)
{
    mp_task t = bare(REF(1));
    mp__task_transition_to_idle(&t, false);
}

Test(state, notified_by_ref)
{
    mp_task t = bare(REF(1));
    cr_assert_eq(mp__task_transition_to_notified_by_ref(&t), MP__NOTIFY_SUBMIT, "idle");
    cr_assert_eq(st(&t), S | REF(2), "scheduled with a reference for the queue");
    cr_assert_eq(mp__task_transition_to_notified_by_ref(&t), MP__NOTIFY_NOTHING, "scheduled");
    cr_assert_eq(st(&t), S | REF(2));

    t = bare(R | REF(1));
    cr_assert_eq(mp__task_transition_to_notified_by_ref(&t), MP__NOTIFY_NOTHING, "running");
    cr_assert_eq(st(&t), R | N | REF(1));
    cr_assert_eq(mp__task_transition_to_notified_by_ref(&t), MP__NOTIFY_NOTHING, "again");
    cr_assert_eq(st(&t), R | N | REF(1), "a second wake while running changes nothing");

    t = bare(C | REF(1));
    cr_assert_eq(mp__task_transition_to_notified_by_ref(&t), MP__NOTIFY_NOTHING, "complete");
    cr_assert_eq(st(&t), C | REF(1));
}

Test(state, notified_by_val)
{
    mp_task t = bare(REF(2));
    cr_assert_eq(mp__task_transition_to_notified_by_val(&t), MP__NOTIFY_SUBMIT);
    cr_assert_eq(st(&t), S | REF(2), "the waker's reference passes to the queue");

    t = bare(S | REF(3));
    cr_assert_eq(mp__task_transition_to_notified_by_val(&t), MP__NOTIFY_NOTHING);
    cr_assert_eq(st(&t), S | REF(2));

    t = bare(R | REF(2));
    cr_assert_eq(mp__task_transition_to_notified_by_val(&t), MP__NOTIFY_NOTHING);
    cr_assert_eq(st(&t), R | N | REF(1));

    t = bare(C | REF(2));
    cr_assert_eq(mp__task_transition_to_notified_by_val(&t), MP__NOTIFY_NOTHING);
    cr_assert_eq(st(&t), C | REF(1));
    cr_assert_eq(mp__task_transition_to_notified_by_val(&t), MP__NOTIFY_DEALLOC);
    cr_assert_eq(st(&t), C);
}

Test(state, notified_and_cancel)
{
    mp_task t = bare(REF(1));
    cr_assert_eq(mp__task_transition_to_notified_and_cancel(&t), MP__NOTIFY_SUBMIT);
    cr_assert_eq(st(&t), S | X | REF(2));
    cr_assert_eq(mp__task_transition_to_notified_and_cancel(&t), MP__NOTIFY_NOTHING);
    cr_assert_eq(st(&t), S | X | REF(2), "cancelling twice changes nothing");

    t = bare(S | REF(2));
    cr_assert_eq(mp__task_transition_to_notified_and_cancel(&t), MP__NOTIFY_NOTHING);
    cr_assert_eq(st(&t), S | X | REF(2));

    t = bare(R | REF(1));
    cr_assert_eq(mp__task_transition_to_notified_and_cancel(&t), MP__NOTIFY_NOTHING);
    cr_assert_eq(st(&t), R | X | N | REF(1));

    t = bare(C | REF(1));
    cr_assert_eq(mp__task_transition_to_notified_and_cancel(&t), MP__NOTIFY_NOTHING);
    cr_assert_eq(st(&t), C | REF(1));
}

Test(state, shutdown)
{
    mp_task t = bare(REF(1));
    cr_assert(mp__task_transition_to_shutdown(&t), "idle: claimed");
    cr_assert_eq(st(&t), R | X | REF(1));

    t = bare(S | REF(2));
    cr_assert(mp__task_transition_to_shutdown(&t), "queued: claimed, the queue entry goes stale");
    cr_assert_eq(st(&t), S | R | X | REF(2));

    t = bare(R | REF(2));
    cr_assert_not(mp__task_transition_to_shutdown(&t), "running: left to the runner");
    cr_assert_eq(st(&t), R | X | REF(2));

    t = bare(C | REF(1));
    cr_assert_not(mp__task_transition_to_shutdown(&t));
    cr_assert_eq(st(&t), C | X | REF(1));
}

Test(state, complete)
{
    atomic_store(&released, 0);
    mp_task t = bare(R | REF(2));
    cr_assert_not(mp__task_transition_to_complete(&t, 2));
    cr_assert_eq(st(&t), C);
    cr_assert_eq(atomic_load(&released), 1, "last references: released");

    t = bare(R | JI | REF(3));
    cr_assert_not(mp__task_transition_to_complete(&t, 2), "joiner has no waker set");
    cr_assert_eq(st(&t), C | JI | REF(1));

    t = bare(R | JI | JW | REF(3));
    cr_assert(mp__task_transition_to_complete(&t, 2), "the joiner must be woken");
    cr_assert_eq(st(&t), C | JI | JW | REF(2), "one runner reference kept for the wake");
    mp__task_transition_to_join_waker_done(&t);
    cr_assert_eq(st(&t), C | JI | REF(1), "waker handed back with the last runner reference");
}

/* The joiner ran the task itself (mp__worker_join_in_place()): complete and joined at once. */
Test(state, complete_joined)
{
    atomic_store(&released, 0);
    mp_task t = bare(R | JI | REF(2));
    cr_assert(mp__task_transition_to_complete_joined(&t, 1));
    cr_assert_eq(st(&t), C, "the run and the handle's references gone together");
    cr_assert_eq(atomic_load(&released), 1);

    t = bare(R | JI | REF(4)); /* registered, and a waker clone somewhere */
    cr_assert(mp__task_transition_to_complete_joined(&t, 2));
    cr_assert_eq(st(&t), C | REF(1), "the clone's reference stays");
    cr_assert_eq(atomic_load(&released), 1, "not the last: not released");

    t = bare(R | X | JI | REF(2)); /* cancelled: the joiner gets -ECANCELED the same way */
    cr_assert(mp__task_transition_to_complete_joined(&t, 1));
    cr_assert_eq(st(&t), C | X);

    t = bare(R | JI | JW | REF(3));
    cr_assert_not(mp__task_transition_to_complete_joined(&t, 2), "a join waker: the usual way");
    cr_assert_eq(st(&t), R | JI | JW | REF(3), "unchanged");

    t = bare(R | REF(1));
    cr_assert_not(mp__task_transition_to_complete_joined(&t, 1), "no join handle");
    cr_assert_eq(st(&t), R | REF(1), "unchanged");
}

Test(state, complete_joined_twice_aborts, .signal = SIGABRT)
{
    mp_task t = bare(C | JI | REF(2));
    mp__task_transition_to_complete_joined(&t, 1);
}

Test(state, complete_twice_aborts, .signal = SIGABRT)
{
    mp_task t = bare(C | REF(2));
    mp__task_transition_to_complete(&t, 1);
}

Test(state, join_waker_bits)
{
    mp_task t = bare(JI | REF(2));
    cr_assert(mp__task_transition_set_join_waker(&t));
    cr_assert_eq(st(&t), JI | JW | REF(2));
    cr_assert(mp__task_transition_unset_join_waker(&t));
    cr_assert_eq(st(&t), JI | REF(2));

    t = bare(C | JI | REF(1));
    cr_assert_not(mp__task_transition_set_join_waker(&t), "complete: the output is ready");
    cr_assert_not(mp__task_transition_unset_join_waker(&t));
    cr_assert_eq(st(&t), C | JI | REF(1));
}

Test(state, join_handle_dropped)
{
    mp_task t = bare(JI | JW | REF(2));
    cr_assert(mp__task_transition_to_join_handle_dropped(&t), "not complete: joiner owns waker");
    cr_assert_eq(st(&t), REF(2));

    t = bare(C | JI | JW | REF(2));
    cr_assert_not(mp__task_transition_to_join_handle_dropped(&t),
                  "complete with the waker set: the runtime still uses it");
    cr_assert_eq(st(&t), C | JW | REF(2));

    t = bare(C | JI | REF(1));
    cr_assert(mp__task_transition_to_join_handle_dropped(&t));
    cr_assert_eq(st(&t), C | REF(1));
}

Test(state, join_handle_dropped_twice_aborts, .signal = SIGABRT)
{
    mp_task t = bare(REF(1));
    mp__task_transition_to_join_handle_dropped(&t);
}

Test(state, reference_underflow_aborts, .signal = SIGABRT)
{
    mp_task t = bare(C);
    mp__task_ref_dec(&t, 1);
}
