/* magpied: an HTTP/1.1 and TCP-echo daemon on libmagpie.
 *
 *   magpied [-c FILE] [--set section.key=value ...]   serve
 *   magpied -t [-c FILE] [--set ...]                  check the configuration and exit 0 or 1
 *   magpied -v                                        print the version
 *
 * Signals are taken synchronously: they are blocked before the runtime starts (so no worker
 * ever runs a handler) and the main thread waits for them with sigwait. So a reload, a log
 * reopen and a stop never overlap: each runs to its end on this thread before the next signal
 * is taken.
 *
 *   SIGTERM, SIGINT   graceful stop (a second one: stop now)
 *   SIGHUP            reload the configuration file (same -c and --set)
 *   SIGUSR1           reopen the log files
 *   SIGUSR2           write a dump of the runtime (workers, queues, tasks) to the error log
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "core/activation.h"
#include "server/config.h"
#include "core/log.h"
#include "core/notify.h"
#include "magpie.h"
#include "server/server.h"
#include "core/version.h"

/* --set options taken; more are an error. */
#define MAX_SETS 64

#ifndef MAGPIED_CONF
#define MAGPIED_CONF "/etc/magpied/magpied.conf"
#endif

/* Whether two descriptors are one file (one terminal, one pipe, one journal stream). */
static bool same_file(int a, int b)
{
    struct stat x, y;
    return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: magpied [-t] [-c FILE] [--set section.key=value]...\n"
               "  -c FILE     configuration file (default " MAGPIED_CONF ")\n"
               "  --set K=V   override one key, e.g. --set http.listen=127.0.0.1:0\n"
               "  -t          check the configuration, print the result, exit 0 or 1\n"
               "  -v          print the version and exit\n"
               "signals: TERM/INT graceful stop, HUP reload, USR1 reopen logs\n");
}

/* The file and the overrides, applied and checked as at start. */
static int load_config(md_config *cfg, const char *path, const char *const *sets, int nsets,
                       md_error *err)
{
    int rc = md_config_load(cfg, path, err);
    for (int i = 0; rc == 0 && i < nsets; i++)
        rc = md_config_set(cfg, sets[i], err);
    if (rc == 0)
        rc = md_config_check(cfg, err);
    return rc;
}

static void notify_ready(md_server *srv, const char *what)
{
    char where[MD_SERVER_DESCRIBE_MAX], msg[MD_SERVER_DESCRIBE_MAX + 120];
    md_server_describe(srv, where, sizeof where);
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s%slistening %s", what ? what : "",
             what ? "; " : "", where);
    int rc = md_notify(msg);
    if (rc != 0)
        md_log(MD_LOG_WARN, "NOTIFY_SOCKET: %s", strerror(-rc));
}

/* SIGUSR2's dump, a line at a time, at warning level so that every log level shows it: an
 * operator asked for it. */
static void dump_line(const char *text, void *arg)
{
    (void)arg;
    md_log(MD_LOG_WARN, "dump: %s", text);
}

/* [runtime] slow_poll_us: once per task, on the worker that polled it. */
static void slow_poll(const mp_slow_poll *r, void *arg)
{
    (void)arg;
    md_log(MD_LOG_WARN,
           "slow poll: %llu us on worker %d, task %p%s%s, poll function %s%s(%s): a blocking "
           "call in a task?",
           (unsigned long long)(r->duration_ns / 1000), r->worker, (void *)r->task,
           r->name ? " " : "", r->name ? r->name : "", r->symbol ? r->symbol : "",
           r->symbol ? " " : "", r->object ? r->object : "?");
}

/* SIGHUP. The new file must be valid as a whole and its listeners bindable, or nothing
 * changes; it is logged either way. */
static void reload(md_server *srv, md_config *cur, const char *path, const char *const *sets,
                   int nsets)
{
    static md_config next; /* large (paths); this thread only */
    md_error err = {{0}};
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    char msg[128];
    snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading %s",
             (unsigned long long)now.tv_sec * 1000000u + (unsigned long long)now.tv_nsec / 1000u,
             path);
    md_notify(msg);
    md_log(MD_LOG_INFO, "reloading %s", path);

    int rc = load_config(&next, path, sets, nsets, &err);
    if (rc != 0) {
        md_log(MD_LOG_ERROR, "reload: %s; keeping the running configuration",
               err.msg[0] ? err.msg : strerror(-rc));
        md_server_count_reload(srv, false);
        notify_ready(srv, "reload failed");
        return;
    }
    if (next.workers != cur->workers) {
        md_log(MD_LOG_WARN, "reload: [runtime] workers changes on restart only; keeping %u",
               cur->workers);
        next.workers = cur->workers;
    }
    if ((rc = md_log_apply(&next.log, &err)) != 0) {
        md_log(MD_LOG_ERROR, "reload: %s; keeping the running configuration", err.msg);
        md_server_count_reload(srv, false);
        notify_ready(srv, "reload failed");
        return;
    }
    if ((rc = md_server_reload(srv, &next, &err)) != 0) {
        md_log(MD_LOG_ERROR, "reload: %s; keeping the running configuration", err.msg);
        md_log_apply(&cur->log, &err); /* back to the old logs */
        notify_ready(srv, "reload failed");
        return;
    }
    *cur = next;
    char where[MD_SERVER_DESCRIBE_MAX];
    md_server_describe(srv, where, sizeof where);
    md_log(MD_LOG_INFO, "reloaded %s; listening %s", path, where);
    notify_ready(srv, NULL);
}

int main(int argc, char **argv)
{
    const char *path = MAGPIED_CONF;
    const char *sets[MAX_SETS] = {NULL};
    int nsets = 0;
    bool check_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0) {
            check_only = true;
        } else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && nsets < MAX_SETS) {
            sets[nsets++] = argv[++i];
        } else if (strncmp(argv[i], "--set=", 6) == 0 && nsets < MAX_SETS) {
            sets[nsets++] = argv[i] + 6;
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--version") == 0) {
            printf("magpied %s (libmagpie %d.%d.%d, libuv %s)\n", MAGPIED_VERSION, MP_VERSION_MAJOR,
                   MP_VERSION_MINOR, MP_VERSION_PATCH, uv_version_string());
            return 0;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "magpied: unknown argument \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    /* A log target that is a pipe whose reader went away (`magpied | head`, a log collector
     * restarting) must cost lines, not the process: writes then fail with EPIPE instead. */
    signal(SIGPIPE, SIG_IGN);

    static md_config cfg;
    md_error err = {{0}};
    int rc = load_config(&cfg, path, sets, nsets, &err);
    if (rc != 0) {
        fprintf(stderr, "magpied: %s\n", err.msg[0] ? err.msg : strerror(-rc));
        return 1;
    }
    if (check_only) {
        printf("magpied: the configuration file %s is valid\n", path);
        return 0;
    }

    if ((rc = md_log_open(&cfg.log, &err)) != 0) {
        fprintf(stderr, "magpied: %s\n", err.msg);
        return 1;
    }
    static md_activated inherited;
    if ((rc = md_activation_fds(&inherited, &err)) != 0) {
        md_log(MD_LOG_ERROR, "%s", err.msg);
        md_log_close();
        return 1;
    }

    /* Many connections need many descriptors: take the hard limit. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &nofile) != 0)
            md_log(MD_LOG_WARN, "open files limit: %s", strerror(errno));
    }

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    sigaddset(&sigs, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    mp_config rcfg;
    mp_config_init(&rcfg);
    rcfg.workers = cfg.workers;
    rcfg.slow_poll_us = cfg.slow_poll_us;
    rcfg.on_slow_poll = slow_poll;
    mp_runtime *rt;
    if ((rc = mp_runtime_new(&rt, &rcfg)) != 0) {
        md_log(MD_LOG_ERROR, "runtime: %s", strerror(-rc));
        md_log_close();
        return 1;
    }
    md_server *srv;
    if ((rc = md_server_start(&srv, rt, &cfg, &inherited, &err)) != 0) {
        md_log(MD_LOG_ERROR, "%s", err.msg[0] ? err.msg : uv_strerror(rc));
        mp_runtime_free(rt);
        md_log_close();
        return 1;
    }
    char where[MD_SERVER_DESCRIBE_MAX];
    md_server_describe(srv, where, sizeof where);
    /* The "listening" line on stdout is for whoever started magpied (a script, a test that
     * listens on port 0). Where stdout is the log's stderr (a terminal, the journal) and the
     * log prints the started line below, that line says it, once. */
    if (!(cfg.log.error_log_path[0] == '\0' && md_log_enabled(MD_LOG_INFO) &&
          same_file(STDOUT_FILENO, STDERR_FILENO))) {
        printf("listening %s\n", where);
        fflush(stdout);
    }
    md_log(MD_LOG_INFO, "magpied %s started: listening %s, %u workers", MAGPIED_VERSION, where,
           mp_runtime_workers(rt));
    char ready[MD_SERVER_DESCRIBE_MAX + 64];
    snprintf(ready, sizeof ready, "READY=1\nSTATUS=listening %s\nMAINPID=%ld", where,
             (long)getpid());
    if ((rc = md_notify(ready)) != 0)
        md_log(MD_LOG_WARN, "NOTIFY_SOCKET: %s", strerror(-rc));
    uint64_t watchdog_usec = md_notify_watchdog_usec();
    if (watchdog_usec && (rc = md_notify_watchdog_start(rt, watchdog_usec / 2000)) != 0)
        md_log(MD_LOG_WARN, "watchdog: %s", strerror(-rc));

    for (;;) {
        int sig = 0;
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGINT || sig == SIGTERM)
            break;
        if (sig == SIGHUP) {
            reload(srv, &cfg, path, sets, nsets);
        } else if (sig == SIGUSR1) {
            if ((rc = md_log_reopen()) != 0)
                md_log(MD_LOG_ERROR, "reopening the logs: %s", strerror(-rc));
            else
                md_log(MD_LOG_INFO, "logs reopened");
        } else if (sig == SIGUSR2) {
            /* The workers go on serving: the dump only copies the task registry under its
             * locks, a shard at a time. */
            if ((rc = mp_runtime_dump(rt, dump_line, NULL)) != 0)
                md_log(MD_LOG_ERROR, "runtime dump: %s", strerror(-rc));
        }
    }
    /* Graceful stop: no new connections; idle ones close, in-flight requests finish with
     * Connection: close. Wait for them up to shutdown_timeout_ms; a second signal, or the
     * deadline, stops at once (the runtime's shutdown cancels what is left). */
    unsigned nopen = md_server_open(srv);
    md_log(MD_LOG_INFO, "stopping (%u connection%s open)", nopen, nopen == 1 ? "" : "s");
    md_notify("STOPPING=1\nSTATUS=stopping");
    md_server_drain(srv);
    uint64_t deadline = uv_hrtime() / 1000000u + cfg.shutdown_timeout_ms;
    while (md_server_open(srv) > 0) {
        uint64_t now = uv_hrtime() / 1000000u;
        if (now >= deadline) {
            nopen = md_server_open(srv);
            md_log(MD_LOG_WARN, "%u connection%s left at the deadline", nopen,
                   nopen == 1 ? "" : "s");
            break;
        }
        uint64_t wait = deadline - now < 50 ? deadline - now : 50;
        struct timespec ts = {0, (long)wait * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            md_log(MD_LOG_WARN, "second signal, stopping now");
            break;
        }
        if (sig == SIGUSR1)
            md_log_reopen();
    }
    mp_runtime_free(rt); /* cancels the connections' tasks and closes their streams */
    md_server_free(srv);
    md_log(MD_LOG_INFO, "stopped");
    md_log_close();
    return 0;
}
