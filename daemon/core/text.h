/* Small text rules every layer shares, each written once: ASCII case without the locale,
 * comma-separated lists, unsigned integers, booleans, bounded copies, names, and
 * configuration values that may go into a header field. Nothing here allocates.
 */
#ifndef MD_TEXT_H
#define MD_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ch in lower case if it is an ASCII capital; tolower() follows the locale. */
static inline unsigned char md_ascii_lower(unsigned char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (unsigned char)(ch + ('a' - 'A')) : ch;
}

/* RFC 9110 5.6.2's tchar: a byte of a token (a method, a field name, a coding). */
static inline bool md_is_tchar(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return true;
    return ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* s[0..n) equals lower (a lower-case literal of n bytes) ignoring ASCII case. A prefix test is
 * md_ascii_eq_lower(s, strlen(prefix), prefix) once n is known to be long enough. Not
 * strncasecmp(), which follows the locale. */
bool md_ascii_eq_lower(const char *s, size_t n, const char *lower);

/* a[0..an) equals b[0..bn) ignoring ASCII case: two names neither of which is known lower
 * case (a configured field name, a name from a Connection list). */
bool md_ascii_eq_ci(const char *a, size_t an, const char *b, size_t bn);

/* The elements of a field value that is a comma-separated list (RFC 9110 5.6.1: Connection,
 * If-Match, If-None-Match, Accept-Encoding, ...), in order, each without the OWS around it;
 * empty elements are skipped, as a recipient must. A comma inside a quoted-string (an
 * entity-tag may hold one; a backslash escapes its next byte) belongs to its element. What an
 * element means (a token, an entity-tag, a coding with parameters) is for the caller.
 *     md_list l = md_list_of(v, n); const char *e; size_t len;
 *     while (md_list_next(&l, &e, &len)) ... */
typedef struct md_list {
    const char *p, *end;
} md_list;

static inline md_list md_list_of(const char *s, size_t n)
{
    return (md_list){s, s + n};
}

/* The next element in [*elem, *elem + *len), non-empty; false at the end. */
bool md_list_next(md_list *l, const char **elem, size_t *len);

/* The next word of a configuration value that lists several (methods, addresses), separated
 * by commas, spaces or tabs: *s moves past it; false once no word is left.
 *     const char *w; size_t n; while (md_words_next(&value, &w, &n)) ... */
bool md_words_next(const char **s, const char **word, size_t *len);

/* Decimal digits only (no sign, space, suffix or "0x"), within [min, max]: 0, -EINVAL for
 * anything else, -ERANGE for a number out of range. */
int md_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Every boolean of the configuration reads the same words, in any ASCII case: 0 or -EINVAL. */
#define MD_BOOL_GRAMMAR "on, yes, true or 1, or off, no, false or 0 (any case)"
int md_parse_bool(const char *s, bool *out);
/* The same for a configuration key's value: on a word it does not know, msg (len bytes) says
 * what was expected and what came ("expected on, yes, ..., got \"maybe\""), and -EINVAL. */
int md_conf_bool(const char *value, bool *out, char *msg, size_t len);

/* Copies s into dst (cap bytes, cap > 0), cut to fit, NUL-terminated; its length. */
size_t md_text_set(char *dst, size_t cap, const char *s);

/* A configured value that is safe in a header field: visible ASCII, with spaces when spaces
 * is set; no control byte, so a CR or LF cannot end the field and start another. */
bool md_text_field_safe(const char *s, bool spaces);

/* A decoded path encoded again for a URI (RFC 3986 pchar and '/'), into out (cap bytes): a
 * space, '%', '?', '#' or a control byte escaped, so that it is a valid Location, never a
 * broken or injected field. The bytes written; it stops short (at a whole escape) when out is
 * full. */
size_t md_uri_path_encode(const char *path, size_t len, char *out, size_t cap);

/* A name of [A-Za-z0-9_-], 1 to max - 1 bytes (an upstream's, say). */
bool md_text_name_ok(const char *s, size_t n, size_t max);

#endif
