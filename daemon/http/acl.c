/* acl.c: a route's allow and deny rules (acl.h has the contract). */
#include "http/acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "core/text.h"
#include "http/routes.h"

/* Parses one word ("all", "a.b.c.d", "a.b.c.d/n", "v6", "v6/n") into *r. */
static int parse_rule(const char *w, md_acl_rule *r, char *msg, size_t msg_len)
{
    if (strcmp(w, "all") == 0) {
        r->family = 0;
        r->bits = 0;
        return 0;
    }
    char host[64];
    const char *slash = strchr(w, '/');
    size_t hlen = slash != NULL ? (size_t)(slash - w) : strlen(w);
    if (hlen == 0 || hlen >= sizeof host)
        goto bad;
    memcpy(host, w, hlen);
    host[hlen] = '\0';
    unsigned max;
    memset(r->addr, 0, sizeof r->addr);
    if (inet_pton(AF_INET, host, r->addr) == 1) {
        r->family = 4;
        max = 32;
    } else if (inet_pton(AF_INET6, host, r->addr) == 1) {
        r->family = 6;
        max = 128;
    } else {
        goto bad;
    }
    unsigned bits = max;
    if (slash != NULL) {
        uint64_t v;
        if (md_parse_u64(slash + 1, 0, max, &v) != 0) {
            md_say(msg, msg_len, "\"%s\": the prefix length is 0..%u", w, max);
            return -EINVAL;
        }
        bits = (unsigned)v;
    }
    r->bits = (uint8_t)bits;
    for (unsigned i = bits; i < max; i++)
        if (r->addr[i / 8] & (0x80u >> (i % 8))) {
            md_say(msg, msg_len, "\"%s\": bits set past the /%u prefix", w, bits);
            return -EINVAL;
        }
    return 0;
bad:
    md_say(msg, msg_len, "\"%s\" is not an address, an address/prefix or \"all\"", w);
    return -EINVAL;
}

int md_acl_add(md_acl *a, bool allow, const char *value, char *msg, size_t msg_len)
{
    bool any = false;
    const char *w;
    size_t n;
    while (md_words_next(&value, &w, &n)) {
        char word[80];
        if (n >= sizeof word) {
            md_say(msg, msg_len, "\"%.40s...\" is not an address", w);
            return -EINVAL;
        }
        memcpy(word, w, n);
        word[n] = '\0';
        if (a->n == MD_ACL_MAX) {
            md_say(msg, msg_len, "more than %d allow and deny rules in one route", MD_ACL_MAX);
            return -EINVAL;
        }
        md_acl_rule r = {.allow = allow};
        int rc = parse_rule(word, &r, msg, msg_len);
        if (rc != 0)
            return rc;
        a->r[a->n++] = r;
        any = true;
    }
    if (!any) {
        md_say(msg, msg_len, "expected addresses, address/prefix blocks or \"all\"");
        return -EINVAL;
    }
    return 0;
}

static bool prefix_matches(const uint8_t *rule, const uint8_t *addr, unsigned bits)
{
    unsigned whole = bits / 8, rest = bits % 8;
    if (memcmp(rule, addr, whole) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (rule[whole] & mask) == (addr[whole] & mask);
}

/* The rule of a that decides for ss, or NULL. */
static const md_acl_rule *first_match(const md_acl *a, const struct sockaddr_storage *ss)
{
    unsigned family = 0;
    uint8_t addr[16];
    if (ss != NULL && ss->ss_family == AF_INET) {
        family = 4;
        memcpy(addr, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else if (ss != NULL && ss->ss_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a6)) {
            family = 4;
            memcpy(addr, a6->s6_addr + 12, 4);
        } else {
            family = 6;
            memcpy(addr, a6->s6_addr, 16);
        }
    }
    for (unsigned i = 0; i < a->n; i++) {
        const md_acl_rule *r = &a->r[i];
        if (r->family == 0 || (r->family == family && prefix_matches(r->addr, addr, r->bits)))
            return r;
    }
    return NULL;
}

bool md_acl_permits(const md_acl *a, const struct sockaddr_storage *ss)
{
    const md_acl_rule *r = first_match(a, ss);
    return r == NULL || r->allow != 0;
}

bool md_acl_matches(const md_acl *a, const struct sockaddr_storage *ss)
{
    return first_match(a, ss) != NULL;
}
