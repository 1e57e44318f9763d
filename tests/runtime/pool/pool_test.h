/* Shared by the pool suites (tests/runtime/pool/test_*.c); include once per test binary. */
#ifndef MP_POOL_TEST_H
#define MP_POOL_TEST_H

#if defined(__SANITIZE_ADDRESS__)
/*
 * Criterion 2.4.1's runner (the parent process, not the test children) leaks 48 bytes when a
 * test with .timeout finishes while an earlier-started .timeout test still runs under
 * --jobs=2; LeakSanitizer then fails the whole binary. Reproduced with a three-test dummy
 * suite of empty bodies. We suppress leaks whose stack holds criterion_run_all_tests, which
 * only the runner's do: test children start from criterion_internal_test_main, so leaks in our
 * code are still reported. libcriterion has no frame pointers, so the match needs the slow
 * unwinder on malloc (our code allocates only at pool creation and deque growth). These names
 * are the sanitizers' documented hooks, not ours.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "fast_unwind_on_malloc=0";
}

const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:criterion_run_all_tests\n";
}
#endif

#endif /* MP_POOL_TEST_H */
