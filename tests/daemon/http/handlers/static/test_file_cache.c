/* Tests of daemon/http/handlers/static/file_cache.c: the per-thread open-file cache (hits, expiry,
 * the entry and descriptor bounds, references that outlive an entry, on other threads, and a
 * thread's exit), counted against /proc/self/fd so that no descriptor leaks. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/handlers/static/file_cache.h"

static char dir[64];
static int dirfd_;

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/md-file-cache-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    dirfd_ = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(dirfd_, 0);
}

static void teardown(void)
{
    md_file_cache_trim();
    close(dirfd_);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(file_cache, .init = setup, .fini = teardown, .timeout = 20);

static void write_file(const char *name, const char *text)
{
    char path[128], tmp[140];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(rename(tmp, path), 0); /* replaced whole, as a deploy does */
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1;
}

/* What the static handler does on a miss: open, fstat, md_file_new. */
static md_file *open_new(const md_file_cache_limits *lim, const char *name)
{
    int fd = openat(dirfd_, name, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0, "%s", name);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    md_file *f;
    cr_assert_eq(md_file_new(lim, 1, name, strlen(name), fd, &st, &f), 0);
    return f;
}

/* The cached file for name, or a fresh one; the caller puts it. */
static md_file *lookup(const md_file_cache_limits *lim, const char *name)
{
    md_file *f = md_file_cache_get(lim, 1, name, strlen(name));
    return f != NULL ? f : open_new(lim, name);
}

static md_file_cache_stats stats(void)
{
    md_file_cache_stats s;
    md_file_cache_stats_get(&s);
    return s;
}

Test(file_cache, a_second_lookup_is_a_hit_on_the_same_descriptor)
{
    md_file_cache_limits lim = {16, 64, 10000, 0, 0};
    write_file("a.txt", "hello");
    md_file_cache_stats s0 = stats();
    md_file *f = lookup(&lim, "a.txt");
    int fd = f->fd;
    cr_assert_eq(f->size, 5);
    cr_assert_eq(f->etag[0], '"');
    cr_assert_eq(strlen(f->etag), f->etag_len);
    md_file_put(f);
    cr_assert(fd_open(fd), "the cache keeps it open");
    md_file *g = md_file_cache_get(&lim, 1, "a.txt", 5);
    cr_assert_eq(g, f);
    cr_assert_null(md_file_cache_get(&lim, 2, "a.txt", 5), "another root is another file");
    md_file_put(g);
    md_file_cache_stats s = stats();
    cr_expect_eq(s.hits - s0.hits, 1);
    cr_expect_eq(s.misses - s0.misses, 2);
    cr_expect_eq(s.entries, 1);
    cr_expect_eq(s.open_fds, 1);
    md_file_cache_trim();
    cr_expect(!fd_open(fd), "trimmed: closed");
    cr_expect_eq(stats().open_fds, 0);
}

Test(file_cache, an_entry_expires_after_valid_ms_and_a_replaced_file_is_seen)
{
    md_file_cache_limits lim = {16, 64, 30, 0, 0};
    write_file("r.txt", "old");
    md_file *f = lookup(&lim, "r.txt");
    char etag[MD_FILE_ETAG_MAX];
    snprintf(etag, sizeof etag, "%s", f->etag);
    int fd = f->fd;
    md_file_put(f);
    write_file("r.txt", "newer");
    f = lookup(&lim, "r.txt"); /* within the window: the old file, whole */
    cr_expect_eq(f->fd, fd);
    cr_expect_eq(f->size, 3);
    char b[8] = {0};
    cr_expect_eq(pread(f->fd, b, sizeof b, 0), 3);
    cr_expect_str_eq(b, "old");
    md_file_put(f);
    uint64_t expired = stats().expired;
    usleep(60000);
    cr_assert_null(md_file_cache_get(&lim, 1, "r.txt", 5), "expired");
    cr_expect(!fd_open(fd), "an expired entry nobody holds is closed");
    cr_expect_eq(stats().expired, expired + 1);
    f = open_new(&lim, "r.txt");
    cr_expect_eq(f->size, 5);
    cr_expect_str_neq(f->etag, etag, "a replaced file has a new ETag");
    md_file_put(f);
}

Test(file_cache, entries_are_bounded_least_recently_used_first)
{
    md_file_cache_limits lim = {4, 64, 10000, 0, 0};
    int before = open_fds();
    char name[16];
    uint64_t ev = stats().evictions;
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "f%d", i);
        write_file(name, "x");
        md_file_put(lookup(&lim, name));
        if (i >= 4) /* f1 used again each time: never the least recently used */
            md_file_put(md_file_cache_get(&lim, 1, "f1", 2));
    }
    md_file_cache_stats s = stats();
    cr_expect_eq(s.entries, 4);
    cr_expect_eq(s.evictions - ev, 6);
    cr_expect_eq(open_fds() - before, 4, "only the listed entries stay open");
    md_file *f1 = md_file_cache_get(&lim, 1, "f1", 2);
    cr_expect_not_null(f1, "recently used: kept");
    if (f1 != NULL)
        md_file_put(f1);
    cr_expect_null(md_file_cache_get(&lim, 1, "f2", 2), "least recently used: evicted");
    md_file_cache_trim();
    cr_expect_eq(open_fds(), before);
}

Test(file_cache, descriptors_are_bounded_across_the_process)
{
    md_file_cache_limits lim = {100, 3, 10000, 0, 0};
    int before = open_fds();
    char name[16];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "g%d", i);
        write_file(name, "x");
        md_file_put(lookup(&lim, name));
        cr_assert_leq(stats().open_fds, 3);
    }
    cr_expect_leq(open_fds() - before, 3);
    /* Held by responses, the three cannot be evicted: a fourth file is served uncached. */
    md_file *held[3];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "g%d", 7 + i);
        held[i] = md_file_cache_get(&lim, 1, name, strlen(name));
        cr_assert_not_null(held[i], "%s", name);
    }
    md_file_cache_trim(); /* unlisted, but still open for their holders */
    for (int i = 0; i < 3; i++)
        cr_expect(fd_open(held[i]->fd));
    md_file *extra = lookup(&lim, "g0");
    cr_expect(!extra->counted, "over max_fds: not cached");
    md_file_put(extra);
    cr_expect_eq(stats().entries, 0);
    for (int i = 0; i < 3; i++)
        md_file_put(held[i]);
    cr_expect_eq(stats().open_fds, 0);
    cr_expect_eq(open_fds(), before);
}

Test(file_cache, off_when_any_limit_is_zero)
{
    md_file_cache_limits lim = {16, 64, 10000, 0, 0};
    write_file("o.txt", "x");
    md_file_put(lookup(&lim, "o.txt"));
    cr_assert_eq(stats().entries, 1);
    md_file_cache_limits off = {0, 64, 10000, 0, 0};
    cr_expect_null(md_file_cache_get(&off, 1, "o.txt", 5));
    cr_expect_eq(stats().entries, 0, "turning it off closes the thread's entries");
    md_file *f = open_new(&off, "o.txt");
    cr_expect(!f->counted);
    md_file_put(f);
    md_file_cache_limits no_window = {16, 64, 0, 0, 0};
    f = open_new(&no_window, "o.txt");
    cr_expect_eq(stats().entries, 0);
    md_file_put(f);
}

/* A file shrinking under a holder: the cached size is the open's, reads see the new end. */
Test(file_cache, a_shrunk_file_reads_short_through_a_cached_descriptor)
{
    md_file_cache_limits lim = {16, 64, 10000, 0, 0};
    write_file("s.txt", "0123456789");
    md_file *f = lookup(&lim, "s.txt");
    char path[128];
    snprintf(path, sizeof path, "%s/s.txt", dir);
    cr_assert_eq(truncate(path, 4), 0);
    md_file *g = md_file_cache_get(&lim, 1, "s.txt", 5);
    cr_assert_eq(g, f);
    cr_expect_eq(g->size, 10, "the size of the open");
    char b[16];
    cr_expect_eq(pread(g->fd, b, sizeof b, 0), 4, "a read stops at the new end");
    cr_expect_eq(pread(g->fd, b, sizeof b, 4), 0);
    md_file_put(f);
    md_file_put(g);
}

/* A response's task moves to another worker: the entry it holds, found on this thread, is
 * used and released there, after this thread's cache dropped it or while it still lists it.
 * Run under ThreadSanitizer this checks the reference count's ordering. */
struct holder {
    md_file *f;
    char got[8];
};

static void *use_and_put(void *arg)
{
    struct holder *h = arg;
    cr_assert_eq(pread(h->f->fd, h->got, 5, 0), 5);
    md_file_put(h->f);
    return NULL;
}

Test(file_cache, a_reference_released_on_another_thread)
{
    md_file_cache_limits lim = {16, 64, 10000, 0, 0};
    int before = open_fds();
    write_file("m.txt", "moved");
    for (int round = 0; round < 200; round++) {
        md_file *f = lookup(&lim, "m.txt");
        struct holder h = {.f = f};
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, use_and_put, &h), 0);
        if (round % 2 == 0)
            md_file_cache_trim(); /* races the other thread's put: one of them closes */
        pthread_join(t, NULL);
        cr_assert_eq(memcmp(h.got, "moved", 5), 0);
    }
    md_file_cache_trim();
    cr_expect_eq(open_fds(), before);
    cr_expect_eq(stats().open_fds, 0);
}

/* A thread's exit closes what its cache holds; a reference it handed out stays good. */
static md_file *handed;

static void *fill_and_exit(void *arg)
{
    const md_file_cache_limits *lim = arg;
    char name[16];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "t%d", i);
        md_file_put(lookup(lim, name));
    }
    handed = md_file_cache_get(lim, 1, "t3", 2);
    return NULL;
}

Test(file_cache, a_thread_exit_releases_its_cache)
{
    md_file_cache_limits lim = {64, 256, 10000, 0, 0};
    char name[16];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "t%d", i);
        write_file(name, "tt");
    }
    int before = open_fds();
    uint64_t hits = stats().hits;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fill_and_exit, &lim), 0);
    pthread_join(t, NULL);
    cr_assert_not_null(handed);
    cr_expect_eq(stats().entries, 0, "the thread's entries went with it");
    cr_expect_eq(stats().hits, hits + 1, "its counters stay in the totals");
    cr_expect_eq(open_fds() - before, 1, "only the handed-out one is open");
    char b[4];
    cr_expect_eq(pread(handed->fd, b, sizeof b, 0), 2);
    md_file_put(handed);
    cr_expect_eq(open_fds(), before);
    cr_expect_eq(stats().open_fds, 0);
}

/* Negative entries: a missing path is answered from the thread's table until valid_ms passes,
 * then looked up again (a file created meanwhile is found); per root, bounded in key length,
 * off with the cache, and counted. */
Test(file_cache, a_missing_path_is_remembered_until_valid_ms)
{
    md_file_cache_limits lim = {16, 64, 40, 0, 0};
    uint64_t hits0 = stats().negative_hits;
    cr_assert_eq(md_file_cache_missing(&lim, 1, "gone.txt", 8), 0, "nothing noted yet");
    md_file_cache_note_missing(&lim, 1, "gone.txt", 8, -ENOENT);
    cr_assert_eq(md_file_cache_missing(&lim, 1, "gone.txt", 8), -ENOENT);
    cr_assert_eq(md_file_cache_missing(&lim, 2, "gone.txt", 8), 0, "another root");
    cr_assert_eq(md_file_cache_missing(&lim, 1, "gone.tx", 7), 0, "another path");
    md_file_cache_note_missing(&lim, 1, "d/x", 3, -ENOTDIR);
    cr_assert_eq(md_file_cache_missing(&lim, 1, "d/x", 3), -ENOTDIR);
    md_file_cache_note_missing(&lim, 1, "denied", 6, -EACCES);
    cr_assert_eq(md_file_cache_missing(&lim, 1, "denied", 6), 0, "only ENOENT and ENOTDIR");
    cr_expect_eq(stats().negative_hits - hits0, 2);
    /* The file appears: found once the entry has expired. */
    write_file("gone.txt", "here");
    usleep(80000);
    cr_assert_eq(md_file_cache_missing(&lim, 1, "gone.txt", 8), 0, "expired");
    md_file *f = lookup(&lim, "gone.txt");
    cr_expect_eq(f->size, 4);
    md_file_put(f);
}

Test(file_cache, negative_entries_bounded_and_off_with_the_cache)
{
    md_file_cache_limits lim = {16, 64, 60000, 0, 0};
    char key[MD_FILE_NEG_KEY_MAX + 2];
    memset(key, 'k', sizeof key);
    md_file_cache_note_missing(&lim, 1, key, MD_FILE_NEG_KEY_MAX + 1, -ENOENT);
    cr_expect_eq(md_file_cache_missing(&lim, 1, key, MD_FILE_NEG_KEY_MAX + 1), 0,
                 "a longer path is not remembered");
    md_file_cache_note_missing(&lim, 1, key, MD_FILE_NEG_KEY_MAX, -ENOENT);
    cr_expect_eq(md_file_cache_missing(&lim, 1, key, MD_FILE_NEG_KEY_MAX), -ENOENT);
    /* Many more missing paths than slots: each is either remembered or looked up again, the
     * newest always remembered, and the files in the cache stay. */
    write_file("kept.txt", "k");
    md_file *f = lookup(&lim, "kept.txt");
    md_file_put(f);
    char name[32];
    for (int i = 0; i < 4 * MD_FILE_NEG_SLOTS; i++) {
        int n = snprintf(name, sizeof name, "miss-%d", i);
        md_file_cache_note_missing(&lim, 1, name, (size_t)n, -ENOENT);
        cr_assert_eq(md_file_cache_missing(&lim, 1, name, (size_t)n), -ENOENT);
    }
    md_file *g = md_file_cache_get(&lim, 1, "kept.txt", 8);
    cr_expect_eq(g, f, "misses evict no file");
    if (g != NULL)
        md_file_put(g);
    md_file_cache_limits off = {0, 0, 0, 0, 0};
    cr_expect_eq(md_file_cache_missing(&off, 1, name, strlen(name)), 0, "off: not used");
    md_file_cache_note_missing(&off, 1, "x", 1, -ENOENT);
    cr_expect_eq(md_file_cache_missing(&lim, 1, "x", 1), 0, "off: not noted");
    md_file_cache_trim();
    cr_expect_eq(md_file_cache_missing(&lim, 1, name, strlen(name)), 0, "trimmed");
}

Test(file_cache, a_small_listed_file_keeps_its_bytes_within_the_bounds)
{
    md_file_cache_limits lim = {16, 64, 10000, 8, 10};
    write_file("small.txt", "hello");
    write_file("large.txt", "123456789");
    md_file *f = lookup(&lim, "small.txt");
    const char *b = md_file_bytes(f);
    cr_assert_not_null(b, "5 bytes, within bytes_max (8): kept");
    cr_assert_eq(memcmp(b, "hello", 5), 0);
    cr_assert_eq(md_file_bytes(f), b, "read once");
    cr_expect_eq(stats().kept_bytes, 5);
    md_file *g = lookup(&lim, "large.txt");
    cr_assert_null(md_file_bytes(g), "9 bytes, past bytes_max: read each time");
    md_file_put(g);
    write_file("other.txt", "abcdef");
    md_file *h = lookup(&lim, "other.txt");
    cr_assert_null(md_file_bytes(h), "5 + 6 bytes pass the bound (10): a descriptor alone");
    md_file_put(h);
    /* A file changed in place: the kept bytes are the entry's, as its validators are. */
    int fd = openat(dirfd_, "small.txt", O_WRONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "J", 1, 0), 1);
    close(fd);
    md_file *again = md_file_cache_get(&lim, 1, "small.txt", 9);
    cr_assert_eq(again, f);
    cr_expect_eq(memcmp(md_file_bytes(again), "hello", 5), 0);
    md_file_put(again);
    md_file_put(f);
    md_file_cache_trim();
    cr_expect_eq(stats().kept_bytes, 0, "dropped with the entry");
    md_file_cache_limits none = {16, 64, 10000, 0, 1 << 20};
    md_file *u = lookup(&none, "small.txt");
    cr_expect_null(md_file_bytes(u), "bytes_max 0: none kept");
    md_file_put(u);
}

/* Two threads ask for the bytes of one file at once: one copy wins, both see it whole. */
static void *ask_bytes(void *arg)
{
    return (void *)md_file_bytes(arg);
}

Test(file_cache, racing_first_readers_share_one_copy)
{
    md_file_cache_limits lim = {16, 64, 10000, 4096, 1 << 20};
    char text[4001];
    memset(text, 'x', 4000);
    text[4000] = '\0';
    write_file("r.txt", text);
    md_file *f = lookup(&lim, "r.txt");
    pthread_t t[2];
    void *got[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, ask_bytes, f), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], &got[i]);
    cr_assert_not_null(got[0]);
    cr_assert_eq(got[0], got[1]);
    cr_assert_eq(memcmp(got[0], text, 4000), 0);
    md_file_put(f);
}
