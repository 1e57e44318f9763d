/* A route's HTTP Basic authentication (RFC 7617) against an htpasswd file, as nginx's
 * auth_basic and auth_basic_user_file.
 *
 * The file holds "user:hash" lines ('#' comments and blank lines are skipped), each hash a
 * crypt(3) string of bcrypt ($2y$, $2b$), yescrypt ($y$) or sha512-crypt ($6$), verified by
 * libxcrypt's crypt_rn() and compared in constant time. It is read once per generation of
 * settings (md_routes_open(): the start and each SIGHUP) and checked before (md_config_check:
 * magpied -t, a reload): a file that cannot be read, or a line that is not "user:hash" of a
 * known method, is an error naming the file and its line.
 *
 * Hashing is slow on purpose (bcrypt at cost 10: milliseconds), and runs on the connection's
 * task, on a worker, never on the loop's thread. So that a keep-alive client does not pay it
 * on every request, each generation's file keeps a bounded cache of the Authorization values
 * that verified (their SHA-256, MD_AUTH_CACHE slots, direct-mapped): a hit costs a hash and a
 * compare. Failures are not cached. A reload reads the file again and starts an empty cache.
 */
#ifndef MD_AUTH_BASIC_H
#define MD_AUTH_BASIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    MD_AUTH_REALM_MAX = 64, /* bytes of a realm, with its NUL */
    MD_AUTH_FILE_MAX = 256, /* bytes of the file's path, with its NUL */
    MD_AUTH_CACHE = 256,    /* verified credentials kept per file and generation */
    MD_AUTH_USER_MAX = 256, /* bytes of a user name in the file */
};

typedef struct md_htpasswd md_htpasswd;

/* A route's options (auth_basic, auth_basic_user_file), a plain value inside the route, and
 * the file as one generation loaded it. */
typedef struct md_route_auth {
    char realm[MD_AUTH_REALM_MAX]; /* "": no authentication */
    char file[MD_AUTH_FILE_MAX];
    uint32_t file_line; /* of auth_basic_user_file in the configuration */
    md_htpasswd *users; /* the generation's (md_auth_open); NULL in a configuration */
} md_route_auth;

/* auth_basic or auth_basic_user_file into a: 0, -ENOENT for another key, or -EINVAL with msg
 * (a realm with '"', '\' or a control byte; a path that is not absolute). */
int md_auth_key(md_route_auth *a, const char *key, const char *value, uint32_t line, char *msg,
                size_t msg_len);
/* After the route's keys: both or neither. 0 or -EINVAL with msg. */
int md_auth_check(const md_route_auth *a, char *msg, size_t msg_len);

/* Reads path: 0 with *out, or a negative errno with msg ("PATH:LINE: why" or "PATH: why"). */
int md_htpasswd_load(const char *path, md_htpasswd **out, char *msg, size_t msg_len);
void md_htpasswd_free(md_htpasswd *h);
/* Users in h (tests). */
size_t md_htpasswd_count(const md_htpasswd *h);

/* Whether the Authorization value (len bytes) is Basic credentials of a user of h whose
 * password matches. Thread-safe: the cache is locked. */
bool md_htpasswd_verify(md_htpasswd *h, const char *authorization, size_t len);

/* The WWW-Authenticate field of a 401 for realm, with its CRLF, into buf (cap bytes); its
 * length. */
size_t md_auth_challenge(const char *realm, char *buf, size_t cap);

/* Per-generation open and close of a route's file (routes.c's md_routes_open). */
int md_auth_open(md_route_auth *a, char *msg, size_t msg_len);
void md_auth_close(md_route_auth *a);

#endif
