/*
 * Data-parallel loops built on mp_pool_join: a range splits in halves, recursively, and each
 * piece runs the body. Halving keeps the deques shallow (log2 of the pieces) and gives thieves
 * the biggest remaining half first. The reduce keeps the left half's accumulator in the
 * caller's slot and the right one in the splitting frame, then combines them in index order,
 * so only associativity is required.
 *
 * When to stop splitting: with a grain, at grain indices or fewer. Without one, the splits
 * follow demand, so that a loop nobody steals from costs a few joins and a loop whose workers
 * run out of work near its end still has small pieces to give them:
 *   - Rayon's adaptive splitter: a range may split log2(workers) times, and a half that was
 *     stolen (it runs on another worker than the one that split it) gets that allowance back;
 *   - then lazy binary splitting (Tzannes, Caragea, Barua and Vishkin, PPoPP 2010): a piece
 *     that may not split runs in 16 chunks, and after each, if some worker is idle and our
 *     deque is empty (nothing of ours is left to steal), the rest splits in two.
 * A fixed number of pieces cannot do both: with 8 per worker, a 2-worker sum over 10^7
 * int64 waited ~20% of its time for the last big piece (a worker woken late leaves the other
 * with a whole piece at the end), and more pieces cost every loop that is not stolen from.
 */
#include <errno.h>
#include <string.h>

#include "pool/pool_internal.h"

struct loop {
    mp_pool_range_fn body;
    mp_pool_fold_fn fold;
    mp_pool_combine_fn combine;
    const void *identity;
    size_t acc_size;
    size_t grain;
    size_t min_piece; /* grain 0: pieces and chunks are never smaller than this */
    void *arg;
};

struct piece {
    const struct loop *loop;
    size_t lo, hi;
    void *acc;       /* reduce only: where this piece's result goes */
    unsigned splits; /* adaptive: halvings left, unless stolen */
    int split_by;    /* adaptive: the worker that split it off (mp_pool_worker_index) */
    size_t chunk;    /* adaptive, once it runs: indices per chunk; 0 before */
};

/* A piece runs in 16 chunks; without a grain, no piece or chunk is smaller than 1/64 of
 * the loop's share of one worker. That floor keeps the checks between chunks (a load of the
 * sleep counter word, which every idle worker writes) and the joins of pieces stolen again
 * and again to about 64 per worker per loop: on 16 workers, a sum over 10^7 int64 without
 * it split stolen pieces down to 600-index chunks and took 0.66 ms against 0.36 with it. */
enum { CHUNKS_PER_PIECE = 16, PIECES_PER_WORKER = 64 };

static unsigned workers_here(void)
{
    mp__pool_worker *w = mp__pool_current;
    return w != NULL ? w->pool->nworkers : 1;
}

/* Whether p splits further; updates its allowance for the halves (Rayon's Splitter). */
static bool split_again(struct piece *p)
{
    size_t n = p->hi - p->lo;
    if (n < 2)
        return false;
    if (p->loop->grain != 0)
        return n > p->loop->grain;
    if (n < 2 * p->loop->min_piece)
        return false;
    if (mp_pool_worker_index() != p->split_by) {
        /* Stolen: a worker ran out of work, so split finely enough to feed the others. */
        unsigned w = workers_here();
        p->splits = p->splits / 2 > w ? p->splits / 2 : w;
        return true;
    }
    if (p->splits > 0) {
        p->splits /= 2;
        return true;
    }
    if (p->chunk == 0)
        return false; /* it has not run a chunk yet */
    mp__pool_worker *w = mp__pool_current;
    return w != NULL && mp__pool_sleep_someone_idle(&w->pool->sleep) &&
           mp__pool_deque_is_empty(&w->deque);
}

/* How many indices of p to run now: all of them with a grain, else the next chunk. */
static size_t next_step(struct piece *p)
{
    size_t n = p->hi - p->lo;
    if (p->loop->grain != 0)
        return n;
    if (p->chunk == 0) {
        p->chunk = (n + CHUNKS_PER_PIECE - 1) / CHUNKS_PER_PIECE;
        if (p->chunk < p->loop->min_piece)
            p->chunk = p->loop->min_piece;
    }
    return p->chunk < n ? p->chunk : n;
}

static struct piece half(const struct piece *p, size_t lo, size_t hi, void *acc)
{
    return (struct piece){p->loop, lo, hi, acc, p->splits, mp_pool_worker_index(), 0};
}

static void for_piece(void *v)
{
    struct piece *p = v;
    while (!split_again(p)) {
        size_t step = next_step(p);
        p->loop->body(p->lo, p->lo + step, p->loop->arg);
        p->lo += step;
        if (p->lo == p->hi)
            return;
    }
    size_t mid = p->lo + (p->hi - p->lo) / 2;
    struct piece left = half(p, p->lo, mid, NULL);
    struct piece right = half(p, mid, p->hi, NULL);
    mp_pool_join(for_piece, &left, for_piece, &right);
}

static size_t min_piece(size_t n, size_t grain)
{
    if (grain != 0)
        return grain;
    size_t m = n / ((size_t)PIECES_PER_WORKER * workers_here());
    return m != 0 ? m : 1;
}

/* The whole range: as if split off by this worker, with log2(workers) halvings allowed
 * (Rayon starts at the thread count and halves the count per split, the same depth). */
static struct piece whole(const struct loop *loop, size_t begin, size_t end, void *acc)
{
    return (struct piece){loop, begin, end, acc, workers_here(), mp_pool_worker_index(), 0};
}

int mp_pool_parallel_for(size_t begin, size_t end, size_t grain, mp_pool_range_fn body, void *arg)
{
    if (begin > end)
        return -EINVAL;
    if (begin == end)
        return 0;
    struct loop loop = {
        .body = body, .grain = grain, .min_piece = min_piece(end - begin, grain), .arg = arg};
    struct piece all = whole(&loop, begin, end, NULL);
    for_piece(&all);
    return 0;
}

/* Folds [lo, hi) into a fresh copy of the identity at acc. */
static void fold_fresh(const struct loop *l, size_t lo, size_t hi, void *acc)
{
    memcpy(acc, l->identity, l->acc_size);
    l->fold(lo, hi, acc, l->arg);
}

static void reduce_piece(void *v)
{
    struct piece *p = v;
    const struct loop *l = p->loop;
    alignas(max_align_t) unsigned char right_acc[MP_POOL_REDUCE_MAX_ACC];
    bool folded = false; /* p->acc holds the chunks already run, which precede [lo, hi) */
    while (!split_again(p)) {
        size_t step = next_step(p);
        if (!folded) {
            fold_fresh(l, p->lo, p->lo + step, p->acc);
            folded = true;
        } else {
            /* Each chunk from the identity: fold's contract says acc starts as one. */
            fold_fresh(l, p->lo, p->lo + step, right_acc);
            l->combine(p->acc, right_acc, l->arg);
        }
        p->lo += step;
        if (p->lo == p->hi)
            return;
    }
    alignas(max_align_t) unsigned char left_acc[MP_POOL_REDUCE_MAX_ACC];
    size_t mid = p->lo + (p->hi - p->lo) / 2;
    struct piece left = half(p, p->lo, mid, folded ? left_acc : p->acc);
    struct piece right = half(p, mid, p->hi, right_acc);
    mp_pool_join(reduce_piece, &left, reduce_piece, &right);
    if (folded)
        l->combine(p->acc, left_acc, l->arg);
    l->combine(p->acc, right_acc, l->arg);
}

int mp_pool_parallel_reduce(size_t begin, size_t end, size_t grain, size_t acc_size,
                            const void *identity, mp_pool_fold_fn fold, mp_pool_combine_fn combine,
                            void *arg, void *result)
{
    if (begin > end || acc_size == 0 || acc_size > MP_POOL_REDUCE_MAX_ACC)
        return -EINVAL;
    if (begin == end) {
        memcpy(result, identity, acc_size);
        return 0;
    }
    struct loop loop = {.fold = fold,
                        .combine = combine,
                        .identity = identity,
                        .acc_size = acc_size,
                        .grain = grain,
                        .min_piece = min_piece(end - begin, grain),
                        .arg = arg};
    /* The result slot may be unaligned or smaller than our scratch: reduce into an aligned
     * local and copy out. */
    alignas(max_align_t) unsigned char acc[MP_POOL_REDUCE_MAX_ACC];
    struct piece all = whole(&loop, begin, end, acc);
    reduce_piece(&all);
    memcpy(result, acc, acc_size);
    return 0;
}
