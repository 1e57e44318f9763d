/*
 * Typed parallel quicksort, instantiated by sort.c once per element type. Define SORT_T (the
 * element type) and SORT_NAME(x) (a name for helper x), then include this file; it defines
 * SORT_NAME(par), the parallel entry, and undefines both.
 *
 * Partitioning is a branchless Lomuto pass (every element is swapped with the boundary and the
 * boundary moves by the comparison's result), which keeps mispredictions off random data.
 * Elements equal to the pivot go right; when a pass puts nothing left (the pivot was the
 * minimum), a second pass with <= peels off the run of pivot-equal elements, so inputs with
 * many duplicates stay O(n log n). A depth limit hands adversarial inputs to heapsort.
 */

static void SORT_NAME(insertion)(SORT_T *a, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        SORT_T x = a[i];
        size_t j = i;
        while (j > 0 && x < a[j - 1]) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

static void SORT_NAME(sift)(SORT_T *a, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && a[child] < a[child + 1])
            child++;
        if (!(a[root] < a[child]))
            return;
        SORT_T t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
    }
}

static void SORT_NAME(heapsort)(SORT_T *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        SORT_NAME(sift)(a, i, n);
    for (size_t end = n; end-- > 1;) {
        SORT_T t = a[0];
        a[0] = a[end];
        a[end] = t;
        SORT_NAME(sift)(a, 0, end);
    }
}

static size_t SORT_NAME(median3)(const SORT_T *a, size_t i, size_t j, size_t k)
{
    if (a[i] < a[j])
        return a[j] < a[k] ? j : (a[i] < a[k] ? k : i);
    return a[i] < a[k] ? i : (a[j] < a[k] ? k : j);
}

/* Moves a pivot to a[0] and partitions; returns its final index m: a[..m] < a[m] <= a[m+1..].
 * Sets *equal_run when a[0..m] all equal the pivot (nothing left of it was smaller). */
static size_t SORT_NAME(partition)(SORT_T *a, size_t n, bool *equal_run)
{
    size_t p = SORT_NAME(median3)(a, n / 4, n / 2, n - n / 4 - 1);
    if (n >= 128) {
        size_t s = n / 8;
        p = SORT_NAME(median3)(a, SORT_NAME(median3)(a, 0, s, 2 * s), p,
                               SORT_NAME(median3)(a, n - 1 - 2 * s, n - 1 - s, n - 1));
    }
    SORT_T t = a[0];
    a[0] = a[p];
    a[p] = t;
    const SORT_T pivot = a[0];
    size_t i = 1;
    for (size_t j = 1; j < n; j++) {
        SORT_T x = a[j];
        size_t lt = x < pivot;
        a[j] = a[i];
        a[i] = x;
        i += lt;
    }
    *equal_run = false;
    if (i == 1) {
        /* The pivot is the minimum: gather the elements equal to it instead. */
        for (size_t j = 1; j < n; j++) {
            SORT_T x = a[j];
            size_t le = !(pivot < x);
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

static void SORT_NAME(seq)(SORT_T *a, size_t n, unsigned depth)
{
    while (n > 24) {
        if (depth-- == 0) {
            SORT_NAME(heapsort)(a, n);
            return;
        }
        bool equal_run;
        size_t m = SORT_NAME(partition)(a, n, &equal_run);
        if (equal_run) {
            a += m + 1;
            n -= m + 1;
            continue;
        }
        /* Recurse into the smaller side, loop on the larger: O(log n) stack. */
        if (m < n - m - 1) {
            SORT_NAME(seq)(a, m, depth);
            a += m + 1;
            n -= m + 1;
        } else {
            SORT_NAME(seq)(a + m + 1, n - m - 1, depth);
            n = m;
        }
    }
    SORT_NAME(insertion)(a, n);
}

struct SORT_NAME(task) {
    SORT_T *a;
    size_t n;
    unsigned depth;
};

static void SORT_NAME(par)(void *v)
{
    struct SORT_NAME(task) *t = v;
    if (t->n <= SORT_PAR_CUTOFF || t->depth == 0) {
        SORT_NAME(seq)(t->a, t->n, t->depth);
        return;
    }
    bool equal_run;
    size_t m = SORT_NAME(partition)(t->a, t->n, &equal_run);
    struct SORT_NAME(task) right = {t->a + m + 1, t->n - m - 1, t->depth - 1};
    if (equal_run) {
        SORT_NAME(par)(&right);
        return;
    }
    struct SORT_NAME(task) left = {t->a, m, t->depth - 1};
    mp_pool_join(SORT_NAME(par), &left, SORT_NAME(par), &right);
}

#undef SORT_T
#undef SORT_NAME
