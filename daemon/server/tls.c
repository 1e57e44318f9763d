/* tls.c: TLS termination for the [https] listener. OpenSSL does the protocol; this file owns
 * its keys, one SSL_CTX per generation of settings, and each connection's transport.
 *
 * The transport is core/tls_stream.c's (the proxy's upstream connections use the same): the
 * SSL object sits on a BIO over the stream's own read view (mp_tcp_read_poll's, consumed as
 * OpenSSL takes it: no second ciphertext buffer) and one ciphertext buffer, which this side
 * writes with md_conn_write(), within the send limits. An idle connection holds no buffer.
 *
 *   task (any worker)                       OpenSSL
 *   md_tls_read_poll: SSL_read_ex  -------> BIO read: the stream's view, consumed
 *     WANT_READ: output first (md_conn_write), then mp_tcp_read_poll, then SSL_read again
 *   md_tls_write:     SSL_write_ex -------> BIO write: ciphertext appended
 *                     md_conn_write(ciphertext) as one write, bounded
 *
 * The handshake is not a state of its own: SSL_read_ex runs it, on the worker that polls the
 * task, never on the loop's thread. Everything the task may wait on (the peer's next flight,
 * its reading of ours) goes through the same polls as plaintext, so a reader that stalls is
 * bounded by the send limits, and the handshake by handshake_timeout_ms from the accept and
 * handshake_min_rate after its grace (conn_http.c arms the deadline beside the core's).
 *
 * A response is one SSL_write_ex of everything the task has queued (head and body: records
 * of up to 16 KiB) and one write of the records.
 */
#include "server/tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/cfgfile.h"
#include "core/ini.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/text.h"
#include "core/tls_stream.h"
#include "http/response.h"
#include "http/routes.h"
#include "server/conn.h"

/* Mozilla's "intermediate" configuration (server side TLS, version 5.7). */
#define MOZ_CIPHERS                                                                                \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"     \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"       \
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305"
#define MOZ_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
#define MOZ_GROUPS "X25519:prime256v1:secp384r1"

/* File bytes encrypted per md_tls_sendfile() call. */
#define FILE_PIECE 65536

/* ---- keys ---- */

enum key_kind { K_PATH, K_LIST, K_U32, K_BOOL };

static const struct tls_key {
    const char *name;
    enum key_kind kind;
    size_t offset, size;
    uint32_t min, max;
} tls_keys[] = {
#define F(f) offsetof(md_tls_config, f), sizeof(((md_tls_config *)0)->f)
    {"certificate", K_PATH, F(cert[0]), 0, 0},
    {"certificate_key", K_PATH, F(key[0]), 0, 0},
    {"certificate2", K_PATH, F(cert[1]), 0, 0},
    {"certificate_key2", K_PATH, F(key[1]), 0, 0},
    {"ciphers", K_LIST, F(ciphers), 0, 0},
    {"ciphersuites", K_LIST, F(ciphersuites), 0, 0},
    {"groups", K_LIST, F(groups), 0, 0},
    {"session_cache", K_U32, F(session_cache), 0, 10000000},
    {"session_timeout_s", K_U32, F(session_timeout_s), 1, 86400},
    {"handshake_timeout_ms", K_U32, F(handshake_timeout_ms), 1, 3600000},
    {"handshake_min_rate", K_U32, F(handshake_min_rate), 0, 1073741824},
    {"handshake_rate_grace_ms", K_U32, F(handshake_rate_grace_ms), 0, 3600000},
    {"session_tickets", K_BOOL, F(session_tickets), 0, 0},
    {"strict_sni", K_BOOL, F(strict_sni), 0, 0},
    {"prefer_server_ciphers", K_BOOL, F(prefer_server_ciphers), 0, 0},
    {"ticket_key_rotation_s", K_U32, F(ticket_key_rotation_s), 60, 86400},
#undef F
};
#define NKEYS (sizeof tls_keys / sizeof tls_keys[0])
_Static_assert(NKEYS <= sizeof(((md_tls_config *)0)->line) / sizeof(uint32_t),
               "md_tls_config.line is too short");

void md_tls_config_init(md_tls_config *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->ciphers, sizeof t->ciphers, "%s", MOZ_CIPHERS);
    snprintf(t->ciphersuites, sizeof t->ciphersuites, "%s", MOZ_SUITES);
    snprintf(t->groups, sizeof t->groups, "%s", MOZ_GROUPS);
    t->session_cache = 20480;
    t->session_timeout_s = 86400; /* Mozilla's: a day */
    t->handshake_timeout_ms = 10000;
    t->handshake_min_rate = 128;
    t->handshake_rate_grace_ms = 3000;
    t->session_tickets = true;
    t->prefer_server_ciphers = true;
    t->ticket_key_rotation_s = 43200; /* two keys cover a day's tickets, and one more */
}

int md_tls_key(md_tls_config *t, const char *name, const char *value, uint32_t line, char *msg,
               size_t len)
{
    size_t i = 0;
    while (i < NKEYS && strcmp(tls_keys[i].name, name) != 0)
        i++;
    if (i == NKEYS)
        return -ENOENT;
    const struct tls_key *k = &tls_keys[i];
    if (line != MD_INI_LINE_SET && t->line[i] != 0 && t->line[i] != MD_INI_LINE_SET) {
        snprintf(msg, len, "set twice (first on line %u)", (unsigned)t->line[i]);
        return -EINVAL;
    }
    char *field = (char *)t + k->offset;
    uint64_t v;
    switch (k->kind) {
    case K_PATH:
    case K_LIST:
        if (strlen(value) >= k->size) {
            snprintf(msg, len, "longer than %zu bytes", k->size - 1);
            return -EINVAL;
        }
        if (k->kind == K_LIST && *value == '\0') {
            snprintf(msg, len, "expected a list, got nothing");
            return -EINVAL;
        }
        snprintf(field, k->size, "%s", value);
        break;
    case K_U32:
        if (md_parse_u64(value, k->min, k->max, &v) != 0) {
            snprintf(msg, len, "expected an integer in %u..%u, got \"%s\"", k->min, k->max, value);
            return -EINVAL;
        }
        *(uint32_t *)(void *)field = (uint32_t)v;
        break;
    case K_BOOL:
        if (md_conf_bool(value, (bool *)(void *)field, msg, len) != 0)
            return -EINVAL;
        break;
    }
    t->line[i] = line;
    return 0;
}

/* "file:line: [https] key: " for key i, as config.c's messages begin. */
static int key_prefix(const md_tls_config *t, const char *source, const char *name, char *buf,
                      size_t len)
{
    size_t i = 0;
    while (i < NKEYS && strcmp(tls_keys[i].name, name) != 0)
        i++;
    uint32_t line = i < NKEYS ? t->line[i] : 0;
    const char *sec = t->label[0] != '\0' ? t->label : "https";
    if (line == MD_INI_LINE_SET)
        return snprintf(buf, len, "--set: [%s] %s: ", sec, name);
    if (line == 0)
        return snprintf(buf, len, "%s: [%s] %s: ", source, sec, name);
    return snprintf(buf, len, "%s:%u: [%s] %s: ", source, (unsigned)line, sec, name);
}

static void key_error(md_error *err, const md_tls_config *t, const char *source, const char *name,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void key_error(md_error *err, const md_tls_config *t, const char *source, const char *name,
                      const char *fmt, ...)
{
    if (err == NULL)
        return;
    int n = key_prefix(t, source, name, err->msg, sizeof err->msg);
    if (n < 0 || (size_t)n >= sizeof err->msg)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
    va_end(ap);
}

/* The certificate and key pairs, loaded into ctx and checked: readable, matching, valid now,
 * and of different key types (OpenSSL keeps one per type: RSA and ECDSA side by side). */
static int load_pairs(SSL_CTX *ctx, const md_tls_config *t, const char *source, md_error *err)
{
    char why[300];
    int types[MD_TLS_PAIRS] = {0};
    for (int p = 0; p < MD_TLS_PAIRS; p++) {
        const char *ck = p == 0 ? "certificate" : "certificate2";
        const char *kk = p == 0 ? "certificate_key" : "certificate_key2";
        if (t->cert[p][0] == '\0' && t->key[p][0] == '\0' && p > 0)
            continue;
        if (t->cert[p][0] == '\0') {
            key_error(err, t, source, ck, "must be set with %s%s", p == 0 ? "[https] listen" : kk,
                      "");
            return -EINVAL;
        }
        if (t->key[p][0] == '\0') {
            key_error(err, t, source, kk, "must be set with %s", ck);
            return -EINVAL;
        }
        if (md_tls_file_readable(t->cert[p], why, sizeof why) != 0) {
            key_error(err, t, source, ck, "%s", why);
            return -EINVAL;
        }
        if (md_tls_file_readable(t->key[p], why, sizeof why) != 0) {
            key_error(err, t, source, kk, "%s", why);
            return -EINVAL;
        }
        ERR_clear_error();
        if (SSL_CTX_use_certificate_chain_file(ctx, t->cert[p]) != 1) {
            key_error(err, t, source, ck, "%s: not a PEM certificate chain: %s", t->cert[p],
                      md_tls_last_reason(why, sizeof why));
            return -EINVAL;
        }
        X509 *x = SSL_CTX_get0_certificate(ctx);
        EVP_PKEY *pub = x != NULL ? X509_get0_pubkey(x) : NULL;
        int type = pub != NULL ? EVP_PKEY_get_base_id(pub) : 0;
        if (p > 0 && type == types[0]) {
            key_error(err, t, source, ck,
                      "%s: a key of the same type as [https] certificate's (one RSA and one "
                      "ECDSA pair may be served side by side)",
                      t->cert[p]);
            return -EINVAL;
        }
        types[p] = type;
        if (X509_cmp_current_time(X509_get0_notBefore(x)) >= 0) {
            key_error(err, t, source, ck, "%s: not valid yet", t->cert[p]);
            return -EINVAL;
        }
        if (X509_cmp_current_time(X509_get0_notAfter(x)) <= 0) {
            key_error(err, t, source, ck, "%s: expired", t->cert[p]);
            return -EINVAL;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, t->key[p], SSL_FILETYPE_PEM) != 1) {
            const char *r = md_tls_last_reason(why, sizeof why);
            /* OpenSSL loads the key first and compares after: a mismatch reads as such. */
            key_error(err, t, source, kk, "%s: %s", t->key[p],
                      strstr(r, "mismatch") != NULL ? "does not match its certificate"
                                                    : "not a PEM private key");
            if (strstr(r, "mismatch") == NULL && err != NULL) {
                size_t n = strlen(err->msg);
                snprintf(err->msg + n, sizeof err->msg - n, " (%s)", r);
            }
            return -EINVAL;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            ERR_clear_error();
            key_error(err, t, source, kk, "%s: does not match %s", t->key[p], t->cert[p]);
            return -EINVAL;
        }
    }
    return 0;
}

/* ALPN: h2 first when [https] http2 is on (arg: the context's h2 flag), then http/1.1, then
 * http/1.0, which magpied serves as on any listener (RFC 7301: the server picks;
 * SSL_select_next_proto walks our list in order, so a client offering h2 and http/1.1 gets
 * h2). A client that offers ALPN with none of them gets no_application_protocol (RFC 7301
 * 3.2); one that offers none is served HTTP/1.1. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    static const unsigned char all[] = "\x02h2\x08http/1.1\x08http/1.0";
    const bool *h2 = arg;
    const unsigned char *ours = h2 != NULL && *h2 ? all : all + 3; /* h2 is first, 3 bytes */
    unsigned int ours_len = (unsigned)(sizeof all - 1) - (unsigned)(ours - all);
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, ours, ours_len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* ---- session ticket keys ----
 *
 * Held here, outside every SSL_CTX, so that every worker and every generation (a reload
 * builds new contexts) encrypts and decrypts tickets with the same keys: a reload does not end
 * resumption. A new key is made every rotation interval (lazily, by the first handshake that
 * finds the newest one too old); the older ones still decrypt (the ticket is then renewed)
 * for as long as a ticket may live (session_timeout_s), then go. Keys live in this process
 * only: processes sharing a port (reuseport) do not share them. */

enum { TICKET_KEYS = 8, TICKET_NAME = 16, TICKET_SECRET = 32 };

typedef struct ticket_key {
    unsigned char name[TICKET_NAME];
    unsigned char aes[TICKET_SECRET];  /* AES-256-CBC */
    unsigned char hmac[TICKET_SECRET]; /* HMAC-SHA256 */
    uint64_t made_ms;                  /* mp_now_ms(); 0: the slot is empty */
} ticket_key;

static struct {
    pthread_mutex_t lock;
    ticket_key k[TICKET_KEYS]; /* k[0] the newest */
    uint32_t rotation_ms, lifetime_ms;
    uint64_t rotations; /* keys made, for /metrics */
} tickets = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The settings of the newest generation; the keys stay. */
static void tickets_configure(uint32_t rotation_s, uint32_t lifetime_s)
{
    pthread_mutex_lock(&tickets.lock);
    tickets.rotation_ms = rotation_s * 1000u;
    tickets.lifetime_ms = lifetime_s * 1000u;
    pthread_mutex_unlock(&tickets.lock);
}

/* Under the lock: a new newest key when there is none or it is too old, and the keys no
 * ticket still alive can name dropped. 0 or -1 (no random bytes). */
static int tickets_rotate(uint64_t now)
{
    ticket_key *k = tickets.k;
    if (k[0].made_ms == 0 || now - k[0].made_ms >= tickets.rotation_ms) {
        ticket_key fresh;
        if (RAND_bytes(fresh.name, sizeof fresh.name) != 1 ||
            RAND_priv_bytes(fresh.aes, sizeof fresh.aes) != 1 ||
            RAND_priv_bytes(fresh.hmac, sizeof fresh.hmac) != 1)
            return -1;
        fresh.made_ms = now != 0 ? now : 1;
        memmove(&k[1], &k[0], sizeof k[0] * (TICKET_KEYS - 1));
        k[0] = fresh;
        tickets.rotations++;
    }
    /* A key retired at r (when the next was made) decrypts tickets until r + lifetime. */
    for (int i = 1; i < TICKET_KEYS; i++)
        if (k[i].made_ms != 0 && now - k[i - 1].made_ms >= tickets.lifetime_ms)
            memset(&k[i], 0, sizeof k[i]);
    return 0;
}

static int ticket_mac_init(EVP_MAC_CTX *hctx, unsigned char *key)
{
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key, TICKET_SECRET),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    return EVP_MAC_CTX_set_params(hctx, params) == 1 ? 0 : -1;
}

/* OpenSSL's ticket key callback (SSL_CTX_set_tlsext_ticket_key_evp_cb): enc 1 encrypts with
 * the newest key; 0 finds the ticket's key by name: 1 (the newest), 2 (an older one: renew the
 * ticket), 0 (none: a full handshake), -1 on an error. */
static int ticket_key_cb(SSL *ssl, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
                         EVP_MAC_CTX *hctx, int enc)
{
    (void)ssl;
    int rc = -1;
    ticket_key key;
    uint64_t now = mp_now_ms();
    pthread_mutex_lock(&tickets.lock);
    if (tickets_rotate(now) != 0) {
        pthread_mutex_unlock(&tickets.lock);
        return -1;
    }
    int found = -1;
    if (enc) {
        found = 0;
    } else {
        for (int i = 0; i < TICKET_KEYS && found < 0; i++)
            if (tickets.k[i].made_ms != 0 && memcmp(tickets.k[i].name, name, TICKET_NAME) == 0)
                found = i;
    }
    if (found >= 0)
        key = tickets.k[found];
    pthread_mutex_unlock(&tickets.lock);
    if (found < 0)
        return 0;
    if (enc) {
        memcpy(name, key.name, TICKET_NAME);
        if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) == 1 &&
            EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, key.aes, iv) == 1 &&
            ticket_mac_init(hctx, key.hmac) == 0)
            rc = 1;
    } else if (EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, key.aes, iv) == 1 &&
               ticket_mac_init(hctx, key.hmac) == 0) {
        rc = found == 0 ? 1 : 2;
    }
    OPENSSL_cleanse(&key, sizeof key);
    return rc;
}

/* ---- certificates' expiry ----
 *
 * The certificates the newest generation serves, for /metrics (days left) and the warning a
 * start or reload logs when one has less than EXPIRY_WARN_DAYS left. */

enum { EXPIRY_WARN_DAYS = 14, CERTS_MAX = MD_TLS_PAIRS + MD_SITES_MAX };

static struct {
    pthread_mutex_t lock;
    uint32_t n;
    struct {
        char label[64]; /* "https" or "site NAME" */
        char path[256]; /* cut: a label for the series */
        time_t not_after;
    } c[CERTS_MAX];
} certs = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Seconds since the epoch of an ASN1_TIME, or 0. */
static time_t asn1_time(const ASN1_TIME *t)
{
    struct tm tm;
    if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
        return 0;
    return timegm(&tm);
}

/* The leaf certificate of each of t's pairs (read again from its file: the first in it),
 * recorded from certs.c[n] on with label; the new count. Under certs.lock. */
static uint32_t record_certs(const char *label, const md_tls_config *t, uint32_t n)
{
    for (int p = 0; p < MD_TLS_PAIRS && n < CERTS_MAX; p++) {
        if (t->cert[p][0] == '\0')
            continue;
        int e;
        FILE *f = md_cfgfile_open(t->cert[p], &e);
        X509 *x = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
        if (f != NULL)
            fclose(f);
        ERR_clear_error();
        if (x == NULL)
            continue; /* read a moment ago: replaced since; the next reload says */
        snprintf(certs.c[n].label, sizeof certs.c[n].label, "%s", label);
        /* A label value of the exposition: no quote, backslash or line break. */
        char *d = certs.c[n].path;
        size_t cap = sizeof certs.c[n].path, k = 0;
        for (const char *c = t->cert[p]; *c != '\0' && k + 1 < cap; c++)
            d[k++] = *c == '"' || *c == '\\' || *c == '\n' ? '_' : *c;
        d[k] = '\0';
        certs.c[n].not_after = asn1_time(X509_get0_notAfter(x));
        X509_free(x);
        n++;
    }
    return n;
}

/* Under certs.lock: the recorded certificates from the first'th on. */
static void expiry_warn(uint32_t first)
{
    time_t now = time(NULL);
    for (uint32_t i = first; i < certs.n; i++) {
        double days = difftime(certs.c[i].not_after, now) / 86400.0;
        if (days < EXPIRY_WARN_DAYS)
            md_log(MD_LOG_WARN, "TLS: [%s] certificate %s expires in %.1f days", certs.c[i].label,
                   certs.c[i].path, days);
    }
}

struct md_tls_ctx {
    SSL_CTX *ssl; /* the listener's: no server name, or one no site has its own pair for */
    uint32_t handshake_timeout_ms, handshake_min_rate, handshake_rate_grace_ms;
    bool h2;               /* ALPN offers h2 (md_tls_ctx_offer_h2), read by alpn_select */
    _Atomic uint32_t refs; /* the generation's and each connection's */
    bool strict_sni;
    uint32_t nsites;
    SSL_CTX *site_ssl[MD_SITES_MAX]; /* a site's own pair; NULL: the listener's */
    md_site sites[MD_SITES_MAX];     /* their names, for SNI (sites.h) */
};

/* The DHE suites' group: RFC 7919's ffdhe2048, as Mozilla's profile says. OpenSSL's automatic
 * choice is RFC 3526's group 14, a prime shared by many servers that testssl.sh reports as a
 * "common prime" (LOGJAM). Should the named group be unavailable, the automatic one serves. */
static void set_dhe_group(SSL_CTX *ctx)
{
    EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_from_name(NULL, "DH", NULL);
    EVP_PKEY *pkey = NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *)"ffdhe2048", 0),
        OSSL_PARAM_construct_end(),
    };
    bool ok = pc != NULL && EVP_PKEY_paramgen_init(pc) == 1 &&
              EVP_PKEY_CTX_set_params(pc, params) == 1 && EVP_PKEY_paramgen(pc, &pkey) == 1 &&
              SSL_CTX_set0_tmp_dh_pkey(ctx, pkey) == 1; /* it owns pkey from here */
    if (!ok) {
        EVP_PKEY_free(pkey);
        ERR_clear_error();
        SSL_CTX_set_dh_auto(ctx, 1);
    }
    EVP_PKEY_CTX_free(pc);
}

/* RFC 6066 3: a server MUST NOT resume a session under another server name than the one it
 * was made for (nginx and HAProxy do; magpied did too: its ticket keys and its session ID
 * context are the same for every name). OpenSSL resumes a session, from a ticket or from the
 * cache, in TLS 1.2 and 1.3, only in the session ID context it was made in, and keeps a context
 * set on the connection when SNI moves it to a site's SSL_CTX. So each connection's context is
 * its server name, set here, before OpenSSL looks at any session: "n:" and the name in lower
 * case, or its SHA-256 when longer than that fits; "magpied" (the contexts' own) without SNI. */
static int on_client_hello(SSL *ssl, int *alert, void *arg)
{
    (void)arg; /* OpenSSL's callback shape */
    const unsigned char *p;
    size_t len;
    /* server_name (RFC 6066 3): a 2-byte list length, then entries of a type (0: host_name),
     * a 2-byte length and the name. A malformed one is OpenSSL's to refuse later. */
    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &len) != 1 || len < 5 ||
        p[2] != TLSEXT_NAMETYPE_host_name)
        return SSL_CLIENT_HELLO_SUCCESS;
    size_t n = (size_t)p[3] << 8 | p[4];
    if (n == 0 || n > len - 5)
        return SSL_CLIENT_HELLO_SUCCESS;
    unsigned char sid[SSL_MAX_SID_CTX_LENGTH];
    unsigned int sid_len;
    if (n <= sizeof sid - 2) {
        sid[0] = 'n';
        sid[1] = ':';
        for (size_t i = 0; i < n; i++)
            sid[2 + i] = md_ascii_lower(p[5 + i]);
        sid_len = (unsigned int)n + 2;
    } else {
        char lower[256];
        for (size_t i = 0; i < n && i < sizeof lower; i++)
            lower[i] = (char)md_ascii_lower(p[5 + i]);
        if (EVP_Digest(lower, n < sizeof lower ? n : sizeof lower, sid, &sid_len, EVP_sha256(),
                       NULL) != 1) {
            *alert = SSL_AD_INTERNAL_ERROR;
            return SSL_CLIENT_HELLO_ERROR;
        }
    }
    if (SSL_set_session_id_context(ssl, sid, sid_len) != 1) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_CLIENT_HELLO_ERROR;
    }
    return SSL_CLIENT_HELLO_SUCCESS;
}

static SSL_CTX *ctx_make(const md_tls_config *t, const char *source, md_error *err)
{
    char why[300];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        snprintf(err->msg, sizeof err->msg, "TLS: %s", md_tls_last_reason(why, sizeof why));
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    /* No renegotiation (a client's request gets no_renegotiation), no compression (CRIME).
     * Our order of suites by default: every suite of the profile is good (Mozilla leaves the
     * choice to the client), but a server without an order is what scanners such as
     * testssl.sh rate HIGH, and ours puts AES-128-GCM first, the cheapest on a CPU with AES
     * instructions; PRIORITIZE_CHACHA keeps ChaCha20 for a client that asks for it first
     * (one without them). */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                 (t->session_tickets ? 0 : SSL_OP_NO_TICKET));
    if (t->prefer_server_ciphers)
        SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
    else
        SSL_CTX_clear_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_PRIORITIZE_CHACHA);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_max_early_data(ctx, 0); /* no 0-RTT: replayable */
    set_dhe_group(ctx);
    if (SSL_CTX_set_cipher_list(ctx, t->ciphers) != 1) {
        key_error(err, t, source, "ciphers", "\"%s\": %s", t->ciphers,
                  md_tls_last_reason(why, sizeof why));
        goto out_free;
    }
    if (SSL_CTX_set_ciphersuites(ctx, t->ciphersuites) != 1) {
        key_error(err, t, source, "ciphersuites", "\"%s\": %s", t->ciphersuites,
                  md_tls_last_reason(why, sizeof why));
        goto out_free;
    }
    if (SSL_CTX_set1_groups_list(ctx, t->groups) != 1) {
        key_error(err, t, source, "groups", "\"%s\": %s", t->groups,
                  md_tls_last_reason(why, sizeof why));
        goto out_free;
    }
    if (load_pairs(ctx, t, source, err) != 0)
        goto out_free;
    static const unsigned char sid_ctx[] = "magpied";
    SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
    SSL_CTX_set_client_hello_cb(ctx, on_client_hello, NULL);
    if (t->session_cache == 0) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        SSL_CTX_sess_set_cache_size(ctx, t->session_cache);
    }
    SSL_CTX_set_timeout(ctx, t->session_timeout_s);
    if (t->session_tickets && SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_key_cb) != 1) {
        snprintf(err->msg, sizeof err->msg, "TLS: session ticket keys: %s",
                 md_tls_last_reason(why, sizeof why));
        goto out_free;
    }
    return ctx;
out_free:
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return NULL;
}

/* A site's pair as a configuration of its own: [https]'s protocols and suites, the site's
 * certificate and key, and the site's lines and name for messages. */
static void site_config(const md_tls_config *t, const md_site *site, md_tls_config *out)
{
    *out = *t;
    snprintf(out->cert[0], sizeof out->cert[0], "%s", site->cert);
    snprintf(out->key[0], sizeof out->key[0], "%s", site->key);
    out->cert[1][0] = out->key[1][0] = '\0';
    memset(out->line, 0, sizeof out->line);
    out->line[0] = site->cert_line;
    out->line[1] = site->key_line;
    snprintf(out->label, sizeof out->label, "site %s", site->name);
}

void md_tls_config_listener(const md_tls_config *t, const char *name, const char *cert,
                            uint32_t cert_line, const char *key, uint32_t key_line, int strict_sni,
                            md_tls_config *out)
{
    *out = *t;
    if (cert[0] != '\0' || key[0] != '\0') {
        snprintf(out->cert[0], sizeof out->cert[0], "%s", cert);
        snprintf(out->key[0], sizeof out->key[0], "%s", key);
        out->cert[1][0] = out->key[1][0] = '\0';
        out->line[0] = cert_line;
        out->line[1] = key_line;
        out->line[2] = out->line[3] = 0;
        out->own_pair = true;
    }
    if (strict_sni >= 0)
        out->strict_sni = strict_sni != 0;
    snprintf(out->label, sizeof out->label, "listener %s", name);
}

int md_tls_config_check(const md_tls_config *t, const md_route_table *sites, const char *source,
                        md_error *err)
{
    md_error scratch;
    SSL_CTX *ctx = ctx_make(t, source, err != NULL ? err : &scratch);
    if (ctx == NULL)
        return -EINVAL;
    SSL_CTX_free(ctx);
    for (uint32_t i = 1; sites != NULL && i < sites->nsites; i++) {
        if (sites->sites[i].cert[0] == '\0')
            continue;
        static md_tls_config one; /* large (paths); the configuration's thread only */
        site_config(t, &sites->sites[i], &one);
        if ((ctx = ctx_make(&one, source, err != NULL ? err : &scratch)) == NULL)
            return -EINVAL;
        SSL_CTX_free(ctx);
    }
    return 0;
}

/* Handshake failures by reason, for /metrics (the counters are below). */
enum {
    FAIL_UNRECOGNIZED_NAME, /* strict_sni: a name no site has, or none */
    FAIL_PROTOCOL_VERSION,  /* TLS 1.1 or older, or not a version at all */
    FAIL_NO_SHARED_CIPHER,
    FAIL_NO_APPLICATION_PROTOCOL, /* ALPN with none of ours */
    FAIL_HTTP_REQUEST,            /* plaintext HTTP on the TLS port */
    FAIL_CLOSED,                  /* the peer closed or reset half way */
    FAIL_OTHER,
    FAIL_REASONS,
};
static void hs_fail_reason(int which);

/* SNI: the site whose names the client's server name matches has its own pair, which replaces
 * the listener's; a name no site has gets the listener's, or with strict_sni an
 * unrecognized_name alert (RFC 6066 3), as a client that sends none does. */
static int on_servername(SSL *ssl, int *alert, void *arg)
{
    md_tls_ctx *x = arg;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    int site = name != NULL ? md_sites_pick_in(x->sites, x->nsites, name, strlen(name)) : -1;
    if (site < 0 && x->strict_sni) {
        hs_fail_reason(FAIL_UNRECOGNIZED_NAME);
        *alert = SSL_AD_UNRECOGNIZED_NAME;
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    if (site > 0 && x->site_ssl[site] != NULL && SSL_set_SSL_CTX(ssl, x->site_ssl[site]) == NULL) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    return SSL_TLSEXT_ERR_OK;
}

static void ctx_unref(md_tls_ctx *x)
{
    /* acq_rel: the last release sees every other holder's use before it frees (pairs with
     * the other holders' releases). */
    if (x == NULL || atomic_fetch_sub_explicit(&x->refs, 1, memory_order_acq_rel) != 1)
        return;
    SSL_CTX_free(x->ssl);
    for (uint32_t i = 0; i < MD_SITES_MAX; i++)
        SSL_CTX_free(x->site_ssl[i]);
    free(x);
}

int md_tls_ctx_new(const md_tls_config *t, const md_route_table *sites, const char *source,
                   md_tls_ctx **out, md_error *err)
{
    md_tls_ctx *x = calloc(1, sizeof *x);
    if (x == NULL) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -ENOMEM;
    }
    atomic_init(&x->refs, 1);
    if ((x->ssl = ctx_make(t, source, err)) == NULL) {
        free(x);
        return -EINVAL;
    }
    x->handshake_timeout_ms = t->handshake_timeout_ms;
    x->handshake_min_rate = t->handshake_min_rate;
    x->handshake_rate_grace_ms = t->handshake_rate_grace_ms;
    x->strict_sni = t->strict_sni;
    if (sites != NULL && sites->nsites > 1) {
        x->nsites = sites->nsites;
        memcpy(x->sites, sites->sites, sizeof x->sites);
        for (uint32_t i = 1; i < sites->nsites; i++) {
            if (sites->sites[i].cert[0] == '\0')
                continue;
            static md_tls_config one; /* large; the loop's thread only (start, reload) */
            site_config(t, &sites->sites[i], &one);
            if ((x->site_ssl[i] = ctx_make(&one, source, err)) == NULL) {
                ctx_unref(x);
                return -EINVAL;
            }
        }
    }
    tickets_configure(t->ticket_key_rotation_s, t->session_timeout_s);
    pthread_mutex_lock(&certs.lock);
    if (t->label[0] != '\0') { /* a listener's own: after [https]'s and its sites' */
        uint32_t from = certs.n;
        if (t->own_pair)
            certs.n = record_certs(t->label, t, certs.n);
        expiry_warn(from);
        goto recorded;
    }
    certs.n = record_certs("https", t, 0);
    for (uint32_t i = 1; i < x->nsites && i < MD_SITES_MAX; i++)
        if (x->site_ssl[i] != NULL) {
            static md_tls_config one; /* large; the loop's thread only, as above */
            site_config(t, &sites->sites[i], &one);
            certs.n = record_certs(one.label, &one, certs.n);
        }
    expiry_warn(0);
recorded:
    pthread_mutex_unlock(&certs.lock);
    /* ALPN is asked of the context the server name chose: each offers h2 by x's flag. */
    SSL_CTX_set_alpn_select_cb(x->ssl, alpn_select, &x->h2);
    for (uint32_t i = 1; i < x->nsites && i < MD_SITES_MAX; i++)
        if (x->site_ssl[i] != NULL)
            SSL_CTX_set_alpn_select_cb(x->site_ssl[i], alpn_select, &x->h2);
    if (x->nsites > 1 || x->strict_sni) {
        SSL_CTX_set_tlsext_servername_callback(x->ssl, on_servername);
        SSL_CTX_set_tlsext_servername_arg(x->ssl, x);
    }
    *out = x;
    return 0;
}

void md_tls_ctx_offer_h2(md_tls_ctx *x, bool on)
{
    x->h2 = on;
}

void md_tls_ctx_free(md_tls_ctx *x)
{
    ctx_unref(x); /* the connections hold references of their own */
}

/* ---- metrics ---- */

/* Process-wide, relaxed: independent monotonic counters for /metrics. */
static _Atomic uint64_t hs_ok_12, hs_ok_13, hs_failed, hs_resumed, hs_failed_by[FAIL_REASONS];
static const char *const fail_names[FAIL_REASONS] = {
    [FAIL_UNRECOGNIZED_NAME] = "unrecognized_name",
    [FAIL_PROTOCOL_VERSION] = "protocol_version",
    [FAIL_NO_SHARED_CIPHER] = "no_shared_cipher",
    [FAIL_NO_APPLICATION_PROTOCOL] = "no_application_protocol",
    [FAIL_HTTP_REQUEST] = "http_request",
    [FAIL_CLOSED] = "closed",
    [FAIL_OTHER] = "other",
};

static void count(_Atomic uint64_t *n)
{
    /* Relaxed: a counter publishes nothing else. */
    atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
}

static uint64_t read_count(_Atomic uint64_t *n)
{
    return atomic_load_explicit(n, memory_order_relaxed); /* relaxed: see count() */
}

static void hs_fail_reason(int which)
{
    count(&hs_failed_by[which]);
}

/* Why the handshake failed, from OpenSSL's last error (before the queue is cleared). The
 * strict_sni refusal was counted by its callback: -1. */
static int fail_reason_of(unsigned long e, int err)
{
    if (e == 0)
        return err == -EPROTO ? FAIL_CLOSED : FAIL_OTHER;
    switch (ERR_GET_REASON(e)) {
    case SSL_R_CALLBACK_FAILED:
    case SSL_R_CLIENTHELLO_TLSEXT:
        return -1;
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_UNKNOWN_PROTOCOL:
        return FAIL_PROTOCOL_VERSION;
    case SSL_R_NO_SHARED_CIPHER:
        return FAIL_NO_SHARED_CIPHER;
    case SSL_R_NO_APPLICATION_PROTOCOL:
        return FAIL_NO_APPLICATION_PROTOCOL;
    case SSL_R_HTTP_REQUEST:
        return FAIL_HTTP_REQUEST;
    default:
        return FAIL_OTHER;
    }
}

int md_tls_metrics_text(md_outbuf *out)
{
    int rc = md_metrics_family(out, 0, "magpied_tls_handshakes_total", "counter",
                               "TLS handshakes completed, by protocol version.",
                               "magpied_tls_handshakes_total{version=\"TLSv1.2\"} %llu\n"
                               "magpied_tls_handshakes_total{version=\"TLSv1.3\"} %llu\n",
                               (unsigned long long)read_count(&hs_ok_12),
                               (unsigned long long)read_count(&hs_ok_13));
    rc = md_metrics_family(out, rc, "magpied_tls_handshake_failures_total", "counter",
                           "TLS handshakes begun that failed (an alert, a bad record, a close).",
                           "magpied_tls_handshake_failures_total %llu\n",
                           (unsigned long long)read_count(&hs_failed));
    if (rc == 0)
        rc = md_metrics_put_head(out, "magpied_tls_handshake_failure_reasons_total", "counter",
                                 "TLS handshakes that failed, by reason.");
    for (int i = 0; rc == 0 && i < FAIL_REASONS; i++)
        rc =
            md_metrics_put(out, "magpied_tls_handshake_failure_reasons_total{reason=\"%s\"} %llu\n",
                           fail_names[i], (unsigned long long)read_count(&hs_failed_by[i]));
    pthread_mutex_lock(&tickets.lock);
    uint64_t rotations = tickets.rotations;
    pthread_mutex_unlock(&tickets.lock);
    rc = md_metrics_family(out, rc, "magpied_tls_ticket_keys_made_total", "counter",
                           "Session ticket keys made (one per rotation interval, shared by every "
                           "worker and reload).",
                           "magpied_tls_ticket_keys_made_total %llu\n",
                           (unsigned long long)rotations);
    pthread_mutex_lock(&certs.lock);
    if (rc == 0 && certs.n != 0) /* a family without samples is not one */
        rc = md_metrics_put_head(out, "magpied_tls_certificate_expiry_seconds", "gauge",
                                 "Seconds until each served certificate expires (negative: "
                                 "expired).");
    time_t now = time(NULL);
    for (uint32_t i = 0; rc == 0 && i < certs.n; i++)
        rc = md_metrics_put(
            out,
            "magpied_tls_certificate_expiry_seconds{section=\"%s\",certificate=\"%s\"} "
            "%.0f\n",
            certs.c[i].label, certs.c[i].path, difftime(certs.c[i].not_after, now));
    pthread_mutex_unlock(&certs.lock);
    return md_metrics_family(out, rc, "magpied_tls_resumptions_total", "counter",
                             "TLS handshakes that resumed a session (ticket or cache).",
                             "magpied_tls_resumptions_total %llu\n",
                             (unsigned long long)read_count(&hs_resumed));
}

/* ---- the transport ----
 *
 * core/tls_stream.c's, written within the send limits (md_conn_write); this file adds the
 * handshake's deadline and rate and its counters. */

struct md_tls_conn {
    md_tls_stream *s;  /* made at the first read; NULL before */
    md_tls_ctx *x;     /* a reference of its own (its SNI callback's argument) */
    uint64_t hs_end;   /* mp_now_ms() deadline of the handshake; UINT64_MAX once done */
    uint64_t hs_start; /* mp_now_ms() at accept */
    uint64_t hs_bytes; /* received during the handshake, for handshake_min_rate */
    size_t file_sent;  /* md_tls_sendfile: the file's bytes being written */
    bool failed;       /* the stream failed: counted once */
};

int md_tls_conn_new(md_tls_ctx *x, md_tls_conn **out)
{
    if (x == NULL)
        return -EINVAL;
    md_tls_conn *t = calloc(1, sizeof *t);
    if (t == NULL)
        return -ENOMEM;
    /* Relaxed: the taker already holds a reference (the generation's) to what it reads. */
    atomic_fetch_add_explicit(&x->refs, 1, memory_order_relaxed);
    t->x = x;
    t->hs_start = mp_now_ms();
    t->hs_end = t->hs_start + x->handshake_timeout_ms;
    *out = t;
    return 0;
}

static mp_poll conn_write(void *arg, mp_context *cx, const char *data, size_t len, int *err)
{
    return md_conn_write(arg, cx, data, len, err);
}

/* The stream, at the connection's first read (on its worker). Nagle goes off first: the
 * handshake's end and the session tickets leave in writes of their own, and the first response,
 * written right behind the tickets, would wait for the client's ACK of them (a client that
 * delays its ACKs held it 40 ms). */
static int stream_make(md_conn *c)
{
    md_tls_conn *t = md_conn_tls(c);
    md_conn_nodelay(c);
    SSL *ssl = SSL_new(t->x->ssl);
    if (ssl == NULL) {
        ERR_clear_error();
        return -ENOMEM;
    }
    SSL_set_accept_state(ssl);
    return md_tls_stream_new(ssl, &c->tcp, conn_write, c, &t->s);
}

/* A plaintext HTTP request on a TLS listener (any method: account() looks at its first byte)
 * is answered in plaintext before the close, as nginx and Go's server do: a client (or a
 * person with curl) told what went wrong, rather than a connection that ends in silence. A
 * 400 as the core's are (Date, Server; no body for HEAD). One send of a few hundred bytes into
 * a socket nothing was written to: it is not waited for. */
static void tell_http_client(md_conn *c, bool head)
{
#define PLAIN_TO_TLS_BODY "This port takes HTTPS: a plain HTTP request was sent to it.\n"
    static const char body[] = PLAIN_TO_TLS_BODY;
    _Static_assert(sizeof PLAIN_TO_TLS_BODY - 1 == 60, "Content-Length is the body's");
#undef PLAIN_TO_TLS_BODY
    char resp[512];
    size_t dlen;
    md_http_date_refresh(NULL);
    const char *date = md_http_date_value(&dlen);
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 400 Bad Request\r\nDate: %.*s\r\nServer: magpied\r\n"
                     "Content-Type: text/plain\r\nContent-Length: 60\r\nConnection: close\r\n"
                     "\r\n%s",
                     (int)dlen, date, head ? "" : body);
    int fd = mp_tcp_fileno(&c->tcp);
    if (fd >= 0 && n > 0 && (size_t)n < sizeof resp)
        (void)send(fd, resp, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* After each call: the handshake's end, counted once; a failure during it, counted once. */
static void account(md_conn *c, md_tls_conn *t, int err)
{
    if (t->hs_end != UINT64_MAX) {
        t->hs_bytes = md_tls_stream_bytes_in(t->s);
        if (SSL_is_init_finished(md_tls_stream_ssl(t->s))) {
            SSL *ssl = md_tls_stream_ssl(t->s);
            t->hs_end = UINT64_MAX;
            count(SSL_version(ssl) == TLS1_3_VERSION ? &hs_ok_13 : &hs_ok_12);
            if (SSL_session_reused(ssl))
                count(&hs_resumed);
            return;
        }
    }
    if (err == 0 || err == MP_EOF || err == -EINTR || t->failed)
        return;
    t->failed = true;
    if (t->hs_end != UINT64_MAX && t->hs_bytes != 0) {
        count(&hs_failed);
        int reason = fail_reason_of(md_tls_stream_error(t->s), err);
        /* OpenSSL names "GET ", "POST ", "HEAD " and "PUT " (and CONNECT, as a proxy's)
         * alone; any request line, or the empty line RFC 9112 2.2 lets lead one, starts
         * with a byte no TLS record or SSLv2 hello starts with. */
        size_t flen;
        const char *first = md_tls_stream_first_bytes(t->s, &flen);
        int b = flen != 0 ? (unsigned char)first[0] : -1;
        if (reason >= 0 && ((b >= 0x21 && b < 0x7f) || b == '\r' || b == '\n'))
            reason = FAIL_HTTP_REQUEST;
        if (reason >= 0)
            hs_fail_reason(reason);
        if (reason == FAIL_HTTP_REQUEST)
            tell_http_client(c, flen >= 5 && memcmp(first, "HEAD ", 5) == 0);
        if (md_log_enabled(MD_LOG_DEBUG)) {
            char why[200];
            md_log(MD_LOG_DEBUG, "TLS handshake failed: %s",
                   md_tls_stream_why(t->s, why, sizeof why));
        }
    }
}

mp_poll md_tls_read_poll(md_conn *c, mp_context *cx, const char **data, size_t *len, int *err)
{
    md_tls_conn *t = md_conn_tls(c);
    if (t->s == NULL) {
        int rc = stream_make(c);
        if (rc != 0) {
            *len = 0;
            *err = rc;
            return MP_READY;
        }
    }
    mp_poll r = md_tls_stream_read_poll(t->s, cx, data, len, err);
    account(c, t, r == MP_READY && *len == 0 ? *err : 0);
    return r;
}

void md_tls_consume(md_conn *c, size_t n)
{
    md_tls_stream_consume(md_conn_tls(c)->s, n);
}

mp_poll md_tls_write(md_conn *c, mp_context *cx, const char *data, size_t len, int *err)
{
    md_tls_conn *t = md_conn_tls(c);
    if (t->s == NULL) { /* nothing read yet: no handshake, nothing to write over */
        *err = -EPROTO;
        return MP_READY;
    }
    return md_tls_stream_write(t->s, cx, data, len, err);
}

mp_poll md_tls_sendfile(md_conn *c, mp_context *cx, md_outbuf *out, int in_fd, off_t *off,
                        size_t count, size_t *sent, int *err)
{
    md_tls_conn *t = md_conn_tls(c);
    *sent = 0;
    if (t->s == NULL) {
        *err = -EPROTO;
        return MP_READY;
    }
    if (!md_tls_stream_writing(t->s)) {
        /* Output made before (a flight, a ticket) goes first. */
        if (md_tls_stream_flush(t->s, cx, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0)
            return MP_READY;
        /* The head and the piece in one buffer: one SSL_write_ex, records filled. The buffer
         * is a block of the thread's batch cache (outbuf.h), not a malloc per piece. */
        size_t head = md_outbuf_pending(out);
        size_t piece = count < FILE_PIECE ? count : FILE_PIECE;
        md_outbuf buf;
        md_outbuf_init(&buf);
        char *w = NULL;
        if ((head + piece <= MD_OUTBUF_BATCH && md_outbuf_batch(&buf) != 0) ||
            (w = md_outbuf_reserve(&buf, head + piece != 0 ? head + piece : 1)) == NULL) {
            md_outbuf_free(&buf);
            (void)md_tls_stream_flush(t->s, cx, err); /* nothing queued: READY */
            *err = -ENOMEM;
            return MP_READY;
        }
        if (head != 0) /* an empty buffer may have no storage: no pointer to copy from */
            memcpy(w, md_outbuf_pending_data(out), head);
        ssize_t got = piece != 0 ? pread(in_fd, w + head, piece, *off) : 0;
        if (got < 0) {
            *err = -errno;
            md_outbuf_free(&buf);
            (void)md_tls_stream_flush(t->s, cx, err);
            *err = *err != 0 ? *err : -EIO;
            return MP_READY;
        }
        md_outbuf_consume(out, head);
        /* Nothing is queued now, so this takes it at once (it is encrypted before the
         * return: the buffer may go). */
        mp_poll r = md_tls_stream_encrypt(t->s, cx, w, head + (size_t)got, err);
        md_outbuf_free(&buf);
        if (r == MP_PENDING || *err != 0) {
            *err = *err != 0 ? *err : -EPROTO;
            return MP_READY;
        }
        t->file_sent = (size_t)got;
    }
    if (md_tls_stream_flush(t->s, cx, err) == MP_PENDING)
        return MP_PENDING;
    if (*err == 0) {
        *sent = t->file_sent;
        *off += (off_t)t->file_sent;
    }
    return MP_READY;
}

mp_poll md_tls_close_notify(md_conn *c, mp_context *cx)
{
    md_tls_conn *t = md_conn_tls(c);
    return t->s != NULL ? md_tls_stream_close_notify(t->s, cx) : MP_READY;
}

const char *md_tls_servername(const md_conn *c)
{
    const md_tls_conn *t = md_conn_tls(c);
    if (t == NULL || t->s == NULL)
        return NULL;
    return SSL_get_servername(md_tls_stream_ssl(t->s), TLSEXT_NAMETYPE_host_name);
}

uint64_t md_tls_handshake_deadline(const md_conn *c)
{
    const md_tls_conn *t = md_conn_tls(c);
    if (t == NULL || t->hs_end == UINT64_MAX || t->x->handshake_min_rate == 0)
        return t != NULL ? t->hs_end : UINT64_MAX;
    /* The first moment past the grace when bytes / elapsed < rate: elapsed > bytes / rate. */
    uint64_t slow = t->hs_start + t->hs_bytes * 1000 / t->x->handshake_min_rate + 1;
    uint64_t grace = t->hs_start + t->x->handshake_rate_grace_ms;
    if (slow < grace)
        slow = grace;
    return slow < t->hs_end ? slow : t->hs_end;
}

void md_tls_conn_free(md_conn *c)
{
    md_tls_conn *t = md_conn_tls(c);
    if (t == NULL)
        return;
    if (t->s != NULL)
        md_tls_stream_notify(t->s); /* best effort, and without waiting */
    md_tls_stream_free(t->s);
    ctx_unref(t->x);
    free(t);
    c->more->tls = NULL;
}

bool md_tls_alpn_h2(const struct md_conn *c)
{
    const md_tls_conn *t = md_conn_tls(c);
    const unsigned char *p = NULL;
    unsigned int n = 0;
    if (t == NULL || t->s == NULL)
        return false;
    SSL_get0_alpn_selected(md_tls_stream_ssl(t->s), &p, &n);
    return n == 2 && memcmp(p, "h2", 2) == 0;
}
