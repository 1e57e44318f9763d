/* End-to-end tests of proxy_protocol on a listener: a raw client plays the balancer (bound to
 * 127.0.0.2, the listener's proxy_protocol_from) and sends a v1 or v2 header, then its request;
 * the carried address is what a route's allow and deny rules judge, what the access log
 * shows and what the proxy forwards in X-Forwarded-For (the test upstream echoes the request
 * it got). A peer outside proxy_protocol_from, a malformed header and a slow one are closed
 * and counted by reason in /metrics (asked on a second listener without the header), and a
 * slow header holds nobody else up. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/e2e/proxy_harness.h"
#include "daemon/tls_pki.h"

static char dir[64];

static void make_dir(void)
{
    harness_dir_make(dir, sizeof dir, "proxyproto");
}

static void remove_dir(void)
{
    harness_dir_remove(dir);
}

TestSuite(proxy_protocol_e2e, .init = make_dir, .fini = remove_dir, .timeout = 90);

#define BALANCER 0x7f000002 /* 127.0.0.2 */
#define STRANGER 0x7f000001 /* 127.0.0.1 */

typedef struct pp_daemon {
    daemon_proc d;
    upstream_proc u;
    int plain; /* [listener plain]: no header, for /metrics */
    char log[128];
} pp_daemon;

static void pp_start(pp_daemon *p)
{
    static char err[128]; /* d.err_path points here */
    char conf[128], text[2048];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(err, sizeof err, "%s/err.log", dir);
    snprintf(p->log, sizeof p->log, "%s/access.log", dir);
    p->u = upstream_start(0);
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\nproxy_protocol = on\n"
             "proxy_protocol_from = 127.0.0.2, 10.0.0.0/8\n"
             "[echo]\nlisten =\n[runtime]\nworkers = 2\n"
             "[limits]\nheader_timeout_ms = 1000\n"
             "[log]\naccess_log = %s\nlevel = info\n"
             "[listener plain]\nlisten = 127.0.0.1:0\n"
             "[upstream app]\nserver = 127.0.0.1:%d\nmax_fails = 0\ntries = 1\n"
             "[route = /who]\nhandler = text\nbody = who\nallow = 203.0.113.7, 2001:db8::7\n"
             "deny = all\n"
             "[route /up]\nhandler = proxy\nupstream = app\n"
             "[route = /metrics]\nhandler = metrics\n",
             p->log, p->u.port);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    p->d = start_with(conf, NULL, err);
    const char *at = strstr(p->d.line, " plain=127.0.0.1:");
    cr_assert_not_null(at, "%s", p->d.line);
    p->plain = atoi(at + strlen(" plain=127.0.0.1:"));
}

static void pp_stop(pp_daemon *p)
{
    cr_assert_eq(stop(&p->d), 0);
    upstream_stop(&p->u);
}

/* A connection to port from from_addr (host order). */
static int connect_from(int port, uint32_t from_addr)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(from_addr)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&from, sizeof from), 0, "bind");
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    return fd;
}

/* head[0..head_len) then req, in one write; the whole answer (empty: closed unanswered). */
static char *ask_with(int port, uint32_t from, const void *head, size_t head_len, const char *req)
{
    static char resp[16384];
    char out[8192];
    memcpy(out, head, head_len);
    memcpy(out + head_len, req, strlen(req));
    int fd = connect_from(port, from);
    test_write_all(fd, out, head_len + strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    return resp;
}

static char *get_v1(int port, uint32_t from, const char *line, const char *target)
{
    char req[256];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target);
    return ask_with(port, from, line, strlen(line), req);
}

static char *metrics(const pp_daemon *p)
{
    static char resp[1 << 17];
    int fd = test_connect(p->plain);
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    return resp;
}

/* magpied_connections_closed_total{listener="http",reason=why}. */
static long closed(const pp_daemon *p, const char *why)
{
    char key[128];
    snprintf(key, sizeof key, "magpied_connections_closed_total{listener=\"http\",reason=\"%s\"} ",
             why);
    const char *at = strstr(metrics(p), key);
    cr_assert_not_null(at, "no %s", key);
    return atol(at + strlen(key));
}

/* The count reaches want within a few seconds (the close is counted on the loop, after the
 * client has seen it). */
static void expect_closed(const pp_daemon *p, const char *why, long want)
{
    long got = 0;
    for (int i = 0; i < 250 && (got = closed(p, why)) < want; i++)
        usleep(20000);
    cr_expect_eq(got, want, "%s: %ld, want %ld", why, got, want);
}

Test(proxy_protocol_e2e, v1_address_judged_logged_and_forwarded)
{
    pp_daemon p;
    pp_start(&p);
    const char *ok = "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n";
    char *r = get_v1(p.d.http, BALANCER, ok, "/who");
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    r = get_v1(p.d.http, BALANCER, "PROXY TCP4 203.0.113.8 127.0.0.1 40000 80\r\n", "/who");
    cr_expect(strncmp(r, "HTTP/1.1 403", 12) == 0, "another carried address: %s", r);
    cr_assert(file_has(p.log, "203.0.113.7 ", 5000), "the access log shows the carried address");
    cr_assert(file_has(p.log, "203.0.113.8 ", 5000));
    r = get_v1(p.d.http, BALANCER, ok, "/up/x");
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    cr_expect(strstr(r, "X-Forwarded-For: 203.0.113.7\r\n") != NULL, "upstream saw: %s", r);
    cr_expect(strstr(r, "X-Forwarded-For: 127.0.0.2") == NULL, "not the balancer's: %s", r);
    /* TCP6 in v1; UNKNOWN keeps the balancer's own address (not allowed on /who). */
    r = get_v1(p.d.http, BALANCER, "PROXY TCP6 2001:db8::7 ::1 40000 80\r\n", "/who");
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    r = get_v1(p.d.http, BALANCER, "PROXY UNKNOWN\r\n", "/who");
    cr_expect(strncmp(r, "HTTP/1.1 403", 12) == 0, "%s", r);
    /* Several requests on one connection keep the address. */
    char two[512];
    snprintf(two, sizeof two, "%s",
             "GET /who HTTP/1.1\r\nHost: x\r\n\r\n"
             "GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    r = ask_with(p.d.http, BALANCER, ok, strlen(ok), two);
    char *second = strstr(r + 1, "HTTP/1.1 ");
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0 && second != NULL &&
                  strncmp(second, "HTTP/1.1 200", 12) == 0,
              "%s", r);
    pp_stop(&p);
}

/* A v2 header: signature, PROXY, fam, the addresses; tlv_len bytes of TLVs after them. */
static size_t v2_header(uint8_t *buf, uint8_t fam, const uint8_t *addrs, size_t alen,
                        size_t tlv_len)
{
    memcpy(buf, "\r\n\r\n\0\r\nQUIT\n", 12);
    buf[12] = 0x21;
    buf[13] = fam;
    size_t body = alen + tlv_len;
    buf[14] = (uint8_t)(body >> 8);
    buf[15] = (uint8_t)body;
    memcpy(buf + 16, addrs, alen);
    if (tlv_len != 0) { /* one custom TLV filling them */
        uint8_t *t = buf + 16 + alen;
        t[0] = 0xe0;
        t[1] = (uint8_t)((tlv_len - 3) >> 8);
        t[2] = (uint8_t)(tlv_len - 3);
        memset(t + 3, 'z', tlv_len - 3);
    }
    return 16 + body;
}

Test(proxy_protocol_e2e, v2_ipv4_ipv6_local_and_tlvs)
{
    pp_daemon p;
    pp_start(&p);
    const char *req = "GET /up/v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    uint8_t h[600];
    uint8_t v6[36] = {0x20,        0x01,     0x0d,        0xb8,        [15] = 7, [16] = 0x20,
                      [17] = 0x01, [31] = 1, [32] = 0x9c, [33] = 0x40, [35] = 80};
    size_t n = v2_header(h, 0x21, v6, sizeof v6, 100);
    char *r = ask_with(p.d.http, BALANCER, h, n, req);
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    cr_expect(strstr(r, "X-Forwarded-For: 2001:db8::7\r\n") != NULL, "upstream saw: %s", r);
    cr_expect(strstr(r, "X-Real-IP: 2001:db8::7\r\n") != NULL, "upstream saw: %s", r);
    uint8_t v4[12] = {203, 0, 113, 7, 127, 0, 0, 1, 0x9c, 0x40, 0, 80};
    n = v2_header(h, 0x11, v4, sizeof v4, 0);
    r = ask_with(p.d.http, BALANCER, h, n, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    /* LOCAL: the balancer's own health check, answered as the balancer. */
    n = v2_header(h, 0x11, v4, sizeof v4, 0);
    h[12] = 0x20;
    r = ask_with(p.d.http, BALANCER, h, n,
                 "GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_expect(strncmp(r, "HTTP/1.1 403", 12) == 0, "LOCAL keeps the peer's address: %s", r);
    cr_assert(file_has(p.log, "127.0.0.2 ", 5000), "LOCAL logged with the balancer's address");
    pp_stop(&p);
}

/* A header that comes a few bytes at a time is gathered, and what follows it is HTTP's. */
Test(proxy_protocol_e2e, header_in_pieces)
{
    pp_daemon p;
    pp_start(&p);
    const char *all = "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n"
                      "GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int fd = connect_from(p.d.http, BALANCER);
    for (size_t i = 0; i < strlen(all); i += 7) {
        size_t k = strlen(all) - i < 7 ? strlen(all) - i : 7;
        test_write_all(fd, all + i, k);
        usleep(2000);
    }
    char resp[4096];
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    cr_expect(strncmp(resp, "HTTP/1.1 200", 12) == 0, "%s", resp);
    pp_stop(&p);
}

Test(proxy_protocol_e2e, refused_untrusted_malformed_and_missing)
{
    pp_daemon p;
    pp_start(&p);
    const char *ok = "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n";
    /* Not from a balancer: closed before anything is read, with a valid header or without. */
    char *r = get_v1(p.d.http, STRANGER, ok, "/who");
    cr_expect_str_empty(r, "a stranger's header is not believed: %s", r);
    r = get_v1(p.d.http, STRANGER, "", "/who");
    cr_expect_str_empty(r, "%s", r);
    expect_closed(&p, "proxy_untrusted", 2);
    /* From a balancer, but no header, a bad one, an oversized one. */
    r = get_v1(p.d.http, BALANCER, "", "/who");
    cr_expect_str_empty(r, "a request without the header: %s", r);
    r = get_v1(p.d.http, BALANCER, "PROXY TCP4 203.0.113.7 127.0.0.1 99999 80\r\n", "/who");
    cr_expect_str_empty(r, "%s", r);
    r = get_v1(p.d.http, BALANCER, "PROXY TCP4 203.0.113.7  127.0.0.1 1 80\r\n", "/who");
    cr_expect_str_empty(r, "%s", r);
    char big[200];
    memset(big, 'x', sizeof big - 3);
    memcpy(big, "PROXY UNKNOWN ", 14);
    memcpy(big + sizeof big - 3, "\r\n", 3);
    r = get_v1(p.d.http, BALANCER, big, "/who");
    cr_expect_str_empty(r, "%s", r);
    uint8_t h[64];
    uint8_t v4[12] = {203, 0, 113, 7, 127, 0, 0, 1, 0x9c, 0x40, 0, 80};
    size_t n = v2_header(h, 0x11, v4, sizeof v4, 0);
    h[15] = 11; /* the IPv4 block one byte short */
    r = ask_with(p.d.http, BALANCER, h, n - 1, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
    cr_expect_str_empty(r, "%s", r);
    /* Truncated: half a header, then the balancer closes. */
    int fd = connect_from(p.d.http, BALANCER);
    test_write_all(fd, "PROXY TCP4 203", 14);
    shutdown(fd, SHUT_WR);
    char buf[256];
    cr_expect_eq(read_some(fd, buf, sizeof buf, NULL, 0), 0);
    close(fd);
    expect_closed(&p, "proxy_invalid", 6);
    cr_expect_eq(closed(&p, "proxy_untrusted"), 2);
    /* And the daemon still serves. */
    r = get_v1(p.d.http, BALANCER, ok, "/who");
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    cr_assert(file_has(p.d.err_path, "proxy_protocol: connection from", 5000),
              "refusals are logged");
    pp_stop(&p);
}

/* A balancer that sends half a header and stalls is closed at header_timeout_ms; meanwhile
 * others are served. */
Test(proxy_protocol_e2e, slow_header_times_out_and_holds_nobody)
{
    pp_daemon p;
    pp_start(&p);
    int slow = connect_from(p.d.http, BALANCER);
    test_write_all(slow, "PROXY TCP4 203.0.113.7 ", 23);
    for (int i = 0; i < 5; i++) {
        char *r =
            get_v1(p.d.http, BALANCER, "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n", "/who");
        cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    }
    /* A silent one too: nothing at all after the connect. */
    int silent = connect_from(p.d.http, BALANCER);
    char buf[256];
    cr_expect_eq(read_some(slow, buf, sizeof buf, NULL, 0), 0, "closed unanswered");
    cr_expect_eq(read_some(silent, buf, sizeof buf, NULL, 0), 0, "closed unanswered");
    close(slow);
    close(silent);
    expect_closed(&p, "proxy_timeout", 2);
    pp_stop(&p);
}

/* [https] with proxy_protocol: the header comes before the ClientHello, and the address it
 * carries is the TLS connection's client. A Python client (/usr/bin/python3's ssl module)
 * sends the header, then does the handshake on the same socket. */
Test(proxy_protocol_e2e, before_the_tls_handshake)
{
    char pki[PKI_DIR_MAX];
    pki_make(pki);
    char conf[128], text[2048], script[256];
    static char err[128];
    snprintf(conf, sizeof conf, "%s/tls.conf", dir);
    snprintf(err, sizeof err, "%s/tls-err.log", dir);
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"
             "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/ec.pem\n"
             "certificate_key = %s/ec.key\nproxy_protocol = on\nproxy_protocol_from = 127.0.0.2\n"
             "[route = /who]\nhandler = text\nbody = who\nallow = 203.0.113.7\ndeny = all\n",
             pki, pki);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(script, sizeof script, "%s/client.py", dir);
    f = fopen(script, "w");
    cr_assert_not_null(f);
    fputs("import socket, ssl, sys\n"
          "port, src = int(sys.argv[1]), sys.argv[2]\n"
          "s = socket.socket()\n"
          "s.settimeout(10)\n"
          "s.bind(('127.0.0.2', 0))\n"
          "s.connect(('127.0.0.1', port))\n"
          "s.sendall(('PROXY TCP4 %s 127.0.0.1 1000 443\\r\\n' % src).encode())\n"
          "ctx = ssl.create_default_context()\n"
          "ctx.check_hostname = False\n"
          "ctx.verify_mode = ssl.CERT_NONE\n"
          "t = ctx.wrap_socket(s, server_hostname='localhost')\n"
          "t.sendall(b'GET /who HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')\n"
          "data = b''\n"
          "while True:\n"
          "    d = t.recv(4096)\n"
          "    if not d:\n"
          "        break\n"
          "    data += d\n"
          "print(data.split(b'\\r\\n')[0].decode())\n",
          f);
    fclose(f);
    daemon_proc d = start_with(conf, NULL, err);
    cr_assert_gt(d.https, 0, "%s", d.line);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %d 203.0.113.7 2>&1", script, d.https);
    char *out = run(cmd);
    cr_expect(strstr(out, "HTTP/1.1 200") != NULL, "the carried address is allowed: %s", out);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %d 203.0.113.8 2>&1", script, d.https);
    out = run(cmd);
    cr_expect(strstr(out, "HTTP/1.1 403") != NULL, "another one is not: %s", out);
    cr_assert_eq(stop(&d), 0);
    pki_remove(pki);
}

/* h2c by prior knowledge after the header: the client preface is the first byte after it.
 * /usr/bin/python3's h2 speaks HTTP/2 on a socket that has sent the header already. */
Test(proxy_protocol_e2e, h2c_after_the_header)
{
    char conf[128], text[1024], script[256];
    static char err[128];
    snprintf(conf, sizeof conf, "%s/h2c.conf", dir);
    snprintf(err, sizeof err, "%s/h2c-err.log", dir);
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\nhttp2 = on\nproxy_protocol = on\n"
             "proxy_protocol_from = 127.0.0.2\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"
             "[route = /who]\nhandler = text\nbody = who\nallow = 203.0.113.7\ndeny = all\n");
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(script, sizeof script, "%s/h2c.py", dir);
    f = fopen(script, "w");
    cr_assert_not_null(f);
    fputs("import socket, sys, h2.connection, h2.events\n"
          "port, src = int(sys.argv[1]), sys.argv[2]\n"
          "s = socket.socket()\n"
          "s.settimeout(10)\n"
          "s.bind(('127.0.0.2', 0))\n"
          "s.connect(('127.0.0.1', port))\n"
          "s.sendall(('PROXY TCP4 %s 127.0.0.1 1000 80\\r\\n' % src).encode())\n"
          "c = h2.connection.H2Connection()\n"
          "c.initiate_connection()\n"
          "c.send_headers(1, [(':method', 'GET'), (':scheme', 'http'), (':authority', 'x'),\n"
          "                   (':path', '/who')], end_stream=True)\n"
          "s.sendall(c.data_to_send())\n"
          "status = None\n"
          "while status is None:\n"
          "    d = s.recv(65536)\n"
          "    if not d:\n"
          "        break\n"
          "    for e in c.receive_data(d):\n"
          "        if isinstance(e, h2.events.ResponseReceived):\n"
          "            status = dict(e.headers)[b':status'].decode()\n"
          "    s.sendall(c.data_to_send())\n"
          "print('status', status)\n",
          f);
    fclose(f);
    daemon_proc d = start_with(conf, NULL, err);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %d 203.0.113.7 2>&1", script, d.http);
    char *out = run(cmd);
    cr_expect(strstr(out, "status 200") != NULL, "the carried address is allowed: %s", out);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %d 203.0.113.8 2>&1", script, d.http);
    out = run(cmd);
    cr_expect(strstr(out, "status 403") != NULL, "another one is not: %s", out);
    cr_assert_eq(stop(&d), 0);
}

/* A reload turns proxy_protocol on (and off again) for the next connections, the listener's
 * socket kept. */
Test(proxy_protocol_e2e, reload_turns_it_on_and_off)
{
    char conf[128];
    static char err[128];
    snprintf(conf, sizeof conf, "%s/reload.conf", dir);
    snprintf(err, sizeof err, "%s/reload-err.log", dir);
    const char *head = "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"
                       "[route = /who]\nhandler = text\nbody = who\n";
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fputs(head, f);
    fclose(f);
    daemon_proc d = start_with(conf, NULL, err);
    const char *v1 = "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n";
    char *r = get_v1(d.http, BALANCER, "", "/who");
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "off: a plain request: %s", r);
    /* On: the same port, now the header first. */
    char text[512];
    snprintf(text, sizeof text, "%s", head);
    static const char on[] = "proxy_protocol = on\nproxy_protocol_from = 127.0.0.2\n";
    char *at = strstr(text, "[echo]");
    memmove(at + strlen(on), at, strlen(at) + 1);
    memcpy(at, on, strlen(on));
    f = fopen(conf, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    kill(d.pid, SIGHUP);
    for (int i = 0; i < 250 && *(r = get_v1(d.http, BALANCER, "", "/who")) != '\0'; i++)
        usleep(20000);
    cr_expect_str_empty(r, "on: a request without the header: %s", r);
    r = get_v1(d.http, BALANCER, v1, "/who");
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "on: with the header: %s", r);
    /* Off again. */
    f = fopen(conf, "w");
    cr_assert_not_null(f);
    fputs(head, f);
    fclose(f);
    kill(d.pid, SIGHUP);
    for (int i = 0; i < 250 && *(r = get_v1(d.http, BALANCER, "", "/who")) == '\0'; i++)
        usleep(20000);
    cr_expect(strncmp(r, "HTTP/1.1 200", 12) == 0, "off again: %s", r);
    cr_assert_eq(stop(&d), 0);
}

/* magpied -t: proxy_protocol needs proxy_protocol_from, and the other way round; "all" and a
 * word that is no address are refused; on a [listener NAME] too. */
Test(proxy_protocol_e2e, config_checks)
{
    char conf[128], cmd[PATH_MAX + 256], exe[PATH_MAX];
    snprintf(conf, sizeof conf, "%s/check.conf", dir);
    magpied_path(exe, sizeof exe);
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[http]\nproxy_protocol = on\n", "[http] proxy_protocol: on needs proxy_protocol_from"},
        {"[http]\nproxy_protocol_from = 10.0.0.1\n",
         "[http] proxy_protocol_from: needs proxy_protocol = on"},
        {"[http]\nproxy_protocol = on\nproxy_protocol_from = all\n", "not \"all\""},
        {"[http]\nproxy_protocol = on\nproxy_protocol_from = 10.0.0.1/33\n",
         "check.conf:3: [http] proxy_protocol_from"},
        {"[http]\nproxy_protocol = maybe\n", "check.conf:2: [http] proxy_protocol"},
        {"[listener lb]\nlisten = 127.0.0.1:0\nproxy_protocol = on\n",
         "check.conf:3: [listener lb] proxy_protocol: on needs proxy_protocol_from"},
        {"[echo]\nproxy_protocol = on\n", "check.conf:2: [echo] proxy_protocol"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(conf, "w");
        cr_assert_not_null(f);
        fputs(cases[i].text, f);
        fclose(f);
        snprintf(cmd, sizeof cmd, "'%s' -t -c '%s' 2>&1; echo rc=$?", exe, conf);
        char *out = run(cmd);
        cr_expect(strstr(out, cases[i].want) != NULL, "%s: want \"%s\" in: %s", cases[i].text,
                  cases[i].want, out);
        cr_expect(strstr(out, "rc=0") == NULL, "%s", out);
    }
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fputs("[http]\nproxy_protocol = on\nproxy_protocol_from = 10.0.0.0/8, ::1\n"
          "[listener lb]\nlisten = 127.0.0.1:0\nproxy_protocol = on\n"
          "proxy_protocol_from = 192.0.2.1\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -t -c '%s' 2>&1; echo rc=$?", exe, conf);
    char *out = run(cmd);
    cr_expect(strstr(out, "rc=0") != NULL, "%s", out);
}
