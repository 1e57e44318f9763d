/* The route table (routes.h): building it from [route] sections, the lookup, and the path
 * rules every lookup goes through.
 *
 * A table holds at most MD_ROUTES_MAX routes, kept in order[] longest path first (exact before
 * prefix at equal length), so the lookup is one scan that stops at the first match: for the
 * shipped four exact routes, a length compare and at most one memcmp each. md_path_is_normal()
 * lets the usual path ("/", "/metrics") through without a copy.
 */
#include "http/routes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/handler.h"
#include "http/response.h"
#include "llhttp.h"

#define BIT(m) (UINT64_C(1) << (m))
/* HTTP's methods in llhttp's numbering (HTTP_METHOD_MAP: DELETE 0 .. SOURCE 33). */
#define HTTP_METHODS 34

static const char *const kind_names[MD_HANDLER_KINDS] = {
    [MD_HANDLER_TEXT] = "text",         [MD_HANDLER_ECHO] = "echo",
    [MD_HANDLER_METRICS] = "metrics",   [MD_HANDLER_HEALTH] = "health",
    [MD_HANDLER_REDIRECT] = "redirect", [MD_HANDLER_STATIC] = "static",
    [MD_HANDLER_PROXY] = "proxy",
};

static const md_handler *const handlers[MD_HANDLER_KINDS] = {
    [MD_HANDLER_TEXT] = &md_handler_text,         [MD_HANDLER_ECHO] = &md_handler_echo,
    [MD_HANDLER_METRICS] = &md_handler_metrics,   [MD_HANDLER_HEALTH] = &md_handler_health,
    [MD_HANDLER_REDIRECT] = &md_handler_redirect, [MD_HANDLER_STATIC] = &md_handler_static,
    [MD_HANDLER_PROXY] = &md_handler_proxy,
};

void md_say(char *msg, size_t len, const char *fmt, ...)
{
    if (msg == NULL || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

static int hex(unsigned ch)
{
    if (ch >= '0' && ch <= '9')
        return (int)(ch - '0');
    ch |= 0x20;
    if (ch >= 'a' && ch <= 'f')
        return (int)(ch - 'a' + 10);
    return -1;
}

bool md_path_is_normal(const char *in, size_t len)
{
    if (len == 0 || in[0] != '/')
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = in[i];
        if (ch == '%')
            return false;
        if (ch == '/' && i + 1 < len) {
            char n = in[i + 1];
            if (n == '/')
                return false;
            /* "/." followed by the end, '/', or ".": a dot segment */
            if (n == '.' && (i + 2 == len || in[i + 2] == '/' ||
                             (in[i + 2] == '.' && (i + 3 == len || in[i + 3] == '/'))))
                return false;
        }
    }
    return true;
}

int md_path_normalise(const char *in, size_t len, char *out, size_t *out_len)
{
    if (len == 0 || in[0] != '/')
        return -EINVAL;
    /* Decode into out, then fold segments in place: out never outgrows in. */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned ch = (unsigned char)in[i];
        if (ch == '%') {
            int hi = i + 2 < len ? hex((unsigned char)in[i + 1]) : -1;
            int lo = hi >= 0 ? hex((unsigned char)in[i + 2]) : -1;
            if (lo < 0)
                return -EINVAL;
            /* An escaped '/' is decoded like any other byte, and then separates segments
             * here: the path that picks the route is the one a decoding application would
             * read, so an escape never reaches past a route ("/api%2F..%2Fadmin" is /admin).
             * The target itself goes on as sent (a proxied one keeps its %2F). */
            ch = (unsigned)(hi * 16 + lo);
            i += 2;
        }
        if (ch < 0x20 || ch == 0x7f || ch == '\\')
            return -EINVAL;
        out[n++] = (char)ch;
    }
    /* Segments: w is where the next byte of the result goes, always after a '/'. */
    size_t w = 1, r = 1;
    out[0] = '/';
    while (r < n) {
        size_t end = r;
        while (end < n && out[end] != '/')
            end++;
        size_t seg = end - r;
        bool last = end == n;
        if (seg == 0) {
            /* "//": nothing */
        } else if (seg == 1 && out[r] == '.') {
            /* ".": nothing */
        } else if (seg == 2 && out[r] == '.' && out[r + 1] == '.') {
            if (w == 1)
                return -EINVAL; /* above the root */
            w--;                /* the '/' after the previous segment */
            while (out[w - 1] != '/')
                w--;
        } else {
            memmove(out + w, out + r, seg);
            w += seg;
            if (!last)
                out[w++] = '/';
        }
        r = end + 1;
        /* A path ending in "/", "/." or "/.." names a directory: keep the trailing '/'. */
        (void)last;
    }
    *out_len = w;
    return 0;
}

/* Methods for a handler that was given none. */
static uint64_t default_methods(md_handler_kind k)
{
    if (k == MD_HANDLER_PROXY) /* what the application takes is the application's affair */
        return BIT(HTTP_GET) | BIT(HTTP_HEAD) | BIT(HTTP_POST) | BIT(HTTP_PUT) | BIT(HTTP_DELETE) |
               BIT(HTTP_PATCH);
    return k == MD_HANDLER_ECHO ? BIT(HTTP_POST) : BIT(HTTP_GET) | BIT(HTTP_HEAD);
}

static const char *default_ctype(md_handler_kind k)
{
    switch (k) {
    case MD_HANDLER_ECHO:
        return "application/octet-stream";
    case MD_HANDLER_METRICS:
        return "text/plain; version=0.0.4; charset=utf-8";
    case MD_HANDLER_STATIC:
        return "application/octet-stream"; /* for a name /etc/mime.types does not know */
    default:
        return "text/plain";
    }
}

static void set_text(char *dst, size_t cap, uint16_t *len, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    if (len != NULL)
        *len = (uint16_t)n;
}

static void set_handler(md_route *r, md_handler_kind k)
{
    r->has_handler = true;
    r->kind = (uint8_t)k;
    r->methods = default_methods(k);
    set_text(r->content_type, sizeof r->content_type, NULL, default_ctype(k));
    r->status = k == MD_HANDLER_REDIRECT ? 302 : 200;
    r->body_len = 0;
    r->body[0] = '\0';
    if (k == MD_HANDLER_HEALTH)
        set_text(r->body, sizeof r->body, &r->body_len, "ok");
    set_text(r->index_file, sizeof r->index_file, NULL, k == MD_HANDLER_STATIC ? "index.html" : "");
    r->precompressed = false;
    r->upstream[0] = '\0';
    r->host_mode = MD_PROXY_HOST_PASS;
    r->forwarded = r->via = r->websocket = false;
}

static void builtin(md_route_table *t, const char *path, md_handler_kind k)
{
    md_route *r = &t->r[t->n++];
    memset(r, 0, sizeof *r);
    r->root_fd = -1;
    set_text(r->path, sizeof r->path, &r->path_len, path);
    r->exact = true;
    set_handler(r, k);
}

void md_routes_builtin(md_route_table *t)
{
    memset(t, 0, sizeof *t);
    builtin(t, "/", MD_HANDLER_TEXT);
    set_text(t->r[0].body, sizeof t->r[0].body, &t->r[0].body_len, "Hello, World!");
    builtin(t, "/echo", MD_HANDLER_ECHO);
    builtin(t, "/metrics", MD_HANDLER_METRICS);
    builtin(t, "/healthz", MD_HANDLER_HEALTH);
    md_routes_prepare(t);
}

int md_routes_add(md_route_table *t, const char *spec, uint32_t line, char *msg, size_t msg_len)
{
    while (*spec == ' ' || *spec == '\t')
        spec++;
    bool exact = false;
    if (*spec == '=') {
        exact = true;
        spec++;
        while (*spec == ' ' || *spec == '\t')
            spec++;
    }
    size_t len = strlen(spec);
    while (len != 0 && (spec[len - 1] == ' ' || spec[len - 1] == '\t'))
        len--;
    if (len == 0 || spec[0] != '/') {
        md_say(msg, msg_len, "expected [route /path] or [route = /path]");
        return -EINVAL;
    }
    if (len >= MD_ROUTE_PATH_MAX) {
        md_say(msg, msg_len, "path longer than %d bytes", MD_ROUTE_PATH_MAX - 1);
        return -EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned ch = (unsigned char)spec[i];
        if (ch <= ' ' || ch >= 0x7f || ch == '?' || ch == '#' || ch == '\\') {
            md_say(msg, msg_len, "a path is visible ASCII without '?', '#', '\\' or spaces");
            return -EINVAL;
        }
    }
    if (!md_path_is_normal(spec, len)) {
        md_say(msg, msg_len,
               "path must be normalised: no '%%' escape, no \"//\", no \".\" or \"..\" segment");
        return -EINVAL;
    }
    for (uint32_t i = 0; i < t->n; i++) {
        const md_route *o = &t->r[i];
        if (o->exact == exact && o->path_len == len && memcmp(o->path, spec, len) == 0) {
            md_say(msg, msg_len, "the same route as line %u", (unsigned)o->line);
            return -EINVAL;
        }
    }
    if (t->n == MD_ROUTES_MAX) {
        md_say(msg, msg_len, "more than %d routes", MD_ROUTES_MAX);
        return -EINVAL;
    }
    md_route *r = &t->r[t->n++];
    memset(r, 0, sizeof *r);
    r->root_fd = -1;
    memcpy(r->path, spec, len);
    r->path[len] = '\0';
    r->path_len = (uint16_t)len;
    r->exact = exact;
    r->line = line;
    return 0;
}

/* "GET, HEAD" or "GET HEAD": names as llhttp spells them, upper case. */
static int parse_methods(const char *s, uint64_t *out, char *msg, size_t msg_len)
{
    uint64_t m = 0;
    while (*s != '\0') {
        while (*s == ' ' || *s == ',' || *s == '\t')
            s++;
        if (*s == '\0')
            break;
        size_t n = strcspn(s, " ,\t");
        unsigned i;
        for (i = 0; i < HTTP_METHODS; i++) {
            const char *name = llhttp_method_name((llhttp_method_t)i);
            if (strlen(name) == n && memcmp(name, s, n) == 0)
                break;
        }
        if (i == HTTP_METHODS) {
            md_say(msg, msg_len, "unknown method \"%.*s\" (upper case, as GET, POST)", (int)n, s);
            return -EINVAL;
        }
        if (i == HTTP_CONNECT) {
            md_say(msg, msg_len, "CONNECT is not served (501): magpied is no proxy");
            return -EINVAL;
        }
        if (i != HTTP_OPTIONS) /* always answered, from the table */
            m |= BIT(i);
        s += n;
    }
    if (m & BIT(HTTP_GET))
        m |= BIT(HTTP_HEAD);
    if (m == 0) {
        md_say(msg, msg_len, "expected a list of methods, such as GET, POST");
        return -EINVAL;
    }
    *out = m;
    return 0;
}

/* Bytes a header value may carry from the configuration: visible ASCII and spaces, no
 * control byte (a CR or LF would end the field and start another). */
static bool field_safe(const char *s, bool spaces)
{
    for (; *s != '\0'; s++) {
        unsigned ch = (unsigned char)*s;
        if (ch < 0x20 || ch >= 0x7f || (!spaces && ch == ' '))
            return false;
    }
    return true;
}

static bool redirect_status(unsigned s)
{
    return s == 301 || s == 302 || s == 303 || s == 307 || s == 308;
}

static bool text_status(unsigned s)
{
    /* A status the table has, that carries a body. */
    return s >= 200 && s <= 599 && s != 204 && s != 206 && s != 304 && s != 416 &&
           md_http_status_of(s)->code == s;
}

/* The static handler's options. */
static int static_key(md_route *r, const char *key, const char *value, char *msg, size_t msg_len)
{
    if (strcmp(key, "root") == 0) {
        struct stat st;
        if (value[0] != '/' || strlen(value) >= MD_ROUTE_TEXT_MAX) {
            md_say(msg, msg_len, "expected an absolute directory path, at most %d bytes",
                   MD_ROUTE_TEXT_MAX - 1);
            return -EINVAL;
        }
        if (stat(value, &st) != 0) {
            md_say(msg, msg_len, "%s: %s", value, strerror(errno));
            return -EINVAL;
        }
        if (!S_ISDIR(st.st_mode)) {
            md_say(msg, msg_len, "%s: not a directory", value);
            return -EINVAL;
        }
        set_text(r->body, sizeof r->body, &r->body_len, value);
        return 0;
    }
    if (strcmp(key, "index") == 0) {
        size_t n = strlen(value);
        if (n == 0 || n >= MD_ROUTE_INDEX_MAX || strchr(value, '/') != NULL || value[0] == '.' ||
            !field_safe(value, false)) {
            md_say(msg, msg_len,
                   "expected a file name (no '/', not starting with '.'), at most %d bytes",
                   MD_ROUTE_INDEX_MAX - 1);
            return -EINVAL;
        }
        set_text(r->index_file, sizeof r->index_file, NULL, value);
        return 0;
    }
    if (strcmp(key, "precompressed") == 0) {
        if (strcmp(value, "on") == 0 || strcmp(value, "off") == 0) {
            r->precompressed = value[1] == 'n';
            return 0;
        }
        md_say(msg, msg_len, "expected on or off, got \"%s\"", value);
        return -EINVAL;
    }
    /* default_type */
    if (value[0] == '\0' || strlen(value) >= MD_ROUTE_CTYPE_MAX || !field_safe(value, true)) {
        md_say(msg, msg_len, "expected a media type of visible ASCII, at most %d bytes",
               MD_ROUTE_CTYPE_MAX - 1);
        return -EINVAL;
    }
    set_text(r->content_type, sizeof r->content_type, NULL, value);
    return 0;
}

static int proxy_bool(bool *b, const char *value, char *msg, size_t msg_len)
{
    if (strcmp(value, "on") == 0 || strcmp(value, "yes") == 0 || strcmp(value, "true") == 0 ||
        strcmp(value, "1") == 0) {
        *b = true;
        return 0;
    }
    if (strcmp(value, "off") == 0 || strcmp(value, "no") == 0 || strcmp(value, "false") == 0 ||
        strcmp(value, "0") == 0) {
        *b = false;
        return 0;
    }
    md_say(msg, msg_len, "expected on, yes, true, 1, off, no, false or 0, got \"%s\"", value);
    return -EINVAL;
}

/* The proxy handler's options. The name of an [upstream] is checked against the sections
 * once the whole file is read (md_config). */
static int proxy_key(md_route *r, const char *key, const char *value, char *msg, size_t msg_len)
{
    if (strcmp(key, "upstream") == 0) {
        size_t n = strlen(value);
        bool ok = n != 0 && n < MD_ROUTE_NAME_MAX;
        for (size_t i = 0; ok && i < n; i++) {
            char ch = value[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '-';
        }
        if (!ok) {
            md_say(msg, msg_len,
                   "expected an upstream name of [A-Za-z0-9_-], 1 to %d bytes, got \"%s\"",
                   MD_ROUTE_NAME_MAX - 1, value);
            return -EINVAL;
        }
        memcpy(r->upstream, value, n + 1);
        return 0;
    }
    if (strcmp(key, "host") == 0) {
        if (strcmp(value, "pass") == 0) {
            r->host_mode = MD_PROXY_HOST_PASS;
        } else if (strcmp(value, "upstream") == 0) {
            r->host_mode = MD_PROXY_HOST_UPSTREAM;
        } else {
            if (value[0] == '\0' || strlen(value) >= MD_ROUTE_TEXT_MAX ||
                !field_safe(value, false)) {
                md_say(
                    msg, msg_len,
                    "expected pass, upstream, or a host of visible ASCII without spaces, at most "
                    "%d bytes",
                    MD_ROUTE_TEXT_MAX - 1);
                return -EINVAL;
            }
            r->host_mode = MD_PROXY_HOST_LITERAL;
            set_text(r->body, sizeof r->body, &r->body_len, value);
        }
        return 0;
    }
    if (strcmp(key, "forwarded") == 0)
        return proxy_bool(&r->forwarded, value, msg, msg_len);
    if (strcmp(key, "via") == 0)
        return proxy_bool(&r->via, value, msg, msg_len);
    return proxy_bool(&r->websocket, value, msg, msg_len);
}

int md_route_key(md_route *r, const char *key, const char *value, char *msg, size_t msg_len)
{
    if (strcmp(key, "handler") == 0) {
        if (r->has_handler) {
            md_say(msg, msg_len, "set twice");
            return -EINVAL;
        }
        for (unsigned k = 0; k < MD_HANDLER_KINDS; k++) {
            if (strcmp(value, kind_names[k]) == 0) {
                set_handler(r, (md_handler_kind)k);
                return 0;
            }
        }
        md_say(msg, msg_len,
               "expected text, echo, metrics, health, redirect, static or proxy, got \"%s\"",
               value);
        return -EINVAL;
    }
    bool known = strcmp(key, "methods") == 0 || strcmp(key, "status") == 0 ||
                 strcmp(key, "body") == 0 || strcmp(key, "content_type") == 0 ||
                 strcmp(key, "location") == 0 || strcmp(key, "root") == 0 ||
                 strcmp(key, "index") == 0 || strcmp(key, "default_type") == 0 ||
                 strcmp(key, "precompressed") == 0 || strcmp(key, "upstream") == 0 ||
                 strcmp(key, "host") == 0 || strcmp(key, "forwarded") == 0 ||
                 strcmp(key, "via") == 0 || strcmp(key, "websocket") == 0;
    if (!known)
        return -ENOENT;
    if (!r->has_handler) {
        md_say(msg, msg_len, "set handler first: the options that follow belong to it");
        return -EINVAL;
    }
    md_handler_kind k = (md_handler_kind)r->kind;
    if (strcmp(key, "methods") == 0) {
        if (r->has_methods) {
            md_say(msg, msg_len, "set twice");
            return -EINVAL;
        }
        r->has_methods = true;
        return parse_methods(value, &r->methods, msg, msg_len);
    }
    if (strcmp(key, "status") == 0) {
        if (k != MD_HANDLER_TEXT && k != MD_HANDLER_REDIRECT) {
            md_say(msg, msg_len, "only for handler = text or redirect");
            return -EINVAL;
        }
        unsigned s = 0;
        size_t n = strlen(value);
        for (size_t i = 0; i < n && n == 3; i++)
            s = value[i] >= '0' && value[i] <= '9' ? s * 10 + (unsigned)(value[i] - '0') : 0;
        if (n != 3 || (k == MD_HANDLER_REDIRECT ? !redirect_status(s) : !text_status(s))) {
            md_say(msg, msg_len,
                   k == MD_HANDLER_REDIRECT
                       ? "expected 301, 302, 303, 307 or 308, got \"%s\""
                       : "expected a status with a body that magpied knows (200, 400, 403, 404, "
                         "410, 500, 503, ...), got \"%s\"",
                   value);
            return -EINVAL;
        }
        r->status = (uint16_t)s;
        return 0;
    }
    if (strcmp(key, "body") == 0) {
        if (k != MD_HANDLER_TEXT) {
            md_say(msg, msg_len, "only for handler = text");
            return -EINVAL;
        }
        set_text(r->body, sizeof r->body, &r->body_len, value);
        return 0;
    }
    if (strcmp(key, "content_type") == 0) {
        if (k != MD_HANDLER_TEXT && k != MD_HANDLER_ECHO) {
            md_say(msg, msg_len, "only for handler = text or echo");
            return -EINVAL;
        }
        if (value[0] == '\0' || strlen(value) >= MD_ROUTE_CTYPE_MAX || !field_safe(value, true)) {
            md_say(msg, msg_len, "expected a media type of visible ASCII, at most %d bytes",
                   MD_ROUTE_CTYPE_MAX - 1);
            return -EINVAL;
        }
        set_text(r->content_type, sizeof r->content_type, NULL, value);
        return 0;
    }
    if (strcmp(key, "root") == 0 || strcmp(key, "index") == 0 || strcmp(key, "default_type") == 0 ||
        strcmp(key, "precompressed") == 0) {
        if (k != MD_HANDLER_STATIC) {
            md_say(msg, msg_len, "only for handler = static");
            return -EINVAL;
        }
        return static_key(r, key, value, msg, msg_len);
    }
    if (strcmp(key, "upstream") == 0 || strcmp(key, "host") == 0 || strcmp(key, "forwarded") == 0 ||
        strcmp(key, "via") == 0 || strcmp(key, "websocket") == 0) {
        if (k != MD_HANDLER_PROXY) {
            md_say(msg, msg_len, "only for handler = proxy");
            return -EINVAL;
        }
        return proxy_key(r, key, value, msg, msg_len);
    }
    /* location */
    if (k != MD_HANDLER_REDIRECT) {
        md_say(msg, msg_len, "only for handler = redirect");
        return -EINVAL;
    }
    if (value[0] == '\0' || strlen(value) >= MD_ROUTE_TEXT_MAX || !field_safe(value, false)) {
        md_say(msg, msg_len, "expected a URI of visible ASCII without spaces, at most %d bytes",
               MD_ROUTE_TEXT_MAX - 1);
        return -EINVAL;
    }
    set_text(r->body, sizeof r->body, &r->body_len, value);
    return 0;
}

int md_route_check(const md_route *r, char *msg, size_t msg_len)
{
    if (!r->has_handler) {
        md_say(msg, msg_len,
               "handler: required (text, echo, metrics, health, redirect, static or proxy)");
        return -EINVAL;
    }
    if (r->kind == MD_HANDLER_PROXY && r->upstream[0] == '\0') {
        md_say(msg, msg_len, "upstream: required for handler = proxy");
        return -EINVAL;
    }
    if (r->kind == MD_HANDLER_REDIRECT && r->body_len == 0) {
        md_say(msg, msg_len, "location: required for handler = redirect");
        return -EINVAL;
    }
    if (r->kind == MD_HANDLER_STATIC && r->body_len == 0) {
        md_say(msg, msg_len, "root: required for handler = static");
        return -EINVAL;
    }
    return 0;
}

static atomic_uint_fast64_t next_root_id; /* md_route.root_id: roots opened, ever */

int md_routes_open(md_route_table *t, char *msg, size_t msg_len)
{
    for (uint32_t i = 0; i < t->n; i++)
        t->r[i].root_fd = -1;
    for (uint32_t i = 0; i < t->n; i++) {
        md_route *r = &t->r[i];
        if (r->kind != MD_HANDLER_STATIC)
            continue;
        r->root_fd = open(r->body, O_PATH | O_DIRECTORY | O_CLOEXEC);
        /* Relaxed: a unique number, publishing nothing. */
        r->root_id = atomic_fetch_add_explicit(&next_root_id, 1, memory_order_relaxed) + 1;
        if (r->root_fd < 0) {
            int e = errno;
            md_say(msg, msg_len, "[route %s%s] root %s: %s", r->exact ? "= " : "", r->path, r->body,
                   strerror(e));
            md_routes_close(t);
            return -e;
        }
    }
    return 0;
}

void md_routes_close(md_route_table *t)
{
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->r[i].root_fd >= 0)
            close(t->r[i].root_fd);
        t->r[i].root_fd = -1;
    }
}

/* "GET, HEAD, OPTIONS": the methods in llhttp's order, then OPTIONS. */
static void allow_text(uint64_t methods, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < HTTP_METHODS; i++) {
        if (!(methods & BIT(i)) || i == HTTP_OPTIONS)
            continue;
        int k = snprintf(buf + n, cap - n, "%s, ", llhttp_method_name((llhttp_method_t)i));
        if (k < 0 || (size_t)k >= cap - n)
            break;
        n += (size_t)k;
    }
    snprintf(buf + n, cap - n, "OPTIONS");
}

static bool before(const md_route *a, const md_route *b)
{
    if (a->path_len != b->path_len)
        return a->path_len > b->path_len;
    return a->exact && !b->exact;
}

void md_routes_prepare(md_route_table *t)
{
    /* Only uniqueness matters: relaxed is enough, nothing is published through the id. */
    static _Atomic uint64_t next_id = 1;
    t->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
    uint64_t any = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        md_route *r = &t->r[i];
        r->index = (uint8_t)i;
        r->handler = handlers[r->kind < MD_HANDLER_KINDS ? r->kind : MD_HANDLER_TEXT];
        /* A proxied route's OPTIONS (a CORS preflight, say) is the application's to answer. */
        if (r->kind == MD_HANDLER_PROXY)
            r->methods |= BIT(HTTP_OPTIONS);
        allow_text(r->methods, r->allow, sizeof r->allow);
        any |= r->methods;
        /* Insertion sort: at most MD_ROUTES_MAX entries, once per reload. */
        uint32_t j = i;
        while (j > 0 && before(r, &t->r[t->order[j - 1]])) {
            t->order[j] = t->order[j - 1];
            j--;
        }
        t->order[j] = (uint8_t)i;
    }
    allow_text(any, t->allow_any, sizeof t->allow_any);
}

const md_route *md_routes_find(const md_route_table *t, const char *path, size_t len)
{
    for (uint32_t i = 0; i < t->n; i++) {
        const md_route *r = &t->r[t->order[i]];
        size_t n = r->path_len;
        if (n > len || memcmp(r->path, path, n) != 0)
            continue;
        if (n == len)
            return r;
        /* A prefix route covers the paths below it: "/a" covers "/a/b", not "/ab". */
        if (!r->exact && (r->path[n - 1] == '/' || path[n] == '/'))
            return r;
    }
    return NULL;
}
