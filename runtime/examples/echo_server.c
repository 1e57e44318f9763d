/* A TCP echo server (RFC 862) on libmagpie alone: one task accepts, one task per connection
 * echoes what it reads until the peer closes. No libuv call of its own.
 *
 *   echo_server [PORT]     listen on 127.0.0.1:PORT (0 or none: a free port), print
 *                          "listening on 127.0.0.1:PORT", serve until SIGINT or SIGTERM
 */
#include <arpa/inet.h>
#include <errno.h>
#include <magpie.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A connection: its task and its stream live in one allocation, freed when both are done
 * with it (the task's release, and the stream's close callback). */
typedef struct conn {
    mp_task task;
    mp_tcp tcp;
    size_t echoing; /* bytes of the current read view being written back */
    const char *data;
    _Atomic int refs;
} conn;

static _Atomic unsigned long served; /* connections finished */

static void conn_unref(conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        free(c);
}

static void conn_closed(mp_tcp *t)
{
    conn_unref(mp_container_of(t, conn, tcp));
}

/* Read, write back, repeat. Each call that returns MP_PENDING has left the task's waker with
 * the stream: the task runs again when the socket is ready. */
static mp_poll conn_poll(mp_task *t, mp_context *cx)
{
    conn *c = mp_container_of(t, conn, task);
    for (;;) {
        int err;
        if (c->echoing) {
            if (mp_tcp_write_poll(&c->tcp, cx, c->data, c->echoing, &err) == MP_PENDING)
                return MP_PENDING; /* the peer is slow to read: wait, holding its bytes */
            mp_tcp_consume(&c->tcp, c->echoing);
            c->echoing = 0;
            if (err != 0)
                break;
        }
        size_t len;
        if (mp_tcp_read_poll(&c->tcp, cx, &c->data, &len, &err) == MP_PENDING)
            return MP_PENDING;
        if (len == 0) /* end of stream (err MP_EOF) or an error */
            break;
        c->echoing = len;
    }
    mp_tcp_close(&c->tcp, conn_closed);
    atomic_fetch_add(&served, 1);
    return MP_READY;
}

/* Cancelled (the runtime shuts down): close the stream. conn_closed runs once whatever the
 * close returns (-ESHUTDOWN when the shutdown closed it already: then before it returns). */
static void conn_cancel(mp_task *t)
{
    conn *c = mp_container_of(t, conn, task);
    mp_tcp_close(&c->tcp, conn_closed);
}

static void conn_release(mp_task *t)
{
    conn_unref(mp_container_of(t, conn, task));
}

static const mp_task_vtable conn_vt = {conn_poll, conn_cancel, conn_release};

typedef struct acceptor {
    mp_task task;
    mp_tcp_listener listener;
    mp_runtime *rt;
    conn *next; /* storage for the next connection */
    mp_timer pause;
    uint64_t resume_ms; /* while pausing: when to accept again */
    bool pausing;
} acceptor;

static mp_poll acceptor_poll(mp_task *t, mp_context *cx)
{
    acceptor *a = mp_container_of(t, acceptor, task);
    for (;;) {
        if (a->pausing && mp_timer_poll(&a->pause, a->resume_ms, cx) == MP_PENDING)
            return MP_PENDING;
        a->pausing = false;
        if (!a->next && !(a->next = calloc(1, sizeof *a->next)))
            return MP_READY;
        int err;
        if (mp_tcp_accept_poll(&a->listener, cx, &a->next->tcp, 0, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM) {
            /* Out of descriptors: the connection waits in the kernel; try again in 100 ms. */
            a->pausing = true;
            a->resume_ms = mp_now_ms() + 100;
            continue;
        }
        if (err != 0) /* -EBADF: the listener was closed */
            return MP_READY;
        conn *c = a->next;
        a->next = NULL;
        c->refs = 2;
        mp_task_init(&c->task, &conn_vt);
        mp_tcp_set_nodelay(&c->tcp, true);
        if (mp_spawn(a->rt, &c->task) != 0) {
            mp_tcp_close(&c->tcp, conn_closed);
            conn_unref(c);
        }
    }
}

static void acceptor_cancel(mp_task *t)
{
    acceptor *a = mp_container_of(t, acceptor, task);
    mp_timer_cancel(&a->pause);
}

static const mp_task_vtable acceptor_vt = {.poll = acceptor_poll, .cancel = acceptor_cancel};

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 0;
    /* SIGINT and SIGTERM are taken by sigwait below; blocked before any thread starts, so
     * that every thread inherits the mask. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    mp_runtime *rt;
    int rc = mp_runtime_new(&rt, NULL);
    if (rc != 0) {
        fprintf(stderr, "mp_runtime_new: %s\n", mp_strerror(rc));
        return 1;
    }
    static acceptor a;
    a.rt = rt;
    mp_timer_init(&a.pause, rt);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if ((rc = mp_tcp_listen(rt, &a.listener, (struct sockaddr *)&addr, 0, 0)) != 0) {
        fprintf(stderr, "listen on 127.0.0.1:%d: %s\n", port, mp_strerror(rc));
        mp_runtime_free(rt);
        return 1;
    }
    struct sockaddr_storage bound;
    mp_tcp_listener_addr(&a.listener, &bound);
    printf("listening on 127.0.0.1:%d\n", ntohs(((struct sockaddr_in *)&bound)->sin_port));
    fflush(stdout);
    mp_task_init(&a.task, &acceptor_vt);
    mp_spawn_joinable(rt, &a.task);

    int sig;
    sigwait(&stop, &sig);
    /* Stop accepting (the acceptor sees -EBADF and ends), then cancel what still runs. */
    mp_tcp_listener_close(&a.listener, NULL);
    mp_join(&a.task);
    free(a.next);
    mp_runtime_shutdown(rt);
    mp_runtime_free(rt);
    printf("served %lu connections\n", (unsigned long)atomic_load(&served));
    return 0;
}
