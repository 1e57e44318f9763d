/* Tests of runtime/src/blockcache.c: per-thread caches of memory blocks. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"
#include "test_util.h"

static mp_block_cache small = MP_BLOCK_CACHE_INIT(256, 3);

Test(blockcache, a_block_given_back_is_the_next_taken_up_to_keep)
{
    mp_block_cache_trim();
    void *a = mp_block_cache_take(&small), *b = mp_block_cache_take(&small);
    void *c = mp_block_cache_take(&small), *d = mp_block_cache_take(&small);
    cr_assert(a && b && c && d);
    memset(a, 1, 256); /* the whole size is ours */
    mp_block_cache_give(&small, a);
    mp_block_cache_give(&small, b);
    mp_block_cache_give(&small, c);
    mp_block_cache_give(&small, d); /* past keep (3): freed */
    cr_assert_eq(mp_block_cache_take(&small), c, "newest first");
    cr_assert_eq(mp_block_cache_take(&small), b);
    cr_assert_eq(mp_block_cache_take(&small), a);
    void *e = mp_block_cache_take(&small); /* the cache is empty: malloc */
    cr_assert_not_null(e);
    cr_assert(e != a && e != b && e != c);
    mp_block_cache_give(&small, NULL); /* ignored */
    free(a);
    free(b);
    free(c);
    free(e);
}

static void *give_here(void *arg)
{
    mp_block_cache_give(&small, arg); /* cached by this thread, freed at its exit */
    void *mine = mp_block_cache_take(&small);
    cr_assert_eq(mine, arg);
    mp_block_cache_give(&small, mine);
    return NULL;
}

Test(blockcache, a_block_moves_between_threads_and_a_leaving_thread_frees_its_own)
{
    void *a = mp_block_cache_take(&small);
    pthread_t th;
    pthread_create(&th, NULL, give_here, a);
    pthread_join(th, NULL); /* a was freed at that thread's exit (ASan's leak check sees it) */
    mp_block_cache_trim();
}

Test(blockcache, past_the_last_cache_blocks_are_plain_malloc_and_free)
{
    static mp_block_cache many[MP_BLOCK_CACHES + 2];
    for (unsigned i = 0; i < MP_BLOCK_CACHES + 2; i++) {
        many[i] = (mp_block_cache)MP_BLOCK_CACHE_INIT(64, 2);
        void *p = mp_block_cache_take(&many[i]);
        cr_assert_not_null(p);
        mp_block_cache_give(&many[i], p);
        void *q = mp_block_cache_take(&many[i]);
        cr_assert_not_null(q);
        free(q);
    }
    mp_block_cache_trim();
}
