/* Tests of runtime/src/io.c: the readiness and close protocol every socket shares. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <fcntl.h>
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
    cr_assert_eq(mp_udp_close(&u, on_udp_closed), -EBADF, "closed once");
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
    cr_assert_eq(mp_udp_close(&u, on_udp_closed), -EBADF);
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
