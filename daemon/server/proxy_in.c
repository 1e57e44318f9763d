/* proxy_in.c: a connection's PROXY header (proxy_protocol on its listener), read before
 * anything else: before the TLS handshake, before HTTP/1.1's or h2c's first byte.
 *
 * Who is believed is decided at accept, on the loop's thread (conn.c): a peer outside its
 * listener's proxy_protocol_from is closed by its task before a byte is read; a trusted one
 * must send a whole, well-formed header within [limits] header_timeout_ms of the accept, or
 * is closed too. Each refusal is counted in magpied_connections_closed_total (reason
 * proxy_untrusted, proxy_invalid or proxy_timeout) and logged at info, one line a second at
 * most, so that a flood of bad headers cannot flood the log.
 *
 * The stream's read view is not a buffer that grows (a view left unconsumed comes back as it
 * is), so a header that arrives in pieces is gathered here, in a buffer the connection holds
 * only meanwhile; the one that comes whole in the first read, the usual case, is parsed where
 * it lies. Only the header's bytes are consumed: what follows it stays in the stream for the
 * TLS handshake or the HTTP core.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "server/conn.h"
#include "server/proxy_protocol.h"

struct md_proxy_in {
    size_t have;
    char buf[MD_PROXY_HEADER_MAX];
};

/* The second of the last refusal logged; relaxed: a best-effort rate, any thread. */
static _Atomic uint64_t last_logged_s;

static void refused(md_conn *c, const char *why)
{
    uint64_t now_s = mp_now_ms() / 1000, last;
    if (!md_log_enabled(MD_LOG_INFO))
        return;
    last = atomic_load_explicit(&last_logged_s, memory_order_relaxed);
    /* Relaxed: only which thread logs this second is decided; nothing is published. */
    if (last == now_s ||
        !atomic_compare_exchange_strong_explicit(&last_logged_s, &last, now_s, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    struct sockaddr_storage ss;
    char peer[MD_PEER_TEXT_MAX] = "?";
    if (mp_tcp_peer_addr(&c->tcp, &ss) == 0)
        md_sockaddr_text(&ss, true, peer, sizeof peer);
    md_log(MD_LOG_INFO, "[%s] proxy_protocol: connection from %s closed: %s (one line a second)",
           c->group != NULL ? c->group->name : "?", peer, why);
}

/* The header h is read: its address becomes the connection's client. */
static md_close_reason accepted(md_conn *c, const md_proxy_header *h)
{
    free(c->more->pp.in);
    c->more->pp.in = NULL;
    c->proxy = MD_CONN_PROXY_NONE; /* pp is the client's address from here on */
    mp_timer_cancel(&c->timer);
    if (!h->has_addr)
        return MD_CLOSE_DONE; /* LOCAL, UNKNOWN, UNSPEC, Unix: the peer's own address */
    /* Not the balancer's address instead: access rules would then judge the wrong client. */
    if ((c->more->pp.client = malloc(sizeof *c->more->pp.client)) == NULL)
        return MD_CLOSE_NO_MEMORY;
    *c->more->pp.client = h->src;
    return MD_CLOSE_DONE;
}

mp_poll md_proxy_in_poll(md_conn *c, mp_context *cx, md_close_reason *why)
{
    if (c->proxy == MD_CONN_PROXY_UNTRUSTED) {
        refused(c, "not in proxy_protocol_from");
        *why = MD_CLOSE_PROXY_UNTRUSTED;
        return MP_READY;
    }
    md_conn_more *m = c->more; /* made at accept (conn.c) */
    for (;;) {
        const char *data;
        size_t len;
        int err;
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING) {
            uint64_t deadline = m->accepted_ms + c->http.srv->limits.header_timeout_ms;
            if (mp_timer_poll(&c->timer, deadline, cx) == MP_PENDING)
                return MP_PENDING;
            refused(c, "no whole header within header_timeout_ms");
            *why = MD_CLOSE_PROXY_TIMEOUT;
            return MP_READY;
        }
        if (len == 0) {
            if (err == -EINTR) /* a graceful stop: nothing was asked yet */
                *why = MD_CLOSE_SHUTDOWN;
            else if (err != UV_EOF)
                *why = MD_CLOSE_ERROR;
            else if (m->pp.in == NULL)
                *why = MD_CLOSE_PEER; /* a bare TCP probe: connected and left */
            else {
                refused(c, "truncated header");
                *why = MD_CLOSE_PROXY_INVALID;
            }
            return MP_READY;
        }
        struct md_proxy_in *in = m->pp.in;
        size_t have = in != NULL ? in->have : 0, take = len;
        const char *p = data;
        if (in != NULL) {
            take = len < sizeof in->buf - have ? len : sizeof in->buf - have;
            memcpy(in->buf + have, data, take);
            p = in->buf;
        }
        md_proxy_header h;
        md_proxy_error e = md_proxy_parse(p, have + take, &h);
        if (e == MD_PROXY_OK) {
            mp_tcp_consume(&c->tcp, h.len - have); /* the rest is the connection's own */
            *why = accepted(c, &h);
            return MP_READY;
        }
        if (e == MD_PROXY_NEED_MORE && have + take >= MD_PROXY_HEADER_MAX)
            e = MD_PROXY_OVERSIZED; /* not reached: the parser says so first */
        if (e != MD_PROXY_NEED_MORE) {
            refused(c, md_proxy_error_name(e));
            *why = MD_CLOSE_PROXY_INVALID;
            return MP_READY;
        }
        if (in == NULL) {
            if ((in = m->pp.in = malloc(sizeof *in)) == NULL) {
                *why = MD_CLOSE_NO_MEMORY;
                return MP_READY;
            }
            memcpy(in->buf, data, len); /* len < MD_PROXY_HEADER_MAX: checked above */
        }
        in->have = have + take;
        mp_tcp_consume(&c->tcp, take);
    }
}
