/* A TCP echo server made of tasks alone, on magpie_io.h's listener: one task accepts, one task
 * per connection echoes until the peer closes. Shared by the suites that need a peer written
 * against the public API (test_listener.c, test_tcp.c). Include after <criterion/criterion.h>. */
#ifndef MP_TEST_TASK_ECHO_H
#define MP_TEST_TASK_ECHO_H

#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "magpie.h"

typedef struct echo_server echo_server;

typedef struct echo_conn {
    mp_task task;
    mp_tcp tcp;
    echo_server *srv;
    const char *pending; /* bytes of the read view being echoed */
    size_t pending_len;
    _Atomic int refs; /* the task and the stream's close */
} echo_conn;

struct echo_server {
    mp_task task;
    mp_tcp_listener l;
    mp_runtime *rt;
    int port;
    int accept_err; /* the error that ended the acceptor (-EBADF after a close) */
    _Atomic int accepted, conns_freed, listener_closed;
    _Atomic bool acceptor_done;
    echo_conn *next; /* storage for the next accept */
};

static void echo_conn_unref(echo_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        atomic_fetch_add(&c->srv->conns_freed, 1);
        free(c);
    }
}

static void echo_conn_closed(mp_tcp *t)
{
    echo_conn_unref(mp_container_of(t, echo_conn, tcp));
}

static mp_poll echo_conn_poll(mp_task *t, mp_context *cx)
{
    echo_conn *c = mp_container_of(t, echo_conn, task);
    for (;;) {
        int err;
        if (c->pending_len) {
            if (mp_tcp_write_poll(&c->tcp, cx, c->pending, c->pending_len, &err) == MP_PENDING)
                return MP_PENDING;
            mp_tcp_consume(&c->tcp, c->pending_len);
            c->pending_len = 0;
            if (err)
                break;
        }
        const char *data;
        size_t len;
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING)
            return MP_PENDING;
        if (len == 0)
            break;
        c->pending = data;
        c->pending_len = len;
    }
    mp_tcp_close(&c->tcp, echo_conn_closed);
    return MP_READY;
}

static void echo_conn_cancel(mp_task *t)
{
    echo_conn *c = mp_container_of(t, echo_conn, task);
    mp_tcp_close(&c->tcp, echo_conn_closed); /* -ESHUTDOWN at shutdown: closed already */
}

static void echo_conn_release(mp_task *t)
{
    echo_conn_unref(mp_container_of(t, echo_conn, task));
}

static const mp_task_vtable echo_conn_vt = {echo_conn_poll, echo_conn_cancel, echo_conn_release};

static void echo_listener_closed(mp_tcp_listener *l)
{
    echo_server *s = mp_container_of(l, echo_server, l);
    atomic_store(&s->listener_closed, 1);
}

static mp_poll echo_accept_poll(mp_task *t, mp_context *cx)
{
    echo_server *s = mp_container_of(t, echo_server, task);
    for (;;) {
        if (!s->next) {
            s->next = calloc(1, sizeof *s->next);
            cr_assert(s->next);
        }
        int err;
        if (mp_tcp_accept_poll(&s->l, cx, &s->next->tcp, 0, &err) == MP_PENDING)
            return MP_PENDING;
        if (err != 0) {
            s->accept_err = err;
            free(s->next);
            s->next = NULL;
            atomic_store(&s->acceptor_done, true);
            return MP_READY;
        }
        echo_conn *c = s->next;
        s->next = NULL;
        c->srv = s;
        atomic_init(&c->refs, 2);
        mp_task_init(&c->task, &echo_conn_vt);
        atomic_fetch_add(&s->accepted, 1);
        if (mp_spawn(s->rt, &c->task) != 0) {
            mp_tcp_close(&c->tcp, echo_conn_closed);
            echo_conn_unref(c);
        }
    }
}

static void echo_accept_cancel(mp_task *t)
{
    echo_server *s = mp_container_of(t, echo_server, task);
    free(s->next);
    s->next = NULL;
    atomic_store(&s->acceptor_done, true);
}

static const mp_task_vtable echo_accept_vt = {echo_accept_poll, echo_accept_cancel, NULL};

/* Listen on 127.0.0.1 (or ::1 with v6) on an ephemeral port and start the acceptor. */
static inline echo_server *echo_server_start(mp_runtime *rt, bool v6)
{
    echo_server *s = calloc(1, sizeof *s);
    cr_assert(s);
    s->rt = rt;
    struct sockaddr_storage ss = {0};
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    int rc = mp_tcp_listen(rt, &s->l, (struct sockaddr *)&ss, 0, 0);
    cr_assert_eq(rc, 0, "mp_tcp_listen: %d", rc);
    cr_assert_eq(mp_tcp_listener_addr(&s->l, &ss), 0);
    s->port =
        ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    mp_task_init(&s->task, &echo_accept_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &s->task), 0);
    return s;
}

/* Close the listener (the acceptor sees -EBADF and ends), join the acceptor. The server's
 * memory stays until echo_server_free, after the runtime's shutdown. */
static inline void echo_server_stop(echo_server *s)
{
    cr_assert_eq(mp_tcp_listener_close(&s->l, echo_listener_closed), 0);
    cr_assert_eq(mp_join(&s->task), 0);
    cr_assert_eq(s->accept_err, -EBADF);
}

static inline struct sockaddr_in echo_server_addr(const echo_server *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

#endif
