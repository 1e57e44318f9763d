/* A route's request rate limit per client, as nginx's limit_req: each client address (IPv4 by
 * /32, IPv6 by /64, by default) may make `rate` requests per second or minute on average, with
 * bursts of `burst` more; a request past that is answered 429 with Retry-After before its
 * handler sees it (request.c).
 *
 * The settings (md_ratelimit_conf) are a plain value inside the route (routes.h); the clients'
 * state (md_ratelimit) is made per generation by md_routes_open() and freed by
 * md_routes_close(), so a reload starts every client afresh. It is a table of a fixed number
 * of entries, shared by every worker under per-shard locks: a flood of spoofed or distinct
 * addresses never grows it; it evicts, first an entry that no longer limits anyone (its
 * client is back to a full burst), else the one closest to that. An evicted client that comes
 * back starts with a full burst: the bound on memory costs that much precision under such a
 * flood, never a lock-out of others.
 *
 * Each client is one number, its theoretical arrival time (the generic cell rate algorithm,
 * equivalent to a token bucket): a request at `now` is let in when the client's next arrival
 * time, at the earliest now, is within burst intervals of now, and then moves it one interval
 * on.
 */
#ifndef MD_RATELIMIT_H
#define MD_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum {
    MD_RATELIMIT_TABLE_DEFAULT = 16384, /* clients remembered per route (32 bytes each) */
    MD_RATELIMIT_TABLE_MAX = 1 << 22,
};

typedef struct md_ratelimit_conf {
    uint64_t interval_ns;     /* 0: no limit; else 1 s (or 1 min) / rate */
    uint32_t burst;           /* requests past the rate a client may make at once */
    uint32_t table;           /* entries */
    uint8_t v4_bits, v6_bits; /* how much of an address is one client */
    bool burst_set;           /* limit_burst was given */
    bool others_set;          /* some limit_ key other than limit_rate was given */
} md_ratelimit_conf;

/* The defaults: no limit; burst = the rate's requests per second (at least 1) unless set;
 * table MD_RATELIMIT_TABLE_DEFAULT; /32 and /64. */
void md_ratelimit_conf_init(md_ratelimit_conf *c);
/* One route key: "limit_rate" ("N/s" or "N/m", N in 1..1000000), "limit_burst" (0..100000),
 * "limit_table" (entries, 64..MD_RATELIMIT_TABLE_MAX), "limit_ipv4_prefix" (1..32),
 * "limit_ipv6_prefix" (1..128). 0, -ENOENT for another key, or -EINVAL with msg. */
int md_ratelimit_key(md_ratelimit_conf *c, const char *key, const char *value, char *msg,
                     size_t msg_len);
/* At the route's end: 0, or -EINVAL with msg for limit_ keys without limit_rate. */
int md_ratelimit_conf_check(const md_ratelimit_conf *c, char *msg, size_t msg_len);

typedef struct md_ratelimit md_ratelimit;
/* A table for c (c->interval_ns != 0): NULL when memory runs out. */
md_ratelimit *md_ratelimit_new(const md_ratelimit_conf *c);
void md_ratelimit_free(md_ratelimit *rl); /* NULL: nothing */

/* Whether the client at ss may make a request at now_ns (a monotonic clock); when not,
 * *retry_s is how many whole seconds until it may (at least 1). ss NULL (the address is not
 * known) is one client of its own. Any thread. */
bool md_ratelimit_take(md_ratelimit *rl, const struct sockaddr_storage *ss, uint64_t now_ns,
                       uint32_t *retry_s);

#endif
