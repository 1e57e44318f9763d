/* hist.c: HdrHistogram's log-linear layout (see hist.h), with a unit of 1 ns.
 *
 * Bucket b (b >= 0) covers [SUB_COUNT << (b - 1), SUB_COUNT << b) in steps of 1 << b, except
 * bucket 0, which covers [0, SUB_COUNT) in steps of 1. Only the upper half of each bucket past
 * the first is stored (its lower half is the bucket before), so counter
 *   (b + 1) * SUB_HALF + (sub - SUB_HALF)
 * holds sub-bucket sub of bucket b, with sub = value >> b in [SUB_HALF, SUB_COUNT).
 */
#include "hist.h"

#include <string.h>

static unsigned bucket_of(uint64_t v)
{
    /* The position of v's highest bit above the first bucket's SUB_COUNT range; ORing the mask
     * in maps every small value to bucket 0. */
    uint64_t x = v | (uint64_t)(LD_HIST_SUB_COUNT - 1);
    unsigned pow2ceil = 64u - (unsigned)__builtin_clzll(x);
    return pow2ceil - (LD_HIST_SUB_HALF_BITS + 1);
}

size_t ld_hist_index(uint64_t ns)
{
    if (ns > LD_HIST_MAX_NS)
        ns = LD_HIST_MAX_NS;
    unsigned b = bucket_of(ns);
    unsigned sub = (unsigned)(ns >> b);
    return ((size_t)(b + 1) << LD_HIST_SUB_HALF_BITS) + sub - LD_HIST_SUB_HALF;
}

uint64_t ld_hist_lowest_at(size_t index)
{
    unsigned b = (unsigned)(index >> LD_HIST_SUB_HALF_BITS);
    unsigned sub = (unsigned)(index & (LD_HIST_SUB_HALF - 1)) + LD_HIST_SUB_HALF;
    if (b == 0) /* the lower half of bucket 0 */
        sub -= LD_HIST_SUB_HALF;
    else
        b -= 1;
    return (uint64_t)sub << b;
}

uint64_t ld_hist_highest_at(size_t index)
{
    unsigned b = (unsigned)(index >> LD_HIST_SUB_HALF_BITS);
    unsigned shift = b == 0 ? 0 : b - 1;
    return ld_hist_lowest_at(index) + (UINT64_C(1) << shift) - 1;
}

void ld_hist_init(ld_hist *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

void ld_hist_record(ld_hist *h, uint64_t ns)
{
    if (ns > LD_HIST_MAX_NS)
        h->clamped++;
    h->counts[ld_hist_index(ns)]++;
    h->total++;
    if (ns < h->min)
        h->min = ns;
    if (ns > h->max)
        h->max = ns;
}

void ld_hist_merge(ld_hist *into, const ld_hist *from)
{
    if (from->total == 0)
        return;
    for (size_t i = 0; i < LD_HIST_COUNTS; i++)
        into->counts[i] += from->counts[i];
    into->total += from->total;
    into->clamped += from->clamped;
    if (from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t ld_hist_percentile(const ld_hist *h, double p)
{
    if (h->total == 0)
        return 0;
    if (p >= 100.0)
        return h->max;
    if (p < 0.0)
        p = 0.0;
    /* The rank of the value asked for, at least 1 (HdrHistogram rounds to the nearest count
     * first, so 99.99% of 10,000 values is the 9,999th, not the 10,000th). */
    uint64_t want = (uint64_t)(p / 100.0 * (double)h->total + 0.5);
    if (want < 1)
        want = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < LD_HIST_COUNTS; i++) {
        seen += h->counts[i];
        if (seen >= want) {
            uint64_t v = ld_hist_highest_at(i);
            return v < h->max ? v : h->max;
        }
    }
    return h->max;
}

double ld_hist_mean(const ld_hist *h)
{
    if (h->total == 0)
        return 0.0;
    double sum = 0.0;
    for (size_t i = 0; i < LD_HIST_COUNTS; i++)
        if (h->counts[i])
            sum += (double)h->counts[i] *
                   ((double)ld_hist_lowest_at(i) + (double)ld_hist_highest_at(i)) / 2.0;
    return sum / (double)h->total;
}
