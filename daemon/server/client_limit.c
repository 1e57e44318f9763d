/* client_limit.c: open connections per client address (client_limit.h).
 *
 * An open-address table of (key, count) with linear probing and backward-shift deletion, so
 * that no tombstone accumulates however many clients come and go. Keys are 64-bit hashes of
 * the masked address under a per-table random seed: nobody can aim addresses at one probe
 * run, and two clients share a count only if their hashes collide (about 2^-64 a pair).
 */
#include "server/client_limit.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/addr.h"

typedef struct slot {
    uint64_t key; /* 0: empty */
    uint32_t count;
} slot;

struct md_client_counts {
    uint64_t seed;
    uint32_t cap; /* a power of two */
    uint32_t n;   /* keys held */
    slot *s;
};

enum { CAP_FIRST = 64 };

md_client_counts *md_client_counts_new(void)
{
    md_client_counts *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->s = calloc(CAP_FIRST, sizeof *t->s);
    if (t->s == NULL) {
        free(t);
        return NULL;
    }
    t->cap = CAP_FIRST;
    if (getrandom(&t->seed, sizeof t->seed, 0) != (ssize_t)sizeof t->seed)
        t->seed = (uint64_t)(uintptr_t)t ^ UINT64_C(0x9e3779b97f4a7c15); /* no entropy yet */
    return t;
}

void md_client_counts_free(md_client_counts *t)
{
    if (t == NULL)
        return;
    free(t->s);
    free(t);
}

uint64_t md_client_key(const md_client_counts *t, const struct sockaddr_storage *ss)
{
    md_addr_key k;
    switch (md_addr_key_of(ss, &k)) {
    case MD_ADDR_V4:
        break; /* the whole address */
    case MD_ADDR_V6:
        k.w[1] = 0; /* the first 64 bits: one host's usual share */
        break;
    default:
        break; /* not an IP client: one client for all such (all ones) */
    }
    uint64_t h = md_addr_hash(&k, t->seed);
    return h != 0 ? h : 1;
}

/* The slot of key, or the empty one where it would go. */
static slot *find(const md_client_counts *t, uint64_t key)
{
    uint32_t m = t->cap - 1;
    for (uint32_t i = (uint32_t)key & m;; i = (i + 1) & m)
        if (t->s[i].key == key || t->s[i].key == 0)
            return &t->s[i];
}

static bool grow(md_client_counts *t)
{
    slot *old = t->s;
    uint32_t cap = t->cap;
    slot *s = calloc((size_t)cap * 2, sizeof *s);
    if (s == NULL)
        return false;
    t->s = s;
    t->cap = cap * 2;
    for (uint32_t i = 0; i < cap; i++)
        if (old[i].key != 0)
            *find(t, old[i].key) = old[i];
    free(old);
    return true;
}

bool md_client_counts_add(md_client_counts *t, uint64_t key, uint32_t limit)
{
    slot *e = find(t, key);
    if (e->key == key) {
        if (e->count >= limit)
            return false;
        e->count++;
        return true;
    }
    if (limit == 0)
        return false;
    if ((t->n + 1) * 2 > t->cap) {
        if (!grow(t))
            return false; /* refused rather than uncounted */
        e = find(t, key);
    }
    e->key = key;
    e->count = 1;
    t->n++;
    return true;
}

void md_client_counts_remove(md_client_counts *t, uint64_t key)
{
    slot *e = find(t, key);
    if (e->key != key || --e->count != 0)
        return;
    /* Backward shift: the entries after it in its run move up when their home allows. */
    uint32_t m = t->cap - 1, hole = (uint32_t)(e - t->s);
    for (uint32_t i = (hole + 1) & m; t->s[i].key != 0; i = (i + 1) & m) {
        uint32_t home = (uint32_t)t->s[i].key & m;
        /* It may fill the hole if its home is not cyclically in (hole, i]. */
        if (((i - home) & m) >= ((i - hole) & m)) {
            t->s[hole] = t->s[i];
            hole = i;
        }
    }
    t->s[hole] = (slot){0};
    t->n--;
}

uint32_t md_client_counts_clients(const md_client_counts *t)
{
    return t->n;
}
