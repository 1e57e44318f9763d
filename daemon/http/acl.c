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
    struct sockaddr_storage ss = {0};
    if (inet_pton(AF_INET, host, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
        ss.ss_family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
        ss.ss_family = AF_INET6;
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
    md_addr_key k;
    /* "::ffff:10.0.0.1" is the IPv4 client it maps, as at request time. */
    r->family = (uint8_t)md_addr_key_of(&ss, &k);
    if (r->family == MD_ADDR_V4 && max == 128 && bits < 96) {
        md_say(msg, msg_len, "\"%s\": an IPv4-mapped block needs a prefix of 96 or more", w);
        return -EINVAL;
    }
    r->mask = md_addr_mask(max == 32 ? 96 + bits : bits);
    r->net = md_addr_masked(k, &r->mask);
    if (r->net.w[0] != k.w[0] || r->net.w[1] != k.w[1]) {
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

/* The rule of a that decides for ss, or NULL. */
static const md_acl_rule *first_match(const md_acl *a, const struct sockaddr_storage *ss)
{
    md_addr_key k;
    unsigned family = md_addr_key_of(ss, &k);
    for (unsigned i = 0; i < a->n; i++) {
        const md_acl_rule *r = &a->r[i];
        if (r->family == 0 || (r->family == family && md_addr_in(&k, &r->net, &r->mask)))
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
