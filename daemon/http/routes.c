/* The route table (routes.h): building it from [route] sections, the lookup, and the path
 * rules every lookup goes through.
 *
 * A table holds at most MD_ROUTES_MAX routes, kept in order[] longest path first (exact before
 * prefix at equal length), so the lookup is one scan that stops at the first match: over
 * probe[] (each route's length and site, in that order), with a memcmp of the route's path
 * only where those fit; for the shipped four exact routes, a length compare each and one
 * memcmp. md_path_is_normal() (routes.h) lets the usual path ("/", "/metrics") through
 * without a copy.
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

#include "core/ini.h"
#include "core/metrics.h"
#include "core/text.h"
#include "http/handler.h"
#include "llhttp.h"

#define BIT(m) (UINT64_C(1) << (m))
/* HTTP's methods in llhttp's numbering (HTTP_METHOD_MAP: DELETE 0 .. SOURCE 33), which is
 * magpied's for every protocol (enum md_method, request.h). */
#define HTTP_METHODS 34

const char *md_method_name(unsigned method)
{
    return llhttp_method_name((llhttp_method_t)method);
}

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

/* Names the route's handler: its options start from the handler's defaults. */
static void set_handler(md_route *r, const md_handler *h)
{
    r->handler = h;
    r->methods = h->methods;
    memset(r->conf, 0, sizeof r->conf);
    if (h->conf_init != NULL)
        h->conf_init(r->conf);
}

static md_route *builtin(md_route_table *t, const char *path, const char *handler)
{
    md_route *r = &t->r[t->n++];
    memset(r, 0, sizeof *r);
    r->path_len = (uint16_t)md_text_set(r->path, sizeof r->path, path);
    r->exact = true;
    md_compress_init(&r->compress);
    set_handler(r, md_handler_find(handler));
    return r;
}

/* The built-in /echo and /metrics answer loopback clients alone, as the shipped file's do. */
static void loopback_only(md_route *r)
{
    md_acl_add(&r->acl, true, MD_ACL_LOOPBACK, NULL, 0);
    md_acl_add(&r->acl, false, "all", NULL, 0);
}

void md_routes_builtin(md_route_table *t)
{
    memset(t, 0, sizeof *t);
    builtin(t, "/", "text");
    md_route_key(&t->r[0], "body", "Hello, World!", 0, NULL, 0);
    loopback_only(builtin(t, "/echo", "echo"));
    loopback_only(builtin(t, "/metrics", "metrics"));
    builtin(t, "/healthz", "health");
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
        if (o->site == t->cur_site && o->exact == exact && o->path_len == len &&
            memcmp(o->path, spec, len) == 0) {
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
    memcpy(r->path, spec, len);
    r->path[len] = '\0';
    r->path_len = (uint16_t)len;
    r->exact = exact;
    r->line = line;
    md_ratelimit_conf_init(&r->limit);
    md_compress_init(&r->compress);
    r->site = t->cur_site;
    return 0;
}

/* "GET, HEAD" or "GET HEAD": names as llhttp spells them, upper case. */
static int parse_methods(const char *s, uint64_t *out, char *msg, size_t msg_len)
{
    uint64_t m = 0;
    const char *w;
    size_t n;
    while (md_words_next(&s, &w, &n)) {
        unsigned i;
        for (i = 0; i < HTTP_METHODS; i++) {
            const char *name = llhttp_method_name((llhttp_method_t)i);
            if (strlen(name) == n && memcmp(name, w, n) == 0)
                break;
        }
        if (i == HTTP_METHODS) {
            md_say(msg, msg_len, "unknown method \"%.*s\" (upper case, as GET, POST)", (int)n, w);
            return -EINVAL;
        }
        if (i == HTTP_CONNECT) {
            md_say(msg, msg_len, "CONNECT is not served (501): magpied is no forward proxy");
            return -EINVAL;
        }
        if (i != HTTP_OPTIONS) /* always answered, from the table */
            m |= BIT(i);
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

static void allow_text(uint64_t methods, char *buf, size_t cap);

int md_route_key(md_route *r, const char *key, const char *value, uint32_t line, char *msg,
                 size_t msg_len)
{
    if (strcmp(key, "handler") == 0) {
        if (r->handler != NULL) {
            md_say(msg, msg_len, "set twice");
            return -EINVAL;
        }
        const md_handler *h = md_handler_find(value);
        if (h == NULL) {
            char names[160];
            md_handler_names(names, sizeof names);
            md_say(msg, msg_len, "expected %s, got \"%s\"", names, value);
            return -EINVAL;
        }
        set_handler(r, h);
        return 0;
    }
    if (strcmp(key, "allow") == 0 || strcmp(key, "deny") == 0)
        return md_acl_add(&r->acl, key[0] == 'a', value, msg, msg_len);
    int rc = md_ratelimit_key(&r->limit, key, value, msg, msg_len);
    if (rc != -ENOENT)
        return rc;
    /* Filters around the handler, whichever it is (request.c applies them). */
    rc = md_auth_key(&r->auth, key, value, line, msg, msg_len);
    if (rc != -ENOENT)
        return rc;
    rc = md_headers_key(&r->headers, key, value, msg, msg_len);
    if (rc != -ENOENT)
        return rc;
    rc = md_real_ip_key(&r->real_ip, key, value, msg, msg_len);
    if (rc != -ENOENT)
        return rc;
    rc = md_error_page_key(&r->errors, key, value, line, msg, msg_len);
    if (rc != -ENOENT)
        return rc;
    rc = md_compress_key(&r->compress, key, value, msg, msg_len);
    if (rc != -ENOENT)
        return rc;
    char owners[160];
    bool methods = strcmp(key, "methods") == 0;
    if (!methods && md_handler_key_owners(key, owners, sizeof owners) == 0)
        return -ENOENT;
    if (r->handler == NULL) {
        md_say(msg, msg_len, "set handler first: the options that follow belong to it");
        return -EINVAL;
    }
    if (methods) {
        if (r->has_methods) {
            md_say(msg, msg_len, "set twice");
            return -EINVAL;
        }
        r->has_methods = true;
        rc = parse_methods(value, &r->methods, msg, msg_len);
        uint64_t max = r->handler->methods_max;
        if (rc == 0 && max != 0 && (r->methods & ~max) != 0) {
            char names[128];
            allow_text(max, names, sizeof names);
            md_say(msg, msg_len, "handler = %s serves %s only", r->handler->name, names);
            return -EINVAL;
        }
        return rc;
    }
    if (!md_handler_has_key(r->handler, key)) {
        md_say(msg, msg_len, "only for handler = %s", owners);
        return -EINVAL;
    }
    return r->handler->conf_key(r->conf, key, value, line, msg, msg_len);
}

int md_route_check(const md_route *r, char *msg, size_t msg_len)
{
    if (r->handler == NULL) {
        char names[160];
        md_handler_names(names, sizeof names);
        md_say(msg, msg_len, "handler: required (%s)", names);
        return -EINVAL;
    }
    int rc = md_ratelimit_conf_check(&r->limit, msg, msg_len);
    if (rc == 0)
        rc = md_auth_check(&r->auth, msg, msg_len);
    if (rc == 0)
        rc = md_real_ip_check(&r->real_ip, msg, msg_len);
    if (rc != 0)
        return rc;
    return r->handler->conf_check != NULL ? r->handler->conf_check(r->conf, msg, msg_len) : 0;
}

/* The [route] section (core/ini.h): each header one route, its keys md_route_key()'s. */

static void route_section_init(void *conf)
{
    md_routes_builtin(conf);
}

static int route_section_begin(void *conf, const char *arg, bool first, uint32_t line, void **inst,
                               char *msg, size_t msg_len)
{
    md_route_table *t = conf;
    if (first)
        t->n = 0; /* the file's routes replace the built-in ones */
    int rc = md_routes_add(t, arg, line, msg, msg_len);
    if (rc == 0)
        *inst = &t->r[t->n - 1];
    return rc;
}

static int route_section_key(void *inst, const char *key, const char *value, uint32_t line,
                             char *msg, size_t msg_len)
{
    return md_route_key(inst, key, value, line, msg, msg_len);
}

static int route_section_end(void *inst, char *msg, size_t msg_len)
{
    return md_route_check(inst, msg, msg_len);
}

/* After the whole file: what each route's options name elsewhere in it (a proxy route's
 * [upstream]) exists; then the table is prepared. */
static int route_section_done(void *conf, const md_ini_conf *all, uint32_t *line, char *msg,
                              size_t msg_len)
{
    md_route_table *t = conf;
    int rc = 0;
    for (uint32_t i = 0; i < t->n && rc == 0; i++) {
        md_route *r = &t->r[i];
        if (r->handler == NULL || r->handler->conf_link == NULL)
            continue;
        char why[256];
        uint32_t at = 0;
        rc = r->handler->conf_link(r->conf, all, &at, why, sizeof why);
        if (rc != 0) {
            md_say(msg, msg_len, "[route %s%s] %s", r->exact ? "= " : "", r->path, why);
            *line = at != 0 ? at : r->line;
        }
    }
    /* A route that sets no header rule, or no error page, has its site's (sites.h): copied
     * here, once, so that every way a response goes (the proxy's relayed heads, the canned
     * ones) has them at no cost per request. */
    for (uint32_t i = 0; i < t->n; i++) {
        md_route *r = &t->r[i];
        const md_site *site = &t->sites[r->site < MD_SITES_MAX ? r->site : 0];
        if (r->headers.add_len == 0 && r->headers.drop_len == 0 && !r->headers.always)
            r->headers = site->headers;
        if (r->errors.n == 0)
            r->errors = site->errors;
    }
    md_routes_prepare(t);
    return rc;
}

const md_ini_section md_section_route = {
    .name = "route",
    .repeats = true,
    .init = route_section_init,
    .begin = route_section_begin,
    .key = route_section_key,
    /* The list keys (magpied.conf(5) says "repeatable" or "the key may repeat"). */
    .repeatable = (const char *const[]){"allow", "deny", "real_ip_from", "header_add", "header_set",
                                        "header_remove", "error_page", NULL},
    .end = route_section_end,
    .done = route_section_done,
};

int md_routes_check_files(const md_route_table *t, uint32_t *line, char *msg, size_t msg_len)
{
    for (uint32_t i = 0; i < MD_SITES_MAX; i++) {
        md_route_error_pages e = t->sites[i].errors;
        char why[320] = "";
        int rc = md_error_pages_open(&e, line, why, sizeof why);
        if (rc != 0) {
            if (i == 0)
                md_say(msg, msg_len, "[http] error_page: %s", why);
            else
                md_say(msg, msg_len, "[site %s] error_page: %s", t->sites[i].name, why);
            return rc;
        }
        md_error_pages_close(&e);
    }
    for (uint32_t i = 0; i < t->n; i++) {
        const md_route *r = &t->r[i];
        if (r->auth.realm[0] == '\0')
            continue;
        md_htpasswd *h = NULL;
        char why[320] = "";
        int rc = md_htpasswd_load(r->auth.file, &h, why, sizeof why);
        if (rc != 0) {
            md_say(msg, msg_len, "[route %s%s] auth_basic_user_file: %s", r->exact ? "= " : "",
                   r->path, why);
            *line = r->auth.file_line;
            return rc;
        }
        md_htpasswd_free(h);
    }
    for (uint32_t i = 0; i < t->n; i++) {
        md_route_error_pages e = t->r[i].errors;
        char why[320] = "";
        int rc = md_error_pages_open(&e, line, why, sizeof why);
        if (rc != 0) {
            md_say(msg, msg_len, "[route %s%s] error_page: %s", t->r[i].exact ? "= " : "",
                   t->r[i].path, why);
            return rc;
        }
        md_error_pages_close(&e);
    }
    return 0;
}

/* The sites' error pages (sites.h), read for one generation: 0 or -EINVAL with msg. */
static int sites_open(md_route_table *t, char *msg, size_t msg_len)
{
    for (uint32_t i = 0; i < MD_SITES_MAX; i++)
        memset(t->sites[i].errors.body, 0, sizeof t->sites[i].errors.body);
    for (uint32_t i = 0; i < MD_SITES_MAX; i++) {
        char why[320] = "";
        uint32_t at;
        if (md_error_pages_open(&t->sites[i].errors, &at, why, sizeof why) != 0) {
            md_say(msg, msg_len, "[%s%s] error_page: %s", i == 0 ? "http" : "site ",
                   i == 0 ? "" : t->sites[i].name, why);
            return -EINVAL;
        }
    }
    return 0;
}

int md_routes_open(md_route_table *t, char *msg, size_t msg_len)
{
    for (uint32_t i = 0; i < t->n; i++) { /* a copy's pointers are not its own */
        t->r[i].limiter = NULL;
        t->r[i].auth.users = NULL;
        memset(t->r[i].errors.body, 0, sizeof t->r[i].errors.body);
    }
    if (sites_open(t, msg, msg_len) != 0) {
        md_routes_close(t);
        return -EINVAL;
    }
    for (uint32_t i = 0; i < t->n; i++) {
        md_route *r = &t->r[i];
        if (r->limit.interval_ns != 0 && (r->limiter = md_ratelimit_new(&r->limit)) == NULL) {
            md_say(msg, msg_len, "[route %s%s] out of memory for limit_table", r->exact ? "= " : "",
                   r->path);
            md_routes_close(t);
            return -ENOMEM;
        }
        char awhy[320] = "";
        if (md_auth_open(&r->auth, awhy, sizeof awhy) != 0) {
            md_say(msg, msg_len, "[route %s%s] auth_basic_user_file: %s", r->exact ? "= " : "",
                   r->path, awhy);
            md_routes_close(t);
            return -EINVAL;
        }
        uint32_t at;
        if (md_error_pages_open(&r->errors, &at, awhy, sizeof awhy) != 0) {
            md_say(msg, msg_len, "[route %s%s] error_page: %s", r->exact ? "= " : "", r->path,
                   awhy);
            md_routes_close(t);
            return -EINVAL;
        }
        if (r->handler == NULL || r->handler->open == NULL)
            continue;
        char why[256] = "";
        int rc = r->handler->open(r->conf, why, sizeof why);
        if (rc != 0) {
            md_say(msg, msg_len, "[route %s%s] %s", r->exact ? "= " : "", r->path, why);
            /* The routes after this one were not opened: close() finds them as conf_init
             * left them, which is safe to close. */
            md_routes_close(t);
            return rc;
        }
    }
    return 0;
}

_Static_assert(MD_ROUTE_PATH_MAX + 2 <= MD_METRICS_LABEL_MAX, "a route's label must fit");
_Static_assert(MD_METRICS_ROUTES <= 256, "a route keeps its slot in a byte");

void md_routes_count_in(md_route_table *t, md_metrics *m)
{
    for (uint32_t i = 0; i < t->n; i++) {
        md_route *r = &t->r[i];
        char label[MD_METRICS_LABEL_MAX];
        snprintf(label, sizeof label, "%s%s", r->exact ? "= " : "", r->path);
        r->metric_slot = (uint8_t)md_metrics_route_slot(m, label);
    }
}

void md_routes_close(md_route_table *t)
{
    for (uint32_t i = 0; i < t->n; i++) {
        md_ratelimit_free(t->r[i].limiter);
        t->r[i].limiter = NULL;
        md_auth_close(&t->r[i].auth);
        md_error_pages_close(&t->r[i].errors);
    }
    for (uint32_t i = 0; i < MD_SITES_MAX; i++)
        md_error_pages_close(&t->sites[i].errors);
    for (uint32_t i = 0; i < t->n; i++)
        if (t->r[i].handler != NULL && t->r[i].handler->close != NULL)
            t->r[i].handler->close(t->r[i].conf);
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
        /* A proxied route's OPTIONS (a CORS preflight, say) is the application's to answer. */
        if (r->handler != NULL && r->handler->passes_options)
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
    for (uint32_t i = 0; i < t->n; i++) {
        const md_route *r = &t->r[t->order[i]];
        t->probe[i] = (struct md_route_probe){r->path_len, r->site, t->order[i]};
    }
    allow_text(any, t->allow_any, sizeof t->allow_any);
}

const md_route *md_routes_find(const md_route_table *t, const char *path, size_t len)
{
    return md_routes_find_in(t, 0, path, len);
}

const md_route *md_routes_find_in(const md_route_table *t, unsigned site, const char *path,
                                  size_t len)
{
    for (uint32_t i = 0; i < t->n; i++) {
        const struct md_route_probe *k = &t->probe[i];
        size_t n = k->path_len;
        if (n > len || k->site != site)
            continue;
        const md_route *r = &t->r[k->index];
        if (memcmp(r->path, path, n) != 0)
            continue;
        if (n == len)
            return r;
        /* A prefix route covers the paths below it: "/a" covers "/a/b", not "/ab". */
        if (!r->exact && (r->path[n - 1] == '/' || path[n] == '/'))
            return r;
    }
    return NULL;
}
