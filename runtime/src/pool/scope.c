/*
 * Scopes: a body spawns any number of jobs, and mp_pool_scope returns only when all of them
 * (and whatever they spawned) have finished. A count latch holds one count for the body and one
 * per job not yet finished; the last decrement sets the latch, waking the scope's owner if it
 * sleeps (latch.c). The owner, meanwhile, works: it waits with mp__pool_wait_until, which pops
 * the spawns left on its own deque first.
 *
 * Spawned jobs live in mp_pool_task storage the caller provides, so spawning allocates nothing;
 * the storage must outlive the scope. A job's last access to its storage and to the scope is
 * the decrement: after it the scope may return and both may be reused.
 */
#include "pool/pool_internal.h"

struct mp_pool_scope_ctx {
    mp__pool_count_latch latch;
    mp_pool *pool; /* immutable; NULL when the scope runs outside a pool, sequentially */
};

struct spawn_job {
    mp__pool_job job;
    void (*fn)(mp_pool_scope_ctx *scope, void *arg);
    void *arg;
    mp_pool_scope_ctx *scope;
};

_Static_assert(sizeof(struct spawn_job) <= sizeof(mp_pool_task),
               "mp_pool_task too small for a spawned job");
_Static_assert(_Alignof(struct spawn_job) <= _Alignof(mp_pool_task),
               "mp_pool_task under-aligned for a spawned job");

static void spawn_execute(mp__pool_job *job)
{
    struct spawn_job *s = mp_container_of(job, struct spawn_job, job);
    mp_pool_scope_ctx *scope = s->scope;
    s->fn(scope, s->arg);
    mp__pool_count_latch_decrement(scope->pool, &scope->latch);
}

void mp_pool_scope(mp_pool_scope_fn body, void *arg)
{
    mp__pool_worker *w = mp__pool_current;
    mp_pool_scope_ctx scope;
    scope.pool = w != NULL ? w->pool : NULL;
    mp__pool_count_latch_init(&scope.latch, w != NULL ? w->index : 0);
    body(&scope, arg);
    if (w == NULL)
        return; /* sequential: every spawn already ran inline */
    mp__pool_count_latch_decrement(scope.pool, &scope.latch);
    mp__pool_wait_until(w, &scope.latch.latch.core);
}

void mp_pool_spawn(mp_pool_scope_ctx *scope, mp_pool_task *task,
                   void (*fn)(mp_pool_scope_ctx *scope, void *arg), void *arg)
{
    mp__pool_worker *w = mp__pool_current;
    if (scope->pool == NULL || w == NULL || w->pool != scope->pool) {
        fn(scope, arg); /* no worker of this scope's pool here: run it now */
        return;
    }
    struct spawn_job *s = (struct spawn_job *)(void *)task;
    s->job.execute = spawn_execute;
    s->fn = fn;
    s->arg = arg;
    s->scope = scope;
    mp__pool_count_latch_increment(&scope->latch);
    if (mp__unlikely(mp__pool_worker_push(w, &s->job) != 0))
        spawn_execute(&s->job); /* deque full and cannot grow: run it here */
}
