/* conn_echo.c: the echo connection task (RFC 862).
 *
 * The bytes are written from the stream's own buffer, and nothing more is read until they are
 * consumed: a peer that does not read its echo is held back by TCP, and closed by the send
 * limits (conn.c). While it waits for its peer (to send, or to take its echo) the connection
 * closes after [echo] idle_timeout_ms without a byte in or out, so that idle sockets cannot
 * hold max_connections for ever.
 */
#include <errno.h>

#include "server/conn.h"

/* Waiting for the peer to send: an echo connection closes once the peer has neither sent nor
 * read for idle_ms. */
static mp_poll echo_wait(md_conn *c, mp_context *cx)
{
    md_conn_rest(c); /* a blocked write's state, if one was: all written */
    if (c->echo.lim.idle_ms == 0 ||
        mp_timer_poll(&c->timer, c->echo.progress_ms + c->echo.lim.idle_ms, cx) == MP_PENDING)
        return MP_PENDING;
    return md_conn_finish(c, MD_CLOSE_IDLE_TIMEOUT);
}

mp_poll md_conn_echo_poll(md_conn *c, mp_context *cx)
{
    for (;;) {
        const char *data;
        size_t len;
        int err;
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING)
            return echo_wait(c, cx);
        if (len == 0)
            return md_conn_finish(c, err == UV_EOF   ? MD_CLOSE_PEER
                                     : err == -EINTR ? MD_CLOSE_SHUTDOWN
                                                     : MD_CLOSE_ERROR);
        if (!c->send_blocked)
            c->echo.progress_ms = mp_now_ms(); /* new bytes from the peer */
        if (md_conn_write(c, cx, data, len, &err) == MP_PENDING)
            return MP_PENDING;
        if (err != 0)
            return md_conn_finish(c, md_conn_write_error(c, err));
        md_metrics_bytes(&c->group->srv->metrics, MD_LISTENER_ECHO, len, len);
        mp_tcp_consume(&c->tcp, len);
        c->echo.progress_ms = mp_now_ms();
    }
}
