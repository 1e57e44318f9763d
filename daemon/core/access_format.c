/* access_format.c: access-log lines, nginx's "combined" format or one JSON object per line.
 *
 * A line is built in the caller's buffer (MD_LOG_ACCESS_LINE_MAX bytes) by plain appends:
 * every field is escaped and cut to a cap, so the caps add up to less than the buffer and no
 * append needs a bounds check. The time is formatted once per second per thread.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/log.h"

/* Output caps per access-log field, after escaping; longer fields end in "...". */
enum {
    CAP_PEER = 64,
    CAP_METHOD = 64,
    CAP_TARGET = 4096,
    CAP_REFERER = 1024,
    CAP_USER_AGENT = 1024,
    CAP_FIXED = 256, /* the prefix, keys, punctuation, time, protocol and three numbers */
};
_Static_assert(CAP_FIXED + CAP_PEER + CAP_METHOD + CAP_TARGET + CAP_REFERER + CAP_USER_AGENT <=
                   MD_LOG_ACCESS_LINE_MAX,
               "an access line can outgrow its buffer");

typedef struct line {
    char *p;
    size_t len;
} line;

static inline void put(line *l, const char *s, size_t n)
{
    memcpy(l->p + l->len, s, n);
    l->len += n;
}

#define PUT_LIT(l, s) put((l), (s), sizeof(s) - 1)

static void put_u64(line *l, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    put(l, tmp + i, sizeof(tmp) - i);
}

enum escape { ESCAPE_CLF, ESCAPE_JSON };

/* A quoted field's content. CLF as nginx: '"', '\\', control bytes and bytes >= 0x7f as
 * "\xHH". JSON: \" \\ and \u00hh for control bytes and every byte >= 0x7f, so the line is
 * valid JSON (and ASCII) whatever the client sent. At most about cap bytes come out; a longer
 * field, or one marked cut, ends in "...". */
static void put_escaped(line *l, const char *s, size_t n, size_t cap, enum escape how, bool cut)
{
    static const char upper[] = "0123456789ABCDEF", lower[] = "0123456789abcdef";
    size_t start = l->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[6];
        size_t k;
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            e[0] = (char)c;
            k = 1;
        } else if (how == ESCAPE_CLF) {
            memcpy(e, "\\x", 2);
            e[2] = upper[c >> 4];
            e[3] = upper[c & 15];
            k = 4;
        } else if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            k = 2;
        } else {
            memcpy(e, "\\u00", 4);
            e[4] = lower[c >> 4];
            e[5] = lower[c & 15];
            k = 6;
        }
        if (l->len - start + k + 3 > cap) {
            cut = true;
            break;
        }
        put(l, e, k);
    }
    if (cut)
        PUT_LIT(l, "...");
}

/* A string field that may be absent (NULL or empty). */
static void put_field(line *l, const char *s, size_t n, size_t cap, enum escape how,
                      const char *absent)
{
    if (s == NULL || n == 0)
        put(l, absent, strlen(absent));
    else
        put_escaped(l, s, n, cap, how, false);
}

/* The formatted times of one second, per thread: strftime-like work once a second, not per
 * line. */
static _Thread_local struct {
    bool valid;
    time_t sec;
    char clf[48]; /* 21/Nov/2026:10:11:12 +0000 */
    char iso[48]; /* 2026-11-21T10:11:12Z */
} times;

static void times_for(time_t t)
{
    if (times.valid && times.sec == t)
        return;
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL) {
        snprintf(times.clf, sizeof(times.clf), "-");
        snprintf(times.iso, sizeof(times.iso), "-");
    } else {
        snprintf(times.clf, sizeof(times.clf), "%02d/%s/%04d:%02d:%02d:%02d +0000", tm.tm_mday,
                 months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        snprintf(times.iso, sizeof(times.iso), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    }
    times.sec = t;
    times.valid = true;
}

static void put_protocol(line *l, const md_access_entry *e)
{
    PUT_LIT(l, "HTTP/");
    put_u64(l, e->http_major);
    PUT_LIT(l, ".");
    put_u64(l, e->http_minor);
}

static void format_combined(line *l, const md_access_entry *e)
{
    put_field(l, e->peer, e->peer ? strlen(e->peer) : 0, CAP_PEER, ESCAPE_CLF, "-");
    PUT_LIT(l, " - - [");
    put(l, times.clf, strlen(times.clf));
    PUT_LIT(l, "] \"");
    if (e->method == NULL) {
        PUT_LIT(l, "-"); /* nothing that could be called a request line */
    } else {
        put_escaped(l, e->method, e->method_len, CAP_METHOD, ESCAPE_CLF, false);
        PUT_LIT(l, " ");
        if (e->target == NULL)
            PUT_LIT(l, "-");
        else
            put_escaped(l, e->target, e->target_len, CAP_TARGET, ESCAPE_CLF, e->target_cut);
        PUT_LIT(l, " ");
        put_protocol(l, e);
    }
    PUT_LIT(l, "\" ");
    put_u64(l, e->status);
    PUT_LIT(l, " ");
    put_u64(l, e->body_bytes);
    PUT_LIT(l, " \"");
    put_field(l, e->referer, e->referer_len, CAP_REFERER, ESCAPE_CLF, "-");
    PUT_LIT(l, "\" \"");
    put_field(l, e->user_agent, e->user_agent_len, CAP_USER_AGENT, ESCAPE_CLF, "-");
    PUT_LIT(l, "\"\n");
}

/* Absent strings are "" in JSON. */
static void format_json(line *l, const md_access_entry *e)
{
    PUT_LIT(l, "{\"time\":\"");
    put(l, times.iso, strlen(times.iso));
    PUT_LIT(l, "\",\"remote_addr\":\"");
    put_field(l, e->peer, e->peer ? strlen(e->peer) : 0, CAP_PEER, ESCAPE_JSON, "");
    PUT_LIT(l, "\",\"method\":\"");
    put_field(l, e->method, e->method_len, CAP_METHOD, ESCAPE_JSON, "");
    PUT_LIT(l, "\",\"target\":\"");
    if (e->target != NULL)
        put_escaped(l, e->target, e->target_len, CAP_TARGET, ESCAPE_JSON, e->target_cut);
    PUT_LIT(l, "\",\"protocol\":\"");
    if (e->method != NULL)
        put_protocol(l, e);
    PUT_LIT(l, "\",\"status\":");
    put_u64(l, e->status);
    PUT_LIT(l, ",\"body_bytes\":");
    put_u64(l, e->body_bytes);
    PUT_LIT(l, ",\"referer\":\"");
    put_field(l, e->referer, e->referer_len, CAP_REFERER, ESCAPE_JSON, "");
    PUT_LIT(l, "\",\"user_agent\":\"");
    put_field(l, e->user_agent, e->user_agent_len, CAP_USER_AGENT, ESCAPE_JSON, "");
    PUT_LIT(l, "\",\"duration_us\":");
    put_u64(l, e->duration_ns / 1000);
    PUT_LIT(l, "}\n");
}

size_t md_log_access_format(char *buf, md_access_format format, bool prefixed,
                            const md_access_entry *e)
{
    line l = {buf, 0};
    times_for(e->time);
    if (prefixed)
        PUT_LIT(&l, "<6>");
    if (format == MD_ACCESS_FORMAT_JSON)
        format_json(&l, e);
    else
        format_combined(&l, e);
    return l.len;
}
