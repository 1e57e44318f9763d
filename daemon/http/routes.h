/* The route table: which handler answers a path, with which options and methods.
 *
 * A table is a plain value (no pointers into the heap), so that it lives inside md_config and
 * travels with it: a reload builds a new configuration, and the new table is published with
 * the new limits as one generation (server/generation.h), so the routes change as one unit.
 *
 * Lookup is on the request path decoded and normalised by md_path_normalise() (the rules are
 * in config/magpied.conf.5): an exact route ("[route = /p]") matches that path only; a prefix
 * route ("[route /p]") matches /p itself and every path below it ("/p/..."), and when several
 * match the longest wins. A table is built by md_routes_add() and md_route_key() (the
 * configuration's [route] sections, whose kind md_section_route declares), then
 * md_routes_prepare().
 */
#ifndef MD_ROUTES_H
#define MD_ROUTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/acl.h"
#include "http/ratelimit.h"
#include "http/auth_basic.h"
#include "http/compress.h"
#include "http/error_page.h"
#include "http/headers.h"
#include "http/real_ip.h"
#include "http/sites.h"

struct md_handler;

enum {
    MD_ROUTES_MAX = 64,       /* routes in one table */
    MD_ROUTE_PATH_MAX = 192,  /* bytes of a route's path, with its NUL */
    MD_ROUTE_ALLOW_MAX = 160, /* bytes of an Allow value, with its NUL */
    /* Bytes of a handler's options inside its route (md_route.conf): the largest handler's
     * (static's, proxy's) with room to grow; each handler checks its own at compile time. */
    MD_ROUTE_CONF_MAX = 576,
};

/* A route: where it applies, the methods it takes, and its handler with the handler's own
 * options. The table knows nothing of any handler's options: they live in conf[], which
 * only the handler reads and writes (md_route_conf()), so that a new handler or option is
 * one file under http/handlers/ (handler.h) and one line in the registry. */
typedef struct md_route {
    char path[MD_ROUTE_PATH_MAX];
    uint16_t path_len;
    bool exact;          /* "[route = /p]": this path only */
    bool has_methods;    /* methods were given; otherwise the handler's default */
    uint8_t index;       /* position in the table (the canned-response slot of a text route) */
    uint8_t metric_slot; /* its magpied_route_* counters (md_routes_count_in) */
    uint8_t site;        /* the site it belongs to (sites.h): the [site] above it; 0 default */
    uint32_t line;       /* of its [route] header in the configuration; 0: built in */
    uint64_t methods;    /* bit (1 << llhttp method) per allowed method; HEAD goes with GET */
    char allow[MD_ROUTE_ALLOW_MAX];   /* Allow for 405 and OPTIONS; md_routes_prepare */
    md_acl acl;                       /* who may use it ("allow" and "deny"; acl.h) */
    md_ratelimit_conf limit;          /* requests per client ("limit_*"; ratelimit.h) */
    struct md_ratelimit *limiter;     /* its clients, in a table that serves (md_routes_open) */
    md_route_auth auth;               /* auth_basic (auth_basic.h) */
    md_route_headers headers;         /* header_add, _set, _remove (headers.h) */
    md_route_real_ip real_ip;         /* real_ip_from, real_ip_header (real_ip.h) */
    md_route_error_pages errors;      /* error_page (error_page.h) */
    md_route_compress compress;       /* compress, compress_* (compress.h) */
    const struct md_handler *handler; /* NULL until the section names one */
    _Alignas(16) unsigned char conf[MD_ROUTE_CONF_MAX]; /* the handler's options */
} md_route;

/* The handler's options of route r (its handler's own struct). */
static inline void *md_route_conf(const md_route *r)
{
    return (void *)r->conf;
}

typedef struct md_route_table {
    uint32_t n;
    uint64_t id; /* unique per prepared table: tags this table's canned responses */
    md_route r[MD_ROUTES_MAX];
    uint8_t order[MD_ROUTES_MAX]; /* indices into r, longest path first, exact before prefix */
    /* The lookup's view of r in that order (md_routes_prepare): what md_routes_find_in()
     * tests before it reads a route, so that it touches only the routes whose path may match
     * (a route is ~2 KiB, each on lines of its own). */
    struct md_route_probe {
        uint16_t path_len;
        uint8_t site;
        uint8_t index;
    } probe[MD_ROUTES_MAX];
    char allow_any[MD_ROUTE_ALLOW_MAX]; /* for OPTIONS *: every method some route allows */
    /* [site NAME] sections (sites.h): sites[0] is the default site; nsites 0: no [site] */
    uint32_t nsites;
    uint8_t cur_site; /* while the file is read: the site the next [route] belongs to */
    md_site sites[MD_SITES_MAX];
} md_route_table;

struct md_ini_section;
/* The [route PATH] / [route = PATH] section's kind for the INI engine (core/ini.h): its part
 * is an md_route_table, each section one route (md_routes_add, md_route_key, md_route_check);
 * at the end of the file each handler's conf_link, then md_routes_prepare(). */
extern const struct md_ini_section md_section_route;

/* A configuration error's message into msg (len bytes; nothing when msg is NULL), for the
 * parsers of routes and upstreams. */
void md_say(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fills t with the built-in routes (exact "/", "/echo", "/metrics", "/healthz", as the
 * shipped configuration spells them: /echo and /metrics for loopback clients only) and
 * prepares it. */
void md_routes_builtin(md_route_table *t);

/* Appends a route from a section header's text after "route" (" /p" or " = /p"). 0, or
 * -EINVAL with msg (msg_len bytes) saying why: a bad path, a duplicate, a full table. */
int md_routes_add(md_route_table *t, const char *spec, uint32_t line, char *msg, size_t msg_len);

/* Sets one option of route r from its section (line: where it is, for later messages):
 * handler, methods, allow and deny, auth_basic and auth_basic_user_file, the header_ rules,
 * real_ip_from and real_ip_header, compress and its compress_ keys here, every other key by the
 * route's handler. 0, or -EINVAL with msg (no key name in it: the caller prefixes "[route /p] key:
 * "), or -ENOENT for a key that neither the table nor the route's handler knows. */
int md_route_key(md_route *r, const char *key, const char *value, uint32_t line, char *msg,
                 size_t msg_len);

/* After a route's last key: a handler, and what the handler requires of its options. 0 or
 * -EINVAL with msg. */
int md_route_check(const md_route *r, char *msg, size_t msg_len);

/* What each route's handler opens for a table that serves (a static root, say), and each
 * route's auth_basic_user_file and error_page files: 0, or a negative errno with msg naming the
 * route. md_routes_close() closes them (also after an error); a table copied from a configuration
 * holds none. */
int md_routes_open(md_route_table *t, char *msg, size_t msg_len);
void md_routes_close(md_route_table *t);

struct md_metrics;
/* Gives each route of a table that serves its magpied_route_* counters in m, labelled as its
 * [route] header spells it ("/api", "= /metrics"): a reload that keeps a route keeps them. */
void md_routes_count_in(md_route_table *t, struct md_metrics *m);
/* Reads every route's auth_basic_user_file and error_page files and lets them go (md_config_check:
 * magpied -t, the start, a reload): 0, or a negative errno with msg ("[route /p]
 * auth_basic_user_file: FILE:LINE: why") and *line, the key's line in the configuration. */
int md_routes_check_files(const md_route_table *t, uint32_t *line, char *msg, size_t msg_len);

/* Resolves handlers, Allow values and the lookup order. Call once the table is complete. */
void md_routes_prepare(md_route_table *t);

/* The route for a normalised path, or NULL (404): md_routes_find() among the default site's
 * routes, md_routes_find_in() among site's. */
const md_route *md_routes_find(const md_route_table *t, const char *path, size_t len);
const md_route *md_routes_find_in(const md_route_table *t, unsigned site, const char *path,
                                  size_t len);

/* method is an enum md_method (request.h: llhttp's numbers). HEAD is allowed wherever GET is.
 * OPTIONS, which every route answers (request.c, before this check), is not in methods but is in
 * allow. */
static inline bool md_route_allows(const md_route *r, unsigned method)
{
    return method < 64 && (r->methods >> method) & 1;
}

/* Decodes and normalises the path of a request target (before any '?') into out (room for
 * len bytes): percent-escapes decoded ("%2F" too, which then separates segments like '/'),
 * "//" collapsed, "." segments dropped, ".." segments take the previous segment away. -EINVAL
 * (400) for a bad escape, an escape of NUL or '\', a control byte or '\' once decoded, a
 * path that does not start with '/', and ".." above the root. *out_len gets the length; the
 * result always starts with '/'. */
int md_path_normalise(const char *in, size_t len, char *out, size_t *out_len);

/* Whether the raw path is already what md_path_normalise() would make of it (no '%', no "//",
 * no "." or ".." segment): the common case, which needs no copy.
 * Inline: asked of every request's path (md__http_req_route). */
static inline bool md_path_is_normal(const char *in, size_t len)
{
    if (len == 0 || in[0] != '/')
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = in[i];
        if (ch == '%')
            return false;
        if (ch == '/' && i + 1 < len) {
            char n = in[i + 1];
            if (n == '/')
                return false;
            /* "/." followed by the end, '/', or ".": a dot segment */
            if (n == '.' && (i + 2 == len || in[i + 2] == '/' ||
                             (in[i + 2] == '.' && (i + 3 == len || in[i + 3] == '/'))))
                return false;
        }
    }
    return true;
}

#endif
