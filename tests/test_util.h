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

#include "magpie_core.h"

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

/* A number from the environment, for sizing stress runs. */
static inline long test_env_long(const char *name, long dflt)
{
    const char *env = getenv(name);
    return env && *env ? strtol(env, NULL, 0) : dflt;
}

#endif
