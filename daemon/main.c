/* magpied: an HTTP/1.1 and TCP-echo daemon on libmagpie.
 *
 *   magpied [-c FILE] [--set section.key=value ...]   serve
 *   magpied -t [-c FILE] [--set ...]                  check the configuration and exit 0 or 1
 *
 * Signals are taken synchronously: they are blocked before the runtime starts (so no worker
 * ever runs a handler) and the main thread waits for them with sigwait.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "notify.h"
#include "magpie.h"
#include "server.h"

#ifndef MAGPIED_CONF
#define MAGPIED_CONF "/etc/magpied/magpied.conf"
#endif

static void usage(FILE *f)
{
    fprintf(f, "usage: magpied [-t] [-c FILE] [--set section.key=value]...\n"
               "  -c FILE     configuration file (default " MAGPIED_CONF ")\n"
               "  --set K=V   override one key, e.g. --set http.listen=127.0.0.1:0\n"
               "  -t          check the configuration, print the result, exit 0 or 1\n");
}

int main(int argc, char **argv)
{
    const char *path = MAGPIED_CONF;
    const char *sets[64];
    int nsets = 0;
    bool check_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0) {
            check_only = true;
        } else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && nsets < 64) {
            sets[nsets++] = argv[++i];
        } else if (strncmp(argv[i], "--set=", 6) == 0 && nsets < 64) {
            sets[nsets++] = argv[i] + 6;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "magpied: unknown argument \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    md_config cfg;
    md_error err = {{0}};
    int rc = md_config_load(&cfg, path, &err);
    for (int i = 0; rc == 0 && i < nsets; i++)
        rc = md_config_set(&cfg, sets[i], &err);
    if (rc == 0)
        rc = md_config_check(&cfg, &err);
    if (rc != 0) {
        fprintf(stderr, "magpied: %s\n", err.msg[0] ? err.msg : strerror(-rc));
        return 1;
    }
    if (check_only) {
        printf("magpied: the configuration file %s is valid\n", path);
        return 0;
    }

    /* Many connections need many descriptors: take the hard limit. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    mp_config rcfg;
    mp_config_init(&rcfg);
    rcfg.workers = cfg.workers;
    mp_runtime *rt;
    if ((rc = mp_runtime_new(&rt, &rcfg)) != 0) {
        fprintf(stderr, "magpied: runtime: %s\n", strerror(-rc));
        return 1;
    }
    md_server *srv;
    if ((rc = md_server_start(&srv, rt, &cfg, &err)) != 0) {
        fprintf(stderr, "magpied: %s\n", err.msg[0] ? err.msg : uv_strerror(rc));
        mp_runtime_free(rt);
        return 1;
    }
    char where[160];
    md_server_describe(srv, where, sizeof where);
    printf("listening %s\n", where);
    fflush(stdout);
    char ready[256];
    snprintf(ready, sizeof ready, "READY=1\nSTATUS=listening %s\nMAINPID=%ld", where,
             (long)getpid());
    if ((rc = md_notify(ready)) != 0)
        fprintf(stderr, "magpied: NOTIFY_SOCKET: %s\n", strerror(-rc));
    uint64_t watchdog_usec = md_notify_watchdog_usec();
    if (watchdog_usec && (rc = md_notify_watchdog_start(rt, watchdog_usec / 2000)) != 0)
        fprintf(stderr, "magpied: watchdog: %s\n", strerror(-rc));

    for (;;) {
        int sig = 0;
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGINT || sig == SIGTERM)
            break;
        /* Reload (SIGHUP) and log reopening (SIGUSR1) are not implemented yet. */
        fprintf(stderr, "magpied: signal %d ignored (not implemented yet)\n", sig);
    }
    /* Graceful stop: no new connections; idle ones close, in-flight requests finish with
     * Connection: close. Wait for them up to shutdown_timeout_ms; a second signal, or the
     * deadline, stops at once (the runtime's shutdown cancels what is left). */
    fprintf(stderr, "magpied: stopping (%u connections open)\n", md_server_open(srv));
    md_notify("STOPPING=1\nSTATUS=stopping");
    md_server_drain(srv);
    uint64_t deadline = uv_hrtime() / 1000000u + cfg.shutdown_timeout_ms;
    while (md_server_open(srv) > 0) {
        uint64_t now = uv_hrtime() / 1000000u;
        if (now >= deadline) {
            fprintf(stderr, "magpied: %u connections left at the deadline\n", md_server_open(srv));
            break;
        }
        uint64_t wait = deadline - now < 50 ? deadline - now : 50;
        struct timespec ts = {0, (long)wait * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "magpied: second signal, stopping now\n");
            break;
        }
    }
    mp_runtime_free(rt); /* cancels the connections' tasks and closes their streams */
    md_server_free(srv);
    return 0;
}
