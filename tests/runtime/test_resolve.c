/* Tests of runtime/src/resolve.c: name resolution on the blocking pool. Only names the machine
 * answers itself (localhost, numeric addresses, /etc/hosts), never the network. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netdb.h>

#include "internal.h"
#include "test_util.h"

typedef struct lookup {
    mp_task task;
    mp_resolve r;
    mp_timer timer;
    const char *host, *service;
    uint64_t timeout_ms, deadline;
    _Atomic bool started; /* read by the test's thread */
    struct addrinfo *res;
    int err;
} lookup;

static mp_poll lookup_poll(mp_task *t, mp_context *cx)
{
    lookup *l = mp_container_of(t, lookup, task);
    if (!l->started) {
        l->err = mp_resolve_start(mp_runtime_current(), &l->r, l->host, l->service, NULL);
        if (l->err)
            return MP_READY;
        l->started = true;
        mp_timer_init(&l->timer, mp_runtime_current());
        l->deadline = mp_now_ms() + l->timeout_ms;
    }
    return mp_resolve_poll(&l->r, cx, l->timeout_ms ? &l->timer : NULL, l->deadline, &l->res,
                           &l->err);
}

static void lookup_cancel(mp_task *t)
{
    lookup *l = mp_container_of(t, lookup, task);
    mp_resolve_cancel(&l->r);
    mp_timer_cancel(&l->timer);
}

static const mp_task_vtable lookup_vt = {.poll = lookup_poll, .cancel = lookup_cancel};

static int run_lookup(mp_runtime *rt, lookup *l)
{
    mp_task_init(&l->task, &lookup_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &l->task), 0);
    return mp_join(&l->task);
}

Test(resolve, localhost_gives_every_loopback_address, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    lookup l = {.host = "localhost", .service = "80", .timeout_ms = 10000};
    cr_assert_eq(run_lookup(rt, &l), 0);
    cr_assert_eq(l.err, 0, "err %d", l.err);
    cr_assert_not_null(l.res);
    int n = 0;
    for (struct addrinfo *ai = l.res; ai; ai = ai->ai_next, n++) {
        if (ai->ai_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)ai->ai_addr;
            cr_assert_eq(ntohl(a->sin_addr.s_addr) >> 24, 127);
            cr_assert_eq(ntohs(a->sin_port), 80);
        } else {
            cr_assert_eq(ai->ai_family, AF_INET6);
        }
        cr_assert_eq(ai->ai_socktype, SOCK_STREAM);
    }
    cr_assert_geq(n, 1);
    freeaddrinfo(l.res);
    /* The same handle serves again after MP_READY. */
    atomic_store(&l.started, false);
    l.host = "127.0.0.1";
    l.service = "http";
    cr_assert_eq(run_lookup(rt, &l), 0);
    cr_assert_eq(l.err, 0);
    cr_assert_eq(l.res->ai_family, AF_INET);
    cr_assert_eq(ntohs(((struct sockaddr_in *)l.res->ai_addr)->sin_port), 80);
    freeaddrinfo(l.res);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(resolve, failures_have_codes_of_their_own, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    /* A name under .invalid never exists (RFC 6761); resolving it may still ask a server, so
     * the outcome is one of the "no such name" or "could not ask" errors. */
    lookup l = {.host = "no-such-host.invalid", .timeout_ms = 20000};
    cr_assert_eq(run_lookup(rt, &l), 0);
    cr_assert(l.err == MP_ERESOLVE_NOTFOUND || l.err == MP_ERESOLVE_NOFAMILY ||
                  l.err == MP_ERESOLVE_AGAIN || l.err == MP_ERESOLVE_FAIL,
              "err %d (%s)", l.err, mp_strerror(l.err));
    cr_assert_null(l.res);
    lookup bad = {.host = "127.0.0.1", .service = "no-such-service-name"};
    cr_assert_eq(run_lookup(rt, &bad), 0);
    cr_assert_eq(bad.err, -EINVAL, "err %d", bad.err);
    mp_resolve r = {0};
    cr_assert_eq(mp_resolve_start(rt, &r, NULL, NULL, NULL), -EINVAL);
    cr_assert_eq(mp_resolve_start(NULL, &r, "localhost", NULL, NULL), -EINVAL);
    cr_assert_eq(mp_resolve_start(rt, &r, "localhost", NULL, NULL), 0);
    cr_assert_eq(mp_resolve_start(rt, &r, "localhost", NULL, NULL), -EALREADY);
    mp_resolve_cancel(&r);
    mp_resolve_cancel(&r); /* idle: no-op */
    cr_assert_eq(mp__resolve_error(EAI_NONAME, 0), MP_ERESOLVE_NOTFOUND);
    cr_assert_eq(mp__resolve_error(EAI_NODATA, 0), MP_ERESOLVE_NOFAMILY);
    cr_assert_eq(mp__resolve_error(EAI_ADDRFAMILY, 0), MP_ERESOLVE_NOFAMILY);
    cr_assert_eq(mp__resolve_error(EAI_AGAIN, 0), MP_ERESOLVE_AGAIN);
    cr_assert_eq(mp__resolve_error(EAI_MEMORY, 0), -ENOMEM);
    cr_assert_eq(mp__resolve_error(EAI_FAIL, 0), MP_ERESOLVE_FAIL);
    cr_assert_eq(mp__resolve_error(EAI_SERVICE, 0), -EINVAL);
    cr_assert_eq(mp__resolve_error(EAI_SYSTEM, EMFILE), -EMFILE);
    cr_assert_eq(mp__resolve_error(EAI_FAMILY, 0), -EINVAL);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

static _Atomic bool hold_release;

Test(resolve, timeout_and_cancel_leave_the_lookup_to_free_itself, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_threads = 1;
    mp_runtime *rt = test_runtime_with(&cfg);
    atomic_store(&hold_release, false);
    mp_task *h;
    cr_assert_eq(mp_spawn_blocking(rt, test_hold, &hold_release, &h), 0);
    lookup l = {.host = "localhost", .timeout_ms = 30};
    cr_assert_eq(run_lookup(rt, &l), 0);
    cr_assert_eq(l.err, -ETIMEDOUT);
    cr_assert_null(l.res);
    /* A task cancelled while its lookup waits. */
    lookup c = {.host = "localhost", .timeout_ms = 60000};
    mp_task_init(&c.task, &lookup_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &c.task), 0);
    while (!c.started)
        usleep(1000);
    mp_task_cancel(&c.task);
    cr_assert_eq(mp_join(&c.task), -ECANCELED);
    atomic_store(&hold_release, true);
    cr_assert_eq(mp_join(h), 0);
    /* What the abandoned lookups found is freed by them (ASan's leak check sees to it). */
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    cr_assert_eq(st.live_tasks, 0);
    mp_runtime_free(rt);
}

Test(resolve, blocking_form_for_plain_threads, .timeout = 30)
{
    struct addrinfo *res;
    cr_assert_eq(mp_resolve_blocking("127.0.0.1", "8080", NULL, &res), 0);
    cr_assert_eq(ntohs(((struct sockaddr_in *)res->ai_addr)->sin_port), 8080);
    freeaddrinfo(res);
    cr_assert_eq(mp_resolve_blocking(NULL, NULL, NULL, &res), -EINVAL);
    cr_assert_null(res);
    struct addrinfo hints = {.ai_family = AF_INET6, .ai_flags = AI_NUMERICHOST};
    cr_assert_neq(mp_resolve_blocking("127.0.0.1", NULL, &hints, &res), 0);
}

/* Outcomes the machine decides alone: an IPv6 address asked for as IPv4 has no address of
 * that family; a name where only a numeric address is allowed is not found. */
Test(resolve, no_address_of_the_family_and_not_found, .timeout = 30)
{
    struct addrinfo *res;
    struct addrinfo v4 = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    int rc = mp_resolve_blocking("::1", NULL, &v4, &res);
    cr_expect_eq(rc, MP_ERESOLVE_NOFAMILY, "%d (%s)", rc, mp_strerror(rc));
    cr_expect_null(res);
    struct addrinfo numeric = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    rc = mp_resolve_blocking("not-a-number", NULL, &numeric, &res);
    cr_expect_eq(rc, MP_ERESOLVE_NOTFOUND, "%d (%s)", rc, mp_strerror(rc));
    cr_expect_str_eq(mp_strerror(rc), "name not found");
}
