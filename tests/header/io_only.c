/* A user of magpie.h (magpie_core.h and magpie_io.h): built with -std=c11 -pedantic -Werror,
 * no feature macros, and a uv.h on the include path that fails the build if anything includes
 * it, as core_only.c is. Linked (with libuv, which the runtime uses) and run: a task that
 * waits on a timer, and a stream's storage embedded in the caller's struct. */
#include "magpie.h"

#include <stdio.h>

typedef struct sleeper {
    mp_task task;
    mp_timer timer;
    mp_tcp unused; /* the stream embeds its libuv handle without <uv.h> */
    uint64_t deadline;
    int polls;
} sleeper;

static mp_poll sleeper_poll(mp_task *task, mp_context *cx)
{
    sleeper *s = mp_container_of(task, sleeper, task);
    s->polls++;
    return mp_timer_poll(&s->timer, s->deadline, cx);
}

static const mp_task_vtable sleeper_vt = {.poll = sleeper_poll};

int main(void)
{
    mp_runtime *rt;
    if (mp_runtime_new(&rt, NULL) != 0)
        return 1;
    sleeper s = {.polls = 0};
    mp_task_init(&s.task, &sleeper_vt);
    mp_timer_init(&s.timer, rt);
    s.deadline = mp_now_ms() + 2;
    mp_block_on(rt, &s.task);
    mp_runtime_free(rt);
    if (s.polls < 1 || mp_now_ms() < s.deadline || MP_EOF >= 0) {
        fprintf(stderr, "io_only: %d polls\n", s.polls);
        return 1;
    }
    return 0;
}
