/* A user of magpie_core.h alone: built with -std=c11 -pedantic -Werror, no feature macros,
 * and a uv.h on the include path that fails the build if anything includes it. Compiled, not
 * run: the runtime's objects bring libuv at link time; pool_only.c links and runs. */
#include "magpie_core.h"

#include <stdio.h>

typedef struct hello {
    mp_task task;
    int ran;
} hello;

static mp_poll hello_poll(mp_task *task, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    mp_container_of(task, hello, task)->ran = 1;
    return MP_READY;
}

static const mp_task_vtable hello_vt = {.poll = hello_poll};

int main(void)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    mp_runtime *rt;
    if (mp_runtime_new(&rt, &cfg) != 0)
        return 1;
    hello h = {.ran = 0};
    mp_task_init(&h.task, &hello_vt);
    int rc = mp_block_on(rt, &h.task);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    mp_runtime_free(rt);
    mp_oneshot o;
    mp_oneshot_init(&o);
    mp_notify n;
    mp_notify_init(&n);
    printf("ran %d, polled %llu\n", h.ran, (unsigned long long)st.total.polled);
    return rc == 0 && h.ran ? 0 : 1;
}
