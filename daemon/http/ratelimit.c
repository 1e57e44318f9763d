/* ratelimit.c: a route's request rate per client (ratelimit.h), its keys and its table.
 *
 * The table is split into shards, each under a lock of its own and each a small open-address
 * array: a client hashes (with a per-table random seed, so that nobody can aim addresses at
 * one shard) to a shard and a home slot, and lives in one of the PROBE slots from there. The
 * critical section is a few compares and one store; nothing allocates after the table is made.
 * This runs on every request of a limited route, so the key is masked with two ANDs, the home
 * slot found by a multiply, and the lock is a spin lock (shard_lock()), not a mutex.
 */
#include "http/ratelimit.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/addr.h"
#include "core/text.h"

enum { SHARDS = 64, PROBE = 8 };

#define NS_PER_S UINT64_C(1000000000)

typedef struct entry {
    md_addr_key key; /* the client's address, masked (addr.h) */
    uint64_t tat;    /* its theoretical arrival time (ns) */
    bool used;
} entry;

typedef struct shard {
    _Alignas(64) atomic_bool locked;
    entry *e; /* per_shard entries */
} shard;

struct md_ratelimit {
    md_ratelimit_conf c;
    uint64_t seed;
    uint64_t tau_ns;   /* burst intervals */
    md_addr_key mask4; /* the bits of an IPv4 client's key kept (limit_ipv4_prefix) */
    md_addr_key mask6; /* and of an IPv6 one's */
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
    rl->mask4 = md_addr_mask(96u + c->v4_bits);
    rl->mask6 = md_addr_mask(c->v6_bits);
    for (unsigned i = 0; i < SHARDS; i++) {
        atomic_init(&rl->s[i].locked, false);
        rl->s[i].e = rl->slots + (size_t)i * per_shard;
    }
    return rl;
}

void md_ratelimit_free(md_ratelimit *rl)
{
    free(rl);
}

/* The client's address, masked to its prefix: the key of its entry. */
static md_addr_key client_key(const md_ratelimit *rl, const struct sockaddr_storage *ss)
{
    md_addr_key k;
    switch (md_addr_key_of(ss, &k)) {
    case MD_ADDR_V4:
        return md_addr_masked(k, &rl->mask4);
    case MD_ADDR_V6:
        return md_addr_masked(k, &rl->mask6);
    default:
        return k; /* not known: one client of its own (no address is all ones) */
    }
}

/* A shard's lock. What it keeps out: two workers taking for one client at once, both reading
 * the same arrival time and both letting a request in on it (the later store wins, and the
 * client gets one request more than its rate). The section it guards is a few compares and a
 * store, far shorter than a futex's round trip, so a waiter spins; it yields now and then in
 * case the holder's thread was preempted. */
static void shard_lock(shard *s)
{
    for (unsigned spins = 1;; spins++) {
        /* acquire: pairs with the release in shard_unlock(), so the last holder's entry writes
         * are seen here. */
        if (!atomic_load_explicit(&s->locked, memory_order_relaxed) &&
            !atomic_exchange_explicit(&s->locked, true, memory_order_acquire))
            return;
        if (spins % 64 == 0)
            sched_yield();
#if defined(__x86_64__) || defined(__i386__)
        else
            __builtin_ia32_pause();
#endif
    }
}

static void shard_unlock(shard *s)
{
    atomic_store_explicit(&s->locked, false, memory_order_release); /* pairs: shard_lock() */
}

bool md_ratelimit_take(md_ratelimit *rl, const struct sockaddr_storage *ss, uint64_t now_ns,
                       uint32_t *retry_s)
{
    md_addr_key key = client_key(rl, ss);
    uint64_t h = md_addr_hash(&key, rl->seed);
    shard *s = &rl->s[h % SHARDS];
    /* The high half of the hash scaled to the shard's size: a slot without a division. */
    uint32_t at = (uint32_t)(((h >> 32) * rl->per_shard) >> 32);
    uint32_t probe = rl->per_shard < PROBE ? rl->per_shard : PROBE;

    shard_lock(s);
    entry *e = NULL, *spare = NULL;
    for (uint32_t i = 0; i < probe; i++, at = at + 1 == rl->per_shard ? 0 : at + 1) {
        entry *x = &s->e[at];
        if (x->used && x->key.w[0] == key.w[0] && x->key.w[1] == key.w[1]) {
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
            e->key = key;
            e->used = true;
        }
        e->tat = tat + rl->c.interval_ns;
    } else {
        uint64_t wait = tat - now_ns - rl->tau_ns;
        *retry_s = (uint32_t)((wait + NS_PER_S - 1) / NS_PER_S);
    }
    shard_unlock(s);
    return ok;
}
