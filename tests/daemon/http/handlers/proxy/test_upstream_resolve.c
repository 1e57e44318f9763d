/* Tests for daemon/http/handlers/proxy/upstream_resolve.c and the slot changes it makes
 * (md_upstream_apply in upstream.c): the resolve_interval_ms key, the TTL rule, an address that
 * leaves draining its in-flight request while new requests go to its successor, slots reused
 * only once drained, a failed answer keeping the last set, and the resolver task on a runtime
 * following a test resolver (no DNS). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/outbuf.h"
#include "http/handlers/proxy/upstream.h"

static md_upstream_table t;

static md_upstream_conf *group(const char *interval)
{
    memset(&t, 0, sizeof t);
    char msg[256] = "";
    cr_assert_eq(md_upstream_add(&t, " app", 3, msg, sizeof msg), 0, "%s", msg);
    md_upstream_conf *u = &t.u[0];
    cr_assert_eq(md_upstream_key(u, "resolve_interval_ms", interval, msg, sizeof msg), 0, "%s",
                 msg);
    /* A name from /etc/hosts: resolved at load without DNS. */
    cr_assert_eq(md_upstream_key(u, "server", "localhost:8080", msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_upstream_check(u, msg, sizeof msg), 0, "%s", msg);
    return u;
}

static void put4(md_upstream_addrs *a, const char *ip, uint16_t port)
{
    struct sockaddr_in *s = (struct sockaddr_in *)&a->addr[a->n];
    memset(&a->addr[a->n], 0, sizeof a->addr[0]);
    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    cr_assert_eq(inet_pton(AF_INET, ip, &s->sin_addr), 1);
    a->addrlen[a->n++] = sizeof *s;
}

static bool is_ip(const md_upstream_peer *p, const char *ip)
{
    char got[INET_ADDRSTRLEN] = "";
    const struct sockaddr_in *s = (const struct sockaddr_in *)&p->conf->addr;
    return s->sin_family == AF_INET && inet_ntop(AF_INET, &s->sin_addr, got, sizeof got) &&
           strcmp(got, ip) == 0;
}

Test(upstream_resolve, key_rules_and_labels, .timeout = 5)
{
    md_upstream_conf *u = group("0");
    cr_assert_eq(u->resolve_interval_ms, 0);
    cr_assert(u->entries[0].name);
    cr_assert_str_eq(u->entries[0].host, "localhost");
    cr_assert_str_eq(u->entries[0].port, "8080");
    cr_assert(strchr(u->servers[0].label, '/') == NULL || u->nservers > 1,
              "one address without re-resolution keeps the plain label");
    u = group("30000");
    cr_assert_eq(u->resolve_interval_ms, 30000);
    cr_assert_not_null(strstr(u->servers[0].label, "localhost:8080/"), "%s", u->servers[0].label);
    char msg[256] = "";
    cr_assert_eq(md_upstream_key(u, "server", "127.0.0.1:81", msg, sizeof msg), 0);
    cr_assert_not(u->entries[u->nentries - 1].name, "an address is not re-resolved");
    cr_assert_eq(md_upstream_key(u, "resolve_interval_ms", "5", msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "set twice"), "%s", msg);
    md_upstream_add(&t, " b", 9, msg, sizeof msg);
    cr_assert_eq(md_upstream_key(&t.u[1], "resolve_interval_ms", "5", msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "0 (off) or at least 10"), "%s", msg);
    cr_assert_eq(md_upstream_key(&t.u[1], "resolve_interval_ms", "x", msg, sizeof msg), -EINVAL);
}

Test(upstream_resolve, ttl_rule_has_a_floor_and_a_ceiling, .timeout = 5)
{
    md_upstream_conf u = {.resolve_interval_ms = 30000};
    cr_assert_eq(md_upstream_resolve_delay(&u, 5000), 5000, "a TTL under the interval");
    cr_assert_eq(md_upstream_resolve_delay(&u, 0), MD_UPSTREAM_TTL_FLOOR_MS, "TTL 0: the floor");
    cr_assert_eq(md_upstream_resolve_delay(&u, 300000), 30000, "the interval caps a long TTL");
    cr_assert_eq(md_upstream_resolve_delay(&u, UINT32_MAX), 30000, "no TTL: the interval");
    u.resolve_interval_ms = 50;
    cr_assert_eq(md_upstream_resolve_delay(&u, 0), 50, "the interval is the upper bound");
}

Test(upstream_resolve, departed_address_drains_and_new_requests_go_to_the_new_one, .timeout = 5)
{
    group("1000");
    md_upstreams *us;
    cr_assert_eq(md_upstreams_new(&us, &t, NULL, NULL, 0), 0);
    md_upstream *up = &us->u[0];
    uint32_t first = up->nslots;
    md_upstream_peer *old = md_upstream_pick(up, 0, NULL, 0, 1000);
    cr_assert_not_null(old);
    char old_label[MD_UPSTREAM_LABEL_MAX];
    snprintf(old_label, sizeof old_label, "%s", old->conf->label);

    md_upstream_addrs a = {.ttl_ms = UINT32_MAX};
    put4(&a, "127.0.0.9", 8080);
    md_upstream_change ch = md_upstream_apply(up, 0, &a);
    cr_assert_eq(ch.missed, 0);
    cr_assert_eq(ch.added, 1);
    cr_assert_eq(ch.removed, first);
    cr_assert_eq(up->nlive, 1);
    cr_assert_eq(up->nslots, first + 1, "a new slot, the old ones draining");
    for (int i = 0; i < 4; i++) {
        md_upstream_peer *p = md_upstream_pick(up, 0, NULL, 0, 1000);
        cr_assert(p != NULL && is_ip(p, "127.0.0.9"));
        cr_assert_str_eq(p->conf->label, "localhost:8080/127.0.0.9");
        md_upstream_done(p, false, 1000);
    }
    /* The request in flight keeps its server's settings. */
    cr_assert_str_eq(old->conf->label, old_label);
    cr_assert_not(md_upstream_peer_up(old, 1000), "out of the set");
    md_upstream_done(old, true, 1000);

    /* The same answer again changes nothing; an empty one keeps the set. */
    ch = md_upstream_apply(up, 0, &a);
    cr_assert(ch.added == 0 && ch.removed == 0 && ch.missed == 0, "the same answer: no change");
    md_upstream_addrs none = {.ttl_ms = UINT32_MAX};
    cr_assert_eq(md_upstream_apply(up, 0, &none).missed, 0);
    cr_assert_eq(up->nlive, 1);
    cr_assert_eq(up->nslots, first + 1);

    /* An address coming back takes its old slot (and its counters) again. */
    md_upstream_addrs back = {.ttl_ms = UINT32_MAX};
    back.n = 1;
    back.addr[0] = old->conf->addr;
    back.addrlen[0] = old->conf->addrlen;
    cr_assert_eq(md_upstream_apply(up, 0, &back).missed, 0);
    cr_assert_eq(up->nslots, first + 1);
    md_upstream_peer *p = md_upstream_pick(up, 0, NULL, 0, 1000);
    cr_assert_eq(p, old);
    md_upstream_done(p, false, 1000);
    md_upstreams_free(us);
}

Test(upstream_resolve, slots_are_reused_only_once_drained, .timeout = 5)
{
    group("1000");
    md_upstreams *us;
    cr_assert_eq(md_upstreams_new(&us, &t, NULL, NULL, 0), 0);
    md_upstream *up = &us->u[0];
    md_upstream_peer *busy = md_upstream_pick(up, 0, NULL, 0, 1000);
    cr_assert_not_null(busy);
    uint32_t first = up->nslots;

    /* Fill every slot: the first addresses drain, the busy one stays busy. */
    md_upstream_addrs a = {.ttl_ms = UINT32_MAX};
    char ip[32];
    for (uint32_t i = 0; i < MD_UPSTREAM_SLOTS_MAX - first; i++) {
        snprintf(ip, sizeof ip, "127.0.1.%u", (unsigned)i + 1);
        put4(&a, ip, 8080);
    }
    cr_assert_eq(md_upstream_apply(up, 0, &a).missed, 0);
    cr_assert_eq(up->nslots, MD_UPSTREAM_SLOTS_MAX);

    /* A full answer of new addresses: every drained slot is reused, the busy one is not. */
    md_upstream_addrs b = {.ttl_ms = UINT32_MAX};
    for (uint32_t i = 0; i < MD_UPSTREAM_SLOTS_MAX; i++) {
        snprintf(ip, sizeof ip, "127.0.2.%u", (unsigned)i + 1);
        put4(&b, ip, 8080);
    }
    cr_assert_eq(md_upstream_apply(up, 0, &b).missed, 1, "one address waits for the busy slot");
    cr_assert_eq(up->nlive, MD_UPSTREAM_SLOTS_MAX - 1);
    cr_assert_not(is_ip(busy, "127.0.2.32"));
    cr_assert_eq(busy->live, false);
    char label[MD_UPSTREAM_LABEL_MAX];
    snprintf(label, sizeof label, "%s", busy->conf->label);
    cr_assert_null(strstr(label, "127.0.2."), "the busy slot kept its server: %s", label);

    /* Drained: the next round gives it the waiting address. */
    md_upstream_done(busy, false, 1000);
    cr_assert_eq(md_upstream_apply(up, 0, &b).missed, 0);
    cr_assert_eq(up->nlive, MD_UPSTREAM_SLOTS_MAX);
    cr_assert(busy->live);
    cr_assert_not_null(strstr(busy->conf->label, "127.0.2."), "%s", busy->conf->label);
    md_upstreams_free(us);
}

/* --- The resolver task, on a runtime, with a test resolver ------------------------------- */

static pthread_mutex_t answer_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *answer_ip; /* guarded by answer_mu: NULL answers a failure */
static unsigned asked;        /* guarded by answer_mu */

/* On a blocking thread: no assertions there (Criterion's are the test thread's); a wrong
 * name is a failed lookup, which the test sees as the address never changing. */
static int test_resolver(const char *host, const char *port, md_upstream_addrs *out)
{
    if (strcmp(host, "localhost") != 0)
        return -EINVAL;
    pthread_mutex_lock(&answer_mu);
    const char *ip = answer_ip;
    asked++;
    pthread_mutex_unlock(&answer_mu);
    if (ip == NULL)
        return -EAGAIN;
    struct sockaddr_in *s = (struct sockaddr_in *)&out->addr[0];
    memset(&out->addr[0], 0, sizeof out->addr[0]);
    s->sin_family = AF_INET;
    s->sin_port = htons((uint16_t)atoi(port));
    if (inet_pton(AF_INET, ip, &s->sin_addr) != 1)
        return -EINVAL;
    out->addrlen[0] = sizeof *s;
    out->n = 1;
    out->ttl_ms = 0; /* the floor, capped by the 10 ms interval */
    return 0;
}

static void answer(const char *ip)
{
    pthread_mutex_lock(&answer_mu);
    answer_ip = ip;
    asked = 0;
    pthread_mutex_unlock(&answer_mu);
}

static unsigned asked_since(void)
{
    pthread_mutex_lock(&answer_mu);
    unsigned n = asked;
    pthread_mutex_unlock(&answer_mu);
    return n;
}

static void nap(void)
{
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Picks until the group answers with ip (the resolver's next round), bounded by the test's
 * timeout. */
static void wait_for(md_upstream *up, const char *ip)
{
    for (;;) {
        md_upstream_peer *p = md_upstream_pick(up, 0, NULL, 0, mp_now_ms());
        bool got = p != NULL && is_ip(p, ip);
        if (p != NULL)
            md_upstream_done(p, false, mp_now_ms());
        if (got)
            return;
        nap();
    }
}

Test(upstream_resolve, task_follows_the_answer_and_keeps_the_last_on_failure, .timeout = 20)
{
    md_upstream_resolve_hook = test_resolver;
    group("10");
    mp_runtime *rt;
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cr_assert_eq(mp_runtime_new(&rt, &cfg), 0);
    answer("127.0.0.7");
    md_upstreams *us;
    cr_assert_eq(md_upstreams_new(&us, &t, rt, NULL, 0), 0);
    md_upstream *up = &us->u[0];
    wait_for(up, "127.0.0.7");

    /* A failing resolver: the last addresses stay, the failures are counted. */
    answer(NULL);
    while (asked_since() < 3)
        nap();
    md_upstream_peer *p = md_upstream_pick(up, 0, NULL, 0, mp_now_ms());
    cr_assert(p != NULL && is_ip(p, "127.0.0.7"), "a failed answer keeps the set");
    md_upstream_done(p, false, mp_now_ms());
    cr_assert_geq(atomic_load(&up->n->resolve_failures), 2);

    answer("127.0.0.8");
    wait_for(up, "127.0.0.8");
    cr_assert_geq(atomic_load(&up->n->resolutions), 2);

    md_outbuf out;
    md_outbuf_init(&out);
    cr_assert_eq(md_upstreams_metrics_text(us, &out), 0);
    const char *text = out.data; /* NUL-terminated below */
    cr_assert_not_null(text);
    char *copy = strndup(text, out.len);
    cr_assert_not_null(strstr(copy, "magpied_upstream_addresses{upstream=\"app\"} 1\n"), "%s",
                       copy);
    cr_assert_not_null(strstr(copy, "magpied_upstream_resolve_failures_total{upstream=\"app\"}"));
    cr_assert_not_null(strstr(copy, "server=\"localhost:8080/127.0.0.8\""));
    cr_assert_null(strstr(copy, "server=\"localhost:8080/127.0.0.7\""), "a departed address "
                                                                        "leaves the exposition");
    free(copy);
    md_outbuf_free(&out);

    md_upstreams_free(us); /* stops the task, a job in flight included */
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    md_upstream_resolve_hook = NULL;
}

/* --- resolve_file ------------------------------------------------------------------------ */

Test(upstream_resolve, resolve_file_is_a_hosts_file, .timeout = 5)
{
    char path[] = "/tmp/magpied-hosts-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *text = "# comment\n127.0.0.5 other svc.test # an alias\n\n"
                       "not-an-address svc.test\n::1 SVC.TEST\n127.0.0.6\tsvc.test\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);

    md_upstream_addrs a;
    cr_assert_eq(md_upstream_resolve_file(path, "svc.test", "8080", &a), 0);
    cr_assert_eq(a.n, 3, "in the file's order, names without case, bad lines skipped");
    cr_assert_eq(a.ttl_ms, UINT32_MAX);
    md_upstream_server_conf s = {.addr = a.addr[0]};
    md_upstream_peer p = {.conf = &s};
    cr_assert(is_ip(&p, "127.0.0.5"));
    cr_assert_eq(ntohs(((struct sockaddr_in *)&a.addr[0])->sin_port), 8080);
    cr_assert_eq(a.addr[1].ss_family, AF_INET6);
    cr_assert_eq(md_upstream_resolve_file(path, "nope.test", "80", &a), -ENOENT);
    cr_assert_eq(md_upstream_resolve_file("/nonexistent/hosts", "svc.test", "80", &a), -ENOENT);

    /* As the key: before the servers, readable; the servers come from it. */
    memset(&t, 0, sizeof t);
    char msg[256] = "";
    cr_assert_eq(md_upstream_add(&t, " app", 3, msg, sizeof msg), 0);
    md_upstream_conf *u = &t.u[0];
    cr_assert_eq(md_upstream_key(u, "resolve_file", "/nonexistent/hosts", msg, sizeof msg),
                 -EINVAL);
    cr_assert_not_null(strstr(msg, "cannot read"), "%s", msg);
    memset(&t, 0, sizeof t); /* a refused key ends the file's reading: start again */
    cr_assert_eq(md_upstream_add(&t, " app", 3, msg, sizeof msg), 0);
    cr_assert_eq(md_upstream_key(u, "resolve_file", path, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_upstream_key(u, "server", "svc.test:81 weight=3", msg, sizeof msg), 0, "%s",
                 msg);
    cr_assert_eq(u->nservers, 3);
    cr_assert_str_eq(u->servers[0].label, "svc.test:81/127.0.0.5");
    cr_assert_eq(u->servers[2].weight, 3);
    cr_assert(u->entries[0].name);
    cr_assert_eq(md_upstream_key(u, "server", "gone.test:81", msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "not there"), "%s", msg);
    cr_assert_eq(md_upstream_key(u, "server", "127.0.0.1:82", msg, sizeof msg), 0,
                 "an address needs no lookup");

    memset(&t, 0, sizeof t);
    cr_assert_eq(md_upstream_add(&t, " app", 3, msg, sizeof msg), 0);
    u = &t.u[0];
    cr_assert_eq(md_upstream_key(u, "server", "127.0.0.1:82", msg, sizeof msg), 0);
    cr_assert_eq(md_upstream_key(u, "resolve_file", path, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "before the server keys"), "%s", msg);
    unlink(path);
}
