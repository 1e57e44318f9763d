/* Virtual hosts: [site NAME] sections, each with the host names it answers for and its own
 * routes, and the choice of a site by a request's Host (or a TLS client's server name).
 *
 * The sites live in the route table (routes.h), so that they travel with the routes as one
 * value through a reload. Site 0 is the default site: the routes written before any [site],
 * and the built-in ones. A [route] section belongs to the [site] above it in the file.
 *
 * Matching (md_sites_pick): the name is compared without its port and without a trailing
 * dot, in any ASCII case; an exact name wins over a wildcard, and a longer wildcard over a
 * shorter one ("*.a.example.com" before "*.example.com"). "*.example.com" matches any name
 * that ends in ".example.com" (one label or more before it), not example.com itself.
 *
 * A site's own header rules and error pages (header_add, header_set, header_remove,
 * header_always, error_page: the route keys, in [site NAME], or in [http] for the default
 * site) are for the responses it gives without a route, as nginx's server-level add_header
 * ... always and error_page: the errors found before the route is known (400, 413, 414,
 * 431, 505, 501, 408, a TLS site's 421) and the 404 of a path no route matches. request.c
 * applies them; a request whose head did not get as far as its Host is the listener's
 * default site's. They are also the defaults of the site's routes: a route that sets no
 * header rule, or no error page, gets a copy of the site's when the file is read (routes.c).
 */
#ifndef MD_SITES_H
#define MD_SITES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/error_page.h"
#include "http/headers.h"

enum {
    MD_SITES_MAX = 16,       /* sites in one table, the default one included */
    MD_SITE_NAME_MAX = 32,   /* bytes of a site's name (NAME of [site NAME]), with its NUL */
    MD_SITE_NAMES_MAX = 512, /* bytes of its host names, lower case, one space between */
    MD_SITE_PATH_MAX = 1024, /* bytes of a certificate's or key's path, with its NUL */
    MD_SITE_HSTS_MAX = 128,  /* bytes of its Strict-Transport-Security value, with its NUL */
    MD_SITE_HOST_MAX = 256,  /* bytes of a host name compared (a longer one matches nothing) */
};

typedef struct md_site {
    char name[MD_SITE_NAME_MAX];   /* "" for the default site */
    char names[MD_SITE_NAMES_MAX]; /* "example.com *.example.com": lower case, no trailing dot */
    char cert[MD_SITE_PATH_MAX];   /* PEM chain for SNI; "": the listener's */
    char key[MD_SITE_PATH_MAX];
    char hsts[MD_SITE_HSTS_MAX]; /* "max-age=63072000; includeSubDomains"; "": none */
    uint32_t line;               /* of its [site] header */
    uint32_t names_line, cert_line, key_line;
    md_route_headers headers;    /* for its responses without a route (above) */
    md_route_error_pages errors; /* ... and their bodies (files read per generation) */
} md_site;

struct md_route_table;
struct md_ini_section;

/* The [site NAME] section's kind for the INI engine: its part is the route table. */
extern const struct md_ini_section md_section_site;

/* The site for host[0..len) (a Host value or a TLS server name: "Example.COM.:8443" reads as
 * "example.com"), or -1 when no site names it (the caller takes its default). */
int md_sites_pick(const struct md_route_table *t, const char *host, size_t len);

/* The same over sites[0..n) (n 0 or 1: -1), for a copy of the sites outside a table. */
int md_sites_pick_in(const md_site *sites, uint32_t n, const char *host, size_t len);

/* A site's header rules and error pages: the keys of headers.h and error_page.h into s, for
 * [site NAME] and the default site's [http]. 0, -ENOENT for another key, or -EINVAL with msg. */
int md_site_rules_key(md_site *s, const char *key, const char *value, uint32_t line, char *msg,
                      size_t msg_len);

/* The index of the site named name ("" is the default site, 0), or -1. */
int md_site_find(const struct md_route_table *t, const char *name);

/* Whether pattern (lower case: "example.com", "*.example.com") matches host (lower case, no
 * port, no trailing dot); for tests and the TLS layer. */
bool md_site_name_matches(const char *pattern, size_t plen, const char *host, size_t hlen);

#endif
