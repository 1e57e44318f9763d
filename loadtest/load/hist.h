/* hist.h: a log-linear latency histogram with HdrHistogram's layout.
 *
 * Values are nanoseconds. The range 0 .. LD_HIST_MAX_NS (60 s) is cut into buckets that each
 * double the one before; every bucket holds 128 equal sub-buckets (the first holds 256, from
 * 0), so a recorded value is known to within 1/128 of itself (0.78%), and exactly below 256 ns.
 * A value is stored by two shifts and a count-leading-zeros, no floating point, no search.
 * Values above the range are counted in the top sub-bucket and in `clamped`.
 *
 * A histogram is written by one thread at a time; merging adds counts, so per-thread
 * histograms are merged into one after the threads are done.
 */
#ifndef LOADTEST_LOAD_HIST_H
#define LOADTEST_LOAD_HIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LD_HIST_MAX_NS        UINT64_C(60000000000) /* 60 s */
#define LD_HIST_SUB_HALF_BITS 7                     /* 128 sub-buckets per half: 1/128 precision */
#define LD_HIST_SUB_HALF      (1u << LD_HIST_SUB_HALF_BITS)
#define LD_HIST_SUB_COUNT     (2u * LD_HIST_SUB_HALF)
/* Buckets needed so that SUB_COUNT << (BUCKETS - 1) exceeds 60 s in ns: 256 << 28 > 6e10. */
#define LD_HIST_BUCKETS 29u
#define LD_HIST_COUNTS  ((LD_HIST_BUCKETS + 1) * LD_HIST_SUB_HALF)

typedef struct ld_hist {
    uint64_t total;   /* values recorded */
    uint64_t clamped; /* of those, above LD_HIST_MAX_NS (counted at the top) */
    uint64_t min, max;
    uint64_t counts[LD_HIST_COUNTS];
} ld_hist;

void ld_hist_init(ld_hist *h);
void ld_hist_record(ld_hist *h, uint64_t ns);
/* Adds from's counts into into. */
void ld_hist_merge(ld_hist *into, const ld_hist *from);
/* The value at percentile p (0..100): the highest value equivalent (within the precision) to
 * the smallest recorded value that at least p% of the values are at or below; max for 100
 * and beyond, 0 when empty. As HdrHistogram's getValueAtPercentile. */
uint64_t ld_hist_percentile(const ld_hist *h, double p);
double ld_hist_mean(const ld_hist *h);
/* Index of the counter that ns lands in, and the lowest and highest values of that counter's
 * range (exposed for the tests). */
size_t ld_hist_index(uint64_t ns);
uint64_t ld_hist_lowest_at(size_t index);
uint64_t ld_hist_highest_at(size_t index);

#endif
