/* magpie's fork-join pool on the benchmark workloads (see README.md).
 * usage: bench_magpie WORKLOAD THREADS REPS   (WORKLOAD: fib35 fib40c tree20 sum sort) */
#include "magpie_core.h"
#include "workloads.h"

struct fib {
    long n, r;
};

static void fib(void *v)
{
    struct fib *f = v;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    struct fib a = {f->n - 1, 0}, b = {f->n - 2, 0};
    mp_pool_join(fib, &a, fib, &b);
    f->r = a.r + b.r;
}

static void fib_cutoff(void *v)
{
    struct fib *f = v;
    if (f->n <= FIB_CUTOFF) {
        f->r = fj_fib_seq(f->n);
        return;
    }
    struct fib a = {f->n - 1, 0}, b = {f->n - 2, 0};
    mp_pool_join(fib_cutoff, &a, fib_cutoff, &b);
    f->r = a.r + b.r;
}

struct tree {
    int depth;
    long leaves;
};

static void tree(void *v)
{
    struct tree *t = v;
    if (t->depth == 0) {
        t->leaves = 1;
        return;
    }
    struct tree a = {t->depth - 1, 0}, b = {t->depth - 1, 0};
    mp_pool_join(tree, &a, tree, &b);
    t->leaves = a.leaves + b.leaves;
}

static int64_t *sum_in;

static void fold(size_t lo, size_t hi, void *acc, void *arg)
{
    (void)arg;
    *(int64_t *)acc += fj_sum_range(sum_in, (long)lo, (long)hi);
}

static void combine(void *l, const void *r, void *arg)
{
    (void)arg;
    *(int64_t *)l += *(const int64_t *)r;
}

struct job {
    const char *w;
    int32_t *data;
    int64_t check;
};

static void run(void *v)
{
    struct job *j = v;
    if (strcmp(j->w, "fib35") == 0) {
        struct fib f = {35, 0};
        fib(&f);
        j->check = f.r != fj_fib_seq(35);
    } else if (strcmp(j->w, "fib40c") == 0) {
        struct fib f = {40, 0};
        fib_cutoff(&f);
        j->check = f.r != 102334155;
    } else if (strcmp(j->w, "tree20") == 0) {
        struct tree t = {20, 0};
        tree(&t);
        j->check = t.leaves != (1L << 20);
    } else if (strcmp(j->w, "sum") == 0) {
        int64_t zero = 0, s = 0;
        mp_pool_parallel_reduce(0, SUM_N, 0, sizeof(s), &zero, fold, combine, NULL, &s);
        j->check = s != fj_sum_expect();
    } else {
        mp_pool_sort_i32(j->data, SORT_N);
        j->check = 0;
    }
}

int main(int argc, char **argv)
{
    const char *w = argc > 1 ? argv[1] : "fib35";
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    mp_pool_config cfg;
    mp_pool *pool;
    mp_pool_config_init(&cfg);
    cfg.workers = (unsigned)threads;
    if (mp_pool_new(&pool, &cfg) != 0)
        return 1;
    sum_in = fj_sum_input();
    int32_t *orig = malloc(sizeof(int32_t) * SORT_N), *data = malloc(sizeof(int32_t) * SORT_N);
    fj_sort_input(orig);
    double *ns = calloc((size_t)reps, sizeof(double));
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up, starts the workers */
        memcpy(data, orig, sizeof(int32_t) * SORT_N);
        struct job j = {w, data, 0};
        double t0 = fj_now_ns();
        mp_pool_call(pool, run, &j);
        double t = fj_now_ns() - t0;
        if (j.check != 0 || (strcmp(w, "sort") == 0 && !fj_is_sorted(data, SORT_N))) {
            fprintf(stderr, "wrong result\n");
            return 1;
        }
        if (r >= 0)
            ns[r] = t;
    }
    fj_report("magpie", w, threads, ns, reps);
    mp_pool_free(pool);
    free(sum_in);
    free(orig);
    free(data);
    free(ns);
    return 0;
}
