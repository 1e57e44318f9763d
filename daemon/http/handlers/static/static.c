/* handler = static: files under the route's root directory.
 *
 * The file for a request is root + the normalised request path (as nginx's `root`: a route
 * [route /pub] with root /srv serves /srv/pub/...); a path ending in '/' serves its index file
 * (index.html by default); there are no listings. Safety, in order:
 *   - the path is already decoded and normalised (routes.h): no "..", no NUL, no backslash;
 *   - a segment starting with '.' is 404: dotfiles (.git, .env, .htpasswd) are never served;
 *   - the file is opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) relative to
 *     the root's descriptor, so no symlink or ".." resolved by the kernel leaves the root
 *     (-EXDEV: 404). Where openat2 is missing (Linux before 5.6: -ENOSYS) the path is walked
 *     one segment at a time with O_NOFOLLOW, so no symlink at all is followed;
 *   - the open is O_NONBLOCK and fstat must say S_ISREG: a FIFO, device or socket in the root
 *     is 403 and never waited on; a file that may not be read is 403.
 * Validators: ETag "inode-mtime_ns-size" in hex (a file replaced by rename gets a new one),
 * Last-Modified; a false If-Match (strong comparison, "*") or else If-Unmodified-Since gives
 * 412, checked first; If-None-Match (weak comparison, "*") and then If-Modified-Since give 304.
 * Range (RFC 9110 14): one satisfiable range ("bytes=a-b", "a-", "-n") gives 206 with
 * Content-Range; several give 206 multipart/byteranges (14.6), a part per range in the order
 * asked, each with its Content-Type and Content-Range; none satisfiable gives 416. A Range
 * that is not valid, lists more than RANGES_MAX (16) ranges, is longer than the request keeps
 * (MD_HTTP_COND_KEEP), or asks for more bytes than the file has (overlapping ranges: the
 * amplification of CVE-2011-3192) gets the whole file, as nginx and Go do for the last (RFC
 * 9110 14.2 lets a server ignore Range). If-Range (an ETag compared strongly, or the exact
 * Last-Modified date) must match for the range to apply. With precompressed = on, FILE.br,
 * FILE.zst or else FILE.gz is served (Content-Encoding: br, zstd or gzip) to a client whose
 * Accept-Encoding allows that coding, and every response says Vary: Accept-Encoding. With the
 * route's compress (and no such variant) a 200's body is read into memory and compressed on
 * the fly instead of sent by sendfile (code_cached, code_poll).
 *
 * The body: a multipart body's parts each go as a single range does, from the pending
 * response, with the part's head put into the output before its bytes (next_part). Otherwise
 * a file of up to SMALL bytes is read into the output after its head (one send for
 * both; no state kept); a larger one is sent with sendfile(2) on the connection's socket through
 * the connection's bounded sendfile, which writes the head first, corked (MSG_MORE), so that
 * head and file share their first segment as with nginx's tcp_nopush: when the socket's buffer is
 * full the response waits for the peer to read (within the send limits) and sendfile goes on,
 * so the body never passes through user space. A file that shrinks under a download ends the
 * response short with a close: nothing past the new end is presented as content. A file the
 * open-file cache keeps the bytes of ([static] open_file_cache_bytes_max, md_file_bytes()) is
 * copied from them instead of read: a small one into the output after its head; a larger one
 * on an HTTP/2 stream (no sendfile there) is lent to the stream (md_http_io.lend, holding the
 * file's reference until its DATA frames have copied them into the connection's output: the
 * one copy in user space), or else written in one write. Where there is no sendfile and no
 * kept bytes, pieces of up to 64 KiB are read with preadv2(RWF_NOWAIT) straight into the output,
 * one at a time as it drains (a piece the page cache does not have goes through chunk[]).
 *
 * Blocking: no open, stat or read of file data waits for the disk on the worker. A file is
 * first looked up in the worker's open-file cache (file_cache.h: descriptors and their stat,
 * kept for [static] open_file_cache_valid_ms; the limits are this handler's generation state,
 * static_gen_new()); otherwise it is opened with openat2 from the
 * kernel's caches alone (RESOLVE_CACHED, through mp_file_open_poll), and where that would
 * wait the response goes pending and the open runs on the runtime's blocking pool. The fstat
 * that follows reads the open file's inode, already in memory. A small file is read with
 * preadv2(RWF_NOWAIT), which copies from the page cache and fails where it would wait; what it
 * could not read is read on the blocking pool (mp_file_read_poll) by the pending response.
 * Before each sendfile piece the first and last byte of the piece are probed the same way
 * (for a file sent in one piece, once per open file: resident()): a piece not in the cache is
 * read on the pool into chunk[] and written through the bounded write instead (sendfile would
 * sleep on the disk).
 *
 * A response holds a reference to its md_file, not a descriptor of its own: a cached one may
 * serve many responses at once (every read is at an explicit offset), and the response's task
 * may finish on another worker than the one whose cache it came from; the last reference
 * closes the descriptor (file_cache.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/addr.h"
#include "core/httpdate.h"
#include "core/ini.h"
#include "core/text.h"
#include "http/handler.h"
#include "http/handlers/static/file_cache.h"
#include "http/handlers/static/mime.h"

extern const md_handler md_handler_static; /* below: its state is found by it */

/* The route's options, and what a generation opens from them. */
enum {
    ROOT_MAX = 200,    /* bytes of the root's path, with its NUL */
    INDEX_MAX = 64,    /* bytes of the index file's name, with its NUL */
    FALLBACK_MAX = 96, /* bytes of the fallback's path, with its NUL */
};

typedef struct static_conf {
    char root[ROOT_MAX];
    char index_file[INDEX_MAX];      /* the file a directory's path serves */
    char default_type[MD_CTYPE_MAX]; /* for a name /etc/mime.types does not know */
    bool precompressed;              /* serve FILE.br or FILE.gz to clients that accept it */
    bool try_html;                   /* PATH missing: PATH.html */
    char fallback[FALLBACK_MAX];     /* then this file below the root ("" none), as nginx's
                                      * try_files $uri $uri.html /index.html */
    int root_fd; /* the root, opened (O_PATH) per generation; -1 in a configuration */
    /* Unique per opened root (never reused, unlike root_fd): the open-file cache's key, so
     * that no entry of an earlier generation's root is found through this one. */
    uint64_t root_id;
} static_conf;

_Static_assert(sizeof(static_conf) <= MD_ROUTE_CONF_MAX, "static_conf fits a route");

static void static_init(void *conf)
{
    static_conf *sc = conf;
    md_text_set(sc->index_file, sizeof sc->index_file, "index.html");
    md_text_set(sc->default_type, sizeof sc->default_type, "application/octet-stream");
    sc->root_fd = -1;
}

static int static_key(void *conf, const char *key, const char *value, uint32_t line, char *msg,
                      size_t msg_len)
{
    (void)line;
    static_conf *sc = conf;
    if (strcmp(key, "root") == 0) {
        struct stat st;
        if (value[0] != '/' || strlen(value) >= ROOT_MAX) {
            md_say(msg, msg_len, "expected an absolute directory path, at most %d bytes",
                   ROOT_MAX - 1);
            return -EINVAL;
        }
        if (stat(value, &st) != 0) {
            md_say(msg, msg_len, "%s: %s", value, strerror(errno));
            return -EINVAL;
        }
        if (!S_ISDIR(st.st_mode)) {
            md_say(msg, msg_len, "%s: not a directory", value);
            return -EINVAL;
        }
        md_text_set(sc->root, sizeof sc->root, value);
        return 0;
    }
    if (strcmp(key, "index") == 0) {
        size_t n = strlen(value);
        if (n == 0 || n >= INDEX_MAX || strchr(value, '/') != NULL || value[0] == '.' ||
            !md_text_field_safe(value, false)) {
            md_say(msg, msg_len,
                   "expected a file name (no '/', not starting with '.'), at most %d bytes",
                   INDEX_MAX - 1);
            return -EINVAL;
        }
        md_text_set(sc->index_file, sizeof sc->index_file, value);
        return 0;
    }
    if (strcmp(key, "try_html") == 0)
        return md_conf_bool(value, &sc->try_html, msg, msg_len);
    if (strcmp(key, "fallback") == 0) {
        size_t n = strlen(value);
        /* Inside the root by its shape: normalised, no dot segment or dotfile, not a directory;
         * it is opened beneath the root like any other path. */
        if (n < 2 || n >= FALLBACK_MAX || value[0] != '/' || value[n - 1] == '/' ||
            !md_path_is_normal(value, n) || strstr(value, "/.") != NULL ||
            !md_text_field_safe(value, false)) {
            md_say(msg, msg_len,
                   "expected a file's path below the root (as /index.html), normalised, no "
                   "dotfile, at most %d bytes",
                   FALLBACK_MAX - 1);
            return -EINVAL;
        }
        md_text_set(sc->fallback, sizeof sc->fallback, value);
        return 0;
    }
    if (strcmp(key, "precompressed") == 0)
        return md_conf_bool(value, &sc->precompressed, msg, msg_len);
    return md_handler_conf_ctype(sc->default_type, value, msg, msg_len); /* default_type */
}

static int static_check(const void *conf, char *msg, size_t msg_len)
{
    if (((const static_conf *)conf)->root[0] == '\0') {
        md_say(msg, msg_len, "root: required for handler = static");
        return -EINVAL;
    }
    return 0;
}

/* The options of route r. */
static inline const static_conf *opts(const md_route *r)
{
    return md_route_conf(r);
}

static atomic_uint_fast64_t next_root_id; /* static_conf.root_id: roots opened, ever */

static int static_open(void *conf, char *msg, size_t msg_len)
{
    static_conf *sc = conf;
    sc->root_fd = open(sc->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    /* Relaxed: a unique number, publishing nothing. */
    sc->root_id = atomic_fetch_add_explicit(&next_root_id, 1, memory_order_relaxed) + 1;
    if (sc->root_fd < 0) {
        int e = errno;
        md_say(msg, msg_len, "root %s: %s", sc->root, strerror(e));
        return -e;
    }
    return 0;
}

static void static_close(void *conf)
{
    static_conf *sc = conf;
    if (sc->root_fd >= 0)
        close(sc->root_fd);
    sc->root_fd = -1;
}

enum {
    SMALL = 16384,          /* read into the output with its head */
    CHUNK = 16384,          /* a piece not in the page cache, read on the pool and written */
    SENDFILE_MAX = 1 << 20, /* bytes per sendfile call, so one connection yields */
    COPY_PIECE = 65536,     /* a piece read into the output where there is no sendfile */
    FIELDS_MAX = 512,       /* the header lines this handler adds */
    REL_MAX = MD_HTTP_TARGET_MAX + INDEX_MAX + 4,
};

/* A multipart/byteranges body (RFC 9110 14.6): its parts, sent one after another by the
 * pending response, each a head (part_head()) in the output and then [at[i][0], at[i][1]] of
 * the file by the same paths as a single range. */
enum { RANGES_MAX = 16, BOUNDARY_LEN = 16, PART_HEAD_MAX = MD_CTYPE_MAX + 128 };
struct byteranges {
    uint32_t n;                      /* parts */
    uint32_t next;                   /* the part whose head goes next; n: the closing line */
    uint64_t size;                   /* the file's, for each Content-Range */
    const char *ctype;               /* the file's type (the mime table's, or the route's) */
    char boundary[BOUNDARY_LEN + 1]; /* hex digits, never in a part's head */
    uint64_t at[RANGES_MAX][2];      /* the ranges, first and last byte, as asked */
};

/* Which file answers a request: the file (a directory's index), then the precompressed
 * variant a client takes. Kept across polls while an open waits on the blocking pool. */
struct lookup {
    char rel[REL_MAX]; /* below the root; a variant's suffix is appended while it is opened */
    size_t rlen;
    bool dir;      /* the path ends in '/': rel is its index file */
    bool looked;   /* the cache was asked for this step's file (a miss is counted once) */
    uint8_t tried; /* TRY_PATH, then TRY_HTML (try_html), TRY_FALLBACK (fallback) */
    uint8_t step;  /* STEP_FILE, then STEP_BR, STEP_ZST, STEP_GZ (precompressed), STEP_DONE */
    int8_t coding; /* codings[] index of the variant found; -1: none */
    md_file *file; /* the file */
    md_file *alt;  /* its variant, when one is served */
};

enum { STEP_FILE, STEP_BR, STEP_ZST, STEP_GZ, STEP_DONE };
enum { TRY_PATH, TRY_HTML, TRY_FALLBACK };

/* The path is missing: its next candidate into lk (PATH.html, then the fallback); false when
 * there is none. */
static bool next_try(const static_conf *sc, struct lookup *lk)
{
    if (lk->tried == TRY_PATH && sc->try_html && !lk->dir && lk->rlen + 6 <= sizeof lk->rel) {
        memcpy(lk->rel + lk->rlen, ".html", 6);
        lk->rlen += 5;
        lk->tried = TRY_HTML;
        lk->looked = false;
        return true;
    }
    if (lk->tried != TRY_FALLBACK && sc->fallback[0] != '\0') {
        size_t n = strlen(sc->fallback + 1);
        if (n + 1 > sizeof lk->rel)
            return false;
        memcpy(lk->rel, sc->fallback + 1, n + 1);
        lk->rlen = n;
        lk->dir = false;
        lk->tried = TRY_FALLBACK;
        lk->looked = false;
        return true;
    }
    return false;
}
static const char *const codings[][2] = {{"br", ".br"}, {"zstd", ".zst"}, {"gzip", ".gz"}};

struct static_send {
    md_http_pending p;
    mp_file_op op;         /* an open, or a read into chunk[], on the blocking pool */
    const md_route *r;     /* valid while pending: the connection keeps its generation */
    md_file *file;         /* the file sent (a reference); NULL while opening */
    uint64_t off, end;     /* [off, end) of the file still to send */
    size_t chunk_len;      /* a piece in chunk[] being written (not cached); 0: none */
    bool small;            /* read into out with the head */
    bool reading;          /* a piece is being read into chunk[] (op may be on the pool) */
    bool no_sendfile;      /* sendfile refused this file (EINVAL, ENOSYS): copy it */
    bool opening;          /* lk is being resolved: an open waits on the pool */
    bool coded;            /* compressed on the fly: pieces through md_http_req_write() */
    struct byteranges *br; /* a multipart/byteranges body's parts; NULL: one range or all */
    struct lookup lk;
    char chunk[CHUNK];
};

/* openat2(2), a raw system call: ThreadSanitizer sees neither it nor libuv's closes (libuv
 * closes with syscall(SYS_close)), so a descriptor it returns carries the history of the
 * socket that last had its number, and closing it would be reported as racing with that
 * socket's last use on the loop's thread. In a TSan build the file moves to a number TSan saw
 * opened (of /dev/null), through system calls it does not see either, and the first number
 * goes the way libuv's do. The runtime's file.c does the same for mp_file_open_poll(). */
static long openat2_raw(int dirfd, const char *path, struct open_how *how)
{
    long fd = syscall(SYS_openat2, dirfd, path, how, sizeof *how);
#ifdef __SANITIZE_THREAD__
    if (fd >= 0) {
        int seen = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (seen >= 0 && syscall(SYS_dup3, (int)fd, seen, O_CLOEXEC) == seen) {
            syscall(SYS_close, (int)fd);
            fd = seen;
        } else if (seen >= 0) {
            close(seen);
        }
    }
#endif
    return fd;
}

/* openat2 beneath dirfd, or the O_NOFOLLOW walk where the kernel has no openat2. */
static int open_beneath(int dirfd, const char *rel, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    long fd = openat2_raw(dirfd, rel, &how);
    if (fd >= 0)
        return (int)fd;
    if (errno != ENOSYS)
        return -errno;
    /* No openat2: segment by segment, no symlink followed (the path has no ".."). */
    char seg[REL_MAX];
    int at = dirfd;
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
        if (n >= sizeof seg) {
            if (at != dirfd)
                close(at);
            return -ENAMETOOLONG;
        }
        memcpy(seg, p, n);
        seg[n] = '\0';
        int next = slash != NULL ? openat(at, seg, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                                 : openat(at, seg, flags | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        if (at != dirfd)
            close(at);
        if (next < 0)
            return -e;
        if (slash == NULL)
            return next;
        at = next;
        p = slash + 1;
    }
}

/* A coding's parameters (";q=0.5"): is its weight 0 (RFC 9110 12.4.2: "0", "0.", "0.000")? */
static bool weight_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        while (i < n && (p[i] == ';' || p[i] == ' ' || p[i] == '\t'))
            i++;
        if (i + 1 < n && (p[i] == 'q' || p[i] == 'Q') && p[i + 1] == '=') {
            size_t j = i + 2;
            bool zero = j < n && p[j] == '0';
            for (j++; zero && j < n && p[j] != ';' && p[j] != ' ' && p[j] != '\t'; j++)
                zero = p[j] == '.' || p[j] == '0';
            return zero;
        }
        while (i < n && p[i] != ';')
            i++;
    }
    return false;
}

/* Whether a[0..n), an Accept-Encoding list, takes the coding: named (any case; "x-gzip" is
 * gzip, RFC 9110 8.4.1.3) with a weight other than 0, or not named and "*" is, with such a
 * weight ("*" stands for the codings the list does not name: RFC 9110 12.5.3). */
static bool accepts(const char *a, size_t n, const char *coding)
{
    md_list l = md_list_of(a, n);
    const char *e;
    size_t el;
    int any = -1; /* "*": -1 absent, 0 refused, 1 taken */
    bool gzip = strcmp(coding, "gzip") == 0;
    while (md_list_next(&l, &e, &el)) {
        size_t t = 0;
        while (t < el && e[t] != ';' && e[t] != ' ' && e[t] != '\t')
            t++;
        if (md_ascii_eq_lower(e, t, coding) || (gzip && md_ascii_eq_lower(e, t, "x-gzip")))
            return !weight_zero(e + t, el - t);
        if (t == 1 && e[0] == '*')
            any = !weight_zero(e + t, el - t);
    }
    return any == 1;
}

/* Whether an If-Match or If-None-Match list ("*", or entity-tags) names our etag: compared
 * weakly (a W/ tag matches its opaque tag) for If-None-Match, strongly (a W/ tag never
 * matches) for If-Match (RFC 9110 8.8.3.2). Not a list of entity-tags: no match. */
static bool etag_listed(const char *v, size_t n, const char *etag, bool strong)
{
    size_t elen = strlen(etag);
    md_list l = md_list_of(v, n);
    const char *e;
    size_t el;
    while (md_list_next(&l, &e, &el)) {
        if (el == 1 && e[0] == '*')
            return true; /* the file exists */
        bool weak = el >= 2 && e[0] == 'W' && e[1] == '/';
        if (weak) {
            e += 2;
            el -= 2;
        }
        if (el < 2 || e[0] != '"' || memchr(e + 1, '"', el - 1) != e + el - 1)
            return false; /* not one entity-tag */
        if (!(weak && strong) && el == elen && memcmp(e, etag, el) == 0)
            return true;
    }
    return false;
}

/* An HTTP-date in any of its three forms (core/httpdate.h), or -1 (absent, or not a date: the
 * field is ignored). RFC 850's two-digit year is placed from the server's clock. */
static time_t parse_date(const md_http_req *req, const char *v, size_t n)
{
    if (v == NULL)
        return -1;
    const md_http_server *srv = md_http_req_server(req);
    time_t t;
    return md_httpdate_parse(v, n, srv->clock != NULL ? srv->clock() : time(NULL), &t) == 0 ? t
                                                                                            : -1;
}

/* Range's ranges against size into at[] (first and last byte, inclusive, in the order asked):
 * how many are satisfiable (RFC 9110 14.1.1: an int-range that starts before the end, a
 * suffix-range of at least one byte), -1 for 416 (none is), or 0 to ignore the field: not
 * "bytes=" and a list of int-range / suffix-range (OWS and empty elements between them),
 * more than RANGES_MAX ranges, or more bytes than the file has in all. */
static int parse_ranges(const char *v, size_t n, uint64_t size, uint64_t at[][2])
{
    if (n < 7 || !md_ascii_eq_lower(v, 6, "bytes="))
        return 0;
    size_t i = 6;
    int specs = 0, kept = 0;
    uint64_t total = 0;
    for (;;) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++; /* OWS and empty list elements (RFC 9110 5.6.1) */
        if (i == n)
            break;
        if (++specs > RANGES_MAX)
            return 0;
        uint64_t a = 0, b = 0;
        bool has_a = false, has_b = false;
        for (; i < n && v[i] >= '0' && v[i] <= '9'; i++, has_a = true) {
            if (a > (UINT64_MAX - 9) / 10)
                return 0;
            a = a * 10 + (uint64_t)(v[i] - '0');
        }
        if (i >= n || v[i] != '-')
            return 0;
        for (i++; i < n && v[i] >= '0' && v[i] <= '9'; i++, has_b = true) {
            if (b > (UINT64_MAX - 9) / 10)
                return 0;
            b = b * 10 + (uint64_t)(v[i] - '0');
        }
        while (i < n && (v[i] == ' ' || v[i] == '\t'))
            i++;
        if ((i != n && v[i] != ',') || (!has_a && !has_b) || (has_b && has_a && b < a))
            return 0;
        uint64_t from, to;
        if (!has_a) { /* the last b bytes */
            if (b == 0 || size == 0)
                continue;
            from = b >= size ? 0 : size - b;
            to = size - 1;
        } else {
            if (a >= size)
                continue;
            from = a;
            to = has_b && b < size - 1 ? b : size - 1;
        }
        total += to - from + 1;
        if (total > size)
            return 0;
        at[kept][0] = from;
        at[kept][1] = to;
        kept++;
    }
    if (specs == 0)
        return 0;
    return kept != 0 ? kept : -1;
}

/* Part i's head at w (PART_HEAD_MAX bytes), or with i == n the closing delimiter; its length.
 * The first part's delimiter opens the body, the others' end the part before (RFC 2046 5.1.1). */
static size_t part_head(char *w, const struct byteranges *br, uint32_t i)
{
    if (i == br->n)
        return (size_t)snprintf(w, PART_HEAD_MAX, "\r\n--%s--\r\n", br->boundary);
    return (size_t)snprintf(
        w, PART_HEAD_MAX,
        "%s--%s\r\nContent-Type: %s\r\nContent-Range: bytes %llu-%llu/%llu\r\n\r\n",
        i == 0 ? "" : "\r\n", br->boundary, br->ctype, (unsigned long long)br->at[i][0],
        (unsigned long long)br->at[i][1], (unsigned long long)br->size);
}

/* The next part's head (or the closing delimiter) into out, and the part's range into s:
 * 1 when a part follows, 0 when the body is complete, -ENOMEM. */
static int next_part(struct static_send *s, md_outbuf *out)
{
    struct byteranges *br = s->br;
    char *w = md_outbuf_reserve(out, PART_HEAD_MAX);
    if (w == NULL)
        return -ENOMEM;
    md_outbuf_commit(out, w + part_head(w, br, br->next));
    if (br->next == br->n)
        return 0;
    s->off = br->at[br->next][0];
    s->end = br->at[br->next][1] + 1;
    br->next++;
    return 1;
}

/* A boundary no part's head contains, and that a file is most unlikely to: 64 random bits in
 * hex (the thread's sequence, seeded once from getrandom(2)). */
static void new_boundary(char out[BOUNDARY_LEN + 1])
{
    static _Thread_local uint64_t state;
    if (state == 0 && getrandom(&state, sizeof state, 0) != (ssize_t)sizeof state)
        state = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&state;
    state += UINT64_C(0x9e3779b97f4a7c15);
    uint64_t x = md_mix64(state);
    for (int i = BOUNDARY_LEN - 1; i >= 0; i--, x >>= 4)
        out[i] = "0123456789abcdef"[x & 15];
    out[BOUNDARY_LEN] = '\0';
}

enum {
    OPEN_FLAGS = O_RDONLY | O_NONBLOCK | O_NOCTTY,
    OPEN_WAIT = 1, /* open_one(): the open goes on on the blocking pool */
};
#define OPEN_RESOLVE (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)

/* lk->rel (with its suffix) below r's root: from this worker's open-file cache, or opened
 * and then fstat'd (the inode is in memory once open: no disk). The open is tried from the
 * kernel's caches first (mp_file_open_poll's RESOLVE_CACHED); one that would wait goes to the
 * blocking pool, which only a poll with a task (cx) can do: on_req (can_wait false) gets
 * OPEN_WAIT and goes pending. Polled outside a task (cx NULL: the handler suites) it opens in
 * place. 0 with *f (a reference), OPEN_WAIT, or a negative errno. */
static int open_one(md_http_req *req, const md_route *r, struct lookup *lk, size_t len,
                    mp_file_op *op, mp_context *cx, bool can_wait, md_file **f)
{
    /* The generation's [static] limits (static_gen_new); none: the cache is off. */
    static const md_file_cache_limits off = {0, 0, 0, 0, 0};
    int err;
    const md_file_cache_limits *lim =
        md_http_server_state(md_http_req_server(req), &md_handler_static);
    if (lim == NULL)
        lim = &off;
    if (!lk->looked) {
        lk->looked = true;
        /* A path this thread found missing within valid_ms: 404 again without an open. */
        if ((err = md_file_cache_missing(lim, opts(r)->root_id, lk->rel, len)) != 0)
            return err;
        if ((*f = md_file_cache_get(lim, opts(r)->root_id, lk->rel, len)) != NULL)
            return 0;
    }
    int fd = -1;
    if (can_wait && cx == NULL) {
        fd = open_beneath(opts(r)->root_fd, lk->rel, OPEN_FLAGS);
        err = fd < 0 ? fd : 0;
    } else if (mp_file_open_poll(can_wait ? mp_runtime_current() : NULL, op, can_wait ? cx : NULL,
                                 opts(r)->root_fd, lk->rel, OPEN_FLAGS, 0, OPEN_RESOLVE, &fd,
                                 &err) == MP_PENDING ||
               (!can_wait && err == -EAGAIN)) {
        return OPEN_WAIT;
    }
    if (err == -ENOSYS) { /* no openat2 (Linux before 5.6): the O_NOFOLLOW walk */
        fd = open_beneath(opts(r)->root_fd, lk->rel, OPEN_FLAGS);
        err = fd < 0 ? fd : 0;
    }
    if (err != 0) {
        md_file_cache_note_missing(lim, opts(r)->root_id, lk->rel, len, err);
        return err;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err = -errno;
        close(fd);
        return err;
    }
    return md_file_new(lim, opts(r)->root_id, lk->rel, len, fd, &st, f);
}

/* What an open's error answers. */
static unsigned open_status(int err)
{
    switch (err) {
    case -EACCES:
    case -EPERM:
        return 403;
    case -ENOENT:
    case -ENOTDIR:
    case -ELOOP:
    case -EXDEV:
    case -ENAMETOOLONG:
        return 404;
    default:
        return 500;
    }
}

/* A directory's path whose index file is missing: 403 where the directory exists (there are
 * no listings: nginx's answer), 404 where it does not. The index's open has just walked the
 * directory's path, so its lookup is served from the kernel's caches (RESOLVE_CACHED); one
 * that would still wait for the disk answers 403. */
static unsigned missing_index_status(const md_route *r, const struct lookup *lk)
{
    size_t ilen = strlen(opts(r)->index_file);
    if (lk->rlen == ilen)
        return 403;                    /* the root's own index */
    size_t dlen = lk->rlen - ilen - 1; /* the directory, without its '/' (the walk's way) */
    char dir[REL_MAX];
    memcpy(dir, lk->rel, dlen);
    dir[dlen] = '\0';
    struct open_how how = {
        .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
        .resolve = OPEN_RESOLVE | RESOLVE_CACHED,
    };
    long fd = openat2_raw(opts(r)->root_fd, dir, &how);
    int err = fd >= 0 ? 0 : errno;
    if (err == ENOSYS) { /* no openat2: the O_NOFOLLOW walk */
        fd = open_beneath(opts(r)->root_fd, dir, O_PATH | O_DIRECTORY);
        err = fd >= 0 ? 0 : (int)-fd;
    }
    if (fd >= 0)
        close((int)fd);
    return err == ENOENT || err == ENOTDIR ? 404 : 403;
}

/* Finds lk's file, then its variant: 0 (lk->file set, lk->alt maybe), OPEN_WAIT, -ENOMEM, or
 * the status to answer instead (301 for a directory without its '/'). */
static int resolve(md_http_req *req, const md_route *r, struct lookup *lk, mp_file_op *op,
                   mp_context *cx, bool can_wait)
{
    if (lk->step == STEP_FILE) {
        int rc;
        /* try_html and fallback: a missing file's next candidate (an open that waits comes
         * back here with the candidate in lk). */
        while ((rc = open_one(req, r, lk, lk->rlen, op, cx, can_wait, &lk->file)) < 0 &&
               (rc == -ENOENT || rc == -ENOTDIR) && next_try(opts(r), lk))
            ;
        if (rc == OPEN_WAIT || rc == -ENOMEM)
            return rc;
        if (rc < 0 && lk->dir && rc == -ENOENT)
            return (int)missing_index_status(r, lk);
        if (rc < 0)
            return (int)open_status(rc);
        if (S_ISDIR(lk->file->mode))
            return lk->dir ? 403 : 301;
        if (!S_ISREG(lk->file->mode))
            return 403; /* a FIFO, device or socket: never read */
        lk->step = opts(r)->precompressed ? STEP_BR : STEP_DONE;
        lk->looked = false;
    }
    size_t alen = 0;
    const char *ae = md_http_req_field(req, MD_FIELD_ACCEPT_ENCODING, &alen);
    /* FILE.br, then FILE.zst, then FILE.gz, for a client that takes that coding. */
    for (; lk->step != STEP_DONE; lk->step++, lk->looked = false) {
        unsigned i = lk->step - STEP_BR;
        size_t slen = strlen(codings[i][1]);
        if (ae == NULL || lk->rlen + slen + 1 > sizeof lk->rel || !accepts(ae, alen, codings[i][0]))
            continue;
        memcpy(lk->rel + lk->rlen, codings[i][1], slen + 1);
        md_file *v;
        int rc = open_one(req, r, lk, lk->rlen + slen, op, cx, can_wait, &v);
        lk->rel[lk->rlen] = '\0';
        if (rc == OPEN_WAIT || rc == -ENOMEM)
            return rc;
        if (rc == 0 && S_ISREG(v->mode)) {
            lk->alt = v;
            lk->coding = (int8_t)i;
            lk->step = STEP_DONE;
            break;
        }
        if (rc == 0)
            md_file_put(v);
    }
    return 0;
}

static int error(md_http_req *req, unsigned code)
{
    const md_http_status *st = md_http_status_of(code);
    return md_http_respond(req, code, NULL, "text/plain", st->body, st->body_len);
}

/* resolve()'s answer other than a file: an error, or a directory's redirect. */
static int respond_status(md_http_req *req, int code)
{
    if (code != 301)
        return error(req, (unsigned)code);
    size_t plen, qlen;
    const char *path = md_http_req_path(req, &plen);
    const char *query = md_http_req_query(req, &qlen);
    if (query == NULL && md_http_req_path_cut(req)) /* a query longer than is kept: not lost */
        return md_http_respond(req, 414, NULL, "text/plain", md_http_status_of(414)->body,
                               md_http_status_of(414)->body_len);
    /* The decoded path, encoded again for a URI: a directory named with a space, a '%' or a
     * control character gives a valid Location, never a broken or injected field. The query
     * goes on as the client sent it (llhttp let only URI characters through). */
    char fields[4 * MD_HTTP_TARGET_MAX + 32];
    size_t n = (size_t)snprintf(fields, sizeof fields, "Location: ");
    n += md_uri_path_encode(path, plen, fields + n, 3 * MD_HTTP_TARGET_MAX);
    if (query != NULL)
        snprintf(fields + n, sizeof fields - n, "/?%.*s\r\n", (int)qlen, query);
    else
        snprintf(fields + n, sizeof fields - n, "/\r\n");
    return md_http_respond(req, 301, fields, "text/plain", "Moved Permanently\n", 18);
}

static void lookup_release(struct lookup *lk)
{
    if (lk->file != NULL)
        md_file_put(lk->file);
    if (lk->alt != NULL)
        md_file_put(lk->alt);
    lk->file = lk->alt = NULL;
}

/* want bytes at s->off into chunk[]: from the page cache at once, or on the blocking pool. */
static mp_poll read_piece(struct static_send *s, mp_context *cx, size_t want, size_t *n, int *err)
{
    if (cx == NULL) { /* polled outside a task (the handler suites): a plain read */
        ssize_t r = pread(s->file->fd, s->chunk, want, (off_t)s->off);
        *n = r > 0 ? (size_t)r : 0;
        *err = r < 0 ? -errno : 0;
        return MP_READY;
    }
    return mp_file_read_poll(mp_runtime_current(), &s->op, cx, s->file->fd, s->chunk, want, s->off,
                             n, err);
}

/* Are the first and last byte of [off, off + len) in the page cache? sendfile would wait for
 * the disk where they are not. */
static bool cached(int fd, uint64_t off, uint64_t len)
{
    char b;
    struct iovec iov = {.iov_base = &b, .iov_len = 1};
    return preadv2(fd, &iov, 1, (off_t)off, RWF_NOWAIT) >= 0 &&
           preadv2(fd, &iov, 1, (off_t)(off + len - 1), RWF_NOWAIT) >= 0;
}

/* cached(), once per open file where one piece is the whole file: a file found in the page
 * cache is taken to stay there while its open-file cache entry lives (valid_ms, 1 s by
 * default), so the responses after the first skip the two probes. Memory pressure that evicts
 * it within that time costs a worker one sendfile that waits for the disk, as sendfile always
 * does in nginx. */
static bool resident(md_file *f, uint64_t off, uint64_t len)
{
    bool whole = off == 0 && len == f->size;
    if (whole && atomic_load_explicit(&f->resident, memory_order_relaxed))
        return true;
    if (!cached(f->fd, off, len))
        return false;
    if (whole) /* relaxed: a hint, nothing is published through it */
        atomic_store_explicit(&f->resident, true, memory_order_relaxed);
    return true;
}

/* A body compressed on the fly (the route's compress, http/compress.h) is read into memory
 * and passed through the compressor instead of sendfile: pieces from the page cache
 * (RWF_NOWAIT) while out holds less than CODE_HIGH bytes, so that a slow reader holds one
 * batch of coded output, not the body. 0 when the body is all through, 1 when more is left
 * (out is full enough to flush, or the next piece must be read on the blocking pool), or a
 * negative errno (-EIO: the file shrank). */
enum { CODE_HIGH = 65536 };
static _Thread_local char code_in[CHUNK];

static int code_cached(md_http_req *req, int fd, uint64_t *off, uint64_t end, md_outbuf *out)
{
    if (*off == end)
        return md_http_req_write(req, out, NULL, 0, true);
    while (*off < end && md_outbuf_pending(out) < CODE_HIGH) {
        uint64_t left = end - *off;
        size_t want = left < CHUNK ? (size_t)left : CHUNK;
        struct iovec iov = {.iov_base = code_in, .iov_len = want};
        ssize_t n = preadv2(fd, &iov, 1, (off_t)*off, RWF_NOWAIT);
        if (n < 0 && errno == EOPNOTSUPP)
            n = pread(fd, code_in, want, (off_t)*off); /* a file system without RWF_NOWAIT */
        if (n < 0)
            return errno == EAGAIN ? 1 : -errno;
        if (n == 0)
            return -EIO; /* it shrank */
        *off += (uint64_t)n;
        int rc = md_http_req_write(req, out, code_in, (size_t)n, *off == end);
        if (rc != 0)
            return rc;
    }
    return *off == end ? 0 : 1;
}

/* The pending part of a coded body: code_cached(), then a piece read on the pool. */
static int code_poll(struct static_send *s, md_http_req *req, mp_context *cx, md_outbuf *out)
{
    for (;;) {
        if (!s->reading) {
            int rc = code_cached(req, s->file->fd, &s->off, s->end, out);
            if (rc <= 0)
                return rc;
            if (md_outbuf_pending(out) >= CODE_HIGH)
                return MD_PENDING_MORE; /* flushed before more is read */
        }
        uint64_t left = s->end - s->off;
        size_t want = left < CHUNK ? (size_t)left : CHUNK, got;
        int err;
        s->reading = true;
        if (read_piece(s, cx, want, &got, &err) == MP_PENDING)
            return MD_PENDING_WAIT;
        s->reading = false;
        if (err != 0 || got == 0)
            return err != 0 ? err : -EIO;
        s->off += got;
        int rc = md_http_req_write(req, out, s->chunk, got, s->off == s->end);
        if (rc != 0 || s->off == s->end)
            return rc;
    }
}

static int answer(md_http_req *req, const md_route *r, struct lookup *lk, struct static_send *s);

/* md_http_io.lend's release of a file's kept bytes: the reference the response held. */
static void file_release(void *f)
{
    md_file_put(f);
}

static int static_poll(md_http_pending *p, md_http_req *req, mp_context *cx, md_http_io *io,
                       md_outbuf *out)
{
    struct static_send *s = (struct static_send *)p;
    s->p.writes_output = false; /* only this poll was concerned */
    if (s->opening) {           /* an open went to the pool: the rest of on_req, from here */
        int rc = resolve(req, s->r, &s->lk, &s->op, cx, true);
        if (rc == OPEN_WAIT)
            return MD_PENDING_WAIT;
        if (rc != 0) {
            lookup_release(&s->lk);
            return rc < 0 ? rc : respond_status(req, rc);
        }
        s->opening = false;
        rc = answer(req, s->r, &s->lk, s);
        if (rc != MD_HANDLER_PENDING)
            return rc; /* answered whole (0), or -ENOMEM */
    }
    if (s->coded)
        return code_poll(s, req, cx, out);
    if (s->small) { /* the rest of a small file the page cache did not have */
        size_t n;
        int err;
        if (read_piece(s, cx, (size_t)(s->end - s->off), &n, &err) == MP_PENDING)
            return MD_PENDING_WAIT;
        if (err != 0)
            return err;
        char *w = md_outbuf_reserve(out, n);
        if (w == NULL)
            return -ENOMEM;
        memcpy(w, s->chunk, n);
        md_outbuf_commit(out, w + n);
        s->off += n;
        return s->off == s->end ? 0 : -EIO; /* shrank: what was read goes, then the close */
    }
    if (io->nodelay != NULL)
        io->nodelay(io); /* the file's last short segment must not wait for a delayed ACK */
    int fd = s->file->fd;
    for (;;) {
        if (s->chunk_len != 0) {
            int err;
            if (io->write(io, cx, s->chunk, s->chunk_len, &err) == MP_PENDING)
                return MD_PENDING_WAIT;
            if (err != 0)
                return err;
            s->off += s->chunk_len;
            s->chunk_len = 0;
        }
        if (s->off == s->end) {
            if (s->br == NULL)
                return 0;
            int rc = next_part(s, out); /* the next part's head, or the closing line */
            if (rc <= 0)
                return rc;
        }
        uint64_t left = s->end - s->off;
        uint64_t piece = left < SENDFILE_MAX ? left : SENDFILE_MAX;
        if (!s->reading && !s->no_sendfile && io->sendfile != NULL &&
            resident(s->file, s->off, piece)) {
            /* sendfile writes the head still in out first, in the same segment. */
            off_t at = (off_t)s->off;
            size_t n;
            int err;
            if (io->sendfile(io, cx, fd, &at, (size_t)piece, &n, &err) == MP_PENDING)
                return MD_PENDING_WAIT; /* the socket is full: woken when the peer reads */
            if (err == 0 && n == 0)
                return -EIO; /* the file ended early: it shrank */
            if (err == 0) {
                s->off += n;
                if (s->off == s->end)
                    continue; /* the end, or the next part */
                /* Between large pieces other tasks of this worker run: requeued at the back. */
                if (cx == NULL)
                    return MD_PENDING_MORE;
                (void)mp_yield(cx);
                return MD_PENDING_WAIT;
            }
            if (err != -EINVAL && err != -ENOSYS && err != -ESPIPE)
                return err;
            s->no_sendfile = true;
        }
        if (md_outbuf_pending(out) != 0)
            return MD_PENDING_MORE; /* the head first, then the copied pieces */
        /* No sendfile (HTTP/2's streams): a file the cache keeps is written from its bytes, whole,
         * rather than read a piece at a time into chunk[] and copied from there. */
        const char *kept = s->reading ? NULL : md_file_bytes(s->file);
        if (kept != NULL && io->lend != NULL && s->br == NULL) {
            /* HTTP/2: lent, not copied; the DATA frames copy them into the connection's
             * output. The lend takes over the response's reference, and with it the bytes. */
            int err;
            if (io->lend(io, cx, kept + s->off, (size_t)left, file_release, s->file, &err) ==
                MP_PENDING)
                return MD_PENDING_WAIT;
            if (err != 0)
                return err;
            s->file = NULL;
            s->off = s->end;
            return 0;
        }
        if (kept != NULL) {
            int err;
            if (io->write(io, cx, kept + s->off, (size_t)left, &err) == MP_PENDING)
                return MD_PENDING_WAIT;
            if (err != 0)
                return err;
            s->off = s->end;
            continue; /* the end, or the next part */
        }
        /* No sendfile: a piece from the page cache straight into the output (HTTP/2: the
         * stream's, whose DATA frames copy it once more, into the connection's), written
         * before the next is read. */
        if (!s->reading) {
            size_t want = left < COPY_PIECE ? (size_t)left : COPY_PIECE;
            char *w = md_outbuf_reserve(out, want);
            if (w == NULL)
                return -ENOMEM;
            struct iovec iov = {.iov_base = w, .iov_len = want};
            ssize_t n = preadv2(fd, &iov, 1, (off_t)s->off, RWF_NOWAIT);
            if (n < 0 && errno == EOPNOTSUPP)
                n = pread(fd, w, want, (off_t)s->off); /* a file system without RWF_NOWAIT */
            if (n == 0)
                return -EIO; /* it shrank */
            if (n < 0 && errno != EAGAIN)
                return -errno;
            if (n > 0) {
                md_outbuf_commit(out, w + n);
                s->off += (uint64_t)n;
                if (s->off == s->end && s->br != NULL)
                    continue; /* the next part's head after it, then out is flushed */
                return s->off == s->end ? 0 : MD_PENDING_MORE;
            }
        }
        /* The piece is not in the page cache, or sendfile cannot serve this file: one piece
         * read (on the blocking pool if need be) and written through the bounded write. */
        size_t want = left < CHUNK ? (size_t)left : CHUNK, got;
        int err;
        s->reading = true;
        if (read_piece(s, cx, want, &got, &err) == MP_PENDING)
            return MD_PENDING_WAIT;
        s->reading = false;
        if (err != 0 || got == 0)
            return err != 0 ? err : -EIO;
        s->chunk_len = got;
    }
}

/* The response's references go: the file's descriptor is closed here when no cache holds it
 * (md_file_put), on whichever worker the task runs now. */
static void static_cancel(md_http_pending *p)
{
    struct static_send *s = (struct static_send *)p;
    mp_file_op_cancel(&s->op); /* a pool open or read finishes in storage of its own */
    lookup_release(&s->lk);
    if (s->file != NULL)
        md_file_put(s->file);
    free(s->br);
    free(s);
}

/* poll's wrapper: the state goes once the response is complete or failed. */
static int static_poll_once(md_http_pending *p, md_http_req *req, mp_context *cx, md_http_io *io,
                            md_outbuf *out)
{
    int rc = static_poll(p, req, cx, io, out);
    if (rc != MD_PENDING_WAIT && rc != MD_PENDING_MORE)
        static_cancel(p);
    return rc;
}

static struct static_send *send_new(const md_route *r)
{
    struct static_send *s = malloc(sizeof *s);
    if (s == NULL)
        return NULL;
    s->p.poll = static_poll_once;
    s->p.cancel = static_cancel;
    s->p.writes_output = false;
    s->op = (mp_file_op){0};
    s->r = r;
    s->file = NULL;
    s->chunk_len = 0;
    s->small = s->reading = s->opening = s->no_sendfile = s->coded = false;
    s->br = NULL;
    s->lk.file = s->lk.alt = NULL;
    return s;
}

/* Appends "name" value CRLF at fields[fl], with a NUL after it (value NUL-terminated; nlen
 * name's length), and returns the new length: answer()'s lines without snprintf, which cost
 * every response some 1,000 instructions for the validators alone. FIELDS_MAX holds every line
 * answer() adds. */
static size_t put_line(char *fields, size_t fl, const char *name, size_t nlen, const char *value)
{
    size_t vlen = strlen(value);
    memcpy(fields + fl, name, nlen);
    memcpy(fields + fl + nlen, value, vlen);
    memcpy(fields + fl + nlen + vlen, "\r\n", 3); /* and the NUL: each answer reads it whole */
    return fl + nlen + vlen + 2;
}
_Static_assert(sizeof "Content-Encoding: \r\n" + 8 + sizeof "Vary: Accept-Encoding\r\n" +
                       sizeof "ETag: \r\n" + MD_FILE_ETAG_MAX + sizeof "Last-Modified: \r\n" +
                       MD_FILE_DATE_MAX <
                   FIELDS_MAX / 2,
               "answer()'s fixed lines leave room for the range's");

/* answer()'s 206 of several ranges: the head, then the parts from the pending response (s,
 * made here if need be), which takes over f's reference. MD_HANDLER_PENDING, MD_HANDLER_DONE
 * for a HEAD (f is the caller's still), or -ENOMEM. */
static int answer_parts(md_http_req *req, const md_route *r, md_file *f, struct static_send *s,
                        const char *fields, const char *ctype, uint64_t at[][2], uint32_t n)
{
    struct byteranges *br = malloc(sizeof *br);
    if (br == NULL)
        return -ENOMEM;
    br->n = n;
    br->next = 0;
    br->size = f->size;
    br->ctype = ctype;
    new_boundary(br->boundary);
    memcpy(br->at, at, n * sizeof at[0]);
    char w[PART_HEAD_MAX];
    uint64_t len = 0;
    for (uint32_t i = 0; i <= n; i++)
        len += part_head(w, br, i) + (i < n ? at[i][1] - at[i][0] + 1 : 0);
    char mtype[sizeof "multipart/byteranges; boundary=" + BOUNDARY_LEN];
    snprintf(mtype, sizeof mtype, "multipart/byteranges; boundary=%s", br->boundary);
    int rc = md_http_respond_head(req, 206, fields, mtype, len);
    if (rc != 0 || md_http_req_is_head(req)) {
        free(br);
        return rc;
    }
    bool fresh = s == NULL;
    if (fresh && (s = send_new(r)) == NULL) {
        free(br);
        return -ENOMEM;
    }
    s->file = f;
    s->br = br;
    s->off = s->end = 0; /* the first poll puts the first part's head */
    /* Polled before the connection flushes the head: sendfile writes it corked. */
    s->p.writes_output = true;
    if (fresh)
        md_http_req_pend(req, &s->p);
    return MD_HANDLER_PENDING;
}

/* The response for lk's file (its references are taken over: lk holds none after). From
 * on_req (s NULL) or from the poll that finished lk's opens (s): MD_HANDLER_DONE when it is
 * all in the output, MD_HANDLER_PENDING when s (made here if need be, and pended) sends the
 * rest, or -ENOMEM. */
static int answer(md_http_req *req, const md_route *r, struct lookup *lk, struct static_send *s)
{
    md_file *f = lk->file;
    const char *ctype = md_mime_type(lk->rel, lk->rlen);
    if (ctype == NULL)
        ctype = opts(r)->default_type;
    char fields[FIELDS_MAX];
    size_t fl = 0;
    if (lk->alt != NULL) {
        md_file_put(f);
        f = lk->alt;
        fl = put_line(fields, fl, "Content-Encoding: ", 18, codings[lk->coding][0]);
    }
    lk->file = lk->alt = NULL;
    if (opts(r)->precompressed) {
        memcpy(fields + fl, "Vary: Accept-Encoding\r\n", 24);
        fl += 23;
    }
    uint64_t size = f->size;
    fl = put_line(fields, fl, "ETag: ", 6, f->etag);
    /* No Last-Modified later than the response's Date (RFC 9110 8.8.2.1: a file dated in the
     * future is dated now), nor before 1970 (what an IMF-fixdate here can say): the
     * conditionals below compare with the date sent, so a client's echo of it matches. */
    time_t now = md_http_date_now();
    time_t mtime = f->mtime < 0 ? 0 : f->mtime > now ? now : f->mtime;
    char lm[MD_FILE_DATE_MAX];
    const char *lm_text = f->last_modified;
    if (mtime != f->mtime && mtime == now) {
        lm[md_httpdate_format(mtime, lm)] = '\0';
        lm_text = lm;
    }
    fl = put_line(fields, fl, "Last-Modified: ", 15, lm_text);

    /* Conditionals in RFC 9110 13.2.2's order: If-Match, else If-Unmodified-Since (false:
     * 412); then If-None-Match, else If-Modified-Since (false: 304); then If-Range. */
    size_t vlen = 0;
    const char *im = md_http_req_field(req, MD_FIELD_IF_MATCH, &vlen);
    bool failed = false;
    if (im != NULL) {
        failed = !etag_listed(im, vlen, f->etag, true);
    } else {
        const char *ius = md_http_req_field(req, MD_FIELD_IF_UNMODIFIED_SINCE, &vlen);
        time_t since = parse_date(req, ius, vlen); /* not a date: ignored */
        failed = since >= 0 && mtime > since;
    }
    int rc;
    if (failed) {
        const md_http_status *s412 = md_http_status_of(412);
        rc = md_http_respond(req, 412, fields, "text/plain", s412->body, s412->body_len);
        goto out_put;
    }
    const char *inm = md_http_req_field(req, MD_FIELD_IF_NONE_MATCH, &vlen);
    bool not_modified = false;
    if (inm != NULL) {
        not_modified = etag_listed(inm, vlen, f->etag, false);
    } else {
        const char *ims = md_http_req_field(req, MD_FIELD_IF_MODIFIED_SINCE, &vlen);
        time_t since = parse_date(req, ims, vlen);
        not_modified = since >= 0 && mtime <= since;
    }
    if (not_modified) {
        rc = md_http_respond_head(req, 304, fields, ctype, size);
        goto out_put;
    }

    memcpy(fields + fl, "Accept-Ranges: bytes\r\n", 23);
    fl += 22;
    fields[fl] = '\0';
    uint64_t from = 0, to = size != 0 ? size - 1 : 0;
    unsigned status = 200;
    const char *range = md_http_req_field(req, MD_FIELD_RANGE, &vlen);
    if (range != NULL) {
        size_t irlen;
        const char *ifr = md_http_req_field(req, MD_FIELD_IF_RANGE, &irlen);
        bool applies = true;
        if (ifr != NULL && irlen != 0 && ifr[0] == '"')
            applies = irlen == f->etag_len && memcmp(ifr, f->etag, irlen) == 0;
        else if (ifr != NULL)
            applies = parse_date(req, ifr, irlen) == mtime; /* W/ tags never match */
        uint64_t at[RANGES_MAX][2];
        int pr = applies ? parse_ranges(range, vlen, size, at) : 0;
        if (pr > 1) {
            rc = answer_parts(req, r, f, s, fields, ctype, at, (uint32_t)pr);
            if (rc == MD_HANDLER_PENDING)
                return rc; /* the response holds f now */
            goto out_put;
        }
        if (pr < 0) {
            char f416[FIELDS_MAX + 64];
            snprintf(f416, sizeof f416, "%sContent-Range: bytes */%llu\r\n", fields,
                     (unsigned long long)size);
            const md_http_status *s416 = md_http_status_of(416);
            rc = md_http_respond(req, 416, f416, "text/plain", s416->body, s416->body_len);
            goto out_put;
        }
        if (pr > 0) {
            from = at[0][0];
            to = at[0][1];
            status = 206;
            fl += (size_t)snprintf(
                fields + fl, sizeof fields - fl, "Content-Range: bytes %llu-%llu/%llu\r\n",
                (unsigned long long)from, (unsigned long long)to, (unsigned long long)size);
        }
    }
    uint64_t len = size != 0 ? to - from + 1 : 0;
    rc = md_http_respond_head(req, status, fields, ctype, len);
    if (rc == 0 && md_http_req_coding(req)) {
        uint64_t end = from + len;
        rc = code_cached(req, f->fd, &from, end, md_http_req_out(req));
        if (rc <= 0)
            goto out_put; /* all of it coded (0), or failed */
        /* The rest from the pending response, after out is flushed. */
        bool fresh = s == NULL;
        if (fresh && (s = send_new(r)) == NULL) {
            rc = -ENOMEM;
            goto out_put;
        }
        s->file = f;
        s->off = from;
        s->end = end;
        s->coded = true;
        s->p.writes_output = false;
        if (fresh)
            md_http_req_pend(req, &s->p);
        return MD_HANDLER_PENDING;
    }
    if (rc != 0 || len == 0 || md_http_req_is_head(req))
        goto out_put;
    if (len <= SMALL) {
        /* After the head in the same output: one send for both. */
        md_outbuf *out = md_http_req_out(req);
        char *w = md_outbuf_reserve(out, (size_t)len);
        if (w == NULL) {
            rc = -ENOMEM;
            goto out_put;
        }
        const char *kept = md_file_bytes(f); /* no read at all where the cache keeps them */
        if (kept != NULL) {
            memcpy(w, kept + from, (size_t)len);
            md_outbuf_commit(out, w + len);
            goto out_put;
        }
        /* From the page cache only: the rest (a cold file) is read on the blocking pool by
         * the pending response, or found missing there if the file shrank. */
        struct iovec iov = {.iov_base = w, .iov_len = (size_t)len};
        ssize_t n = preadv2(f->fd, &iov, 1, (off_t)from, RWF_NOWAIT);
        if (n < 0 && errno == EOPNOTSUPP)
            n = pread(f->fd, w, (size_t)len, (off_t)from); /* a file system without RWF_NOWAIT */
        if (n > 0)
            md_outbuf_commit(out, w + n);
        if (n == (ssize_t)len)
            goto out_put; /* rc is 0: MD_HANDLER_DONE */
        from += n > 0 ? (uint64_t)n : 0;
        len -= n > 0 ? (uint64_t)n : 0;
    }
    bool fresh = s == NULL;
    if (fresh && (s = send_new(r)) == NULL) {
        rc = -ENOMEM;
        goto out_put;
    }
    s->file = f;
    s->off = from;
    s->end = from + len;
    s->small = len <= SMALL;
    /* Polled first, before the connection flushes the head: sendfile writes it corked. */
    s->p.writes_output = !s->small;
    if (fresh)
        md_http_req_pend(req, &s->p);
    return MD_HANDLER_PENDING;
out_put:
    md_file_put(f);
    return rc;
}

static int static_on_req(md_http_req *req, const md_route *r)
{
    size_t plen;
    const char *path = md_http_req_path(req, &plen);
    /* Dotfiles: no segment may start with '.' (the path is normalised: no "." or ".."). */
    for (size_t i = 0; i + 1 < plen; i++)
        if (path[i] == '/' && path[i + 1] == '.')
            return error(req, 404);
    struct lookup lk;
    if (plen - 1 + sizeof opts(r)->index_file + 4 > sizeof lk.rel)
        return error(req, 404);
    memcpy(lk.rel, path + 1, plen - 1);
    lk.rlen = plen - 1;
    lk.dir = path[plen - 1] == '/';
    if (lk.dir) {
        size_t ilen = strlen(opts(r)->index_file);
        memcpy(lk.rel + lk.rlen, opts(r)->index_file, ilen);
        lk.rlen += ilen;
    }
    lk.rel[lk.rlen] = '\0';
    if (lk.rlen == 0)
        return error(req, 404);
    lk.looked = false;
    lk.tried = TRY_PATH;
    lk.step = STEP_FILE;
    lk.coding = -1;
    lk.file = lk.alt = NULL;

    mp_file_op op = {0};
    int rc = resolve(req, r, &lk, &op, NULL, false);
    if (rc == OPEN_WAIT) {
        /* The open would wait for the disk: the pending response does it on the pool. */
        struct static_send *s = send_new(r);
        if (s == NULL) {
            lookup_release(&lk);
            return -ENOMEM;
        }
        s->lk = lk;
        s->opening = true;
        md_http_req_pend(req, &s->p);
        return MD_HANDLER_PENDING;
    }
    if (rc != 0) {
        lookup_release(&lk);
        return rc < 0 ? rc : respond_status(req, rc);
    }
    return answer(req, r, &lk, NULL);
}

/* Per generation of settings: a copy of the [static] section's open-file cache limits, so a
 * reload that changes them applies from the next request on, with the rest of the settings. */
static int static_gen_new(const md_ini_conf *cfg, mp_runtime *rt, void **state, char *msg,
                          size_t msg_len)
{
    (void)rt;
    *state = NULL;
    const md_file_cache_limits *lim = md_ini_find(cfg, &md_section_static);
    if (lim == NULL)
        return 0;
    md_file_cache_limits *copy = malloc(sizeof *copy);
    if (copy == NULL) {
        md_say(msg, msg_len, "static: out of memory");
        return -ENOMEM;
    }
    *copy = *lim;
    *state = copy;
    return 0;
}

static void static_gen_free(void *state)
{
    free(state);
}

const md_handler md_handler_static = {
    .name = "static",
    .methods = MD_METHODS_GET,
    .methods_max = MD_METHODS_GET,
    .codes_body = true,
    .keys = (const char *const[]){"root", "index", "default_type", "precompressed", "try_html",
                                  "fallback", NULL},
    .conf_size = sizeof(static_conf),
    .conf_init = static_init,
    .conf_key = static_key,
    .conf_check = static_check,
    .open = static_open,
    .close = static_close,
    .gen_new = static_gen_new,
    .gen_free = static_gen_free,
    .on_req = static_on_req,
};
