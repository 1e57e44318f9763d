/* real_ip.c: a route's real client address behind trusted balancers (real_ip.h has the
 * contract). */
#include "http/real_ip.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "core/text.h"
#include "http/routes.h"

int md_real_ip_key(md_route_real_ip *ri, const char *key, const char *value, char *msg,
                   size_t msg_len)
{
    if (strcmp(key, "real_ip_from") == 0) {
        if (strstr(value, "all") != NULL) {
            md_say(msg, msg_len,
                   "expected addresses or address/prefix blocks (not \"all\": "
                   "every client could name its own address)");
            return -EINVAL;
        }
        return md_acl_add(&ri->from, true, value, msg, msg_len);
    }
    if (strcmp(key, "real_ip_header") == 0) {
        size_t n = strlen(value);
        if (md_ascii_eq_ci(value, n, "X-Forwarded-For", 15)) {
            ri->header = MD_REAL_IP_XFF;
        } else if (md_ascii_eq_ci(value, n, "Forwarded", 9)) {
            ri->header = MD_REAL_IP_FORWARDED;
        } else {
            md_say(msg, msg_len, "expected X-Forwarded-For or Forwarded, got \"%s\"", value);
            return -EINVAL;
        }
        return 0;
    }
    return -ENOENT;
}

int md_real_ip_check(const md_route_real_ip *ri, char *msg, size_t msg_len)
{
    if ((ri->header != MD_REAL_IP_NONE) != (ri->from.n != 0)) {
        md_say(msg, msg_len,
               ri->from.n != 0 ? "real_ip_from: needs real_ip_header"
                               : "real_ip_header: needs real_ip_from");
        return -EINVAL;
    }
    return 0;
}

bool md_real_ip_trusted(const md_route_real_ip *ri, const struct sockaddr_storage *ss)
{
    return md_acl_matches(&ri->from, ss);
}

/* An address as hops write them: "a.b.c.d", "a.b.c.d:port", "v6", "[v6]", "[v6]:port". */
static bool parse_addr(const char *s, size_t n, struct sockaddr_storage *out)
{
    char buf[64];
    if (n == 0)
        return false;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (close == NULL)
            return false;
        size_t rest = n - (size_t)(close + 1 - s);
        if (rest != 0 && close[1] != ':')
            return false;
        s++;
        n = (size_t)(close - s);
    } else if (memchr(s, '.', n) != NULL) {
        const char *colon = memchr(s, ':', n);
        if (colon != NULL)
            n = (size_t)(colon - s);
    }
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    memset(out, 0, sizeof *out);
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, buf, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, buf, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        return true;
    }
    return false;
}

/* Forwarded's element "for=...;proto=..." (any order, any case): the for= value, unquoted. */
static bool forwarded_for(const char *s, size_t n, const char **v, size_t *vl)
{
    size_t at = 0;
    while (at < n) {
        const char *semi = memchr(s + at, ';', n - at);
        size_t end = semi != NULL ? (size_t)(semi - s) : n;
        size_t b = at, e = end;
        while (b < e && (s[b] == ' ' || s[b] == '\t'))
            b++;
        while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t'))
            e--;
        if (e - b > 4 && md_ascii_eq_lower(s + b, 4, "for=")) {
            b += 4;
            if (e - b >= 2 && s[b] == '"' && s[e - 1] == '"') {
                b++;
                e--;
            }
            *v = s + b;
            *vl = e - b;
            return true;
        }
        at = end + 1;
    }
    return false;
}

bool md_real_ip(const md_route_real_ip *ri, const struct sockaddr_storage *peer, const char *value,
                size_t len, bool cut, struct sockaddr_storage *out)
{
    if (ri->header == MD_REAL_IP_NONE || value == NULL || !md_real_ip_trusted(ri, peer))
        return false;
    bool changed = false;
    size_t end = len;
    while (end > 0) {
        size_t start = end;
        while (start > 0 && value[start - 1] != ',')
            start--;
        if (start == 0 && cut)
            break; /* the element at the front of what was kept may be a part of one */
        const char *e = value + start;
        size_t n = end - start;
        while (n != 0 && (*e == ' ' || *e == '\t')) {
            e++;
            n--;
        }
        while (n != 0 && (e[n - 1] == ' ' || e[n - 1] == '\t'))
            n--;
        if (ri->header == MD_REAL_IP_FORWARDED && !forwarded_for(e, n, &e, &n))
            break;
        struct sockaddr_storage a;
        if (!parse_addr(e, n, &a))
            break;
        *out = a;
        changed = true;
        if (!md_real_ip_trusted(ri, &a))
            break;
        end = start > 0 ? start - 1 : 0;
    }
    return changed;
}
