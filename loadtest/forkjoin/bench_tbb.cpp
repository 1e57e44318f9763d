// oneTBB twin of bench_magpie.c: tbb::parallel_invoke for the joins, tbb::parallel_reduce for
// the sum, tbb::parallel_sort for the sort; parallelism capped with tbb::global_control.
// usage: bench_tbb WORKLOAD THREADS REPS
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_invoke.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_sort.h>

#include "workloads.h"

static long fib(long n)
{
    if (n < 2)
        return n;
    long a, b;
    tbb::parallel_invoke([&] { a = fib(n - 1); }, [&] { b = fib(n - 2); });
    return a + b;
}

static long fib_cutoff(long n)
{
    if (n <= FIB_CUTOFF)
        return fj_fib_seq(n);
    long a, b;
    tbb::parallel_invoke([&] { a = fib_cutoff(n - 1); }, [&] { b = fib_cutoff(n - 2); });
    return a + b;
}

static long tree(int depth)
{
    if (depth == 0)
        return 1;
    long a, b;
    tbb::parallel_invoke([&] { a = tree(depth - 1); }, [&] { b = tree(depth - 1); });
    return a + b;
}

int main(int argc, char **argv)
{
    const char *w = argc > 1 ? argv[1] : "fib35";
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    tbb::global_control cap(tbb::global_control::max_allowed_parallelism, threads);
    int64_t *sum_in = fj_sum_input();
    int32_t *orig = (int32_t *)malloc(sizeof(int32_t) * SORT_N);
    int32_t *data = (int32_t *)malloc(sizeof(int32_t) * SORT_N);
    fj_sort_input(orig);
    double *ns = (double *)calloc((size_t)reps, sizeof(double));
    for (int r = -1; r < reps; r++) {
        memcpy(data, orig, sizeof(int32_t) * SORT_N);
        bool bad = false;
        double t0 = fj_now_ns();
        if (strcmp(w, "fib35") == 0) {
            bad = fib(35) != fj_fib_seq(35);
        } else if (strcmp(w, "fib40c") == 0) {
            bad = fib_cutoff(40) != 102334155;
        } else if (strcmp(w, "tree20") == 0) {
            bad = tree(20) != (1L << 20);
        } else if (strcmp(w, "sum") == 0) {
            int64_t s = tbb::parallel_reduce(
                tbb::blocked_range<long>(0, SUM_N), int64_t(0),
                [&](const tbb::blocked_range<long> &rg, int64_t acc) {
                    return acc + fj_sum_range(sum_in, rg.begin(), rg.end());
                },
                [](int64_t x, int64_t y) { return x + y; });
            bad = s != fj_sum_expect();
        } else {
            tbb::parallel_sort(data, data + SORT_N);
        }
        double t = fj_now_ns() - t0;
        if (bad || (strcmp(w, "sort") == 0 && !fj_is_sorted(data, SORT_N))) {
            fprintf(stderr, "wrong result\n");
            return 1;
        }
        if (r >= 0)
            ns[r] = t;
    }
    fj_report("tbb", w, threads, ns, reps);
    free(sum_in);
    free(orig);
    free(data);
    free(ns);
    return 0;
}
