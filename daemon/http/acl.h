/* A route's access rules by client address, as nginx's allow and deny: a list of rules, each
 * allowing or denying one address, one CIDR block (IPv4 or IPv6) or every client ("all"),
 * tried in the order the configuration gives them; the first that matches the client decides,
 * and a client no rule matches is allowed (so a list that restricts ends with "deny = all").
 * A denied request is answered 403 before its handler sees it (http.c).
 *
 * An IPv4 client reaching an IPv6 socket ("::ffff:a.b.c.d") is matched as the IPv4 address it
 * is; a client of another family (a Unix socket) matches "all" only. The list is a plain value
 * inside its route (routes.h), so it travels with the configuration's generation.
 */
#ifndef MD_ACL_H
#define MD_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/addr.h"

enum { MD_ACL_MAX = 16 }; /* rules per route */

/* The loopback blocks, for the built-in /echo and /metrics. */
#define MD_ACL_LOOPBACK "127.0.0.0/8, ::1"

typedef struct md_acl_rule {
    md_addr_key net;  /* the block's address, masked (an IPv4 one as ::ffff:a.b.c.d) */
    md_addr_key mask; /* its prefix (addr.h) */
    uint8_t allow;    /* 1: allow, 0: deny */
    uint8_t family;   /* MD_ADDR_V4, MD_ADDR_V6, or 0 for "all" */
} md_acl_rule;

typedef struct md_acl {
    uint8_t n;
    md_acl_rule r[MD_ACL_MAX];
} md_acl;

/* Appends the rules of one "allow" or "deny" value: addresses, CIDR blocks or "all",
 * separated by commas or spaces. 0, or -EINVAL with msg (msg_len bytes) naming the word that
 * is wrong: not an address, a prefix longer than the family's, bits set past the prefix
 * ("10.0.0.1/8": nginx warns and masks; a typo is likelier), more than MD_ACL_MAX rules. */
int md_acl_add(md_acl *a, bool allow, const char *value, char *msg, size_t msg_len);

/* Whether a's rules let the client at ss in (no rule: yes). ss NULL (the address is not
 * known: the peer is gone) matches "all" only. */
bool md_acl_permits(const md_acl *a, const struct sockaddr_storage *ss);

/* Whether some rule of a matches ss, allowing or denying (a list of trusted blocks). */
bool md_acl_matches(const md_acl *a, const struct sockaddr_storage *ss);

#endif
