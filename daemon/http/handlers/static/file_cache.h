/* The open-file cache of the static handler, after nginx's open_file_cache: each worker thread
 * keeps the descriptors of the files it served last, with their stat and validators, for a
 * short configured time, bounded in entries (per thread) and in descriptors (per process), the
 * least recently used going first.
 *
 * An md_file is one open file: its descriptor, what fstat said when it was opened, and the
 * ETag and Last-Modified made from that. It is reference-counted: the thread's cache holds one
 * reference while it is listed, and each response that uses it holds one. The descriptor is
 * only read with pread/preadv2/sendfile at explicit offsets, so any number of responses, on
 * any threads, may share it. Whoever drops the last reference closes it: the cache when it
 * evicts an entry nobody uses, otherwise the last response to finish (on whatever worker its
 * task runs by then: tasks move between workers by stealing).
 *
 * How soon a change is seen: an entry is used for valid_ms after its open; the first request
 * after that opens the path again (a miss), so a file replaced by rename is served new, with
 * a new ETag, at most valid_ms after the rename, and the old file is served whole and
 * consistent (old bytes, old validators) until then. A file changed in place is read through
 * the cached descriptor at once, with the size and validators of its last open until valid_ms
 * passes; one that shrinks under a response ends it short with a close (static.c).
 *
 * Cross-thread protocol (the only one here: the reference count).
 *
 *   owner thread A (its cache)            a response's task, now on thread B
 *   unlink f from A's lists               ... sendfile(f->fd) ...
 *   put(f): refs 2 -> 1                    put(f): refs 1 -> 0, close(f->fd), free(f)
 *
 * Without ordering, B's free could come before A's writes to f's list fields are done, or A's
 * could come after B's close and free. Every put is an acq_rel fetch_sub (md_file_put): each
 * put releases what its thread did with f, and the one that reaches 0 acquires all of them
 * before it closes and frees. Only the owner thread touches the list fields, and only while it
 * holds the cache's reference; a holder reads the rest of f, which is immutable after
 * md_file_new() returned it.
 */
#ifndef MD_FILE_CACHE_H
#define MD_FILE_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "core/outbuf.h"

typedef struct md_file_cache_limits {
    uint32_t entries;   /* files each worker thread keeps open; 0 turns the cache off */
    uint32_t max_fds;   /* descriptors all threads' caches hold together */
    uint32_t valid_ms;  /* an entry is used this long after its open; 0 turns the cache off */
    uint32_t bytes_max; /* a listed file of at most this size keeps its bytes; 0: none does */
    uint64_t bytes;     /* the bytes all threads' entries keep together, at most */
} md_file_cache_limits;

struct md_ini_section;
/* The [static] section's kind for the INI engine (core/ini.h): open_file_cache_entries,
 * _max_fds and _valid_ms; its part is an md_file_cache_limits. The static handler keeps a
 * copy per generation of settings (static.c's gen_new). */
extern const struct md_ini_section md_section_static;

/* The shipped values (config/magpied.conf). */
#define MD_FILE_CACHE_ENTRIES   1024
#define MD_FILE_CACHE_MAX_FDS   4096
#define MD_FILE_CACHE_VALID_MS  1000
#define MD_FILE_CACHE_BYTES_MAX (64u * 1024u)
#define MD_FILE_CACHE_BYTES     (64u * 1024u * 1024u)

enum { MD_FILE_ETAG_MAX = 56, MD_FILE_DATE_MAX = 32 };

typedef struct md_file {
    atomic_uint refs; /* atomic: the cache's (while listed) and one per holder */
    int fd;
    bool counted; /* owns one of the process's cached descriptors (the max_fds bound) */
    bool keeps;   /* may keep its bytes: listed, small, its size reserved in the bound */
    /* The whole file's bytes (md_file_bytes()): set once from NULL, freed with f. Release on
     * the set, acquire on each read (md_file_bytes). */
    _Atomic(char *) bytes;
    atomic_bool resident; /* seen whole in the page cache (static.c); any thread, relaxed */
    /* Immutable after md_file_new(): */
    mode_t mode;
    uint64_t size;
    time_t mtime; /* seconds, for Last-Modified and If-Modified-Since */
    uint8_t etag_len;
    char etag[MD_FILE_ETAG_MAX];          /* "inode-mtime_ns-size" in hex, quoted */
    char last_modified[MD_FILE_DATE_MAX]; /* IMF-fixdate */
    /* Owner only (the thread whose cache lists it), while listed: */
    struct md_file *prev, *next; /* LRU, most recent first */
    struct md_file *hnext;       /* hash chain */
    uint64_t expires_ms;         /* monotonic */
    uint64_t root;               /* md_route.root_id */
    uint32_t hash;
    uint32_t key_len;
    char key[]; /* the path below the root, NUL-terminated */
} md_file;

/* The calling thread's cached file for (root, key[0..len)), with a reference taken for the
 * caller (md_file_put() it), or NULL: not cached, expired (then dropped), or the cache is off
 * (then the thread's entries are dropped). Counts a hit or a miss. */
md_file *md_file_cache_get(const md_file_cache_limits *lim, uint64_t root, const char *key,
                           size_t len);

/* The negative entries: a path that was not there (ENOENT, ENOTDIR) is remembered by the
 * thread that looked, for valid_ms as a file is, so that a flood of requests for missing files
 * costs one open per path and thread, not one per request. They live apart from the files, in
 * a fixed table of MD_FILE_NEG_SLOTS per thread, one entry per slot (a new miss takes its
 * slot), so that misses can neither grow memory nor push the files out of the cache; a path
 * longer than MD_FILE_NEG_KEY_MAX is not remembered. A file created meanwhile is found once
 * its path's entry expires: at most valid_ms after, as a replaced file is. */
enum { MD_FILE_NEG_SLOTS = 256, MD_FILE_NEG_KEY_MAX = 118 };

/* The calling thread's negative entry for (root, key[0..len)): its -ENOENT or -ENOTDIR
 * (counted as a negative hit), or 0 when there is none, it has expired, or the cache is off. */
int md_file_cache_missing(const md_file_cache_limits *lim, uint64_t root, const char *key,
                          size_t len);
/* Remembers that opening (root, key[0..len)) failed with err (-ENOENT or -ENOTDIR; others are
 * not remembered), in the calling thread's negative entries, when the cache is on. */
void md_file_cache_note_missing(const md_file_cache_limits *lim, uint64_t root, const char *key,
                                size_t len, int err);

/* Wraps fd (opened for key below root) and its stat in an md_file with one reference for the
 * caller; a regular file is also listed in the calling thread's cache when lim allows,
 * evicting the least recently used entries past the bounds. On -ENOMEM fd is closed. */
int md_file_new(const md_file_cache_limits *lim, uint64_t root, const char *key, size_t len, int fd,
                const struct stat *st, md_file **out);

/* The whole file in memory, f->size bytes, or NULL: f's bytes are read once, by the first
 * response that asks (from the page cache only: preadv2 RWF_NOWAIT, so it never waits for the
 * disk), when f is listed and at most [static] open_file_cache_bytes_max long, within the
 * open_file_cache_bytes bound of all threads' kept bytes. They live as long as f, so they are
 * as fresh as its validators: a file changed in place is served from them until valid_ms
 * after the open, where a read through the descriptor would see the change at once. Any
 * thread, for as long as it holds its reference. */
const char *md_file_bytes(md_file *f);

/* Drops a reference; the last closes the descriptor and frees f. Any thread. */
void md_file_put(md_file *f);

/* Test hook, never called by the daemon (a thread's exit drains its cache): drops every entry
 * of the calling thread's cache, negative ones too, so that a suite can see descriptors close. */
void md_file_cache_trim(void);

typedef struct md_file_cache_stats {
    uint64_t hits, misses, evictions, expired;
    uint64_t negative_hits; /* lookups answered by a negative entry (not in misses) */
    uint64_t entries;       /* listed now, all threads */
    uint64_t open_fds;      /* cached descriptors not yet closed (listed, or held by a response) */
    uint64_t kept_bytes;    /* bytes reserved for entries' kept bytes (md_file_bytes) */
} md_file_cache_stats;

/* Sums over every thread, living or gone. Any thread. */
void md_file_cache_stats_get(md_file_cache_stats *out);

/* The magpied_static_open_file_cache_* metrics. 0 or -ENOMEM. */
int md_file_cache_metrics(md_outbuf *out);

#endif
