/* readbuf.c: the read buffers of TCP streams (tcp.c).
 *
 * A stream holds its buffer only while there is something to read or to consume: it is taken
 * just before a read() and given back when the task has consumed all of it and is about to
 * wait for the next edge, so an idle keep-alive connection holds none. That is one take and
 * one give per keep-alive request, so buffers of the default size go first to a cache of the
 * calling thread's (at most MP__TCP_LOCAL_BUFS: a worker has one out at a time in that
 * pattern, since a task gives its buffer back before it waits), with no lock and no atomic
 * read-modify-write; past that to a process-wide free list of at most POOL_MAX under a spin
 * lock; past that to free(). Other sizes go straight to malloc and free. A thread's cache
 * goes to the free list when the thread exits (tcache.c's exit hook). A buffer taken on
 * one thread may be given on another (a stream handed between tasks, a task that moved
 * workers): each thread counts what it took minus what it gave, and only the sum means
 * anything.
 */
#include "internal.h"

enum { DEFAULT_BUF = MP__TCP_DEFAULT_BUF, POOL_MAX = 64 };

/* The free list of DEFAULT_BUF buffers, linked through their first bytes. */
static struct {
    _Atomic uint32_t lock;
    void *head;
    size_t count;
} pool;
/* Buffers taken minus given by threads that have exited: guarded by caches.mu, which a thread's
 * exit holds while it moves its count here and off the registry. */
static int64_t bufs_in_use;

/* A thread's cache. Written by its thread only; count and net are atomics so that
 * mp_tcp_buffer_stats() may read them, but the owner updates them with a relaxed load and
 * store (a plain add), never a read-modify-write. */
typedef struct buf_cache {
    mp__tcache tc;
    void *bufs[MP__TCP_LOCAL_BUFS];
    _Atomic size_t count;
    _Atomic int64_t net; /* taken minus given on this thread; negative when others took */
} buf_cache;

static _Thread_local buf_cache local;

static void pool_put(void *b)
{
    mp__spin_lock(&pool.lock);
    if (pool.count < POOL_MAX) {
        *(void **)b = pool.head;
        pool.head = b;
        pool.count++;
        b = NULL;
    }
    mp__spin_unlock(&pool.lock);
    free(b);
}

/* Thread exit, under caches.mu: the cache's count to the exited threads' one. */
static void cache_retire_locked(mp__tcache *tc)
{
    buf_cache *bc = mp_container_of(tc, buf_cache, tc);
    bufs_in_use += atomic_load_explicit(&bc->net, memory_order_relaxed);
    atomic_store_explicit(&bc->net, 0, memory_order_relaxed);
}

/* Thread exit, after: the cache's buffers to the free list. */
static void cache_drain(mp__tcache *tc)
{
    buf_cache *bc = mp_container_of(tc, buf_cache, tc);
    size_t n = atomic_load_explicit(&bc->count, memory_order_relaxed);
    atomic_store_explicit(&bc->count, 0, memory_order_relaxed);
    while (n != 0)
        pool_put(bc->bufs[--n]);
}

static mp__tcache_class caches = MP__TCACHE_CLASS_INIT(cache_retire_locked, cache_drain);

/* Owner-only update of one of the cache's counters. */
static void local_add(_Atomic int64_t *v, int64_t d)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + d,
                          memory_order_relaxed);
}

char *mp__readbuf_take(size_t cap)
{
    void *b = NULL;
    if (!local.tc.registered)
        mp__tcache_register(&caches, &local.tc);
    if (cap == DEFAULT_BUF) {
        size_t n = atomic_load_explicit(&local.count, memory_order_relaxed);
        if (n != 0) {
            b = local.bufs[n - 1];
            atomic_store_explicit(&local.count, n - 1, memory_order_relaxed);
        } else {
            mp__spin_lock(&pool.lock);
            b = pool.head;
            if (b != NULL) {
                pool.head = *(void **)b;
                pool.count--;
            }
            mp__spin_unlock(&pool.lock);
        }
    }
    if (b == NULL)
        b = malloc(cap);
    if (b != NULL)
        local_add(&local.net, 1);
    return b;
}

void mp__readbuf_give(char *b, size_t cap)
{
    if (b == NULL)
        return;
    if (!local.tc.registered)
        mp__tcache_register(&caches, &local.tc);
    local_add(&local.net, -1);
    if (cap != DEFAULT_BUF) {
        free(b);
        return;
    }
    size_t n = atomic_load_explicit(&local.count, memory_order_relaxed);
    if (n < MP__TCP_LOCAL_BUFS) {
        local.bufs[n] = b;
        atomic_store_explicit(&local.count, n + 1, memory_order_relaxed);
        return;
    }
    pool_put(b);
}

void mp_tcp_buffer_trim(void)
{
    size_t n = atomic_load_explicit(&local.count, memory_order_relaxed);
    atomic_store_explicit(&local.count, 0, memory_order_relaxed);
    while (n != 0)
        free(local.bufs[--n]);
    mp__spin_lock(&pool.lock);
    void *b = pool.head;
    pool.head = NULL;
    pool.count = 0;
    mp__spin_unlock(&pool.lock);
    while (b != NULL) {
        void *next = *(void **)b;
        free(b);
        b = next;
    }
}

void mp_tcp_buffer_stats(size_t *in_use, size_t *pooled)
{
    int64_t used = 0;
    size_t kept = 0;
    pthread_mutex_lock(&caches.mu);
    for (mp__tcache *tc = caches.head; tc; tc = tc->next) {
        buf_cache *bc = mp_container_of(tc, buf_cache, tc);
        used += atomic_load_explicit(&bc->net, memory_order_relaxed);
        kept += atomic_load_explicit(&bc->count, memory_order_relaxed);
    }
    used += bufs_in_use;
    pthread_mutex_unlock(&caches.mu);
    if (in_use != NULL)
        *in_use = used > 0 ? (size_t)used : 0; /* racing counts may dip for a moment */
    if (pooled != NULL) {
        mp__spin_lock(&pool.lock);
        *pooled = kept + pool.count;
        mp__spin_unlock(&pool.lock);
    }
}
