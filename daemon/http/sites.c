/* Virtual hosts (sites.h): the [site NAME] section and the choice of a site by host name. */
#include "http/sites.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/ini.h"
#include "core/text.h"
#include "http/routes.h"

static void lower_copy(char *dst, const char *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (char)md_ascii_lower((unsigned char)src[i]);
}

bool md_site_name_matches(const char *pattern, size_t plen, const char *host, size_t hlen)
{
    if (plen >= 2 && pattern[0] == '*' && pattern[1] == '.') {
        size_t sfx = plen - 1; /* ".example.com" */
        return hlen > sfx && memcmp(host + hlen - sfx, pattern + 1, sfx) == 0;
    }
    return plen == hlen && memcmp(pattern, host, hlen) == 0;
}

/* host without its port and trailing dot, in lower case, into buf: its length, or 0 when it
 * is empty or too long to be a name. */
static size_t host_key(const char *host, size_t len, char *buf)
{
    size_t n = len;
    if (len != 0 && host[0] == '[') {
        const char *close = memchr(host, ']', len);
        n = close != NULL ? (size_t)(close - host) + 1 : len;
    } else {
        const char *colon = memchr(host, ':', len);
        if (colon != NULL)
            n = (size_t)(colon - host);
    }
    while (n != 0 && (host[n - 1] == ' ' || host[n - 1] == '\t'))
        n--;
    if (n != 0 && host[n - 1] == '.')
        n--;
    if (n == 0 || n >= MD_SITE_HOST_MAX)
        return 0;
    lower_copy(buf, host, n);
    return n;
}

int md_sites_pick(const md_route_table *t, const char *host, size_t len)
{
    return md_sites_pick_in(t->sites, t->nsites, host, len);
}

int md_sites_pick_in(const md_site *sites, uint32_t nsites, const char *host, size_t len)
{
    if (nsites <= 1 || host == NULL)
        return -1;
    char buf[MD_SITE_HOST_MAX];
    size_t n = host_key(host, len, buf);
    if (n == 0)
        return -1;
    int best = -1;
    size_t best_len = 0;
    for (uint32_t i = 1; i < nsites; i++) {
        const char *s = sites[i].names;
        const char *w;
        size_t wl;
        while (md_words_next(&s, &w, &wl)) {
            if (!md_site_name_matches(w, wl, buf, n))
                continue;
            if (w[0] != '*')
                return (int)i; /* exact: nothing beats it */
            if (wl > best_len) {
                best = (int)i;
                best_len = wl;
            }
        }
    }
    return best;
}

int md_site_find(const md_route_table *t, const char *name)
{
    if (name[0] == '\0')
        return 0;
    for (uint32_t i = 1; i < t->nsites; i++)
        if (strcmp(t->sites[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* A host name pattern: DNS letters, digits, '-' and '.', optionally after "*."; one label
 * at least, no empty label. Lower-cased into out. */
static bool pattern_ok(const char *w, size_t n, char *out)
{
    size_t i = 0;
    if (n >= 2 && w[0] == '*' && w[1] == '.')
        i = 2;
    if (n > i && w[n - 1] == '.')
        n--; /* "example.com." is example.com */
    if (n <= i || n >= MD_SITE_HOST_MAX)
        return false;
    bool label_start = true;
    for (size_t k = i; k < n; k++) {
        unsigned ch = (unsigned char)w[k] | (w[k] >= 'A' && w[k] <= 'Z' ? 0x20 : 0);
        if (ch == '.') {
            if (label_start)
                return false;
            label_start = true;
            continue;
        }
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
            return false;
        label_start = false;
    }
    if (label_start)
        return false;
    lower_copy(out, w, n);
    out[n] = '\0';
    return true;
}

static int site_begin(void *conf, const char *arg, bool first, uint32_t line, void **inst,
                      char *msg, size_t msg_len)
{
    (void)first;
    md_route_table *t = conf;
    while (*arg == ' ' || *arg == '\t')
        arg++;
    size_t n = strlen(arg);
    while (n != 0 && (arg[n - 1] == ' ' || arg[n - 1] == '\t'))
        n--;
    if (!md_text_name_ok(arg, n, MD_SITE_NAME_MAX)) {
        md_say(msg, msg_len, "expected [site NAME], NAME of [A-Za-z0-9_-] (at most %d bytes)",
               MD_SITE_NAME_MAX - 1);
        return -EINVAL;
    }
    for (uint32_t i = 1; i < t->nsites; i++)
        if (strlen(t->sites[i].name) == n && memcmp(t->sites[i].name, arg, n) == 0) {
            md_say(msg, msg_len, "a second [site %.*s] (the first on line %u)", (int)n, arg,
                   (unsigned)t->sites[i].line);
            return -EINVAL;
        }
    if (t->nsites == 0)
        t->nsites = 1; /* the default site, 0: what comes before any [site] */
    if (t->nsites == MD_SITES_MAX) {
        md_say(msg, msg_len, "more than %d sites", MD_SITES_MAX - 1);
        return -EINVAL;
    }
    md_site *s = &t->sites[t->nsites];
    memset(s, 0, sizeof *s);
    memcpy(s->name, arg, n);
    s->line = line;
    t->cur_site = (uint8_t)t->nsites++;
    *inst = s;
    return 0;
}

static int set_path(char *dst, const char *value, uint32_t *at, uint32_t line, char *msg,
                    size_t msg_len)
{
    if (*value == '\0' || strlen(value) >= MD_SITE_PATH_MAX) {
        md_say(msg, msg_len, "expected a path of 1 to %d bytes", MD_SITE_PATH_MAX - 1);
        return -EINVAL;
    }
    md_text_set(dst, MD_SITE_PATH_MAX, value);
    *at = line;
    return 0;
}

int md_site_rules_key(md_site *s, const char *key, const char *value, uint32_t line, char *msg,
                      size_t msg_len)
{
    int rc = md_headers_key(&s->headers, key, value, msg, msg_len);
    if (rc != -ENOENT)
        return rc;
    return md_error_page_key(&s->errors, key, value, line, msg, msg_len);
}

/* A Strict-Transport-Security value as RFC 6797 6.1 has a browser take it: directives
 * separated by ';', each a token with an optional '=' and a token or quoted-string; max-age
 * once, its value digits (quoted or not); no directive twice (a browser MUST then ignore the
 * whole field, and a typo would turn HSTS off unseen). */
static bool hsts_ok(const char *v)
{
    char seen[8][24];
    unsigned nseen = 0;
    bool max_age = false;
    for (const char *p = v; *p != '\0';) {
        const char *end = strchr(p, ';');
        if (end == NULL)
            end = p + strlen(p);
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *q = end;
        while (q > p && (q[-1] == ' ' || q[-1] == '\t'))
            q--;
        if (p != q) {
            const char *n = p;
            while (p < q && md_is_tchar((unsigned char)*p))
                p++;
            size_t nlen = (size_t)(p - n);
            while (p < q && (*p == ' ' || *p == '\t'))
                p++;
            if (nlen == 0 || nlen >= sizeof seen[0] || (p < q && *p != '='))
                return false;
            const char *val = NULL;
            size_t vlen = 0;
            if (p < q) {
                p++;
                while (p < q && (*p == ' ' || *p == '\t'))
                    p++;
                val = p;
                vlen = (size_t)(q - p);
                if (vlen >= 2 && val[0] == '"' && val[vlen - 1] == '"') {
                    val++;
                    vlen -= 2;
                } else {
                    for (size_t i = 0; i < vlen; i++)
                        if (!md_is_tchar((unsigned char)val[i]))
                            return false;
                }
            }
            for (unsigned i = 0; i < nseen; i++)
                if (md_ascii_eq_ci(seen[i], strlen(seen[i]), n, nlen))
                    return false;
            if (nseen == sizeof seen / sizeof seen[0])
                return false;
            memcpy(seen[nseen], n, nlen);
            seen[nseen++][nlen] = '\0';
            if (md_ascii_eq_ci(n, nlen, "max-age", 7)) {
                if (val == NULL || vlen == 0)
                    return false;
                for (size_t i = 0; i < vlen; i++)
                    if (val[i] < '0' || val[i] > '9')
                        return false;
                max_age = true;
            }
        }
        p = *end == ';' ? end + 1 : end;
    }
    return max_age;
}

static int site_key(void *inst, const char *key, const char *value, uint32_t line, char *msg,
                    size_t msg_len)
{
    md_site *s = inst;
    if (strcmp(key, "names") == 0) {
        size_t used = 0;
        const char *w;
        size_t n;
        while (md_words_next(&value, &w, &n)) {
            char one[MD_SITE_HOST_MAX];
            if (!pattern_ok(w, n, one)) {
                md_say(msg, msg_len,
                       "expected host names (example.com, *.example.com), got \"%.*s\"", (int)n, w);
                return -EINVAL;
            }
            size_t l = strlen(one);
            if (used + l + 2 > sizeof s->names) {
                md_say(msg, msg_len, "longer than %d bytes", MD_SITE_NAMES_MAX - 1);
                return -EINVAL;
            }
            if (used != 0)
                s->names[used++] = ' ';
            memcpy(s->names + used, one, l + 1);
            used += l;
        }
        if (used == 0) {
            md_say(msg, msg_len, "expected host names (example.com, *.example.com), got nothing");
            return -EINVAL;
        }
        s->names_line = line;
        return 0;
    }
    if (strcmp(key, "certificate") == 0)
        return set_path(s->cert, value, &s->cert_line, line, msg, msg_len);
    if (strcmp(key, "certificate_key") == 0)
        return set_path(s->key, value, &s->key_line, line, msg, msg_len);
    if (strcmp(key, "hsts") == 0) { /* hsts_ok(): the value a browser would not ignore */
        if (strlen(value) >= sizeof s->hsts || !md_text_field_safe(value, true) ||
            (value[0] != '\0' && !hsts_ok(value))) {
            md_say(msg, msg_len,
                   "expected a Strict-Transport-Security value (at most %d bytes: max-age=SECONDS "
                   "and directives such as includeSubDomains, separated by ';', none twice), got "
                   "\"%s\"",
                   MD_SITE_HSTS_MAX - 1, value);
            return -EINVAL;
        }
        md_text_set(s->hsts, sizeof s->hsts, value);
        return 0;
    }
    return md_site_rules_key(s, key, value, line, msg, msg_len);
}

static int site_end(void *inst, char *msg, size_t msg_len)
{
    const md_site *s = inst;
    if ((s->cert[0] == '\0') != (s->key[0] == '\0')) {
        md_say(msg, msg_len, "%s: required with %s",
               s->cert[0] == '\0' ? "certificate" : "certificate_key",
               s->cert[0] == '\0' ? "certificate_key" : "certificate");
        return -EINVAL;
    }
    return 0;
}

/* After the file: no host name claimed by two sites. */
static int site_done(void *conf, const md_ini_conf *all, uint32_t *line, char *msg, size_t msg_len)
{
    (void)all;
    const md_route_table *t = conf;
    for (uint32_t i = 1; i < t->nsites; i++) {
        const char *s = t->sites[i].names, *w;
        size_t n;
        while (md_words_next(&s, &w, &n))
            for (uint32_t j = 1; j < i; j++) {
                const char *o = t->sites[j].names, *v;
                size_t m;
                while (md_words_next(&o, &v, &m))
                    if (m == n && memcmp(v, w, n) == 0) {
                        md_say(msg, msg_len, "[site %s] names: \"%.*s\" is also [site %s]'s",
                               t->sites[i].name, (int)n, w, t->sites[j].name);
                        *line = t->sites[i].names_line;
                        return -EINVAL;
                    }
            }
    }
    return 0;
}

const md_ini_section md_section_site = {
    .name = "site",
    .repeats = true,
    .begin = site_begin,
    .key = site_key,
    .repeatable =
        (const char *const[]){"header_add", "header_set", "header_remove", "error_page", NULL},
    .end = site_end,
    .done = site_done,
};
