/* A route's response header rules: header_add, header_set, header_remove and header_always.
 *
 * header_add appends a field to every response of the route; header_set appends it after
 * removing the fields of that name the handler wrote; header_remove removes them. They apply
 * to the responses whose status is below 400 (as nginx's add_header without "always"), and to
 * every response the route gives (its 401, 403, 405, 404 of a file, 5xx) with
 * header_always = on. The request layer (request.c) applies them to the fields a handler
 * passes to md_http_respond*() whatever protocol carries the response, and the proxy to the
 * upstream's head it relays; the fields the core writes itself (framing, Date, Server,
 * Connection, Content-Type, Allow) are not theirs to name.
 *
 * The rules are a plain value inside their route (routes.h), so they travel with the
 * configuration's generation.
 */
#ifndef MD_HEADERS_H
#define MD_HEADERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    MD_HEADERS_ADD_MAX = 512,  /* bytes of the fields added, "Name: value\r\n" each */
    MD_HEADERS_DROP_MAX = 128, /* bytes of the names removed, lower case, each ending in NUL */
};

typedef struct md_route_headers {
    bool always;       /* header_always = on: also on statuses from 400 */
    uint16_t add_len;  /* bytes in add */
    uint16_t drop_len; /* bytes in drop */
    char add[MD_HEADERS_ADD_MAX];
    char drop[MD_HEADERS_DROP_MAX];
} md_route_headers;

/* One of the keys header_add, header_set, header_remove, header_always into h: 0, -ENOENT for
 * another key, or -EINVAL with msg: a name that is not a token, a value with a control byte
 * (CR, LF, NUL), a field the core writes, rules past their room. */
int md_headers_key(md_route_headers *h, const char *key, const char *value, char *msg,
                   size_t msg_len);

/* Whether h changes a response of this status. */
static inline bool md_headers_apply(const md_route_headers *h, unsigned status)
{
    return (h->add_len != 0 || h->drop_len != 0) && (status < 400 || h->always);
}

/* Whether the field name (len bytes, any case) is one h removes (header_set, header_remove). */
bool md_headers_drops(const md_route_headers *h, const char *name, size_t len);

/* fields (flen bytes of "Name: value\r\n" lines, as a handler passes them) without those h
 * removes, then h's added ones, into out (room for flen + MD_HEADERS_ADD_MAX bytes); the
 * length written. */
size_t md_headers_filter(const md_route_headers *h, const char *fields, size_t flen, char *out);

#endif
