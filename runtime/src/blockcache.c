/* blockcache.c: per-thread caches of memory blocks of one size (mp_block_cache in
 * magpie_core.h), for what tasks take and give back once per request: a request's state, an
 * output buffer. malloc's path for blocks of a few KiB costs hundreds of instructions and, with
 * a block taken on one worker and freed on another, a cross-thread free; a small cache of the
 * thread's costs a few, with no lock and no atomic read-modify-write.
 *
 * Each cache gets a small number (its id) the first time it is used, by a CAS on the cache's
 * id from 0, from a process-wide counter; every thread has an array of slots indexed by it in
 * thread-local storage. A block given on another thread than the one that took it just moves
 * between caches. A thread's blocks are freed when it exits (tcache.c's exit hook, which
 * registers the thread at its first give that keeps a block); the main thread's stay
 * reachable until the process ends. No statistics: the registry is only the exit hook's. */
#include "internal.h"

typedef struct slot {
    void *blocks[MP_BLOCK_CACHE_KEEP];
    unsigned n;
} slot;

typedef struct thread_slots {
    mp__tcache tc;
    slot slots[MP_BLOCK_CACHES];
} thread_slots;

static _Thread_local thread_slots local;
static _Atomic unsigned next_id; /* ids handed out, from 1 */

/* The thread's exit (tcache.c), or mp_block_cache_trim() on it. */
static void drain(mp__tcache *tc)
{
    thread_slots *ts = mp_container_of(tc, thread_slots, tc);
    for (unsigned i = 0; i < MP_BLOCK_CACHES; i++)
        while (ts->slots[i].n != 0)
            free(ts->slots[i].blocks[--ts->slots[i].n]);
}

static mp__tcache_class threads = MP__TCACHE_CLASS_INIT(NULL, drain);

/* id_of()'s first use of a cache: its number, by a CAS from 0. */
static unsigned id_assign(mp_block_cache *c)
{
    unsigned mine = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed) + 1;
    if (mine > MP_BLOCK_CACHES)
        mine = MP_BLOCK_CACHES + 1; /* none left: never cached */
    unsigned expected = 0;
    /* Relaxed: see id_of(); the loser takes the winner's number. */
    if (!atomic_compare_exchange_strong_explicit(&c->id_, &expected, mine, memory_order_relaxed,
                                                 memory_order_relaxed))
        mine = expected;
    return mine > MP_BLOCK_CACHES ? UINT_MAX : mine - 1;
}

/* The cache's slot index, 0 .. MP_BLOCK_CACHES - 1; UINT_MAX when the process has used up its
 * caches (then the cache is plain malloc and free). The slow paths' (the fast ones read the
 * number themselves). */
static inline unsigned id_of(mp_block_cache *c)
{
    /* Relaxed: the id is a number, published with nothing else; a racing first use sees
     * either 0 (and CASes in id_assign()) or the number. */
    unsigned id = atomic_load_explicit(&c->id_, memory_order_relaxed);
    if (id - 1 < MP_BLOCK_CACHES) /* 0 wraps round: not assigned yet */
        return id - 1;
    return id != 0 ? UINT_MAX : id_assign(c);
}

/* The first take of a cache (its number not yet assigned), an empty slot, or a process out
 * of caches. Out of line, as give_slow(): the fast paths below then save no register and make
 * no call (each runs once per request or twice, loadtest/http/instructions.sh). */
__attribute__((noinline)) static void *take_slow(mp_block_cache *c)
{
    unsigned id = id_of(c);
    if (id != UINT_MAX && local.slots[id].n != 0)
        return local.slots[id].blocks[--local.slots[id].n];
    return malloc(c->size);
}

void *mp_block_cache_take(mp_block_cache *c)
{
    /* Relaxed: see id_of(). 0 (not assigned) wraps round and goes the slow way. */
    unsigned id = atomic_load_explicit(&c->id_, memory_order_relaxed) - 1;
    if (id < MP_BLOCK_CACHES) {
        slot *s = &local.slots[id];
        if (s->n != 0)
            return s->blocks[--s->n];
    }
    return take_slow(c);
}

/* The first give of a thread (it registers for its exit), a full slot, a cache not numbered
 * yet, or a process out of caches. */
__attribute__((noinline)) static void give_slow(mp_block_cache *c, void *block)
{
    unsigned id = id_of(c);
    unsigned keep = c->keep < MP_BLOCK_CACHE_KEEP ? c->keep : MP_BLOCK_CACHE_KEEP;
    if (id == UINT_MAX || local.slots[id].n >= keep) {
        free(block);
        return;
    }
    if (!local.tc.registered)
        mp__tcache_register(&threads, &local.tc);
    local.slots[id].blocks[local.slots[id].n++] = block;
}

void mp_block_cache_give(mp_block_cache *c, void *block)
{
    if (block == NULL)
        return;
    unsigned id = atomic_load_explicit(&c->id_, memory_order_relaxed) - 1; /* as in take */
    if (id < MP_BLOCK_CACHES && local.tc.registered) {
        slot *s = &local.slots[id];
        unsigned keep = c->keep < MP_BLOCK_CACHE_KEEP ? c->keep : MP_BLOCK_CACHE_KEEP;
        if (s->n < keep) {
            s->blocks[s->n++] = block;
            return;
        }
    }
    give_slow(c, block);
}

void mp_block_cache_trim(void)
{
    drain(&local.tc);
}
