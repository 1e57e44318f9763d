/* server.c: the server's lifetime. It starts with its listeners bound (or taken from systemd)
 * on the runtime's loop, describes them for the "listening" line, drains on a graceful stop,
 * and is freed after the runtime's shutdown. Everything it does to listeners and connections
 * runs on the loop's thread, through mp_loop_call_wait; conn.h lists the files that do the
 * rest.
 */
#include "server/server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/conn.h"

typedef struct start_call {
    md_server *srv;
    const md_activated *inherited;
    md_error *err;
    int rc;
} start_call;

static void start_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    start_call *c = arg;
    c->rc = md_listeners_open(c->srv, c->inherited, c->err);
}

int md_server_start(md_server **out, mp_runtime *rt, const md_config *cfg,
                    const md_activated *inherited, md_error *err)
{
    md_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->rt = rt;
    s->cfg = *cfg;
    s->start_ns = uv_hrtime();
    md_metrics_init(&s->metrics);
    md_metrics_set_extra(&s->metrics, md_server_metrics_text, s);
    atomic_init(&s->last_reload_ok, true);
    md_http_gen *first = NULL;
    int grc = md_conn_http_gen_new(s, cfg, &first, err);
    if (grc != 0) {
        free(s);
        return grc;
    }
    md_http_gens_init(&s->gens, first);
    start_call c = {.srv = s, .inherited = inherited, .err = err};
    int rc = mp_loop_call_wait(rt, start_cmd, &c);
    if (rc == 0)
        rc = c.rc;
    if (rc != 0) {
        md_http_gens_free(&s->gens);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

typedef struct describe_call {
    md_server *srv;
    char *buf;
    size_t len;
} describe_call;

static void describe_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    describe_call *c = arg;
    md_listeners_describe(c->srv, c->buf, c->len);
}

void md_server_describe(md_server *s, char *buf, size_t len)
{
    describe_call c = {.srv = s, .buf = buf, .len = len};
    if (mp_loop_call_wait(s->rt, describe_cmd, &c) != 0)
        snprintf(buf, len, "?");
}

static void drain_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    md_server *s = arg;
    s->draining = true;
    md_listeners_close_all(s);
    /* Every conn in the list is alive: it leaves the list when its stream closes, before it
     * is freed. */
    for (md_conn *c = s->conns; c; c = c->next)
        mp_tcp_interrupt(&c->tcp);
    /* The handlers' generation state (the proxy's health tasks and pooled sockets) ends while
     * the runtime still runs. */
    for (md_http_gen *g = s->gens.newest; g != NULL; g = g->older)
        md_http_gen_shutdown(g);
}

void md_server_drain(md_server *s)
{
    (void)mp_loop_call_wait(s->rt, drain_cmd, s); /* -ESHUTDOWN: nothing left to drain */
}

uint32_t md_server_open(md_server *s)
{
    /* Relaxed: a count for progress (listener.c). */
    return atomic_load_explicit(&s->open_conns, memory_order_relaxed);
}

void md_server_free(md_server *s)
{
    /* The runtime's shutdown closed every connection: no generation is in use. */
    md_http_gens_free(&s->gens);
    free(s);
}
