/* tcache.c: the registry and thread-exit hook every per-thread cache of the runtime shares
 * (readbuf.c's read buffers, blockcache.c's mp_block_cache).
 *
 * A per-thread cache is a thread-local struct that embeds an mp__tcache. Its thread's first
 * use registers it (mp__tcache_register()): onto its class's registry, which a stats call
 * walks under the class's mutex, and onto the thread's own list of caches. One pthread key
 * per process, whatever the number of classes, calls thread_exit() when the thread ends: each
 * of the thread's caches leaves its registry and hands its counters on (retire_locked, under
 * the same mutex, so that a stats call counts them once, before or after), then frees what it
 * keeps (drain, without the lock). The cache's own take and give never look at the registry:
 * they check `registered`, a plain thread-local flag, and nothing else of this file.
 *
 * A cache used again after thread_exit() (a later key's destructor freeing a stream, say)
 * registers again; the key's value is set again with it, so POSIX calls the destructor once
 * more (up to PTHREAD_DESTRUCTOR_ITERATIONS rounds).
 */
#include "internal.h"

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Thread_local mp__tcache *thread_caches; /* owner only: this thread's registered caches */

static void thread_exit(void *arg)
{
    (void)arg;
    mp__tcache *tc;
    while ((tc = thread_caches) != NULL) {
        thread_caches = tc->thread_next;
        mp__tcache_class *cls = tc->cls;
        pthread_mutex_lock(&cls->mu);
        MP__LIST_UNLINK(cls->head, tc, prev, next);
        tc->prev = tc->next = NULL;
        if (cls->retire_locked != NULL)
            cls->retire_locked(tc);
        pthread_mutex_unlock(&cls->mu);
        tc->registered = false;
        cls->drain(tc); /* may free the struct tc sits in: tc is not touched after */
    }
}

static void key_create(void)
{
    if (pthread_key_create(&key, thread_exit) != 0)
        MP__UNREACHABLE("%s", "pthread_key_create: no key left for the per-thread caches");
}

void mp__tcache_register(mp__tcache_class *cls, mp__tcache *tc)
{
    pthread_once(&key_once, key_create);
    tc->cls = cls;
    pthread_mutex_lock(&cls->mu);
    MP__LIST_PUSH_FRONT(cls->head, tc, prev, next);
    pthread_mutex_unlock(&cls->mu);
    if (thread_caches == NULL)
        pthread_setspecific(key, &thread_caches); /* any non-NULL value: the destructor runs */
    tc->thread_next = thread_caches;
    thread_caches = tc;
    tc->registered = true;
}
