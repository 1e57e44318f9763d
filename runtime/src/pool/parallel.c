/*
 * Data-parallel loops built on mp_pool_join: a range splits in halves, recursively, until a
 * piece has at most `grain` indices, and each piece runs the body. Halving keeps the deques
 * shallow (log2 of the pieces) and gives thieves the biggest remaining half first. The reduce
 * keeps the left half's accumulator in the caller's slot and the right one in the splitting
 * frame, then combines them in index order, so only associativity is required.
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
    void *arg;
};

struct piece {
    const struct loop *loop;
    size_t lo, hi;
    void *acc; /* reduce only: where this piece's result goes */
};

static size_t pick_grain(size_t n, size_t grain)
{
    if (grain != 0)
        return grain;
    mp__pool_worker *w = mp__pool_current;
    size_t pieces = 8 * (w != NULL ? w->pool->nworkers : 1);
    grain = (n + pieces - 1) / pieces;
    return grain != 0 ? grain : 1;
}

static void for_piece(void *v)
{
    const struct piece *p = v;
    if (p->hi - p->lo <= p->loop->grain) {
        p->loop->body(p->lo, p->hi, p->loop->arg);
        return;
    }
    size_t mid = p->lo + (p->hi - p->lo) / 2;
    struct piece left = {p->loop, p->lo, mid, NULL};
    struct piece right = {p->loop, mid, p->hi, NULL};
    mp_pool_join(for_piece, &left, for_piece, &right);
}

int mp_pool_parallel_for(size_t begin, size_t end, size_t grain, mp_pool_range_fn body, void *arg)
{
    if (begin > end)
        return -EINVAL;
    if (begin == end)
        return 0;
    struct loop loop = {.body = body, .grain = pick_grain(end - begin, grain), .arg = arg};
    struct piece all = {&loop, begin, end, NULL};
    for_piece(&all);
    return 0;
}

static void reduce_piece(void *v)
{
    const struct piece *p = v;
    const struct loop *l = p->loop;
    if (p->hi - p->lo <= l->grain) {
        memcpy(p->acc, l->identity, l->acc_size);
        l->fold(p->lo, p->hi, p->acc, l->arg);
        return;
    }
    alignas(max_align_t) unsigned char right_acc[MP_POOL_REDUCE_MAX_ACC];
    size_t mid = p->lo + (p->hi - p->lo) / 2;
    struct piece left = {l, p->lo, mid, p->acc};
    struct piece right = {l, mid, p->hi, right_acc};
    mp_pool_join(reduce_piece, &left, reduce_piece, &right);
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
                        .grain = pick_grain(end - begin, grain),
                        .arg = arg};
    /* The result slot may be unaligned or smaller than our scratch: reduce into an aligned
     * local and copy out. */
    alignas(max_align_t) unsigned char acc[MP_POOL_REDUCE_MAX_ACC];
    struct piece all = {&loop, begin, end, acc};
    reduce_piece(&all);
    memcpy(result, acc, acc_size);
    return 0;
}
