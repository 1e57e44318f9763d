/* Tests for daemon/core/httpdate.c: IMF-fixdate out, the three HTTP-date forms in. */
#include <criterion/criterion.h>
#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/httpdate.h"

static const time_t NOW = 1763714220; /* 2025-11-21 08:37:00 UTC */

static time_t parse(const char *s)
{
    time_t t = 12345;
    int rc = md_httpdate_parse(s, strlen(s), NOW, &t);
    return rc == 0 ? t : (time_t)-1;
}

Test(httpdate, formats_imf_fixdate, .timeout = 5)
{
    char buf[MD_HTTPDATE_LEN + 1];
    cr_assert_eq(md_httpdate_format(784111777, buf), MD_HTTPDATE_LEN);
    cr_assert_str_eq(buf, "Sun, 06 Nov 1994 08:49:37 GMT");
    md_httpdate_format(0, buf);
    cr_assert_str_eq(buf, "Thu, 01 Jan 1970 00:00:00 GMT");
    md_httpdate_format(951782400, buf); /* a leap day of a year divisible by 400 */
    cr_assert_str_eq(buf, "Tue, 29 Feb 2000 00:00:00 GMT");
    md_httpdate_format(NOW, buf);
    cr_assert_str_eq(buf, "Fri, 21 Nov 2025 08:37:00 GMT");
}

/* Beyond four-digit years and before 1970: the nearest date that can be written. */
Test(httpdate, formats_out_of_range_clamped, .timeout = 5)
{
    char buf[MD_HTTPDATE_LEN + 1];
    md_httpdate_format(-1, buf);
    cr_assert_str_eq(buf, "Thu, 01 Jan 1970 00:00:00 GMT");
    md_httpdate_format((time_t)400000000000LL, buf);
    cr_assert_str_eq(buf, "Fri, 31 Dec 9999 23:59:59 GMT");
}

/* Every second of a few years round-trips through format and parse, checked against gmtime_r. */
Test(httpdate, round_trips_against_gmtime, .timeout = 20)
{
    static const char *const mon[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    char buf[MD_HTTPDATE_LEN + 1];
    for (time_t t = 0; t < (time_t)4102444800LL; t += 86400 * 7 + 3607) {
        struct tm tm;
        gmtime_r(&t, &tm);
        md_httpdate_format(t, buf);
        char want[64];
        snprintf(want, sizeof want, "%.3s, %02d %s %04d %02d:%02d:%02d GMT",
                 "SunMonTueWedThuFriSat" + 3 * tm.tm_wday, tm.tm_mday, mon[tm.tm_mon],
                 tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        cr_assert_str_eq(buf, want);
        cr_assert_eq(parse(buf), t, "%s", buf);
    }
}

Test(httpdate, parses_the_three_forms, .timeout = 5)
{
    cr_assert_eq(parse("Sun, 06 Nov 1994 08:49:37 GMT"), 784111777);
    cr_assert_eq(parse("Sunday, 06-Nov-94 08:49:37 GMT"), 784111777);
    cr_assert_eq(parse("Sun Nov  6 08:49:37 1994"), 784111777);
    cr_assert_eq(parse("Sun Nov 16 08:49:37 1994"), 784111777 + 10 * 86400);
    /* The day name is not checked against the date (nor by nginx). */
    cr_assert_eq(parse("Mon, 06 Nov 1994 08:49:37 GMT"), 784111777);
    cr_assert_eq(parse("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
    cr_assert_eq(parse("Fri, 31 Dec 9999 23:59:59 GMT"), (time_t)253402300799LL);
}

/* RFC 850's two-digit year: more than 50 years ahead of now's year is the century before. */
Test(httpdate, rfc850_two_digit_year, .timeout = 5)
{
    char buf[MD_HTTPDATE_LEN + 1];
    md_httpdate_format(parse("Thursday, 01-Jan-70 00:00:00 GMT"), buf); /* 45 years on */
    cr_assert_str_eq(buf, "Wed, 01 Jan 2070 00:00:00 GMT");
    md_httpdate_format(parse("Monday, 01-Jan-75 00:00:00 GMT"), buf); /* 50 years on: kept */
    cr_assert_str_eq(buf, "Tue, 01 Jan 2075 00:00:00 GMT");
    md_httpdate_format(parse("Monday, 01-Jan-80 00:00:00 GMT"), buf); /* 55: the 1900s */
    cr_assert_str_eq(buf, "Tue, 01 Jan 1980 00:00:00 GMT");
    md_httpdate_format(parse("Friday, 21-Nov-25 08:37:00 GMT"), buf);
    cr_assert_str_eq(buf, "Fri, 21 Nov 2025 08:37:00 GMT");
}

Test(httpdate, refuses_what_is_not_an_http_date, .timeout = 5)
{
    static const char *const bad[] = {
        "",
        "Sun, 06 Nov 1994 08:49:37 GMT ", /* trailing bytes */
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "sun, 06 nov 1994 08:49:37 GMT", /* names are case-sensitive */
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 29 Feb 1900 08:49:37 GMT", /* 1900 was no leap year */
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994",
        "Sun Nov  6 08:49:37 94",
        "Caturday, 06-Nov-94 08:49:37 GMT",
        "1994-11-06T08:49:37Z",
        "784111777",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        time_t t = 7;
        cr_assert_eq(md_httpdate_parse(bad[i], strlen(bad[i]), NOW, &t), -EINVAL, "%s", bad[i]);
        cr_assert_eq(t, 7);
    }
    /* Only the n bytes given are read. */
    time_t t;
    cr_assert_eq(md_httpdate_parse("Sun, 06 Nov 1994 08:49:37 GMTxyz", 29, NOW, &t), 0);
    cr_assert_eq(t, 784111777);
}

/* A locale with other day and month names changes nothing (strftime's %a would). */
Test(httpdate, locale_plays_no_part, .timeout = 5)
{
    if (setlocale(LC_ALL, "de_DE.UTF-8") == NULL && setlocale(LC_ALL, "fr_FR.UTF-8") == NULL)
        cr_skip_test("no other locale installed");
    char buf[MD_HTTPDATE_LEN + 1];
    md_httpdate_format(784111777, buf);
    setlocale(LC_ALL, "C");
    cr_assert_str_eq(buf, "Sun, 06 Nov 1994 08:49:37 GMT");
}
