/* Tests of runtime/src/io.c: the readiness and close protocol every socket shares. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "test_util.h"

static _Atomic int closed_calls;
static void on_udp_closed(mp_udp *u)
{
    (void)u;
    atomic_fetch_add(&closed_calls, 1);
}

static void bind_udp(mp_runtime *rt, mp_udp *u)
{
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(mp_udp_bind(rt, u, (struct sockaddr *)&lo, 0), 0);
}

Test(io, a_close_waits_for_the_system_call_in_progress, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_udp u;
    bind_udp(rt, &u);
    int fd = mp_udp_fileno(&u);
    atomic_store(&closed_calls, 0);
    /* A task is inside a system call on the socket (recvmsg, say) when another thread closes
     * it: the fd must stay open, not be closed and perhaps reused under the call. */
    cr_assert(mp__io_enter(&u.io));
    cr_assert_eq(mp_udp_close(&u, on_udp_closed), 0);
    cr_assert(!mp__io_is_open(&u.io));
    cr_assert(!mp__io_enter(&u.io), "no new call starts once the close began");
    usleep(20000);
    cr_assert_neq(fcntl(fd, F_GETFD), -1, "the fd was closed under a call in progress");
    cr_assert_eq(atomic_load(&closed_calls), 0);
    cr_assert_eq(mp_udp_close(&u, on_udp_closed), -EALREADY, "closed once");
    /* The call returns: its leave finishes the close. */
    mp__io_leave(&u.io);
    while (atomic_load(&closed_calls) == 0)
        usleep(1000); /* the loop runs the callback a turn later */
    cr_assert_eq(fcntl(fd, F_GETFD), -1);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&closed_calls), 1);
}

Test(io, a_close_with_no_call_in_progress_is_at_once_and_once, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_udp u;
    bind_udp(rt, &u);
    atomic_store(&closed_calls, 0);
    cr_assert(mp__io_enter(&u.io));
    mp__io_leave(&u.io);
    cr_assert_eq(mp_udp_close(&u, on_udp_closed), 0);
    cr_assert_eq(mp_udp_close(&u, on_udp_closed), -EALREADY);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&closed_calls), 1);
}

/* Closes from many threads at once, with calls entering and leaving: exactly one close wins,
 * its callback runs once, and it runs only once no call is in progress. */
typedef struct racer {
    mp_udp *u;
    _Atomic int *closes_won, *in_call, *violations;
} racer;

static void *race_main(void *arg)
{
    racer *r = arg;
    for (int i = 0; i < 200; i++) {
        if (mp__io_enter(&r->u->io)) {
            atomic_fetch_add(r->in_call, 1);
            if (fcntl(r->u->io.fd, F_GETFD) == -1)
                atomic_fetch_add(r->violations, 1);
            atomic_fetch_sub(r->in_call, 1);
            mp__io_leave(&r->u->io);
        }
    }
    if (mp_udp_close(r->u, on_udp_closed) == 0)
        atomic_fetch_add(r->closes_won, 1);
    return NULL;
}

Test(io, racing_closes_and_calls, .timeout = 60)
{
    mp_runtime *rt = test_runtime(2);
    for (int round = 0; round < 50; round++) {
        mp_udp *u = malloc(sizeof *u);
        bind_udp(rt, u);
        atomic_store(&closed_calls, 0);
        _Atomic int won = 0, in_call = 0, violations = 0;
        racer r = {u, &won, &in_call, &violations};
        pthread_t th[4];
        for (int i = 0; i < 4; i++)
            pthread_create(&th[i], NULL, race_main, &r);
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
        cr_assert_eq(atomic_load(&won), 1);
        cr_assert_eq(atomic_load(&violations), 0);
        while (atomic_load(&closed_calls) == 0)
            usleep(100);
        usleep(1000);
        cr_assert_eq(atomic_load(&closed_calls), 1);
        free(u);
    }
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* One rule for freeing a socket object, whatever its close returns: on_closed runs exactly once
 * for the close, and the runtime does not touch the object after it. Never opened (zeroed, a
 * failed bind, connect or listen): at once, before the close returns, -EBADF. Closed by the
 * shutdown already: at once, -ESHUTDOWN. A second close: -EALREADY, no second callback. */
static _Atomic int tcp_closed_calls, lst_closed_calls;
static void on_tcp_closed(mp_tcp *t)
{
    (void)t;
    atomic_fetch_add(&tcp_closed_calls, 1);
}
static void on_lst_closed(mp_tcp_listener *l)
{
    (void)l;
    atomic_fetch_add(&lst_closed_calls, 1);
}

Test(io, on_closed_runs_once_whatever_the_close_returns, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    atomic_store(&closed_calls, 0);
    atomic_store(&tcp_closed_calls, 0);
    atomic_store(&lst_closed_calls, 0);
    /* Never opened. */
    mp_tcp zeroed = {0};
    cr_assert_eq(mp_tcp_close(&zeroed, on_tcp_closed), -EBADF);
    cr_assert_eq(atomic_load(&tcp_closed_calls), 1, "on_closed ran before the close returned");
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    mp_tcp failed;
    cr_assert_eq(mp_tcp_connect(rt, &failed, (struct sockaddr *)&un, 0), -EINVAL);
    cr_assert_eq(mp_tcp_close(&failed, on_tcp_closed), -EBADF);
    cr_assert_eq(atomic_load(&tcp_closed_calls), 2, "a failed connect: the same rule");
    mp_udp bad;
    cr_assert_eq(mp_udp_bind(rt, &bad, (struct sockaddr *)&un, 0), -EINVAL);
    cr_assert_eq(mp_udp_close(&bad, on_udp_closed), -EBADF);
    cr_assert_eq(atomic_load(&closed_calls), 1);
    /* Open: closed by the loop, once, however often close is called. */
    mp_udp u;
    bind_udp(rt, &u);
    cr_assert_eq(mp_udp_close(&u, on_udp_closed), 0);
    cr_assert_eq(mp_udp_close(&u, on_udp_closed), -EALREADY);
    while (atomic_load(&closed_calls) < 2)
        usleep(1000);
    /* Closed by the shutdown, with no close of the user's before: the close after it runs
     * on_closed at once. */
    mp_tcp_listener l;
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(mp_tcp_listen(rt, &l, (struct sockaddr *)&lo, 0, 0), 0);
    mp_udp v;
    bind_udp(rt, &v);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(mp_tcp_listener_close(&l, on_lst_closed), -ESHUTDOWN);
    cr_assert_eq(atomic_load(&lst_closed_calls), 1, "on_closed ran before the close returned");
    cr_assert_eq(mp_udp_close(&v, on_udp_closed), -ESHUTDOWN);
    cr_assert_eq(atomic_load(&closed_calls), 3);
    cr_assert_eq(mp_udp_close(&v, on_udp_closed), -EALREADY);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&closed_calls), 3);
    cr_assert_eq(atomic_load(&lst_closed_calls), 1);
}

/* Closes racing the shutdown's own close of every open socket, from plain threads: whichever
 * finishes second runs on_closed, exactly once per socket, and a socket freed in on_closed is
 * never touched after (ASan). */
#define RACE_SOCKS 16
static _Atomic int raced_closes;
static void free_udp_closed(mp_udp *u)
{
    atomic_fetch_add(&raced_closes, 1);
    free(u);
}

typedef struct closer {
    mp_udp **socks;
    unsigned delay_us;
} closer;

static void *close_all_main(void *arg)
{
    closer *c = arg;
    usleep(c->delay_us);
    for (int i = 0; i < RACE_SOCKS; i++) {
        int rc = mp_udp_close(c->socks[i], free_udp_closed);
        cr_assert(rc == 0 || rc == -ESHUTDOWN, "close: %d", rc);
    }
    return NULL;
}

Test(io, closes_racing_the_shutdown_run_on_closed_once, .timeout = 120)
{
    uint64_t seed = test_seed();
    for (int round = 0; round < 40; round++) {
        mp_runtime *rt = test_runtime(2);
        mp_udp *socks[RACE_SOCKS];
        for (int i = 0; i < RACE_SOCKS; i++) {
            socks[i] = malloc(sizeof *socks[i]);
            bind_udp(rt, socks[i]);
        }
        atomic_store(&raced_closes, 0);
        closer c = {.socks = socks, .delay_us = (unsigned)(test_rand(&seed) % 2000)};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, close_all_main, &c), 0);
        usleep((unsigned)(test_rand(&seed) % 2000));
        cr_assert_eq(mp_runtime_shutdown(rt), 0);
        pthread_join(th, NULL);
        mp_runtime_free(rt); /* the loop's close callbacks have all run */
        cr_assert_eq(atomic_load(&raced_closes), RACE_SOCKS, "round %d", round);
    }
}
