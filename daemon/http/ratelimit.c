/* ratelimit.c: a route's request rate per client (ratelimit.h), its keys and its table.
 *
 * The table is split into shards, each under a mutex of its own and each a small open-address
 * array: a client hashes (with a per-table random seed, so that nobody can aim addresses at
 * one shard) to a shard and a home slot, and lives in one of the PROBE slots from there. The
 * critical section is a few compares and one store; nothing allocates after the table is made.
 */
#include "http/ratelimit.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/text.h"

enum { SHARDS = 64, PROBE = 8 };

#define NS_PER_S UINT64_C(1000000000)

typedef struct entry {
    uint8_t key[16]; /* the client's address, masked; IPv4 as ::ffff:a.b.c.d */
    uint64_t tat;    /* its theoretical arrival time (ns) */
    bool used;
} entry;

typedef struct shard {
    _Alignas(64) pthread_mutex_t mu;
    entry *e; /* per_shard entries */
} shard;

struct md_ratelimit {
    md_ratelimit_conf c;
    uint64_t seed;
    uint64_t tau_ns; /* burst intervals */
    uint32_t per_shard;
    shard s[SHARDS];
    entry slots[];
};

void md_ratelimit_conf_init(md_ratelimit_conf *c)
{
    memset(c, 0, sizeof *c);
    c->table = MD_RATELIMIT_TABLE_DEFAULT;
    c->v4_bits = 32;
    c->v6_bits = 64;
}

static int parse_rate(md_ratelimit_conf *c, const char *value, char *msg, size_t msg_len)
{
    const char *slash = strchr(value, '/');
    char n[16];
    size_t len = slash != NULL ? (size_t)(slash - value) : 0;
    uint64_t rate;
    if (slash == NULL || len == 0 || len >= sizeof n ||
        (strcmp(slash, "/s") != 0 && strcmp(slash, "/m") != 0)) {
        snprintf(msg, msg_len, "expected N/s or N/m (requests per second or minute), got \"%s\"",
                 value);
        return -EINVAL;
    }
    memcpy(n, value, len);
    n[len] = '\0';
    if (md_parse_u64(n, 1, 1000000, &rate) != 0) {
        snprintf(msg, msg_len, "expected N/s or N/m with N in 1..1000000, got \"%s\"", value);
        return -EINVAL;
    }
    uint64_t per = slash[1] == 's' ? NS_PER_S : 60 * NS_PER_S;
    c->interval_ns = per / rate;
    if (!c->burst_set) /* the default until limit_burst says otherwise: one second's worth */
        c->burst = (uint32_t)(slash[1] == 's' ? rate : rate / 60 > 0 ? rate / 60 : 1);
    return 0;
}

static int parse_number(const char *value, uint64_t min, uint64_t max, uint64_t *out, char *msg,
                        size_t msg_len)
{
    if (md_parse_u64(value, min, max, out) == 0)
        return 0;
    snprintf(msg, msg_len, "expected an integer in %llu..%llu, got \"%s\"", (unsigned long long)min,
             (unsigned long long)max, value);
    return -EINVAL;
}

int md_ratelimit_key(md_ratelimit_conf *c, const char *key, const char *value, char *msg,
                     size_t msg_len)
{
    uint64_t v;
    if (strcmp(key, "limit_rate") == 0)
        return parse_rate(c, value, msg, msg_len);
    if (strncmp(key, "limit_", 6) == 0)
        c->others_set = true;
    if (strcmp(key, "limit_burst") == 0) {
        if (parse_number(value, 0, 100000, &v, msg, msg_len) != 0)
            return -EINVAL;
        c->burst = (uint32_t)v;
        c->burst_set = true;
        return 0;
    }
    if (strcmp(key, "limit_table") == 0) {
        if (parse_number(value, SHARDS, MD_RATELIMIT_TABLE_MAX, &v, msg, msg_len) != 0)
            return -EINVAL;
        c->table = (uint32_t)v;
        return 0;
    }
    if (strcmp(key, "limit_ipv4_prefix") == 0 || strcmp(key, "limit_ipv6_prefix") == 0) {
        bool v4 = key[9] == '4'; /* limit_ipv4_prefix */
        if (parse_number(value, 1, v4 ? 32 : 128, &v, msg, msg_len) != 0)
            return -EINVAL;
        *(v4 ? &c->v4_bits : &c->v6_bits) = (uint8_t)v;
        return 0;
    }
    return -ENOENT;
}

int md_ratelimit_conf_check(const md_ratelimit_conf *c, char *msg, size_t msg_len)
{
    if (c->interval_ns == 0 && c->others_set) {
        snprintf(msg, msg_len, "limit_rate: required by the other limit_ keys");
        return -EINVAL;
    }
    return 0;
}

md_ratelimit *md_ratelimit_new(const md_ratelimit_conf *c)
{
    uint32_t per_shard = c->table / SHARDS > 0 ? c->table / SHARDS : 1;
    md_ratelimit *rl = calloc(1, sizeof *rl + (size_t)per_shard * SHARDS * sizeof(entry));
    if (rl == NULL)
        return NULL;
    rl->c = *c;
    rl->per_shard = per_shard;
    rl->tau_ns = (uint64_t)c->burst * c->interval_ns;
    if (getrandom(&rl->seed, sizeof rl->seed, 0) != (ssize_t)sizeof rl->seed)
        rl->seed = (uint64_t)(uintptr_t)rl ^ UINT64_C(0x9e3779b97f4a7c15); /* no entropy yet */
    for (unsigned i = 0; i < SHARDS; i++) {
        pthread_mutex_init(&rl->s[i].mu, NULL);
        rl->s[i].e = rl->slots + (size_t)i * per_shard;
    }
    return rl;
}

void md_ratelimit_free(md_ratelimit *rl)
{
    if (rl == NULL)
        return;
    for (unsigned i = 0; i < SHARDS; i++)
        pthread_mutex_destroy(&rl->s[i].mu);
    free(rl);
}

/* Keeps the first bits of a 16-byte address. */
static void mask(uint8_t key[16], unsigned bits)
{
    for (unsigned i = 0; i < 16; i++) {
        unsigned keep = bits >= 8 * (i + 1) ? 8 : bits > 8 * i ? bits - 8 * i : 0;
        key[i] &= (uint8_t)(0xff00u >> keep);
    }
}

static void client_key(const md_ratelimit_conf *c, const struct sockaddr_storage *ss,
                       uint8_t key[16])
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (ss != NULL && ss->ss_family == AF_INET) {
        memcpy(key, v4_mapped, 12);
        memcpy(key + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        mask(key, 96 + c->v4_bits);
    } else if (ss != NULL && ss->ss_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
        mask(key, memcmp(key, v4_mapped, 12) == 0 ? 96u + c->v4_bits : c->v6_bits);
    } else {
        memset(key, 0xff, 16); /* not known: one client of its own (no address is all ones) */
    }
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

bool md_ratelimit_take(md_ratelimit *rl, const struct sockaddr_storage *ss, uint64_t now_ns,
                       uint32_t *retry_s)
{
    uint8_t key[16];
    client_key(&rl->c, ss, key);
    uint64_t k0, k1;
    memcpy(&k0, key, 8);
    memcpy(&k1, key + 8, 8);
    uint64_t h = mix(mix(k0 ^ rl->seed) ^ k1);
    shard *s = &rl->s[h % SHARDS];
    uint32_t home = (uint32_t)((h / SHARDS) % rl->per_shard);
    uint32_t probe = rl->per_shard < PROBE ? rl->per_shard : PROBE;

    pthread_mutex_lock(&s->mu);
    entry *e = NULL, *spare = NULL;
    for (uint32_t i = 0; i < probe; i++) {
        entry *x = &s->e[(home + i) % rl->per_shard];
        if (x->used && memcmp(x->key, key, 16) == 0) {
            e = x;
            break;
        }
        /* A free slot, else the entry nearest to limiting nobody. */
        if (spare == NULL || (spare->used && (!x->used || x->tat < spare->tat)))
            spare = x;
    }
    uint64_t tat = e != NULL && e->tat > now_ns ? e->tat : now_ns;
    bool ok = tat - now_ns <= rl->tau_ns;
    if (ok) {
        if (e == NULL) {
            e = spare;
            memcpy(e->key, key, 16);
            e->used = true;
        }
        e->tat = tat + rl->c.interval_ns;
    } else {
        uint64_t wait = tat - now_ns - rl->tau_ns;
        *retry_s = (uint32_t)((wait + NS_PER_S - 1) / NS_PER_S);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}
