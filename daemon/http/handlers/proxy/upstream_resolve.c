/* Re-resolution of the upstream servers' DNS names while running (resolve_interval_ms), so a
 * group follows a changing service (a Kubernetes headless service, a DNS-based registry)
 * without a reload. One task per md_upstreams (a generation's groups), started only when a
 * group re-resolves: when a group is due it hands the lookups of its names to the runtime's
 * blocking pool (getaddrinfo and res_query block; never on the loop nor a worker), awaits the
 * job, and applies each name's answer under the group's mutex (md_upstream_apply: departed
 * addresses drain, new ones take a slot). An answer that fails or has no address keeps the
 * last good set: a DNS outage never empties a group. The next round of a group is
 * md_upstream_resolve_delay() after this one: the answer's TTL, bounded by the floor below and
 * by resolve_interval_ms above.
 *
 * Lifetime: as the health task's (upstream_health.c), the task holds a reference on the
 * md_upstreams, given up in its release. The job may outlive the task (a lookup cannot be
 * interrupted), so it is counted apart:
 *
 *   resolver task                        blocking thread
 *     spawn job (job.refs = 2)              poll: look every name up, fill job->out
 *     join_poll ... READY: read job->out    release: job_unref
 *     job_unref                              `-- the last unref frees the job
 *   or, cancelled first: cancel(job), detach(job), job_unref
 *
 * Without the count the task's cancel would free the job a blocking thread still writes, or
 * the job's release would free what the task is about to read.
 */
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "http/handlers/proxy/upstream.h"

md_upstream_resolver md_upstream_resolve_hook;

uint32_t md_upstream_resolve_delay(const md_upstream_conf *u, uint32_t ttl_ms)
{
    uint32_t d = ttl_ms > MD_UPSTREAM_TTL_FLOOR_MS ? ttl_ms : MD_UPSTREAM_TTL_FLOOR_MS;
    return d < u->resolve_interval_ms ? d : u->resolve_interval_ms;
}

/* The smallest TTL of the answer's records of type (ns_t_a, ns_t_aaaa), in ms, or UINT32_MAX.
 * A resolver state of its own, one try of one second per server: a DNS server that does not
 * answer costs the blocking thread a few seconds, not resolv.conf's default of a minute. */
static uint32_t answer_ttl_ms(const char *host, int type)
{
    struct __res_state st;
    memset(&st, 0, sizeof st);
    if (res_ninit(&st) != 0)
        return UINT32_MAX;
    st.retrans = 1;
    st.retry = 1;
    unsigned char buf[4096];
    int len = res_nquery(&st, host, ns_c_in, type, buf, sizeof buf);
    uint32_t ttl = UINT32_MAX;
    ns_msg msg;
    if (len > 0 && ns_initparse(buf, len, &msg) == 0) {
        int n = ns_msg_count(msg, ns_s_an);
        for (int i = 0; i < n; i++) {
            ns_rr rr;
            if (ns_parserr(&msg, ns_s_an, i, &rr) == 0 && (int)ns_rr_type(rr) == type) {
                uint32_t t = ns_rr_ttl(rr);
                uint32_t ms = t > UINT32_MAX / 1000 ? UINT32_MAX - 1 : t * 1000;
                if (ms < ttl)
                    ttl = ms;
            }
        }
    }
    res_nclose(&st);
    return ttl;
}

int md_upstream_resolve_system(const char *host, const char *port, md_upstream_addrs *out)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG};
    struct addrinfo *res = NULL;
    int rc = mp_resolve_blocking(host, port, &hints, &res);
    if (rc != 0)
        return rc;
    out->n = 0;
    bool v4 = false, v6 = false;
    for (struct addrinfo *ai = res; ai != NULL && out->n < MD_UPSTREAM_SLOTS_MAX;
         ai = ai->ai_next) {
        if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
            ai->ai_addrlen > sizeof out->addr[0])
            continue;
        memset(&out->addr[out->n], 0, sizeof out->addr[0]);
        memcpy(&out->addr[out->n], ai->ai_addr, ai->ai_addrlen);
        out->addrlen[out->n++] = (uint32_t)ai->ai_addrlen;
        v4 = v4 || ai->ai_family == AF_INET;
        v6 = v6 || ai->ai_family == AF_INET6;
    }
    freeaddrinfo(res);
    if (out->n == 0)
        return -ENOENT;
    /* getaddrinfo gives no TTL: ask DNS for it. A name it does not know (/etc/hosts) has
     * none, and the interval alone sets the pace. */
    out->ttl_ms = UINT32_MAX;
    uint32_t t;
    if (v4 && (t = answer_ttl_ms(host, ns_t_a)) < out->ttl_ms)
        out->ttl_ms = t;
    if (v6 && (t = answer_ttl_ms(host, ns_t_aaaa)) < out->ttl_ms)
        out->ttl_ms = t;
    return 0;
}

int md_upstream_resolve_file(const char *path, const char *host, const char *port,
                             md_upstream_addrs *out)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    out->n = 0;
    out->ttl_ms = UINT32_MAX;
    uint16_t portno = (uint16_t)atoi(port);
    char line[1024];
    while (out->n < MD_UPSTREAM_SLOTS_MAX && fgets(line, sizeof line, f) != NULL) {
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        char *save = NULL, *ip = strtok_r(line, " \t\r\n", &save);
        if (ip == NULL)
            continue;
        bool match = false;
        for (char *n; !match && (n = strtok_r(NULL, " \t\r\n", &save)) != NULL;)
            match = strcasecmp(n, host) == 0;
        if (!match)
            continue;
        struct sockaddr_storage *ss = &out->addr[out->n];
        memset(ss, 0, sizeof *ss);
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
            s4->sin_family = AF_INET;
            s4->sin_port = htons(portno);
            out->addrlen[out->n++] = sizeof *s4;
        } else if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
            s6->sin6_family = AF_INET6;
            s6->sin6_port = htons(portno);
            out->addrlen[out->n++] = sizeof *s6;
        } /* else: not an address, a line to skip as the system's resolver would */
    }
    fclose(f);
    return out->n != 0 ? 0 : -ENOENT;
}

/* The lookups of one group's names, on a blocking thread. */
typedef struct job {
    mp_task task;
    _Atomic int refs; /* the resolver task's and the job's release */
    uint32_t n;
    char file[MD_UPSTREAM_TLS_PATH_MAX]; /* the group's resolve_file, or "" */
    struct {
        char host[MD_UPSTREAM_LABEL_MAX], port[6];
        uint32_t entry;
        int rc;
        md_upstream_addrs out;
    } name[MD_UPSTREAM_SERVERS_MAX];
} job;

static void job_unref(job *j)
{
    /* Acq_rel: the blocking thread's writes of out come before the task's reads (the release
     * half of the job's unref pairs with the acquire half of the task's, or the other way
     * round), and both sides' last use before the free. The join orders them as well; the
     * count is what orders the free. */
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1)
        free(j);
}

static mp_poll job_poll(mp_task *task, mp_context *cx)
{
    (void)cx;
    job *j = mp_container_of(task, job, task);
    md_upstream_resolver look =
        md_upstream_resolve_hook != NULL ? md_upstream_resolve_hook : md_upstream_resolve_system;
    for (uint32_t i = 0; i < j->n; i++) {
        j->name[i].out.n = 0;
        j->name[i].out.ttl_ms = UINT32_MAX;
        if (md_upstream_resolve_hook == NULL && j->file[0] != '\0')
            j->name[i].rc = md_upstream_resolve_file(j->file, j->name[i].host, j->name[i].port,
                                                     &j->name[i].out);
        else
            j->name[i].rc = look(j->name[i].host, j->name[i].port, &j->name[i].out);
        if (j->name[i].rc == 0 && j->name[i].out.n == 0)
            j->name[i].rc = -ENOENT;
    }
    return MP_READY;
}

static void job_release(mp_task *task)
{
    job_unref(mp_container_of(task, job, task));
}

static const mp_task_vtable job_vt = {.poll = job_poll, .release = job_release};

typedef struct md_resolver {
    mp_task task;
    md_upstreams *us;
    mp_timer timer;
    job *job;       /* the lookups in flight, or NULL */
    uint32_t group; /* whose */
    uint64_t next_ms[MD_UPSTREAMS_MAX];
} md_resolver;

static bool resolves(const md_upstream_conf *u)
{
    if (u->resolve_interval_ms == 0)
        return false;
    for (uint32_t e = 0; e < u->nentries; e++)
        if (u->entries[e].name)
            return true;
    return false;
}

/* The job's answers for group g: applied, logged on a change of success, counted. The next
 * round after the shortest delay its names ask for. */
static void apply_job(md_resolver *r, job *j, uint64_t now)
{
    md_upstream *up = &r->us->u[r->group];
    const md_upstream_conf *u = up->conf;
    uint32_t delay = u->resolve_interval_ms;
    for (uint32_t i = 0; i < j->n; i++) {
        uint32_t e = j->name[i].entry;
        const char *label = u->entries[e].written;
        /* Relaxed: counters for /metrics (upstream.h). */
        if (j->name[i].rc != 0) {
            atomic_fetch_add_explicit(&up->n->resolve_failures, 1, memory_order_relaxed);
            if (!up->resolve_failing[e])
                md_log(MD_LOG_ERROR,
                       "upstream %s server %s: cannot resolve: %s; keeping its "
                       "last addresses",
                       u->name, label, mp_strerror(j->name[i].rc));
            up->resolve_failing[e] = true;
            continue;
        }
        atomic_fetch_add_explicit(&up->n->resolutions, 1, memory_order_relaxed);
        if (up->resolve_failing[e])
            md_log(MD_LOG_INFO, "upstream %s server %s: resolves again", u->name, label);
        up->resolve_failing[e] = false;
        md_upstream_change ch = md_upstream_apply(up, e, &j->name[i].out);
        if (ch.added != 0 || ch.removed != 0)
            md_log(MD_LOG_INFO, "upstream %s server %s: %u addresses in, %u out (draining)",
                   u->name, label, (unsigned)ch.added, (unsigned)ch.removed);
        bool was_waiting = up->resolve_waiting[e];
        up->resolve_waiting[e] = ch.missed != 0;
        if (ch.missed != 0 && !was_waiting) /* once per change, not every round */
            md_log(MD_LOG_ERROR,
                   "upstream %s server %s: %u new addresses wait for a slot (%d "
                   "per upstream, old ones still draining)",
                   u->name, label, (unsigned)ch.missed, MD_UPSTREAM_SLOTS_MAX);
        uint32_t d = md_upstream_resolve_delay(u, j->name[i].out.ttl_ms);
        if (d < delay)
            delay = d;
    }
    r->next_ms[r->group] = now + delay;
}

/* A job for group g's names. 0 or a negative errno (the round is skipped). */
static int start_job(md_resolver *r, uint32_t g)
{
    const md_upstream_conf *u = r->us->u[g].conf;
    job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return -ENOMEM;
    for (uint32_t e = 0; e < u->nentries; e++) {
        if (!u->entries[e].name)
            continue;
        snprintf(j->name[j->n].host, sizeof j->name[j->n].host, "%s", u->entries[e].host);
        snprintf(j->name[j->n].port, sizeof j->name[j->n].port, "%s", u->entries[e].port);
        j->name[j->n++].entry = e;
    }
    snprintf(j->file, sizeof j->file, "%s", u->resolve_file);
    atomic_init(&j->refs, 2);
    mp_task_init(&j->task, &job_vt);
    mp_task_set_name(&j->task, "upstream resolve");
    int rc = mp_spawn_blocking_task(r->us->rt, &j->task, true);
    if (rc != 0) {
        free(j);
        return rc;
    }
    r->job = j;
    r->group = g;
    return 0;
}

static mp_poll resolver_poll(mp_task *task, mp_context *cx)
{
    md_resolver *r = mp_container_of(task, md_resolver, task);
    for (;;) {
        uint64_t now = mp_now_ms();
        if (r->job != NULL) {
            int res;
            if (mp_join_poll(&r->job->task, cx, &res) == MP_PENDING)
                return MP_PENDING;
            if (res == 0)
                apply_job(r, r->job, mp_now_ms());
            else
                r->next_ms[r->group] = now + r->us->u[r->group].conf->resolve_interval_ms;
            job_unref(r->job);
            r->job = NULL;
            continue;
        }
        uint64_t wake = UINT64_MAX;
        bool started = false;
        for (uint32_t g = 0; g < r->us->conf.n && !started; g++) {
            const md_upstream_conf *u = r->us->u[g].conf;
            if (!resolves(u))
                continue;
            if (r->next_ms[g] <= now) {
                if (start_job(r, g) == 0) {
                    started = true;
                } else {
                    r->next_ms[g] = now + u->resolve_interval_ms; /* try again then */
                    md_log(MD_LOG_ERROR, "upstream %s: cannot start a resolution", u->name);
                }
            }
            if (!started && r->next_ms[g] < wake)
                wake = r->next_ms[g];
        }
        if (started)
            continue;
        if (mp_timer_poll(&r->timer, wake, cx) == MP_PENDING)
            return MP_PENDING;
    }
}

static void resolver_cancel(mp_task *task)
{
    md_resolver *r = mp_container_of(task, md_resolver, task);
    mp_timer_cancel(&r->timer);
    if (r->job != NULL) {
        mp_task_cancel(&r->job->task); /* one not started never runs; one running finishes */
        mp_detach(&r->job->task);
        job_unref(r->job);
        r->job = NULL;
    }
}

static void resolver_release(mp_task *task)
{
    md_resolver *r = mp_container_of(task, md_resolver, task);
    md_upstreams_unref(r->us);
    free(r);
}

static const mp_task_vtable resolver_vt = {
    .poll = resolver_poll, .cancel = resolver_cancel, .release = resolver_release};

int md_upstream_resolve_start(md_upstreams *us)
{
    bool any = false;
    for (uint32_t g = 0; g < us->conf.n; g++)
        any = any || resolves(us->u[g].conf);
    if (!any)
        return 0;
    md_resolver *r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->us = us;
    mp_timer_init(&r->timer, us->rt);
    /* The names were resolved as the configuration was read: the first round is one delay
     * later (the load gave no TTL). */
    uint64_t now = mp_now_ms();
    for (uint32_t g = 0; g < us->conf.n; g++)
        r->next_ms[g] = now + us->u[g].conf->resolve_interval_ms;
    mp_task_init(&r->task, &resolver_vt);
    mp_task_set_name(&r->task, "upstream resolver");
    int rc = md_upstreams_spawn(us, &r->task);
    if (rc != 0) {
        free(r);
        return rc;
    }
    us->resolver = r;
    return 0;
}

void md_upstream_resolve_stop(md_upstreams *us)
{
    md_resolver *r = us->resolver;
    if (r == NULL)
        return;
    us->resolver = NULL;
    md_upstreams_task_stop(&r->task);
}
