/* A route's real client address behind trusted balancers, as nginx's set_real_ip_from,
 * real_ip_header and real_ip_recursive on.
 *
 * When the connection's peer is one of the route's real_ip_from blocks, the address of the
 * request becomes the rightmost address of the route's real_ip_header (X-Forwarded-For, or
 * Forwarded's for= parameters, RFC 7239) that is not itself trusted: the one the last trusted
 * hop saw, which a client cannot forge, since every hop appends what it saw on the right.
 * An element that is not an address ("unknown", an obfuscated name, garbage) stops the walk
 * at the last trusted address. That address is what the route's allow and deny rules match,
 * what md_http_req_peer() gives handlers (the proxy's X-Real-IP and Forwarded for=), and what
 * the access log shows. A peer that is not trusted keeps its own address, whatever it sends.
 *
 * The request keeps the last MD_HTTP_COND_KEEP bytes of the header (several fields of the name
 * joined), so that the hops a client cannot forge, on the right, are the ones kept; an element
 * cut at the front of what is kept is not read.
 */
#ifndef MD_REAL_IP_H
#define MD_REAL_IP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "http/acl.h"

enum md_real_ip_header {
    MD_REAL_IP_NONE,
    MD_REAL_IP_XFF,       /* X-Forwarded-For */
    MD_REAL_IP_FORWARDED, /* Forwarded (RFC 7239) */
};

typedef struct md_route_real_ip {
    uint8_t header; /* enum md_real_ip_header */
    md_acl from;    /* the trusted blocks: "allow" rules */
} md_route_real_ip;

/* real_ip_from or real_ip_header into ri: 0, -ENOENT for another key, or -EINVAL with msg. */
int md_real_ip_key(md_route_real_ip *ri, const char *key, const char *value, char *msg,
                   size_t msg_len);
/* After the route's keys: both or neither. 0 or -EINVAL with msg. */
int md_real_ip_check(const md_route_real_ip *ri, char *msg, size_t msg_len);

/* Whether ss is one of ri's trusted blocks. */
bool md_real_ip_trusted(const md_route_real_ip *ri, const struct sockaddr_storage *ss);

/* The client's address for a request from peer with value (len bytes of ri's header; cut:
 * its front was dropped): true with *out set when it differs from peer's (peer trusted and
 * the header names another), false to keep peer. */
bool md_real_ip(const md_route_real_ip *ri, const struct sockaddr_storage *peer, const char *value,
                size_t len, bool cut, struct sockaddr_storage *out);

#endif
