/* OpenMP-tasks twin of bench_magpie.c: the same workloads with `omp task` / `taskwait`.
 * usage: bench_omp WORKLOAD THREADS REPS */
#include <omp.h>
#include <stdbool.h>

#include "workloads.h"

static long fib(long n)
{
    if (n < 2)
        return n;
    long a, b;
#pragma omp task shared(a)
    a = fib(n - 1);
    b = fib(n - 2);
#pragma omp taskwait
    return a + b;
}

static long fib_cutoff(long n)
{
    if (n <= FIB_CUTOFF)
        return fj_fib_seq(n);
    long a, b;
#pragma omp task shared(a)
    a = fib_cutoff(n - 1);
    b = fib_cutoff(n - 2);
#pragma omp taskwait
    return a + b;
}

static long tree(int depth)
{
    if (depth == 0)
        return 1;
    long a, b;
#pragma omp task shared(a)
    a = tree(depth - 1);
    b = tree(depth - 1);
#pragma omp taskwait
    return a + b;
}

static int64_t *sum_in;
static long grain;

static int64_t sum(long lo, long hi)
{
    if (hi - lo <= grain)
        return fj_sum_range(sum_in, lo, hi);
    long mid = lo + (hi - lo) / 2;
    int64_t a, b;
#pragma omp task shared(a)
    a = sum(lo, mid);
    b = sum(mid, hi);
#pragma omp taskwait
    return a + b;
}

/* The quicksort of runtime/src/pool/sort_impl.h (branchless Lomuto, ninther pivot, peel of
 * pivot-equal runs, heapsort fallback omitted: the input is random), with tasks for the
 * halves above 2000 elements, as magpie and Rayon do. */
static void insertion(int32_t *a, long n)
{
    for (long i = 1; i < n; i++) {
        int32_t x = a[i];
        long j = i;
        while (j > 0 && x < a[j - 1]) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

static long med3(const int32_t *a, long i, long j, long k)
{
    if (a[i] < a[j])
        return a[j] < a[k] ? j : (a[i] < a[k] ? k : i);
    return a[i] < a[k] ? i : (a[j] < a[k] ? k : j);
}

static long partition(int32_t *a, long n, bool *equal_run)
{
    long p = med3(a, n / 4, n / 2, n - n / 4 - 1);
    if (n >= 128) {
        long s = n / 8;
        p = med3(a, med3(a, 0, s, 2 * s), p, med3(a, n - 1 - 2 * s, n - 1 - s, n - 1));
    }
    int32_t t = a[0];
    a[0] = a[p];
    a[p] = t;
    const int32_t pivot = a[0];
    long i = 1;
    for (long j = 1; j < n; j++) {
        int32_t x = a[j];
        long lt = x < pivot;
        a[j] = a[i];
        a[i] = x;
        i += lt;
    }
    *equal_run = false;
    if (i == 1) {
        for (long j = 1; j < n; j++) {
            int32_t x = a[j];
            long le = !(pivot < x);
            a[j] = a[i];
            a[i] = x;
            i += le;
        }
        *equal_run = true;
    }
    t = a[0];
    a[0] = a[i - 1];
    a[i - 1] = t;
    return i - 1;
}

static void qsort_seq(int32_t *a, long n)
{
    while (n > 24) {
        bool eq;
        long m = partition(a, n, &eq);
        if (eq) {
            a += m + 1;
            n -= m + 1;
        } else if (m < n - m - 1) {
            qsort_seq(a, m);
            a += m + 1;
            n -= m + 1;
        } else {
            qsort_seq(a + m + 1, n - m - 1);
            n = m;
        }
    }
    insertion(a, n);
}

static void qsort_task(int32_t *a, long n)
{
    if (n <= 2000) {
        qsort_seq(a, n);
        return;
    }
    bool eq;
    long m = partition(a, n, &eq);
    if (!eq) {
#pragma omp task
        qsort_task(a, m);
    }
    qsort_task(a + m + 1, n - m - 1);
#pragma omp taskwait
}

int main(int argc, char **argv)
{
    const char *w = argc > 1 ? argv[1] : "fib35";
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    omp_set_num_threads(threads);
    sum_in = fj_sum_input();
    grain = (SUM_N + 8 * threads - 1) / (8 * threads);
    int32_t *orig = malloc(sizeof(int32_t) * SORT_N), *data = malloc(sizeof(int32_t) * SORT_N);
    fj_sort_input(orig);
    double *ns = calloc((size_t)reps, sizeof(double));
    for (int r = -1; r < reps; r++) {
        memcpy(data, orig, sizeof(int32_t) * SORT_N);
        long bad = 0;
        double t0 = fj_now_ns();
#pragma omp parallel
#pragma omp single
        {
            if (strcmp(w, "fib35") == 0)
                bad = fib(35) != fj_fib_seq(35);
            else if (strcmp(w, "fib40c") == 0)
                bad = fib_cutoff(40) != 102334155;
            else if (strcmp(w, "tree20") == 0)
                bad = tree(20) != (1L << 20);
            else if (strcmp(w, "sum") == 0)
                bad = sum(0, SUM_N) != fj_sum_expect();
            else
                qsort_task(data, SORT_N);
        }
        double t = fj_now_ns() - t0;
        if (bad || (strcmp(w, "sort") == 0 && !fj_is_sorted(data, SORT_N))) {
            fprintf(stderr, "wrong result\n");
            return 1;
        }
        if (r >= 0)
            ns[r] = t;
    }
    fj_report("openmp", w, threads, ns, reps);
    free(sum_in);
    free(orig);
    free(data);
    free(ns);
    return 0;
}
