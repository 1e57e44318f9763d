/* Tests for daemon/http/auth_basic.c: the route keys, the htpasswd file (bcrypt, yescrypt,
 * sha512-crypt hashes made here with libxcrypt), its errors with their lines, and the
 * verification of Basic credentials with its cache. */
#include <criterion/criterion.h>
#include <crypt.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http/auth_basic.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/md-auth-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(auth_basic, .init = make_dir, .fini = remove_dir, .timeout = 30);

/* A hash of pass by method prefix ("$2b$", "$y$", "$6$"), at the lowest cost. */
static const char *hash_of(const char *prefix, const char *pass)
{
    static char out[4][CRYPT_OUTPUT_SIZE];
    static int next;
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    cr_assert_not_null(
        crypt_gensalt_rn(prefix, strcmp(prefix, "$2b$") == 0 ? 4 : 0, NULL, 0, salt, sizeof salt));
    struct crypt_data *cd = calloc(1, sizeof *cd);
    cr_assert_not_null(cd);
    const char *h = crypt_rn(pass, salt, cd, sizeof *cd);
    cr_assert(h != NULL && h[0] != '*', "crypt of %s", prefix);
    char *o = out[next++ % 4];
    snprintf(o, CRYPT_OUTPUT_SIZE, "%s", h);
    free(cd);
    return o;
}

static const char *write_file(const char *name, const char *text)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* "Basic base64(user:pass)". */
static const char *basic(const char *userpass)
{
    static char out[300];
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = (const unsigned char *)userpass;
    size_t n = strlen(userpass), w = 0;
    w += (size_t)sprintf(out, "Basic ");
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        out[w++] = b64[v >> 18 & 63];
        out[w++] = b64[v >> 12 & 63];
        out[w++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        out[w++] = i + 2 < n ? b64[v & 63] : '=';
    }
    out[w] = '\0';
    return out;
}

static bool verify(md_htpasswd *h, const char *authorization)
{
    return md_htpasswd_verify(h, authorization, strlen(authorization));
}

Test(auth_basic, keys_and_their_checks)
{
    md_route_auth a = {0};
    char msg[200];
    cr_assert_eq(md_auth_key(&a, "auth_basic", "Staff only", 3, msg, sizeof msg), 0);
    cr_assert_str_eq(a.realm, "Staff only");
    cr_assert_eq(md_auth_check(&a, msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "needs auth_basic_user_file"), "%s", msg);
    cr_assert_eq(md_auth_key(&a, "auth_basic_user_file", "rel/path", 4, msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "absolute"), "%s", msg);
    cr_assert_eq(md_auth_key(&a, "auth_basic_user_file", "/etc/x", 4, msg, sizeof msg), 0);
    cr_assert_eq(a.file_line, 4);
    cr_assert_eq(md_auth_check(&a, msg, sizeof msg), 0);
    cr_assert_eq(md_auth_key(&a, "auth_basic", "a \"quoted\" realm", 3, msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_auth_key(&a, "auth_basic", "back\\slash", 3, msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_auth_key(&a, "auth_basic", "", 3, msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_auth_key(&a, "other", "x", 3, msg, sizeof msg), -ENOENT);
    char buf[160];
    size_t n = md_auth_challenge("Staff only", buf, sizeof buf);
    cr_assert_str_eq(buf, "WWW-Authenticate: Basic realm=\"Staff only\", charset=\"UTF-8\"\r\n");
    cr_assert_eq(n, strlen(buf));
}

Test(auth_basic, the_three_methods_verify_and_wrong_ones_do_not)
{
    char text[1024];
    snprintf(text, sizeof text, "# users\n\nbob:%s\nyes:%s\r\nsix:%s:a comment\n",
             hash_of("$2b$", "hunter2"), hash_of("$y$", "pässword"), hash_of("$6$", "s3cret"));
    md_htpasswd *h = NULL;
    char msg[300];
    cr_assert_eq(md_htpasswd_load(write_file("users", text), &h, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_htpasswd_count(h), 3);
    cr_assert(verify(h, basic("bob:hunter2")));
    cr_assert(verify(h, basic("yes:pässword")), "UTF-8 passwords are bytes to crypt");
    cr_assert(verify(h, basic("six:s3cret")));
    cr_assert_not(verify(h, basic("bob:hunter3")));
    cr_assert_not(verify(h, basic("bob:")));
    cr_assert_not(verify(h, basic("nobody:hunter2")));
    cr_assert_not(verify(h, basic("six:s3cret:a comment")));
    cr_assert_not(verify(h, "Bearer abc"));
    cr_assert_not(verify(h, "Basic"));
    cr_assert_not(verify(h, "Basic !!!!"));
    cr_assert_not(verify(h, "Basic Ym9i"), "no colon");
    /* The scheme is case-insensitive (RFC 9110 11.1), and spaces may run on. */
    char v[300];
    snprintf(v, sizeof v, "bAsIc   %s", basic("bob:hunter2") + 6);
    cr_assert(verify(h, v));
    /* A field's trailing whitespace, spaces or tabs, is no part of it (RFC 9110 5.5). */
    snprintf(v, sizeof v, "%s \t", basic("bob:hunter2"));
    cr_assert(verify(h, v));
    md_htpasswd_free(h);
}

/* A verified value is cached for its generation's file; a new file starts without it. */
Test(auth_basic, verified_credentials_are_cached_and_failures_are_not)
{
    char text[512];
    snprintf(text, sizeof text, "bob:%s\n", hash_of("$2b$", "hunter2"));
    md_htpasswd *h = NULL;
    char msg[300];
    cr_assert_eq(md_htpasswd_load(write_file("users", text), &h, msg, sizeof msg), 0, "%s", msg);
    cr_assert(verify(h, basic("bob:hunter2")));
    cr_assert_not(verify(h, basic("bob:wrong")));
    /* A reload reads a new file: the old value fails there, and still passes in the old. */
    md_htpasswd *fresh = NULL;
    snprintf(text, sizeof text, "bob:%s\n", hash_of("$2b$", "other"));
    cr_assert_eq(md_htpasswd_load(write_file("users", text), &fresh, msg, sizeof msg), 0);
    cr_assert_not(verify(fresh, basic("bob:hunter2")), "a new generation starts empty");
    cr_assert(verify(h, basic("bob:hunter2")), "still cached in the old one");
    md_htpasswd_free(fresh);
    md_htpasswd_free(h);
}

Test(auth_basic, bad_files_name_their_line)
{
    char msg[300];
    md_htpasswd *h = NULL;
    struct {
        const char *text, *why;
    } bad[] = {
        {"bob:$2y$10$abc\n", ":1: a malformed hash"},
        {"\n# x\nbob\n", ":3: expected user:hash"},
        {":$6$abc$def\n", ":1: expected user:hash"},
        {"bob:$apr1$abc$def\n", ":1: not a bcrypt ($2y$, $2b$), yescrypt ($y$) or sha512-crypt"},
        {"bob:plain\n", ":1: not a bcrypt"},
        {"bob:{SHA}abc=\n", ":1: not a bcrypt"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *path = write_file("bad", bad[i].text);
        cr_assert_eq(md_htpasswd_load(path, &h, msg, sizeof msg), -EINVAL, "%s", bad[i].text);
        cr_assert(strncmp(msg, path, strlen(path)) == 0 && strstr(msg, bad[i].why) != NULL,
                  "%s: %s", bad[i].text, msg);
    }
    char text[512];
    const char *x = hash_of("$6$", "a");
    snprintf(text, sizeof text, "bob:%s\nann:%s\nbob:%s\n", x, x, x);
    cr_assert_eq(md_htpasswd_load(write_file("dup", text), &h, msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "user \"bob\" is listed twice"), "%s", msg);
    cr_assert_eq(md_htpasswd_load("/nonexistent/users", &h, msg, sizeof msg), -ENOENT);
    cr_assert(strstr(msg, "/nonexistent/users: cannot read"), "%s", msg);
    /* An empty file is valid: nobody passes. */
    cr_assert_eq(md_htpasswd_load(write_file("empty", ""), &h, msg, sizeof msg), 0);
    cr_assert_not(verify(h, basic("bob:a")));
    md_htpasswd_free(h);
}

Test(auth_basic, open_and_close_per_generation)
{
    char text[512];
    snprintf(text, sizeof text, "bob:%s\n", hash_of("$6$", "pw"));
    md_route_auth a = {0};
    char msg[300];
    cr_assert_eq(md_auth_open(&a, msg, sizeof msg), 0, "no realm: nothing to open");
    cr_assert_null(a.users);
    md_auth_key(&a, "auth_basic", "r", 1, msg, sizeof msg);
    md_auth_key(&a, "auth_basic_user_file", write_file("users", text), 2, msg, sizeof msg);
    cr_assert_eq(md_auth_open(&a, msg, sizeof msg), 0, "%s", msg);
    cr_assert(verify(a.users, basic("bob:pw")));
    md_auth_close(&a);
    cr_assert_null(a.users);
}
