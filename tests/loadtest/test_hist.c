/* Tests of loadtest/load/hist.c: the log-linear layout, percentiles, merging. */
#include <criterion/criterion.h>

#include "hist.h"

static ld_hist h, h2;

Test(hist, every_value_lands_in_a_range_that_holds_it)
{
    for (uint64_t v = 0; v < 5000; v++) {
        size_t i = ld_hist_index(v);
        cr_assert_lt(i, LD_HIST_COUNTS);
        cr_assert_leq(ld_hist_lowest_at(i), v, "v=%lu", (unsigned long)v);
        cr_assert_geq(ld_hist_highest_at(i), v, "v=%lu", (unsigned long)v);
    }
    /* Then a walk in growing steps up to the top of the range. */
    for (uint64_t v = 5000; v <= LD_HIST_MAX_NS; v += v / 97 + 1) {
        size_t i = ld_hist_index(v);
        cr_assert_lt(i, LD_HIST_COUNTS);
        cr_assert_leq(ld_hist_lowest_at(i), v, "v=%lu", (unsigned long)v);
        cr_assert_geq(ld_hist_highest_at(i), v, "v=%lu", (unsigned long)v);
    }
}

Test(hist, precision_is_better_than_one_percent)
{
    for (uint64_t v = 256; v <= LD_HIST_MAX_NS; v = v * 3 / 2 + 7) {
        size_t i = ld_hist_index(v);
        uint64_t width = ld_hist_highest_at(i) - ld_hist_lowest_at(i) + 1;
        cr_assert_leq((double)width / (double)ld_hist_lowest_at(i), 1.0 / 128 + 1e-12,
                      "v=%lu width=%lu", (unsigned long)v, (unsigned long)width);
    }
    /* Below 256 ns each value has a counter of its own. */
    for (uint64_t v = 0; v < 256; v++)
        cr_assert_eq(ld_hist_lowest_at(ld_hist_index(v)), ld_hist_highest_at(ld_hist_index(v)));
}

Test(hist, indexes_are_monotonic_and_contiguous)
{
    size_t prev = 0;
    for (uint64_t v = 1; v < 2000000; v++) {
        size_t i = ld_hist_index(v);
        cr_assert(i == prev || i == prev + 1, "v=%lu i=%zu prev=%zu", (unsigned long)v, i, prev);
        if (i == prev + 1)
            cr_assert_eq(ld_hist_lowest_at(i), v);
        prev = i;
    }
}

Test(hist, empty_reports_zero)
{
    ld_hist_init(&h);
    cr_assert_eq(ld_hist_percentile(&h, 50), 0);
    cr_assert_eq(ld_hist_percentile(&h, 100), 0);
    cr_assert_eq(ld_hist_mean(&h), 0.0);
}

Test(hist, percentiles_of_a_uniform_spread)
{
    ld_hist_init(&h);
    /* 1 us .. 10 ms in 1 us steps. */
    for (uint64_t us = 1; us <= 10000; us++)
        ld_hist_record(&h, us * 1000);
    cr_assert_eq(h.total, 10000);
    cr_assert_eq(h.min, 1000);
    cr_assert_eq(h.max, 10000000);
    const double ps[] = {50, 90, 99, 99.9, 99.99};
    for (int k = 0; k < 5; k++) {
        double want = ps[k] / 100.0 * 10000 * 1000;
        double got = (double)ld_hist_percentile(&h, ps[k]);
        cr_assert(got >= want * 0.99 && got <= want * 1.01, "p%g: %g, want %g", ps[k], got, want);
    }
    cr_assert_eq(ld_hist_percentile(&h, 100), 10000000);
    double mean = ld_hist_mean(&h);
    cr_assert(mean > 5000500 * 0.99 && mean < 5000500 * 1.01, "mean %g", mean);
}

Test(hist, a_stall_shows_in_the_tail)
{
    ld_hist_init(&h);
    for (int i = 0; i < 9990; i++)
        ld_hist_record(&h, 50000); /* 50 us */
    for (int i = 0; i < 10; i++)
        ld_hist_record(&h, 500000000); /* 500 ms */
    cr_assert_lt(ld_hist_percentile(&h, 99), 51000);
    cr_assert_geq(ld_hist_percentile(&h, 99.99), 495000000);
    cr_assert_eq(ld_hist_percentile(&h, 100), 500000000);
}

Test(hist, values_past_the_range_are_clamped_and_counted)
{
    ld_hist_init(&h);
    ld_hist_record(&h, LD_HIST_MAX_NS * 10);
    cr_assert_eq(h.clamped, 1);
    cr_assert_eq(h.total, 1);
    cr_assert_eq(h.max, LD_HIST_MAX_NS * 10); /* the true maximum is kept */
    cr_assert_eq(ld_hist_index(LD_HIST_MAX_NS * 10), ld_hist_index(LD_HIST_MAX_NS));
}

Test(hist, merge_equals_recording_both)
{
    ld_hist_init(&h);
    ld_hist_init(&h2);
    ld_hist all;
    ld_hist_init(&all);
    for (uint64_t v = 1; v < 100000; v += 37) {
        ld_hist_record(v % 2 ? &h : &h2, v * 11);
        ld_hist_record(&all, v * 11);
    }
    ld_hist_merge(&h, &h2);
    cr_assert_eq(h.total, all.total);
    cr_assert_eq(h.min, all.min);
    cr_assert_eq(h.max, all.max);
    cr_assert_arr_eq(h.counts, all.counts, sizeof all.counts);
    ld_hist empty;
    ld_hist_init(&empty);
    ld_hist_merge(&h, &empty);
    cr_assert_eq(h.min, all.min);
}
