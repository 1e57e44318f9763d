/* Generations of HTTP settings (see generation.h).
 *
 * A generation may be freed once no connection is at it and none can reach it again.
 * Connections only move forward, so the loop frees from the oldest end while the counts are
 * 0, and keeps the newest. The race this must not lose, a connection moving from F past G to
 * H while the loop sweeps:
 *
 *   connection (worker)                       sweep (loop)
 *   walks F -> G -> H (newer links)
 *   leaves F: F.conns 1 -> 0
 *                                             F.conns == 0: free F
 *                                             G.conns == 0: free G
 *                                             H.conns == 0 and H is not the newest: free H
 *   enters H: H.conns++                       -> a count on freed memory, limits read from it
 *
 * Fixed by order: the connection counts itself at H (A) before it leaves F with a release
 * (B); the sweep reads the counts oldest first with acquire (C). A sweep that sees F at 0 has
 * synchronised with (B), so it sees H counted and stops there. The walk itself is safe: F is
 * counted until (B), and nothing newer than a counted generation is freed.
 */
#include "server/generation.h"
#include "http/handler.h"
#include "http/http1.h"
#include "server/tls.h"

#include <stddef.h>
#include <stdlib.h>

#include "magpie.h"

void md_http_gens_init(md_http_gens *l, md_http_gen *first)
{
    atomic_init(&first->newer, NULL);
    atomic_init(&first->conns, 0);
    first->older = NULL;
    l->newest = l->oldest = first;
    atomic_init(&l->count, 1);
}

void md_http_gens_publish(md_http_gens *l, md_http_gen *g)
{
    atomic_init(&g->newer, NULL);
    atomic_init(&g->conns, 0);
    g->older = l->newest;
    /* Release: g's settings are written before a connection can reach it; pairs with the
     * acquire in md_http_gen_advance(). */
    atomic_store_explicit(&l->newest->newer, g, memory_order_release);
    l->newest = g;
    /* Relaxed: a gauge for /metrics. */
    atomic_fetch_add_explicit(&l->count, 1, memory_order_relaxed);
}

md_http_gen *md_http_gens_enter(md_http_gens *l)
{
    /* Relaxed: on the loop's thread, the one that sweeps. */
    atomic_fetch_add_explicit(&l->newest->conns, 1, memory_order_relaxed);
    return l->newest;
}

/* Also for a generation whose making failed part way: state a handler did not make is NULL. */
void md_http_gen_free(md_http_gen *g)
{
    const md_handler *h;
    for (size_t i = 0; (h = md_handler_at(i)) != NULL; i++)
        if (h->gen_free != NULL && g->http.handler_state[i] != NULL)
            h->gen_free(g->http.handler_state[i]);
    md_routes_close(&g->routes);
    md_tls_ctx_free(g->tls);
    for (size_t i = 0; i < sizeof g->tls_named / sizeof g->tls_named[0]; i++)
        md_tls_ctx_free(g->tls_named[i].tls);
    free(g);
}

void md_http_gen_shutdown(md_http_gen *g)
{
    const md_handler *h;
    for (size_t i = 0; (h = md_handler_at(i)) != NULL; i++)
        if (h->gen_shutdown != NULL && g->http.handler_state[i] != NULL)
            h->gen_shutdown(g->http.handler_state[i]);
}

void md_http_gens_sweep(md_http_gens *l)
{
    md_http_gen *g = l->oldest;
    /* (C) Acquire: pairs with the releases in md_http_gen_advance() and md_http_gen_leave(). */
    while (g != l->newest && atomic_load_explicit(&g->conns, memory_order_acquire) == 0) {
        /* Relaxed: `newer` was published by this thread. */
        md_http_gen *newer = atomic_load_explicit(&g->newer, memory_order_relaxed);
        md_http_gen_free(g);
        g = newer;
        /* Relaxed: a gauge for /metrics. */
        atomic_fetch_sub_explicit(&l->count, 1, memory_order_relaxed);
    }
    g->older = NULL;
    l->oldest = g;
}

uint32_t md_http_gens_count(md_http_gens *l)
{
    /* Relaxed: a gauge. */
    return atomic_load_explicit(&l->count, memory_order_relaxed);
}

void md_http_gens_free(md_http_gens *l)
{
    for (md_http_gen *g = l->newest, *older; g != NULL; g = older) {
        older = g->older;
        md_http_gen_free(g);
    }
    l->newest = l->oldest = NULL;
}

md_http_gen *md_http_gen_of(md_http_server *srv)
{
    return mp_container_of(srv, md_http_gen, http);
}

md_http_gen *md_http_gen_advance(md_http_gen *at)
{
    md_http_gen *g = at, *newer;
    /* Acquire: pairs with the release in md_http_gens_publish(); the newer settings are
     * complete. */
    while ((newer = atomic_load_explicit(&g->newer, memory_order_acquire)) != NULL)
        g = newer;
    if (g == at)
        return at;
    /* (A) Relaxed: the release below publishes it. */
    atomic_fetch_add_explicit(&g->conns, 1, memory_order_relaxed);
    /* (B) Release: the walk and (A) come before `at` may count as unused; pairs with (C) in
     * md_http_gens_sweep(). */
    atomic_fetch_sub_explicit(&at->conns, 1, memory_order_release);
    return g;
}

bool md_http_gen_outdated(md_http_gen *at)
{
    /* Relaxed: only whether a link is there is read, not what it points to (which
     * md_http_gen_advance() reads with acquire when the connection moves). */
    return atomic_load_explicit(&at->newer, memory_order_relaxed) != NULL;
}

void md_http_gen_leave(md_http_gen *at)
{
    /* Release: nothing of the generation is read after this; pairs with (C) in
     * md_http_gens_sweep(). */
    atomic_fetch_sub_explicit(&at->conns, 1, memory_order_release);
}

md_http_server *md_http_gen_request_begin(struct md_http_link *link, md_http_server *now)
{
    (void)link; /* the hook's shape: a generation is the server's, whatever the connection */
    return &md_http_gen_advance(md_http_gen_of(now))->http;
}
