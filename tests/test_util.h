/* Helpers shared by the suites: a runtime for a test, a seed from the environment for stress
 * tests (MP_TEST_SEED, the one seed variable of every suite, printed so that a failure can be
 * replayed) and a small PRNG. */
#ifndef MP_TEST_UTIL_H
#define MP_TEST_UTIL_H

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "magpie_core.h"

/* A failed assertion ends the test's process at once instead of leaving the test's frame.
 * Criterion's own abort longjmps out of the test function and then runs its teardown and
 * exit: workers and threads still running tasks that point into the abandoned frame (a flag
 * they spin on, a task struct on the stack) read whatever the teardown writes there, and the
 * failure is reported as a crash of the test, if the reporter gets that far; a longjmp from an
 * assertion on a worker or helper thread is undefined and crashes the same way. Here the
 * assertion's message has been sent when this runs; criterion_test_die() reports the test as
 * failed and exits, so the test's frame and everything the threads use stays valid until
 * the process is gone. A .fini of a suite that includes this header does not run after a
 * failed assertion. */
_Noreturn static inline void test_fail_now(void)
{
    criterion_test_die("a failed assertion ended the test at once");
    abort(); /* criterion_test_die() exits */
}
#ifdef CR_FAIL_ABORT_
#undef CR_FAIL_ABORT_
#define CR_FAIL_ABORT_ test_fail_now
#endif

/* A runtime made as cfg says; the test fails if it cannot be. */
static inline mp_runtime *test_runtime_with(const mp_config *cfg)
{
    mp_runtime *rt = NULL;
    int rc = mp_runtime_new(&rt, cfg);
    cr_assert_eq(rc, 0, "mp_runtime_new: %d", rc);
    return rt;
}

/* A runtime of `workers` workers, every other setting the default. */
static inline mp_runtime *test_runtime(unsigned workers)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    return test_runtime_with(&cfg);
}

/* MP_TEST_SEED, or dflt when it is not set; printed either way. Never 0 (xorshift's fixed
 * point). */
static inline uint64_t test_seed_or(uint64_t dflt)
{
    const char *env = getenv("MP_TEST_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 0) : dflt;
    fprintf(stderr, "MP_TEST_SEED=%" PRIu64 "\n", seed);
    return seed ? seed : 1;
}

/* MP_TEST_SEED, or a new seed each run. */
static inline uint64_t test_seed(void)
{
    if (getenv("MP_TEST_SEED") && *getenv("MP_TEST_SEED"))
        return test_seed_or(0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return test_seed_or((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20));
}

static inline uint64_t test_rand(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* A blocking job that holds a pool thread until its flag is set: with blocking_threads = 1 the
 * jobs spawned behind it stay queued (mp_spawn_blocking(rt, test_hold, &flag, &h)). */
static inline void test_hold(void *flag)
{
    while (!atomic_load((_Atomic bool *)flag))
        usleep(1000);
}

/* A number from the environment, for sizing stress runs. */
static inline long test_env_long(const char *name, long dflt)
{
    const char *env = getenv(name);
    return env && *env ? strtol(env, NULL, 0) : dflt;
}

#endif
