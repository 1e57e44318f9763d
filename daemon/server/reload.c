/* reload.c: applying a new configuration to the running server, all or nothing.
 *
 * md_server_reload runs as one command on the loop (mp_loop_call_wait), so no connection is
 * accepted half-way through it. It binds every changed listener first; if one fails, the new
 * sockets are closed and nothing changes. Otherwise the old listeners of changed addresses
 * close, unchanged ones are not touched (their sockets and backlogs carry on), and the HTTP
 * limits are published as a new generation that each connection picks up at its next request
 * (generation.h). The older generations no connection is at any more are freed on the way.
 */
#include <stdio.h>
#include <stdlib.h>

#include "server/conn.h"
#include "core/log.h"

typedef struct reload_call {
    md_server *srv;
    const md_config *cfg;
    md_error *err;
    int rc;
} reload_call;

/* Loop side: apply r->cfg, or change nothing. */
static void reload_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    reload_call *r = arg;
    md_server *s = r->srv;
    const md_config *cfg = r->cfg;
    md_http_gen *g = NULL;
    int rc = md_conn_http_gen_new(s, cfg, &g, r->err);
    if (rc == 0 && !s->draining)
        rc = md_listeners_reload(s, cfg, r->err);
    if (rc != 0) {
        if (g != NULL)
            md_http_gen_free(g);
        r->rc = rc;
        return;
    }
    md_http_gens_publish(&s->gens, g);
    md_http_gens_sweep(&s->gens); /* the older ones whose connections have all moved or closed */
    s->cfg = *cfg;
    md_listeners_resume(s); /* max_connections may have grown */
    r->rc = 0;
}

int md_server_reload(md_server *s, const md_config *cfg, md_error *err)
{
    reload_call r = {.srv = s, .cfg = cfg, .err = err};
    int rc = mp_loop_call_wait(s->rt, reload_cmd, &r);
    if (rc == 0)
        rc = r.rc;
    md_server_count_reload(s, rc == 0);
    return rc;
}

void md_server_count_reload(md_server *s, bool ok)
{
    /* Relaxed: counters for /metrics, published nothing else. */
    atomic_fetch_add_explicit(ok ? &s->reloads_ok : &s->reloads_failed, 1, memory_order_relaxed);
    atomic_store_explicit(&s->last_reload_ok, ok, memory_order_relaxed);
}
