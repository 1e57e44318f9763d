/* Shared by the C and C++ twins of the fork-join benchmark: inputs, sequential kernels, timing
 * and the output line. The Rayon twin (rayon/src/main.rs) builds the same inputs. */
#ifndef FORKJOIN_WORKLOADS_H
#define FORKJOIN_WORKLOADS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUM_N      10000000
#define SORT_N     1000000
#define FIB_CUTOFF 20

static inline uint64_t fj_xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static inline long fj_fib_seq(long n)
{
    return n < 2 ? n : fj_fib_seq(n - 1) + fj_fib_seq(n - 2);
}

/* sum: 0..999 repeating, as int64 */
static inline int64_t *fj_sum_input(void)
{
    int64_t *a = (int64_t *)malloc(sizeof(int64_t) * SUM_N);
    for (long i = 0; i < SUM_N; i++)
        a[i] = i % 1000;
    return a;
}

static inline int64_t fj_sum_expect(void)
{
    return (int64_t)(SUM_N / 1000) * (999 * 1000 / 2);
}

/* sort: 10^6 non-negative int32 from xorshift64* seeded 42, top 31 bits */
static inline void fj_sort_input(int32_t *a)
{
    uint64_t s = 42;
    for (long i = 0; i < SORT_N; i++)
        a[i] = (int32_t)(fj_xorshift(&s) >> 33);
}

/* The sequential sum kernel every C/C++ twin uses: four accumulators, as LLVM's unrolling
 * gives the Rust twin, so that the loop runs at memory speed and no twin pays for codegen. */
static inline int64_t fj_sum_range(const int64_t *a, long lo, long hi)
{
    int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    long i = lo;
    for (; i + 4 <= hi; i += 4) {
        s0 += a[i];
        s1 += a[i + 1];
        s2 += a[i + 2];
        s3 += a[i + 3];
    }
    for (; i < hi; i++)
        s0 += a[i];
    return s0 + s1 + s2 + s3;
}

static inline int fj_is_sorted(const int32_t *a, long n)
{
    for (long i = 1; i < n; i++)
        if (a[i - 1] > a[i])
            return 0;
    return 1;
}

static inline double fj_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static inline int fj_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prints the median of reps timings (ns) in the format compare.sh parses. */
static inline void fj_report(const char *impl, const char *workload, int threads, double *ns,
                             int reps)
{
    qsort(ns, (size_t)reps, sizeof(double), fj_cmp_double);
    printf("%s %s threads=%d median_ms=%.3f\n", impl, workload, threads, ns[reps / 2] / 1e6);
}

#endif
