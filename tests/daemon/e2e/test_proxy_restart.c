/* Upstreams killed and restarted under load, through magpied's proxy handler: client threads
 * send requests that each carry a token of their own to two upstreams, on keep-alive
 * connections (GETs, and POSTs with the token as body), while the test kills one upstream
 * (SIGKILL, by PID) and starts it again on the same port, over and over. Every request ends in its
 * own response (the token the upstream echoes is the one sent), a 502/504, or a closed connection;
 * none ever gets another's response; and the counts add up. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>

#include "daemon/e2e/proxy_harness.h"

TestSuite(proxy_restart, .init = proxy_dir_make, .fini = proxy_dir_remove, .timeout = 90);

#define CLIENTS 4
#define RUN_MS  3000

typedef struct load {
    int port;
    int id;
    atomic_bool *stop; /* set by the test when time is up */
    long sent, own, failed, closed, crossed, other;
    char first_bad[512]; /* the first wrong thing seen, for the message */
} load;

static void note_bad(load *l, const char *what, const response *r)
{
    if (l->first_bad[0] == 0)
        snprintf(l->first_bad, sizeof l->first_bad, "%s: %.200s | %.200s", what, r->head,
                 r->body ? r->body : "");
}

/* A connection to magpied, or -1 (no assertions on this thread: it reports in its struct). */
static int connect_quiet(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void *client_main(void *arg)
{
    load *l = arg;
    client c = {.fd = -1, .cap = 1 << 16};
    c.buf = malloc(c.cap);
    /* relaxed: a flag polled once per request; nothing else is published through it */
    for (long n = 0; !atomic_load_explicit(l->stop, memory_order_relaxed); n++) {
        if (c.fd < 0) {
            c.fd = connect_quiet(l->port);
            c.len = 0;
            c.eof = false;
            if (c.fd < 0) {
                l->other++;
                break;
            }
        }
        char req[256], token[64];
        snprintf(token, sizeof token, "token=c%d-%ld ", l->id, n);
        int tl = (int)strlen(token) - 1;
        if (n % 3 == 2) /* a POST: not retried once its body went out, so kills show as 502s */
            snprintf(req, sizeof req,
                     "POST /t?%.*s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%.*s", tl,
                     token, tl, tl, token);
        else
            snprintf(req, sizeof req, "GET /t?%.*s HTTP/1.1\r\nHost: x\r\n\r\n", tl, token);
        l->sent++;
        if (send(c.fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
            l->closed++;
            close(c.fd);
            c.fd = -1;
            continue;
        }
        response r = read_final(&c, false, NULL);
        if (r.status == 200 && r.complete && strstr(r.body, token) != NULL) {
            l->own++;
        } else if (r.status == 200 && strstr(r.body, "token=") != NULL) {
            l->crossed++;
            note_bad(l, "another request's response", &r);
        } else if ((r.status == 502 || r.status == 504) && r.complete) {
            l->failed++;
        } else if (r.status == 0 && c.eof) {
            l->closed++;
        } else if (r.status == 200 && !r.complete && c.eof) {
            l->closed++; /* cut short by the kill, then closed */
        } else {
            l->other++;
            note_bad(l, "neither its own response nor a clean failure", &r);
        }
        response_free(&r);
        if (c.eof || c.len > 0) { /* bytes beyond the response would be a desync */
            if (c.len > 0 && !c.eof) {
                l->other++;
                if (l->first_bad[0] == 0)
                    snprintf(l->first_bad, sizeof l->first_bad, "stray bytes: %.200s", c.buf);
            }
            close(c.fd);
            c.fd = -1;
        }
    }
    if (c.fd >= 0)
        close(c.fd);
    free(c.buf);
    return NULL;
}

/* An upstream on a port below the kernel's ephemeral range, which it can take again after a
 * restart: in the ephemeral range, the kernel may hand the port to one of the many connects of
 * the test while the upstream is down, and the restart would find it taken. */
static upstream_proc start_on_fixed_port(void)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    cr_assert_gt(lo, 11000, "no room below the ephemeral ports (%d)", lo);
    srand((unsigned)getpid());
    upstream_proc u;
    for (int i = 0; i < 100; i++)
        if (upstream_try_start(10000 + rand() % (lo - 10000), &u))
            return u;
    cr_assert_fail("no free port below %d", lo);
    abort(); /* not reached: the assertion ends the test */
}

/* Start it again where it was; a port held a moment longer by the exiting process is retried. */
static upstream_proc restart_on(int port)
{
    upstream_proc u;
    for (int i = 0; i < 200; i++) {
        if (upstream_try_start(port, &u))
            return u;
        usleep(10000);
    }
    cr_assert_fail("the upstream could not listen on %d again", port);
    abort(); /* not reached */
}

Test(proxy_restart, kill_and_restart_under_load)
{
    upstream_proc a = upstream_start(0);
    upstream_proc b = start_on_fixed_port();
    int b_port = b.port;
    daemon_proc d = proxy_start("[upstream app]\nserver = 127.0.0.1:%d\nserver = 127.0.0.1:%d\n"
                                "balance = round_robin\ntries = 2\nmax_fails = 1\n"
                                "fail_timeout_ms = 100\nconnect_timeout_ms = 500\n"
                                "header_timeout_ms = 5000\n"
                                "[route /]\nhandler = proxy\nupstream = app\n",
                                a.port, b.port);
    atomic_bool stop_flag = false;
    load loads[CLIENTS];
    pthread_t threads[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        loads[i] = (load){.port = d.http, .id = i, .stop = &stop_flag};
        cr_assert_eq(pthread_create(&threads[i], NULL, client_main, &loads[i]), 0);
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int restarts = 0;
    for (;;) {
        usleep(100000);
        upstream_stop(&b);
        usleep(100000);
        b = restart_on(b_port);
        restarts++;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > RUN_MS)
            break;
    }
    /* relaxed: pthread_join below orders everything the threads wrote */
    atomic_store_explicit(&stop_flag, true, memory_order_relaxed);
    long sent = 0, own = 0, failed = 0, closed = 0;
    for (int i = 0; i < CLIENTS; i++) {
        cr_assert_eq(pthread_join(threads[i], NULL), 0);
        load *l = &loads[i];
        cr_expect_eq(l->crossed, 0, "client %d got %ld responses not its own; first: %s", i,
                     l->crossed, l->first_bad);
        cr_expect_eq(l->other, 0, "client %d: %ld unclean results; first: %s", i, l->other,
                     l->first_bad);
        cr_expect_eq(l->sent, l->own + l->failed + l->closed + l->crossed + l->other);
        sent += l->sent;
        own += l->own;
        failed += l->failed;
        closed += l->closed;
    }
    fprintf(stderr,
            "kill_and_restart_under_load: %d restarts, %ld requests: %ld answered, "
            "%ld 502/504, %ld closed\n",
            restarts, sent, own, failed, closed);
    cr_assert_gt(own, sent / 2, "most requests should still be answered (%ld of %ld)", own, sent);
    still_serves(d.http);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&a);
    upstream_stop(&b);
}
