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
 * Last-Modified; If-None-Match (weak comparison, "*") and then If-Modified-Since give 304.
 * One byte range ("bytes=a-b", "a-", "-n") gives 206 with Content-Range, or 416 when it starts
 * past the end; several ranges, or a bad Range, get the whole file (RFC 9110 14.2 lets a server
 * ignore Range); If-Range (an ETag compared strongly, or the exact Last-Modified date) must
 * match for the range to apply. With precompressed = on, FILE.br or else FILE.gz is served
 * (Content-Encoding: br or gzip) to a client whose Accept-Encoding allows that coding, and
 * every response says Vary: Accept-Encoding.
 *
 * The body: a file of up to SMALL bytes is read into the output after its head (one send for
 * both; no state kept); a larger one is sent with sendfile(2) on the connection's socket once the
 * head has been flushed, through the connection's bounded sendfile: when the socket's buffer is
 * full the response waits for the peer to read (within the send limits) and sendfile goes on,
 * so the body never passes through user space. A file that shrinks under a download ends the
 * response short with a close: nothing past the new end is presented as content.
 *
 * Blocking: no read of file data waits for the disk on the worker. A small file is read with
 * preadv2(RWF_NOWAIT), which copies from the page cache and fails where it would wait; what it
 * could not read is read on the runtime's blocking pool (mp_file_read_poll) by the pending
 * response. Before each sendfile piece the first and last byte of the piece are probed the
 * same way: a piece not in the cache is read on the pool into chunk[] and written through the
 * bounded write instead (sendfile would sleep on the disk). The open and fstat still run on the
 * worker: they touch directories and the inode, which a served tree keeps in the kernel's
 * caches, and openat2 cannot be asked to fail rather than wait on them without losing
 * RESOLVE_BENEATH's guarantees on old kernels.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "http/handler.h"
#include "http/mime.h"

enum {
    SMALL = 16384,          /* read into the output with its head */
    CHUNK = 16384,          /* a piece written through the bounded write after EAGAIN */
    SENDFILE_MAX = 1 << 20, /* bytes per sendfile call, so one connection yields */
    FIELDS_MAX = 512,       /* the header lines this handler adds */
    REL_MAX = MD_HTTP_TARGET_MAX + MD_ROUTE_INDEX_MAX + 4,
};

struct static_send {
    md_http_pending p;
    mp_file_op op; /* a read on the blocking pool, into chunk[] */
    int fd;
    uint64_t off, end; /* [off, end) of the file still to send */
    size_t chunk_len;  /* a piece in chunk[] being written (not cached); 0: none */
    bool small;        /* read into out with the head */
    bool reading;      /* a piece is being read into chunk[] (op may be on the pool) */
    bool no_sendfile;  /* sendfile refused this file (EINVAL, ENOSYS): copy it */
    char chunk[CHUNK];
};

/* openat2 beneath dirfd, or the O_NOFOLLOW walk where the kernel has no openat2. */
static int open_beneath(int dirfd, const char *rel, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
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

static int open_file(int root, const char *rel, struct stat *st)
{
    int fd = open_beneath(root, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return fd;
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

static int error(md_http_conn *c, unsigned code)
{
    const md_http_status *st = md_http_status_of(code);
    return md_http_respond(c, code, NULL, "text/plain", st->body, st->body_len);
}

static int open_error(md_http_conn *c, int err)
{
    switch (err) {
    case -EACCES:
    case -EPERM:
        return error(c, 403);
    case -ENOENT:
    case -ENOTDIR:
    case -ELOOP:
    case -EXDEV:
    case -ENAMETOOLONG:
        return error(c, 404);
    default:
        return error(c, 500);
    }
}

/* a[0..n) names the coding (any case), or "*", as a list element with a q-value other than
 * 0. */
static bool accepts(const char *a, size_t n, const char *coding)
{
    size_t clen = strlen(coding);
    size_t i = 0;
    while (i < n) {
        while (i < n && (a[i] == ' ' || a[i] == '\t' || a[i] == ','))
            i++;
        size_t start = i;
        while (i < n && a[i] != ',' && a[i] != ';' && a[i] != ' ' && a[i] != '\t')
            i++;
        size_t tlen = i - start;
        bool gzip = (tlen == clen && strncasecmp(a + start, coding, clen) == 0) ||
                    (tlen == 1 && a[start] == '*');
        bool zero = false;
        while (i < n && a[i] != ',') {
            if (a[i] == 'q' || a[i] == 'Q') {
                size_t j = i + 1;
                while (j < n && (a[j] == ' ' || a[j] == '='))
                    j++;
                zero = j < n && a[j] == '0';
                for (j++; zero && j < n && a[j] != ',' && a[j] != ';'; j++)
                    if (a[j] >= '1' && a[j] <= '9')
                        zero = false;
            }
            i++;
        }
        if (gzip && !zero)
            return true;
    }
    return false;
}

/* The opaque tags of an If-None-Match list, compared weakly with ours (W/ ignored). */
static bool none_match(const char *v, size_t n, const char *etag)
{
    size_t elen = strlen(etag);
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        if (i < n && v[i] == '*')
            return true;
        if (i + 1 < n && v[i] == 'W' && v[i + 1] == '/')
            i += 2;
        if (i >= n || v[i] != '"')
            return false; /* not a list of entity-tags: no match */
        const char *q = memchr(v + i + 1, '"', n - i - 1);
        if (q == NULL)
            return false;
        size_t len = (size_t)(q - (v + i)) + 1;
        if (len == elen && memcmp(v + i, etag, len) == 0)
            return true;
        i += len;
    }
    return false;
}

/* An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the only form we send; -1 otherwise. */
static time_t parse_date(const char *v, size_t n)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    struct tm tm = {0};
    const char *end = strptime(buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (end == NULL || *end != '\0')
        return -1;
    return timegm(&tm);
}

static void put_date(char *buf, size_t len, time_t t)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* "bytes=a-b" / "bytes=a-" / "bytes=-n" against size: 1 with [*from, *to] (inclusive), 0 to
 * ignore the field (bad, or several ranges), -1 for 416 (starts past the end). */
static int parse_range(const char *v, size_t n, uint64_t size, uint64_t *from, uint64_t *to)
{
    if (n < 7 || strncasecmp(v, "bytes=", 6) != 0 || memchr(v, ',', n) != NULL)
        return 0;
    size_t i = 6;
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
    if (i != n || (!has_a && !has_b))
        return 0;
    if (!has_a) { /* the last b bytes */
        if (b == 0)
            return -1;
        *from = b >= size ? 0 : size - b;
        *to = size - 1;
        return size == 0 ? -1 : 1;
    }
    if (has_b && b < a)
        return 0;
    if (a >= size)
        return -1;
    *from = a;
    *to = has_b && b < size - 1 ? b : size - 1;
    return 1;
}

/* want bytes at s->off into chunk[]: from the page cache at once, or on the blocking pool. */
static mp_poll read_piece(struct static_send *s, mp_context *cx, size_t want, size_t *n, int *err)
{
    if (cx == NULL) { /* polled outside a task (the handler suites): a plain read */
        ssize_t r = pread(s->fd, s->chunk, want, (off_t)s->off);
        *n = r > 0 ? (size_t)r : 0;
        *err = r < 0 ? -errno : 0;
        return MP_READY;
    }
    return mp_file_read_poll(mp_runtime_current(), &s->op, cx, s->fd, s->chunk, want, s->off, n,
                             err);
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

static int static_poll(md_http_pending *p, md_http_conn *c, mp_context *cx, md_http_io *io,
                       md_outbuf *out)
{
    (void)c; /* the head went out from on_req */
    struct static_send *s = (struct static_send *)p;
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
    if (md_outbuf_pending(out) != 0)
        return MD_PENDING_MORE; /* the head first */
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
        if (s->off == s->end)
            return 0;
        uint64_t left = s->end - s->off;
        uint64_t piece = left < SENDFILE_MAX ? left : SENDFILE_MAX;
        if (!s->reading && !s->no_sendfile && io->sendfile != NULL &&
            cached(s->fd, s->off, piece)) {
            off_t at = (off_t)s->off;
            size_t n;
            int err;
            if (io->sendfile(io, cx, s->fd, &at, (size_t)piece, &n, &err) == MP_PENDING)
                return MD_PENDING_WAIT; /* the socket is full: woken when the peer reads */
            if (err == 0 && n == 0)
                return -EIO; /* the file ended early: it shrank */
            if (err == 0) {
                s->off += n;
                if (s->off == s->end)
                    return 0;
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

static void static_cancel(md_http_pending *p)
{
    struct static_send *s = (struct static_send *)p;
    mp_file_op_cancel(&s->op); /* a pool read finishes in storage of its own */
    close(s->fd);
    free(s);
}

static void static_finish(md_http_pending *p)
{
    static_cancel(p);
}

/* poll's wrapper: the state goes once the response is complete or failed. */
static int static_poll_once(md_http_pending *p, md_http_conn *c, mp_context *cx, md_http_io *io,
                            md_outbuf *out)
{
    int rc = static_poll(p, c, cx, io, out);
    if (rc != MD_PENDING_WAIT && rc != MD_PENDING_MORE)
        static_finish(p);
    return rc;
}

static int static_on_req(md_http_conn *c, const md_route *r)
{
    size_t plen;
    const char *path = md_http_req_path(c, &plen);
    /* Dotfiles: no segment may start with '.' (the path is normalised: no "." or ".."). */
    for (size_t i = 0; i + 1 < plen; i++)
        if (path[i] == '/' && path[i + 1] == '.')
            return error(c, 404);
    char rel[REL_MAX];
    if (plen - 1 + sizeof r->index_file + 4 > sizeof rel)
        return error(c, 404);
    memcpy(rel, path + 1, plen - 1);
    size_t rlen = plen - 1;
    bool dir = path[plen - 1] == '/';
    if (dir) {
        size_t ilen = strlen(r->index_file);
        memcpy(rel + rlen, r->index_file, ilen);
        rlen += ilen;
    }
    rel[rlen] = '\0';
    if (rlen == 0)
        return error(c, 404);

    struct stat st;
    int fd = open_file(r->root_fd, rel, &st);
    if (fd < 0)
        return open_error(c, dir && fd == -ENOENT ? -EACCES : fd); /* no index: no listing */
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        if (dir)
            return error(c, 403);
        /* A directory without its '/': where its index is. */
        char fields[MD_HTTP_TARGET_MAX + 32];
        snprintf(fields, sizeof fields, "Location: %.*s/\r\n", (int)plen, path);
        return md_http_respond(c, 301, fields, "text/plain", "Moved Permanently\n", 18);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return error(c, 403); /* a FIFO, device or socket: never read */
    }

    const char *ctype = md_mime_type(rel, rlen);
    if (ctype == NULL)
        ctype = r->content_type;
    char fields[FIELDS_MAX];
    size_t fl = 0;
    if (r->precompressed) {
        size_t alen;
        const char *ae = md_http_req_field(c, MD_FIELD_ACCEPT_ENCODING, &alen);
        /* FILE.br, then FILE.gz, for a client that takes that coding. */
        static const char *const codings[][2] = {{"br", ".br"}, {"gzip", ".gz"}};
        for (size_t i = 0; ae != NULL && i < 2 && rlen + 4 < sizeof rel; i++) {
            if (!accepts(ae, alen, codings[i][0]))
                continue;
            memcpy(rel + rlen, codings[i][1], 4);
            struct stat vst;
            int vfd = open_file(r->root_fd, rel, &vst);
            rel[rlen] = '\0';
            if (vfd >= 0 && S_ISREG(vst.st_mode)) {
                close(fd);
                fd = vfd;
                st = vst;
                fl += (size_t)snprintf(fields + fl, sizeof fields - fl, "Content-Encoding: %s\r\n",
                                       codings[i][0]);
                break;
            }
            if (vfd >= 0)
                close(vfd);
        }
        fl += (size_t)snprintf(fields + fl, sizeof fields - fl, "Vary: Accept-Encoding\r\n");
    }

    uint64_t size = (uint64_t)st.st_size;
    char etag[80], lm[40];
    snprintf(etag, sizeof etag, "\"%llx-%llx-%llx\"", (unsigned long long)st.st_ino,
             (unsigned long long)st.st_mtim.tv_sec * 1000000000ull +
                 (unsigned long long)st.st_mtim.tv_nsec,
             (unsigned long long)size);
    put_date(lm, sizeof lm, st.st_mtim.tv_sec);
    fl += (size_t)snprintf(fields + fl, sizeof fields - fl, "ETag: %s\r\nLast-Modified: %s\r\n",
                           etag, lm);

    /* Conditionals (RFC 9110 13.2.2): If-None-Match, else If-Modified-Since. */
    size_t vlen;
    const char *inm = md_http_req_field(c, MD_FIELD_IF_NONE_MATCH, &vlen);
    bool not_modified = false;
    if (inm != NULL) {
        not_modified = none_match(inm, vlen, etag);
    } else {
        const char *ims = md_http_req_field(c, MD_FIELD_IF_MODIFIED_SINCE, &vlen);
        time_t since = ims != NULL ? parse_date(ims, vlen) : -1;
        not_modified = since >= 0 && st.st_mtim.tv_sec <= since;
    }
    if (not_modified) {
        close(fd);
        return md_http_respond_head(c, 304, fields, ctype, size);
    }

    fl += (size_t)snprintf(fields + fl, sizeof fields - fl, "Accept-Ranges: bytes\r\n");
    uint64_t from = 0, to = size != 0 ? size - 1 : 0;
    unsigned status = 200;
    const char *range = md_http_req_field(c, MD_FIELD_RANGE, &vlen);
    if (range != NULL) {
        size_t irlen;
        const char *ifr = md_http_req_field(c, MD_FIELD_IF_RANGE, &irlen);
        bool applies = true;
        if (ifr != NULL && ifr[0] == '"')
            applies = irlen == strlen(etag) && memcmp(ifr, etag, irlen) == 0;
        else if (ifr != NULL)
            applies = parse_date(ifr, irlen) == st.st_mtim.tv_sec; /* W/ tags never match */
        int pr = applies ? parse_range(range, vlen, size, &from, &to) : 0;
        if (pr < 0) {
            close(fd);
            char f416[FIELDS_MAX + 64];
            snprintf(f416, sizeof f416, "%sContent-Range: bytes */%llu\r\n", fields,
                     (unsigned long long)size);
            const md_http_status *s416 = md_http_status_of(416);
            return md_http_respond(c, 416, f416, "text/plain", s416->body, s416->body_len);
        }
        if (pr > 0) {
            status = 206;
            fl += (size_t)snprintf(
                fields + fl, sizeof fields - fl, "Content-Range: bytes %llu-%llu/%llu\r\n",
                (unsigned long long)from, (unsigned long long)to, (unsigned long long)size);
        }
    }
    uint64_t len = size != 0 ? to - from + 1 : 0;
    int rc = md_http_respond_head(c, status, fields, ctype, len);
    if (rc != 0 || len == 0 || md_http_req_is_head(c)) {
        close(fd);
        return rc;
    }
    if (len <= SMALL) {
        /* After the head in the same output: one send for both. */
        md_outbuf *out = md_http_conn_out(c);
        char *w = md_outbuf_reserve(out, (size_t)len);
        if (w == NULL) {
            close(fd);
            return -ENOMEM;
        }
        /* From the page cache only: the rest (a cold file) is read on the blocking pool by
         * the pending response, or found missing there if the file shrank. */
        struct iovec iov = {.iov_base = w, .iov_len = (size_t)len};
        ssize_t n = preadv2(fd, &iov, 1, (off_t)from, RWF_NOWAIT);
        if (n < 0 && errno == EOPNOTSUPP)
            n = pread(fd, w, (size_t)len, (off_t)from); /* a file system without RWF_NOWAIT */
        if (n > 0)
            md_outbuf_commit(out, w + n);
        if (n == (ssize_t)len) {
            close(fd);
            return MD_HANDLER_DONE;
        }
        from += n > 0 ? (uint64_t)n : 0;
        len -= n > 0 ? (uint64_t)n : 0;
    }
    struct static_send *s = malloc(sizeof *s);
    if (s == NULL) {
        close(fd);
        return -ENOMEM;
    }
    s->p.poll = static_poll_once;
    s->p.cancel = static_cancel;
    s->fd = fd;
    s->off = from;
    s->end = from + len;
    s->chunk_len = 0;
    s->small = len <= SMALL;
    s->reading = false;
    s->op = (mp_file_op){0};
    md_http_conn_pend(c, &s->p);
    return MD_HANDLER_PENDING;
}

const md_handler md_handler_static = {.name = "static", .on_req = static_on_req};
