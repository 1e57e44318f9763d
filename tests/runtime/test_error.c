/* mp_strerror() (runtime/src/error.c): a message for every code the library returns, none of
 * them "Unknown error". */
#include <criterion/criterion.h>

#include <string.h>

#include "internal.h"

Test(error, errnos_read_as_the_system_says)
{
    cr_expect_str_eq(mp_strerror(-ENOENT), strerror(ENOENT));
    cr_expect_str_eq(mp_strerror(-ECONNREFUSED), "Connection refused");
    cr_expect_str_eq(mp_strerror(-ETIMEDOUT), strerror(ETIMEDOUT));
    cr_expect_str_eq(mp_strerror(-ESHUTDOWN), strerror(ESHUTDOWN));
    cr_expect_str_eq(mp_strerror(0), "success");
}

Test(error, the_end_of_a_stream_is_named)
{
    cr_expect_str_eq(mp_strerror(MP_EOF), "end of stream");
    cr_expect_str_eq(mp_strerror(UV_EOF), "end of stream", "the same code as libuv's");
}

Test(error, resolve_codes_have_messages_of_their_own)
{
    const int codes[] = {MP_ERESOLVE_NOTFOUND, MP_ERESOLVE_AGAIN, MP_ERESOLVE_NOFAMILY,
                         MP_ERESOLVE_FAIL};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *m = mp_strerror(codes[i]);
        cr_expect(strstr(m, "name") != NULL, "%d: %s", codes[i], m);
        for (size_t j = 0; j < i; j++)
            cr_expect_str_neq(m, mp_strerror(codes[j]), "%d and %d", codes[i], codes[j]);
        /* Never a code the system or libuv might return. */
        cr_expect_null(strerrordesc_np(-codes[i]), "%d is an errno", codes[i]);
        cr_expect(codes[i] < UV_EAI_SOCKTYPE || codes[i] > UV_EAI_ADDRFAMILY, "%d", codes[i]);
    }
    cr_expect_str_eq(mp_strerror(MP_ERESOLVE_NOTFOUND), "name not found");
}

Test(error, libuv_codes_that_are_not_errnos)
{
    cr_expect_str_eq(mp_strerror(UV_EAI_NONAME), "unknown node or service");
    cr_expect_str_eq(mp_strerror(UV_EAI_AGAIN), "temporary failure");
    cr_expect_str_eq(mp_strerror(UV_ECHARSET), "invalid Unicode character");
    /* libuv's negative errnos read as the system's text. */
    cr_expect_str_eq(mp_strerror(UV_ECONNRESET), strerror(ECONNRESET));
}

Test(error, no_code_reads_unknown_but_a_code_nobody_returns)
{
    for (int e = 1; e < 134; e++) { /* Linux's errnos */
        if (strerrordesc_np(e) == NULL)
            continue;
        cr_expect_str_neq(mp_strerror(-e), "unknown error", "-%d", e);
        cr_expect(strstr(mp_strerror(-e), "Unknown error") == NULL, "-%d", e);
    }
    cr_expect_str_eq(mp_strerror(-4094 + 2000), "unknown error");
    cr_expect_str_eq(mp_strerror(1), "unknown error");
    cr_expect_str_eq(mp_strerror(INT_MIN), "unknown error");
}
