/* Tests for daemon/core/text.c: ASCII case without the locale, integers, booleans, names. */
#include <criterion/criterion.h>
#include <errno.h>
#include <locale.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"

Test(text, ascii_lower_folds_capitals_only, .timeout = 5)
{
    cr_assert_eq(md_ascii_lower('A'), 'a');
    cr_assert_eq(md_ascii_lower('Z'), 'z');
    cr_assert_eq(md_ascii_lower('a'), 'a');
    cr_assert_eq(md_ascii_lower('@'), '@');
    cr_assert_eq(md_ascii_lower('['), '[');
    cr_assert_eq(md_ascii_lower(0xc9), 0xc9); /* Latin-1 É stays: no locale */
}

Test(text, eq_lower_whole_and_prefix, .timeout = 5)
{
    cr_assert(md_ascii_eq_lower("Keep-Alive", 10, "keep-alive"));
    cr_assert(md_ascii_eq_lower("KEEP-ALIVE", 10, "keep-alive"));
    cr_assert_not(md_ascii_eq_lower("keep-alive", 9, "keep-alive")); /* shorter */
    cr_assert_not(md_ascii_eq_lower("keep-alives", 11, "keep-alive"));
    cr_assert_not(md_ascii_eq_lower("keep_alive", 10, "keep-alive"));
    /* A prefix: n bytes of a longer string against an n-byte literal. */
    cr_assert(md_ascii_eq_lower("HTTP://host/", 7, "http://"));
    cr_assert(md_ascii_eq_lower("", 0, ""));
}

Test(text, eq_ci_two_runtime_strings, .timeout = 5)
{
    cr_assert(md_ascii_eq_ci("X-Tenant", 8, "x-TENANT", 8));
    cr_assert(md_ascii_eq_ci("", 0, "", 0));
    cr_assert_not(md_ascii_eq_ci("X-Tenant", 8, "x-tenan", 7));
    cr_assert_not(md_ascii_eq_ci("a[", 2, "A{", 2)); /* '[' is not '{' folded */
    /* The locale plays no part (tr_TR folds 'I' to a dotless i in strcasecmp). */
    setlocale(LC_ALL, "tr_TR.UTF-8");
    cr_assert(md_ascii_eq_ci("TITLE", 5, "title", 5));
    setlocale(LC_ALL, "C");
}

Test(text, parse_u64_digits_only, .timeout = 5)
{
    uint64_t v = 7;
    cr_assert_eq(md_parse_u64("0", 0, 10, &v), 0);
    cr_assert_eq(v, 0);
    cr_assert_eq(md_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    cr_assert_eq(v, UINT64_MAX);
    cr_assert_eq(md_parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
    cr_assert_eq(md_parse_u64("11", 0, 10, &v), -ERANGE);
    cr_assert_eq(md_parse_u64("", 0, 10, &v), -EINVAL);
    cr_assert_eq(md_parse_u64("-1", 0, 10, &v), -EINVAL);
    cr_assert_eq(md_parse_u64(" 1", 0, 10, &v), -EINVAL);
    cr_assert_eq(md_parse_u64("0x1", 0, 10, &v), -EINVAL);
}

Test(text, parse_bool_every_word_any_case, .timeout = 5)
{
    static const char *const on[] = {"on", "ON", "Yes", "true", "TRUE", "1"};
    static const char *const off[] = {"off", "No", "FALSE", "0"};
    bool b;
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        b = false;
        cr_assert_eq(md_parse_bool(on[i], &b), 0, "%s", on[i]);
        cr_assert(b, "%s", on[i]);
    }
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        b = true;
        cr_assert_eq(md_parse_bool(off[i], &b), 0, "%s", off[i]);
        cr_assert_not(b, "%s", off[i]);
    }
    cr_assert_eq(md_parse_bool("enabled", &b), -EINVAL);
    cr_assert_eq(md_parse_bool("", &b), -EINVAL);
    /* A configuration key's: the same words, and what it expected and got when not one. */
    char msg[256] = "";
    cr_assert_eq(md_conf_bool("Yes", &b, msg, sizeof msg), 0);
    cr_assert(b);
    cr_assert_str_eq(msg, "");
    cr_assert_eq(md_conf_bool("maybe", &b, msg, sizeof msg), -EINVAL);
    cr_assert_str_eq(msg, "expected on, yes, true or 1, or off, no, false or 0 (any case), got "
                          "\"maybe\"");
}

Test(text, name_ok, .timeout = 5)
{
    cr_assert(md_text_name_ok("app_1-b", 7, 32));
    cr_assert_not(md_text_name_ok("", 0, 32));
    cr_assert_not(md_text_name_ok("a b", 3, 32));
    cr_assert_not(md_text_name_ok("abcd", 4, 4)); /* max counts the NUL */
}

/* The elements of s, joined with '|'. */
static const char *elements(const char *s)
{
    static char out[256];
    size_t o = 0;
    md_list l = md_list_of(s, strlen(s));
    const char *e;
    size_t n;
    out[0] = '\0';
    while (md_list_next(&l, &e, &n)) {
        cr_assert(n != 0);
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%.*s", o != 0 ? "|" : "", (int)n, e);
    }
    return out;
}

Test(text, list_elements_without_ows_or_empties, .timeout = 5)
{
    cr_assert_str_eq(elements("close"), "close");
    cr_assert_str_eq(elements(" keep-alive ,\tUpgrade\t"), "keep-alive|Upgrade");
    cr_assert_str_eq(elements(",, a ,,\t, b,"), "a|b"); /* empty elements: skipped */
    cr_assert_str_eq(elements("gzip;q=0.5, br ; q=1"), "gzip;q=0.5|br ; q=1");
    cr_assert_str_eq(elements("a b, c"), "a b|c"); /* inner whitespace stays in the element */
    cr_assert_str_eq(elements(""), "");
    cr_assert_str_eq(elements(" , \t"), "");
}

Test(text, list_quoted_commas_belong_to_their_element, .timeout = 5)
{
    cr_assert_str_eq(elements("\"a,b\", W/\"c\""), "\"a,b\"|W/\"c\"");
    cr_assert_str_eq(elements("x;p=\"1,\\\"2\", y"), "x;p=\"1,\\\"2\"|y"); /* \" escapes */
    cr_assert_str_eq(elements("\"open, to the end"), "\"open, to the end");
    /* Bounded by n: the list ends where the caller says. */
    md_list l = md_list_of("a,b", 1);
    const char *e;
    size_t n;
    cr_assert(md_list_next(&l, &e, &n));
    cr_assert_eq(n, 1);
    cr_assert_not(md_list_next(&l, &e, &n));
}

/* The configuration's lists: words between commas, spaces and tabs, none empty. */
Test(text, words_of_a_configuration_list, .timeout = 5)
{
    const char *s = " GET,POST ,\tPUT,, 10.0.0.0/8 ", *w;
    size_t n;
    const char *want[] = {"GET", "POST", "PUT", "10.0.0.0/8"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert(md_words_next(&s, &w, &n), "word %zu", i);
        cr_assert_eq(n, strlen(want[i]));
        cr_assert(memcmp(w, want[i], n) == 0, "%.*s", (int)n, w);
    }
    cr_assert_not(md_words_next(&s, &w, &n));
    cr_assert_not(md_words_next(&s, &w, &n), "the end stays the end");
    const char *empty = " ,\t, ";
    cr_assert_not(md_words_next(&empty, &w, &n));
}

Test(text, uri_path_encode_escapes_what_a_path_cannot_carry, .timeout = 5)
{
    char out[64];
    const char in[] = "/a b/%/?#/\x01\xff/ok-._~!$&'()*+,;=:@";
    size_t n = md_uri_path_encode(in, sizeof in - 1, out, sizeof out);
    cr_assert_eq(n, strlen("/a%20b/%25/%3F%23/%01%FF/ok-._~!$&'()*+,;=:@"));
    cr_assert_arr_eq(out, "/a%20b/%25/%3F%23/%01%FF/ok-._~!$&'()*+,;=:@", n);
    /* Out of room: it stops before an escape it cannot write whole. */
    n = md_uri_path_encode("/a b", 4, out, 4);
    cr_assert_eq(n, 2);
    cr_assert_arr_eq(out, "/a", 2);
}
