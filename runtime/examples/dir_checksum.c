/* Checksum every regular file of a directory: a task per file opens and reads it through the
 * blocking pool (page-cache hits are read on the task's worker, misses on a pool thread), then
 * hands the bytes to a blocking job that hashes them on the fork-join pool, in parallel.
 *
 *   dir_checksum [--verify] DIR    prints "HASH  NAME" per file, in name order; --verify
 *                                  hashes each file again sequentially and exits 1 on a
 *                                  difference
 *
 * The hash is a polynomial one modulo 2^61 - 1, chosen because two halves combine exactly:
 * H(a b) = H(a) * P^len(b) + H(b). So a parallel reduce that folds pieces and combines them in
 * order gives the sequential answer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <magpie.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MOD (((uint64_t)1 << 61) - 1)
#define P   1000003u

typedef struct acc {
    uint64_t h, pw; /* hash of the piece, P^length */
} acc;

static uint64_t mulmod(uint64_t a, uint64_t b)
{
    unsigned __int128 x = (unsigned __int128)a * b;
    uint64_t r = (uint64_t)(x & MOD) + (uint64_t)(x >> 61);
    return r >= MOD ? r - MOD : r;
}

static void fold(size_t lo, size_t hi, void *out, void *arg)
{
    const unsigned char *bytes = arg;
    acc *a = out;
    for (size_t i = lo; i < hi; i++) {
        a->h = (mulmod(a->h, P) + bytes[i] + 1) % MOD;
        a->pw = mulmod(a->pw, P);
    }
}

static void combine(void *left, const void *right, void *arg)
{
    (void)arg;
    acc *l = left;
    const acc *r = right;
    l->h = (mulmod(l->h, r->pw) + r->h) % MOD;
    l->pw = mulmod(l->pw, r->pw);
}

typedef struct file {
    mp_task task;
    mp_runtime *rt;
    mp_pool *pool;
    int dirfd, fd, step;
    const char *name;
    mp_file_op op;
    unsigned char *data;
    size_t len, cap;
    mp_task *hasher;
    uint64_t hash;
    int err;
} file;

/* On a blocking thread, which takes the fork-join pool's caller slot for the call. */
static void hash_in_pool(void *arg)
{
    file *f = arg;
    acc id = {0, 1}, out;
    mp_pool_parallel_reduce(0, f->len, 0, sizeof(acc), &id, fold, combine, f->data, &out);
    f->hash = out.h;
}

static void hash_job(void *arg)
{
    file *f = arg;
    mp_pool_call(f->pool, hash_in_pool, f);
}

static mp_poll file_poll(mp_task *t, mp_context *cx)
{
    file *f = mp_container_of(t, file, task);
    int err;
    switch (f->step) {
    case 0:
        if (mp_file_open_poll(f->rt, &f->op, cx, f->dirfd, f->name, O_RDONLY, 0, 0, &f->fd,
                              &f->err) == MP_PENDING)
            return MP_PENDING;
        if (f->err)
            return MP_READY;
        f->step = 1;
        /* fall through */
    case 1:
        for (;;) {
            if (f->cap - f->len < 65536) {
                unsigned char *d = realloc(f->data, f->cap = f->cap * 2 + 65536);
                if (!d) {
                    f->err = -ENOMEM;
                    break;
                }
                f->data = d;
            }
            size_t n;
            if (mp_file_read_poll(f->rt, &f->op, cx, f->fd, f->data + f->len, f->cap - f->len,
                                  f->len, &n, &err) == MP_PENDING)
                return MP_PENDING;
            if (err || n == 0) {
                f->err = err;
                break;
            }
            f->len += n;
        }
        close(f->fd);
        if (f->err || (f->err = mp_spawn_blocking(f->rt, hash_job, f, &f->hasher)) != 0)
            return MP_READY;
        f->step = 2;
        /* fall through */
    case 2:
        return mp_join_poll(f->hasher, cx, &err);
    }
    return MP_READY;
}

static const mp_task_vtable file_vt = {.poll = file_poll};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const file *)a)->name, ((const file *)b)->name);
}

int main(int argc, char **argv)
{
    bool verify = argc == 3 && strcmp(argv[1], "--verify") == 0;
    if (argc != 2 && !verify) {
        fprintf(stderr, "usage: dir_checksum [--verify] DIR\n");
        return 2;
    }
    const char *path = argv[argc - 1];
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        return 1;
    }
    mp_runtime *rt;
    mp_pool *pool;
    if (mp_runtime_new(&rt, NULL) != 0 || mp_pool_new(&pool, NULL) != 0)
        return 1;
    file *files = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        file *more = e->d_type == DT_REG ? realloc(files, (n + 1) * sizeof *files) : NULL;
        if (!more)
            continue;
        files = more;
        files[n++] = (file){.rt = rt, .pool = pool, .dirfd = dirfd(d), .name = strdup(e->d_name)};
    }
    qsort(files, n, sizeof *files, by_name);
    for (size_t i = 0; i < n; i++) { /* every file at once: the pool takes the reads */
        mp_task_init(&files[i].task, &file_vt);
        mp_spawn_joinable(rt, &files[i].task);
    }
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        file *f = &files[i];
        mp_join(&f->task);
        if (f->err) {
            printf("ERR %s  %s\n", mp_strerror(f->err), f->name);
            bad = 1;
            continue;
        }
        printf("%016llx  %s\n", (unsigned long long)f->hash, f->name);
        if (verify) {
            acc a = {0, 1};
            fold(0, f->len, &a, f->data);
            if (a.h != f->hash) {
                printf("MISMATCH %016llx  %s\n", (unsigned long long)a.h, f->name);
                bad = 1;
            }
        }
        free(f->data);
        free((char *)f->name);
    }
    mp_runtime_free(rt);
    mp_pool_free(pool);
    closedir(d);
    free(files);
    return bad;
}
