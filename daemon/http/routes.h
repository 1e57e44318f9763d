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
 * configuration's [route] sections), then md_routes_prepare().
 */
#ifndef MD_ROUTES_H
#define MD_ROUTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct md_handler;

enum {
    MD_ROUTES_MAX = 64,       /* routes in one table */
    MD_ROUTE_PATH_MAX = 192,  /* bytes of a route's path, with its NUL */
    MD_ROUTE_TEXT_MAX = 200,  /* bytes of a text body or a redirect's location, with its NUL */
    MD_ROUTE_CTYPE_MAX = 128, /* bytes of a content type, with its NUL */
    MD_ROUTE_ALLOW_MAX = 160, /* bytes of an Allow value, with its NUL */
    MD_ROUTE_INDEX_MAX = 64,  /* bytes of a static route's index file name, with its NUL */
    MD_ROUTE_NAME_MAX = 33,   /* bytes of an upstream's name, with its NUL */
};

/* proxy: what the upstream request's Host is. */
typedef enum md_proxy_host {
    MD_PROXY_HOST_PASS,     /* the client's */
    MD_PROXY_HOST_UPSTREAM, /* the server's HOST:PORT */
    MD_PROXY_HOST_LITERAL,  /* the route's body[] */
} md_proxy_host;

/* The handlers a route can name (http/handlers/, one file each). */
typedef enum md_handler_kind {
    MD_HANDLER_TEXT,     /* a fixed status, content type and body: today's hello */
    MD_HANDLER_ECHO,     /* the request body back */
    MD_HANDLER_METRICS,  /* md_http_server.metrics_text */
    MD_HANDLER_HEALTH,   /* 200 "ok" */
    MD_HANDLER_REDIRECT, /* a status and a Location */
    MD_HANDLER_STATIC,   /* files under a root directory */
    MD_HANDLER_PROXY,    /* forwarded to an [upstream] group (http/upstream.h) */
    MD_HANDLER_KINDS,
} md_handler_kind;

typedef struct md_route {
    char path[MD_ROUTE_PATH_MAX];
    uint16_t path_len;
    bool exact;         /* "[route = /p]": this path only */
    bool has_handler;   /* the section named one (checked by md_route_check) */
    bool has_methods;   /* methods were given; otherwise the handler's default */
    bool precompressed; /* static: serve FILE.gz to clients that accept gzip */
    uint8_t kind;       /* md_handler_kind */
    uint8_t index;      /* position in the table (the canned-response slot of a text route) */
    uint16_t status;    /* text and redirect */
    uint64_t methods;   /* bit (1 << llhttp method) per allowed method; HEAD goes with GET */
    char allow[MD_ROUTE_ALLOW_MAX];        /* Allow for 405 and OPTIONS; md_routes_prepare */
    char content_type[MD_ROUTE_CTYPE_MAX]; /* text, echo, metrics, health; static's default */
    /* text: the body; redirect: the location; static: the root directory */
    char body[MD_ROUTE_TEXT_MAX];
    char index_file[MD_ROUTE_INDEX_MAX]; /* static: the file a directory's path serves */
    int root_fd; /* static: the root, opened by md_routes_open(); -1 in a configuration */
    /* static: unique per opened root (never reused, unlike root_fd): the open-file cache's
     * key, so that no entry of an earlier table's root is found through this one */
    uint64_t root_id;
    uint16_t body_len;
    uint32_t line; /* of its [route] header in the configuration; 0: built in */
    /* proxy: the [upstream] it names (upstream_index once the configuration is checked), the
     * line of its upstream key, Host (a literal is in body[]), Forwarded, Via, Upgrade. */
    char upstream[MD_ROUTE_NAME_MAX];
    uint8_t upstream_index;
    uint8_t host_mode; /* md_proxy_host */
    bool forwarded, via, websocket;
    uint32_t upstream_line;
    const struct md_handler *handler; /* md_routes_prepare(); a test may put its own */
} md_route;

typedef struct md_route_table {
    uint32_t n;
    uint64_t id; /* unique per prepared table: tags this table's canned responses */
    md_route r[MD_ROUTES_MAX];
    uint8_t order[MD_ROUTES_MAX]; /* indices into r, longest path first, exact before prefix */
    char allow_any[MD_ROUTE_ALLOW_MAX]; /* for OPTIONS *: every method some route allows */
} md_route_table;

/* A configuration error's message into msg (len bytes; nothing when msg is NULL), for the
 * parsers of routes and upstreams. */
void md_say(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fills t with the built-in routes (exact "/", "/echo", "/metrics", "/healthz", as the
 * shipped configuration spells them) and prepares it. */
void md_routes_builtin(md_route_table *t);

/* Appends a route from a section header's text after "route" (" /p" or " = /p"). 0, or
 * -EINVAL with msg (msg_len bytes) saying why: a bad path, a duplicate, a full table. */
int md_routes_add(md_route_table *t, const char *spec, uint32_t line, char *msg, size_t msg_len);

/* Sets one option of route r from its section. 0, or -EINVAL with msg (no key name in it: the
 * caller prefixes "[route /p] key: "), or -ENOENT for a key no handler knows. */
int md_route_key(md_route *r, const char *key, const char *value, char *msg, size_t msg_len);

/* After a route's last key: what its handler requires (a handler; a location for redirect).
 * 0 or -EINVAL with msg. */
int md_route_check(const md_route *r, char *msg, size_t msg_len);

/* Opens the root directory of every static route (O_PATH), for a table that serves: 0, or a
 * negative errno with msg naming the route. md_routes_close() closes them (also after an
 * error); a table copied from a configuration holds none. */
int md_routes_open(md_route_table *t, char *msg, size_t msg_len);
void md_routes_close(md_route_table *t);

/* Resolves handlers, Allow values and the lookup order. Call once the table is complete. */
void md_routes_prepare(md_route_table *t);

/* The route for a normalised path, or NULL (404). */
const md_route *md_routes_find(const md_route_table *t, const char *path, size_t len);

/* method is an llhttp method number. HEAD is allowed wherever GET is. OPTIONS, which every
 * route answers (http.c, before this check), is not in methods but is in allow. */
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
 * no "." or ".." segment): the common case, which needs no copy. */
bool md_path_is_normal(const char *in, size_t len);

#endif
