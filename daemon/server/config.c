/* magpied's configuration: the sections the server owns, the registry of every section, and
 * the checks across keys.
 *
 * The INI engine (core/ini.h) reads the file and --set; this file declares [http], [echo],
 * [runtime], [limits], [server] and [https] (their keys, ranges and defaults; [https]'s TLS
 * keys go on to server/tls.c), and the registry: one
 * line per kind of section, saying where in md_config its part lives. The other kinds are
 * declared by the layer that uses them: [log] by core/log.c, [route] by http/routes.c,
 * [upstream] by the proxy handler (http/handlers/proxy/upstream.c), [static] by the static
 * handler (http/handlers/static/static.c). The registry is here, not in core/, because this is
 * the one file that knows md_config's layout; core/ sees the parts through offsets only.
 *
 * The server's sections all have md_config itself as their part (their keys' offsets are
 * md_config's): a listener's keys are spread over [http], [echo] and [limits].
 */
#include "server/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "core/cfgfile.h"
#include "core/text.h"

static void listen_set(md_listen *l, int family, const char *host, uint16_t port)
{
    l->enabled = true;
    l->family = family;
    l->port = port;
    snprintf(l->host, sizeof(l->host), "%s", host);
}

/* "127.0.0.1:8080", "[::1]:8080", "0.0.0.0:0". */
static int listen_parse(const char *s, md_listen *out)
{
    const char *colon;
    char host[MD_CONFIG_HOST_MAX];
    size_t hlen;
    int family;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return -EINVAL;
        hlen = (size_t)(close - (s + 1));
        if (hlen == 0 || hlen >= sizeof(host))
            return -EINVAL;
        memcpy(host, s + 1, hlen);
        colon = close + 1;
        family = AF_INET6;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL)
            return -EINVAL;
        hlen = (size_t)(colon - s);
        if (hlen == 0 || hlen >= sizeof(host))
            return -EINVAL;
        memcpy(host, s, hlen);
        family = AF_INET;
    }
    host[hlen] = '\0';

    unsigned char addr[16];
    if (inet_pton(family, host, addr) != 1)
        return -EINVAL;
    uint64_t port;
    if (md_parse_u64(colon + 1, 0, 65535, &port) != 0)
        return -EINVAL;
    listen_set(out, family, host, (uint16_t)port);
    return 0;
}

/* [http] listen; [echo] and [https] listen, which may also be empty (the listener is off):
 * one address or several, separated by commas or blanks ("0.0.0.0:8080, [::]:8080"). */
static int parse_listen(void *conf, const md_ini_key *k, const char *value, char *msg,
                        size_t msg_len)
{
    md_listen *l = (md_listen *)(void *)((char *)conf + k->offset);
    md_listen got[MD_LISTEN_ADDRS];
    bool may_be_off = k->min != 0;
    memset(got, 0, sizeof got);
    const char *w;
    size_t n = 0, wlen;
    while (md_words_next(&value, &w, &wlen)) {
        char one[MD_CONFIG_HOST_MAX + 16];
        if (n == MD_LISTEN_ADDRS) {
            snprintf(msg, msg_len, "more than %d addresses", MD_LISTEN_ADDRS);
            return -EINVAL;
        }
        snprintf(one, sizeof one, "%.*s", (int)wlen, w);
        if (wlen >= sizeof one || listen_parse(one, &got[n]) != 0) {
            snprintf(msg, msg_len,
                     "expected host:port with a numeric IPv4 address or a [bracketed] IPv6 "
                     "address and a port in 0..65535%s, got \"%.*s\"",
                     may_be_off ? " (or empty for off)" : "", (int)wlen, w);
            return -EINVAL;
        }
        for (size_t i = 0; i < n; i++)
            if (md_listen_same(&got[i], &got[n]) && got[n].port != 0) {
                snprintf(msg, msg_len, "\"%.*s\" is named twice", (int)wlen, w);
                return -EINVAL;
            }
        n++;
    }
    if (n == 0 && !may_be_off) {
        snprintf(msg, msg_len,
                 "expected host:port with a numeric IPv4 address or a [bracketed] IPv6 address "
                 "and a port in 0..65535, got \"\"");
        return -EINVAL;
    }
    memcpy(l, got, sizeof got);
    return 0;
}

/* default_site = NAME: the [site NAME] for requests whose Host no site names (checked once the
 * whole file is read: the site may come later). */
static int parse_site_name(void *conf, const md_ini_key *k, const char *value, char *msg,
                           size_t msg_len)
{
    char *dst = (char *)conf + k->offset;
    if (*value != '\0' && !md_text_name_ok(value, strlen(value), MD_SITE_NAME_MAX)) {
        snprintf(msg, msg_len,
                 "expected the name of a [site NAME] ([A-Za-z0-9_-], at most %d bytes), got \"%s\"",
                 MD_SITE_NAME_MAX - 1, value);
        return -EINVAL;
    }
    md_text_set(dst, MD_SITE_NAME_MAX, value);
    return 0;
}

/* proxy_protocol_from = addresses or blocks: the balancers whose PROXY headers are believed.
 * Not "all": any client could then name its own address. */
static int parse_proxy_from(void *conf, const md_ini_key *k, const char *value, char *msg,
                            size_t msg_len)
{
    md_acl *a = (md_acl *)(void *)((char *)conf + k->offset);
    md_acl got = {0};
    if (*value == '\0') { /* none: proxy_protocol must stay off */
        *a = got;
        return 0;
    }
    const char *w;
    size_t wlen;
    for (const char *v = value; md_words_next(&v, &w, &wlen);)
        if (wlen == 3 && memcmp(w, "all", 3) == 0) {
            snprintf(msg, msg_len,
                     "expected the balancers' addresses or address/prefix blocks (not \"all\": "
                     "every client could name its own address)");
            return -EINVAL;
        }
    int rc = md_acl_add(&got, true, value, msg, msg_len);
    if (rc == 0)
        *a = got;
    return rc;
}

#define LIMIT(field)          offsetof(md_config, limits.field)
#define LISTENER(kind, field) offsetof(md_config, listeners[kind].field)
#define U32(name, offset, min, max)                                                                \
    {                                                                                              \
        name, MD_INI_U32, offset, min, max, NULL                                                   \
    }
#define BOOL(name, offset)                                                                         \
    {                                                                                              \
        name, MD_INI_BOOL, offset, 0, 0, NULL                                                      \
    }
#define END                                                                                        \
    {                                                                                              \
        NULL, 0, 0, 0, 0, NULL                                                                     \
    }

/* A fixed listener's identity: its kind, and its section's name for systemd. */
static void fixed_init(md_config *c, md_listener kind)
{
    md_listener_config *l = &c->listeners[kind];
    memset(l->listen, 0, sizeof l->listen);
    l->kind = (uint8_t)kind;
    md_text_set(l->name, sizeof l->name, md_listener_name(kind));
    l->default_site[0] = '\0';
    l->reuseport = false;
}

static void http_init(void *conf)
{
    md_config *c = conf;
    fixed_init(c, MD_LISTENER_HTTP);
    listen_set(&c->listeners[MD_LISTENER_HTTP].listen[0], AF_INET, "127.0.0.1", 8080);
    c->listeners[MD_LISTENER_HTTP].http2 = false; /* plaintext: HTTP/1.1 unless asked */
}

static const md_ini_key http_keys[] = {
    /* min 0: the listener may not be off */
    {"listen", MD_INI_PARSE, LISTENER(MD_LISTENER_HTTP, listen), 0, 0, parse_listen},
    BOOL("reuseport", LISTENER(MD_LISTENER_HTTP, reuseport)),
    BOOL("http2", LISTENER(MD_LISTENER_HTTP, http2)),
    {"default_site", MD_INI_PARSE, LISTENER(MD_LISTENER_HTTP, default_site), 0, 0, parse_site_name},
    BOOL("proxy_protocol", LISTENER(MD_LISTENER_HTTP, proxy_protocol)),
    {"proxy_protocol_from", MD_INI_PARSE, LISTENER(MD_LISTENER_HTTP, proxy_from), 0, 0,
     parse_proxy_from},
    END,
};

static void echo_init(void *conf)
{
    md_config *c = conf;
    md_listener_config *e = &c->listeners[MD_LISTENER_ECHO];
    fixed_init(c, MD_LISTENER_ECHO);
    listen_set(&e->listen[0], AF_INET, "127.0.0.1", 8007);
    e->idle_timeout_ms = 60000;
    e->max_connections = 1000;
}

static const md_ini_key echo_keys[] = {
    /* min 1: empty turns the listener off */
    {"listen", MD_INI_PARSE, LISTENER(MD_LISTENER_ECHO, listen), 1, 0, parse_listen},
    BOOL("reuseport", LISTENER(MD_LISTENER_ECHO, reuseport)),
    U32("idle_timeout_ms", LISTENER(MD_LISTENER_ECHO, idle_timeout_ms), 0, 3600000),
    U32("max_connections", LISTENER(MD_LISTENER_ECHO, max_connections), 1, 1000000),
    U32("max_connections_per_client", LISTENER(MD_LISTENER_ECHO, max_per_client), 0, 1000000),
    END,
};

static void runtime_init(void *conf)
{
    md_config *c = conf;
    c->workers = 0;
    c->slow_poll_us = 0;
}

static const md_ini_key runtime_keys[] = {
    U32("workers", offsetof(md_config, workers), 0, 1024),
    U32("slow_poll_us", offsetof(md_config, slow_poll_us), 0, 60000000),
    END,
};

static void limits_init(void *conf)
{
    md_config *c = conf;
    md_http_limits_default(&c->limits);
    c->listeners[MD_LISTENER_HTTP].max_connections = 10000;
}

static const md_ini_key limits_keys[] = {
    U32("max_request_line", LIMIT(max_request_line), 64, 1048576),
    U32("max_header_bytes", LIMIT(max_header_bytes), 256, 1048576),
    U32("max_headers", LIMIT(max_headers), 1, 10000),
    {"max_body_bytes", MD_INI_U64, LIMIT(max_body_bytes), 0, 1073741824, NULL},
    U32("header_timeout_ms", LIMIT(header_timeout_ms), 1, 3600000),
    U32("body_timeout_ms", LIMIT(body_timeout_ms), 1, 3600000),
    U32("keepalive_timeout_ms", LIMIT(keepalive_timeout_ms), 0, 3600000),
    U32("max_requests_per_connection", LIMIT(max_requests_per_connection), 0, UINT32_MAX),
    U32("max_connections", LISTENER(MD_LISTENER_HTTP, max_connections), 1, 1000000),
    U32("max_connections_per_client", LISTENER(MD_LISTENER_HTTP, max_per_client), 0, 1000000),
    U32("min_body_rate", LIMIT(min_body_rate), 0, 1073741824),
    U32("min_rate_grace_ms", LIMIT(min_rate_grace_ms), 0, 3600000),
    U32("send_timeout_ms", LIMIT(send_timeout_ms), 0, 3600000),
    U32("min_send_rate", LIMIT(min_send_rate), 0, 1073741824),
    U32("send_buffer", LIMIT(send_buffer), 0, 67108864),
    U32("http2_max_concurrent_streams", LIMIT(http2_max_streams), 1, 1000),
    U32("http2_window", LIMIT(http2_window), 65535, 16777216),
    END,
};

static void server_init(void *conf)
{
    ((md_config *)conf)->shutdown_timeout_ms = 10000;
}

static const md_ini_key server_keys[] = {
    U32("shutdown_timeout_ms", offsetof(md_config, shutdown_timeout_ms), 0, 3600000),
    END,
};

/* [https]: the TLS listener's keys are in the table; the TLS keys are tls.c's (md_tls_key). */
static void https_init(void *conf)
{
    md_config *c = conf;
    md_listener_config *l = &c->listeners[MD_LISTENER_HTTPS];
    fixed_init(c, MD_LISTENER_HTTPS); /* off */
    l->max_connections = 10000;
    l->http2 = true; /* offered by ALPN: a client that does not ask for h2 gets HTTP/1.1 */
    md_tls_config_init(&c->tls);
}

static int https_key(void *inst, const char *key, const char *value, uint32_t line, char *msg,
                     size_t msg_len)
{
    return md_tls_key(&((md_config *)inst)->tls, key, value, line, msg, msg_len);
}

static const md_ini_key https_keys[] = {
    /* min 1: empty turns the listener off */
    {"listen", MD_INI_PARSE, LISTENER(MD_LISTENER_HTTPS, listen), 1, 0, parse_listen},
    BOOL("reuseport", LISTENER(MD_LISTENER_HTTPS, reuseport)),
    U32("max_connections", LISTENER(MD_LISTENER_HTTPS, max_connections), 1, 1000000),
    U32("max_connections_per_client", LISTENER(MD_LISTENER_HTTPS, max_per_client), 0, 1000000),
    BOOL("http2", LISTENER(MD_LISTENER_HTTPS, http2)),
    {"default_site", MD_INI_PARSE, LISTENER(MD_LISTENER_HTTPS, default_site), 0, 0,
     parse_site_name},
    BOOL("proxy_protocol", LISTENER(MD_LISTENER_HTTPS, proxy_protocol)),
    {"proxy_protocol_from", MD_INI_PARSE, LISTENER(MD_LISTENER_HTTPS, proxy_from), 0, 0,
     parse_proxy_from},
    END,
};

/* [listener NAME]: one more HTTP listener (tls = on: HTTPS, with [https]'s TLS keys), with its
 * own addresses, max_connections and default site. Its keys are set in the file only. */
static void listener_init(void *conf)
{
    md_config *c = conf;
    memset(&c->listeners[MD_LISTENERS], 0,
           sizeof c->listeners - MD_LISTENERS * sizeof c->listeners[0]);
    c->nlisteners = MD_LISTENERS;
}

static int listener_begin(void *conf, const char *arg, bool first, uint32_t line, void **inst,
                          char *msg, size_t msg_len)
{
    (void)first;
    md_config *c = conf;
    while (*arg == ' ' || *arg == '\t')
        arg++;
    size_t n = strlen(arg);
    while (n != 0 && (arg[n - 1] == ' ' || arg[n - 1] == '\t'))
        n--;
    if (!md_text_name_ok(arg, n, MD_LISTENER_NAME_MAX)) {
        snprintf(msg, msg_len, "expected [listener NAME], NAME of [A-Za-z0-9_-] (at most %d bytes)",
                 MD_LISTENER_NAME_MAX - 1);
        return -EINVAL;
    }
    for (uint32_t i = 0; i < c->nlisteners; i++)
        if (strlen(c->listeners[i].name) == n && memcmp(c->listeners[i].name, arg, n) == 0) {
            if (i < MD_LISTENERS)
                snprintf(msg, msg_len, "\"%.*s\" is the name of [%.*s]'s listener", (int)n, arg,
                         (int)n, arg);
            else
                snprintf(msg, msg_len, "a second [listener %.*s] (the first on line %u)", (int)n,
                         arg, (unsigned)c->listeners[i].line);
            return -EINVAL;
        }
    if (c->nlisteners == MD_LISTENER_SLOTS) {
        snprintf(msg, msg_len, "more than %d listeners", MD_LISTENER_SLOTS);
        return -EINVAL;
    }
    md_listener_config *l = &c->listeners[c->nlisteners++];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%.*s", (int)n, arg);
    l->kind = MD_LISTENER_HTTP;
    l->max_connections = 10000;
    l->strict_sni = -1;
    l->line = line;
    *inst = l;
    return 0;
}

static int listener_key(void *inst, const char *key, const char *value, uint32_t line, char *msg,
                        size_t msg_len)
{
    md_listener_config *l = inst;
    md_ini_key k = {key, MD_INI_PARSE, 0, 1, 0, NULL};
    uint64_t v;
    bool b;
    if (strcmp(key, "listen") == 0) {
        k.offset = offsetof(md_listener_config, listen);
        k.min = 0; /* a named listener is never off: leave it out instead */
        l->listen_line = line;
        return parse_listen(l, &k, value, msg, msg_len);
    }
    if (strcmp(key, "default_site") == 0) {
        k.offset = offsetof(md_listener_config, default_site);
        l->site_line = line;
        return parse_site_name(l, &k, value, msg, msg_len);
    }
    if (strcmp(key, "proxy_protocol_from") == 0) {
        k.offset = offsetof(md_listener_config, proxy_from);
        l->proxy_line = line;
        return parse_proxy_from(l, &k, value, msg, msg_len);
    }
    if (strcmp(key, "max_connections") == 0 || strcmp(key, "max_connections_per_client") == 0) {
        bool per_client = key[15] == '_';
        if (md_parse_u64(value, per_client ? 0 : 1, 1000000, &v) != 0) {
            snprintf(msg, msg_len, "expected an integer in %d..1000000, got \"%s\"",
                     per_client ? 0 : 1, value);
            return -EINVAL;
        }
        *(per_client ? &l->max_per_client : &l->max_connections) = (uint32_t)v;
        return 0;
    }
    if (strcmp(key, "certificate") == 0 || strcmp(key, "certificate_key") == 0) {
        bool cert = key[11] == '\0';
        if (*value == '\0' || strlen(value) >= MD_SITE_PATH_MAX) {
            snprintf(msg, msg_len, "expected a file's path, 1 to %d bytes", MD_SITE_PATH_MAX - 1);
            return -EINVAL;
        }
        snprintf(cert ? l->cert : l->key, MD_SITE_PATH_MAX, "%s", value);
        *(cert ? &l->cert_line : &l->key_line) = line;
        return 0;
    }
    if (strcmp(key, "strict_sni") == 0) {
        if (md_conf_bool(value, &b, msg, msg_len) != 0)
            return -EINVAL;
        l->strict_sni = b;
        l->strict_line = line;
        return 0;
    }
    if (strcmp(key, "tls") == 0 || strcmp(key, "reuseport") == 0 || strcmp(key, "http2") == 0 ||
        strcmp(key, "proxy_protocol") == 0) {
        if (md_conf_bool(value, &b, msg, msg_len) != 0)
            return -EINVAL;
        if (key[0] == 'p') {
            l->proxy_protocol = b;
            l->proxy_line = line;
        } else if (key[0] == 't') {
            l->kind = b ? MD_LISTENER_HTTPS : MD_LISTENER_HTTP;
        } else if (key[0] == 'h') {
            l->http2 = b;
            l->http2_set = true;
        } else {
            l->reuseport = b;
        }
        return 0;
    }
    return -ENOENT;
}

static int listener_end(void *inst, char *msg, size_t msg_len)
{
    const md_listener_config *l = inst;
    if (!l->listen[0].enabled) {
        snprintf(msg, msg_len, "listen: required");
        return -EINVAL;
    }
    if (l->http2_set && l->kind == MD_LISTENER_HTTPS) {
        /* Every TLS listener shares [https]'s contexts, and with them its ALPN. */
        snprintf(msg, msg_len, "http2: a TLS listener offers h2 as [https] http2 says");
        return -EINVAL;
    }
    if ((l->cert[0] != '\0') != (l->key[0] != '\0')) {
        snprintf(msg, msg_len, "%s: must be set with %s",
                 l->cert[0] != '\0' ? "certificate" : "certificate_key",
                 l->cert[0] != '\0' ? "certificate_key" : "certificate");
        return -EINVAL;
    }
    return 0;
}

/* The default site's header rules and error pages (sites.h): the route keys, in [http]. */
static int http_key(void *inst, const char *key, const char *value, uint32_t line, char *msg,
                    size_t msg_len)
{
    return md_site_rules_key(&((md_config *)inst)->routes.sites[0], key, value, line, msg, msg_len);
}

static const md_ini_section section_http = {
    .name = "http",
    .keys = http_keys,
    .init = http_init,
    .key = http_key,
    .repeatable =
        (const char *const[]){"header_add", "header_set", "header_remove", "error_page", NULL}};
static const md_ini_section section_echo = {.name = "echo", .keys = echo_keys, .init = echo_init};
static const md_ini_section section_runtime = {
    .name = "runtime", .keys = runtime_keys, .init = runtime_init};
static const md_ini_section section_limits = {
    .name = "limits", .keys = limits_keys, .init = limits_init};
static const md_ini_section section_server = {
    .name = "server", .keys = server_keys, .init = server_init};
static const md_ini_section section_https = {
    .name = "https", .keys = https_keys, .init = https_init, .key = https_key};
static const md_ini_section section_listener = {.name = "listener",
                                                .repeats = true,
                                                .init = listener_init,
                                                .begin = listener_begin,
                                                .key = listener_key,
                                                .end = listener_end};

/* The registry: every kind of section the file may hold, and where its part is. A new section
 * is a table in the layer that uses it and one line here. */
static const md_ini_entry registry[] = {
    {&section_http, 0},
    {&section_echo, 0},
    {&section_runtime, 0},
    {&section_limits, 0},
    {&md_section_log, offsetof(md_config, log)},
    {&section_server, 0},
    {&md_section_static, offsetof(md_config, file_cache)},
    {&md_section_route, offsetof(md_config, routes)},
    {&md_section_upstream, offsetof(md_config, upstreams)},
    {&section_https, 0},
    {&section_listener, 0},
    {&md_section_site, offsetof(md_config, routes)},
};

_Static_assert(sizeof registry / sizeof registry[0] <= MD_INI_SECTIONS_MAX,
               "md_config.key_line is too short");

md_ini_conf md_config_ini(const md_config *c)
{
    /* The engine writes through the view only while the file is read (md_config_load,
     * md_config_set); readers of a const configuration only read through it. */
    md_config *w = (md_config *)c;
    return (md_ini_conf){registry, sizeof registry / sizeof registry[0], w, w->key_line};
}

void md_config_init(md_config *c)
{
    memset(c, 0, sizeof(*c));
    md_ini_conf ini = md_config_ini(c);
    md_ini_init(&ini);
    snprintf(c->source, sizeof(c->source), "(defaults)");
}

int md_config_parse_file(md_config *c, FILE *f, const char *name, md_error *err)
{
    md_ini_conf ini = md_config_ini(c);
    int rc = md_ini_parse(&ini, f, name, err);
    if (rc == 0)
        snprintf(c->source, sizeof(c->source), "%s", name);
    return rc;
}

int md_config_load(md_config *c, const char *path, md_error *err)
{
    md_config_init(c);
    if (path == NULL)
        return 0;
    /* A device or FIFO may never end (-c /dev/zero), or never open, and a directory is no
     * text: core/cfgfile.h. */
    int e;
    FILE *f = md_cfgfile_open(path, &e);
    if (f == NULL) {
        if (err != NULL && e == EINVAL)
            snprintf(err->msg, sizeof(err->msg), "%s: not a regular file", path);
        else if (err != NULL)
            snprintf(err->msg, sizeof(err->msg), "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size > MD_CONFIG_FILE_MAX) {
        if (err != NULL)
            snprintf(err->msg, sizeof(err->msg), "%s: larger than %d bytes", path,
                     MD_CONFIG_FILE_MAX);
        fclose(f);
        return -EINVAL;
    }
    int rc = md_config_parse_file(c, f, path, err);
    fclose(f);
    return rc;
}

int md_config_set(md_config *c, const char *assignment, md_error *err)
{
    md_ini_conf ini = md_config_ini(c);
    return md_ini_set(&ini, assignment, err);
}

/* Where the current value of [section] key came from, for check messages: the file and its
 * line, or NULL for --set. */
static const char *key_origin(const md_config *c, const char *section, const char *key,
                              unsigned *line)
{
    md_ini_conf ini = md_config_ini(c);
    uint32_t l = md_ini_key_line(&ini, section, key);
    *line = l == MD_INI_LINE_SET ? 0 : l;
    return l == MD_INI_LINE_SET ? NULL : c->source;
}

/* "[http]" or "[listener NAME]", for messages. */
static void listener_label(const md_listener_config *l, char *buf, size_t len)
{
    if (l->line == 0)
        snprintf(buf, len, "[%s]", l->name);
    else
        snprintf(buf, len, "[listener %s]", l->name);
}

/* "file:line: [section] key: why" for a listener's key. */
static void listener_error(const md_config *c, const md_listener_config *l, md_error *err,
                           const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void listener_error(const md_config *c, const md_listener_config *l, md_error *err,
                           const char *key, const char *fmt, ...)
{
    char label[64], why[MD_INI_MSG_MAX];
    listener_label(l, label, sizeof label);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const char *file;
    unsigned line;
    if (l->line == 0) {
        file = key_origin(c, l->name, key, &line);
    } else {
        file = c->source;
        line = key[0] == 'l'                         ? l->listen_line
               : key[0] == 'p'                       ? l->proxy_line
               : strcmp(key, "certificate") == 0     ? l->cert_line
               : strcmp(key, "certificate_key") == 0 ? l->key_line
               : strcmp(key, "strict_sni") == 0      ? l->strict_line
                                                     : l->site_line;
    }
    md_ini_say(err, file, line, "%s %s: %s", label, key, why);
}

bool md_listen_same(const md_listen *a, const md_listen *b)
{
    return a->enabled == b->enabled &&
           (!a->enabled ||
            (a->family == b->family && a->port == b->port && strcmp(a->host, b->host) == 0));
}

int md_config_check(const md_config *c, md_error *err)
{
    const char *file;
    unsigned line;
    if (c->limits.max_request_line > c->limits.max_header_bytes) {
        file = key_origin(c, "limits", "max_request_line", &line);
        md_ini_say(err, file, line,
                   "[limits] max_request_line: %u exceeds [limits] max_header_bytes (%u), which "
                   "counts the request line too",
                   c->limits.max_request_line, c->limits.max_header_bytes);
        return -EINVAL;
    }
    if (!c->listeners[MD_LISTENER_HTTP].listen[0].enabled) {
        file = key_origin(c, "http", "listen", &line);
        md_ini_say(err, file, line, "[http] listen: must be set");
        return -EINVAL;
    }
    /* No address twice, in one listener or two (port 0: the kernel picks a free one). */
    bool tls_on = false;
    for (uint32_t i = 0; i < c->nlisteners; i++) {
        const md_listener_config *l = &c->listeners[i];
        tls_on = tls_on || (l->kind == MD_LISTENER_HTTPS && l->listen[0].enabled);
        for (int a = 0; a < MD_LISTEN_ADDRS && l->listen[a].enabled; a++) {
            const md_listen *x = &l->listen[a];
            for (uint32_t j = 0; j < i && x->port != 0; j++) {
                const md_listener_config *o = &c->listeners[j];
                for (int b = 0; b < MD_LISTEN_ADDRS && o->listen[b].enabled; b++) {
                    if (!md_listen_same(x, &o->listen[b]))
                        continue;
                    char where[64];
                    listener_label(o, where, sizeof where);
                    listener_error(c, l, err, "listen", "%s%s%s:%u is also %s listen",
                                   x->family == AF_INET6 ? "[" : "", x->host,
                                   x->family == AF_INET6 ? "]" : "", (unsigned)x->port, where);
                    return -EINVAL;
                }
            }
        }
        if (l->proxy_protocol != (l->proxy_from.n != 0) && l->listen[0].enabled) {
            /* Strict, as HAProxy's and nginx's: a header from anywhere else is refused. */
            if (l->proxy_protocol)
                listener_error(c, l, err, "proxy_protocol",
                               "on needs proxy_protocol_from (the balancers' addresses)");
            else
                listener_error(c, l, err, "proxy_protocol_from", "needs proxy_protocol = on");
            return -EINVAL;
        }
        if (l->default_site[0] != '\0' && md_site_find(&c->routes, l->default_site) < 0) {
            listener_error(c, l, err, "default_site", "no [site %s] in the file", l->default_site);
            return -EINVAL;
        }
    }
    /* Each route's auth_basic_user_file, read now too. */
    char why[sizeof err->msg - 64];
    uint32_t at = 0;
    if (md_routes_check_files(&c->routes, &at, why, sizeof why) != 0) {
        md_ini_say(err, at == MD_INI_LINE_SET ? NULL : c->source, at == MD_INI_LINE_SET ? 0 : at,
                   "%s", why);
        return -EINVAL;
    }
    /* [https] on: the certificate and key, read and checked now (magpied -t, a reload). */
    if (tls_on || c->tls.cert[0][0] != '\0') {
        int rc = md_tls_config_check(&c->tls, &c->routes, c->source, err);
        if (rc != 0)
            return rc;
    }
    /* A TLS [listener NAME]'s own certificate, checked as [https]'s. */
    for (uint32_t i = MD_LISTENERS; i < c->nlisteners; i++) {
        const md_listener_config *l = &c->listeners[i];
        if (l->cert[0] == '\0' && l->key[0] == '\0' && l->strict_sni < 0)
            continue;
        if (l->kind != MD_LISTENER_HTTPS) {
            listener_error(c, l, err,
                           l->cert[0] != '\0'  ? "certificate"
                           : l->key[0] != '\0' ? "certificate_key"
                                               : "strict_sni",
                           "needs tls = on");
            return -EINVAL;
        }
        static md_tls_config one; /* large (paths); the configuration's thread only */
        md_tls_config_listener(&c->tls, l->name, l->cert, l->cert_line, l->key, l->key_line,
                               l->strict_sni, &one);
        int rc = md_tls_config_check(&one, NULL, c->source, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}
