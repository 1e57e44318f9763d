/* A tiny DNS-style query and answer over UDP on loopback: a server task answers "ID NAME"
 * datagrams with "ID NAME ADDRESS" from a table, in batches (recvmmsg / sendmmsg); client
 * tasks send queries and wait for the answer with a timeout, sending again when it passes,
 * as a resolver does.
 *
 *   udp_query [CLIENTS [QUERIES]]    default 8 clients of 100 queries; exit 0 when every
 *                                    answer came back and was right
 */
#include <arpa/inet.h>
#include <errno.h>
#include <magpie.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"alpha.test", "beta.test", "gamma.test", "delta.test"};
static const char *const addrs[] = {"192.0.2.1", "192.0.2.2", "198.51.100.7", "203.0.113.9"};
enum { NNAMES = 4, BATCH = 16, RETRY_MS = 200 };

typedef struct server {
    mp_task task;
    mp_udp udp;
    mp_udp_msg in[BATCH], out[BATCH];
    char inbuf[BATCH][128], outbuf[BATCH][160];
    unsigned n, sent;
} server;

static mp_poll server_poll(mp_task *t, mp_context *cx)
{
    server *s = mp_container_of(t, server, task);
    for (;;) {
        int err;
        unsigned done;
        if (s->sent < s->n) { /* answers still to send */
            mp_poll r =
                mp_udp_send_batch_poll(&s->udp, cx, s->out + s->sent, s->n - s->sent, &done, &err);
            s->sent += done;
            if (r == MP_PENDING)
                return MP_PENDING;
            s->sent = s->n; /* an error drops the rest, as UDP may */
        }
        for (unsigned i = 0; i < BATCH; i++)
            s->in[i] = (mp_udp_msg){.buf = s->inbuf[i], .len = sizeof s->inbuf[i] - 1};
        if (mp_udp_recv_batch_poll(&s->udp, cx, s->in, BATCH, &s->n, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == -EBADF) /* closed: done */
            return MP_READY;
        for (unsigned i = 0; i < s->n; i++) {
            char *q = s->inbuf[i];
            q[s->in[i].len] = 0;
            const char *answer = "NXDOMAIN";
            for (int k = 0; k < NNAMES; k++)
                if (strcmp(strchr(q, ' ') ? strchr(q, ' ') + 1 : "", names[k]) == 0)
                    answer = addrs[k];
            size_t ql = strlen(q), al = strlen(answer); /* ql < 128, al < 16: it fits */
            memcpy(s->outbuf[i], q, ql);
            s->outbuf[i][ql] = ' ';
            memcpy(s->outbuf[i] + ql + 1, answer, al);
            s->out[i] =
                (mp_udp_msg){.buf = s->outbuf[i], .len = ql + 1 + al, .addr = s->in[i].addr};
        }
        s->sent = 0;
    }
}

static const mp_task_vtable server_vt = {.poll = server_poll};

typedef struct client {
    mp_task task;
    mp_udp udp;
    mp_timer timer;
    int id, queries, done, sent_id, ok, retries;
    bool waiting;
    uint64_t deadline;
    char q[64], a[160];
} client;

static mp_poll client_poll(mp_task *t, mp_context *cx)
{
    client *c = mp_container_of(t, client, task);
    while (c->done < c->queries) {
        int err;
        if (!c->waiting) { /* (re)send the current query */
            int id = c->id * 100000 + c->done;
            int len = snprintf(c->q, sizeof c->q, "%d %s", id, names[c->done % NNAMES]);
            if (mp_udp_send_poll(&c->udp, cx, c->q, (size_t)len, NULL, &err) == MP_PENDING)
                return MP_PENDING;
            c->sent_id = id;
            c->waiting = true;
            c->deadline = mp_now_ms() + RETRY_MS;
        }
        size_t len;
        bool trunc;
        if (mp_udp_recv_poll(&c->udp, cx, c->a, sizeof c->a - 1, &len, &trunc, NULL, &err) ==
            MP_PENDING) {
            if (mp_timer_poll(&c->timer, c->deadline, cx) == MP_PENDING)
                return MP_PENDING;
            c->waiting = false; /* lost (or slow): ask again */
            c->retries++;
            continue;
        }
        if (err != 0)
            return MP_READY;
        c->a[len] = 0;
        int id;
        char name[64], addr[64];
        if (sscanf(c->a, "%d %63s %63s", &id, name, addr) != 3 || id != c->sent_id)
            continue; /* an answer to an earlier try: ignore */
        int k = c->done % NNAMES;
        c->ok += strcmp(name, names[k]) == 0 && strcmp(addr, addrs[k]) == 0;
        c->done++;
        c->waiting = false;
    }
    mp_timer_cancel(&c->timer);
    return MP_READY;
}

static const mp_task_vtable client_vt = {.poll = client_poll};

int main(int argc, char **argv)
{
    int nclients = argc > 1 ? atoi(argv[1]) : 8, queries = argc > 2 ? atoi(argv[2]) : 100;
    if (nclients < 1 || queries < 1) {
        fprintf(stderr, "usage: udp_query [CLIENTS [QUERIES]]\n");
        return 2;
    }
    mp_runtime *rt;
    if (mp_runtime_new(&rt, NULL) != 0)
        return 1;
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static server s;
    int rc = mp_udp_bind(rt, &s.udp, (struct sockaddr *)&lo, 0);
    struct sockaddr_storage srv;
    if (rc != 0 || mp_udp_local_addr(&s.udp, &srv) != 0) {
        fprintf(stderr, "bind: %s\n", mp_strerror(rc));
        return 1;
    }
    mp_task_init(&s.task, &server_vt);
    mp_spawn_joinable(rt, &s.task);
    client *c = calloc((size_t)nclients, sizeof *c);
    for (int i = 0; i < nclients; i++) {
        c[i].id = i;
        c[i].queries = queries;
        mp_timer_init(&c[i].timer, rt);
        if ((rc = mp_udp_bind(rt, &c[i].udp, (struct sockaddr *)&lo, 0)) != 0 ||
            (rc = mp_udp_connect(&c[i].udp, (struct sockaddr *)&srv)) != 0) {
            fprintf(stderr, "client %d: %s\n", i, mp_strerror(rc));
            return 1;
        }
        mp_task_init(&c[i].task, &client_vt);
        mp_spawn_joinable(rt, &c[i].task);
    }
    int ok = 0, retries = 0;
    for (int i = 0; i < nclients; i++) {
        mp_join(&c[i].task);
        ok += c[i].ok;
        retries += c[i].retries;
        mp_udp_close(&c[i].udp, NULL);
    }
    mp_udp_close(&s.udp, NULL); /* the server sees -EBADF and ends */
    mp_join(&s.task);
    mp_runtime_free(rt); /* after the close callbacks, which name the sockets */
    free(c);
    printf("%d of %d answers right, %d queries sent again\n", ok, nclients * queries, retries);
    return ok == nclients * queries ? 0 : 1;
}
