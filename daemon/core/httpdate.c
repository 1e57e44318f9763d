/* HTTP-date (httpdate.h): IMF-fixdate out; IMF-fixdate, RFC 850 and asctime in. */
#include "core/httpdate.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static const char *const days[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const long_days[7] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                         "Thursday", "Friday", "Saturday"};
static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

enum {
    DAY_S = 86400,
    YEAR_MAX = 9999,
};

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; m 1..12), and back: H. Hinnant's
 * days_from_civil and civil_from_days, in eras of 400 years. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
    *m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static bool leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static unsigned month_days(int64_t y, unsigned m)
{
    static const unsigned char n[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap(y) ? 29 : n[m - 1];
}

static char *put2(char *w, unsigned v)
{
    w[0] = (char)('0' + v / 10 % 10);
    w[1] = (char)('0' + v % 10);
    return w + 2;
}

size_t md_httpdate_format(time_t t, char *buf)
{
    int64_t s = (int64_t)t;
    int64_t lo = 0, hi = days_from_civil(YEAR_MAX + 1, 1, 1) * DAY_S - 1;
    s = s < lo ? lo : s > hi ? hi : s;
    int64_t z = s / DAY_S, sod = s % DAY_S;
    int64_t y;
    unsigned m, d;
    civil_from_days(z, &y, &m, &d);
    char *w = buf;
    memcpy(w, days[(z + 4) % 7], 3); /* 1970-01-01 was a Thursday */
    w += 3;
    *w++ = ',';
    *w++ = ' ';
    w = put2(w, d);
    *w++ = ' ';
    memcpy(w, months[m - 1], 3);
    w += 3;
    *w++ = ' ';
    w = put2(w, (unsigned)(y / 100));
    w = put2(w, (unsigned)(y % 100));
    *w++ = ' ';
    w = put2(w, (unsigned)(sod / 3600));
    *w++ = ':';
    w = put2(w, (unsigned)(sod / 60 % 60));
    *w++ = ':';
    w = put2(w, (unsigned)(sod % 60));
    memcpy(w, " GMT", 5);
    return MD_HTTPDATE_LEN;
}

/* A cursor over the value: each reader consumes what it matched, or fails. */
struct cur {
    const char *p, *end;
};

static bool lit(struct cur *c, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* n digits exactly (a leading space instead of the first with space_ok: asctime's day). */
static bool digits(struct cur *c, unsigned n, bool space_ok, unsigned *out)
{
    if ((size_t)(c->end - c->p) < n)
        return false;
    unsigned v = 0;
    for (unsigned i = 0; i < n; i++) {
        char ch = c->p[i];
        if (i == 0 && space_ok && ch == ' ' && n > 1)
            continue;
        if (ch < '0' || ch > '9')
            return false;
        v = v * 10 + (unsigned)(ch - '0');
    }
    c->p += n;
    *out = v;
    return true;
}

/* One of names[0..count), exactly (the RFC's names are case-sensitive). */
static bool name(struct cur *c, const char *const *names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (lit(c, names[i]))
            return true;
    return false;
}

static bool month(struct cur *c, unsigned *m)
{
    for (unsigned i = 0; i < 12; i++) {
        if (lit(c, months[i])) {
            *m = i + 1;
            return true;
        }
    }
    return false;
}

/* "HH:MM:SS" (a leap second's 60 is taken; it counts as the next minute's 0). */
static bool clock_time(struct cur *c, unsigned *h, unsigned *mi, unsigned *s)
{
    return digits(c, 2, false, h) && lit(c, ":") && digits(c, 2, false, mi) && lit(c, ":") &&
           digits(c, 2, false, s) && *h <= 23 && *mi <= 59 && *s <= 60;
}

int md_httpdate_parse(const char *s, size_t n, time_t now, time_t *out)
{
    unsigned d = 0, m = 0, y = 0, h = 0, mi = 0, sec = 0;
    int64_t year;
    struct cur c = {s, s + n};
    if (name(&c, days, 7) && lit(&c, ", ")) {
        /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
        if (!(digits(&c, 2, false, &d) && lit(&c, " ") && month(&c, &m) && lit(&c, " ") &&
              digits(&c, 4, false, &y) && lit(&c, " ") && clock_time(&c, &h, &mi, &sec) &&
              lit(&c, " GMT")))
            return -EINVAL;
        year = y;
    } else if ((c.p = s, name(&c, long_days, 7)) && lit(&c, ", ")) {
        /* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
        if (!(digits(&c, 2, false, &d) && lit(&c, "-") && month(&c, &m) && lit(&c, "-") &&
              digits(&c, 2, false, &y) && lit(&c, " ") && clock_time(&c, &h, &mi, &sec) &&
              lit(&c, " GMT")))
            return -EINVAL;
        int64_t days_now = (int64_t)now / DAY_S - ((int64_t)now % DAY_S < 0);
        int64_t now_year;
        unsigned nm, nd;
        civil_from_days(days_now, &now_year, &nm, &nd);
        int64_t cent = now_year - (now_year % 100 + 100) % 100;
        year = cent + y;
        if (year > now_year + 50)
            year -= 100;
    } else if ((c.p = s, name(&c, days, 7)) && lit(&c, " ")) {
        /* asctime: "Sun Nov  6 08:49:37 1994" */
        if (!(month(&c, &m) && lit(&c, " ") && digits(&c, 2, true, &d) && lit(&c, " ") &&
              clock_time(&c, &h, &mi, &sec) && lit(&c, " ") && digits(&c, 4, false, &y)))
            return -EINVAL;
        year = y;
    } else {
        return -EINVAL;
    }
    if (c.p != c.end || d == 0 || d > month_days(year, m))
        return -EINVAL;
    int64_t t = days_from_civil(year, m, d) * DAY_S + h * 3600 + mi * 60 + sec;
    if ((int64_t)(time_t)t != t)
        return -EINVAL;
    *out = (time_t)t;
    return 0;
}
