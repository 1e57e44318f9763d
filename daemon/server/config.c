/* Parsing and checking magpied's configuration.
 *
 * One table (keys[]) names every key, its type, where it lives in md_config and its range;
 * the INI file and --set go through the same apply_key(), so they accept and reject the same
 * values with the same words. libinih calls on_key() per "key = value"; it does not pass line
 * numbers (Debian's build may, but the header it ships says it does not), so read_line() feeds
 * it line by line and counts. read_line() also strips leading whitespace, because inih would
 * otherwise read an indented line as the continuation of the previous value, and checks each
 * [section] header, so an empty misspelt section is caught too. It reads byte by byte rather
 * than with fgets(), so that a NUL byte is seen (strlen() would hide the rest of its line) and
 * the file size is capped.
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

#include "core/text.h"
#include "http/handler.h"
#include "ini.h"

enum key_type {
    KEY_U32,
    KEY_U64,
    KEY_LISTEN,     /* host:port, required */
    KEY_LISTEN_OFF, /* host:port, or empty for off */
    KEY_LEVEL,
    KEY_ACCESS_LOG,
    KEY_ACCESS_FORMAT,
    KEY_ERROR_LOG,
    KEY_BOOL,
};

struct key {
    const char *section;
    const char *name;
    enum key_type type;
    size_t offset;
    uint64_t min, max;
};

#define LIMIT(field)          offsetof(md_config, limits.field)
#define LISTENER(kind, field) offsetof(md_config, listeners[kind].field)
#define FILE_CACHE(field)     offsetof(md_config, file_cache.field)

static const struct key keys[] = {
    {"http", "listen", KEY_LISTEN, LISTENER(MD_LISTENER_HTTP, listen), 0, 0},
    {"http", "reuseport", KEY_BOOL, LISTENER(MD_LISTENER_HTTP, reuseport), 0, 0},
    {"echo", "listen", KEY_LISTEN_OFF, LISTENER(MD_LISTENER_ECHO, listen), 0, 0},
    {"echo", "reuseport", KEY_BOOL, LISTENER(MD_LISTENER_ECHO, reuseport), 0, 0},
    {"echo", "idle_timeout_ms", KEY_U32, LISTENER(MD_LISTENER_ECHO, idle_timeout_ms), 0, 3600000},
    {"echo", "max_connections", KEY_U32, LISTENER(MD_LISTENER_ECHO, max_connections), 1, 1000000},
    {"runtime", "workers", KEY_U32, offsetof(md_config, workers), 0, 1024},
    {"runtime", "slow_poll_us", KEY_U32, offsetof(md_config, slow_poll_us), 0, 60000000},
    {"limits", "max_request_line", KEY_U32, LIMIT(max_request_line), 64, 1048576},
    {"limits", "max_header_bytes", KEY_U32, LIMIT(max_header_bytes), 256, 1048576},
    {"limits", "max_headers", KEY_U32, LIMIT(max_headers), 1, 10000},
    {"limits", "max_body_bytes", KEY_U64, LIMIT(max_body_bytes), 0, 1073741824},
    {"limits", "header_timeout_ms", KEY_U32, LIMIT(header_timeout_ms), 1, 3600000},
    {"limits", "body_timeout_ms", KEY_U32, LIMIT(body_timeout_ms), 1, 3600000},
    {"limits", "keepalive_timeout_ms", KEY_U32, LIMIT(keepalive_timeout_ms), 0, 3600000},
    {"limits", "max_requests_per_connection", KEY_U32, LIMIT(max_requests_per_connection), 0,
     UINT32_MAX},
    {"limits", "max_connections", KEY_U32, LISTENER(MD_LISTENER_HTTP, max_connections), 1, 1000000},
    {"limits", "min_body_rate", KEY_U32, LIMIT(min_body_rate), 0, 1073741824},
    {"limits", "min_rate_grace_ms", KEY_U32, LIMIT(min_rate_grace_ms), 0, 3600000},
    {"limits", "send_timeout_ms", KEY_U32, LIMIT(send_timeout_ms), 0, 3600000},
    {"limits", "min_send_rate", KEY_U32, LIMIT(min_send_rate), 0, 1073741824},
    {"limits", "send_buffer", KEY_U32, LIMIT(send_buffer), 0, 67108864},
    {"log", "level", KEY_LEVEL, offsetof(md_config, log.level), 0, 0},
    {"log", "access_log", KEY_ACCESS_LOG, offsetof(md_config, log.access_log), 0, 0},
    {"log", "access_format", KEY_ACCESS_FORMAT, offsetof(md_config, log.access_format), 0, 0},
    {"log", "error_log", KEY_ERROR_LOG, offsetof(md_config, log.error_log_path), 0, 0},
    {"server", "shutdown_timeout_ms", KEY_U32, offsetof(md_config, shutdown_timeout_ms), 0,
     3600000},
    /* [static]: what every static route shares (the open-file cache is per worker). */
    {"static", "open_file_cache_entries", KEY_U32, FILE_CACHE(entries), 0, 1000000},
    {"static", "open_file_cache_max_fds", KEY_U32, FILE_CACHE(max_fds), 0, 1000000},
    {"static", "open_file_cache_valid_ms", KEY_U32, FILE_CACHE(valid_ms), 0, 3600000},
    /* [https]: these three are the listener's; the TLS keys are tls.c's (md_tls_key). */
    {"https", "listen", KEY_LISTEN_OFF, LISTENER(MD_LISTENER_HTTPS, listen), 0, 0},
    {"https", "reuseport", KEY_BOOL, LISTENER(MD_LISTENER_HTTPS, reuseport), 0, 0},
    {"https", "max_connections", KEY_U32, LISTENER(MD_LISTENER_HTTPS, max_connections), 1, 1000000},
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))
_Static_assert(NKEYS <= (size_t)MD_CONFIG_MAX_KEYS, "md_config.key_line is too short");

static const char *const sections[] = {"http", "echo",   "runtime", "limits",
                                       "log",  "server", "static",  "https"};

static void listen_set(md_listen *l, int family, const char *host, uint16_t port)
{
    l->enabled = true;
    l->family = family;
    l->port = port;
    snprintf(l->host, sizeof(l->host), "%s", host);
}

void md_config_init(md_config *c)
{
    memset(c, 0, sizeof(*c));
    listen_set(&c->listeners[MD_LISTENER_HTTP].listen, AF_INET, "127.0.0.1", 8080);
    listen_set(&c->listeners[MD_LISTENER_ECHO].listen, AF_INET, "127.0.0.1", 8007);
    c->workers = 0;
    md_http_limits_default(&c->limits);
    c->listeners[MD_LISTENER_HTTP].max_connections = 10000;
    c->log.level = MD_LOG_INFO;
    c->log.access_log = MD_ACCESS_LOG_OFF;
    c->shutdown_timeout_ms = 10000;
    c->listeners[MD_LISTENER_ECHO].idle_timeout_ms = 60000;
    c->listeners[MD_LISTENER_ECHO].max_connections = 1000;
    c->listeners[MD_LISTENER_HTTPS].max_connections = 10000; /* listen: off */
    md_tls_config_init(&c->tls);
    c->file_cache = (md_file_cache_limits){MD_FILE_CACHE_ENTRIES, MD_FILE_CACHE_MAX_FDS,
                                           MD_FILE_CACHE_VALID_MS};
    md_routes_builtin(&c->routes);
    snprintf(c->source, sizeof(c->source), "(defaults)");
}

/* Where a value came from, as the message prefix: "file:12" or "--set". */
struct origin {
    const char *file; /* NULL: --set */
    unsigned line;
};

static void set_error(md_error *err, struct origin o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_error(md_error *err, struct origin o, const char *fmt, ...)
{
    if (err == NULL)
        return;
    int n;
    if (o.file != NULL)
        n = snprintf(err->msg, sizeof(err->msg), "%s:%u: ", o.file, o.line);
    else
        n = snprintf(err->msg, sizeof(err->msg), "--set: ");
    if (n < 0 || (size_t)n >= sizeof(err->msg))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof(err->msg) - (size_t)n, fmt, ap);
    va_end(ap);
}

static const struct key *find_key(const char *section, const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

/* "[route /p]" and "[route = /p]": one section per route, as many as there are routes. */
static bool is_route_section(const char *section)
{
    return strncmp(section, "route", 5) == 0 &&
           (section[5] == ' ' || section[5] == '\t' || section[5] == '=');
}

/* "[upstream NAME]": one section per group of servers. */
static bool is_upstream_section(const char *section)
{
    return strncmp(section, "upstream", 8) == 0 && (section[8] == ' ' || section[8] == '\t');
}

static bool known_section(const char *section)
{
    if (is_route_section(section) || is_upstream_section(section))
        return true;
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
        if (strcmp(sections[i], section) == 0)
            return true;
    return false;
}

/* "127.0.0.1:8080", "[::1]:8080", "0.0.0.0:0". */
static int parse_listen(const char *s, md_listen *out)
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

/* A log file's path (MD_CONFIG_PATH_MAX bytes at dst): absolute, or relative to the working
 * directory with a leading '.', so that a typo of a keyword is not taken for a file name. */
static int set_log_path(char *dst, const struct key *k, const char *value, struct origin o,
                        const char *keywords, md_error *err)
{
    if (value[0] != '/' && value[0] != '.') {
        set_error(err, o, "[%s] %s: expected %s, or a path starting with / or ., got \"%s\"",
                  k->section, k->name, keywords, value);
        return -EINVAL;
    }
    if (strlen(value) >= MD_CONFIG_PATH_MAX) {
        set_error(err, o, "[%s] %s: path longer than %d bytes", k->section, k->name,
                  MD_CONFIG_PATH_MAX - 1);
        return -EINVAL;
    }
    snprintf(dst, MD_CONFIG_PATH_MAX, "%s", value);
    return 0;
}

static int apply_key(md_config *c, const struct key *k, const char *value, struct origin o,
                     md_error *err)
{
    char *field = (char *)c + k->offset;
    uint64_t v;
    int rc;

    switch (k->type) {
    case KEY_U32:
    case KEY_U64:
        rc = md_parse_u64(value, k->min, k->max, &v);
        if (rc != 0) {
            set_error(err, o, "[%s] %s: expected an integer in %llu..%llu, got \"%s\"", k->section,
                      k->name, (unsigned long long)k->min, (unsigned long long)k->max, value);
            return -EINVAL;
        }
        if (k->type == KEY_U32)
            *(uint32_t *)(void *)field = (uint32_t)v;
        else
            *(uint64_t *)(void *)field = v;
        return 0;
    case KEY_LISTEN_OFF:
        if (*value == '\0') {
            md_listen *l = (md_listen *)(void *)field;
            memset(l, 0, sizeof(*l));
            return 0;
        }
        /* fall through */
    case KEY_LISTEN:
        if (parse_listen(value, (md_listen *)(void *)field) != 0) {
            set_error(err, o,
                      "[%s] %s: expected host:port with a numeric IPv4 address or a "
                      "[bracketed] IPv6 address and a port in 0..65535%s, got \"%s\"",
                      k->section, k->name, k->type == KEY_LISTEN_OFF ? " (or empty for off)" : "",
                      value);
            return -EINVAL;
        }
        return 0;
    case KEY_LEVEL:
        for (unsigned i = MD_LOG_ERROR; i <= MD_LOG_DEBUG; i++) {
            if (strcmp(value, md_log_level_name((md_log_level)i)) == 0) {
                *(md_log_level *)(void *)field = (md_log_level)i;
                return 0;
            }
        }
        set_error(err, o, "[%s] %s: expected error, warn, info or debug, got \"%s\"", k->section,
                  k->name, value);
        return -EINVAL;
    case KEY_ACCESS_FORMAT:
        for (unsigned i = MD_ACCESS_FORMAT_COMBINED; i <= MD_ACCESS_FORMAT_JSON; i++) {
            if (strcmp(value, md_access_format_name((md_access_format)i)) == 0) {
                *(md_access_format *)(void *)field = (md_access_format)i;
                return 0;
            }
        }
        set_error(err, o, "[%s] %s: expected combined or json, got \"%s\"", k->section, k->name,
                  value);
        return -EINVAL;
    case KEY_BOOL:
        if (md_parse_bool(value, (bool *)(void *)field) != 0) {
            set_error(err, o, "[%s] %s: expected %s, got \"%s\"", k->section, k->name,
                      MD_BOOL_GRAMMAR, value);
            return -EINVAL;
        }
        return 0;
    case KEY_ERROR_LOG:
        if (strcmp(value, "stderr") == 0) {
            c->log.error_log_path[0] = '\0';
            return 0;
        }
        return set_log_path(c->log.error_log_path, k, value, o, "stderr", err);
    case KEY_ACCESS_LOG:
        if (strcmp(value, "off") == 0) {
            c->log.access_log = MD_ACCESS_LOG_OFF;
            return 0;
        }
        if (strcmp(value, "stderr") == 0) {
            c->log.access_log = MD_ACCESS_LOG_STDERR;
            return 0;
        }
        if (set_log_path(c->log.access_log_path, k, value, o, "off, stderr", err) != 0)
            return -EINVAL;
        c->log.access_log = MD_ACCESS_LOG_FILE;
        return 0;
    }
    abort(); /* every key_type is handled above */
}

struct parse_ctx {
    md_config *c;
    FILE *f;
    const char *name;
    unsigned line;     /* the line read_line() returned last */
    size_t bytes;      /* read so far */
    bool stop;         /* a NUL byte or too many bytes: read no further */
    unsigned err_line; /* line of the first error recorded; 0 = none */
    int err_code;
    md_error *err;
    bool seen[NKEYS];           /* keys set by this file, by index into keys[] */
    md_route *route;            /* the [route] section being read; NULL in any other section */
    md_upstream_conf *upstream; /* the [upstream] section being read; NULL in any other */
    bool routes; /* a [route] section came: the file's routes replace the built-in ones */
};

static void ctx_error(struct parse_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Keeps the first error only: later ones are often its echo. */
static void ctx_error(struct parse_ctx *ctx, const char *fmt, ...)
{
    if (ctx->err_line != 0)
        return;
    ctx->err_line = ctx->line;
    char buf[MD_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    set_error(ctx->err, (struct origin){ctx->name, ctx->line}, "%s", buf);
}

/* The same, for a line other than the current one. */
static void ctx_error_at(struct parse_ctx *ctx, unsigned line, const char *msg)
{
    if (ctx->err_line != 0)
        return;
    ctx->err_line = line;
    set_error(ctx->err, (struct origin){ctx->name, line}, "%s", msg);
}

/* The end of a [route] section: what its handler requires, named at its header's line. */
static void route_end(struct parse_ctx *ctx)
{
    md_route *r = ctx->route;
    ctx->route = NULL;
    char msg[256], full[MD_ERROR_MAX];
    if (r == NULL || md_route_check(r, msg, sizeof msg) == 0)
        return;
    snprintf(full, sizeof full, "[route %s%s] %s", r->exact ? "= " : "", r->path, msg);
    ctx_error_at(ctx, r->line, full);
}

/* The end of an [upstream] section: at least one server, named at its header's line. */
static void upstream_end(struct parse_ctx *ctx)
{
    md_upstream_conf *u = ctx->upstream;
    ctx->upstream = NULL;
    char msg[256], full[MD_ERROR_MAX];
    if (u == NULL || md_upstream_check(u, msg, sizeof msg) == 0)
        return;
    snprintf(full, sizeof full, "[upstream %s] %s", u->name, msg);
    ctx_error_at(ctx, u->line, full);
}

static void upstream_begin(struct parse_ctx *ctx, const char *section)
{
    md_upstream_table *t = &ctx->c->upstreams;
    char msg[MD_ERROR_MAX - 64];
    if (md_upstream_add(t, section + 8, ctx->line, msg, sizeof msg) != 0) {
        ctx_error(ctx, "[%s]: %s", section, msg);
        return;
    }
    ctx->upstream = &t->u[t->n - 1];
}

/* After the whole file: what each route's options name elsewhere in it (a proxy route's
 * [upstream]) exists. */
static void routes_link(struct parse_ctx *ctx)
{
    md_route_table *t = &ctx->c->routes;
    for (uint32_t i = 0; i < t->n; i++) {
        md_route *r = &t->r[i];
        if (r->handler == NULL || r->handler->conf_link == NULL)
            continue;
        char msg[256], full[MD_ERROR_MAX];
        uint32_t line = 0;
        if (r->handler->conf_link(r->conf, ctx->c, &line, msg, sizeof msg) != 0) {
            snprintf(full, sizeof full, "[route %s%s] %s", r->exact ? "= " : "", r->path, msg);
            ctx_error_at(ctx, line != 0 ? line : r->line, full);
            return;
        }
    }
}

/* A [route] header: the previous route is complete, a new one starts. */
static void route_begin(struct parse_ctx *ctx, const char *section)
{
    md_route_table *t = &ctx->c->routes;
    if (!ctx->routes) {
        ctx->routes = true;
        t->n = 0; /* the file's routes replace the built-in ones */
    }
    char msg[MD_ERROR_MAX - 64];
    if (md_routes_add(t, section + 5, ctx->line, msg, sizeof msg) != 0) {
        ctx_error(ctx, "[%s]: %s", section, msg);
        return;
    }
    ctx->route = &t->r[t->n - 1];
}

static char *read_line(char *str, int num, void *stream)
{
    struct parse_ctx *ctx = stream;
    if (ctx->stop)
        return NULL;
    int ch = getc(ctx->f);
    if (ch == EOF)
        return NULL;
    ctx->line++;

    /* The line, and its '\n' if it has one, must fit with the terminating NUL. */
    size_t n = 0, room = (size_t)num - 1;
    bool too_long = false;
    for (; ch != EOF; ch = getc(ctx->f)) {
        if (++ctx->bytes > MD_CONFIG_FILE_MAX) {
            ctx_error(ctx, "file larger than %d bytes", MD_CONFIG_FILE_MAX);
            ctx->stop = true;
            return NULL;
        }
        if (ch == '\0') {
            ctx_error(ctx, "NUL byte: the file is not text");
            ctx->stop = true;
            return NULL;
        }
        if (n < room && (ch == '\n' || n + 1 < room))
            str[n++] = (char)ch;
        else
            too_long = true;
        if (ch == '\n')
            break;
    }
    str[n] = '\0';
    if (too_long) {
        ctx_error(ctx, "line longer than %d characters", num - 2);
        str[0] = '\0';
        return str;
    }

    size_t skip = strspn(str, " \t");
    if (skip != 0)
        memmove(str, str + skip, strlen(str + skip) + 1);

    if (str[0] == '[') {
        size_t end = strcspn(str + 1, "]\r\n");
        if (str[1 + end] == ']') {
            char section[256] = "";
            if (end < sizeof(section)) {
                memcpy(section, str + 1, end);
                section[end] = '\0';
            }
            /* A header that names no section is the error on this line, reported before
             * what the section it ends lacks (which is then no surprise). */
            bool known = known_section(section);
            if (!known)
                ctx_error(ctx, "unknown section [%.*s]", (int)end, str + 1);
            route_end(ctx);
            upstream_end(ctx);
            if (known && is_route_section(section))
                route_begin(ctx, section);
            else if (known && is_upstream_section(section))
                upstream_begin(ctx, section);
        }
    }
    return str;
}

/* An [https] key of tls.c's (md_tls_key); 1 or 0 as on_key(). */
static int tls_key(struct parse_ctx *ctx, const char *name, const char *value)
{
    char msg[MD_ERROR_MAX - 64];
    int rc = md_tls_key(&ctx->c->tls, name, value, ctx->line, msg, sizeof msg);
    if (rc != 0)
        ctx_error(ctx, "[https] %s: %s", name, rc == -ENOENT ? "unknown key" : msg);
    return rc == 0;
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
    struct parse_ctx *ctx = user;
    struct origin o = {ctx->name, ctx->line};

    if (*section == '\0') {
        ctx_error(ctx, "%s: key outside any [section]", name);
        return 0;
    }
    if (!known_section(section)) {
        ctx_error(ctx, "unknown section [%s]", section);
        return 0;
    }
    if (is_route_section(section)) {
        /* From the route read_line() started (inih cuts long section names). */
        md_route *r = ctx->route;
        if (r == NULL)
            return 0; /* its header was refused, and said so */
        char msg[MD_ERROR_MAX - 64];
        int rc = md_route_key(r, name, value, ctx->line, msg, sizeof msg);
        if (rc == -ENOENT)
            ctx_error(ctx, "[route %s%s] %s: unknown key", r->exact ? "= " : "", r->path, name);
        else if (rc != 0)
            ctx_error(ctx, "[route %s%s] %s: %s", r->exact ? "= " : "", r->path, name, msg);
        return rc == 0;
    }
    if (is_upstream_section(section)) {
        md_upstream_conf *u = ctx->upstream;
        if (u == NULL)
            return 0; /* its header was refused, and said so */
        char msg[MD_ERROR_MAX - 64];
        int rc = md_upstream_key(u, name, value, msg, sizeof msg);
        if (rc == -ENOENT)
            ctx_error(ctx, "[upstream %s] %s: unknown key", u->name, name);
        else if (rc != 0)
            ctx_error(ctx, "[upstream %s] %s: %s", u->name, name, msg);
        return rc == 0;
    }
    const struct key *k = find_key(section, name);
    if (k == NULL && strcmp(section, "https") == 0) /* TLS's own keys: tls.c */
        return tls_key(ctx, name, value);
    if (k == NULL) {
        ctx_error(ctx, "[%s] %s: unknown key", section, name);
        return 0;
    }
    size_t idx = (size_t)(k - keys);
    if (ctx->seen[idx]) {
        ctx_error(ctx, "[%s] %s: set twice (first on line %u)", section, name,
                  (unsigned)ctx->c->key_line[idx]);
        return 0;
    }
    md_error kerr;
    if (apply_key(ctx->c, k, value, o, &kerr) != 0) {
        if (ctx->err_line == 0) {
            ctx->err_line = ctx->line;
            if (ctx->err != NULL)
                *ctx->err = kerr;
        }
        return 0;
    }
    ctx->seen[idx] = true;
    ctx->c->key_line[idx] = ctx->line;
    return 1;
}

int md_config_parse_file(md_config *c, FILE *f, const char *name, md_error *err)
{
    struct parse_ctx ctx = {.c = c, .f = f, .name = name, .err = err};

    int rc = ini_parse_stream(read_line, &ctx, on_key, &ctx);
    route_end(&ctx);
    upstream_end(&ctx);
    routes_link(&ctx);
    md_routes_prepare(&c->routes);
    if (ferror(f)) {
        int e = errno != 0 ? errno : EIO;
        set_error(err, (struct origin){name, ctx.line}, "read error: %s", strerror(e));
        return -e;
    }
    if (rc == -2) {
        set_error(err, (struct origin){name, ctx.line}, "out of memory");
        return -ENOMEM;
    }
    if (rc > 0 && (ctx.err_line == 0 || (unsigned)rc < ctx.err_line)) {
        /* inih's own complaint came first: a line that is neither section nor key = value. */
        set_error(err, (struct origin){name, (unsigned)rc},
                  "syntax error: expected [section], key = value, or a ; or # comment");
        return -EINVAL;
    }
    if (ctx.err_line != 0)
        return -EINVAL;
    snprintf(c->source, sizeof(c->source), "%s", name);
    return 0;
}

int md_config_load(md_config *c, const char *path, md_error *err)
{
    md_config_init(c);
    if (path == NULL)
        return 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        int e = errno;
        if (err != NULL)
            snprintf(err->msg, sizeof(err->msg), "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    /* A device or FIFO may never end (-c /dev/zero) and a directory is no text. */
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        if (err != NULL)
            snprintf(err->msg, sizeof(err->msg), "%s: cannot stat: %s", path, strerror(e));
        fclose(f);
        return -e;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MD_CONFIG_FILE_MAX) {
        if (err != NULL && !S_ISREG(st.st_mode))
            snprintf(err->msg, sizeof(err->msg), "%s: not a regular file", path);
        else if (err != NULL)
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
    struct origin o = {NULL, 0};
    const char *eq = strchr(assignment, '=');
    const char *dot = strchr(assignment, '.');
    if (eq == NULL || dot == NULL || dot > eq) {
        set_error(err, o, "expected section.key=value, got \"%s\"", assignment);
        return -EINVAL;
    }
    char section[64], name[64];
    size_t slen = (size_t)(dot - assignment), nlen = (size_t)(eq - dot - 1);
    if (slen == 0 || slen >= sizeof(section) || nlen == 0 || nlen >= sizeof(name)) {
        set_error(err, o, "expected section.key=value, got \"%s\"", assignment);
        return -EINVAL;
    }
    memcpy(section, assignment, slen);
    section[slen] = '\0';
    memcpy(name, dot + 1, nlen);
    name[nlen] = '\0';

    if (is_route_section(section) || is_upstream_section(section)) {
        set_error(err, o, "[%s]: %s are set in the file only", section,
                  is_route_section(section) ? "routes" : "upstreams");
        return -EINVAL;
    }
    if (!known_section(section)) {
        set_error(err, o, "unknown section [%s]", section);
        return -EINVAL;
    }
    const struct key *k = find_key(section, name);
    if (k == NULL && strcmp(section, "https") == 0) {
        char msg[MD_ERROR_MAX - 64];
        int rc = md_tls_key(&c->tls, name, eq + 1, MD_CONFIG_LINE_SET, msg, sizeof msg);
        if (rc != 0)
            set_error(err, o, "[https] %s: %s", name, rc == -ENOENT ? "unknown key" : msg);
        return rc == 0 ? 0 : -EINVAL;
    }
    if (k == NULL) {
        set_error(err, o, "[%s] %s: unknown key", section, name);
        return -EINVAL;
    }
    int rc = apply_key(c, k, eq + 1, o, err);
    if (rc == 0)
        c->key_line[k - keys] = MD_CONFIG_LINE_SET;
    return rc;
}

/* The origin of a key's current value, for check messages. */
static struct origin key_origin(const md_config *c, const char *section, const char *name)
{
    const struct key *k = find_key(section, name);
    uint32_t line = c->key_line[k - keys];
    if (line == MD_CONFIG_LINE_SET)
        return (struct origin){NULL, 0};
    return (struct origin){c->source, line};
}

int md_config_check(const md_config *c, md_error *err)
{
    if (c->limits.max_request_line > c->limits.max_header_bytes) {
        set_error(err, key_origin(c, "limits", "max_request_line"),
                  "[limits] max_request_line: %u exceeds [limits] max_header_bytes (%u), which "
                  "counts the request line too",
                  c->limits.max_request_line, c->limits.max_header_bytes);
        return -EINVAL;
    }
    const md_listen *h = &c->listeners[MD_LISTENER_HTTP].listen,
                    *e = &c->listeners[MD_LISTENER_ECHO].listen;
    if (!h->enabled) {
        set_error(err, key_origin(c, "http", "listen"), "[http] listen: must be set");
        return -EINVAL;
    }
    if (e->enabled && e->port != 0 && e->port == h->port && e->family == h->family &&
        strcmp(e->host, h->host) == 0) {
        set_error(err, key_origin(c, "echo", "listen"),
                  "[echo] listen: %s%s%s:%u is also [http] listen",
                  e->family == AF_INET6 ? "[" : "", e->host, e->family == AF_INET6 ? "]" : "",
                  (unsigned)e->port);
        return -EINVAL;
    }
    const md_listen *s = &c->listeners[MD_LISTENER_HTTPS].listen;
    for (int i = 0; s->enabled && s->port != 0 && i < 2; i++) {
        const md_listen *o = i == 0 ? h : e;
        if (o->enabled && o->port == s->port && o->family == s->family &&
            strcmp(o->host, s->host) == 0) {
            set_error(err, key_origin(c, "https", "listen"),
                      "[https] listen: %s%s%s:%u is also [%s] listen",
                      s->family == AF_INET6 ? "[" : "", s->host, s->family == AF_INET6 ? "]" : "",
                      (unsigned)s->port, i == 0 ? "http" : "echo");
            return -EINVAL;
        }
    }
    /* [https] on: the certificate and key, read and checked now (magpied -t, a reload). */
    if (s->enabled || c->tls.cert[0][0] != '\0')
        return md_tls_config_check(&c->tls, c->source, err);
    return 0;
}
