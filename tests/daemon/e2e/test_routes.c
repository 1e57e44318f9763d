/* End-to-end tests of configured routes against a real magpied: prefix and exact routes, the
 * handlers' options, 405 with Allow and OPTIONS from the table, the request-path rules on the
 * wire (raw sockets: curl would normalise the path itself), allow and deny by the client's
 * address (a client bound to 127.0.0.2 beside 127.0.0.1), and a SIGHUP that swaps the table.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"
#include "test_net.h"

static char dir[64];

static void make_dir(void)
{
    harness_dir_make(dir, sizeof dir, "routes");
}

static void remove_dir(void)
{
    harness_dir_remove(dir);
}

TestSuite(routes_e2e, .init = make_dir, .fini = remove_dir, .timeout = 60);

#define HEAD_CONF "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"

static const char *const routes_conf =
    HEAD_CONF "[route /]\nhandler = text\nstatus = 404\nbody = nothing here\n"
              "[route /docs]\nhandler = text\nbody = docs\ncontent_type = text/html\n"
              "[route = /docs/exact]\nhandler = text\nbody = exact\n"
              "[route /old]\nhandler = redirect\nstatus = 301\nlocation = https://example.com/new\n"
              "[route = /up]\nhandler = echo\nmethods = PUT, POST\n"
              "[route = /healthz]\nhandler = health\n";

/* One request on a new connection, asking for its close; the whole response. */
static char *ask(int port, const char *req)
{
    static char resp[8192];
    int fd = test_connect(port);
    test_write_all(fd, req, strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    return resp;
}

static char *get(int port, const char *target)
{
    char req[512];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target);
    return ask(port, req);
}

static void expect(const char *resp, const char *status, const char *part)
{
    cr_expect(strncmp(resp, status, strlen(status)) == 0, "want %s, got: %s", status, resp);
    if (part != NULL)
        cr_expect(strstr(resp, part) != NULL, "no \"%s\" in: %s", part, resp);
}

Test(routes_e2e, prefix_exact_and_handlers)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    harness_write_file(conf, routes_conf);
    daemon_proc d = start_with(conf, NULL, NULL);
    expect(get(d.http, "/"), "HTTP/1.1 404", "\r\n\r\nnothing here");
    expect(get(d.http, "/docs"), "HTTP/1.1 200", "Content-Type: text/html\r\n");
    expect(get(d.http, "/docs/a/b?q=1"), "HTTP/1.1 200", "\r\n\r\ndocs");
    expect(get(d.http, "/docsx"), "HTTP/1.1 404", "nothing here");
    expect(get(d.http, "/docs/exact"), "HTTP/1.1 200", "\r\n\r\nexact");
    expect(get(d.http, "/docs/exact/"), "HTTP/1.1 200", "\r\n\r\ndocs");
    expect(get(d.http, "/old/page"), "HTTP/1.1 301", "Location: https://example.com/new\r\n");
    expect(get(d.http, "/healthz"), "HTTP/1.1 200", "\r\n\r\nok");
    expect(get(d.http, "http://x/docs"), "HTTP/1.1 200", "\r\n\r\ndocs");

    /* Methods: 405 with Allow; OPTIONS from the route and from the whole table. */
    expect(ask(d.http, "DELETE /docs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
           "HTTP/1.1 405", "Allow: GET, HEAD, OPTIONS\r\n");
    expect(ask(d.http, "GET /up HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), "HTTP/1.1 405",
           "Allow: POST, PUT, OPTIONS\r\n");
    expect(ask(d.http, "OPTIONS /up HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
           "HTTP/1.1 200", "Allow: POST, PUT, OPTIONS\r\n");
    expect(ask(d.http, "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
           "HTTP/1.1 200", "Allow: GET, HEAD, POST, PUT, OPTIONS\r\n");
    expect(ask(d.http, "PUT /up HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       "Content-Length: 5\r\n\r\nhello"),
           "HTTP/1.1 200", "\r\n\r\nhello");
    cr_assert_eq(stop(&d), 0);
}

/* The request-path rules on the wire: decoded, normalised, and the forbidden shapes 400. */
Test(routes_e2e, path_rules)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    harness_write_file(conf, routes_conf);
    daemon_proc d = start_with(conf, NULL, NULL);
    expect(get(d.http, "/x/../docs"), "HTTP/1.1 200", "\r\n\r\ndocs");
    expect(get(d.http, "/x/%2e%2e/docs"), "HTTP/1.1 200", "\r\n\r\ndocs");
    expect(get(d.http, "//docs//a"), "HTTP/1.1 200", "\r\n\r\ndocs");
    expect(get(d.http, "/./docs/./exact"), "HTTP/1.1 200", "\r\n\r\nexact");
    expect(get(d.http, "/%64ocs"), "HTTP/1.1 200", "\r\n\r\ndocs");
    /* An escaped slash is a slash to the route lookup. */
    expect(get(d.http, "/docs%2fexact"), "HTTP/1.1 200", "\r\n\r\nexact");
    expect(get(d.http, "/x%2F..%2Fdocs"), "HTTP/1.1 200", "\r\n\r\ndocs");
    const char *bad[] = {"/..",       "/docs/../..", "/%2e%2e/docs", "/docs%2f..%2f..",
                         "/docs%00",  "/docs%5c..",  "/docs\\x",     "/docs#frag",
                         "/docs/%zz", "/docs/%4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect(get(d.http, bad[i]), "HTTP/1.1 400", NULL);
    /* The daemon still serves after every one of them. */
    expect(get(d.http, "/healthz"), "HTTP/1.1 200", "ok");
    cr_assert_eq(stop(&d), 0);
}

/* Today's `GET /path#frag` shape with the shipped configuration: 400, not 404. */
Test(routes_e2e, fragment_is_400_with_the_shipped_config)
{
    daemon_proc d = start(NULL);
    expect(get(d.http, "/path#frag"), "HTTP/1.1 400", NULL);
    expect(get(d.http, "/#"), "HTTP/1.1 400", NULL);
    expect(get(d.http, "/"), "HTTP/1.1 200", "Hello, World!");
    cr_assert_eq(stop(&d), 0);
}

Test(routes_e2e, reload_swaps_the_table_and_a_bad_one_keeps_it)
{
    char conf[128], err[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(err, sizeof err, "%s/error.log", dir);
    harness_write_file(conf, routes_conf);
    daemon_proc d = start_with(conf, NULL, err);
    expect(get(d.http, "/docs"), "HTTP/1.1 200", "docs");
    harness_write_file(conf, HEAD_CONF "[route = /]\nhandler = text\nbody = v2\n");
    kill(d.pid, SIGHUP);
    int code = 0;
    for (int i = 0; i < 250 && (code = http_status(d.http, "/docs")) != 404; i++)
        usleep(20000);
    cr_assert_eq(code, 404, "the old table's /docs still answers");
    expect(get(d.http, "/"), "HTTP/1.1 200", "\r\n\r\nv2");
    /* A route without its handler's required option: the reload fails, the table stays. */
    harness_write_file(conf, HEAD_CONF "[route /r]\nhandler = redirect\n");
    kill(d.pid, SIGHUP);
    cr_assert(file_has(err, "location: required for handler = redirect", 5000));
    expect(get(d.http, "/"), "HTTP/1.1 200", "\r\n\r\nv2");
    cr_assert_eq(http_status(d.http, "/r"), 404);
    cr_assert_eq(stop(&d), 0);
}

Test(routes_e2e, config_check_names_file_line_and_key)
{
    char conf[128], cmd[PATH_MAX + 256], exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    snprintf(conf, sizeof conf, "%s/bad.conf", dir);
    harness_write_file(conf, HEAD_CONF "[route /a]\nhandler = text\nstatus = 299\n");
    snprintf(cmd, sizeof cmd, "%s -t -c %s 2>&1; echo rc=$?", exe, conf);
    char *out = run(cmd);
    cr_assert(strstr(out, "bad.conf:9: [route /a] status: expected a status"), "%s", out);
    cr_assert(strstr(out, "rc=1"), "%s", out);
    harness_write_file(conf, HEAD_CONF "[route /a]\nbody = x\n");
    out = run(cmd);
    cr_assert(strstr(out, "bad.conf:8: [route /a] body: set handler first"), "%s", out);
    harness_write_file(conf, HEAD_CONF "[route /a]\nhandler = text\n[route /a]\nhandler = echo\n");
    out = run(cmd);
    cr_assert(strstr(out, "bad.conf:9: [route /a]: the same route as line 7"), "%s", out);
    harness_write_file(conf, HEAD_CONF "[route /a]\nhandler = text\nlimit_rate = 10/h\n");
    out = run(cmd);
    cr_assert(strstr(out, "bad.conf:9: [route /a] limit_rate: expected N/s or N/m"), "%s", out);
}

/* A request from 127.0.0.2 to port, on a new connection asking for its close. */
static char *get_from_127_0_0_2(int port, const char *target)
{
    static char resp[8192];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&from, sizeof from), 0, "bind 127.0.0.2");
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    char req[512];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target);
    test_write_all(fd, req, strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    return resp;
}

/* allow and deny by the client's address: the first rule that matches decides, 403 before the
 * handler (and before 405), the connection kept; routes without rules answer everyone. */
Test(routes_e2e, allow_and_deny_by_client_address)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    harness_write_file(conf,
                       HEAD_CONF "[route = /only2]\nhandler = text\nbody = two\n"
                                 "allow = 127.0.0.2\ndeny = all\n"
                                 "[route = /not2]\nhandler = text\nbody = not two\n"
                                 "deny = 127.0.0.2/32\n"
                                 "[route = /metrics]\nhandler = metrics\nallow = 127.0.0.0/8, ::1\n"
                                 "deny = all\n");
    daemon_proc d = start_with(conf, NULL, NULL);
    expect(get(d.http, "/only2"), "HTTP/1.1 403", NULL);
    expect(get_from_127_0_0_2(d.http, "/only2"), "HTTP/1.1 200", "\r\n\r\ntwo");
    expect(get(d.http, "/not2"), "HTTP/1.1 200", "\r\n\r\nnot two");
    expect(get_from_127_0_0_2(d.http, "/not2"), "HTTP/1.1 403", NULL);
    expect(get(d.http, "/metrics"), "HTTP/1.1 200", "magpied_");
    /* 403 before 405: a refused client learns nothing of the route's methods. */
    expect(ask(d.http, "DELETE /only2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
           "HTTP/1.1 403", NULL);
    /* A refused request keeps its connection: the next one on it is answered. */
    char resp[8192];
    int fd = test_connect(d.http);
    const char *two = "GET /only2 HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /not2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    test_write_all(fd, two, strlen(two));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    expect(resp, "HTTP/1.1 403", "HTTP/1.1 200 OK");
    cr_expect(strstr(resp, "not two") != NULL, "%s", resp);
    cr_assert_eq(stop(&d), 0);
}

/* A file without routes serves the built-in four, /echo and /metrics to loopback clients
 * (127.0.0.0/8 and ::1: 127.0.0.2 too). That others are refused is test_routes.c's and
 * test_acl.c's (no other address reaches this machine's loopback listener). */
Test(routes_e2e, builtin_metrics_and_echo_answer_loopback_clients)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    harness_write_file(conf, HEAD_CONF);
    daemon_proc d = start_with(conf, NULL, NULL);
    expect(get(d.http, "/metrics"), "HTTP/1.1 200", "magpied_");
    expect(get_from_127_0_0_2(d.http, "/metrics"), "HTTP/1.1 200", "magpied_");
    expect(ask(d.http, "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       "Content-Length: 2\r\n\r\nhi"),
           "HTTP/1.1 200", "\r\n\r\nhi");
    expect(get(d.http, "/"), "HTTP/1.1 200", "Hello, World!");
    cr_assert_eq(stop(&d), 0);
}

/* limit_rate per client: past the rate and burst, 429 with Retry-After before the handler, the
 * connection kept, another client untouched, and the refusals counted per route. */
Test(routes_e2e, limit_rate_per_client)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    harness_write_file(conf, HEAD_CONF "[route = /slow]\nhandler = text\nbody = ok\n"
                                       "limit_rate = 1/m\nlimit_burst = 1\n"
                                       "[route = /metrics]\nhandler = metrics\n");
    daemon_proc d = start_with(conf, NULL, NULL);
    expect(get(d.http, "/slow"), "HTTP/1.1 200", "\r\n\r\nok");
    expect(get(d.http, "/slow"), "HTTP/1.1 200", "\r\n\r\nok");
    char *r = get(d.http, "/slow");
    expect(r, "HTTP/1.1 429 Too Many Requests", "\r\nRetry-After: ");
    int retry = 0;
    const char *ra = strstr(r, "\r\nRetry-After: ");
    cr_assert(ra != NULL && sscanf(ra, "\r\nRetry-After: %d", &retry) == 1, "%s", r);
    cr_assert(retry >= 1 && retry <= 60, "Retry-After: %d", retry);
    expect(get_from_127_0_0_2(d.http, "/slow"), "HTTP/1.1 200", "\r\n\r\nok");
    /* A refused request keeps its connection (and a POST's body is read and dropped). */
    char resp[8192];
    int fd = test_connect(d.http);
    const char *two = "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                      "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    test_write_all(fd, two, strlen(two));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    expect(resp, "HTTP/1.1 429", "HTTP/1.1 200 OK");
    cr_expect(strstr(resp, "magpied_route_rate_limited_total{route=\"= /slow\"} 2\n") != NULL, "%s",
              resp);
    cr_expect(strstr(resp, "magpied_route_responses_total{route=\"= /slow\",code=\"2xx\"} 3\n") !=
                  NULL,
              "%s", resp);
    cr_assert_eq(stop(&d), 0);
}

/* bob:pw and ann:pw2, sha512-crypt (openssl passwd -6 -salt saltsalt ...). */
#define BOB_PW                                                                                     \
    "bob:$6$saltsalt$pauPrmdmG4BTE9h2HPmywiw152IFch6BJCEsaY6D.PLTfpV8sqvXwWdyfsgVgozkYH9B80bAip/"  \
    "08R2BPH2xk/\n"

#define ANN_PW2                                                                                    \
    "ann:$6$saltsalt$6GEUHm13yvEfDVKKaP4rrIOwpxslwzty0iGy."                                        \
    "28VWwekxwdiBykljm02m5JmMYSJccJGgUuHLfD6Oo"                                                    \
    "h02E8wt0\n"

static char *get_auth(int port, const char *target, const char *authorization)
{
    char req[512];
    snprintf(req, sizeof req,
             "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nConnection: close\r\n\r\n", target,
             authorization);
    return ask(port, req);
}

/* auth_basic against a users file: 401 with the challenge, a user in (bcrypt made by the
 * daemon's own libxcrypt is covered by the unit suite; here a file as openssl writes it),
 * keep-alive requests answered from the cache, a SIGHUP that reads the file again, and
 * `magpied -t` naming the file's bad line. */
Test(routes_e2e, auth_basic_per_route_and_reloaded_with_its_file)
{
    char conf[128], users[128], err[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(users, sizeof users, "%s/users", dir);
    snprintf(err, sizeof err, "%s/error.log", dir);
    harness_write_file(users, BOB_PW);
    char text[1024];
    snprintf(text, sizeof text,
             HEAD_CONF "[route /]\nhandler = text\nbody = open\n"
                       "[route /private]\nhandler = text\nbody = secret\nauth_basic = Staff area\n"
                       "auth_basic_user_file = %s\n",
             users);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, err);
    expect(get(d.http, "/"), "HTTP/1.1 200", "open");
    expect(get(d.http, "/private/x"), "HTTP/1.1 401",
           "\r\nWWW-Authenticate: Basic realm=\"Staff area\", charset=\"UTF-8\"\r\n");
    expect(get_auth(d.http, "/private", "Basic Ym9iOndyb25n"), "HTTP/1.1 401",
           NULL); /* bob:wrong */
    expect(get_auth(d.http, "/private", "Basic Ym9iOnB3"), "HTTP/1.1 200", "\r\n\r\nsecret");
    /* Three on one connection, pipelined: each answered. */
    const char one[] = "GET /private HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Ym9iOnB3\r\n\r\n";
    char three[sizeof one * 3 + 64];
    snprintf(three, sizeof three, "%s%s%s", one, one,
             "GET /private HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Ym9iOnB3\r\n"
             "Connection: close\r\n\r\n");
    char *resp = ask(d.http, three);
    int n = 0;
    for (char *p = resp; (p = strstr(p, "\r\n\r\nsecret")) != NULL; p++)
        n++;
    cr_assert_eq(n, 3, "%s", resp);

    /* The file changes: a SIGHUP reads it again; bob is gone, ann is in. */
    harness_write_file(users, ANN_PW2);
    kill(d.pid, SIGHUP);
    int code = 0;
    for (int i = 0; i < 250; i++) {
        resp = get_auth(d.http, "/private", "Basic Ym9iOnB3");
        if (strncmp(resp, "HTTP/1.1 401", 12) == 0) {
            code = 401;
            break;
        }
        usleep(20000);
    }
    cr_assert_eq(code, 401, "bob still let in after the reload");
    expect(get_auth(d.http, "/private", "Basic YW5uOnB3Mg=="), "HTTP/1.1 200", "secret");
    /* A bad line: the reload fails and says where; the running file stays. */
    harness_write_file(users, ANN_PW2 "bob:plain\n");
    kill(d.pid, SIGHUP);
    char want[200];
    snprintf(want, sizeof want, "%s:2: not a bcrypt", users);
    cr_assert(file_has(err, want, 5000));
    expect(get_auth(d.http, "/private", "Basic YW5uOnB3Mg=="), "HTTP/1.1 200", "secret");
    cr_assert_eq(stop(&d), 0);

    char cmd[PATH_MAX + 256], exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "%s -t -c %s 2>&1; echo rc=$?", exe, conf);
    char *out = run(cmd);
    snprintf(want, sizeof want,
             "magpied.conf:14: [route /private] auth_basic_user_file: %s:2:", users);
    cr_assert(strstr(out, want), "%s", out);
    cr_assert(strstr(out, "rc=1"), "%s", out);
    unlink(users);
    out = run(cmd);
    cr_assert(strstr(out, "cannot read: No such file or directory"), "%s", out);
    cr_assert(strstr(out, "rc=1"), "%s", out);
}

/* header_add, header_set, header_remove on a static route and a redirect, and header_always. */
Test(routes_e2e, header_rules_per_route)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    harness_write_file(conf, HEAD_CONF "[route /]\nhandler = text\nbody = open\n"
                                       "header_add = X-Frame-Options: DENY\n"
                                       "header_add = Content-Security-Policy: default-src 'self'\n"
                                       "[route /old]\nhandler = redirect\nlocation = /new\n"
                                       "header_set = Cache-Control: no-store\n"
                                       "[route /gone]\nhandler = text\nstatus = 404\nbody = gone\n"
                                       "header_add = X-Why: moved\nheader_always = on\n"
                                       "[route /quiet]\nhandler = text\nstatus = 404\nbody = gone\n"
                                       "header_add = X-Why: moved\n");
    daemon_proc d = start_with(conf, NULL, NULL);
    char *resp = get(d.http, "/");
    expect(resp, "HTTP/1.1 200", "\r\nX-Frame-Options: DENY\r\n");
    expect(resp, "HTTP/1.1 200", "\r\nContent-Security-Policy: default-src 'self'\r\n");
    /* A keep-alive GET of a text route is its thread's canned response: the fields are in. */
    resp = ask(d.http, "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n"
                       "Connection: close\r\n\r\n");
    const char *second = strstr(resp + 1, "HTTP/1.1 200");
    cr_assert_not_null(second, "%s", resp);
    const char xfo[] = "\r\nX-Frame-Options: DENY\r\n";
    cr_assert(memmem(resp, (size_t)(second - resp), xfo, sizeof xfo - 1), "%s", resp);
    cr_assert(strstr(second, xfo), "%s", resp);
    expect(get(d.http, "/old"), "HTTP/1.1 302", "\r\nCache-Control: no-store\r\n");
    expect(get(d.http, "/gone"), "HTTP/1.1 404", "\r\nX-Why: moved\r\n");
    resp = get(d.http, "/quiet");
    expect(resp, "HTTP/1.1 404", NULL);
    cr_assert_null(strstr(resp, "X-Why"), "%s", resp);
    cr_assert_eq(stop(&d), 0);

    char cmd[PATH_MAX + 256], exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    harness_write_file(conf, HEAD_CONF "[route /]\nhandler = text\nheader_add = Bad Name: x\n");
    snprintf(cmd, sizeof cmd, "%s -t -c %s 2>&1; echo rc=$?", exe, conf);
    char *out = run(cmd);
    cr_assert(strstr(out, "magpied.conf:9: [route /] header_add: expected \"Name: value\""), "%s",
              out);
    harness_write_file(conf,
                       HEAD_CONF "[route /]\nhandler = text\nheader_set = Content-Length: 1\n");
    out = run(cmd);
    cr_assert(strstr(out, "header_set: \"Content-Length\" is written by magpied itself"), "%s",
              out);
}

/* req sent from the loopback address from (host order), on a new connection; the response. */
static char *ask_from(int port, uint32_t from_addr, const char *req)
{
    static char resp[8192];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(from_addr)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&from, sizeof from), 0, "bind");
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    test_write_all(fd, req, strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    return resp;
}

static char *get_xff(int port, uint32_t from_addr, const char *xff)
{
    char req[1024];
    snprintf(req, sizeof req,
             "GET /inner HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\nConnection: close\r\n\r\n",
             xff);
    return ask_from(port, from_addr, req);
}

/* real_ip behind a trusted balancer (127.0.0.1 here; 127.0.0.2 plays a client that is not
 * one): allow and deny and the access log see the rightmost untrusted address. */
Test(routes_e2e, real_ip_from_a_trusted_balancer)
{
    char conf[128], log[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(log, sizeof log, "%s/access.log", dir);
    char text[1024];
    snprintf(text, sizeof text,
             HEAD_CONF "[log]\naccess_log = %s\n"
                       "[route /inner]\nhandler = text\nbody = inner\n"
                       "real_ip_from = 127.0.0.1, 10.0.0.0/8\nreal_ip_header = X-Forwarded-For\n"
                       "allow = 203.0.113.0/24\ndeny = all\n",
             log);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);
    expect(get_xff(d.http, 0x7f000001, "203.0.113.5"), "HTTP/1.1 200", "inner");
    expect(get_xff(d.http, 0x7f000001, "198.51.100.1"), "HTTP/1.1 403", NULL);
    expect(get_xff(d.http, 0x7f000001, "203.0.113.5, 198.51.100.1"), "HTTP/1.1 403", NULL);
    expect(get_xff(d.http, 0x7f000001, "198.51.100.1, 203.0.113.9, 10.1.2.3"), "HTTP/1.1 200",
           NULL);
    /* Not from the balancer: its own address, whatever it says. */
    expect(get_xff(d.http, 0x7f000002, "203.0.113.5"), "HTTP/1.1 403", NULL);
    /* A long forged list in front: the hops on the right are the ones kept. */
    char longer[700];
    size_t n = 0;
    while (n < 500)
        n += (size_t)snprintf(longer + n, sizeof longer - n, "203.0.113.%zu, ", n % 200);
    snprintf(longer + n, sizeof longer - n, "198.51.100.66");
    expect(get_xff(d.http, 0x7f000001, longer), "HTTP/1.1 403", NULL);
    n = (size_t)snprintf(longer, sizeof longer, "%s", "198.51.100.1");
    while (n < 500)
        n += (size_t)snprintf(longer + n, sizeof longer - n, ", 10.0.0.%zu", n % 200);
    snprintf(longer + n, sizeof longer - n, ", 203.0.113.77");
    expect(get_xff(d.http, 0x7f000001, longer), "HTTP/1.1 200", NULL);
    cr_assert(file_has(log, "203.0.113.77 ", 5000), "the log shows the client's address");
    cr_assert_eq(stop(&d), 0);
}

/* A redirect that keeps the request: the path below the route's prefix replaced, the query. */
Test(routes_e2e, redirect_keeps_path_and_query)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    harness_write_file(conf,
                       HEAD_CONF "[route /old]\nhandler = redirect\nstatus = 308\n"
                                 "location = https://example.com/new\nkeep_path = on\n"
                                 "keep_query = on\n"
                                 "[route /docs/]\nhandler = redirect\nlocation = /manual/\n"
                                 "keep_path = on\n"
                                 "[route /q]\nhandler = redirect\nlocation = /search?src=old\n"
                                 "keep_query = on\n"
                                 "[route /fixed]\nhandler = redirect\nlocation = /there\n");
    daemon_proc d = start_with(conf, NULL, NULL);
    expect(get(d.http, "/old"), "HTTP/1.1 308", "\r\nLocation: https://example.com/new\r\n");
    expect(get(d.http, "/old/a/b?x=1&y=%20"), "HTTP/1.1 308",
           "\r\nLocation: https://example.com/new/a/b?x=1&y=%20\r\n");
    expect(get(d.http, "/old/a%20b/../c"), "HTTP/1.1 308",
           "\r\nLocation: https://example.com/new/c\r\n");
    expect(get(d.http, "/old/sp%20ace"), "HTTP/1.1 308",
           "\r\nLocation: https://example.com/new/sp%20ace\r\n");
    expect(get(d.http, "/docs/guide/intro?lang=en"), "HTTP/1.1 302",
           "\r\nLocation: /manual/guide/intro\r\n");
    expect(get(d.http, "/q/x?term=cats"), "HTTP/1.1 302",
           "\r\nLocation: /search?src=old&term=cats\r\n");
    expect(get(d.http, "/fixed/x?y=1"), "HTTP/1.1 302", "\r\nLocation: /there\r\n");
    cr_assert_eq(stop(&d), 0);
}

/* error_page: a file (read per generation) or text as the body of the route's errors, the
 * status kept; a static 404, a refusal's 403, and magpied -t on a missing page. */
Test(routes_e2e, error_pages_per_route)
{
    char conf[128], page[128], root[128], err[128];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(page, sizeof page, "%s/404.html", dir);
    snprintf(root, sizeof root, "%s/www", dir);
    snprintf(err, sizeof err, "%s/error.log", dir);
    mkdir(root, 0755);
    harness_write_file(page, "<h1>nothing here</h1>\n");
    char text[1024];
    snprintf(text, sizeof text,
             HEAD_CONF "[route /files]\nhandler = static\nroot = %s\nerror_page = 404 %s\n"
                       "[route /staff]\nhandler = text\nbody = x\nallow = 10.0.0.0/8\n"
                       "deny = all\nerror_page = 403 staff only, sorry\n",
             root, page);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, err);
    char *resp = get(d.http, "/files/missing");
    expect(resp, "HTTP/1.1 404",
           "Content-Type: text/html\r\nContent-Length: 22\r\n\r\n"
           "<h1>nothing here</h1>\n");
    expect(get(d.http, "/staff"), "HTTP/1.1 403",
           "Content-Type: text/plain\r\nContent-Length: 17\r\n\r\nstaff only, sorry");
    expect(ask(d.http, "HEAD /files/missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
           "HTTP/1.1 404", "Content-Length: 22\r\n\r\n");
    /* The page is read again at a reload. */
    harness_write_file(page, "<p>gone</p>\n");
    kill(d.pid, SIGHUP);
    bool changed = false;
    for (int i = 0; i < 250 && !changed; i++) {
        changed = strstr(get(d.http, "/files/missing"), "<p>gone</p>") != NULL;
        if (!changed)
            usleep(20000);
    }
    cr_assert(changed, "the old page after the reload");
    cr_assert_eq(stop(&d), 0);

    unlink(page);
    char cmd[PATH_MAX + 256], exe[PATH_MAX + 32], want[256];
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "%s -t -c %s 2>&1; echo rc=$?", exe, conf);
    char *out = run(cmd);
    snprintf(want, sizeof want, "magpied.conf:10: [route /files] error_page: %s: cannot read",
             page);
    cr_assert(strstr(out, want), "%s", out);
    cr_assert(strstr(out, "rc=1"), "%s", out);
    harness_write_file(conf, HEAD_CONF "[route /]\nhandler = text\nerror_page = 299 x\n");
    out = run(cmd);
    cr_assert(strstr(out, "[route /] error_page: expected STATUS PAGE"), "%s", out);
}

/* try_html and fallback: PATH, PATH.html, then /index.html, each opened beneath the root. */
Test(routes_e2e, static_try_html_and_fallback)
{
    char conf[128], root[128], f[192];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(root, sizeof root, "%s/site", dir);
    mkdir(root, 0755);
    snprintf(f, sizeof f, "%s/index.html", root);
    harness_write_file(f, "app shell\n");
    snprintf(f, sizeof f, "%s/about.html", root);
    harness_write_file(f, "about page\n");
    snprintf(f, sizeof f, "%s/data.json", root);
    harness_write_file(f, "{}\n");
    char text[1024];
    snprintf(text, sizeof text,
             HEAD_CONF "[route /]\nhandler = static\nroot = %s\ntry_html = on\n"
                       "fallback = /index.html\n",
             root);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, NULL);
    expect(get(d.http, "/data.json"), "HTTP/1.1 200", "\r\n\r\n{}\n");
    expect(get(d.http, "/about"), "HTTP/1.1 200", "Content-Type: text/html");
    expect(get(d.http, "/about?x=1"), "HTTP/1.1 200", "\r\n\r\nabout page\n");
    expect(get(d.http, "/users/42/edit"), "HTTP/1.1 200", "\r\n\r\napp shell\n");
    expect(get(d.http, "/missing/"), "HTTP/1.1 200", "\r\n\r\napp shell\n");
    expect(get(d.http, "/.hidden"), "HTTP/1.1 404", NULL);
    cr_assert_eq(stop(&d), 0);

    char cmd[PATH_MAX + 256], exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    snprintf(text, sizeof text,
             HEAD_CONF "[route /]\nhandler = static\nroot = %s\nfallback = /../etc/passwd\n", root);
    harness_write_file(conf, text);
    snprintf(cmd, sizeof cmd, "%s -t -c %s 2>&1; echo rc=$?", exe, conf);
    char *out = run(cmd);
    cr_assert(strstr(out, "[route /] fallback: expected a file's path below the root"), "%s", out);
}
