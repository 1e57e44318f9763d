/* auth_basic.c: a route's Basic authentication against an htpasswd file (auth_basic.h has
 * the contract). Hashing is libxcrypt's (crypt_rn), base64 and SHA-256 OpenSSL's. */
#include "http/auth_basic.h"

#include <crypt.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cfgfile.h"
#include "core/text.h"
#include "http/routes.h"

typedef struct user {
    const char *name; /* into text, NUL-terminated */
    const char *hash;
    size_t name_len;
} user;

struct md_htpasswd {
    char *text; /* the file, its lines cut in place */
    user *users;
    size_t n;
    size_t dummy;         /* the user whose hash costs most: an unknown name pays it */
    pthread_mutex_t lock; /* the cache's */
    struct {
        bool used;
        unsigned char md[32];
    } cache[MD_AUTH_CACHE];
};

int md_auth_key(md_route_auth *a, const char *key, const char *value, uint32_t line, char *msg,
                size_t msg_len)
{
    if (strcmp(key, "auth_basic") == 0) {
        size_t n = strlen(value);
        if (n == 0 || n >= MD_AUTH_REALM_MAX || !md_text_field_safe(value, true) ||
            strpbrk(value, "\"\\") != NULL) {
            md_say(msg, msg_len,
                   "expected a realm of visible ASCII and spaces without '\"' or '\\', at most "
                   "%d bytes",
                   MD_AUTH_REALM_MAX - 1);
            return -EINVAL;
        }
        md_text_set(a->realm, sizeof a->realm, value);
        return 0;
    }
    if (strcmp(key, "auth_basic_user_file") == 0) {
        if (value[0] != '/' || strlen(value) >= MD_AUTH_FILE_MAX) {
            md_say(msg, msg_len, "expected an absolute file path, at most %d bytes",
                   MD_AUTH_FILE_MAX - 1);
            return -EINVAL;
        }
        md_text_set(a->file, sizeof a->file, value);
        a->file_line = line;
        return 0;
    }
    return -ENOENT;
}

int md_auth_check(const md_route_auth *a, char *msg, size_t msg_len)
{
    if ((a->realm[0] != '\0') != (a->file[0] != '\0')) {
        md_say(msg, msg_len,
               a->realm[0] != '\0' ? "auth_basic: needs auth_basic_user_file"
                                   : "auth_basic_user_file: needs auth_basic");
        return -EINVAL;
    }
    return 0;
}

/* The hash methods taken, by their prefix: the slow ones libxcrypt recommends, and
 * sha512-crypt for files made by older tools (openssl passwd -6, mkpasswd). */
static bool known_method(const char *hash)
{
    return strncmp(hash, "$2y$", 4) == 0 || strncmp(hash, "$2b$", 4) == 0 ||
           strncmp(hash, "$y$", 3) == 0 || strncmp(hash, "$6$", 3) == 0;
}

/* crypt(3)'s base64 alphabet. */
static bool b64_crypt(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '/'))
            return false;
    }
    return true;
}

/* The shape of a whole hash of a known method (crypt_checksalt() reads only its setting): a
 * cut or mangled line is refused when the file is read, not found out as a 401 later. */
static bool well_formed(const char *hash)
{
    size_t n = strlen(hash);
    if (hash[1] == '2') /* $2b$NN$ then 22 salt and 31 hash characters */
        return n == 60 && hash[3] == '$' && hash[4] >= '0' && hash[4] <= '3' && hash[5] >= '0' &&
               hash[5] <= '9' && hash[6] == '$' && b64_crypt(hash + 7, 53);
    /* $6$[rounds=N$]salt$hash (86), $y$params$salt$hash (43): the hash after the last '$'. */
    const char *last = strrchr(hash, '$');
    size_t tail = n - (size_t)(last + 1 - hash);
    if (last <= hash + 3 || last[-1] == '$')
        return false;
    return tail == (hash[1] == '6' ? 86u : 43u) && b64_crypt(last + 1, tail);
}

static int by_name(const void *a, const void *b)
{
    const user *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    return c != 0 ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* Reads the whole file, NUL-terminated. */
static char *slurp(const char *path, int *err)
{
    FILE *f = md_cfgfile_open(path, err); /* a FIFO would hold the open (cfgfile.h) */
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            if (cap > (64u << 20)) { /* 64 MiB of users is no htpasswd file */
                *err = EFBIG;
                goto fail;
            }
            char *nb = realloc(buf, cap * 2 + 4096);
            if (nb == NULL) {
                *err = ENOMEM;
                goto fail;
            }
            buf = nb;
            cap = cap * 2 + 4096;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        *err = EIO;
        goto fail;
    }
    fclose(f);
    buf[len] = '\0';
    if (strlen(buf) != len) {
        free(buf);
        *err = EILSEQ; /* a NUL byte */
        return NULL;
    }
    return buf;
fail:
    free(buf);
    fclose(f);
    return NULL;
}

static bool hash_matches(const char *pass, const char *hash);

/* The bytes of a hash that say its method and cost, not its salt: "$2b$12$", "$6$" or
 * "$6$rounds=N$", "$y$j9T$" (yescrypt's parameters), "$1$". */
static size_t setting_len(const char *hash)
{
    if (hash[0] != '$')
        return 0; /* DES: one cost */
    const char *id_end = strchr(hash + 1, '$');
    if (id_end == NULL)
        return 0;
    const char *p = id_end + 1;
    bool bcrypt = hash[1] == '2';
    bool params = bcrypt || hash[1] == 'y' || hash[1] == '7' ||
                  (strncmp(p, "rounds=", 7) == 0); /* sha-crypt with its own rounds */
    if (!params)
        return (size_t)(p - hash);
    const char *end = strchr(p, '$');
    return end != NULL ? (size_t)(end + 1 - hash) : (size_t)(p - hash);
}

/* Of the file's kinds of hash (method and cost), the one whose check takes longest, timed
 * once each at load (at most 8 kinds): an unknown user's refusal costs that one, so that its
 * time does not tell the names apart from a file of mixed methods or costs. */
static size_t costliest(const md_htpasswd *h)
{
    size_t best = 0, kinds = 0;
    uint64_t best_ns = 0;
    for (size_t i = 0; i < h->n && kinds < 8; i++) {
        size_t len = setting_len(h->users[i].hash);
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = setting_len(h->users[j].hash) == len &&
                   strncmp(h->users[j].hash, h->users[i].hash, len) == 0;
        if (seen)
            continue;
        kinds++;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        (void)hash_matches("", h->users[i].hash);
        clock_gettime(CLOCK_MONOTONIC, &b);
        uint64_t ns = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)b.tv_nsec -
                      (uint64_t)a.tv_nsec;
        if (ns > best_ns) {
            best_ns = ns;
            best = i;
        }
    }
    return best;
}

int md_htpasswd_load(const char *path, md_htpasswd **out, char *msg, size_t msg_len)
{
    int e = 0;
    char *text = slurp(path, &e);
    if (text == NULL) {
        md_say(msg, msg_len, "%s: cannot read: %s", path,
               e == EILSEQ ? "a NUL byte in it" : md_cfgfile_why(e));
        return -e;
    }
    md_htpasswd *h = calloc(1, sizeof *h);
    if (h == NULL) {
        free(text);
        md_say(msg, msg_len, "out of memory");
        return -ENOMEM;
    }
    h->text = text;
    pthread_mutex_init(&h->lock, NULL);
    size_t cap = 0;
    unsigned line = 0;
    for (char *p = text; *p != '\0';) {
        line++;
        char *eol = strchr(p, '\n');
        char *next = eol != NULL ? eol + 1 : p + strlen(p);
        if (eol != NULL) {
            *eol = '\0';
            if (eol > p && eol[-1] == '\r')
                eol[-1] = '\0';
        }
        char *s = p;
        p = next;
        if (s[0] == '\0' || s[0] == '#')
            continue;
        char *colon = strchr(s, ':');
        const char *why = NULL;
        if (colon == NULL || colon == s)
            why = "expected user:hash";
        else if ((size_t)(colon - s) >= MD_AUTH_USER_MAX)
            why = "a user name longer than 255 bytes";
        if (why == NULL) {
            *colon = '\0';
            char *hash = colon + 1;
            char *rest = strchr(hash, ':'); /* "user:hash:comment", as nginx reads it */
            if (rest != NULL)
                *rest = '\0';
            if (!known_method(hash))
                why = "not a bcrypt ($2y$, $2b$), yescrypt ($y$) or sha512-crypt ($6$) hash";
            else if (!well_formed(hash) || crypt_checksalt(hash) == CRYPT_SALT_INVALID ||
                     crypt_checksalt(hash) == CRYPT_SALT_METHOD_DISABLED)
                why = "a malformed hash";
            if (why == NULL) {
                if (h->n == cap) {
                    size_t nc = cap * 2 + 16;
                    user *nu = realloc(h->users, nc * sizeof *nu);
                    if (nu == NULL) {
                        md_htpasswd_free(h);
                        md_say(msg, msg_len, "out of memory");
                        return -ENOMEM;
                    }
                    h->users = nu;
                    cap = nc;
                }
                h->users[h->n++] = (user){s, hash, (size_t)(colon - s)};
            }
        }
        if (why != NULL) {
            md_say(msg, msg_len, "%s:%u: %s", path, line, why);
            md_htpasswd_free(h);
            return -EINVAL;
        }
    }
    if (h->n != 0)
        qsort(h->users, h->n, sizeof *h->users, by_name);
    for (size_t i = 1; i < h->n; i++)
        if (by_name(&h->users[i - 1], &h->users[i]) == 0) {
            md_say(msg, msg_len, "%s: user \"%s\" is listed twice", path, h->users[i].name);
            md_htpasswd_free(h);
            return -EINVAL;
        }
    h->dummy = costliest(h);
    *out = h;
    return 0;
}

void md_htpasswd_free(md_htpasswd *h)
{
    if (h == NULL)
        return;
    pthread_mutex_destroy(&h->lock);
    free(h->users);
    free(h->text);
    free(h);
}

size_t md_htpasswd_count(const md_htpasswd *h)
{
    return h->n;
}

/* crypt_rn of pass with the setting hash, compared with hash in constant time. */
static bool hash_matches(const char *pass, const char *hash)
{
    struct crypt_data *cd = calloc(1, sizeof *cd); /* 32 KiB: not on a task's stack */
    if (cd == NULL)
        return false;
    const char *got = crypt_rn(pass, hash, cd, (int)sizeof *cd);
    size_t n = strlen(hash);
    bool ok = got != NULL && got[0] != '*' && strlen(got) == n && CRYPTO_memcmp(got, hash, n) == 0;
    OPENSSL_cleanse(cd, sizeof *cd);
    free(cd);
    return ok;
}

static const user *find(const md_htpasswd *h, const char *name, size_t len)
{
    user key = {name, NULL, len};
    return h->n == 0 ? NULL : bsearch(&key, h->users, h->n, sizeof *h->users, by_name);
}

/* "Basic" (any case), spaces, then the token68 decoded into out (NUL-terminated); its length,
 * or -1. */
static int decode_basic(const char *v, size_t len, char *out, size_t cap)
{
    if (len < 6 || !md_ascii_eq_lower(v, 5, "basic") || v[5] != ' ')
        return -1;
    size_t at = 6;
    while (at < len && v[at] == ' ')
        at++;
    size_t n = len - at;
    while (n != 0 && (v[at + n - 1] == ' ' || v[at + n - 1] == '\t'))
        n--; /* a field's trailing whitespace is no part of its value (RFC 9110 5.5) */
    if (n == 0 || n % 4 != 0 || n / 4 * 3 + 1 > cap)
        return -1;
    int got = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)v + at, (int)n);
    if (got < 0)
        return -1;
    /* EVP_DecodeBlock decodes the padding as zero bytes: take them off. */
    if (v[at + n - 1] == '=')
        got--;
    if (v[at + n - 2] == '=')
        got--;
    out[got] = '\0';
    return got;
}

bool md_htpasswd_verify(md_htpasswd *h, const char *authorization, size_t len)
{
    char cred[256];
    int n = decode_basic(authorization, len, cred, sizeof cred);
    if (n < 0)
        return false;
    char *colon = memchr(cred, ':', (size_t)n);
    /* A NUL in the credentials would cut the password crypt sees. */
    if (colon == NULL || memchr(cred, '\0', (size_t)n) != NULL)
        return false;
    unsigned char md[32];
    unsigned mdlen = 0;
    if (EVP_Digest(authorization, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
        return false;
    unsigned slot = ((unsigned)md[0] | (unsigned)md[1] << 8) % MD_AUTH_CACHE;
    pthread_mutex_lock(&h->lock);
    bool hit = h->cache[slot].used && CRYPTO_memcmp(h->cache[slot].md, md, 32) == 0;
    pthread_mutex_unlock(&h->lock);
    if (hit) {
        OPENSSL_cleanse(cred, sizeof cred);
        return true;
    }
    const user *u = find(h, cred, (size_t)(colon - cred));
    /* An unknown user costs a hash too (the file's costliest kind, costliest()), so that the
     * time of a refusal does not say which names exist. */
    bool ok = false;
    if (u != NULL)
        ok = hash_matches(colon + 1, u->hash);
    else if (h->n != 0)
        (void)hash_matches(colon + 1, h->users[h->dummy].hash);
    OPENSSL_cleanse(cred, sizeof cred);
    if (ok) {
        pthread_mutex_lock(&h->lock);
        h->cache[slot].used = true;
        memcpy(h->cache[slot].md, md, 32);
        pthread_mutex_unlock(&h->lock);
    }
    return ok;
}

size_t md_auth_challenge(const char *realm, char *buf, size_t cap)
{
    int n =
        snprintf(buf, cap, "WWW-Authenticate: Basic realm=\"%s\", charset=\"UTF-8\"\r\n", realm);
    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

int md_auth_open(md_route_auth *a, char *msg, size_t msg_len)
{
    a->users = NULL;
    if (a->realm[0] == '\0')
        return 0;
    return md_htpasswd_load(a->file, &a->users, msg, msg_len);
}

void md_auth_close(md_route_auth *a)
{
    md_htpasswd_free(a->users);
    a->users = NULL;
}
