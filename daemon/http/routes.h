/* The routes magpied serves, and which methods each allows.
 *
 * The connection core (http.c) frames responses; this table decides what they are. Lookup is
 * on the raw path (no percent-decoding, no normalisation): "/healthz/" is not "/healthz".
 */
#ifndef MD_ROUTES_H
#define MD_ROUTES_H

#include <stddef.h>
#include <stdint.h>

typedef enum md_route_kind {
    MD_ROUTE_STATIC,  /* body and content_type below */
    MD_ROUTE_ECHO,    /* the request body back */
    MD_ROUTE_METRICS, /* md_http_server.metrics_text */
} md_route_kind;

typedef struct md_route {
    unsigned index; /* position in the table, 0.. */
    const char *path;
    size_t path_len;
    md_route_kind kind;
    uint64_t methods;  /* bit (1 << llhttp method) per allowed method */
    const char *allow; /* the Allow header value for 405 and OPTIONS */
    const char *content_type;
    const char *body; /* MD_ROUTE_STATIC only */
    size_t body_len;
} md_route;

/* Allow for OPTIONS *: every method some route allows. */
#define MD_ROUTES_ALLOW_ANY "GET, HEAD, POST, OPTIONS"

/* The route for a path, or NULL (404). */
const md_route *md_route_find(const char *path, size_t len);

/* method is an llhttp method number. HEAD is allowed wherever GET is. OPTIONS, which every
 * route answers (http.c, before this check), is not in methods but is in allow. */
static inline int md_route_allows(const md_route *r, unsigned method)
{
    return method < 64 && (r->methods >> method) & 1;
}

#endif
