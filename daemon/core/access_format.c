/* access_format.c: access-log lines, nginx's "combined" format, one JSON object per line, or
 * the operator's template of named fields (as nginx's log_format).
 *
 * A line is built in the caller's buffer (MD_LOG_ACCESS_LINE_MAX bytes) by plain appends:
 * every field is escaped and cut to a cap, so the caps add up to less than the buffer and no
 * append needs a bounds check (a template is refused when its fields' caps could add up to
 * more). The time is formatted once per second per thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
    CAP_UPSTREAM = 128,
    CAP_FIXED = 256, /* the prefix, keys, punctuation, time, protocol and the numbers */
};
_Static_assert(CAP_FIXED + CAP_PEER + CAP_METHOD + CAP_TARGET + CAP_REFERER + CAP_USER_AGENT +
                       CAP_UPSTREAM <=
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

/* "METHOD TARGET PROTOCOL", CLF-escaped, or "-": nothing that could be called a request line. */
static void put_request_line(line *l, const md_access_entry *e)
{
    if (e->method == NULL) {
        PUT_LIT(l, "-");
        return;
    }
    put_escaped(l, e->method, e->method_len, CAP_METHOD, ESCAPE_CLF, false);
    PUT_LIT(l, " ");
    if (e->target == NULL)
        PUT_LIT(l, "-");
    else
        put_escaped(l, e->target, e->target_len, CAP_TARGET, ESCAPE_CLF, e->target_cut);
    PUT_LIT(l, " ");
    put_protocol(l, e);
}

static void format_combined(line *l, const md_access_entry *e)
{
    put_field(l, e->peer, e->peer ? strlen(e->peer) : 0, CAP_PEER, ESCAPE_CLF, "-");
    PUT_LIT(l, " - - [");
    put(l, times.clf, strlen(times.clf));
    PUT_LIT(l, "] \"");
    put_request_line(l, e);
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
    if (e->upstream != NULL) { /* proxied: which server answered, and how soon */
        PUT_LIT(l, ",\"upstream_addr\":\"");
        put_escaped(l, e->upstream, e->upstream_len, CAP_UPSTREAM, ESCAPE_JSON, false);
        PUT_LIT(l, "\",\"upstream_header_ms\":");
        put_u64(l, e->upstream_ms);
    }
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

/* Templates. A field's name, what it shows, and the most bytes it can take in a line. */
enum field {
    F_LITERAL,
    F_REMOTE_ADDR,
    F_TIME_LOCAL,
    F_TIME_ISO8601,
    F_REQUEST,
    F_REQUEST_METHOD,
    F_REQUEST_URI,
    F_SERVER_PROTOCOL,
    F_STATUS,
    F_BODY_BYTES_SENT,
    F_HTTP_REFERER,
    F_HTTP_USER_AGENT,
    F_REQUEST_TIME,
    F_UPSTREAM_ADDR,
    F_UPSTREAM_HEADER_TIME,
};

static const struct {
    const char *name;
    uint16_t cap;
} fields[] = {
    [F_REMOTE_ADDR] = {"remote_addr", CAP_PEER},
    [F_TIME_LOCAL] = {"time_local", 32},
    [F_TIME_ISO8601] = {"time_iso8601", 32},
    [F_REQUEST] = {"request", CAP_METHOD + CAP_TARGET + 16},
    [F_REQUEST_METHOD] = {"request_method", CAP_METHOD},
    [F_REQUEST_URI] = {"request_uri", CAP_TARGET},
    [F_SERVER_PROTOCOL] = {"server_protocol", 16},
    [F_STATUS] = {"status", 8},
    [F_BODY_BYTES_SENT] = {"body_bytes_sent", 20},
    [F_HTTP_REFERER] = {"http_referer", CAP_REFERER},
    [F_HTTP_USER_AGENT] = {"http_user_agent", CAP_USER_AGENT},
    [F_REQUEST_TIME] = {"request_time", 32},
    [F_UPSTREAM_ADDR] = {"upstream_addr", CAP_UPSTREAM},
    [F_UPSTREAM_HEADER_TIME] = {"upstream_header_time", 32},
};
enum { NFIELDS = sizeof(fields) / sizeof(fields[0]), TEMPLATE_OPS = 64 };

/* One step of a template: a field, or text[off..off+len) of the template copied as it is. */
typedef struct op {
    uint8_t field; /* enum field */
    uint16_t off, len;
} op;

struct md_access_template {
    const struct md_access_template *next; /* the interned ones, newest first */
    uint32_t nops;
    op ops[TEMPLATE_OPS];
    char text[MD_LOG_TEMPLATE_MAX];
};

static bool name_byte(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Compiles text into t (t may be NULL: a check only). 0 or -EINVAL with msg. */
static int compile(const char *text, md_access_template *t, char *msg, size_t msg_len)
{
    size_t n = strlen(text), worst = 3 + 1; /* "<6>" and the newline */
    uint32_t nops = 0;
    if (n >= MD_LOG_TEMPLATE_MAX) {
        snprintf(msg, msg_len, "a template is at most %d bytes", MD_LOG_TEMPLATE_MAX - 1);
        return -EINVAL;
    }
    for (size_t i = 0; i < n;) {
        op o = {.field = F_LITERAL, .off = (uint16_t)i};
        if (text[i] != '$') {
            while (i < n && text[i] != '$') {
                if ((unsigned char)text[i] < 0x20 && text[i] != '\t') {
                    snprintf(msg, msg_len, "a control byte (0x%02x) in the template",
                             (unsigned char)text[i]);
                    return -EINVAL;
                }
                i++;
            }
            o.len = (uint16_t)(i - o.off);
            worst += o.len;
        } else {
            bool braced = i + 1 < n && text[i + 1] == '{';
            size_t start = i + 1 + braced, end = start;
            while (end < n && name_byte(text[end]))
                end++;
            if (end == start || (braced && (end >= n || text[end] != '}'))) {
                snprintf(msg, msg_len, "\"$\" at byte %zu is not followed by a field name%s", i + 1,
                         braced ? " and \"}\"" : "");
                return -EINVAL;
            }
            unsigned f = 1;
            while (f < NFIELDS && !(strlen(fields[f].name) == end - start &&
                                    memcmp(fields[f].name, text + start, end - start) == 0))
                f++;
            if (f == NFIELDS) {
                snprintf(msg, msg_len,
                         "unknown field \"$%.*s\" (magpied.conf(5) lists the fields: "
                         "$remote_addr, $request, $status, $request_time, ...)",
                         (int)(end - start > 64 ? 64 : end - start), text + start);
                return -EINVAL;
            }
            o.field = (uint8_t)f;
            worst += fields[f].cap;
            i = end + braced;
        }
        if (nops == TEMPLATE_OPS) {
            snprintf(msg, msg_len, "more than %d fields and texts in the template", TEMPLATE_OPS);
            return -EINVAL;
        }
        if (t != NULL)
            t->ops[nops] = o;
        nops++;
    }
    if (worst > MD_LOG_ACCESS_LINE_MAX) {
        snprintf(msg, msg_len,
                 "its fields could make a line of %zu bytes, over the %d an access line may take "
                 "(a field named twice counts twice)",
                 worst, MD_LOG_ACCESS_LINE_MAX);
        return -EINVAL;
    }
    if (t != NULL) {
        t->nops = nops;
        memcpy(t->text, text, n + 1);
    }
    return 0;
}

int md_access_template_check(const char *text, char *msg, size_t msg_len)
{
    return compile(text, NULL, msg, msg_len);
}

/* The interned templates: added under the lock, never removed (the header says why). */
static struct {
    pthread_mutex_t mu;
    const md_access_template *head;
} interned = {.mu = PTHREAD_MUTEX_INITIALIZER};

const md_access_template *md_access_template_intern(const char *text, char *msg, size_t msg_len)
{
    pthread_mutex_lock(&interned.mu);
    const md_access_template *t = interned.head;
    while (t != NULL && strcmp(t->text, text) != 0)
        t = t->next;
    if (t == NULL) {
        md_access_template *nt = calloc(1, sizeof *nt);
        if (nt == NULL)
            snprintf(msg, msg_len, "out of memory for the access_format template");
        else if (compile(text, nt, msg, msg_len) != 0) {
            free(nt);
            nt = NULL;
        } else {
            nt->next = interned.head;
            interned.head = nt;
        }
        t = nt;
    }
    pthread_mutex_unlock(&interned.mu);
    return t;
}

/* Seconds with milliseconds, as nginx's $request_time: "0.004". */
static void put_seconds_ms(line *l, uint64_t ms)
{
    put_u64(l, ms / 1000);
    char frac[4] = {'.', (char)('0' + ms / 100 % 10), (char)('0' + ms / 10 % 10),
                    (char)('0' + ms % 10)};
    put(l, frac, sizeof frac);
}

static void put_template_field(line *l, enum field f, const md_access_entry *e)
{
    switch (f) {
    case F_LITERAL:
        break;
    case F_REMOTE_ADDR:
        put_field(l, e->peer, e->peer ? strlen(e->peer) : 0, CAP_PEER, ESCAPE_CLF, "-");
        break;
    case F_TIME_LOCAL:
        put(l, times.clf, strlen(times.clf));
        break;
    case F_TIME_ISO8601:
        put(l, times.iso, strlen(times.iso));
        break;
    case F_REQUEST:
        put_request_line(l, e);
        break;
    case F_REQUEST_METHOD:
        put_field(l, e->method, e->method_len, CAP_METHOD, ESCAPE_CLF, "-");
        break;
    case F_REQUEST_URI:
        if (e->target == NULL || e->target_len == 0)
            PUT_LIT(l, "-");
        else
            put_escaped(l, e->target, e->target_len, CAP_TARGET, ESCAPE_CLF, e->target_cut);
        break;
    case F_SERVER_PROTOCOL:
        if (e->method == NULL)
            PUT_LIT(l, "-");
        else
            put_protocol(l, e);
        break;
    case F_STATUS:
        put_u64(l, e->status);
        break;
    case F_BODY_BYTES_SENT:
        put_u64(l, e->body_bytes);
        break;
    case F_HTTP_REFERER:
        put_field(l, e->referer, e->referer_len, CAP_REFERER, ESCAPE_CLF, "-");
        break;
    case F_HTTP_USER_AGENT:
        put_field(l, e->user_agent, e->user_agent_len, CAP_USER_AGENT, ESCAPE_CLF, "-");
        break;
    case F_REQUEST_TIME:
        put_seconds_ms(l, e->duration_ns / 1000000);
        break;
    case F_UPSTREAM_ADDR:
        put_field(l, e->upstream, e->upstream_len, CAP_UPSTREAM, ESCAPE_CLF, "-");
        break;
    case F_UPSTREAM_HEADER_TIME:
        if (e->upstream == NULL)
            PUT_LIT(l, "-");
        else
            put_seconds_ms(l, e->upstream_ms);
        break;
    }
}

size_t md_log_access_format_template(char *buf, const md_access_template *t, bool prefixed,
                                     const md_access_entry *e)
{
    line l = {buf, 0};
    times_for(e->time);
    if (prefixed)
        PUT_LIT(&l, "<6>");
    for (uint32_t i = 0; i < t->nops; i++) {
        const op *o = &t->ops[i];
        if (o->field == F_LITERAL)
            put(&l, t->text + o->off, o->len);
        else
            put_template_field(&l, (enum field)o->field, e);
    }
    PUT_LIT(&l, "\n");
    return l.len;
}
