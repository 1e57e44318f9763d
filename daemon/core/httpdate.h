/* HTTP-date (RFC 9110 5.6.7): the one formatter and the one parser.
 *
 * magpied sends IMF-fixdate only ("Sun, 06 Nov 1994 08:49:37 GMT": Date, Last-Modified) and
 * reads all three forms a recipient must accept (If-Modified-Since, If-Unmodified-Since,
 * If-Range): IMF-fixdate, the obsolete RFC 850 form ("Sunday, 06-Nov-94 08:49:37 GMT") and
 * asctime's ("Sun Nov  6 08:49:37 1994"). Neither direction uses strftime() or strptime(),
 * whose day and month names follow the locale, nor the time zone: the calendar is computed
 * here, in UTC, as the RFC's names are fixed and case-sensitive.
 */
#ifndef MD_HTTPDATE_H
#define MD_HTTPDATE_H

#include <stddef.h>
#include <time.h>

/* Bytes of an IMF-fixdate, without a NUL. */
enum { MD_HTTPDATE_LEN = 29 };

/* t as an IMF-fixdate in buf (MD_HTTPDATE_LEN + 1 bytes, NUL-terminated); MD_HTTPDATE_LEN.
 * A time before 1970 or after 9999 is written as the nearest of those (four-digit years). */
size_t md_httpdate_format(time_t t, char *buf);

/* s[0..n), an HTTP-date in any of the three forms and nothing else: 0 with *out, or -EINVAL.
 * now places RFC 850's two-digit year: a year that would be more than 50 years after now's is
 * the latest past year with those digits (RFC 9110 5.6.7). */
int md_httpdate_parse(const char *s, size_t n, time_t now, time_t *out);

#endif
