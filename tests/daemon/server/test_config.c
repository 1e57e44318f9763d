/* Tests for daemon/server/config.c: defaults, the shipped file, every key's range, the
 * file:line:key error messages, --set overrides, and the cross-key checks.
 */
#include <criterion/criterion.h>
#include <sys/stat.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/handler.h"
#include "server/config.h"

static int parse(md_config *c, const char *text, md_error *err)
{
    md_config_init(c);
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    cr_assert_not_null(f);
    int rc = md_config_parse_file(c, f, "test.conf", err);
    fclose(f);
    return rc;
}

/* text[0..len), which may hold NUL bytes. */
static int parse_n(md_config *c, const char *text, size_t len, md_error *err)
{
    md_config_init(c);
    FILE *f = fmemopen((void *)text, len, "r");
    cr_assert_not_null(f);
    int rc = md_config_parse_file(c, f, "test.conf", err);
    fclose(f);
    return rc;
}

static void expect_error(const char *text, const char *msg)
{
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, text, &err), -EINVAL, "accepted: %s", text);
    cr_assert_str_eq(err.msg, msg);
}

Test(config, defaults, .timeout = 5)
{
    md_config c;
    md_config_init(&c);
    cr_assert(c.listeners[MD_LISTENER_HTTP].listen[0].enabled);
    cr_assert_str_eq(c.listeners[MD_LISTENER_HTTP].listen[0].host, "127.0.0.1");
    cr_assert_eq(c.listeners[MD_LISTENER_HTTP].listen[0].port, 8080);
    cr_assert(c.listeners[MD_LISTENER_ECHO].listen[0].enabled);
    cr_assert_eq(c.listeners[MD_LISTENER_ECHO].listen[0].port, 8007);
    cr_assert_eq(c.workers, 0);
    cr_assert_eq(c.limits.max_request_line, 8192);
    cr_assert_eq(c.limits.max_header_bytes, 65536);
    cr_assert_eq(c.limits.max_headers, 100);
    cr_assert_eq(c.limits.max_body_bytes, 1048576);
    cr_assert_eq(c.limits.header_timeout_ms, 10000);
    cr_assert_eq(c.limits.body_timeout_ms, 10000);
    cr_assert_eq(c.limits.keepalive_timeout_ms, 75000);
    cr_assert_eq(c.limits.max_requests_per_connection, 0);
    cr_assert_eq(c.listeners[MD_LISTENER_HTTP].max_connections, 10000);
    cr_assert_eq(c.log.level, MD_LOG_INFO);
    cr_assert_eq(c.log.access_log, MD_ACCESS_LOG_OFF);
    cr_assert_eq(c.shutdown_timeout_ms, 10000);
    cr_assert_eq(c.listeners[MD_LISTENER_ECHO].idle_timeout_ms, 60000);
    cr_assert_eq(c.listeners[MD_LISTENER_ECHO].max_connections, 1000);
    cr_assert_eq(c.limits.send_timeout_ms, 30000);
    cr_assert_eq(c.limits.send_buffer, 0);
    cr_assert_eq(c.limits.min_send_rate, 240);
    cr_assert_eq(c.limits.min_body_rate, 240);
    cr_assert_eq(c.limits.min_rate_grace_ms, 5000);
    md_error err;
    cr_assert_eq(md_config_check(&c, &err), 0);
}

/* Two route tables answer alike: the same routes, handlers, options, methods, in order. */
static void expect_same_routes(const md_route_table *a, const md_route_table *b)
{
    cr_assert_eq(a->n, b->n);
    for (uint32_t i = 0; i < a->n; i++) {
        const md_route *x = &a->r[i], *y = &b->r[i];
        cr_assert_str_eq(x->path, y->path);
        cr_assert_eq(x->exact, y->exact, "%s", x->path);
        cr_assert_eq(x->handler, y->handler, "%s", x->path);
        cr_assert_eq(x->methods, y->methods, "%s", x->path);
        cr_assert_str_eq(x->allow, y->allow);
        /* The handler's options, whatever they are: the same bytes. */
        cr_assert_eq(memcmp(x->conf, y->conf, sizeof x->conf), 0, "%s", x->path);
        cr_assert_eq(a->order[i], b->order[i]);
    }
    cr_assert_str_eq(a->allow_any, b->allow_any);
}

/* The shipped file sets every key to its default: loading it changes nothing, and its routes
 * are the built-in ones. */
Test(config, shipped_file_is_the_defaults, .timeout = 5)
{
    md_config c, d;
    md_error err = {{0}};
    int rc = md_config_load(&c, "config/magpied.conf", &err);
    cr_assert_eq(rc, 0, "%s (run the suite from the repository root)", err.msg);
    cr_assert_eq(md_config_check(&c, &err), 0, "%s", err.msg);
    md_config_init(&d);
    memcpy(d.source, c.source, sizeof(d.source));
    memcpy(d.key_line, c.key_line, sizeof(d.key_line));
    expect_same_routes(&c.routes, &d.routes);
    memcpy(&d.routes, &c.routes, sizeof(d.routes)); /* lines and ids differ */
    cr_assert_eq(memcmp(&c, &d, sizeof(c)), 0);
    /* Every key of every section that does not repeat is spelt out in the shipped file. */
    md_ini_conf ini = md_config_ini(&c);
    for (size_t i = 0; i < ini.n; i++) {
        const md_ini_section *s = ini.registry[i].section;
        for (size_t k = 0; s->keys != NULL && s->keys[k].name != NULL; k++)
            cr_assert_neq(c.key_line[i][k], 0, "[%s] %s is not in the shipped file", s->name,
                          s->keys[k].name);
    }
}

Test(config, load_missing_file, .timeout = 5)
{
    md_config c;
    md_error err;
    cr_assert_eq(md_config_load(&c, "/nonexistent/magpied.conf", &err), -ENOENT);
    cr_assert_str_eq(err.msg, "/nonexistent/magpied.conf: cannot open: No such file or directory");
}

Test(config, every_key, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    const char *text = "; comment\n"
                       "# comment\n"
                       "[http]\n"
                       "listen = [::1]:0\n"
                       "[echo]\n"
                       "listen =\n"
                       "idle_timeout_ms = 0\n"
                       "[runtime]\n"
                       "workers = 4 ; inline comment\n"
                       "slow_poll_us = 2500\n"
                       "[limits]\n"
                       "  max_request_line = 1024\n"
                       "\tmax_header_bytes = 2048\n"
                       "max_headers = 10\n"
                       "max_body_bytes = 1073741824\n"
                       "header_timeout_ms = 1\n"
                       "body_timeout_ms = 3600000\n"
                       "keepalive_timeout_ms = 0\n"
                       "max_requests_per_connection = 4294967295\n"
                       "max_connections = 1\n"
                       "[log]\n"
                       "level = debug\n"
                       "access_log = /var/log/magpied/access.log\n"
                       "[server]\n"
                       "shutdown_timeout_ms = 0\n"
                       "[static]\n"
                       "open_file_cache_entries = 0\n"
                       "open_file_cache_max_fds = 1000000\n"
                       "open_file_cache_valid_ms = 3600000\n"
                       "open_file_cache_bytes_max = 1048576\n"
                       "open_file_cache_bytes = 0\n";
    cr_assert_eq(parse(&c, text, &err), 0, "%s", err.msg);
    cr_assert_eq(c.file_cache.entries, 0);
    cr_assert_eq(c.file_cache.max_fds, 1000000);
    cr_assert_eq(c.file_cache.valid_ms, 3600000);
    cr_assert_eq(c.file_cache.bytes_max, 1048576);
    cr_assert_eq(c.file_cache.bytes, 0);
    cr_assert(c.listeners[MD_LISTENER_HTTP].listen[0].enabled);
    cr_assert_eq(c.listeners[MD_LISTENER_HTTP].listen[0].family, AF_INET6);
    cr_assert_str_eq(c.listeners[MD_LISTENER_HTTP].listen[0].host, "::1");
    cr_assert_eq(c.listeners[MD_LISTENER_HTTP].listen[0].port, 0);
    cr_assert_not(c.listeners[MD_LISTENER_ECHO].listen[0].enabled);
    cr_assert_eq(c.listeners[MD_LISTENER_ECHO].idle_timeout_ms, 0);
    cr_assert_eq(c.workers, 4);
    cr_assert_eq(c.slow_poll_us, 2500);
    cr_assert_eq(c.limits.max_request_line, 1024);
    cr_assert_eq(c.limits.max_header_bytes, 2048);
    cr_assert_eq(c.limits.max_headers, 10);
    cr_assert_eq(c.limits.max_body_bytes, 1073741824);
    cr_assert_eq(c.limits.header_timeout_ms, 1);
    cr_assert_eq(c.limits.body_timeout_ms, 3600000);
    cr_assert_eq(c.limits.keepalive_timeout_ms, 0);
    cr_assert_eq(c.limits.max_requests_per_connection, 4294967295u);
    cr_assert_eq(c.listeners[MD_LISTENER_HTTP].max_connections, 1);
    cr_assert_eq(c.log.level, MD_LOG_DEBUG);
    cr_assert_eq(c.log.access_log, MD_ACCESS_LOG_FILE);
    cr_assert_str_eq(c.log.access_log_path, "/var/log/magpied/access.log");
    cr_assert_eq(c.shutdown_timeout_ms, 0);
    cr_assert_str_eq(c.source, "test.conf");
    cr_assert_eq(md_config_check(&c, &err), 0, "%s", err.msg);
}

Test(config, access_log_and_levels, .timeout = 5)
{
    md_config c;
    md_error err;
    cr_assert_eq(parse(&c, "[log]\naccess_log = stderr\nlevel = error\n", &err), 0);
    cr_assert_eq(c.log.access_log, MD_ACCESS_LOG_STDERR);
    cr_assert_eq(c.log.level, MD_LOG_ERROR);
    cr_assert_eq(parse(&c, "[log]\naccess_log = ./access.log\nlevel = warn\n", &err), 0);
    cr_assert_eq(c.log.access_log, MD_ACCESS_LOG_FILE);
    cr_assert_str_eq(c.log.access_log_path, "./access.log");
    cr_assert_eq(c.log.level, MD_LOG_WARN);
    cr_assert_str_eq(md_log_level_name(MD_LOG_WARN), "warn");
}

Test(config, bad_integer_names_file_line_key, .timeout = 5)
{
    expect_error("[limits]\n\n\nmax_body_bytes = 12x\n",
                 "test.conf:4: [limits] max_body_bytes: expected an integer in 0..1073741824, "
                 "got \"12x\"");
    expect_error("[limits]\nmax_body_bytes = 1073741825\n",
                 "test.conf:2: [limits] max_body_bytes: expected an integer in 0..1073741824, "
                 "got \"1073741825\"");
    expect_error("[limits]\nmax_headers = -1\n",
                 "test.conf:2: [limits] max_headers: expected an integer in 1..10000, got \"-1\"");
    expect_error("[limits]\nmax_headers = 0\n",
                 "test.conf:2: [limits] max_headers: expected an integer in 1..10000, got \"0\"");
    expect_error("[limits]\nmax_headers =\n",
                 "test.conf:2: [limits] max_headers: expected an integer in 1..10000, got \"\"");
    expect_error(
        "[limits]\nmax_headers = 0x10\n",
        "test.conf:2: [limits] max_headers: expected an integer in 1..10000, got \"0x10\"");
    expect_error("[runtime]\nworkers = 99999999999999999999999\n",
                 "test.conf:2: [runtime] workers: expected an integer in 0..1024, got "
                 "\"99999999999999999999999\"");
    expect_error("[runtime]\nslow_poll_us = 60000001\n",
                 "test.conf:2: [runtime] slow_poll_us: expected an integer in 0..60000000, got "
                 "\"60000001\"");
    expect_error("[limits]\nmax_requests_per_connection = 4294967296\n",
                 "test.conf:2: [limits] max_requests_per_connection: expected an integer in "
                 "0..4294967295, got \"4294967296\"");
    expect_error("[static]\nopen_file_cache_valid_ms = 3600001\n",
                 "test.conf:2: [static] open_file_cache_valid_ms: expected an integer in "
                 "0..3600000, got \"3600001\"");
    expect_error("[static]\nopen_file_cache_bytes_max = 1048577\n",
                 "test.conf:2: [static] open_file_cache_bytes_max: expected an integer in "
                 "0..1048576, got \"1048577\"");
    expect_error("[server]\nshutdown_timeout_ms = 1 000\n",
                 "test.conf:2: [server] shutdown_timeout_ms: expected an integer in 0..3600000, "
                 "got \"1 000\"");
}

Test(config, bad_listen, .timeout = 5)
{
    const char *bad[] = {"localhost:8080", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "::1:80",
                         "[::1]80",        "[::1]:x",   ":80",        "1.2.3:80",        "[]:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128], msg[512];
        snprintf(text, sizeof(text), "[http]\nlisten = %s\n", bad[i]);
        snprintf(msg, sizeof(msg),
                 "test.conf:2: [http] listen: expected host:port with a numeric IPv4 address "
                 "or a [bracketed] IPv6 address and a port in 0..65535, got \"%s\"",
                 bad[i]);
        expect_error(text, msg);
    }
    expect_error("[echo]\nlisten = nowhere\n",
                 "test.conf:2: [echo] listen: expected host:port with a numeric IPv4 address or "
                 "a [bracketed] IPv6 address and a port in 0..65535 (or empty for off), got "
                 "\"nowhere\"");
    expect_error("[http]\nlisten =\n",
                 "test.conf:2: [http] listen: expected host:port with a numeric IPv4 address or "
                 "a [bracketed] IPv6 address and a port in 0..65535, got \"\"");
}

Test(config, bad_enums, .timeout = 5)
{
    expect_error("[log]\nlevel = verbose\n",
                 "test.conf:2: [log] level: expected error, warn, info or debug, got \"verbose\"");
    expect_error("[log]\nlevel = INFO\n",
                 "test.conf:2: [log] level: expected error, warn, info or debug, got \"INFO\"");
    expect_error("[log]\naccess_log = syslog\n",
                 "test.conf:2: [log] access_log: expected off, stderr, or a path starting with / "
                 "or ., got \"syslog\"");
    expect_error("[log]\nerror_log = journal\n",
                 "test.conf:2: [log] error_log: expected stderr, or a path starting with / or ., "
                 "got \"journal\"");
    expect_error("[log]\naccess_format = common\n",
                 "test.conf:2: [log] access_format: expected combined, json, or a template of "
                 "$fields, got \"common\"");
    expect_error("[log]\naccess_format = $remote_addr $upstream\n",
                 "test.conf:2: [log] access_format: unknown field \"$upstream\" (magpied.conf(5) "
                 "lists the fields: $remote_addr, $request, $status, $request_time, ...)");
    expect_error("[http]\nlisten = 127.0.0.1:1\nreuseport = 2\n",
                 "test.conf:3: [http] reuseport: expected on, yes, true or 1, or off, no, false "
                 "or 0 (any case), got \"2\"");
}

Test(config, log_files_format_and_reuseport, .timeout = 5)
{
    md_config c;
    md_error err;
    cr_assert_eq(parse(&c,
                       "[http]\nlisten = 127.0.0.1:1\nreuseport = on\n[echo]\nreuseport = yes\n"
                       "[log]\nerror_log = /var/log/magpied/error.log\naccess_format = json\n",
                       &err),
                 0, "%s", err.msg);
    cr_assert(c.listeners[MD_LISTENER_HTTP].reuseport);
    cr_assert(c.listeners[MD_LISTENER_ECHO].reuseport);
    cr_assert_str_eq(c.log.error_log_path, "/var/log/magpied/error.log");
    cr_assert_eq(c.log.access_format, MD_ACCESS_FORMAT_JSON);
    cr_assert_str_eq(md_access_format_name(MD_ACCESS_FORMAT_JSON), "json");
    cr_assert_eq(md_config_set(&c, "log.error_log=stderr", &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.log.error_log_path, "");
    cr_assert_eq(md_config_set(&c, "http.reuseport=off", &err), 0, "%s", err.msg);
    cr_assert_not(c.listeners[MD_LISTENER_HTTP].reuseport);

    /* A template, quotes and all, then a preset again. */
    cr_assert_eq(
        parse(&c, "[log]\naccess_format = $remote_addr \"$request\" $upstream_addr\n", &err), 0,
        "%s", err.msg);
    cr_assert_eq(c.log.access_format, MD_ACCESS_FORMAT_TEMPLATE);
    cr_assert_str_eq(c.log.access_template, "$remote_addr \"$request\" $upstream_addr");
    cr_assert_eq(md_config_set(&c, "log.access_format=combined", &err), 0, "%s", err.msg);
    cr_assert_eq(c.log.access_format, MD_ACCESS_FORMAT_COMBINED);
    cr_assert_str_eq(c.log.access_template, "");
}

Test(config, unknown_section_and_key, .timeout = 5)
{
    expect_error("[limits]\nmax_bodyy = 1\n", "test.conf:2: [limits] max_bodyy: unknown key");
    expect_error("[http]\nlisten = 127.0.0.1:1\n[limts]\nmax_body_bytes = 1\n",
                 "test.conf:3: unknown section [limts]");
    /* An empty misspelt section is caught as well. */
    expect_error("[http]\n[htp]\n", "test.conf:2: unknown section [htp]");
    /* Right after a route that lacks its handler, the bogus header is the error on its own
     * line (a configuration fuzzer found it reported as the route's, a line before). */
    expect_error("[route = /metrics]\n[]\n", "test.conf:2: unknown section []");
    expect_error("[route = /metrics]\n[ssssssss]\nhandler = text\n",
                 "test.conf:2: unknown section [ssssssss]");
    expect_error("workers = 1\n", "test.conf:1: workers: key outside any [section]");
    /* Keys are case-sensitive, like the values. */
    expect_error("[limits]\nMax_Headers = 1\n", "test.conf:2: [limits] Max_Headers: unknown key");
}

Test(config, syntax_errors, .timeout = 5)
{
    expect_error("[limits]\nmax_headers 10\n",
                 "test.conf:2: syntax error: expected [section], key = value, or a ; or # "
                 "comment");
    expect_error("[limits\n", "test.conf:1: syntax error: expected [section], key = value, or a ; "
                              "or # comment");
    /* The first error wins, whichever kind it is. */
    expect_error("[limits]\nmax_headers 10\nmax_headers = x\n",
                 "test.conf:2: syntax error: expected [section], key = value, or a ; or # "
                 "comment");
    expect_error("[limits]\nmax_headers = x\nmax_headers 10\n",
                 "test.conf:2: [limits] max_headers: expected an integer in 1..10000, got \"x\"");
}

Test(config, duplicate_key, .timeout = 5)
{
    expect_error("[limits]\nmax_headers = 10\n\nmax_headers = 20\n",
                 "test.conf:4: [limits] max_headers: set twice (first on line 2)");
    /* The keys a section's own code takes too (an outside probe found them taken twice, the
     * first silently lost: a site's names, a route's rate): only the list keys repeat. */
    expect_error("[site a]\nnames = a.example\nnames = b.example\n",
                 "test.conf:3: [site a] names: set twice (first on line 2)");
    expect_error("[route /]\nhandler = text\nlimit_rate = 1/m\nlimit_burst = 5\nlimit_burst = 0\n",
                 "test.conf:5: [route /] limit_burst: set twice (first on line 4)");
    expect_error("[listener a]\nlisten = 127.0.0.1:9\nmax_connections = 5\nmax_connections = 6\n",
                 "test.conf:4: [listener a] max_connections: set twice (first on line 3)");
    expect_error("[upstream app]\nserver = 127.0.0.1:9\nbalance = hash_ip\nbalance = round_robin\n",
                 "test.conf:4: [upstream app] balance: set twice (first on line 3)");
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c,
                       "[upstream app]\nserver = 127.0.0.1:9\nserver = 127.0.0.1:10\n"
                       "[route /]\nhandler = text\nallow = 10.0.0.0/8\nallow = 127.0.0.1\n"
                       "header_add = X-A: 1\nheader_add = X-B: 2\n[route /b]\nhandler = text\n"
                       "allow = 10.0.0.0/8\n",
                       &err),
                 0, "the list keys repeat, and each route is its own: %s", err.msg);
}

/* inih would fold an indented line into the previous value; the reader strips the indent. */
Test(config, indented_lines_are_keys, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "[limits]\nmax_headers = 10\n    max_body_bytes = 5\n", &err), 0, "%s",
                 err.msg);
    cr_assert_eq(c.limits.max_headers, 10);
    cr_assert_eq(c.limits.max_body_bytes, 5);
}

Test(config, long_line, .timeout = 5)
{
    char text[600];
    int n = snprintf(text, sizeof(text), "[log]\naccess_log = /");
    memset(text + n, 'a', 300);
    snprintf(text + n + 300, sizeof(text) - (size_t)n - 300, "\nlevel = debug\n");
    expect_error(text, "test.conf:2: line longer than 198 characters");
}

Test(config, crlf_lines, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "[limits]\r\nmax_headers = 7\r\n", &err), 0, "%s", err.msg);
    cr_assert_eq(c.limits.max_headers, 7);
}

Test(config, set_overrides, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "[limits]\nmax_headers = 10\n", &err), 0);
    cr_assert_eq(md_config_set(&c, "limits.max_headers=20", &err), 0, "%s", err.msg);
    cr_assert_eq(c.limits.max_headers, 20);
    cr_assert_eq(md_config_set(&c, "echo.listen=", &err), 0, "%s", err.msg);
    cr_assert_not(c.listeners[MD_LISTENER_ECHO].listen[0].enabled);
    cr_assert_eq(md_config_set(&c, "http.listen=0.0.0.0:80", &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.listeners[MD_LISTENER_HTTP].listen[0].host, "0.0.0.0");
    cr_assert_eq(c.listeners[MD_LISTENER_HTTP].listen[0].port, 80);
    cr_assert_eq(md_config_set(&c, "log.access_log=./a=b.log", &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.log.access_log_path, "./a=b.log");
    /* A later --set of the same key wins; that is not a duplicate. */
    cr_assert_eq(md_config_set(&c, "limits.max_headers=30", &err), 0, "%s", err.msg);
    cr_assert_eq(c.limits.max_headers, 30);
}

Test(config, set_errors, .timeout = 5)
{
    md_config c;
    md_error err;
    md_config_init(&c);
    cr_assert_eq(md_config_set(&c, "limits.max_body_bytes=12x", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: [limits] max_body_bytes: expected an integer in "
                              "0..1073741824, got \"12x\"");
    cr_assert_eq(c.limits.max_body_bytes, 1048576, "a rejected value leaves the old one");
    cr_assert_eq(md_config_set(&c, "limits.nope=1", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: [limits] nope: unknown key");
    cr_assert_eq(md_config_set(&c, "nope.x=1", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: unknown section [nope]");
    cr_assert_eq(md_config_set(&c, "max_headers=1", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: expected section.key=value, got \"max_headers=1\"");
    cr_assert_eq(md_config_set(&c, "limits.max_headers", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: expected section.key=value, got \"limits.max_headers\"");
    cr_assert_eq(md_config_set(&c, ".x=1", &err), -EINVAL);
    cr_assert_eq(md_config_set(&c, "limits.=1", &err), -EINVAL);
}

Test(config, check_request_line_within_header_bytes, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "[limits]\nmax_header_bytes = 4096\nmax_request_line = 8192\n", &err),
                 0);
    cr_assert_eq(md_config_check(&c, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "test.conf:3: [limits] max_request_line: 8192 exceeds [limits] "
                              "max_header_bytes (4096), which counts the request line too");
    cr_assert_eq(md_config_set(&c, "limits.max_request_line=5000", &err), 0);
    cr_assert_eq(md_config_check(&c, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: [limits] max_request_line: 5000 exceeds [limits] "
                              "max_header_bytes (4096), which counts the request line too");
    cr_assert_eq(md_config_set(&c, "limits.max_request_line=4096", &err), 0);
    cr_assert_eq(md_config_check(&c, &err), 0);
}

Test(config, check_listeners_differ, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "[http]\nlisten = [::1]:9000\n[echo]\nlisten = [::1]:9000\n", &err), 0);
    cr_assert_eq(md_config_check(&c, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "test.conf:4: [echo] listen: [::1]:9000 is also [http] listen");
    /* Two ephemeral ports never collide. */
    cr_assert_eq(md_config_set(&c, "http.listen=[::1]:0", &err), 0);
    cr_assert_eq(md_config_set(&c, "echo.listen=[::1]:0", &err), 0);
    cr_assert_eq(md_config_check(&c, &err), 0);
}

/* A real file: messages carry the path as given. */
Test(config, load_file_errors_name_the_path, .timeout = 5)
{
    char path[] = "/tmp/magpied-test-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    cr_assert_not_null(f);
    fputs("[http]\nlisten = 127.0.0.1:0\n\n[limits]\nmax_body_bytes = 12x\n", f);
    fclose(f);
    md_config c;
    md_error err;
    cr_assert_eq(md_config_load(&c, path, &err), -EINVAL);
    char want[256];
    snprintf(want, sizeof(want),
             "%s:5: [limits] max_body_bytes: expected an integer in 0..1073741824, got \"12x\"",
             path);
    cr_assert_str_eq(err.msg, want);

    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("[http]\nlisten = 127.0.0.1:0\n", f);
    fclose(f);
    cr_assert_eq(md_config_load(&c, path, &err), 0, "%s", err.msg);
    cr_assert_eq(c.listeners[MD_LISTENER_HTTP].listen[0].port, 0);
    cr_assert_str_eq(c.source, path);
    unlink(path);
}

/* A NUL byte is an error on its line: fgets() and strlen() would hide the rest of the line
 * from the check (and from `cat`) and count lines wrong after it. */
Test(config, nul_bytes_are_errors, .timeout = 5)
{
    static const char one[] = "[limits]\nmax_headers = 7\0 junk\nmax_body_bytes = 5\n";
    static const char hidden[] = "[limits]\n; a comment\0\nmax_headers = 7\n";
    static const char start[] = "\0[limits]\nmax_headers = 7\n";
    static const char late[] = "[limits]\n\nmax_headers = 7\n\n\nmax_body_bytes = 5\0\n";
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse_n(&c, one, sizeof(one) - 1, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "test.conf:2: NUL byte: the file is not text");
    cr_assert_eq(parse_n(&c, hidden, sizeof(hidden) - 1, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "test.conf:2: NUL byte: the file is not text");
    cr_assert_eq(parse_n(&c, start, sizeof(start) - 1, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "test.conf:1: NUL byte: the file is not text");
    cr_assert_eq(parse_n(&c, late, sizeof(late) - 1, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "test.conf:6: NUL byte: the file is not text");

    /* 100,000 NULs are not an empty, valid file. */
    static char zeros[100000];
    cr_assert_eq(parse_n(&c, zeros, sizeof(zeros), &err), -EINVAL);
    cr_assert_str_eq(err.msg, "test.conf:1: NUL byte: the file is not text");
}

/* The reader stops at MD_CONFIG_FILE_MAX bytes, so an endless stream ends too. */
Test(config, stream_larger_than_the_cap, .timeout = 5)
{
    size_t len = MD_CONFIG_FILE_MAX + 1;
    char *text = malloc(len);
    cr_assert_not_null(text);
    memcpy(text, "[limits]\n", 9);
    for (size_t i = 9; i < len; i += 10)
        memcpy(text + i, "; comment\n", len - i < 10 ? len - i : 10);
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse_n(&c, text, len, &err), -EINVAL);
    char want[128];
    snprintf(want, sizeof(want), "test.conf:%zu: file larger than %d bytes",
             ((size_t)MD_CONFIG_FILE_MAX - 9) / 10 + 2, MD_CONFIG_FILE_MAX);
    cr_assert_str_eq(err.msg, want);
    /* Exactly at the cap is fine. */
    cr_assert_eq(parse_n(&c, text, len - 1, &err), 0, "%s", err.msg);
    free(text);
}

/* Only regular files: a device, a directory or a FIFO would never end or never be text. */
Test(config, load_regular_files_only, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(md_config_load(&c, "/dev/zero", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "/dev/zero: not a regular file");
    cr_assert_eq(md_config_load(&c, "/dev/null", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "/dev/null: not a regular file");
    cr_assert_eq(md_config_load(&c, "/tmp", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "/tmp: not a regular file");
    /* A FIFO: refused without waiting for a writer (an open(2) would wait for ever). */
    char fifo[] = "/tmp/magpied-fifo-XXXXXX";
    cr_assert_not_null(mkdtemp(fifo));
    char fpath[sizeof fifo + 8];
    snprintf(fpath, sizeof fpath, "%s/f", fifo);
    cr_assert_eq(mkfifo(fpath, 0600), 0);
    cr_assert_eq(md_config_load(&c, fpath, &err), -EINVAL);
    cr_assert(strstr(err.msg, ": not a regular file") != NULL, "%s", err.msg);
    unlink(fpath);
    rmdir(fifo);

    char path[] = "/tmp/magpied-test-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, MD_CONFIG_FILE_MAX + 1), 0);
    close(fd);
    cr_assert_eq(md_config_load(&c, path, &err), -EINVAL);
    char want[256];
    snprintf(want, sizeof(want), "%s: larger than %d bytes", path, MD_CONFIG_FILE_MAX);
    cr_assert_str_eq(err.msg, want);
    unlink(path);
}

/* One boolean grammar for every boolean key, in the file and in --set: on/off, yes/no,
 * true/false, 1/0, in any case; the error lists it. */
Test(config, booleans, .timeout = 5)
{
    static const char *const keys[][2] = {{"http", "reuseport"}, {"echo", "reuseport"}};
    static const char *const yes[] = {"on", "ON", "On", "yes", "YES", "true", "True", "1"};
    static const char *const no[] = {"off", "OFF", "no", "No", "false", "FALSE", "0"};
    static const char *const bad[] = {"2", "enable", "y", "onn", "o n", "01", "", "-1", "nein"};
    for (size_t k = 0; k < 2; k++) {
        bool want_http = k == 0;
        for (int v = 0; v < 2; v++) {
            const char *const *words = v ? yes : no;
            size_t n = v ? sizeof(yes) / sizeof(yes[0]) : sizeof(no) / sizeof(no[0]);
            for (size_t i = 0; i < n; i++) {
                char text[256], set[128];
                md_config c;
                md_error err = {{0}};
                snprintf(text, sizeof(text), "[%s]\n%s = %s\n", keys[k][0], keys[k][1], words[i]);
                cr_assert_eq(parse(&c, text, &err), 0, "%s", err.msg);
                bool got = want_http ? c.listeners[MD_LISTENER_HTTP].reuseport
                                     : c.listeners[MD_LISTENER_ECHO].reuseport;
                cr_assert_eq(got, v != 0, "%s", text);
                md_config_init(&c);
                c.listeners[MD_LISTENER_HTTP].reuseport = c.listeners[MD_LISTENER_ECHO].reuseport =
                    v == 0;
                snprintf(set, sizeof(set), "%s.%s=%s", keys[k][0], keys[k][1], words[i]);
                cr_assert_eq(md_config_set(&c, set, &err), 0, "%s", err.msg);
                got = want_http ? c.listeners[MD_LISTENER_HTTP].reuseport
                                : c.listeners[MD_LISTENER_ECHO].reuseport;
                cr_assert_eq(got, v != 0, "%s", set);
            }
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char text[256], want[256], set[128];
            snprintf(text, sizeof(text), "[%s]\n%s = %s\n", keys[k][0], keys[k][1], bad[i]);
            snprintf(want, sizeof(want),
                     "test.conf:2: [%s] %s: expected on, yes, true or 1, or off, no, false or 0 "
                     "(any case), got \"%s\"",
                     keys[k][0], keys[k][1], bad[i]);
            expect_error(text, want);
            md_config c;
            md_error err = {{0}};
            md_config_init(&c);
            snprintf(set, sizeof(set), "%s.%s=%s", keys[k][0], keys[k][1], bad[i]);
            cr_assert_eq(md_config_set(&c, set, &err), -EINVAL, "accepted: %s", set);
            snprintf(want, sizeof(want),
                     "--set: [%s] %s: expected on, yes, true or 1, or off, no, false or 0 "
                     "(any case), got \"%s\"",
                     keys[k][0], keys[k][1], bad[i]);
            cr_assert_str_eq(err.msg, want);
        }
    }
}

Test(config, echo_idle_timeout_range, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "[echo]\nidle_timeout_ms = 3600000\n", &err), 0, "%s", err.msg);
    cr_assert_eq(c.listeners[MD_LISTENER_ECHO].idle_timeout_ms, 3600000);
    expect_error("[echo]\nidle_timeout_ms = 3600001\n",
                 "test.conf:2: [echo] idle_timeout_ms: expected an integer in 0..3600000, got "
                 "\"3600001\"");
    cr_assert_eq(md_config_set(&c, "echo.idle_timeout_ms=250", &err), 0, "%s", err.msg);
    cr_assert_eq(c.listeners[MD_LISTENER_ECHO].idle_timeout_ms, 250);
}

/* [route] sections: repeated, each its own route; a file's routes replace the built-in four. */
Test(config, route_sections, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    const char *text = "[route = /]\nhandler = text\nbody = hi\n"
                       "[limits]\nmax_headers = 50\n"
                       "[route /a-path-longer-than-fifty-characters-which-inih-would-cut/x]\n"
                       "handler = redirect\nlocation = /y\n";
    cr_assert_eq(parse(&c, text, &err), 0, "%s", err.msg);
    cr_assert_eq(c.routes.n, 2);
    /* The handlers' options are theirs: the values are in them, as the handler keeps them. */
    cr_assert_not_null(memmem(c.routes.r[0].conf, sizeof c.routes.r[0].conf, "hi", 3));
    cr_assert_eq(c.routes.r[0].line, 1);
    cr_assert_str_eq(c.routes.r[1].path,
                     "/a-path-longer-than-fifty-characters-which-inih-would-cut/x");
    cr_assert_not_null(memmem(c.routes.r[1].conf, sizeof c.routes.r[1].conf, "/y", 3));
    cr_assert_eq(c.limits.max_headers, 50);
    cr_assert_null(md_routes_find(&c.routes, "/echo", 5), "the built-in routes are gone");
    /* Without any [route], the built-in four. */
    cr_assert_eq(parse(&c, "[limits]\nmax_headers = 50\n", &err), 0, "%s", err.msg);
    cr_assert_eq(c.routes.n, 4);
    cr_assert_not_null(md_routes_find(&c.routes, "/healthz", 8));
}

Test(config, route_errors_name_file_line_and_key, .timeout = 5)
{
    expect_error("[route /a]\nhandler = text\nbogus = 1\n",
                 "test.conf:3: [route /a] bogus: unknown key");
    expect_error("[route /a]\nbody = x\n",
                 "test.conf:2: [route /a] body: set handler first: the options that follow "
                 "belong to it");
    expect_error("[route = /r]\nhandler = redirect\n[log]\nlevel = info\n",
                 "test.conf:1: [route = /r] location: required for handler = redirect");
    expect_error("[route /a]\nhandler = text\n[route /a]\nhandler = echo\n",
                 "test.conf:3: [route /a]: the same route as line 1");
    expect_error("[route a]\nhandler = text\n",
                 "test.conf:1: [route a]: expected [route /path] or [route = /path]");
    expect_error("[route /a]\nhandler = text\nhandler = echo\n",
                 "test.conf:3: [route /a] handler: set twice (first on line 2)");
    md_config c;
    md_error err = {{0}};
    md_config_init(&c);
    cr_assert_eq(md_config_set(&c, "route /a.handler=text", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: [route /a]: routes are set in the file only");
}

/* The section registry (config.c's, over core/ini.c): each header goes to the section's
 * owner, and each error names the line and key that are wrong. */
Test(config, registry_unknown_sections, .timeout = 5)
{
    expect_error("[http]\n[routes = /]\n", "test.conf:2: unknown section [routes = /]");
    /* A repeating section's name alone, and a fixed one's with an argument, are no headers. */
    expect_error("[route]\nhandler = text\n", "test.conf:1: unknown section [route]");
    expect_error("[upstream]\n", "test.conf:1: unknown section [upstream]");
    expect_error("[limits x]\n", "test.conf:1: unknown section [limits x]");
    /* Names are case-sensitive, like the keys. */
    expect_error("[Limits]\n", "test.conf:1: unknown section [Limits]");
}

Test(config, registry_repeated_sections, .timeout = 5)
{
    md_config c;
    md_error err = {{0}};
    /* A section that does not repeat continues where it is written again... */
    cr_assert_eq(
        parse(&c, "[limits]\nmax_headers = 10\n[http]\n[limits]\nmax_body_bytes = 5\n", &err), 0,
        "%s", err.msg);
    cr_assert_eq(c.limits.max_headers, 10);
    cr_assert_eq(c.limits.max_body_bytes, 5);
    /* ... and a key it had is still set twice. */
    expect_error("[static]\nopen_file_cache_entries = 1\n[log]\n[static]\n"
                 "open_file_cache_entries = 2\n",
                 "test.conf:5: [static] open_file_cache_entries: set twice (first on line 2)");
    /* Each repeating section is one of its own: the same key in two routes is no repeat. */
    cr_assert_eq(parse(&c,
                       "[route = /a]\nhandler = text\nbody = a\n[route = /b]\nhandler = text\n"
                       "body = b\n",
                       &err),
                 0, "%s", err.msg);
    cr_assert_eq(c.routes.n, 2);
    expect_error("[route = /a]\nhandler = text\n[route = /a]\nhandler = echo\n",
                 "test.conf:3: [route = /a]: the same route as line 1");
    expect_error("[upstream app]\nserver = 127.0.0.1:9\n[upstream app]\nserver = 127.0.0.1:9\n",
                 "test.conf:3: [upstream app]: defined twice (first on line 1)");
}

Test(config, registry_a_key_of_another_section, .timeout = 5)
{
    expect_error("[http]\nmax_body_bytes = 1\n",
                 "test.conf:2: [http] max_body_bytes: unknown key (a key of [limits])");
    expect_error(
        "[http]\nmax_connections = 1\n",
        "test.conf:2: [http] max_connections: unknown key (a key of [echo], [limits] and [https])");
    expect_error("[limits]\nopen_file_cache_entries = 1\n",
                 "test.conf:2: [limits] open_file_cache_entries: unknown key (a key of [static])");
    expect_error("[route = /]\nhandler = text\nworkers = 2\n",
                 "test.conf:3: [route = /] workers: unknown key (a key of [runtime])");
    expect_error("[upstream app]\nserver = 127.0.0.1:9\nlevel = info\n",
                 "test.conf:3: [upstream app] level: unknown key (a key of [log])");
    /* A route's option in a section of its own is unknown there. */
    expect_error("[static]\nroot = /srv\n", "test.conf:2: [static] root: unknown key");
    md_config c;
    md_error err = {{0}};
    md_config_init(&c);
    cr_assert_eq(md_config_set(&c, "echo.max_body_bytes=1", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: [echo] max_body_bytes: unknown key (a key of [limits])");
}

Test(config, registry_a_bad_value_names_its_line, .timeout = 5)
{
    expect_error(
        "[http]\nlisten = 127.0.0.1:1\n\n[static]\n; the cache\nopen_file_cache_valid_ms = "
        "-1\n",
        "test.conf:6: [static] open_file_cache_valid_ms: expected an integer in "
        "0..3600000, got \"-1\"");
    expect_error("[route = /]\nhandler = text\n[upstream app]\nserver = 127.0.0.1:9\n"
                 "balance = x\n",
                 "test.conf:5: [upstream app] balance: expected round_robin, least_conn, hash_ip "
                 "or hash_header NAME, got \"x\"");
    expect_error("[log]\nlevel = info\naccess_format = xml\n",
                 "test.conf:3: [log] access_format: expected combined, json, or a template of "
                 "$fields, got \"xml\"");
    expect_error("[route /a]\nhandler = redirect\nstatus = 200\n",
                 "test.conf:3: [route /a] status: expected 301, 302, 303, 307 or 308, got \"200\"");
}

/* A bogus header right after a route is the error on its own line, not the route's missing
 * handler on the line before (what a configuration fuzzer found): whether it names no section,
 * or is no header at all. */
Test(config, registry_a_bogus_header_after_a_route, .timeout = 5)
{
    static const char *const bogus[] = {"[]", "[ssssssss]", "[sss", "[", "[route]"};
    for (size_t i = 0; i < sizeof bogus / sizeof bogus[0]; i++) {
        char text[128], want[256];
        snprintf(text, sizeof text, "[route = /metrics]\n%s\nhandler = metrics\n", bogus[i]);
        if (strchr(bogus[i], ']') != NULL)
            snprintf(want, sizeof want, "test.conf:2: unknown section %s", bogus[i]);
        else
            snprintf(want, sizeof want,
                     "test.conf:2: syntax error: expected [section], key = value, or a ; or # "
                     "comment");
        expect_error(text, want);
        /* The same after an upstream without a server. */
        snprintf(text, sizeof text, "[upstream app]\n%s\n", bogus[i]);
        expect_error(text, want);
    }
    /* With nothing wrong after it, the route's own error is on its header's line. */
    expect_error("[route = /metrics]\n\n[http]\n",
                 "test.conf:1: [route = /metrics] handler: required (text, echo, metrics, "
                 "health, redirect, static, proxy or https_redirect)");
}

/* listen takes several addresses; [listener NAME] adds listeners of its own. */
Test(config, listeners_several_addresses_and_named, .timeout = 5)
{
    md_config *c = malloc(sizeof *c);
    md_error err = {{0}};
    cr_assert_eq(parse(c,
                       "[http]\nlisten = 127.0.0.1:0, [::1]:0\n"
                       "[listener public]\nlisten = 0.0.0.0:8081 [::]:8081\ntls = on\n"
                       "max_connections = 5\ndefault_site = shop\n"
                       "[listener admin]\nlisten = 127.0.0.1:9000\n"
                       "[site shop]\nnames = shop.example\n",
                       &err),
                 0, "%s", err.msg);
    cr_assert_eq(md_config_check(c, &err), -EINVAL, "[https] has no certificate");
    cr_assert(strstr(err.msg, "certificate"), "%s", err.msg);
    const md_listener_config *h = &c->listeners[MD_LISTENER_HTTP];
    cr_assert_eq(h->listen[0].family, AF_INET);
    cr_assert_eq(h->listen[1].family, AF_INET6);
    cr_assert_str_eq(h->listen[1].host, "::1");
    cr_assert_not(h->listen[2].enabled);
    cr_assert_eq(c->nlisteners, MD_LISTENERS + 2);
    const md_listener_config *p = &c->listeners[MD_LISTENERS];
    cr_assert_str_eq(p->name, "public");
    cr_assert_eq(p->kind, MD_LISTENER_HTTPS);
    cr_assert_eq(p->max_connections, 5);
    cr_assert_str_eq(p->default_site, "shop");
    cr_assert_str_eq(p->listen[1].host, "::");
    cr_assert_eq(p->listen[1].port, 8081);
    const md_listener_config *a = &c->listeners[MD_LISTENERS + 1];
    cr_assert_eq(a->kind, MD_LISTENER_HTTP);
    cr_assert_eq(a->max_connections, 10000);
    free(c);
}

/* A file written for the magpied before named listeners and sites reads as it did. */
Test(config, old_files_read_unchanged, .timeout = 5)
{
    md_config *c = malloc(sizeof *c);
    md_error err = {{0}};
    cr_assert_eq(parse(c, "[http]\nlisten = 127.0.0.1:8080\n[route = /]\nhandler = health\n", &err),
                 0, "%s", err.msg);
    cr_assert_eq(md_config_check(c, &err), 0, "%s", err.msg);
    cr_assert_eq(c->nlisteners, MD_LISTENERS);
    cr_assert_eq(c->routes.nsites, 0);
    cr_assert_not(c->listeners[MD_LISTENER_HTTP].listen[1].enabled);
    free(c);
}

/* Whether [site a] takes hsts = value (a refusal names the key). */
static bool hsts_taken(const char *value)
{
    char text[200];
    snprintf(text, sizeof text, "[site a]\nhsts = %s\n", value);
    md_config c;
    md_error err = {{0}};
    if (parse(&c, text, &err) == 0)
        return true;
    cr_assert(strstr(err.msg, "hsts: expected") != NULL, "%s: %s", value, err.msg);
    return false;
}

Test(config, listener_and_site_errors_name_file_line_and_key, .timeout = 5)
{
    expect_error("[http]\nlisten = 127.0.0.1:1, 127.0.0.1:1\n",
                 "test.conf:2: [http] listen: \"127.0.0.1:1\" is named twice");
    expect_error("[http]\nlisten = 127.0.0.1:1 nowhere\n",
                 "test.conf:2: [http] listen: expected host:port with a numeric IPv4 address or "
                 "a [bracketed] IPv6 address and a port in 0..65535, got \"nowhere\"");
    expect_error("[http]\nlisten = 127.0.0.1:1,127.0.0.2:1,127.0.0.3:1,127.0.0.4:1,127.0.0.5:1,"
                 "127.0.0.6:1,127.0.0.7:1,127.0.0.8:1,127.0.0.9:1\n",
                 "test.conf:2: [http] listen: more than 8 addresses");
    expect_error("[listener http]\nlisten = 127.0.0.1:1\n",
                 "test.conf:1: [listener http]: \"http\" is the name of [http]'s listener");
    expect_error("[listener a b]\nlisten = 127.0.0.1:1\n",
                 "test.conf:1: [listener a b]: expected [listener NAME], NAME of [A-Za-z0-9_-] "
                 "(at most 31 bytes)");
    expect_error("[listener a]\nlisten = 127.0.0.1:1\n[listener a]\n",
                 "test.conf:3: [listener a]: a second [listener a] (the first on line 1)");
    expect_error("[listener a]\ntls = maybe\n",
                 "test.conf:2: [listener a] tls: expected on, yes, true or 1, or off, no, false "
                 "or 0 (any case), got \"maybe\"");
    expect_error("[listener a]\nmax_connections = 0\n",
                 "test.conf:2: [listener a] max_connections: expected an integer in 1..1000000, "
                 "got \"0\"");
    expect_error("[listener a]\nreuseport = on\n", "test.conf:1: [listener a] listen: required");
    expect_error("[listener a]\nlisten = 127.0.0.1:1\nnope = 1\n",
                 "test.conf:3: [listener a] nope: unknown key");
    expect_error("[site a.b]\n", "test.conf:1: [site a.b]: expected [site NAME], NAME of "
                                 "[A-Za-z0-9_-] (at most 31 bytes)");
    expect_error("[site a]\nnames = ex ample..com\n",
                 "test.conf:2: [site a] names: expected host names (example.com, "
                 "*.example.com), got \"ample..com\"");
    expect_error("[site a]\nnames = a.example\n[site b]\nnames = b.example A.example.\n",
                 "test.conf:4: [site b] names: \"a.example\" is also [site a]'s");
    expect_error("[site a]\ncertificate = /x.pem\n",
                 "test.conf:1: [site a] certificate_key: required with certificate");
    expect_error("[site a]\nhsts = 1 year\n",
                 "test.conf:2: [site a] hsts: expected a Strict-Transport-Security value (at "
                 "most 127 bytes: max-age=SECONDS and directives such as includeSubDomains, "
                 "separated by ';', none twice), got \"1 year\"");
    /* What a browser would ignore whole (RFC 6797 6.1): a bad max-age, a directive twice,
     * a ',' where ';' separates. */
    static const char *const bad_hsts[] = {
        "max-age=-1",     "max-age=1; max-age=2",
        "max-age=1, foo", "max-age=\"5\"x",
        "max-age=",       "max-age=1; includeSubDomains; includesubdomains",
        "max-age=1; =x",
    };
    for (size_t i = 0; i < sizeof bad_hsts / sizeof bad_hsts[0]; i++)
        cr_assert(!hsts_taken(bad_hsts[i]), "taken: %s", bad_hsts[i]);
    static const char *const good_hsts[] = {
        "max-age=31536000", "max-age=\"300\"; includeSubDomains",
        "Max-Age=0",        "max-age=63072000; includeSubDomains; preload",
        "max-age=1;",
    };
    for (size_t i = 0; i < sizeof good_hsts / sizeof good_hsts[0]; i++)
        cr_assert(hsts_taken(good_hsts[i]), "refused: %s", good_hsts[i]);
    expect_error("[site a]\n[route = /]\nhandler = health\n[site b]\n[route = /]\nhandler = "
                 "health\n[route = /]\nhandler = text\n",
                 "test.conf:7: [route = /]: the same route as line 5");
}

/* Checks across keys: an address in two listeners, a default_site no [site] has. */
Test(config, listener_checks_across_keys, .timeout = 5)
{
    md_config *c = malloc(sizeof *c);
    md_error err = {{0}};
    cr_assert_eq(parse(c,
                       "[http]\nlisten = 127.0.0.1:8080\n[listener b]\n\nlisten = [::1]:1, "
                       "127.0.0.1:8080\n",
                       &err),
                 0, "%s", err.msg);
    cr_assert_eq(md_config_check(c, &err), -EINVAL);
    cr_assert_str_eq(err.msg,
                     "test.conf:5: [listener b] listen: 127.0.0.1:8080 is also [http] listen");
    cr_assert_eq(parse(c, "[http]\nlisten = 127.0.0.1:8080\ndefault_site = shop\n", &err), 0);
    cr_assert_eq(md_config_check(c, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "test.conf:3: [http] default_site: no [site shop] in the file");
    cr_assert_eq(parse(c, "[listener x]\nlisten = 127.0.0.1:1\ndefault_site = s\n[site s]\n", &err),
                 0, "%s", err.msg);
    cr_assert_eq(md_config_check(c, &err), 0, "%s", err.msg);
    free(c);
}

/* [route] sections after a [site] are that site's; those before any are the default site's. */
Test(config, routes_belong_to_the_site_above, .timeout = 5)
{
    md_config *c = malloc(sizeof *c);
    md_error err = {{0}};
    cr_assert_eq(parse(c,
                       "[route = /]\nhandler = health\n"
                       "[site a]\nnames = a.example *.a.example\nhsts = max-age=60\n"
                       "[route = /]\nhandler = text\nbody = a\n"
                       "[route /only-a]\nhandler = health\n"
                       "[site b]\nnames = b.example\n",
                       &err),
                 0, "%s", err.msg);
    cr_assert_eq(md_config_check(c, &err), 0, "%s", err.msg);
    const md_route_table *t = &c->routes;
    cr_assert_eq(t->nsites, 3);
    cr_assert_str_eq(t->sites[1].names, "a.example *.a.example");
    cr_assert_str_eq(t->sites[1].hsts, "max-age=60");
    cr_assert_eq(md_routes_find_in(t, 0, "/", 1)->site, 0);
    cr_assert_str_eq(md_routes_find_in(t, 1, "/", 1)->handler->name, "text");
    cr_assert_not_null(md_routes_find_in(t, 1, "/only-a/x", 9));
    cr_assert_null(md_routes_find_in(t, 0, "/only-a", 7), "another site's route");
    cr_assert_null(md_routes_find_in(t, 2, "/", 1), "a site without routes answers 404");
    free(c);
}
