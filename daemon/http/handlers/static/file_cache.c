/* file_cache.c: the per-thread open-file cache (file_cache.h has the contract and the
 * reference-count protocol).
 *
 * Each thread's cache is a chained hash table over (root, path) and a doubly-linked LRU list,
 * both touched only by that thread, so a lookup takes no lock. It is made at the thread's
 * first use and registered (under reg_mu) for /metrics, which reads its counters with relaxed
 * loads; a pthread key's destructor drops its entries and folds its counters into the retired
 * totals when the thread exits, so no descriptor outlives a worker's cache.
 *
 * Expiry: an entry is used until valid_ms after its open. Each lookup also closes up to two
 * expired entries at the cold end of the LRU list, so the descriptor of a file deleted or
 * replaced is not kept open long past valid_ms by a thread that goes on serving.
 *
 * The registration and the exit destructor have the shape of the runtime's per-thread caches
 * (runtime/src/tcache.c, under readbuf.c and blockcache.c), written again here on purpose:
 * that mechanism is libmagpie's internal (mp__), and the daemon reaches the runtime through
 * its public API only (a magpied linked with libmagpie.so could not call it); the public
 * mp_block_cache keeps free blocks of one size, where this keeps a hash table and an LRU list of
 * reference-counted descriptors with expiry. Making the registry public for one user would
 * add to libmagpie's ABI more than it removes here (about forty lines).
 *
 * Negative entries (file_cache.h) sit in a direct-mapped table of their own per thread, made
 * at the thread's first miss: no list, no eviction order, the slot a path hashes to holds the
 * latest miss, so a flood of distinct missing paths costs a fixed 36 KiB per thread and never
 * evicts a file.
 *
 * Its limits are the [static] section's (md_section_static, at the end of this file), which
 * the static handler copies into its state for each generation of settings (static.c).
 */
#include "http/handlers/static/file_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/httpdate.h"
#include "core/ini.h"
#include "core/metrics.h"
#include "list.h"

/* A negative entry: the path (root, key) was not there until expires_ms. */
typedef struct neg {
    uint64_t root;
    uint64_t expires_ms; /* monotonic; 0: the slot is empty */
    uint32_t hash;
    int16_t err; /* -ENOENT or -ENOTDIR */
    uint8_t key_len;
    char key[MD_FILE_NEG_KEY_MAX];
} neg;

_Static_assert(MD_FILE_NEG_KEY_MAX <= UINT8_MAX, "neg.key_len holds a key's length");

typedef struct cache {
    neg *negs;         /* owner only: MD_FILE_NEG_SLOTS, made at the first miss; NULL: none yet */
    md_file **buckets; /* owner only */
    uint32_t nbuckets; /* owner only; a power of two */
    md_file *head, *tail;
    /* Written by the owner only (a plain load and store), read by a scrape: relaxed. */
    atomic_uint_fast64_t hits, misses, evictions, expired, n, neg_hits;
    struct cache *reg_prev, *reg_next; /* guarded by reg_mu */
} cache;

static _Thread_local cache *self;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static cache *reg_head;     /* guarded by reg_mu */
static uint64_t retired[5]; /* guarded by reg_mu: hits, misses, evictions, expired, neg_hits */
static atomic_uint_fast64_t open_fds; /* atomic: counted descriptors not yet closed */
static atomic_uint_fast64_t kept;     /* atomic: bytes reserved by entries that may keep them */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void bump(atomic_uint_fast64_t *c, int64_t d)
{
    /* Relaxed: the owner is the only writer; a scrape may read either value. */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + (uint64_t)d,
                          memory_order_relaxed);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint32_t hash_of(uint64_t root, const char *key, size_t len)
{
    uint32_t h = 2166136261u ^ (uint32_t)root ^ (uint32_t)(root >> 32); /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 16777619u;
    return h;
}

void md_file_put(md_file *f)
{
    /* acq_rel: releases this thread's use of f, and the last put acquires every other
     * thread's before it closes and frees; pairs with itself in every other md_file_put()
     * (the protocol in file_cache.h). */
    if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
        return;
    close(f->fd);
    if (f->counted)
        /* Relaxed: a bound's count, publishing nothing. */
        atomic_fetch_sub_explicit(&open_fds, 1, memory_order_relaxed);
    if (f->keeps)
        atomic_fetch_sub_explicit(&kept, f->size, memory_order_relaxed); /* as open_fds */
    /* Relaxed: the acq_rel put above ordered the store of whoever set them before this. */
    free(atomic_load_explicit(&f->bytes, memory_order_relaxed));
    free(f);
}

const char *md_file_bytes(md_file *f)
{
    /* Acquire: pairs with the release CAS below, so the bytes are seen whole. */
    char *b = atomic_load_explicit(&f->bytes, memory_order_acquire);
    if (b != NULL || !f->keeps)
        return b;
    char *mine = malloc(f->size != 0 ? f->size : 1);
    if (mine == NULL)
        return NULL;
    /* From the page cache only: a cold file is read as before, its bytes kept by a later one. */
    struct iovec iov = {.iov_base = mine, .iov_len = f->size};
    ssize_t n = preadv2(f->fd, &iov, 1, 0, RWF_NOWAIT);
    if (n < 0 && errno == EOPNOTSUPP)
        n = pread(f->fd, mine, f->size, 0); /* a file system without RWF_NOWAIT */
    if (n != (ssize_t)f->size) {
        free(mine); /* not in the page cache, or shrunk since its fstat */
        return NULL;
    }
    /* Release: pairs with the acquire load above (another response's, any thread); the
     * loser of two first readers frees its copy and takes the winner's. */
    if (!atomic_compare_exchange_strong_explicit(&f->bytes, &b, mine, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        free(mine);
        return b;
    }
    return mine;
}

/* Takes f off the owner's lists and drops the cache's reference. */
static void unlist(cache *c, md_file *f)
{
    md_file **p = &c->buckets[f->hash & (c->nbuckets - 1)];
    while (*p != f)
        p = &(*p)->hnext;
    *p = f->hnext;
    MP__LIST_UNLINK_TAIL(c->head, c->tail, f, prev, next);
    bump(&c->n, -1);
    md_file_put(f);
}

static void drain(cache *c)
{
    while (c->tail != NULL)
        unlist(c, c->tail);
}

/* The thread's exit: its entries go, its counters join the retired totals. */
static void cache_exit(void *arg)
{
    cache *c = arg;
    drain(c);
    pthread_mutex_lock(&reg_mu);
    retired[0] += atomic_load_explicit(&c->hits, memory_order_relaxed);
    retired[1] += atomic_load_explicit(&c->misses, memory_order_relaxed);
    retired[2] += atomic_load_explicit(&c->evictions, memory_order_relaxed);
    retired[3] += atomic_load_explicit(&c->expired, memory_order_relaxed);
    retired[4] += atomic_load_explicit(&c->neg_hits, memory_order_relaxed);
    MP__LIST_UNLINK(reg_head, c, reg_prev, reg_next);
    pthread_mutex_unlock(&reg_mu);
    free(c->buckets);
    free(c->negs);
    free(c);
    self = NULL;
}

static void key_create(void)
{
    if (pthread_key_create(&exit_key, cache_exit) != 0)
        abort(); /* no key left: a process that cannot free its threads' caches */
}

/* The calling thread's cache, made at its first use; NULL when out of memory. */
static cache *mine(void)
{
    if (self != NULL)
        return self;
    pthread_once(&exit_once, key_create);
    cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    pthread_mutex_lock(&reg_mu);
    MP__LIST_PUSH_FRONT(reg_head, c, reg_prev, reg_next);
    pthread_mutex_unlock(&reg_mu);
    pthread_setspecific(exit_key, c);
    return self = c;
}

/* Buckets for up to entries (one per entry, a power of two); false when out of memory. */
static bool size_for(cache *c, uint32_t entries)
{
    uint32_t want = 16;
    while (want < entries && want < (1u << 24))
        want <<= 1;
    if (want <= c->nbuckets)
        return true;
    md_file **b = calloc(want, sizeof *b);
    if (b == NULL)
        return false;
    for (md_file *f = c->head; f != NULL; f = f->next) {
        f->hnext = b[f->hash & (want - 1)];
        b[f->hash & (want - 1)] = f;
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = want;
    return true;
}

static bool enabled(const md_file_cache_limits *lim)
{
    return lim->entries != 0 && lim->valid_ms != 0 && lim->max_fds != 0;
}

/* Closes up to two expired entries at the cold end. */
static void sweep(cache *c, uint64_t now)
{
    for (int i = 0; i < 2 && c->tail != NULL && c->tail->expires_ms <= now; i++) {
        bump(&c->expired, 1);
        unlist(c, c->tail);
    }
}

md_file *md_file_cache_get(const md_file_cache_limits *lim, uint64_t root, const char *key,
                           size_t len)
{
    if (!enabled(lim)) {
        if (self != NULL && self->head != NULL)
            drain(self);
        return NULL;
    }
    cache *c = mine();
    if (c == NULL)
        return NULL;
    if (c->nbuckets == 0) {
        bump(&c->misses, 1);
        return NULL;
    }
    uint64_t now = now_ms();
    uint32_t h = hash_of(root, key, len);
    md_file *f = c->buckets[h & (c->nbuckets - 1)];
    while (f != NULL &&
           (f->hash != h || f->root != root || f->key_len != len || memcmp(f->key, key, len) != 0))
        f = f->hnext;
    if (f != NULL && f->expires_ms <= now) {
        bump(&c->expired, 1);
        unlist(c, f);
        f = NULL;
    }
    sweep(c, now);
    if (f == NULL) {
        bump(&c->misses, 1);
        return NULL;
    }
    bump(&c->hits, 1);
    if (c->head != f) { /* to the front */
        MP__LIST_UNLINK_TAIL(c->head, c->tail, f, prev, next);
        MP__LIST_PUSH_FRONT_TAIL(c->head, c->tail, f, prev, next);
    }
    /* Relaxed: the cache's reference keeps f alive; taking one publishes nothing. */
    atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
    return f;
}

/* The slot of (root, key[0..len)) with hash h, when it holds that path. */
static neg *neg_find(cache *c, uint64_t root, uint32_t h, const char *key, size_t len)
{
    neg *e = &c->negs[h & (MD_FILE_NEG_SLOTS - 1)];
    if (e->expires_ms == 0 || e->hash != h || e->root != root || e->key_len != len ||
        memcmp(e->key, key, len) != 0)
        return NULL;
    return e;
}

int md_file_cache_missing(const md_file_cache_limits *lim, uint64_t root, const char *key,
                          size_t len)
{
    cache *c = self;
    if (!enabled(lim) || c == NULL || c->negs == NULL || len > MD_FILE_NEG_KEY_MAX)
        return 0;
    neg *e = neg_find(c, root, hash_of(root, key, len), key, len);
    if (e == NULL)
        return 0;
    if (e->expires_ms <= now_ms()) {
        e->expires_ms = 0;
        return 0;
    }
    bump(&c->neg_hits, 1);
    return e->err;
}

void md_file_cache_note_missing(const md_file_cache_limits *lim, uint64_t root, const char *key,
                                size_t len, int err)
{
    if ((err != -ENOENT && err != -ENOTDIR) || !enabled(lim) || len > MD_FILE_NEG_KEY_MAX)
        return;
    cache *c = mine();
    if (c == NULL ||
        (c->negs == NULL && (c->negs = calloc(MD_FILE_NEG_SLOTS, sizeof *c->negs)) == NULL))
        return; /* not remembered: the next request opens again */
    uint32_t h = hash_of(root, key, len);
    neg *e = &c->negs[h & (MD_FILE_NEG_SLOTS - 1)];
    e->root = root;
    e->hash = h;
    e->err = (int16_t)err;
    e->key_len = (uint8_t)len;
    memcpy(e->key, key, len);
    e->expires_ms = now_ms() + lim->valid_ms;
}

_Static_assert((int)MD_FILE_DATE_MAX > (int)MD_HTTPDATE_LEN, "Last-Modified fits md_file");

/* A descriptor of the max_fds bound for c's new entry: one free, or one freed by evicting c's
 * least recently used entry (if nobody holds it). */
static bool reserve_fd(cache *c, const md_file_cache_limits *lim)
{
    for (int tries = 0; tries < 2; tries++) {
        /* Relaxed: a bound's count, publishing nothing; fetch_add makes each reservation
         * exact, so the bound holds under any interleaving. */
        if (atomic_fetch_add_explicit(&open_fds, 1, memory_order_relaxed) < lim->max_fds)
            return true;
        atomic_fetch_sub_explicit(&open_fds, 1, memory_order_relaxed);
        if (c->tail == NULL)
            return false;
        bump(&c->evictions, 1);
        unlist(c, c->tail);
    }
    return false;
}

int md_file_new(const md_file_cache_limits *lim, uint64_t root, const char *key, size_t len, int fd,
                const struct stat *st, md_file **out)
{
    md_file *f = malloc(sizeof *f + len + 1);
    if (f == NULL) {
        close(fd);
        return -ENOMEM;
    }
    atomic_init(&f->refs, 1);
    f->fd = fd;
    f->counted = false;
    f->keeps = false;
    atomic_init(&f->bytes, NULL);
    atomic_init(&f->resident, false);
    f->mode = st->st_mode;
    f->size = (uint64_t)st->st_size;
    f->mtime = st->st_mtim.tv_sec;
    int n = snprintf(f->etag, sizeof f->etag, "\"%llx-%llx-%llx\"", (unsigned long long)st->st_ino,
                     (unsigned long long)st->st_mtim.tv_sec * 1000000000ull +
                         (unsigned long long)st->st_mtim.tv_nsec,
                     (unsigned long long)f->size);
    f->etag_len = (uint8_t)(n > 0 && (size_t)n < sizeof f->etag ? n : 0);
    md_httpdate_format(f->mtime, f->last_modified);
    f->prev = f->next = f->hnext = NULL;
    f->root = root;
    f->key_len = (uint32_t)len;
    memcpy(f->key, key, len);
    f->key[len] = '\0';
    f->hash = hash_of(root, key, len);
    *out = f;

    cache *c = enabled(lim) && S_ISREG(st->st_mode) ? mine() : NULL;
    if (c == NULL || !size_for(c, lim->entries))
        return 0; /* served uncached */
    while (atomic_load_explicit(&c->n, memory_order_relaxed) >= lim->entries && c->tail != NULL) {
        bump(&c->evictions, 1);
        unlist(c, c->tail);
    }
    if (!reserve_fd(c, lim))
        return 0;
    f->counted = true;
    /* Relaxed: a bound's count, as open_fds; fetch_add makes each reservation exact. */
    if (f->size <= lim->bytes_max &&
        atomic_fetch_add_explicit(&kept, f->size, memory_order_relaxed) + f->size <= lim->bytes)
        f->keeps = true;
    else if (f->size <= lim->bytes_max)
        atomic_fetch_sub_explicit(&kept, f->size, memory_order_relaxed);
    f->expires_ms = now_ms() + lim->valid_ms;
    atomic_store_explicit(&f->refs, 2, memory_order_relaxed); /* not shared yet */
    md_file **b = &c->buckets[f->hash & (c->nbuckets - 1)];
    f->hnext = *b;
    *b = f;
    MP__LIST_PUSH_FRONT_TAIL(c->head, c->tail, f, prev, next);
    bump(&c->n, 1);
    return 0;
}

void md_file_cache_trim(void)
{
    if (self != NULL) {
        drain(self);
        if (self->negs != NULL)
            memset(self->negs, 0, MD_FILE_NEG_SLOTS * sizeof *self->negs);
    }
}

void md_file_cache_stats_get(md_file_cache_stats *out)
{
    pthread_mutex_lock(&reg_mu);
    out->hits = retired[0];
    out->misses = retired[1];
    out->evictions = retired[2];
    out->expired = retired[3];
    out->negative_hits = retired[4];
    out->entries = 0;
    for (cache *c = reg_head; c != NULL; c = c->reg_next) {
        out->hits += atomic_load_explicit(&c->hits, memory_order_relaxed);
        out->misses += atomic_load_explicit(&c->misses, memory_order_relaxed);
        out->evictions += atomic_load_explicit(&c->evictions, memory_order_relaxed);
        out->expired += atomic_load_explicit(&c->expired, memory_order_relaxed);
        out->negative_hits += atomic_load_explicit(&c->neg_hits, memory_order_relaxed);
        out->entries += atomic_load_explicit(&c->n, memory_order_relaxed);
    }
    pthread_mutex_unlock(&reg_mu);
    out->open_fds = atomic_load_explicit(&open_fds, memory_order_relaxed);
    out->kept_bytes = atomic_load_explicit(&kept, memory_order_relaxed);
}

int md_file_cache_metrics(md_outbuf *out)
{
    md_file_cache_stats s;
    md_file_cache_stats_get(&s);
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } m[] = {
        {"hits_total", "counter", "Static files found open in a worker's open-file cache.", s.hits},
        {"misses_total", "counter",
         "Static file lookups that opened the file (not cached, or expired).", s.misses},
        {"evictions_total", "counter",
         "Open-file cache entries closed to keep within the entry or descriptor bounds.",
         s.evictions},
        {"expired_total", "counter",
         "Open-file cache entries dropped after open_file_cache_valid_ms.", s.expired},
        {"negative_hits_total", "counter",
         "Static file lookups answered from a worker's negative entries (a path missing within "
         "open_file_cache_valid_ms): no open.",
         s.negative_hits},
        {"entries", "gauge", "Files listed in the workers' open-file caches.", s.entries},
        {"open_fds", "gauge",
         "Descriptors opened for the open-file caches and not yet closed (listed, or still "
         "held by a response).",
         s.open_fds},
        {"kept_bytes", "gauge",
         "Bytes reserved for small files kept in memory by the open-file caches "
         "(open_file_cache_bytes_max).",
         s.kept_bytes},
    };
    int rc = 0;
    char full[96];
    for (size_t i = 0; rc == 0 && i < sizeof m / sizeof m[0]; i++) {
        snprintf(full, sizeof full, "magpied_static_open_file_cache_%s", m[i].name);
        rc = md_metrics_put_head(out, full, m[i].type, m[i].help);
        if (rc == 0)
            rc = md_metrics_put(out, "%s %llu\n", full, (unsigned long long)m[i].v);
    }
    return rc;
}

/* The [static] section (core/ini.h): the open-file cache's limits, which every static route
 * shares (the cache is per worker, not per route). */

static void static_section_init(void *conf)
{
    *(md_file_cache_limits *)conf =
        (md_file_cache_limits){MD_FILE_CACHE_ENTRIES, MD_FILE_CACHE_MAX_FDS, MD_FILE_CACHE_VALID_MS,
                               MD_FILE_CACHE_BYTES_MAX, MD_FILE_CACHE_BYTES};
}

static const md_ini_key static_keys[] = {
    {"open_file_cache_entries", MD_INI_U32, offsetof(md_file_cache_limits, entries), 0, 1000000,
     NULL},
    {"open_file_cache_max_fds", MD_INI_U32, offsetof(md_file_cache_limits, max_fds), 0, 1000000,
     NULL},
    {"open_file_cache_valid_ms", MD_INI_U32, offsetof(md_file_cache_limits, valid_ms), 0, 3600000,
     NULL},
    {"open_file_cache_bytes_max", MD_INI_U32, offsetof(md_file_cache_limits, bytes_max), 0, 1048576,
     NULL},
    {"open_file_cache_bytes", MD_INI_U64, offsetof(md_file_cache_limits, bytes), 0,
     UINT64_C(1) << 40, NULL},
    {NULL, 0, 0, 0, 0, NULL},
};

const md_ini_section md_section_static = {
    .name = "static", .keys = static_keys, .init = static_section_init};
