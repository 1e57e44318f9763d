/* Generations of HTTP settings: how a reload's limits reach connections that are already
 * open.
 *
 * A reload publishes a new md_http_server as the newest generation. A connection moves to the
 * newest one when its next request begins (md_http_gen_request_begin, the core's
 * request_begin hook), so a request in flight finishes under the limits it started with.
 * Each generation counts the connections at it; the loop's thread frees the oldest
 * generations once none is left at them, never the newest (md_http_gens_sweep).
 *
 * Who touches what: the list (newest, oldest, older links) belongs to the loop's thread,
 * which publishes, starts new connections at the newest and sweeps. A connection's task, on
 * any worker, reads the newer links and moves its own count forward.
 */
#ifndef MD_GENERATION_H
#define MD_GENERATION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "http/http.h"
#include "http/routes.h"

typedef struct md_http_gen {
    md_http_server http;        /* immutable once published */
    md_route_table routes;      /* http.routes; immutable once published */
    struct md_metrics *metrics; /* the server's, for metrics_text */
    struct md_tls_ctx *tls;     /* [https]'s (server/tls.h); NULL without it */
    /* A TLS [listener NAME]'s own context (its certificate, strict_sni), by the listener's
     * name; NULL: [https]'s. */
    struct {
        char name[32]; /* MD_LISTENER_NAME_MAX */
        struct md_tls_ctx *tls;
    } tls_named[16]; /* MD_LISTENER_SLOTS */
    /* Each listener's default site (routes.sites), by the listener's name. */
    uint32_t ndefaults;
    struct {
        char name[32]; /* MD_LISTENER_NAME_MAX */
        uint8_t site;
    } defaults[16];                      /* MD_LISTENER_SLOTS */
    _Atomic(struct md_http_gen *) newer; /* atomic: set once, by md_http_gens_publish() */
    _Atomic uint32_t conns;              /* atomic: connections at this generation */
    struct md_http_gen *older;           /* loop side */
} md_http_gen;

typedef struct md_http_gens {
    md_http_gen *newest;    /* loop side: new connections start at it */
    md_http_gen *oldest;    /* loop side: where sweeping starts */
    _Atomic uint32_t count; /* atomic, relaxed: generations in the list, for /metrics */
} md_http_gens;

/* Loop side. The list starts with first (its http filled in, the rest zeroed). */
void md_http_gens_init(md_http_gens *l, md_http_gen *first);
/* Loop side: g becomes the newest; connections move to it at their next request. */
void md_http_gens_publish(md_http_gens *l, md_http_gen *g);
/* Loop side: a new connection starts at the newest generation, counted there. */
md_http_gen *md_http_gens_enter(md_http_gens *l);
/* Frees one generation (closing the roots its routes opened); not published, or swept. */
void md_http_gen_free(md_http_gen *g);
/* The server stops: each handler's state of g ends what runs on the runtime (md_handler's
 * gen_shutdown), on the loop's thread, while the runtime still runs. */
void md_http_gen_shutdown(md_http_gen *g);
/* Loop side: free the oldest generations that no connection is at. */
void md_http_gens_sweep(md_http_gens *l);
/* Any thread. */
uint32_t md_http_gens_count(md_http_gens *l);
/* Once no connection is left: free every generation. */
void md_http_gens_free(md_http_gens *l);

/* The generation whose settings srv is. */
md_http_gen *md_http_gen_of(md_http_server *srv);
/* The connection's thread, at a request boundary: counts the connection at the newest
 * generation reachable from at instead, and returns that one (at itself when none is newer). */
md_http_gen *md_http_gen_advance(md_http_gen *at);
/* Any thread: a newer generation has been published (a reload came since at was). */
bool md_http_gen_outdated(md_http_gen *at);
/* The connection's thread, once it no longer reads its generation (it closed). */
void md_http_gen_leave(md_http_gen *at);

/* md_http_server.request_begin for servers that are md_http_gen's http: the newest
 * generation's, the connection counted there from now on (it leaves now's); the protocol
 * serves the request under it. */
md_http_server *md_http_gen_request_begin(struct md_http_link *link, md_http_server *now);

#endif
