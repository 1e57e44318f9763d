/* Upstream groups: their [upstream NAME] configuration, the balancer, passive health and the
 * keep-alive pools (upstream.h says who touches what). */
#include "http/handlers/proxy/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/ini.h"
#include "core/metrics.h"
#include "core/text.h"
#include "core/tls_stream.h"
#include "list.h"
#include "http/routes.h"

int md_upstream_find(const md_upstream_table *t, const char *name)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (strcmp(t->u[i].name, name) == 0)
            return (int)i;
    return -1;
}

static void conf_defaults(md_upstream_conf *u)
{
    u->balance = MD_BALANCE_ROUND_ROBIN;
    u->keepalive = 32;
    u->keepalive_timeout_ms = 60000;
    u->keepalive_surplus_ms = 1000;
    u->connect_timeout_ms = 2000;
    u->send_timeout_ms = 10000;
    u->read_timeout_ms = 30000;
    u->header_timeout_ms = 30000;
    u->tries = 3;
    u->retry_timeout_ms = 10000;
    u->max_fails = 1;
    u->fail_timeout_ms = 10000;
    u->health_interval_ms = 5000;
    u->health_rise = 2;
    u->health_fall = 3;
    u->max_response_header_bytes = 65536;
    u->buffer_bytes = 65536;
    u->tls_verify = true;
}

int md_upstream_add(md_upstream_table *t, const char *spec, uint32_t line, char *msg,
                    size_t msg_len)
{
    while (*spec == ' ' || *spec == '\t')
        spec++;
    size_t n = strlen(spec);
    while (n != 0 && (spec[n - 1] == ' ' || spec[n - 1] == '\t'))
        n--;
    if (!md_text_name_ok(spec, n, MD_UPSTREAM_NAME_MAX)) {
        md_say(msg, msg_len, "expected a name of [A-Za-z0-9_-], 1 to %d bytes",
               MD_UPSTREAM_NAME_MAX - 1);
        return -EINVAL;
    }
    for (uint32_t i = 0; i < t->n; i++) {
        if (strlen(t->u[i].name) == n && memcmp(t->u[i].name, spec, n) == 0) {
            md_say(msg, msg_len, "defined twice (first on line %u)", (unsigned)t->u[i].line);
            return -EINVAL;
        }
    }
    if (t->n == MD_UPSTREAMS_MAX) {
        md_say(msg, msg_len, "more than %d upstreams", MD_UPSTREAMS_MAX);
        return -EINVAL;
    }
    md_upstream_conf *u = &t->u[t->n++];
    memset(u, 0, sizeof *u);
    memcpy(u->name, spec, n);
    u->line = line;
    conf_defaults(u);
    return 0;
}

void md_upstream_label(md_upstream_server_conf *s, bool with_address)
{
    if (!with_address) {
        snprintf(s->label, sizeof s->label, "%s", s->host);
        return;
    }
    char ip[INET6_ADDRSTRLEN] = "";
    const void *a = s->addr.ss_family == AF_INET
                        ? (const void *)&((struct sockaddr_in *)&s->addr)->sin_addr
                        : (const void *)&((struct sockaddr_in6 *)&s->addr)->sin6_addr;
    inet_ntop(s->addr.ss_family, a, ip, sizeof ip);
    /* HOST:PORT is at most MD_UPSTREAM_LABEL_MAX - 49 bytes (server_key): it fits whole. */
    snprintf(s->label, sizeof s->label, "%.*s/%s", MD_UPSTREAM_LABEL_MAX - 49, s->host, ip);
}

/* A name looked up in resolve_file: its addresses as servers, and its entry. */
static int file_server(md_upstream_conf *u, const char *host, const char *port, const char *addr,
                       uint16_t weight, uint32_t max_conns, char *msg, size_t msg_len)
{
    md_upstream_addrs a;
    int rc = md_upstream_resolve_file(u->resolve_file, host, port, &a);
    if (rc != 0) {
        md_say(msg, msg_len, "cannot resolve \"%s\" in %s: %s", host, u->resolve_file,
               rc == -ENOENT ? "not there" : strerror(-rc));
        return -EINVAL;
    }
    if (u->nservers + a.n > MD_UPSTREAM_SERVERS_MAX) {
        md_say(msg, msg_len, "more than %d servers in one upstream", MD_UPSTREAM_SERVERS_MAX);
        return -EINVAL;
    }
    md_upstream_entry *e = &u->entries[u->nentries];
    memset(e, 0, sizeof *e);
    snprintf(e->host, sizeof e->host, "%s", host);
    snprintf(e->port, sizeof e->port, "%s", port);
    snprintf(e->written, sizeof e->written, "%s", addr);
    e->weight = weight;
    e->max_conns = max_conns;
    e->name = true;
    for (uint32_t k = 0; k < a.n; k++) {
        md_upstream_server_conf *s = &u->servers[u->nservers++];
        memset(s, 0, sizeof *s);
        s->addr = a.addr[k];
        s->addrlen = a.addrlen[k];
        s->weight = weight;
        s->max_conns = max_conns;
        s->entry = (uint8_t)u->nentries;
        snprintf(s->host, sizeof s->host, "%s", addr);
        md_upstream_label(s, a.n > 1);
    }
    u->nentries++;
    return 0;
}

/* "HOST:PORT [weight=N] [max_conns=N]": one server, or one per address of a DNS name. */
static int server_key(md_upstream_conf *u, const char *value, char *msg, size_t msg_len)
{
    char buf[256];
    if (strlen(value) >= sizeof buf) {
        md_say(msg, msg_len, "longer than %zu bytes", sizeof buf - 1);
        return -EINVAL;
    }
    strcpy(buf, value);
    char *save = NULL, *addr = strtok_r(buf, " \t", &save);
    if (addr == NULL) {
        md_say(msg, msg_len, "expected HOST:PORT [weight=N] [max_conns=N]");
        return -EINVAL;
    }
    uint64_t weight = 1, max_conns = 0;
    for (char *opt; (opt = strtok_r(NULL, " \t", &save)) != NULL;) {
        if (strncmp(opt, "weight=", 7) == 0) {
            if (md_parse_u64(opt + 7, 1, 100, &weight) != 0) {
                md_say(msg, msg_len, "weight: expected an integer in 1..100, got \"%s\"", opt + 7);
                return -EINVAL;
            }
        } else if (strncmp(opt, "max_conns=", 10) == 0) {
            if (md_parse_u64(opt + 10, 0, 1000000, &max_conns) != 0) {
                md_say(msg, msg_len, "max_conns: expected an integer in 0..1000000, got \"%s\"",
                       opt + 10);
                return -EINVAL;
            }
        } else {
            md_say(msg, msg_len, "unknown option \"%s\" (weight=N, max_conns=N)", opt);
            return -EINVAL;
        }
    }
    /* HOST:PORT, [IPv6]:PORT */
    char host[MD_UPSTREAM_LABEL_MAX], *port;
    if (addr[0] == '[') {
        char *close = strchr(addr, ']');
        if (close == NULL || close[1] != ':' || (size_t)(close - addr - 1) >= sizeof host) {
            md_say(msg, msg_len, "expected [IPv6]:PORT, got \"%s\"", addr);
            return -EINVAL;
        }
        memcpy(host, addr + 1, (size_t)(close - addr - 1));
        host[close - addr - 1] = '\0';
        port = close + 2;
    } else {
        char *colon = strrchr(addr, ':');
        if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof host ||
            memchr(addr, ':', (size_t)(colon - addr)) != NULL) {
            md_say(msg, msg_len, "expected HOST:PORT, got \"%s\"", addr);
            return -EINVAL;
        }
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = '\0';
        port = colon + 1;
    }
    uint64_t portno;
    if (md_parse_u64(port, 1, 65535, &portno) != 0) {
        md_say(msg, msg_len, "expected a port in 1..65535, got \"%s\"", port);
        return -EINVAL;
    }
    if (strlen(addr) >= MD_UPSTREAM_LABEL_MAX - 48) {
        md_say(msg, msg_len, "HOST:PORT longer than %d bytes", MD_UPSTREAM_LABEL_MAX - 49);
        return -EINVAL;
    }
    /* Numeric first: no lookup at all. A name is resolved here, on the thread reading the
     * configuration (never the loop). */
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    struct addrinfo *res = NULL;
    int rc = mp_resolve_blocking(host, port, &hints, &res);
    if (rc != 0 && addr[0] != '[' && u->resolve_file[0] != '\0')
        return file_server(u, host, port, addr, (uint16_t)weight, (uint32_t)max_conns, msg,
                           msg_len);
    if (rc != 0 && addr[0] != '[') {
        hints.ai_flags = AI_ADDRCONFIG;
        rc = mp_resolve_blocking(host, port, &hints, &res);
    }
    if (rc != 0) {
        md_say(msg, msg_len, "cannot resolve \"%s\": %s", host, mp_strerror(rc));
        return -EINVAL;
    }
    unsigned naddr = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
        if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)
            naddr++;
    /* Each entry gives at least one server, so entries never outnumber servers. */
    uint32_t entry = u->nentries;
    md_upstream_entry *e = &u->entries[entry < MD_UPSTREAM_SERVERS_MAX ? entry : 0];
    unsigned added = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        if (u->nservers == MD_UPSTREAM_SERVERS_MAX) {
            freeaddrinfo(res);
            md_say(msg, msg_len, "more than %d servers in one upstream", MD_UPSTREAM_SERVERS_MAX);
            return -EINVAL;
        }
        md_upstream_server_conf *s = &u->servers[u->nservers++];
        memset(s, 0, sizeof *s);
        memcpy(&s->addr, ai->ai_addr, ai->ai_addrlen);
        s->addrlen = (uint32_t)ai->ai_addrlen;
        s->weight = (uint16_t)weight;
        s->max_conns = (uint32_t)max_conns;
        s->entry = (uint8_t)entry;
        snprintf(s->host, sizeof s->host, "%s", addr);
        md_upstream_label(s, naddr > 1);
        added++;
    }
    freeaddrinfo(res);
    if (added == 0) {
        md_say(msg, msg_len, "\"%s\" has no IPv4 or IPv6 address", host);
        return -EINVAL;
    }
    memset(e, 0, sizeof *e);
    snprintf(e->host, sizeof e->host, "%s", host);
    snprintf(e->port, sizeof e->port, "%s", port);
    snprintf(e->written, sizeof e->written, "%s", addr);
    e->weight = (uint16_t)weight;
    e->max_conns = (uint32_t)max_conns;
    struct sockaddr_storage ss;
    e->name =
        addr[0] != '[' && inet_pton(AF_INET, host, &ss) != 1 && inet_pton(AF_INET6, host, &ss) != 1;
    u->nentries++;
    return 0;
}

struct ukey {
    const char *name;
    size_t offset;
    uint32_t min, max;
};

#define UK(f, lo, hi)                                                                              \
    {                                                                                              \
#f, offsetof(md_upstream_conf, f), lo, hi                                                  \
    }
static const struct ukey ukeys[] = {
    UK(keepalive, 0, 10000),
    UK(keepalive_timeout_ms, 1, 3600000),
    UK(keepalive_surplus_ms, 0, 3600000),
    UK(connect_timeout_ms, 1, 3600000),
    UK(send_timeout_ms, 1, 3600000),
    UK(read_timeout_ms, 1, 3600000),
    UK(header_timeout_ms, 1, 3600000),
    UK(tries, 1, 16),
    UK(retry_timeout_ms, 0, 3600000),
    UK(max_fails, 0, 1000),
    UK(fail_timeout_ms, 1, 3600000),
    UK(health_interval_ms, 100, 3600000),
    UK(health_rise, 1, 100),
    UK(health_fall, 1, 100),
    UK(max_response_header_bytes, 1024, 1048576),
    UK(buffer_bytes, 4096, 16777216),
    UK(resolve_interval_ms, 0, 86400000),
};
#undef UK
/* Bits of md_upstream_conf.seen past the numeric keys. */
enum { SEEN_BALANCE = 20, SEEN_HEALTH_PATH = 21, SEEN_RESOLVE_FILE = 22 };

int md_upstream_key(md_upstream_conf *u, const char *key, const char *value, char *msg,
                    size_t msg_len)
{
    if (strcmp(key, "server") == 0)
        return server_key(u, value, msg, msg_len);
    if (strncmp(key, "tls", 3) == 0)
        return md_upstream_tls_key(u, key, value, msg, msg_len);
    int bit = -1;
    const struct ukey *k = NULL;
    for (size_t i = 0; i < sizeof ukeys / sizeof ukeys[0]; i++) {
        if (strcmp(ukeys[i].name, key) == 0) {
            k = &ukeys[i];
            bit = (int)i;
        }
    }
    if (k == NULL && strcmp(key, "balance") == 0)
        bit = SEEN_BALANCE;
    if (k == NULL && strcmp(key, "health_path") == 0)
        bit = SEEN_HEALTH_PATH;
    if (k == NULL && strcmp(key, "resolve_file") == 0)
        bit = SEEN_RESOLVE_FILE;
    if (bit < 0)
        return -ENOENT;
    if (u->seen & (UINT32_C(1) << bit)) {
        md_say(msg, msg_len, "set twice");
        return -EINVAL;
    }
    u->seen |= UINT32_C(1) << bit;
    if (k != NULL) {
        uint64_t v64;
        if (md_parse_u64(value, k->min, k->max, &v64) != 0) {
            md_say(msg, msg_len, "expected an integer in %u..%u, got \"%s\"", (unsigned)k->min,
                   (unsigned)k->max, value);
            return -EINVAL;
        }
        uint32_t v = (uint32_t)v64; /* k->max fits 32 bits */
        if (k->offset == offsetof(md_upstream_conf, resolve_interval_ms) && v != 0 && v < 10) {
            md_say(msg, msg_len, "expected 0 (off) or at least 10, got \"%s\"", value);
            return -EINVAL;
        }
        memcpy((char *)u + k->offset, &v, sizeof v);
        return 0;
    }
    if (bit == SEEN_RESOLVE_FILE) {
        /* Before the servers: they are looked up in it as they are read. */
        if (u->nentries != 0) {
            md_say(msg, msg_len, "must come before the server keys");
            return -EINVAL;
        }
        if (value[0] == '\0' || strlen(value) >= sizeof u->resolve_file) {
            md_say(msg, msg_len, "expected a path of 1 to %zu bytes", sizeof u->resolve_file - 1);
            return -EINVAL;
        }
        FILE *f = fopen(value, "r");
        if (f == NULL) {
            md_say(msg, msg_len, "cannot read %s: %s", value, strerror(errno));
            return -EINVAL;
        }
        fclose(f);
        snprintf(u->resolve_file, sizeof u->resolve_file, "%s", value);
        return 0;
    }
    if (bit == SEEN_HEALTH_PATH) {
        size_t n = strlen(value);
        bool ok = n < MD_UPSTREAM_PATH_MAX && (n == 0 || value[0] == '/');
        for (size_t i = 0; ok && i < n; i++)
            ok = value[i] > ' ' && value[i] < 0x7f;
        if (!ok) {
            md_say(msg, msg_len,
                   "expected empty or a path starting with '/', visible ASCII, at "
                   "most %d bytes",
                   MD_UPSTREAM_PATH_MAX - 1);
            return -EINVAL;
        }
        memcpy(u->health_path, value, n + 1);
        return 0;
    }
    /* balance */
    if (strcmp(value, "round_robin") == 0) {
        u->balance = MD_BALANCE_ROUND_ROBIN;
    } else if (strcmp(value, "least_conn") == 0) {
        u->balance = MD_BALANCE_LEAST_CONN;
    } else if (strcmp(value, "hash_ip") == 0) {
        u->balance = MD_BALANCE_HASH_IP;
    } else if (strncmp(value, "hash_header", 11) == 0 && (value[11] == ' ' || value[11] == '\t')) {
        const char *h = value + 12;
        while (*h == ' ' || *h == '\t')
            h++;
        size_t n = strlen(h);
        bool ok = n != 0 && n < MD_UPSTREAM_HEADER_MAX;
        for (size_t i = 0; ok && i < n; i++)
            ok = md_is_tchar((unsigned char)h[i]);
        if (!ok) {
            md_say(msg, msg_len, "hash_header: expected a field name, at most %d bytes",
                   MD_UPSTREAM_HEADER_MAX - 1);
            return -EINVAL;
        }
        memcpy(u->hash_header, h, n + 1);
        u->balance = MD_BALANCE_HASH_HEADER;
    } else {
        md_say(msg, msg_len,
               "expected round_robin, least_conn, hash_ip or hash_header NAME, got \"%s\"", value);
        return -EINVAL;
    }
    return 0;
}

int md_upstream_check(md_upstream_conf *u, char *msg, size_t msg_len)
{
    if (u->nservers == 0) {
        md_say(msg, msg_len, "server: at least one required");
        return -EINVAL;
    }
    /* A re-resolved name's servers are labelled by address even when it has one now, so
     * that each address keeps its /metrics series as the answer changes. */
    for (uint32_t i = 0; u->resolve_interval_ms != 0 && i < u->nservers; i++)
        if (u->entries[u->servers[i].entry].name)
            md_upstream_label(&u->servers[i], true);
    return md_upstream_tls_check(u, msg, msg_len);
}

/* --- State --------------------------------------------------------------------------- */

static const char *const reason_names[MD_UP_REASONS] = {
    [MD_UP_CONNECT_REFUSED] = "connect_refused",
    [MD_UP_CONNECT_ERROR] = "connect_error",
    [MD_UP_CONNECT_TIMEOUT] = "connect_timeout",
    [MD_UP_SEND_ERROR] = "send_error",
    [MD_UP_SEND_TIMEOUT] = "send_timeout",
    [MD_UP_HEADER_TIMEOUT] = "header_timeout",
    [MD_UP_READ_TIMEOUT] = "read_timeout",
    [MD_UP_RESET] = "reset",
    [MD_UP_BAD_RESPONSE] = "bad_response",
    [MD_UP_HEADER_TOO_BIG] = "header_too_big",
    [MD_UP_NO_SERVER] = "no_server",
    [MD_UP_TLS_HANDSHAKE] = "tls_handshake",
};

const char *md_upstream_reason_name(md_upstream_reason r)
{
    return r < MD_UP_REASONS ? reason_names[r] : "unknown";
}

/* The [upstream NAME] section (core/ini.h): each header one group, its keys
 * md_upstream_key()'s. */

static void upstream_section_init(void *conf)
{
    memset(conf, 0, sizeof(md_upstream_table));
}

static int upstream_section_begin(void *conf, const char *arg, bool first, uint32_t line,
                                  void **inst, char *msg, size_t msg_len)
{
    (void)first;
    md_upstream_table *t = conf;
    int rc = md_upstream_add(t, arg, line, msg, msg_len);
    if (rc == 0)
        *inst = &t->u[t->n - 1];
    return rc;
}

static int upstream_section_key(void *inst, const char *key, const char *value, uint32_t line,
                                char *msg, size_t msg_len)
{
    (void)line;
    return md_upstream_key(inst, key, value, msg, msg_len);
}

static int upstream_section_end(void *inst, char *msg, size_t msg_len)
{
    return md_upstream_check(inst, msg, msg_len);
}

const md_ini_section md_section_upstream = {
    .name = "upstream",
    .repeats = true,
    .init = upstream_section_init,
    .begin = upstream_section_begin,
    .key = upstream_section_key,
    .repeatable = (const char *const[]){"server", NULL},
    .end = upstream_section_end,
};

int md_upstream_health_start(md_upstreams *us); /* upstream_health.c */
void md_upstreams_unref(md_upstreams *us);

int md_upstreams_new(md_upstreams **out, const md_upstream_table *t, mp_runtime *rt, char *msg,
                     size_t msg_len)
{
    md_upstreams *us = calloc(1, sizeof *us);
    if (us == NULL)
        return -ENOMEM;
    us->conf = *t;
    us->rt = rt;
    atomic_init(&us->refs, 1);
    for (uint32_t i = 0; i < us->conf.n; i++) {
        md_upstream *up = &us->u[i];
        up->conf = &us->conf.u[i];
        up->rt = rt;
        pthread_mutex_init(&up->mu, NULL);
        up->n = md_upstream_counters_of(up->conf->name, "");
        bool counted = up->n != NULL;
        for (uint32_t j = 0; j < MD_UPSTREAM_SLOTS_MAX; j++) {
            md_upstream_peer *p = &up->peers[j];
            p->conf = &p->slot;
            p->up = up;
            if (j >= up->conf->nservers)
                continue;
            p->slot = up->conf->servers[j];
            p->live = p->used = true;
            p->n = md_upstream_counters_of(up->conf->name, p->slot.label);
            counted = counted && p->n != NULL;
        }
        up->nslots = up->nlive = up->conf->nservers;
        if (!counted) {
            us->conf.n = i + 1; /* the groups made so far, for the free */
            md_upstreams_unref(us);
            return -ENOMEM;
        }
        /* The files were checked as the configuration was read; they may have changed. */
        if (md_upstream_tls_init(up, msg, msg_len) != 0) {
            us->conf.n = i + 1;
            md_upstreams_unref(us);
            return -EINVAL;
        }
    }
    if (rt != NULL) {
        int rc = md_upstream_health_start(us);
        if (rc == 0)
            rc = md_upstream_resolve_start(us);
        if (rc != 0) {
            md_upstreams_free(us);
            return rc;
        }
    }
    *out = us;
    return 0;
}

void md_upstreams_free(md_upstreams *us)
{
    if (us == NULL)
        return;
    md_upstream_health_stop(us);
    md_upstream_resolve_stop(us);
    md_upstreams_unref(us);
}

int md_upstreams_spawn(md_upstreams *us, mp_task *t)
{
    /* Relaxed: nothing is published through the count; the spawn orders the task's view. */
    atomic_fetch_add_explicit(&us->refs, 1, memory_order_relaxed);
    int rc = mp_spawn_joinable(us->rt, t);
    if (rc != 0)
        atomic_fetch_sub_explicit(&us->refs, 1, memory_order_relaxed);
    return rc;
}

void md_upstreams_task_stop(mp_task *t)
{
    mp_task_cancel(t);
    mp_detach(t); /* its release gives up its hold on us */
}

/* The generation's and its tasks' holds (md_upstreams_spawn). */
void md_upstreams_unref(md_upstreams *us)
{
    /* Acq_rel: each holder's last use of us comes before the other's free (the release half
     * of the first unref pairs with the acquire half of the last). */
    if (atomic_fetch_sub_explicit(&us->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (uint32_t i = 0; i < us->conf.n; i++) {
        md_upstream *up = &us->u[i];
        for (uint32_t j = 0; j < up->nslots; j++) {
            md_upstream_peer *p = &up->peers[j];
            while (p->idle != NULL) {
                md_upstream_conn *c = p->idle;
                p->idle = c->next;
                md_upstream_conn_close(c);
            }
            p->idle_tail = NULL;
            p->nidle = 0;
        }
        md_upstream_tls_fini(up);
        pthread_mutex_destroy(&up->mu);
    }
    free(us);
}

static bool usable_locked(const md_upstream_peer *p, uint64_t now_ms)
{
    return p->live && now_ms >= p->down_until_ms && !p->health_down &&
           (p->conf->max_conns == 0 || p->active < p->conf->max_conns);
}

bool md_upstream_peer_up(md_upstream_peer *p, uint64_t now_ms)
{
    pthread_mutex_lock(&p->up->mu);
    bool up = p->live && now_ms >= p->down_until_ms && !p->health_down;
    pthread_mutex_unlock(&p->up->mu);
    return up;
}

bool md_upstream_pin(md_upstream_peer *p)
{
    pthread_mutex_lock(&p->up->mu);
    bool live = p->live;
    if (live)
        p->pins++;
    pthread_mutex_unlock(&p->up->mu);
    return live;
}

void md_upstream_unpin(md_upstream_peer *p)
{
    pthread_mutex_lock(&p->up->mu);
    p->pins--;
    pthread_mutex_unlock(&p->up->mu);
}

/* FNV-1a, 64 bits: stable across runs and builds, so a key keeps its server. */
static uint64_t fnv1a(const char *s, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* nginx's smooth weighted round robin: each pick adds every candidate's weight to its current
 * weight, takes the largest, and takes the total off the winner; weights 5,1,1 give a a b a c
 * a a, not a a a a a b c. */
static md_upstream_peer *pick_rr_locked(md_upstream *up, uint64_t tried, uint64_t now_ms)
{
    md_upstream_peer *best = NULL;
    int64_t total = 0;
    for (uint32_t i = 0; i < up->nslots; i++) {
        md_upstream_peer *p = &up->peers[i];
        if ((tried >> i) & 1 || !usable_locked(p, now_ms))
            continue;
        p->current_weight += p->conf->weight;
        total += p->conf->weight;
        if (best == NULL || p->current_weight > best->current_weight)
            best = p;
    }
    if (best != NULL)
        best->current_weight -= total;
    return best;
}

static md_upstream_peer *pick_least_locked(md_upstream *up, uint64_t tried, uint64_t now_ms)
{
    md_upstream_peer *best = NULL;
    uint32_t n = up->nslots;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (up->rr + k) % n;
        md_upstream_peer *p = &up->peers[i];
        if ((tried >> i) & 1 || !usable_locked(p, now_ms))
            continue;
        /* active / weight, compared without division */
        if (best == NULL ||
            (uint64_t)p->active * best->conf->weight < (uint64_t)best->active * p->conf->weight)
            best = p;
    }
    up->rr = (up->rr + 1) % (n != 0 ? n : 1);
    return best;
}

/* A key's server: its hash over the weights, so a server of weight 2 takes twice the keys;
 * the same key gets the same server while the set is unchanged. One that cannot be used is
 * rehashed, up to 20 times (as nginx's hash does), then round robin takes over. */
static md_upstream_peer *pick_hash_locked(md_upstream *up, uint64_t tried, const char *key,
                                          size_t key_len, uint64_t now_ms)
{
    /* Over the live slots only: a key moves when the set changes, as with any reload. */
    uint32_t total = 0;
    for (uint32_t i = 0; i < up->nslots; i++)
        total += up->peers[i].live ? up->peers[i].conf->weight : 0;
    uint64_t h = fnv1a(key, key_len, UINT64_C(0xcbf29ce484222325));
    for (int round = 0; round < 20 && total != 0; round++) {
        uint32_t w = (uint32_t)(h % total);
        uint32_t i = 0;
        while (!up->peers[i].live || w >= up->peers[i].conf->weight) {
            w -= up->peers[i].live ? up->peers[i].conf->weight : 0;
            i++;
        }
        md_upstream_peer *p = &up->peers[i];
        if (!((tried >> i) & 1) && usable_locked(p, now_ms))
            return p;
        char salt = (char)round;
        h = fnv1a(&salt, 1, h);
    }
    return pick_rr_locked(up, tried, now_ms);
}

md_upstream_peer *md_upstream_pick(md_upstream *up, uint64_t tried, const char *key, size_t key_len,
                                   uint64_t now_ms)
{
    pthread_mutex_lock(&up->mu);
    md_upstream_peer *p;
    switch (up->conf->balance) {
    case MD_BALANCE_LEAST_CONN:
        p = pick_least_locked(up, tried, now_ms);
        break;
    case MD_BALANCE_HASH_IP:
    case MD_BALANCE_HASH_HEADER:
        p = key != NULL ? pick_hash_locked(up, tried, key, key_len, now_ms)
                        : pick_rr_locked(up, tried, now_ms);
        break;
    default:
        p = pick_rr_locked(up, tried, now_ms);
        break;
    }
    if (p != NULL)
        p->active++;
    pthread_mutex_unlock(&up->mu);
    if (p != NULL) /* relaxed: a counter for /metrics */
        atomic_fetch_add_explicit(&p->n->requests, 1, memory_order_relaxed);
    return p;
}

void md_upstream_done(md_upstream_peer *p, bool failed, uint64_t now_ms)
{
    md_upstream *up = p->up;
    pthread_mutex_lock(&up->mu);
    p->active--;
    /* A group of one server never takes it out (as nginx): there is no other to send its
     * requests to, and a restarted server must get them at once. */
    if (failed && up->conf->max_fails != 0 && up->nlive > 1) {
        if (now_ms - p->fail_start_ms > up->conf->fail_timeout_ms) {
            p->fail_start_ms = now_ms;
            p->fails = 0;
        }
        if (++p->fails >= up->conf->max_fails) {
            p->down_until_ms = now_ms + up->conf->fail_timeout_ms;
            p->fails = 0;
        }
    } else if (!failed) {
        p->fails = 0;
    }
    pthread_mutex_unlock(&up->mu);
}

void md_upstream_health_result(md_upstream_peer *p, bool good)
{
    md_upstream *up = p->up;
    pthread_mutex_lock(&up->mu);
    if (good) {
        p->health_bad = 0;
        if (p->health_down && ++p->health_good >= up->conf->health_rise) {
            p->health_down = false;
            p->health_good = 0;
        }
    } else {
        p->health_good = 0;
        if (!p->health_down && ++p->health_bad >= up->conf->health_fall) {
            p->health_down = true;
            p->health_bad = 0;
        }
    }
    pthread_mutex_unlock(&up->mu);
}

static void close_list(md_upstream_conn *c);

/* --- Re-resolution's changes (the protocol is upstream.h's, above md_upstream_peer) ------ */

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return x->sin6_port == y->sin6_port &&
           memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0 &&
           x->sin6_scope_id == y->sin6_scope_id;
}

static bool drained_locked(const md_upstream_peer *p)
{
    return !p->live && p->active == 0 && p->pins == 0 && p->nidle == 0;
}

static void take_pool_locked(md_upstream_peer *p, md_upstream_conn **dead)
{
    while (p->idle != NULL) {
        md_upstream_conn *c = p->idle;
        p->idle = c->next;
        c->next = *dead;
        *dead = c;
    }
    p->idle_tail = NULL;
    p->nidle = 0;
}

/* A slot for a new address of entry: one never used, else one of the entry's drained ones,
 * else any drained one (a departed address's counters stay in the registry). */
static md_upstream_peer *free_slot_locked(md_upstream *up, uint32_t entry)
{
    if (up->nslots < MD_UPSTREAM_SLOTS_MAX)
        return &up->peers[up->nslots++];
    md_upstream_peer *any = NULL;
    for (uint32_t i = 0; i < up->nslots; i++) {
        md_upstream_peer *p = &up->peers[i];
        if (!drained_locked(p))
            continue;
        if (p->slot.entry == entry)
            return p;
        if (any == NULL)
            any = p;
    }
    return any;
}

md_upstream_change md_upstream_apply(md_upstream *up, uint32_t entry, const md_upstream_addrs *a)
{
    md_upstream_change ch = {0};
    if (a->n == 0 || entry >= up->conf->nentries)
        return ch; /* never empty a group over an answer without addresses */
    const md_upstream_entry *e = &up->conf->entries[entry];
    /* Counters first, outside the mutex (the registry has a lock of its own). */
    md_upstream_counters *n[MD_UPSTREAM_SLOTS_MAX];
    md_upstream_server_conf fresh[MD_UPSTREAM_SLOTS_MAX];
    for (uint32_t k = 0; k < a->n; k++) {
        md_upstream_server_conf *s = &fresh[k];
        memset(s, 0, sizeof *s);
        memcpy(&s->addr, &a->addr[k], sizeof s->addr);
        s->addrlen = a->addrlen[k];
        s->weight = e->weight;
        s->max_conns = e->max_conns;
        s->entry = (uint8_t)entry;
        snprintf(s->host, sizeof s->host, "%s", e->written);
        md_upstream_label(s, true);
        n[k] = md_upstream_counters_of(up->conf->name, s->label);
    }
    md_upstream_conn *dead = NULL;
    struct ssl_session_st *stale[MD_UPSTREAM_SLOTS_MAX];
    uint32_t nstale = 0;
    pthread_mutex_lock(&up->mu);
    /* Out: the entry's live slots whose address left. */
    for (uint32_t i = 0; i < up->nslots; i++) {
        md_upstream_peer *p = &up->peers[i];
        if (!p->live || p->slot.entry != entry)
            continue;
        bool kept = false;
        for (uint32_t k = 0; k < a->n && !kept; k++)
            kept = same_addr(&p->slot.addr, &a->addr[k]);
        if (!kept) {
            p->live = false;
            up->nlive--;
            ch.removed++;
            take_pool_locked(p, &dead);
        }
    }
    /* In: addresses without a live slot, in a slot of their own again or a free one. */
    for (uint32_t k = 0; k < a->n; k++) {
        md_upstream_peer *back = NULL;
        bool have = false;
        for (uint32_t i = 0; i < up->nslots && !have; i++) {
            md_upstream_peer *p = &up->peers[i];
            if (p->slot.entry != entry || !same_addr(&p->slot.addr, &a->addr[k]))
                continue;
            have = p->live;
            if (!p->live && back == NULL)
                back = p;
        }
        if (have)
            continue;
        md_upstream_peer *p = back;
        if (p == NULL) {
            if (n[k] == NULL || (p = free_slot_locked(up, entry)) == NULL) {
                ch.missed++;
                continue;
            }
            if (p->tls_session != NULL && nstale < MD_UPSTREAM_SLOTS_MAX)
                stale[nstale++] = p->tls_session; /* another server's */
            p->tls_session = NULL;
            p->slot = fresh[k];
            p->n = n[k];
            p->used = true;
        }
        /* Back in the set with a clean record (a generation's start is as clean). */
        p->live = true;
        p->current_weight = 0;
        p->fails = 0;
        p->down_until_ms = 0;
        p->health_down = false;
        p->health_good = p->health_bad = 0;
        up->nlive++;
        ch.added++;
    }
    pthread_mutex_unlock(&up->mu);
    close_list(dead);
    for (uint32_t i = 0; i < nstale; i++)
        md_upstream_tls_session_free(stale[i]);
    return ch;
}

/* --- Pool ------------------------------------------------------------------------------ */

static void conn_closed(mp_tcp *t)
{
    md_upstream_conn *c = mp_container_of(t, md_upstream_conn, tcp);
    md_tls_stream_free(c->tls); /* nothing sent: a close_notify is not waited for */
    free(c);
}

mp_poll md_upstream_conn_read(md_upstream_conn *c, mp_context *cx, const char **data, size_t *len,
                              int *err)
{
    if (c->tls != NULL)
        return md_tls_stream_read_poll(c->tls, cx, data, len, err);
    return mp_tcp_read_poll(&c->tcp, cx, data, len, err);
}

void md_upstream_conn_consume(md_upstream_conn *c, size_t n)
{
    if (c->tls != NULL)
        md_tls_stream_consume(c->tls, n);
    else
        mp_tcp_consume(&c->tcp, n);
}

mp_poll md_upstream_conn_write(md_upstream_conn *c, mp_context *cx, const char *data, size_t len,
                               int *err)
{
    if (c->tls != NULL)
        return md_tls_stream_write(c->tls, cx, data, len, err);
    return mp_tcp_write_poll(&c->tcp, cx, data, len, err);
}

int md_upstream_conn_shutdown(md_upstream_conn *c)
{
    return c->tls != NULL ? md_tls_stream_shutdown(c->tls) : mp_tcp_shutdown(&c->tcp);
}

void md_upstream_conn_close(md_upstream_conn *c)
{
    if (c->tls != NULL)
        md_tls_stream_notify(c->tls);   /* keeps its session resumable */
    mp_tcp_close(&c->tcp, conn_closed); /* conn_closed runs once, whatever it returns */
}

int md_upstream_conn_open(md_upstream_peer *p, md_upstream_conn **out)
{
    md_upstream_conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -ENOMEM;
    c->peer = p;
    /* The default read buffer (pooled by the runtime, never malloc'd per request); the
     * response window, buffer_bytes, is counted in the client's output (proxy.c). */
    int rc = mp_tcp_connect(p->up->rt, &c->tcp, (const struct sockaddr *)&p->conf->addr, 0);
    if (rc != 0) {
        free(c);
        return rc;
    }
    mp_tcp_set_nodelay(&c->tcp, true);
    *out = c;
    return 0;
}

bool md_upstream_fd_idle_ok(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

static void unlink_locked(md_upstream_peer *p, md_upstream_conn *c)
{
    MP__LIST_UNLINK_TAIL(p->idle, p->idle_tail, c, prev, next);
    c->next = c->prev = NULL;
    p->nidle--;
}

/* Moves to *dead, from the least recently used end, the connections idle past the timeout and
 * those over `keepalive` idle past the surplus time. The list is in idle_since order (each put
 * is at the head with the time of its put; workers' clocks agree to the millisecond), so the
 * walk stops at the first that stays: O(closed), not O(idle), under the lock. */
static void expire_locked(md_upstream_peer *p, uint64_t now_ms, md_upstream_conn **dead)
{
    const md_upstream_conf *u = p->up->conf;
    while (p->idle_tail != NULL) {
        md_upstream_conn *c = p->idle_tail;
        uint64_t age = now_ms > c->idle_since_ms ? now_ms - c->idle_since_ms : 0;
        if (age < u->keepalive_timeout_ms &&
            (p->nidle <= u->keepalive || age < u->keepalive_surplus_ms))
            break;
        unlink_locked(p, c);
        c->next = *dead;
        *dead = c;
    }
}

static void close_list(md_upstream_conn *c)
{
    while (c != NULL) {
        md_upstream_conn *next = c->next;
        md_upstream_conn_close(c);
        c = next;
    }
}

md_upstream_conn *md_upstream_pool_take(md_upstream_peer *p, uint64_t now_ms)
{
    for (;;) {
        md_upstream_conn *dead = NULL, *c;
        pthread_mutex_lock(&p->up->mu);
        expire_locked(p, now_ms, &dead);
        c = p->idle;
        if (c != NULL)
            unlink_locked(p, c);
        pthread_mutex_unlock(&p->up->mu);
        close_list(dead);
        if (c == NULL)
            return NULL;
        /* Closed by the server while it was idle, or talking out of turn: never reused. Only a
         * connection the loop saw stir since it went idle is looked at with a system call (the
         * pool's mutex ordered the stream's hand-over to this task: its owner now). */
        if (!mp_tcp_maybe_readable(&c->tcp) || md_upstream_fd_idle_ok(mp_tcp_fileno(&c->tcp)))
            return c;
        md_upstream_conn_close(c);
    }
}

void md_upstream_pool_put(md_upstream_conn *c, uint64_t now_ms)
{
    md_upstream_peer *p = c->peer;
    md_upstream_conn *dead = NULL;
    c->idle_since_ms = now_ms;
    if (c->tls != NULL)
        md_tls_stream_trim(c->tls); /* no read waits while it is idle: its buffers go now */
    pthread_mutex_lock(&p->up->mu);
    if (p->up->conf->keepalive != 0 && !p->up->closing && p->live) {
        MP__LIST_PUSH_FRONT_TAIL(p->idle, p->idle_tail, c, prev, next);
        p->nidle++;
        c = NULL;
    }
    expire_locked(p, now_ms, &dead);
    pthread_mutex_unlock(&p->up->mu);
    close_list(dead);
    if (c != NULL)
        md_upstream_conn_close(c);
}

void md_upstreams_shutdown(md_upstreams *us)
{
    md_upstream_health_stop(us);
    md_upstream_resolve_stop(us);
    for (uint32_t i = 0; i < us->conf.n; i++) {
        md_upstream *up = &us->u[i];
        md_upstream_conn *dead = NULL;
        pthread_mutex_lock(&up->mu);
        up->closing = true;
        for (uint32_t j = 0; j < up->nslots; j++) {
            md_upstream_peer *p = &up->peers[j];
            while (p->idle != NULL) {
                md_upstream_conn *c = p->idle;
                p->idle = c->next;
                c->next = dead;
                dead = c;
            }
            p->idle_tail = NULL;
            p->nidle = 0;
        }
        pthread_mutex_unlock(&up->mu);
        close_list(dead);
    }
}

void md_upstream_pool_sweep(md_upstream_peer *p, uint64_t now_ms)
{
    md_upstream_conn *dead = NULL;
    pthread_mutex_lock(&p->up->mu);
    expire_locked(p, now_ms, &dead);
    pthread_mutex_unlock(&p->up->mu);
    close_list(dead);
}

uint32_t md_upstream_pool_idle(md_upstream_peer *p)
{
    pthread_mutex_lock(&p->up->mu);
    uint32_t n = p->nidle;
    pthread_mutex_unlock(&p->up->mu);
    return n;
}
