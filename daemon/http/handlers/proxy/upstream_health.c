/* Active health checks, and the idle pools' sweep: one task per md_upstreams (a generation's
 * groups). Every health_interval_ms it checks each server of the groups with a health_path, one
 * after the other: connect within connect_timeout_ms, send "GET path HTTP/1.1", and read the
 * status line within read_timeout_ms; 2xx and 3xx are good, anything else (a refusal, a
 * timeout, 5xx, garbage) bad; health_rise good results in a row mark a server up, health_fall
 * bad ones down (md_upstream_health_result). Each round also closes pooled connections idle
 * past keepalive_timeout_ms, so a quiet pool does not keep them until the next request.
 *
 * Lifetime: the task and the generation both hold the md_upstreams. md_upstreams_free() (the
 * generation's end, on the loop's thread) cancels the task and gives up its own hold; the
 * task's release gives up the other, and whichever comes last frees the state:
 *
 *   loop: md_upstreams_free()          worker: the task
 *     cancel(task), detach(task)          cancel cb: close its socket, cancel its timer
 *     unref(us)  --.                      release cb: unref(us)
 *                  `-- the last unref (acq_rel, so each side's writes come before the
 *                      free) closes the pools and frees us
 *
 * Without the count the loop would free the groups while a check still reads them, or would
 * have to wait for the task from the loop's thread, which the task's socket close needs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/tls_stream.h"
#include "http/handlers/proxy/upstream.h"

int md_upstream_health_start(md_upstreams *us);
void md_upstream_health_stop(md_upstreams *us);

enum { H_WAIT, H_CONNECT, H_HANDSHAKE, H_SEND, H_READ };

typedef struct md_health {
    mp_task task;
    md_upstreams *us;
    mp_timer timer;
    uint8_t state;
    uint32_t group, server; /* the check in progress (a slot index) */
    bool pinned;            /* the slot being checked is held (md_upstream_pin) */
    uint64_t deadline_ms;
    uint64_t next_ms[MD_UPSTREAMS_MAX]; /* when each group's next round starts */
    md_upstream_conn *conn;             /* over TLS too with tls = on (the group's context) */
    char req[MD_UPSTREAM_PATH_MAX + MD_UPSTREAM_LABEL_MAX + 96];
    size_t req_len;
    char resp[16]; /* "HTTP/1.1 200" */
    size_t resp_len;
} md_health;

static void close_conn(md_health *h)
{
    if (h->conn != NULL)
        md_upstream_conn_close(h->conn);
    h->conn = NULL;
}

/* The check of (group, server) ended: record it, and go on to the next server. */
static void checked(md_health *h, bool good, const char *why)
{
    md_upstream *up = &h->us->u[h->group];
    md_upstream_peer *p = &up->peers[h->server];
    bool was = md_upstream_peer_up(p, mp_now_ms());
    md_upstream_health_result(p, good);
    bool now = md_upstream_peer_up(p, mp_now_ms());
    if (was != now)
        md_log(now ? MD_LOG_INFO : MD_LOG_ERROR, "upstream %s server %s: health check %s: %s",
               up->conf->name, p->conf->label, good ? "passed" : why, now ? "up" : "down");
    close_conn(h);
    md_upstream_unpin(p);
    h->pinned = false;
    h->server++;
    h->state = H_WAIT;
}

/* The next check due: (group, slot) with h->server < MD_UPSTREAM_SLOTS_MAX, or false; a slot
 * not live is skipped when it is pinned (re-resolution changes the set meanwhile). */
static bool next_check(md_health *h, uint64_t now, uint64_t *wake)
{
    *wake = UINT64_MAX;
    for (uint32_t g = 0; g < h->us->conf.n; g++) {
        const md_upstream_conf *c = h->us->u[g].conf;
        if (c->health_path[0] == '\0')
            continue;
        if (h->group == g && h->server < MD_UPSTREAM_SLOTS_MAX && h->next_ms[g] <= now)
            return true;
        if (h->group == g && h->server >= MD_UPSTREAM_SLOTS_MAX && h->next_ms[g] <= now) {
            h->next_ms[g] = now + c->health_interval_ms; /* round done */
            h->server = 0;
        }
        if (h->next_ms[g] <= now) {
            h->group = g;
            h->server = 0;
            return true;
        }
        if (h->next_ms[g] < *wake)
            *wake = h->next_ms[g];
    }
    return false;
}

static mp_poll health_poll(mp_task *task, mp_context *cx)
{
    md_health *h = mp_container_of(task, md_health, task);
    for (;;) {
        uint64_t now = mp_now_ms();
        switch (h->state) {
        case H_WAIT: {
            uint64_t wake;
            if (!next_check(h, now, &wake)) {
                /* between rounds: sweep the pools, then sleep until the next round (or a
                 * second, for the sweep, when no group checks) */
                for (uint32_t g = 0; g < h->us->conf.n; g++)
                    for (uint32_t s = 0; s < MD_UPSTREAM_SLOTS_MAX; s++)
                        md_upstream_pool_sweep(&h->us->u[g].peers[s], now);
                if (wake > now + 1000)
                    wake = now + 1000;
                if (mp_timer_poll(&h->timer, wake, cx) == MP_PENDING)
                    return MP_PENDING;
                break;
            }
            md_upstream *up = &h->us->u[h->group];
            md_upstream_peer *p = &up->peers[h->server];
            if (!md_upstream_pin(p)) {
                h->server++; /* not in the set now */
                break;
            }
            h->pinned = true;
            if (md_upstream_conn_open(p, &h->conn) != 0) {
                h->conn = NULL;
                checked(h, false, "cannot connect");
                break;
            }
            int n = snprintf(h->req, sizeof h->req,
                             "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: magpied-health\r\n"
                             "Connection: close\r\n\r\n",
                             up->conf->health_path, p->conf->host);
            h->req_len = (size_t)n;
            h->resp_len = 0;
            h->deadline_ms = now + up->conf->connect_timeout_ms;
            h->state = H_CONNECT;
            break;
        }
        case H_CONNECT: {
            int err;
            if (mp_tcp_connect_poll(&h->conn->tcp, cx, &h->timer, h->deadline_ms, &err) ==
                MP_PENDING)
                return MP_PENDING;
            if (err != 0) {
                checked(h, false, err == -ETIMEDOUT ? "connect timeout" : "connect failed");
                break;
            }
            if (h->us->u[h->group].tls_ctx != NULL) {
                if (md_upstream_tls_start(h->conn) != 0) {
                    checked(h, false, "out of memory");
                    break;
                }
                h->state = H_HANDSHAKE;
                h->deadline_ms = now + h->us->u[h->group].conf->connect_timeout_ms;
                break;
            }
            h->state = H_SEND;
            h->deadline_ms = now + h->us->u[h->group].conf->read_timeout_ms;
            break;
        }
        case H_HANDSHAKE: {
            int err;
            if (md_tls_stream_handshake(h->conn->tls, cx, &err) == MP_PENDING) {
                if (mp_timer_poll(&h->timer, h->deadline_ms, cx) == MP_PENDING)
                    return MP_PENDING;
                checked(h, false, "TLS handshake timeout");
                break;
            }
            if (err != 0) {
                char why[256], line[300];
                snprintf(line, sizeof line, "TLS handshake failed: %s",
                         md_upstream_tls_why(h->conn, why, sizeof why));
                checked(h, false, line);
                break;
            }
            h->state = H_SEND;
            h->deadline_ms = now + h->us->u[h->group].conf->read_timeout_ms;
            break;
        }
        case H_SEND: {
            int err;
            if (md_upstream_conn_write(h->conn, cx, h->req, h->req_len, &err) == MP_PENDING) {
                if (mp_timer_poll(&h->timer, h->deadline_ms, cx) == MP_PENDING)
                    return MP_PENDING;
                err = -ETIMEDOUT;
            }
            if (err != 0) {
                checked(h, false, "send failed");
                break;
            }
            h->state = H_READ;
            break;
        }
        case H_READ: {
            const char *data;
            size_t len;
            int err;
            if (md_upstream_conn_read(h->conn, cx, &data, &len, &err) == MP_PENDING) {
                if (mp_timer_poll(&h->timer, h->deadline_ms, cx) == MP_PENDING)
                    return MP_PENDING;
                checked(h, false, "timeout");
                break;
            }
            size_t take = sizeof h->resp - 1 - h->resp_len;
            if (take > len)
                take = len;
            memcpy(h->resp + h->resp_len, data, take);
            h->resp_len += take;
            md_upstream_conn_consume(h->conn, len);
            if (h->resp_len >= 12 || len == 0) {
                h->resp[h->resp_len] = '\0';
                unsigned code = 0;
                bool good = h->resp_len >= 12 && strncmp(h->resp, "HTTP/1.", 7) == 0 &&
                            sscanf(h->resp + 9, "%3u", &code) == 1 && code >= 200 && code < 400;
                checked(h, good, len == 0 && h->resp_len < 12 ? "closed" : "bad status");
            }
            break;
        }
        }
    }
}

static void health_cancel(mp_task *task)
{
    md_health *h = mp_container_of(task, md_health, task);
    mp_timer_cancel(&h->timer);
    close_conn(h);
    if (h->pinned)
        md_upstream_unpin(&h->us->u[h->group].peers[h->server]);
    h->pinned = false;
}

static void health_release(mp_task *task)
{
    md_health *h = mp_container_of(task, md_health, task);
    md_upstreams_unref(h->us);
    free(h);
}

static const mp_task_vtable health_vt = {
    .poll = health_poll, .cancel = health_cancel, .release = health_release};

int md_upstream_health_start(md_upstreams *us)
{
    md_health *h = calloc(1, sizeof *h);
    if (h == NULL)
        return -ENOMEM;
    h->us = us;
    mp_timer_init(&h->timer, us->rt);
    uint64_t now = mp_now_ms();
    for (uint32_t g = 0; g < us->conf.n; g++)
        h->next_ms[g] = now; /* a first round at once */
    mp_task_init(&h->task, &health_vt);
    mp_task_set_name(&h->task, "upstream health");
    int rc = md_upstreams_spawn(us, &h->task);
    if (rc != 0) {
        free(h);
        return rc;
    }
    us->health = h;
    return 0;
}

void md_upstream_health_stop(md_upstreams *us)
{
    md_health *h = us->health;
    if (h == NULL)
        return;
    us->health = NULL;
    md_upstreams_task_stop(&h->task);
}
