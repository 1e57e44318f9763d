/* The shared text rules (text.h). */
#include "core/text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

bool md_ascii_eq_lower(const char *s, size_t n, const char *lower)
{
    for (size_t i = 0; i < n; i++) {
        if (lower[i] == '\0' || md_ascii_lower((unsigned char)s[i]) != (unsigned char)lower[i])
            return false;
    }
    return lower[n] == '\0';
}

bool md_ascii_eq_ci(const char *a, size_t an, const char *b, size_t bn)
{
    if (an != bn)
        return false;
    for (size_t i = 0; i < an; i++) {
        if (md_ascii_lower((unsigned char)a[i]) != md_ascii_lower((unsigned char)b[i]))
            return false;
    }
    return true;
}

static bool ows(char ch)
{
    return ch == ' ' || ch == '\t';
}

bool md_list_next(md_list *l, const char **elem, size_t *len)
{
    while (l->p < l->end && (ows(*l->p) || *l->p == ','))
        l->p++;
    if (l->p >= l->end)
        return false;
    const char *start = l->p, *p = l->p;
    bool quoted = false;
    for (; p < l->end && (quoted || *p != ','); p++) {
        if (*p == '"')
            quoted = !quoted;
        else if (quoted && *p == '\\' && p + 1 < l->end)
            p++;
    }
    l->p = p;
    while (ows(p[-1])) /* stops at start, which is neither OWS nor ',' */
        p--;
    *elem = start;
    *len = (size_t)(p - start);
    return true;
}

int md_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (*s == '\0')
        return -EINVAL;
    uint64_t v = 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    if (v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

static const char *const bool_words[2][4] = {
    {"off", "no", "false", "0"},
    {"on", "yes", "true", "1"},
};

int md_parse_bool(const char *s, bool *out)
{
    size_t n = strlen(s);
    for (int v = 0; v < 2; v++) {
        for (size_t i = 0; i < 4; i++) {
            if (md_ascii_eq_lower(s, n, bool_words[v][i])) {
                *out = v != 0;
                return 0;
            }
        }
    }
    return -EINVAL;
}

int md_conf_bool(const char *value, bool *out, char *msg, size_t len)
{
    if (md_parse_bool(value, out) == 0)
        return 0;
    snprintf(msg, len, "expected %s, got \"%s\"", MD_BOOL_GRAMMAR, value);
    return -EINVAL;
}

size_t md_text_set(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return n;
}

bool md_text_field_safe(const char *s, bool spaces)
{
    for (; *s != '\0'; s++) {
        unsigned ch = (unsigned char)*s;
        if (ch < 0x20 || ch >= 0x7f || (!spaces && ch == ' '))
            return false;
    }
    return true;
}

bool md_text_name_ok(const char *s, size_t n, size_t max)
{
    if (n == 0 || n >= max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

bool md_words_next(const char **s, const char **word, size_t *len)
{
    const char *p = *s;
    p += strspn(p, " ,\t");
    if (*p == '\0') {
        *s = p;
        return false;
    }
    *word = p;
    *len = strcspn(p, " ,\t");
    *s = p + *len;
    return true;
}

size_t md_uri_path_encode(const char *path, size_t len, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)path[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            (ch != 0 && strchr("-._~!$&'()*+,;=:@/", ch) != NULL)) {
            if (n + 1 > cap)
                break;
            out[n++] = (char)ch;
        } else {
            if (n + 3 > cap)
                break;
            out[n++] = '%';
            out[n++] = hex[ch >> 4];
            out[n++] = hex[ch & 15];
        }
    }
    return n;
}
