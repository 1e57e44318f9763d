/* Integration tests of magpied's signals (daemon/main.c, reload in reload.c): SIGHUP reload to
 * a valid file, to an invalid one, to a changed or unbindable listener, under wrk load, with
 * the notify messages around it; SIGUSR1 log reopening; access log formats; log targets that
 * stall or lose their reader; and two processes sharing a port with reuseport. Each test
 * writes its configuration into its own directory. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "daemon/magpied_harness.h"

static char dir[64];

static void make_dir(void)
{
    harness_dir_make(dir, sizeof dir, "signals");
}

static void remove_dir(void)
{
    harness_dir_remove(dir);
}

TestSuite(signals, .init = make_dir, .fini = remove_dir, .timeout = 60);

static const char *in_dir(const char *name)
{
    return harness_path(dir, name);
}

static int count_in_file(const char *path, const char *needle)
{
    static char text[1 << 20];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    int count = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        count++;
    return count;
}

/* SIGHUP, then wait for the n-th "reloaded" or "keeping the running" line of the error log. */
static void reload_and_wait(const daemon_proc *d, const char *err_log, const char *outcome, int n)
{
    kill(d->pid, SIGHUP);
    for (int i = 0; i < 250 && count_in_file(err_log, outcome) < n; i++)
        usleep(20000);
    cr_assert_eq(count_in_file(err_log, outcome), n, "no \"%s\" #%d in the log", outcome, n);
}

/* One request with `fields` extra header fields on fd (kept alive); the status code. */
static int request_with_fields(int fd, int fields)
{
    char req[1024];
    int n = snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < fields; i++)
        n += snprintf(req + n, sizeof req - (size_t)n, "X-F%d: %d\r\n", i, i);
    n += snprintf(req + n, sizeof req - (size_t)n, "\r\n");
    test_write_all(fd, req, (size_t)n);
    char resp[4096];
    read_some(fd, resp, sizeof resp, "\r\n\r\n", 1);
    int code = 0;
    return sscanf(resp, "HTTP/1.1 %d", &code) == 1 ? code : 0;
}

static char *metrics(int port)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "curl -s http://127.0.0.1:%d/metrics", port);
    return run(cmd);
}

Test(signals, reload_applies_new_limits_from_the_next_request_and_keeps_the_listener)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    harness_write_file(
        conf, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[limits]\nmax_headers = 4\n");
    daemon_proc d = start_with(conf, NULL, err);
    int kept = test_connect(d.http);
    cr_assert_eq(request_with_fields(kept, 3), 200);

    harness_write_file(
        conf, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[limits]\nmax_headers = 3\n");
    reload_and_wait(&d, err, "reloaded", 1);
    /* Four fields (Host and three more) are one too many now, on the old connection too. */
    cr_assert_eq(request_with_fields(kept, 3), 431);
    int fresh = test_connect(d.http); /* same port: the listener was kept */
    cr_assert_eq(request_with_fields(fresh, 2), 200);
    cr_assert_eq(request_with_fields(fresh, 3), 431);
    close(kept);
    close(fresh);
    char *m = metrics(d.http);
    cr_assert(strstr(m, "magpied_reloads_total{result=\"success\"} 1\n"), "%s", m);
    cr_assert(strstr(m, "magpied_config_last_reload_successful 1\n"));
    /* A route the reload kept keeps its counters: one 200 before it, one after. */
    cr_assert(strstr(m, "magpied_route_responses_total{route=\"= /\",code=\"2xx\"} 2\n"), "%s", m);
    cr_assert(strstr(m, "magpied_route_responses_total{route=\"= /\",code=\"4xx\"} 0\n"), "%s", m);
    cr_assert_eq(stop(&d), 0);
}

Test(signals, reload_to_an_invalid_file_keeps_the_running_configuration)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    harness_write_file(
        conf, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[limits]\nmax_headers = 4\n");
    daemon_proc d = start_with(conf, NULL, err);
    harness_write_file(
        conf, "[http]\nlisten = 127.0.0.1:0\n[limits]\nmax_headers = 1\nmax_hedaers = 2\n");
    reload_and_wait(&d, err, "keeping the running configuration", 1);
    char where[256];
    snprintf(where, sizeof where, "%s:5: [limits] max_hedaers", conf);
    cr_assert(file_has(err, where, 0), "the log names file, line and key");
    /* Still serving, with the old limits (not the valid line before the bad one). */
    int fd = test_connect(d.http);
    cr_assert_eq(request_with_fields(fd, 3), 200);
    close(fd);
    char *m = metrics(d.http);
    cr_assert(strstr(m, "magpied_reloads_total{result=\"failure\"} 1\n"), "%s", m);
    cr_assert(strstr(m, "magpied_config_last_reload_successful 0\n"));
    cr_assert_eq(stop(&d), 0);
}

Test(signals, reload_moves_a_changed_listener_and_opens_a_new_one)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    harness_write_file(conf, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n");
    daemon_proc d = start_with(conf, NULL, err);
    cr_assert_eq(d.echo, 0);
    int http2 = free_port(), echo2 = free_port();
    char text[256];
    snprintf(text, sizeof text, "[http]\nlisten = 127.0.0.1:%d\n[echo]\nlisten = 127.0.0.1:%d\n",
             http2, echo2);
    harness_write_file(conf, text);
    reload_and_wait(&d, err, "reloaded", 1);
    cr_assert_eq(http_status(http2, "/healthz"), 200);
    /* The old address is closed. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)d.http),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_neq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "old port still open");
    close(fd);
    /* The echo listener that was off now echoes. */
    fd = test_connect(echo2);
    test_write_all(fd, "ping", 4);
    char buf[16];
    cr_assert_eq(read_some(fd, buf, sizeof buf, "ping", 1), 4);
    close(fd);
    cr_assert_eq(stop(&d), 0);
}

Test(signals, reload_to_an_unbindable_address_changes_nothing)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    harness_write_file(
        conf, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[limits]\nmax_headers = 4\n");
    daemon_proc d = start_with(conf, NULL, err);
    /* A port someone else holds. */
    int taken = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(taken, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(taken, 1), 0);
    getsockname(taken, (struct sockaddr *)&a, &len);
    char text[256];
    snprintf(text, sizeof text, "[http]\nlisten = 127.0.0.1:%d\n[limits]\nmax_headers = 1\n",
             ntohs(a.sin_port));
    harness_write_file(conf, text);
    reload_and_wait(&d, err, "keeping the running configuration", 1);
    cr_assert(file_has(err, "address already in use", 0));
    /* Nothing of the new file applied: old port, old limits. */
    int fd = test_connect(d.http);
    cr_assert_eq(request_with_fields(fd, 3), 200);
    close(fd);
    close(taken);
    cr_assert_eq(stop(&d), 0);
}

Test(signals, reload_under_load_loses_no_request, .timeout = 90)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    const char *a = "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[limits]\nmax_headers = 50\n";
    const char *b = "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[limits]\nmax_headers = 60\n";
    harness_write_file(conf, a);
    daemon_proc d = start_with(conf, NULL, err);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "wrk -t1 -c32 -d3s http://127.0.0.1:%d/ 2>&1", d.http);
    FILE *wrk = popen(cmd, "r");
    cr_assert_not_null(wrk);
    usleep(300000);
    for (int i = 1; i <= 10; i++) {
        harness_write_file(conf, i % 2 ? b : a);
        reload_and_wait(&d, err, "reloaded", i);
        usleep(150000);
    }
    static char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, wrk);
    out[n] = 0;
    cr_assert_eq(pclose(wrk), 0, "%s", out);
    cr_assert(strstr(out, "requests in"), "%s", out);
    cr_assert_null(strstr(out, "Socket errors"), "%s", out);
    cr_assert_null(strstr(out, "Non-2xx"), "%s", out);
    cr_assert_eq(stop(&d), 0);
}

/* Receive one datagram from the notify socket, waiting up to 5 s; "" when none. */
static const char *notify_recv(int fd)
{
    static char buf[512];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t n = poll(&p, 1, 5000) == 1 ? recv(fd, buf, sizeof buf - 1, 0) : 0;
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

Test(signals, reload_sends_reloading_with_monotonic_usec_then_ready)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    harness_write_file(conf, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n");
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    /* An abstract socket this time (the other notify test uses a path). */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char name[64];
    snprintf(name, sizeof name, "@magpied-test-%d", (int)getpid());
    memcpy(sa.sun_path + 1, name + 1, strlen(name) - 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa,
                      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name))),
                 0);
    setenv("NOTIFY_SOCKET", name, 1);
    daemon_proc d = start_with(conf, NULL, err);
    unsetenv("NOTIFY_SOCKET");
    cr_assert_eq(strncmp(notify_recv(fd), "READY=1\n", 8), 0);

    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kill(d.pid, SIGHUP);
    const char *msg = notify_recv(fd);
    unsigned long long usec = 0;
    cr_assert_eq(sscanf(msg, "RELOADING=1\nMONOTONIC_USEC=%llu", &usec), 1, "got: %s", msg);
    unsigned long long t0_usec =
        (unsigned long long)t0.tv_sec * 1000000u + (unsigned long long)t0.tv_nsec / 1000u;
    cr_assert(usec >= t0_usec && usec < t0_usec + 5000000u, "MONOTONIC_USEC %llu vs %llu", usec,
              t0_usec);
    msg = notify_recv(fd);
    cr_assert_eq(strncmp(msg, "READY=1\nSTATUS=listening http=", 30), 0, "got: %s", msg);

    /* A failed reload ends with READY=1 too (systemd waits for it), saying it failed. */
    harness_write_file(conf, "[http]\nlisten = nowhere\n");
    kill(d.pid, SIGHUP);
    cr_assert_eq(strncmp(notify_recv(fd), "RELOADING=1\n", 12), 0);
    msg = notify_recv(fd);
    cr_assert_eq(strncmp(msg, "READY=1\nSTATUS=reload failed", 28), 0, "got: %s", msg);
    cr_assert_eq(stop(&d), 0);
    close(fd);
}

Test(signals, sigusr1_reopens_both_logs_without_losing_a_line)
{
    const char *conf = in_dir("magpied.conf");
    const char *access = in_dir("access.log"), *errors = in_dir("error.log");
    char text[512];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
             "[log]\naccess_log = %s\nerror_log = %s\n",
             access, errors);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);
    cr_assert_eq(http_status(d.http, "/before"), 404);
    cr_assert(file_has(access, "\"GET /before HTTP/1.1\" 404", 5000));
    /* logrotate: rename, then ask for a reopen. */
    char access1[200], errors1[200];
    snprintf(access1, sizeof access1, "%s.1", access);
    snprintf(errors1, sizeof errors1, "%s.1", errors);
    cr_assert_eq(rename(access, access1), 0);
    cr_assert_eq(rename(errors, errors1), 0);
    cr_assert_eq(http_status(d.http, "/between"), 404); /* still goes to the renamed file */
    kill(d.pid, SIGUSR1);
    cr_assert(file_has(errors, "logs reopened", 5000), "the error log was reopened");
    cr_assert_eq(http_status(d.http, "/after"), 404);
    cr_assert(file_has(access, "\"GET /after HTTP/1.1\" 404", 5000));
    cr_assert_eq(stop(&d), 0);
    /* Each line exactly once, in the file that was current when it was logged. */
    cr_assert_eq(count_in_file(access1, "GET /before"), 1);
    cr_assert_eq(count_in_file(access1, "GET /between") + count_in_file(access, "GET /between"), 1);
    cr_assert_eq(count_in_file(access, "GET /after"), 1);
    cr_assert_eq(count_in_file(access1, "GET /after"), 0);
    cr_assert_eq(count_in_file(errors1, "started"), 1);
    cr_assert_eq(count_in_file(errors, "stopped"), 1);
}

/* SIGUSR2: a dump of the runtime in the error log while it serves; [runtime] slow_poll_us: a
 * poll over the threshold is logged once per task (1 us: nearly every task's first poll). */
Test(signals, sigusr2_dumps_the_runtime_and_slow_polls_are_logged)
{
    const char *conf = in_dir("magpied.conf"), *errors = in_dir("error.log");
    char text[512];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"
             "slow_poll_us = 1\n[log]\nerror_log = %s\n",
             errors);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);
    /* A keep-alive connection left idle after a request: its task waits for the next one
     * (it has suspended, so the dump lists it). */
    int idle = test_connect(d.http);
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    test_write_all(idle, req, sizeof req - 1);
    char resp[512];
    size_t got = 0;
    while (got < sizeof resp - 1 && !memmem(resp, got, "Hello, World!", 13)) {
        ssize_t n = read(idle, resp + got, sizeof resp - 1 - got);
        cr_assert_gt(n, 0);
        got += (size_t)n;
    }
    /* The connection's task lists once its poll has returned (it may still be finishing
     * that poll when the response arrives here): ask again until it does. */
    bool listed = false;
    for (int i = 0; i < 50 && !listed; i++) {
        kill(d.pid, SIGUSR2);
        listed = file_has(errors, "dump:     task 0x", 200);
    }
    cr_assert(listed, "the idle connection's task is in a dump");
    cr_assert(file_has(errors, "dump: magpie runtime ", 5000), "the dump is in the error log");
    cr_assert(file_has(errors, "dump:   worker 0: ", 5000));
    cr_assert(file_has(errors, "dump:   blocking pool: ", 5000));
    cr_assert(file_has(errors, "dump:   tasks that have suspended: ", 5000));
    cr_assert(file_has(errors, "slow poll: ", 5000), "a slow poll was logged");
    cr_assert_eq(http_status(d.http, "/"), 200, "still serving after the dump");
    close(idle);
    cr_assert_eq(stop(&d), 0);
}

Test(signals, access_log_json_and_combined_lines)
{
    const char *conf = in_dir("magpied.conf"), *access = in_dir("access.json");
    char text[512];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
             "[log]\naccess_log = %s\naccess_format = json\n",
             access);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "curl -s -o /dev/null -A 'tester \"q\"' -e http://ref/ 'http://127.0.0.1:%d/?x=1'",
             d.http);
    run(cmd);
    cr_assert(file_has(access, "\"target\":\"/?x=1\"", 5000));
    cr_assert(file_has(access, "\"status\":200", 0));
    cr_assert(file_has(access, "\"user_agent\":\"tester \\\"q\\\"\"", 0));
    cr_assert(file_has(access, "\"referer\":\"http://ref/\"", 0));
    cr_assert(file_has(access, "\"remote_addr\":\"127.0.0.1\"", 0));
    /* Switch to combined with a reload; the next line is in the new format. */
    const char *err = in_dir("error.log");
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
             "[log]\naccess_log = %s\naccess_format = combined\nerror_log = %s\n",
             access, err);
    harness_write_file(conf, text);
    reload_and_wait(&d, err, "reloaded", 1);
    run(cmd);
    cr_assert(file_has(access, "127.0.0.1 - - [", 5000));
    cr_assert(file_has(access,
                       "\"GET /?x=1 HTTP/1.1\" 200 13 \"http://ref/\" \"tester \\x22q\\x22\"", 0));
    cr_assert_eq(stop(&d), 0);
}

Test(signals, two_processes_share_a_port_with_reuseport, .timeout = 90)
{
    int port = free_port();
    const char *conf = in_dir("magpied.conf");
    char text[256];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:%d\nreuseport = on\n[echo]\nlisten =\n"
             "[log]\naccess_log = stderr\n",
             port);
    harness_write_file(conf, text);
    const char *log1 = in_dir("one.log"), *log2 = in_dir("two.log");
    daemon_proc one = start_with(conf, NULL, log1);
    pid_t first = running; /* start_with tracks one daemon for the suite's cleanup */
    daemon_proc two = start_with(conf, NULL, log2);
    cr_assert_eq(one.http, port);
    cr_assert_eq(two.http, port);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(http_status(port, "/healthz"), 200);
    /* The kernel spread the connections: each process logged some (all 64 on one: 2^-63). */
    cr_assert(file_has(log1, "GET /healthz", 5000), "the first process served none");
    cr_assert(file_has(log2, "GET /healthz", 5000), "the second process served none");
    cr_assert_eq(stop(&two), 0);
    running = first;
    cr_assert_eq(stop(&one), 0);

    /* Without reuseport the second one cannot bind, and says so. */
    snprintf(text, sizeof text, "[http]\nlisten = 127.0.0.1:%d\n[echo]\nlisten =\n", port);
    harness_write_file(conf, text);
    one = start_with(conf, NULL, NULL);
    char exe[PATH_MAX + 32], cmd[PATH_MAX + 300];
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "%s -c %s 2>&1; echo rc=$?", exe, conf);
    char *out = run(cmd);
    cr_assert(strstr(out, "address already in use") && strstr(out, "rc=1"), "%s", out);
    cr_assert_eq(stop(&one), 0);
}

/* A FIFO as the access log whose reader never reads: the writer must drop lines, not hold the
 * control calls that wait for it (reopen, reload, exit on the main thread) for ever. */
Test(signals, an_access_log_fifo_nobody_reads_costs_lines_not_reopen_or_exit)
{
    const char *conf = in_dir("magpied.conf"), *fifo = in_dir("access.fifo");
    const char *errors = in_dir("error.log");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    int reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* there, but never reads */
    cr_assert_geq(reader, 0);
    char text[512];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
             "[log]\naccess_log = %s\nerror_log = %s\n",
             fifo, errors);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);

    /* 300 requests whose lines (each over 1 KiB) are several times what the pipe holds. */
    enum { N = 300 };
    char req[1200];
    int len = snprintf(req, sizeof req, "GET /%01000d HTTP/1.1\r\nHost: x\r\n\r\n", 0);
    int fd = test_connect(d.http);
    for (int i = 0; i < N; i++)
        test_write_all(fd, req, (size_t)len);
    static char got[1 << 17];
    read_some(fd, got, sizeof got, "HTTP/1.1 404", N);
    close(fd);
    cr_assert(file_has(errors, "access log: the target took no data", 10000),
              "the stall was reported");

    kill(d.pid, SIGUSR1);
    cr_assert(file_has(errors, "logs reopened", 10000), "a reopen was not held by the stall");
    cr_assert_eq(http_status(d.http, "/"), 200, "still serving");
    kill(d.pid, SIGTERM);
    cr_assert_eq(wait_exit(&d, 15000), 0, "exit was not held by the stall");
    close(reader);
}

/* A log target whose reader went away (`magpied 2>&1 | head`): lines are lost, the daemon is
 * not killed by SIGPIPE. */
Test(signals, an_error_log_pipe_whose_reader_is_gone_does_not_kill_the_daemon)
{
    const char *conf = in_dir("magpied.conf"), *fifo = in_dir("error.fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    int reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert_geq(reader, 0);
    char text[512];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[log]\nerror_log = %s\n", fifo);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);
    close(reader);
    /* The reopen fails (a FIFO without a reader cannot be opened for writing without
     * waiting, and it does not wait), and says so to the old target: EPIPE. */
    kill(d.pid, SIGUSR1);
    kill(d.pid, SIGUSR1);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(http_status(d.http, "/"), 200, "the daemon died or stopped serving");
    cr_assert_eq(stop(&d), 0);
}

/* A connection accepted while the access log was off, still open when a reload turns it on:
 * its lines name the client like any other's. */
Test(signals, a_connection_from_before_the_access_log_was_on_is_logged_with_its_address)
{
    const char *conf = in_dir("magpied.conf"), *access = in_dir("access.log");
    const char *err = in_dir("error.log");
    char text[512];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[log]\nerror_log = %s\n", err);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);
    int fd = test_connect(d.http);
    static const char first[] = "GET /first HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char second[] = "GET /second HTTP/1.1\r\nHost: x\r\n\r\n";
    char got[4096];
    test_write_all(fd, first, sizeof first - 1);
    cr_assert(read_some(fd, got, sizeof got, "HTTP/1.1 404", 1) > 0);

    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
             "[log]\nerror_log = %s\naccess_log = %s\n",
             err, access);
    harness_write_file(conf, text);
    reload_and_wait(&d, err, "reloaded", 1);
    test_write_all(fd, second, sizeof second - 1);
    cr_assert(read_some(fd, got, sizeof got, "HTTP/1.1 404", 1) > 0);
    close(fd);
    cr_assert(file_has(access, "\"GET /second HTTP/1.1\" 404", 5000), "the line was written");
    cr_assert(file_has(access, "127.0.0.1 - - [", 0), "with the client's address, not \"-\"");
    cr_assert_eq(count_in_file(access, "GET /first"), 0, "nothing from before the reload");
    cr_assert_eq(stop(&d), 0);
}

static int http_generations(int port)
{
    char cmd[200];
    snprintf(
        cmd, sizeof cmd,
        "curl -s http://127.0.0.1:%d/metrics | sed -n 's/^magpied_http_config_generations //p'",
        port);
    return atoi(run(cmd));
}

/* Sweeps run when a connection closes and at reloads: wait (2 s at most) for one to settle. */
static int wait_generations(int port, int want)
{
    int gens = 0;
    for (int i = 0; i < 100 && (gens = http_generations(port)) != want; i++)
        usleep(20000);
    return gens;
}

/* Each reload makes a new generation of HTTP settings; the old ones live only as long as a
 * connection that started under them is at them, not until exit. */
Test(signals, old_http_settings_are_freed_once_no_connection_is_at_them)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    char text[512];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[log]\nerror_log = %s\n", err);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);
    cr_assert_eq(http_generations(d.http), 1);
    int fd = test_connect(d.http);
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    char got[4096];
    test_write_all(fd, req, sizeof req - 1);
    cr_assert(read_some(fd, got, sizeof got, "HTTP/1.1 200", 1) > 0);
    for (int i = 1; i <= 3; i++)
        reload_and_wait(&d, err, "reloaded", i);
    cr_assert_eq(http_generations(d.http), 4, "the open connection holds the first one");
    /* Its next request moves it to the newest; the sweep after a later close (here: each
     * /metrics connection's) frees the three it left. */
    test_write_all(fd, req, sizeof req - 1);
    cr_assert(read_some(fd, got, sizeof got, "HTTP/1.1 200", 1) > 0);
    int gens = wait_generations(d.http, 1);
    cr_assert_eq(gens, 1, "old generations still in memory: %d", gens);
    close(fd);
    reload_and_wait(&d, err, "reloaded", 4);
    gens = wait_generations(d.http, 1);
    cr_assert_eq(gens, 1, "a reload after the last old connection closed keeps %d", gens);
    cr_assert_eq(stop(&d), 0);
}

/* The stop line counts in words: "1 connection", "2 connections". */
Test(signals, stop_line_says_connection_or_connections)
{
    const char *conf = in_dir("magpied.conf"), *err = in_dir("error.log");
    harness_write_file(conf, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n");
    for (int open = 1; open <= 2; open++) {
        daemon_proc d = start_with(conf, NULL, err);
        int fds[2];
        for (int i = 0; i < open; i++) {
            fds[i] = test_connect(d.http);
            cr_assert_eq(request_with_fields(fds[i], 0), 200); /* accepted, and kept alive */
        }
        cr_assert_eq(stop(&d), 0);
        for (int i = 0; i < open; i++)
            close(fds[i]);
    }
    cr_assert_eq(count_in_file(err, "stopping (1 connection open)\n"), 1);
    cr_assert_eq(count_in_file(err, "stopping (2 connections open)\n"), 1);
    cr_assert_eq(count_in_file(err, "1 connections"), 0);
}

/* magpied with stdout and stderr on one file descriptor's file, as on a terminal or in the
 * journal: its address once (the log's started line), not twice. */
Test(signals, listening_is_said_once_when_stdout_is_the_log)
{
    const char *conf = in_dir("magpied.conf"), *out = in_dir("out.log");
    harness_write_file(conf, "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten = 127.0.0.1:0\n");
    char exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execl(exe, exe, "-c", conf, (char *)NULL);
        _exit(127);
    }
    running = pid;
    cr_assert(file_has(out, " started: listening http=127.0.0.1:", 5000), "no started line");
    kill(pid, SIGTERM);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    running = -1;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert_eq(count_in_file(out, "listening http="), 1);
}
