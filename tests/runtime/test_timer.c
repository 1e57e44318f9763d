/* Tests of runtime/src/timer.c. First the hierarchical timer wheel, driven directly (it has
 * no threads or clock of its own): exact deadlines at every level boundary, moves and
 * removes, next_expiration's bound, the order of fired entries, jumps of days and years,
 * overdue deadlines, and a randomized run against a reference model (seed from MP_TEST_SEED,
 * length from MP_TIMER_OPS). Then the timer API on a runtime (mp_timer_poll, mp_timer_cancel
 * and the uv_timer that drives the wheel): sleepers wake once and never early, a cancelled
 * timer never fires, a timer due while the driver re-enters the loop is not lost, and a
 * deadline moved later is waited for. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

#define L(n)    ((uint64_t)1 << (6 * (n))) /* 64^n ms: a level-n slot */
#define SPAN    L(6)                       /* the wheel's reach */
#define DAY_MS  (24ull * 3600 * 1000)
#define YEAR_MS (365 * DAY_MS)

/* Fired lists are NULL-terminated through ->next and every entry in them is unlinked. */
static size_t list_len(const mp__timer_entry *e)
{
    size_t n = 0;
    for (; e; e = e->next) {
        cr_assert_eq(e->where, MP__TIMER_NOT_LINKED);
        n++;
    }
    return n;
}

/* Step the wheel the way the reactor will: to next_expiration() and no further, until e
 * fires. Checks that nothing fires early, that e fires exactly at its deadline, and that the
 * wheel never asks to be woken after it. Returns how many wake-ups it took. */
static unsigned step_until_fired(mp__timer_wheel *w, mp__timer_entry *e)
{
    uint64_t deadline = e->deadline_ms;
    for (unsigned wakeups = 1;; wakeups++) {
        uint64_t next = mp__wheel_next_expiration(w);
        cr_assert_leq(next, deadline, "next %" PRIu64 " after deadline %" PRIu64, next, deadline);
        cr_assert_gt(next, w->elapsed_ms);
        mp__timer_entry *fired = mp__wheel_advance(w, next);
        cr_assert_eq(w->elapsed_ms, next);
        if (fired) {
            cr_assert_eq(fired, e);
            cr_assert_null(e->next);
            cr_assert_eq(next, deadline);
            return wakeups;
        }
        cr_assert_leq(wakeups, 2 * MP__WHEEL_LEVELS, "too many wake-ups for %" PRIu64, deadline);
    }
}

/* Distances from now that sit on or next to a level boundary: 63/64/65, 4095/4096/4097, ... */
static size_t boundary_distances(uint64_t *out)
{
    size_t n = 0;
    out[n++] = 1;
    out[n++] = 2;
    for (unsigned lvl = 1; lvl <= MP__WHEEL_LEVELS; lvl++) {
        out[n++] = L(lvl) - 1;
        out[n++] = L(lvl);
        out[n++] = L(lvl) + 1;
        out[n++] = 2 * L(lvl) - 1;
        out[n++] = 63 * L(lvl - 1);
    }
    out[n++] = SPAN + L(5) + 7; /* past the reach: clamped to level 5, re-filed */
    out[n++] = 3 * SPAN + 12345;
    return n;
}

Test(timer, fires_at_exact_deadline_across_level_boundaries, .timeout = 10)
{
    /* Starting times on and off boundaries, including a wheel whose level-5 digit is high. */
    const uint64_t starts[] = {
        0, 1, 63, 64, 4095, 4096, 123456789, L(5) * 63 + 5, ((uint64_t)1 << 40) + 77};
    uint64_t dist[64];
    size_t nd = boundary_distances(dist);
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
        for (size_t j = 0; j < nd; j++) {
            mp__timer_wheel w;
            mp__timer_entry e;
            mp__wheel_init(&w, starts[i]);
            mp__timer_entry_init(&e);
            uint64_t deadline = starts[i] + dist[j];
            mp__wheel_insert(&w, &e, deadline);
            cr_assert_eq(mp__wheel_count(&w), 1);

            /* One jump to just before the deadline fires nothing; the next ms fires it. */
            cr_assert_null(mp__wheel_advance(&w, deadline - 1));
            cr_assert_eq(mp__wheel_count(&w), 1);
            cr_assert_eq(mp__wheel_next_expiration(&w), deadline); /* now at level 0: exact */
            cr_assert_eq(mp__wheel_advance(&w, deadline), &e);
            cr_assert_eq(e.where, MP__TIMER_NOT_LINKED);
            cr_assert_eq(mp__wheel_count(&w), 0);
            cr_assert_eq(mp__wheel_next_expiration(&w), UINT64_MAX);

            /* Again from the same start, waking only when the wheel asks. */
            mp__wheel_init(&w, starts[i]);
            mp__wheel_insert(&w, &e, deadline);
            step_until_fired(&w, &e);
            cr_assert_eq(mp__wheel_count(&w), 0);
        }
    }
}

Test(timer, insert_files_by_highest_differing_digit, .timeout = 10)
{
    mp__timer_wheel w;
    mp__timer_entry e;
    mp__wheel_init(&w, 0);
    mp__timer_entry_init(&e);
    struct {
        uint64_t deadline;
        unsigned level, slot;
    } cases[] = {
        {0, 0, 0},           {1, 0, 1},
        {63, 0, 63},         {64, 1, 1},
        {65, 1, 1},          {4095, 1, 63},
        {4096, 2, 1},        {L(3) - 1, 2, 63},
        {L(3), 3, 1},        {L(4), 4, 1},
        {L(5), 5, 1},        {SPAN - 1, 5, 63},
        {SPAN, 5, 0},        {SPAN + 3 * L(5), 5, 3},
        {UINT64_MAX, 5, 63},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mp__wheel_insert(&w, &e, cases[i].deadline);
        cr_assert_eq(e.where, cases[i].level * MP__WHEEL_SLOTS + cases[i].slot,
                     "deadline %" PRIu64 ": where %u", cases[i].deadline, e.where);
        cr_assert_eq(w.occupied[cases[i].level], (uint64_t)1 << cases[i].slot);
        cr_assert_eq(mp__wheel_count(&w), 1);
    }
    cr_assert(mp__wheel_remove(&w, &e));
    for (unsigned lvl = 0; lvl < MP__WHEEL_LEVELS; lvl++)
        cr_assert_eq(w.occupied[lvl], 0);
    cr_assert_eq(mp__wheel_count(&w), 0);
}

Test(timer, reinsert_moves_the_entry, .timeout = 10)
{
    mp__timer_wheel w;
    mp__timer_entry a, b;
    mp__wheel_init(&w, 1000);
    mp__timer_entry_init(&a);
    mp__timer_entry_init(&b);

    mp__wheel_insert(&w, &a, 1000 + L(3) + 5); /* level 3 */
    mp__wheel_insert(&w, &b, 1000 + 200);
    mp__wheel_insert(&w, &a, 1010); /* down to level 0 */
    cr_assert_eq(mp__wheel_count(&w), 2);
    cr_assert_eq(w.occupied[3], 0);
    cr_assert_eq(mp__wheel_next_expiration(&w), 1010);
    mp__timer_entry *f = mp__wheel_advance(&w, 1010);
    cr_assert_eq(f, &a);
    cr_assert_null(a.next);

    mp__wheel_insert(&w, &b, 1000 + L(4) + 1); /* later: level 1 -> level 4 */
    cr_assert_eq(mp__wheel_count(&w), 1);
    cr_assert_null(mp__wheel_advance(&w, 1000 + L(4)));
    cr_assert_eq(mp__wheel_advance(&w, 1000 + L(4) + 1), &b);

    /* Re-inserting at the same deadline counts as a new insertion: it now fires last. */
    mp__wheel_insert(&w, &a, w.elapsed_ms + 50);
    mp__wheel_insert(&w, &b, w.elapsed_ms + 50);
    mp__wheel_insert(&w, &a, w.elapsed_ms + 50);
    f = mp__wheel_advance(&w, w.elapsed_ms + 50);
    cr_assert_eq(f, &b);
    cr_assert_eq(f->next, &a);
    cr_assert_null(a.next);
    cr_assert_eq(mp__wheel_count(&w), 0);
}

Test(timer, remove_only_linked_entries, .timeout = 10)
{
    mp__timer_wheel w;
    mp__timer_entry e[3], never;
    mp__wheel_init(&w, 0);
    mp__timer_entry_init(&never);
    for (int i = 0; i < 3; i++) {
        mp__timer_entry_init(&e[i]);
        mp__wheel_insert(&w, &e[i], 100); /* one level-1 slot */
    }
    cr_assert_not(mp__wheel_remove(&w, &never));

    /* Out of the middle of a slot: the others keep their order and the slot stays marked. */
    cr_assert(mp__wheel_remove(&w, &e[1]));
    cr_assert_not(mp__wheel_remove(&w, &e[1]));
    cr_assert_eq(mp__wheel_count(&w), 2);
    cr_assert_neq(w.occupied[1], 0);
    mp__timer_entry *f = mp__wheel_advance(&w, 100);
    cr_assert_eq(f, &e[0]);
    cr_assert_eq(f->next, &e[2]);
    cr_assert_null(e[2].next);

    /* Fired entries are unlinked. */
    cr_assert_not(mp__wheel_remove(&w, &e[0]));
    cr_assert_not(mp__wheel_remove(&w, &e[2]));

    /* The last entry of a slot clears its bit, so next_expiration forgets it. */
    mp__wheel_insert(&w, &e[0], 100 + L(2) * 5);
    cr_assert_neq(mp__wheel_next_expiration(&w), UINT64_MAX);
    cr_assert(mp__wheel_remove(&w, &e[0]));
    cr_assert_eq(mp__wheel_next_expiration(&w), UINT64_MAX);
    for (unsigned lvl = 0; lvl < MP__WHEEL_LEVELS; lvl++)
        cr_assert_eq(w.occupied[lvl], 0);
    cr_assert_null(mp__wheel_advance(&w, 100 + L(6)));
    cr_assert_eq(mp__wheel_count(&w), 0);
}

Test(timer, next_expiration_is_exact_at_level_0_and_a_slot_start_above, .timeout = 10)
{
    mp__timer_wheel w;
    mp__timer_entry e, f;
    mp__wheel_init(&w, 70); /* digit 0 = 6 */
    mp__timer_entry_init(&e);
    mp__timer_entry_init(&f);
    cr_assert_eq(mp__wheel_next_expiration(&w), UINT64_MAX);

    mp__wheel_insert(&w, &e, 127); /* the end of the current 64 ms: level 0 */
    cr_assert_eq(mp__wheel_next_expiration(&w), 127);
    mp__wheel_insert(&w, &f, 100);
    cr_assert_eq(mp__wheel_next_expiration(&w), 100);
    mp__wheel_remove(&w, &f);
    cr_assert_eq(mp__wheel_next_expiration(&w), 127);

    mp__wheel_insert(&w, &e, 200); /* level 1, slot [192, 256) */
    cr_assert_eq(mp__wheel_next_expiration(&w), 192);
    mp__wheel_insert(&w, &e, 5000); /* level 2, slot [4096, 8192) */
    cr_assert_eq(mp__wheel_next_expiration(&w), 4096);
    mp__wheel_insert(&w, &f, 4100); /* same slot, and the earlier one */
    cr_assert_eq(mp__wheel_next_expiration(&w), 4096);
    cr_assert_null(mp__wheel_advance(&w, 4096)); /* cascades both */
    cr_assert_eq(mp__wheel_next_expiration(&w), 4100);
    cr_assert_eq(mp__wheel_advance(&w, 4100), &f);
    cr_assert_eq(mp__wheel_next_expiration(&w), 4992); /* level 1 slot of 5000 */
    cr_assert_null(mp__wheel_advance(&w, 4999));
    cr_assert_eq(mp__wheel_next_expiration(&w), 5000);
    cr_assert_eq(mp__wheel_advance(&w, 5000), &e);

    /* Beyond the reach: level 5's slot comes round at most 64^6 ms ahead. */
    uint64_t far = w.elapsed_ms + 5 * SPAN;
    mp__wheel_insert(&w, &e, far);
    uint64_t next = mp__wheel_next_expiration(&w);
    cr_assert_gt(next, w.elapsed_ms);
    cr_assert_leq(next, w.elapsed_ms + SPAN);
    cr_assert_eq(next % L(5), 0);

    /* An overdue entry is due at once: its own deadline, at or before elapsed. */
    mp__wheel_insert(&w, &f, w.elapsed_ms - 3);
    cr_assert_eq(mp__wheel_next_expiration(&w), w.elapsed_ms - 3);
    cr_assert_eq(mp__wheel_advance(&w, w.elapsed_ms), &f);
    cr_assert(mp__wheel_remove(&w, &e));
    cr_assert_eq(mp__wheel_count(&w), 0);
}

Test(timer, fires_in_deadline_order_ties_in_insertion_order, .timeout = 10)
{
    enum { N = 2000 };
    static mp__timer_entry e[N];
    static uint64_t deadline[N];
    mp__timer_wheel w;
    uint64_t seed = test_seed();
    mp__wheel_init(&w, 5000);
    /* Few distinct deadlines spread over every level, so ties are common and come from
     * different levels' cascades. */
    uint64_t choices[32];
    for (int i = 0; i < 32; i++)
        choices[i] = 5000 + 1 + test_rand(&seed) % L(1 + i % 5);
    for (int i = 0; i < N; i++) {
        mp__timer_entry_init(&e[i]);
        deadline[i] = choices[test_rand(&seed) % 32];
        mp__wheel_insert(&w, &e[i], deadline[i]);
    }
    cr_assert_eq(mp__wheel_count(&w), N);

    /* Half in small steps, then the rest in one jump: both orders must hold. */
    const mp__timer_entry *prev = NULL;
    size_t fired = 0;
    uint64_t now = 5000;
    while (mp__wheel_count(&w) > 0) {
        now += now < 5000 + L(3) ? 1 + test_rand(&seed) % 100 : L(6);
        for (mp__timer_entry *f = mp__wheel_advance(&w, now); f; f = f->next) {
            cr_assert_leq(f->deadline_ms, now);
            if (prev) {
                cr_assert_leq(prev->deadline_ms, f->deadline_ms);
                if (prev->deadline_ms == f->deadline_ms)
                    cr_assert_lt(prev, f, "tie fired out of insertion order");
            }
            prev = f;
            fired++;
        }
    }
    cr_assert_eq(fired, N);
}

Test(timer, jumps_of_days_and_years_fire_every_level, .timeout = 10)
{
    enum { PER = 8 };
    const uint64_t start = 123456789; /* ms since boot of a process that has been up a day */
    mp__timer_wheel w;
    mp__timer_entry e[MP__WHEEL_LEVELS + 2][PER];
    uint64_t want_by_3_days = 0, want_by_4_years = 0;
    mp__wheel_init(&w, start);
    /* Row lvl holds deadlines filed at level lvl, row 6 beyond the reach, row 7 "never". */
    for (unsigned lvl = 0; lvl < MP__WHEEL_LEVELS + 2; lvl++) {
        for (unsigned i = 0; i < PER; i++) {
            uint64_t d;
            if (lvl <= MP__WHEEL_LEVELS)
                d = start + L(lvl) + i * (L(lvl) * 7 / PER) + i;
            else
                d = UINT64_MAX - i;
            mp__timer_entry_init(&e[lvl][i]);
            mp__wheel_insert(&w, &e[lvl][i], d);
            want_by_3_days += d <= start + 3 * DAY_MS;
            want_by_4_years += d <= start + 4 * YEAR_MS;
        }
    }
    cr_assert_eq(mp__wheel_count(&w), (MP__WHEEL_LEVELS + 2) * PER);

    uint64_t checkpoints[] = {start + 3 * DAY_MS, start + 4 * YEAR_MS};
    uint64_t want[] = {want_by_3_days, want_by_4_years};
    uint64_t total = 0, last = 0;
    for (int c = 0; c < 2; c++) {
        mp__timer_entry *f = mp__wheel_advance(&w, checkpoints[c]);
        size_t n = list_len(f);
        cr_assert_eq(n, want[c] - total, "checkpoint %d: %zu fired", c, n);
        for (; f; f = f->next) {
            cr_assert_geq(f->deadline_ms, last);
            cr_assert_leq(f->deadline_ms, checkpoints[c]);
            last = f->deadline_ms;
        }
        total = want[c];
        cr_assert_eq(mp__wheel_count(&w), (MP__WHEEL_LEVELS + 2) * PER - total);
        /* What is left is later, and the wheel will wake for it in time. */
        uint64_t earliest = UINT64_MAX;
        for (unsigned lvl = 0; lvl < MP__WHEEL_LEVELS + 2; lvl++)
            for (unsigned i = 0; i < PER; i++)
                if (e[lvl][i].where != MP__TIMER_NOT_LINKED && e[lvl][i].deadline_ms < earliest)
                    earliest = e[lvl][i].deadline_ms;
        cr_assert_gt(earliest, checkpoints[c]);
        uint64_t next = mp__wheel_next_expiration(&w);
        cr_assert_gt(next, checkpoints[c]);
        cr_assert_leq(next, earliest);
    }
    /* Left: the "never" row and the part of the beyond-reach row after 4 years. */
    cr_assert(e[MP__WHEEL_LEVELS][PER - 1].where != MP__TIMER_NOT_LINKED);
    size_t removed = 0;
    for (unsigned lvl = 0; lvl < MP__WHEEL_LEVELS + 2; lvl++)
        for (unsigned i = 0; i < PER; i++)
            removed += mp__wheel_remove(&w, &e[lvl][i]);
    cr_assert_eq(removed, (MP__WHEEL_LEVELS + 2) * PER - total);
    cr_assert_eq(mp__wheel_count(&w), 0);
    cr_assert_null(mp__wheel_advance(&w, start + 1000 * YEAR_MS));
}

Test(timer, past_deadlines_fire_at_the_next_advance_in_order, .timeout = 10)
{
    mp__timer_wheel w;
    mp__timer_entry e[6], later;
    mp__wheel_init(&w, 10000);
    mp__timer_entry_init(&later);
    mp__wheel_insert(&w, &later, 10001);
    /* Deadlines at or before elapsed, inserted out of order, with a tie. */
    const uint64_t d[6] = {10000, 9000, 9999, 0, 9000, 10000};
    for (int i = 0; i < 6; i++) {
        mp__timer_entry_init(&e[i]);
        mp__wheel_insert(&w, &e[i], d[i]);
    }
    cr_assert_eq(mp__wheel_count(&w), 7);
    cr_assert_eq(mp__wheel_next_expiration(&w), 0);

    /* An earlier now does not move time back, but overdue entries are due all the same. */
    mp__timer_entry *f = mp__wheel_advance(&w, 5);
    cr_assert_eq(w.elapsed_ms, 10000);
    const mp__timer_entry *order[6] = {&e[3], &e[1], &e[4], &e[2], &e[0], &e[5]};
    for (int i = 0; i < 6; i++, f = f->next)
        cr_assert_eq(f, order[i], "position %d", i);
    cr_assert_null(f);
    cr_assert_eq(mp__wheel_count(&w), 1);
    cr_assert_eq(mp__wheel_next_expiration(&w), 10001);

    /* With nothing overdue, an earlier or equal now does nothing. */
    cr_assert_null(mp__wheel_advance(&w, 9000));
    cr_assert_null(mp__wheel_advance(&w, 10000));
    cr_assert_eq(w.elapsed_ms, 10000);
    cr_assert_eq(mp__wheel_advance(&w, 10001), &later);

    /* A deadline equal to elapsed fires at the next advance, even to the same time. */
    mp__wheel_insert(&w, &later, 10001);
    cr_assert_eq(mp__wheel_next_expiration(&w), 10001);
    cr_assert_eq(mp__wheel_advance(&w, 10001), &later);
    cr_assert_eq(mp__wheel_count(&w), 0);
}

Test(timer, counts, .timeout = 10)
{
    enum { N = 300 };
    static mp__timer_entry e[N];
    mp__timer_wheel w;
    mp__wheel_init(&w, 0);
    for (size_t i = 0; i < N; i++) {
        mp__timer_entry_init(&e[i]);
        mp__wheel_insert(&w, &e[i], i * 1000);
        cr_assert_eq(mp__wheel_count(&w), i + 1);
    }
    for (size_t i = 0; i < N; i++)
        mp__wheel_insert(&w, &e[i], N * 1000 - i); /* moves do not count twice */
    cr_assert_eq(mp__wheel_count(&w), N);
    for (size_t i = 0; i < N; i += 3)
        cr_assert(mp__wheel_remove(&w, &e[i]));
    cr_assert_eq(mp__wheel_count(&w), N - N / 3);
    size_t n = list_len(mp__wheel_advance(&w, N * 1000 - N / 2));
    cr_assert_eq(mp__wheel_count(&w), N - N / 3 - n);
    n += list_len(mp__wheel_advance(&w, N * 1000));
    cr_assert_eq(n, N - N / 3);
    cr_assert_eq(mp__wheel_count(&w), 0);
}

/* The reference: every linked entry's deadline and insertion sequence, checked by brute
 * force. */
enum { MODEL_N = 256 };

typedef struct model {
    bool linked[MODEL_N];
    uint64_t deadline[MODEL_N];
    uint64_t seq[MODEL_N];
    uint64_t next_seq;
    size_t count;
} model;

static int by_deadline_then_seq(const void *a, const void *b, void *arg)
{
    const model *m = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (m->deadline[i] != m->deadline[j])
        return m->deadline[i] < m->deadline[j] ? -1 : 1;
    return m->seq[i] < m->seq[j] ? -1 : m->seq[i] > m->seq[j];
}

static uint64_t random_deadline(uint64_t *seed, const model *m, uint64_t now)
{
    uint64_t r = test_rand(seed);
    switch (r % 16) {
    case 0: { /* in the past */
        uint64_t back = test_rand(seed) % 100;
        return back < now ? now - back : 0;
    }
    case 1:
        return now;
    case 2: { /* a tie with a linked entry */
        size_t i = test_rand(seed) % MODEL_N;
        if (m->linked[i])
            return m->deadline[i];
        return now + 1;
    }
    case 3: { /* on or next to a level boundary ahead */
        unsigned lvl = 1 + (unsigned)(test_rand(seed) % MP__WHEEL_LEVELS);
        uint64_t b = ((now >> (6 * lvl)) + 1) << (6 * lvl);
        return b - 1 + test_rand(seed) % 3;
    }
    case 4: /* beyond the reach */
        return now + SPAN + test_rand(seed) % (4 * SPAN);
    default: { /* any level, small distances more often */
        unsigned bits = (unsigned)(test_rand(seed) % 37);
        return now + 1 + (test_rand(seed) & (((uint64_t)1 << bits) - 1));
    }
    }
}

static uint64_t random_now(uint64_t *seed, const mp__timer_wheel *w)
{
    uint64_t now = w->elapsed_ms, next = mp__wheel_next_expiration(w);
    switch (test_rand(seed) % 10) {
    case 0: { /* backwards: a no-op for time */
        uint64_t back = test_rand(seed) % 10;
        return back < now ? now - back : 0;
    }
    case 1:
    case 2: /* where the driver would wake, or just before */
        if (next != UINT64_MAX)
            return next - test_rand(seed) % 2;
        return now + 1;
    case 3:
        return now + test_rand(seed) % 100000;
    case 4:
        if (test_rand(seed) % 8 == 0) /* an idle process waking after up to 2 years */
            return now + test_rand(seed) % (2 * YEAR_MS);
        return now + test_rand(seed) % L(4);
    default:
        return now + test_rand(seed) % 70;
    }
}

static void check_next_expiration(const mp__timer_wheel *w, const model *m)
{
    uint64_t earliest = UINT64_MAX;
    for (size_t i = 0; i < MODEL_N; i++)
        if (m->linked[i] && m->deadline[i] < earliest)
            earliest = m->deadline[i];
    uint64_t next = mp__wheel_next_expiration(w);
    cr_assert_leq(next, earliest, "next %" PRIu64 " after earliest %" PRIu64, next, earliest);
    if (earliest == UINT64_MAX || earliest <= w->elapsed_ms || earliest >> 6 == w->elapsed_ms >> 6)
        cr_assert_eq(next, earliest, "not exact at level 0: %" PRIu64 " vs %" PRIu64, next,
                     earliest);
    else
        cr_assert_gt(next, w->elapsed_ms);
}

Test(timer, randomized_against_a_sorted_model, .timeout = 60)
{
    static mp__timer_entry e[MODEL_N];
    static model m;
    static size_t expect[MODEL_N];
    uint64_t seed = test_seed();
    long ops = test_env_long("MP_TIMER_OPS", 100000);
    mp__timer_wheel w;
    uint64_t start = test_rand(&seed) % 2 ? test_rand(&seed) % ((uint64_t)1 << 50) : 0;
    mp__wheel_init(&w, start);
    memset(&m, 0, sizeof m);
    for (size_t i = 0; i < MODEL_N; i++)
        mp__timer_entry_init(&e[i]);

    size_t fired_total = 0;
    for (long op = 0; op < ops; op++) {
        size_t i = test_rand(&seed) % MODEL_N;
        unsigned kind = (unsigned)(test_rand(&seed) % 100);
        if (kind < 45) {
            uint64_t d = random_deadline(&seed, &m, w.elapsed_ms);
            mp__wheel_insert(&w, &e[i], d);
            m.count += !m.linked[i];
            m.linked[i] = true;
            m.deadline[i] = d;
            m.seq[i] = m.next_seq++;
        } else if (kind < 65) {
            cr_assert_eq(mp__wheel_remove(&w, &e[i]), m.linked[i], "op %ld: remove %zu", op, i);
            m.count -= m.linked[i];
            m.linked[i] = false;
        } else {
            uint64_t now = random_now(&seed, &w);
            uint64_t to = now > w.elapsed_ms ? now : w.elapsed_ms;
            size_t n = 0;
            for (size_t j = 0; j < MODEL_N; j++)
                if (m.linked[j] && m.deadline[j] <= to)
                    expect[n++] = j;
            qsort_r(expect, n, sizeof expect[0], by_deadline_then_seq, &m);
            mp__timer_entry *f = mp__wheel_advance(&w, now);
            cr_assert_eq(w.elapsed_ms, to);
            for (size_t k = 0; k < n; k++, f = f->next) {
                cr_assert_eq(f, &e[expect[k]], "op %ld: fired #%zu is %td, want %zu", op, k,
                             f ? f - e : -1, expect[k]);
                cr_assert_eq(f->where, MP__TIMER_NOT_LINKED);
                m.linked[expect[k]] = false;
            }
            cr_assert_null(f, "op %ld: fired more than the %zu due", op, n);
            m.count -= n;
            fired_total += n;
        }
        cr_assert_eq(mp__wheel_count(&w), m.count, "op %ld", op);
        check_next_expiration(&w, &m);
    }
    cr_assert_gt(fired_total, 0);

    /* Drain: everything left fires, in order, by the time the last deadline passes. */
    uint64_t last = 0;
    size_t left = m.count, n = 0;
    for (size_t j = 0; j < MODEL_N; j++)
        if (m.linked[j] && m.deadline[j] > last)
            last = m.deadline[j];
    uint64_t prev = 0;
    for (mp__timer_entry *f = mp__wheel_advance(&w, last); f; f = f->next, n++) {
        cr_assert_geq(f->deadline_ms, prev);
        prev = f->deadline_ms;
    }
    cr_assert_eq(n, left);
    cr_assert_eq(mp__wheel_count(&w), 0);
    cr_assert_eq(mp__wheel_next_expiration(&w), UINT64_MAX);
}

/* Timers: sleepers with random deadlines each wake exactly once and never early. The order
 * in which their polls then run is a matter of scheduling, not of the timers: timers due in
 * the same loop iteration are woken in deadline order (the wheel tests above check its order
 * exactly), but the last one woken goes to the LIFO slot and runs first, and how many fall
 * into one iteration depends on how busy the machine is (a rank check here failed under
 * ThreadSanitizer on a loaded machine). */
typedef struct sleeper {
    mp_task task;
    mp_timer timer;
    uint64_t deadline;
    uint64_t woke;
    _Atomic int wakes;
    _Atomic int *order;
    int rank;
} sleeper;

static mp_poll sleeper_poll(mp_task *t, mp_context *cx)
{
    sleeper *s = mp_container_of(t, sleeper, task);
    if (mp_timer_poll(&s->timer, s->deadline, cx) == MP_PENDING)
        return MP_PENDING;
    s->woke = mp_now_ms();
    atomic_fetch_add(&s->wakes, 1);
    s->rank = atomic_fetch_add(s->order, 1);
    return MP_READY;
}

static const mp_task_vtable sleeper_vt = {.poll = sleeper_poll};

Test(timer, timers_fire_once_and_in_order, .timeout = 60)
{
    mp_runtime *rt = test_runtime(2);
    enum { N = 200 };
    static sleeper s[N];
    _Atomic int order = 0;
    uint64_t rng = test_seed(), base = mp_now_ms() + 20;
    for (int i = 0; i < N; i++) {
        memset(&s[i], 0, sizeof s[i]);
        mp_task_init(&s[i].task, &sleeper_vt);
        mp_timer_init(&s[i].timer, rt);
        /* Distinct deadlines 3 ms apart, spawned in random order. */
        s[i].deadline = base + 3 * (uint64_t)i;
        s[i].order = &order;
    }
    for (int i = N - 1; i > 0; i--) { /* shuffle the spawn order */
        int j = (int)(test_rand(&rng) % (uint64_t)(i + 1));
        sleeper tmp = s[i];
        s[i] = s[j];
        s[j] = tmp;
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(mp_spawn_joinable(rt, &s[i].task), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(mp_join(&s[i].task), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&s[i].wakes), 1);
        cr_assert_geq(s[i].woke, s[i].deadline, "woke %llu ms early",
                      (unsigned long long)(s[i].deadline - s[i].woke));
    }
    mp__spin_lock(&rt->reactor.wheel_lock);
    cr_assert_eq(mp__wheel_count(&rt->reactor.wheel), 0);
    cr_assert_eq(rt->reactor.armed_ms, UINT64_MAX, "nothing pending: no timer armed");
    mp__spin_unlock(&rt->reactor.wheel_lock);
    mp_runtime_free(rt);
}

/* A sleeper whose deadline is set by its first poll, 200 ms from then: it is always armed
 * once, however late a loaded machine runs that poll (a deadline set at spawn had passed by
 * the first poll under ThreadSanitizer once: the task completed, was never armed, and the
 * test waited for an armed timer until its timeout). */
static mp_poll late_sleeper_poll(mp_task *t, mp_context *cx)
{
    sleeper *s = mp_container_of(t, sleeper, task);
    if (s->deadline == 0) /* far enough that the cancel below comes first on a slow machine */
        s->deadline = mp_now_ms() + 200;
    return sleeper_poll(t, cx);
}

static const mp_task_vtable late_sleeper_vt = {.poll = late_sleeper_poll};

Test(timer, cancelled_timer_never_fires, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    sleeper s = {0};
    _Atomic int order = 0;
    mp_task_init(&s.task, &late_sleeper_vt);
    mp_timer_init(&s.timer, rt);
    s.order = &order;
    cr_assert_eq(mp_spawn_joinable(rt, &s.task), 0);
    for (size_t armed = 0; !armed; sched_yield()) {
        mp__spin_lock(&rt->reactor.wheel_lock);
        armed = mp__wheel_count(&rt->reactor.wheel);
        mp__spin_unlock(&rt->reactor.wheel_lock);
    }
    mp_task_cancel(&s.task); /* its cancel would normally disarm; do it by hand here */
    mp_timer_cancel(&s.timer);
    cr_assert_eq(mp_join(&s.task), -ECANCELED);
    /* The last pending timer is gone: the loop's timer is disarmed at once, not left to fire
     * into an idle runtime. */
    for (uint64_t armed = 0; armed != UINT64_MAX; usleep(1000)) {
        mp__spin_lock(&rt->reactor.wheel_lock);
        armed = rt->reactor.armed_ms;
        mp__spin_unlock(&rt->reactor.wheel_lock);
    }
    /* Past the deadline (read after the join, which orders the poll's write before it). */
    while (mp_now_ms() < s.deadline + 50)
        usleep(1000);
    cr_assert_eq(atomic_load(&s.wakes), 0);
    mp_runtime_free(rt);
}

/* The lost timer wake-up. libuv 1.44's uv_run(UV_RUN_ONCE) runs due timers before it works
 * out how long to block; a timer that became due while the driver was away running a task
 * fired there, woke its task into the driver's queue, and the loop then blocked in
 * epoll_wait(-1) with nothing else armed: the task was never run. (The driver no longer
 * blocks in uv_run at all, reactor.c; the test keeps the shape.) The shape, made
 * deterministic on one worker: a sleeper is pending with its deadline 5 ms away and the
 * worker drives the loop; a spawned task wakes it and spins past that deadline; the worker
 * parks, re-enters the loop, and the sleeper's timer is due right then. */
typedef struct oneshot_sleeper {
    mp_task task;
    mp_timer timer;
    uint64_t deadline;
    _Atomic int polls;
    _Atomic int done;
    _Atomic int released;
} oneshot_sleeper;

static mp_poll oneshot_sleeper_poll(mp_task *t, mp_context *cx)
{
    oneshot_sleeper *s = mp_container_of(t, oneshot_sleeper, task);
    atomic_fetch_add(&s->polls, 1);
    if (mp_timer_poll(&s->timer, s->deadline, cx) == MP_PENDING)
        return MP_PENDING;
    atomic_store(&s->done, 1);
    return MP_READY;
}

static void oneshot_sleeper_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, oneshot_sleeper, task)->released, 1);
}

static const mp_task_vtable oneshot_sleeper_vt = {.poll = oneshot_sleeper_poll,
                                                  .release = oneshot_sleeper_release};

static void spin_until(void *arg)
{
    uint64_t until = *(uint64_t *)arg;
    while (mp_now_ms() < until)
        ;
}

static void timer_due_as_the_driver_reenters(unsigned workers)
{
    mp_runtime *rt = test_runtime(workers);
    /* One per round: with two workers a round's spinner may still be reading its `until`
     * when the next round begins (the sleeper completed on the other worker). */
    static uint64_t untils[10];
    for (int round = 0; round < 10; round++) {
        oneshot_sleeper s = {0};
        mp_task_init(&s.task, &oneshot_sleeper_vt);
        mp_timer_init(&s.timer, rt);
        s.deadline = mp_now_ms() + 5;
        uint64_t *until = &untils[round];
        *until = s.deadline + 2;
        cr_assert_eq(mp_spawn(rt, &s.task), 0);
        while (atomic_load(&s.polls) == 0)
            usleep(100);
        usleep(1000); /* every worker back asleep, one of them in the loop */
        cr_assert_eq(mp_spawn_fn(rt, spin_until, until, NULL), 0);
        /* Not a timing assertion: 10 s is the watchdog of a wake-up that never comes. */
        for (int i = 0; i < 10000 && !atomic_load(&s.released); i++)
            usleep(1000);
        cr_assert(atomic_load(&s.done), "round %d: sleeper never woken (%d polls)", round,
                  atomic_load(&s.polls));
        cr_assert(atomic_load(&s.released));
    }
    mp_runtime_free(rt);
}

Test(timer, timer_due_as_the_driver_reenters_the_loop_one_worker, .timeout = 120)
{
    timer_due_as_the_driver_reenters(1);
}

Test(timer, timer_due_as_the_driver_reenters_the_loop_two_workers, .timeout = 120)
{
    timer_due_as_the_driver_reenters(2);
}

/* "The deadline may change between polls": after a deadline has fired, a poll with a later
 * one waits for that one (a stale fired flag made it READY at once). */
typedef struct moving_sleeper {
    mp_task task;
    mp_timer timer;
    uint64_t first, second, woke;
    int stage;
} moving_sleeper;

static mp_poll moving_sleeper_poll(mp_task *t, mp_context *cx)
{
    moving_sleeper *m = mp_container_of(t, moving_sleeper, task);
    if (m->stage == 0) {
        if (mp_timer_poll(&m->timer, m->first, cx) == MP_PENDING)
            return MP_PENDING;
        m->stage = 1;
        m->second = mp_now_ms() + 50;
    }
    if (mp_timer_poll(&m->timer, m->second, cx) == MP_PENDING)
        return MP_PENDING;
    m->woke = mp_now_ms();
    mp_timer_cancel(&m->timer);
    return MP_READY;
}

static const mp_task_vtable moving_sleeper_vt = {.poll = moving_sleeper_poll};

Test(timer, a_fired_timer_moved_later_waits_for_the_new_deadline, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    for (int round = 0; round < 5; round++) {
        moving_sleeper m = {0};
        mp_task_init(&m.task, &moving_sleeper_vt);
        mp_timer_init(&m.timer, rt);
        m.first = mp_now_ms() + 2;
        cr_assert_eq(mp_spawn_joinable(rt, &m.task), 0);
        cr_assert_eq(mp_join(&m.task), 0);
        cr_assert_geq(m.woke, m.second, "READY %llu ms before the moved deadline",
                      (unsigned long long)(m.second - m.woke));
    }
    mp_runtime_free(rt);
}

/* A keep-alive connection moves its deadline later with every request. While the entry is
 * linked, that only records the new deadline: the wheel keeps the entry where it was, and
 * when it comes due the loop moves it on instead of waking the task, so the task is woken
 * once, at (never before) the last deadline it asked for. */
typedef struct pushed_sleeper {
    mp_task task;
    mp_timer timer;
    uint64_t base, last, woke;
    uint64_t entry_ms; /* where the wheel holds the entry after the last move */
    int moves, polls_after_last;
} pushed_sleeper;

static mp_poll pushed_sleeper_poll(mp_task *t, mp_context *cx)
{
    pushed_sleeper *p = mp_container_of(t, pushed_sleeper, task);
    if (p->moves < 5) {
        if (p->moves == 0) /* from the first poll: a late start must not pass the deadline */
            p->base = mp_now_ms();
        p->last = p->base + 200 + 20 * (uint64_t)p->moves++;
        cr_assert_eq(mp_timer_poll(&p->timer, p->last, cx), MP_PENDING);
        if (p->moves < 5)
            return mp_yield(cx); /* polled again at once: the next move */
        mp__spin_lock(&p->timer.rt->reactor.wheel_lock);
        p->entry_ms = p->timer.deadline_ms;
        mp__spin_unlock(&p->timer.rt->reactor.wheel_lock);
        return MP_PENDING;
    }
    p->polls_after_last++;
    if (mp_timer_poll(&p->timer, p->last, cx) == MP_PENDING)
        return MP_PENDING;
    p->woke = mp_now_ms();
    mp_timer_cancel(&p->timer);
    return MP_READY;
}

static const mp_task_vtable pushed_sleeper_vt = {.poll = pushed_sleeper_poll};

Test(timer, a_linked_timer_moved_later_fires_once_at_the_last_deadline, .timeout = 30)
{
    for (unsigned workers = 1; workers <= 2; workers++) {
        mp_runtime *rt = test_runtime(workers);
        for (int round = 0; round < 3; round++) {
            pushed_sleeper p = {0};
            mp_task_init(&p.task, &pushed_sleeper_vt);
            mp_timer_init(&p.timer, rt);
            cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
            cr_assert_eq(mp_join(&p.task), 0);
            cr_assert_eq(p.entry_ms, p.base + 200, "moving later left the wheel alone");
            cr_assert_geq(p.woke, p.last, "READY %llu ms before the last deadline",
                          (unsigned long long)(p.last - p.woke));
            cr_assert_eq(p.polls_after_last, 1, "woken at an earlier deadline (%d polls)",
                         p.polls_after_last);
        }
        mp__spin_lock(&rt->reactor.wheel_lock);
        cr_assert_eq(mp__wheel_count(&rt->reactor.wheel), 0);
        mp__spin_unlock(&rt->reactor.wheel_lock);
        mp_runtime_free(rt);
    }
}

/* The lock-free move (mp_timer_poll's move_later) racing the loop's firing: deadlines 1-2 ms
 * ahead, moved later by polls that yield, while the loop fires the same entries. A lost race
 * leaves a task waiting for a timer that is no longer linked (the test times out); a won one
 * by the wrong side makes a poll READY before its deadline. */
typedef struct racer {
    mp_task task;
    mp_timer timer;
    uint64_t deadline, rng;
    int fires, moves;
    bool yielded, early;
} racer;

enum { RACERS = 32, RACER_FIRES = 40, RACER_MOVES = 3 };

static mp_poll racer_poll(mp_task *t, mp_context *cx)
{
    racer *r = mp_container_of(t, racer, task);
    for (;;) {
        uint64_t now = mp_now_ms();
        if (r->deadline == 0) {
            r->deadline = now + 1 + test_rand(&r->rng) % 2;
            r->moves = 0;
        } else if (r->yielded) {
            /* Polled again after a yield: move the deadline later (or leave it), often to
             * just past now, where the loop is firing. A poll woken by the timer keeps it. */
            uint64_t want = now + test_rand(&r->rng) % 3;
            if (want > r->deadline)
                r->deadline = want;
            r->moves++;
        }
        r->yielded = false;
        if (mp_timer_poll(&r->timer, r->deadline, cx) == MP_PENDING) {
            if (r->moves < RACER_MOVES && test_rand(&r->rng) % 2 == 0) {
                r->yielded = true;
                return mp_yield(cx);
            }
            return MP_PENDING;
        }
        if (mp_now_ms() < r->deadline)
            r->early = true;
        r->deadline = 0;
        if (++r->fires == RACER_FIRES) {
            mp_timer_cancel(&r->timer);
            return MP_READY;
        }
    }
}

static const mp_task_vtable racer_vt = {.poll = racer_poll};

static void race_the_loop(unsigned fire_delay_us)
{
    mp__test_timer_fire_delay_us(fire_delay_us);
    for (unsigned workers = 1; workers <= 2; workers++) {
        mp_runtime *rt = test_runtime(workers);
        static racer r[RACERS];
        uint64_t seed = test_seed();
        for (int i = 0; i < RACERS; i++) {
            memset(&r[i], 0, sizeof r[i]);
            r[i].rng = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;
            mp_task_init(&r[i].task, &racer_vt);
            mp_timer_init(&r[i].timer, rt);
            cr_assert_eq(mp_spawn_joinable(rt, &r[i].task), 0);
        }
        for (int i = 0; i < RACERS; i++) {
            cr_assert_eq(mp_join(&r[i].task), 0);
            cr_assert_eq(r[i].fires, RACER_FIRES);
            cr_assert(!r[i].early, "racer %d was READY before its deadline", i);
        }
        mp__spin_lock(&rt->reactor.wheel_lock);
        cr_assert_eq(mp__wheel_count(&rt->reactor.wheel), 0);
        mp__spin_unlock(&rt->reactor.wheel_lock);
        mp_runtime_free(rt);
    }
    mp__test_timer_fire_delay_us(0);
}

Test(timer, moving_later_races_the_loop_firing_and_loses_no_wake, .timeout = 120)
{
    race_the_loop(0);
}

/* The same with the loop slowed down between reading a due timer's deadline and firing it
 * (testhook.c): two workers move deadlines inside that window many times a run. */
Test(timer, moving_later_inside_the_loops_decision_loses_no_wake, .timeout = 120)
{
    race_the_loop(300);
}
