/* group.c: a task group (Tokio's JoinSet). Members are joinable tasks whose join waker is not
 * a task's but the member's own node: when a member completes, the runtime wakes that waker
 * (the JOIN_WAKER protocol in task.c), and member_done() moves the node from the group's
 * running list to its finished list and wakes whoever joins the group. join_next then takes
 * the first finished node and completes the join (mp_join_poll() on a complete task returns
 * at once and gives up the handle).
 *
 * The race is destroying the group while a member completes:
 *
 *   owner                                   a worker completing member m
 *                                           wake m's join waker: member_done(m)
 *   destroy(g): detach m, free g                reads m->group == g ...
 *                                               locks g  -> use after free
 *
 * so member_done() reads m->group and uses the group under m's own small lock, and destroy
 * clears m->group under that lock before it detaches m: after that, a completion finds NULL
 * and does nothing, and one that had the lock first has finished with g before destroy goes
 * on. Lock order: a member's lock, then the group's (member_done); destroy and the owner's
 * calls take the group's lock alone, and a member's only after letting go of it. The node
 * lives in the task's own memory, which the runtime keeps until the task is released, after
 * its join waker was woken.
 *
 * The joiner's waker is moved out of the group under the lock (not cloned) and woken after
 * it: each registration has one taker, and a blocked joining thread does not look again
 * until that wake has come, so the wake never lands in a frame that has returned.
 *
 * Spawn, join, cancel_all and destroy are the owner's: one thread or task at a time.
 */
#include "internal.h"

enum { G_RUNNING = 1, G_DONE, G_JOINED, G_DETACHED };

static void member_done(mp_group_task *m)
{
    mp_waker joiner = {0};
    mp__spin_lock(&m->lock);
    mp_task_group *g = m->group;
    if (g) {
        mp__spin_lock(&g->lock);
        if (m->state == G_RUNNING) {
            MP__LIST_UNLINK_TAIL(g->run_head, g->run_tail, m, prev, next);
            MP__LIST_PUSH_BACK(g->done_head, g->done_tail, m, prev, next);
            m->state = G_DONE;
            joiner = g->joiner;
            g->joiner = (mp_waker){0};
        }
        mp__spin_unlock(&g->lock);
    }
    mp__spin_unlock(&m->lock);
    mp_waker_wake(&joiner);
}

/* The member's join waker: it lives as long as the member's node, so clone and drop are
 * no-ops. */
static void member_wake(const void *data)
{
    member_done((mp_group_task *)data);
}

static const void *member_clone(const void *data)
{
    return data;
}

static void member_drop(const void *data)
{
    (void)data;
}

static const mp_waker_vtable member_waker_vt = {
    .wake = member_wake,
    .wake_by_ref = member_wake,
    .clone = member_clone,
    .drop = member_drop,
};

void mp_task_group_init(mp_task_group *g, mp_runtime *rt)
{
    atomic_init(&g->lock, 0);
    g->rt = rt;
    g->run_head = g->run_tail = g->done_head = g->done_tail = NULL;
    g->len = 0;
    g->joiner = (mp_waker){0};
}

int mp_task_group_spawn(mp_task_group *g, mp_group_task *m)
{
    atomic_init(&m->lock, 0);
    m->group = g;
    m->prev = m->next = NULL;
    int rc = mp_spawn_joinable(g->rt, &m->task);
    if (rc != 0)
        return rc;
    mp__spin_lock(&g->lock);
    MP__LIST_PUSH_BACK(g->run_head, g->run_tail, m, prev, next);
    m->state = G_RUNNING;
    g->len++;
    mp__spin_unlock(&g->lock);
    /* Until the waker is registered a completion wakes nobody; if it completed already,
     * register says so and we move it ourselves. */
    mp_waker mw = {.vt = &member_waker_vt, .data = m};
    if (!mp__task_register_join_waker(&m->task, &mw))
        member_done(m);
    return 0;
}

size_t mp_task_group_len(mp_task_group *g)
{
    mp__spin_lock(&g->lock);
    size_t n = g->len;
    mp__spin_unlock(&g->lock);
    return n;
}

/* MP_READY with *out (NULL: empty) or MP_PENDING with waker registered. */
static mp_poll join_next_attempt(mp_task_group *g, const mp_waker *waker, mp_group_task **out,
                                 int *result)
{
    mp_waker old = {0};
    mp__spin_lock(&g->lock);
    mp_group_task *m = g->done_head;
    if (m) {
        MP__LIST_UNLINK_TAIL(g->done_head, g->done_tail, m, prev, next);
        m->prev = m->next = NULL;
        m->state = G_JOINED;
        g->len--;
    }
    bool pending = !m && g->len > 0;
    if (pending && !mp_waker_will_wake(&g->joiner, waker)) {
        old = g->joiner;
        g->joiner = mp_waker_clone(waker);
    } else if (!pending && mp_waker_will_wake(&g->joiner, waker)) {
        old = g->joiner; /* done waiting: keep no clone */
        g->joiner = (mp_waker){0};
    }
    mp__spin_unlock(&g->lock);
    mp_waker_drop(&old);
    if (pending)
        return MP_PENDING;
    *out = m;
    if (m) {
        /* The task is complete: this returns at once, once the runtime has finished with
         * the join waker, and gives up the handle. */
        mp_context cx = {.waker = {.vt = &member_waker_vt, .data = m}};
        int r = 0;
        (void)mp_join_poll(&m->task, &cx, &r);
        *result = r;
    }
    return MP_READY;
}

mp_poll mp_task_group_join_next_poll(mp_task_group *g, mp_context *cx, mp_group_task **out,
                                     int *result)
{
    return join_next_attempt(g, mp_context_waker(cx), out, result);
}

void mp_task_group_cancel_wait(mp_task_group *g)
{
    mp__spin_lock(&g->lock);
    mp_waker old = g->joiner;
    g->joiner = (mp_waker){0};
    mp__spin_unlock(&g->lock);
    mp_waker_drop(&old);
}

int mp_task_group_join_next(mp_task_group *g, mp_group_task **out, int *result)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    while (join_next_attempt(g, &me, out, result) == MP_PENDING)
        mp__thread_waiter_wait(&tw);
    return *out ? 0 : -ENOENT;
}

size_t mp_task_group_join_all(mp_task_group *g)
{
    size_t cancelled = 0;
    mp_group_task *m;
    int result;
    while (mp_task_group_join_next(g, &m, &result) == 0)
        cancelled += result == -ECANCELED;
    return cancelled;
}

void mp_task_group_cancel_all(mp_task_group *g)
{
    mp__spin_lock(&g->lock);
    /* Each member is kept alive by its join handle, which the group holds. mp_task_cancel()
     * only queues the task; its completion takes the lock later, in member_done(). */
    for (mp_group_task *m = g->run_head; m; m = m->next)
        mp_task_cancel(&m->task);
    mp__spin_unlock(&g->lock);
}

/* Cut m off from the group and give up its join handle. m may be released when this
 * returns. */
static void detach_member(mp_group_task *m)
{
    mp__spin_lock(&m->lock);
    m->group = NULL;
    mp__spin_unlock(&m->lock);
    mp_detach(&m->task);
}

void mp_task_group_destroy(mp_task_group *g)
{
    mp__spin_lock(&g->lock);
    mp_group_task *run = g->run_head, *done = g->done_head;
    /* DETACHED keeps member_done() off the links while we walk them below. */
    for (mp_group_task *m = run; m; m = m->next) {
        m->state = G_DETACHED;
        mp_task_cancel(&m->task);
    }
    for (mp_group_task *m = done; m; m = m->next)
        m->state = G_DETACHED;
    g->run_head = g->run_tail = g->done_head = g->done_tail = NULL;
    g->len = 0;
    mp_waker joiner = g->joiner;
    g->joiner = (mp_waker){0};
    mp__spin_unlock(&g->lock);
    for (mp_group_task *m = run, *next; m; m = next) {
        next = m->next; /* before m may be released */
        detach_member(m);
    }
    for (mp_group_task *m = done, *next; m; m = next) {
        next = m->next;
        detach_member(m);
    }
    mp_waker_drop(&joiner);
}
