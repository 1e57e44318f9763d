/* owned.c: the registry of live tasks, so that shutdown can reach tasks that sit idle with
 * their wakers held somewhere else (Tokio's OwnedTasks). Sharded doubly linked lists, each
 * under a spinlock held for a few instructions; a worker binds what it spawns to its own
 * shard, so the lock is normally uncontended. The registry holds one reference to each task
 * from spawn until completion.
 *
 * Closing a shard (under its lock) is what makes "no new spawns after shutdown" exact: a
 * spawn either bound before the close, and shutdown will find it, or fails with -ESHUTDOWN.
 */
#include "internal.h"

int mp__owned_init(mp__owned *o, unsigned workers)
{
    uint32_t n = 4;
    while (n < 2 * workers)
        n *= 2;
    o->shards = aligned_alloc(MP__CACHE_LINE, n * sizeof *o->shards);
    if (!o->shards)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        atomic_init(&o->shards[i].lock, 0);
        o->shards[i].closed = false;
        o->shards[i].head = NULL;
        o->shards[i].count = 0;
    }
    o->mask = n - 1;
    atomic_init(&o->next, 0);
    return 0;
}

void mp__owned_destroy(mp__owned *o)
{
    free(o->shards);
}

int mp__owned_bind(mp__owned *o, mp_task *t, int worker)
{
    uint32_t idx = worker >= 0
                       ? (uint32_t)worker & o->mask
                       /* Relaxed: only spreads spawns from outside over the shards. */
                       : atomic_fetch_add_explicit(&o->next, 1, memory_order_relaxed) & o->mask;
    mp__owned_shard *s = &o->shards[idx];
    mp__spin_lock(&s->lock);
    if (s->closed) {
        mp__spin_unlock(&s->lock);
        return -ESHUTDOWN;
    }
    t->shard = idx;
    MP__LIST_PUSH_FRONT(s->head, t, owned_prev, owned_next);
    s->count++;
    mp__spin_unlock(&s->lock);
    return 0;
}

/* A task that is not linked points at itself, so remove after shutdown's pop is a no-op. */
static void unlink_locked(mp__owned_shard *s, mp_task *t)
{
    MP__LIST_UNLINK(s->head, t, owned_prev, owned_next);
    t->owned_prev = t->owned_next = t;
    s->count--;
}

bool mp__owned_remove(mp__owned *o, mp_task *t)
{
    mp__owned_shard *s = &o->shards[t->shard];
    mp__spin_lock(&s->lock);
    bool linked = t->owned_next != t;
    if (linked)
        unlink_locked(s, t);
    mp__spin_unlock(&s->lock);
    return linked;
}

void mp__owned_close(mp__owned *o)
{
    for (uint32_t i = 0; i <= o->mask; i++) {
        mp__spin_lock(&o->shards[i].lock);
        o->shards[i].closed = true;
        mp__spin_unlock(&o->shards[i].lock);
    }
}

void mp__owned_shutdown_all(mp__owned *o)
{
    for (uint32_t i = 0; i <= o->mask; i++) {
        mp__owned_shard *s = &o->shards[i];
        for (;;) {
            mp__spin_lock(&s->lock);
            mp_task *t = s->head;
            if (t)
                unlink_locked(s, t);
            mp__spin_unlock(&s->lock);
            if (!t)
                break;
            /* The registry's reference now belongs to the shutdown of t. */
            mp__task_shutdown(t);
        }
    }
}

uint64_t mp__owned_count(mp__owned *o)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i <= o->mask; i++) {
        mp__spin_lock(&o->shards[i].lock);
        n += o->shards[i].count;
        mp__spin_unlock(&o->shards[i].lock);
    }
    return n;
}
