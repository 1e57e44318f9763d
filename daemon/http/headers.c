/* headers.c: a route's response header rules (headers.h has the contract). */
#include "http/headers.h"

#include <errno.h>
#include <string.h>

#include "core/text.h"
#include "http/routes.h"

/* Fields the head writer and the protocols own: framing, the connection's, and those written
 * on every response (response.c). A rule on them would break the message or be ignored. */
static bool core_field(const char *name, size_t n)
{
    static const char *const owned[] = {
        "content-length", "transfer-encoding",
        "connection",     "keep-alive",
        "upgrade",        "te",
        "trailer",        "date",
        "server",         "content-type",
        "allow",          "www-authenticate",
    };
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (strlen(owned[i]) == n && md_ascii_eq_lower(name, n, owned[i]))
            return true;
    return false;
}

/* The name of value ("Name: value" for add and set, "Name" for remove): checked, its bounds. */
static int take_name(const char *value, bool with_value, size_t *nlen, const char **v, char *msg,
                     size_t msg_len)
{
    size_t n = 0;
    while (md_is_tchar((unsigned char)value[n]))
        n++;
    if (n == 0 || (with_value ? value[n] != ':' : value[n] != '\0')) {
        md_say(msg, msg_len,
               with_value ? "expected \"Name: value\", the name a token (RFC 9110 5.6.2)"
                          : "expected a field name, a token (RFC 9110 5.6.2)");
        return -EINVAL;
    }
    if (core_field(value, n)) {
        md_say(msg, msg_len, "\"%.*s\" is written by magpied itself", (int)n, value);
        return -EINVAL;
    }
    *nlen = n;
    if (with_value) {
        const char *p = value + n + 1;
        while (*p == ' ')
            p++;
        size_t vl = strlen(p);
        while (vl != 0 && p[vl - 1] == ' ')
            vl--;
        /* Visible ASCII and spaces: no CR, LF or NUL can end the field and start another. */
        for (size_t i = 0; i < vl; i++) {
            unsigned ch = (unsigned char)p[i];
            if (ch < 0x20 || ch >= 0x7f) {
                md_say(msg, msg_len, "a value is visible ASCII and spaces");
                return -EINVAL;
            }
        }
        *v = p;
    }
    return 0;
}

static int add_drop(md_route_headers *h, const char *name, size_t n, char *msg, size_t msg_len)
{
    if (md_headers_drops(h, name, n))
        return 0;
    if (h->drop_len + n + 1 > MD_HEADERS_DROP_MAX) {
        md_say(msg, msg_len, "more than %d bytes of names set and removed in one route",
               MD_HEADERS_DROP_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        h->drop[h->drop_len++] = ch >= 'A' && ch <= 'Z' ? (char)(ch | 0x20) : ch;
    }
    h->drop[h->drop_len++] = '\0';
    return 0;
}

int md_headers_key(md_route_headers *h, const char *key, const char *value, char *msg,
                   size_t msg_len)
{
    if (strcmp(key, "header_always") == 0) {
        return md_conf_bool(value, &h->always, msg, msg_len);
    }
    bool add = strcmp(key, "header_add") == 0, set = strcmp(key, "header_set") == 0;
    bool remove = strcmp(key, "header_remove") == 0;
    if (!add && !set && !remove)
        return -ENOENT;
    size_t n;
    const char *v = NULL;
    int rc = take_name(value, !remove, &n, &v, msg, msg_len);
    if (rc != 0)
        return rc;
    if (set || remove) {
        rc = add_drop(h, value, n, msg, msg_len);
        if (rc != 0)
            return rc;
    }
    if (remove)
        return 0;
    size_t vl = strlen(v);
    while (vl != 0 && v[vl - 1] == ' ')
        vl--;
    size_t line = n + 2 + vl + 2;
    if (h->add_len + line > MD_HEADERS_ADD_MAX) {
        md_say(msg, msg_len, "more than %d bytes of fields added in one route", MD_HEADERS_ADD_MAX);
        return -EINVAL;
    }
    char *w = h->add + h->add_len;
    memcpy(w, value, n);
    memcpy(w + n, ": ", 2);
    memcpy(w + n + 2, v, vl);
    memcpy(w + n + 2 + vl, "\r\n", 2);
    h->add_len = (uint16_t)(h->add_len + line);
    return 0;
}

bool md_headers_drops(const md_route_headers *h, const char *name, size_t len)
{
    for (size_t at = 0; at < h->drop_len;) {
        size_t n = strlen(h->drop + at);
        if (n == len && md_ascii_eq_lower(name, len, h->drop + at))
            return true;
        at += n + 1;
    }
    return false;
}

size_t md_headers_filter(const md_route_headers *h, const char *fields, size_t flen, char *out)
{
    size_t w = 0;
    for (size_t at = 0; at < flen;) {
        const char *eol = memchr(fields + at, '\n', flen - at);
        size_t end = eol != NULL ? (size_t)(eol - fields) + 1 : flen;
        const char *colon = memchr(fields + at, ':', end - at);
        if (colon == NULL || !md_headers_drops(h, fields + at, (size_t)(colon - fields) - at)) {
            memcpy(out + w, fields + at, end - at);
            w += end - at;
        }
        at = end;
    }
    memcpy(out + w, h->add, h->add_len);
    return w + h->add_len;
}
