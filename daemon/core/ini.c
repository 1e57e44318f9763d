/* The INI engine (ini.h): the reader libinih is fed through, the dispatch of each header and
 * key to the kind of section that owns it, and the one shape of every message.
 *
 * libinih splits "key = value" (trimming, inline " ;" comments) and calls on_key(); it passes
 * no line numbers (Debian's build may, but the header it ships says it does not), so
 * read_line() hands it one line at a time and counts. read_line() also does what inih would do
 * wrong or too late for us: it strips leading blanks (inih reads an indented line as the
 * previous value's continuation), takes each "[header]" itself (inih cuts a long name to 50
 * bytes, and an empty misspelt section never reaches the key handler), ends the section a
 * header ends, and refuses a line inih would refuse as soon as it reads it, so that the first
 * error in reading order is the one recorded (inih only says which line at the very end, after
 * the end-of-file checks have blamed earlier lines). It reads byte by byte rather than with
 * fgets(), so that a NUL byte is seen (strlen() would hide the rest of its line) and the size
 * is capped.
 */
#include "core/ini.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include <ini.h> /* libinih's: <> skips this folder, where core/ini.h is ours */

#define SYNTAX "syntax error: expected [section], key = value, or a ; or # comment"

void md_ini_say(md_error *err, const char *file, unsigned line, const char *fmt, ...)
{
    if (err == NULL)
        return;
    int n;
    if (file != NULL)
        n = snprintf(err->msg, sizeof(err->msg), "%s:%u: ", file, line);
    else
        n = snprintf(err->msg, sizeof(err->msg), "--set: ");
    if (n < 0 || (size_t)n >= sizeof(err->msg))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof(err->msg) - (size_t)n, fmt, ap);
    va_end(ap);
}

static void *part(const md_ini_conf *c, size_t i)
{
    return (char *)c->base + c->registry[i].offset;
}

void *md_ini_find(const md_ini_conf *c, const md_ini_section *s)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->registry[i].section == s)
            return part(c, i);
    return NULL;
}

void md_ini_init(const md_ini_conf *c)
{
    if (c->n > MD_INI_SECTIONS_MAX) {
        fprintf(stderr, "md_ini_init: %zu kinds of section, at most %d\n", c->n,
                MD_INI_SECTIONS_MAX);
        abort();
    }
    for (size_t i = 0; i < c->n; i++) {
        const md_ini_section *s = c->registry[i].section;
        size_t k = 0;
        while (s->keys != NULL && s->keys[k].name != NULL)
            k++;
        if (k > MD_INI_KEYS_MAX) {
            fprintf(stderr, "md_ini_init: [%s] has %zu keys, at most %d\n", s->name, k,
                    MD_INI_KEYS_MAX);
            abort();
        }
        if (s->init != NULL)
            s->init(part(c, i));
        memset(c->lines[i], 0, sizeof c->lines[i]);
    }
}

/* The entry a header's text names, or -1: "[name]" for a kind that does not repeat, "[name
 * ARG]" or "[name = ARG]" for one that does; *arg gets what follows the name. */
static int find_section(const md_ini_conf *c, const char *text, const char **arg)
{
    for (size_t i = 0; i < c->n; i++) {
        const md_ini_section *s = c->registry[i].section;
        size_t len = strlen(s->name);
        if (strncmp(text, s->name, len) != 0)
            continue;
        char next = text[len];
        if (!s->repeats && next == '\0') {
            *arg = NULL;
            return (int)i;
        }
        if (s->repeats && (next == ' ' || next == '\t' || next == '=')) {
            *arg = text + len;
            return (int)i;
        }
    }
    return -1;
}

static const md_ini_key *find_key(const md_ini_section *s, const char *name, size_t *index)
{
    for (size_t k = 0; s->keys != NULL && s->keys[k].name != NULL; k++) {
        if (strcmp(s->keys[k].name, name) == 0) {
            *index = k;
            return &s->keys[k];
        }
    }
    return NULL;
}

/* What follows ": unknown key" when other kinds have the key: the sections it belongs in,
 * " (a key of [echo] and [limits])". */
static void key_elsewhere(const md_ini_conf *c, const md_ini_section *s, const char *name,
                          char *buf, size_t len)
{
    const md_ini_section *hit[MD_INI_SECTIONS_MAX] = {0};
    size_t n = 0, k, used = 0;
    for (size_t i = 0; i < c->n && i < MD_INI_SECTIONS_MAX; i++) {
        const md_ini_section *o = c->registry[i].section;
        if (o != s && !o->repeats && find_key(o, name, &k) != NULL)
            hit[n++] = o;
    }
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s[%s]%s",
                         i == 0       ? " (a key of "
                         : i + 1 == n ? " and "
                                      : ", ",
                         hit[i]->name, i + 1 == n ? ")" : "");
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* Sets key k of the part at conf from value: 0, or -EINVAL with msg. */
static int apply(void *conf, const md_ini_key *k, const char *value, char *msg, size_t msg_len)
{
    char *field = (char *)conf + k->offset;
    uint64_t v;
    switch (k->type) {
    case MD_INI_U32:
    case MD_INI_U64:
        if (md_parse_u64(value, k->min, k->max, &v) != 0) {
            snprintf(msg, msg_len, "expected an integer in %llu..%llu, got \"%s\"",
                     (unsigned long long)k->min, (unsigned long long)k->max, value);
            return -EINVAL;
        }
        if (k->type == MD_INI_U32)
            *(uint32_t *)(void *)field = (uint32_t)v;
        else
            *(uint64_t *)(void *)field = v;
        return 0;
    case MD_INI_BOOL:
        return md_conf_bool(value, (bool *)(void *)field, msg, msg_len);
    case MD_INI_PARSE:
        return k->parse(conf, k, value, msg, msg_len);
    }
    fprintf(stderr, "md_ini: key %s has type %d\n", k->name, (int)k->type);
    abort();
}

/* One run over a file. */
struct run {
    const md_ini_conf *c;
    FILE *f;
    const char *name;
    unsigned line;     /* the line read_line() returned last */
    size_t bytes;      /* read so far */
    bool stop;         /* a NUL byte or too many bytes: read no further */
    unsigned err_line; /* line of the first error recorded; 0 = none */
    md_error *err;
    bool header;    /* a header came: a key is inside some section */
    int cur;        /* the entry of the section being read; -1: none, or its header failed */
    void *inst;     /* the section being read (a repeating kind's), or the kind's part */
    unsigned start; /* its header's line */
    char label[MD_ERROR_MAX / 2];    /* "[limits]", "[route = /p]": what messages name */
    bool begun[MD_INI_SECTIONS_MAX]; /* a repeating kind had a section */
    uint32_t seen[MD_INI_SECTIONS_MAX][MD_INI_KEYS_MAX]; /* line a key was set on, this file */
    /* The same for the keys a kind's key() takes: those of a kind that does not repeat (for
     * the file) and of the section being read. Past the last slot a key goes unrecorded: a
     * repeat is then not caught, nothing is refused wrongly. */
    struct other_key {
        int kind;
        void *inst;
        char name[32];
        uint32_t line;
    } other[128];
    unsigned nother;
};

static void run_error(struct run *r, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keeps the first error only: later ones are often its echo. */
static void run_error(struct run *r, unsigned line, const char *fmt, ...)
{
    if (r->err_line != 0)
        return;
    r->err_line = line;
    char buf[MD_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    md_ini_say(r->err, r->name, line, "%s", buf);
}

/* The section being read ends: what its kind requires of it, at its header's line. */
static void section_end(struct run *r)
{
    int i = r->cur;
    r->cur = -1;
    if (i < 0)
        return;
    const md_ini_section *s = r->c->registry[i].section;
    char msg[MD_INI_MSG_MAX];
    if (s->end != NULL && s->end(r->inst, msg, sizeof msg) != 0)
        run_error(r, r->start, "%s %s", r->label, msg);
}

/* "[name ARG]"'s label for messages, with ARG's blanks trimmed: "[route = /p]". */
static void set_label(struct run *r, const char *name, const char *arg)
{
    if (arg == NULL) {
        snprintf(r->label, sizeof r->label, "[%s]", name);
        return;
    }
    arg += strspn(arg, " \t");
    const char *eq = "";
    if (*arg == '=') {
        eq = "= ";
        arg += 1 + strspn(arg + 1, " \t");
    }
    size_t n = strlen(arg);
    while (n != 0 && (arg[n - 1] == ' ' || arg[n - 1] == '\t'))
        n--;
    snprintf(r->label, sizeof r->label, "[%s %s%.*s]", name, eq, (int)n, arg);
}

/* A header line: the section before it ends, the one it names starts. */
static void section_header(struct run *r, const char *text, size_t len)
{
    char section[256] = "";
    if (len < sizeof(section)) {
        memcpy(section, text, len);
        section[len] = '\0';
    }
    const char *arg = NULL;
    int i = len < sizeof(section) ? find_section(r->c, section, &arg) : -1;
    /* A header that names no section is the error on this line, reported before what the
     * section it ends lacks (which is then no surprise). */
    if (i < 0)
        run_error(r, r->line, "unknown section [%.*s]", (int)len, text);
    section_end(r);
    r->header = true;
    if (i < 0)
        return;
    const md_ini_section *s = r->c->registry[i].section;
    void *conf = part(r->c, (size_t)i);
    r->start = r->line;
    r->inst = conf;
    if (s->repeats) {
        memset(r->seen[i], 0, sizeof r->seen[i]); /* a key may come once per section */
        unsigned kept = 0; /* the kind's last section is done: its other keys go */
        for (unsigned j = 0; j < r->nother; j++)
            if (r->other[j].kind != i)
                r->other[kept++] = r->other[j];
        r->nother = kept;
        char msg[MD_INI_MSG_MAX];
        bool first = !r->begun[i];
        r->begun[i] = true;
        if (s->begin(conf, arg, first, r->line, &r->inst, msg, sizeof msg) != 0) {
            run_error(r, r->line, "[%s]: %s", section, msg);
            return;
        }
    }
    set_label(r, s->name, arg);
    r->cur = i;
}

/* Whether inih takes a line that is no header, comment or blank: it needs a '=' or ':'
 * before any inline comment (a ';' after a blank), as inih's find_chars_or_comment() looks. */
static bool key_line_ok(const char *s)
{
    bool was_space = false;
    for (; *s != '\0'; s++) {
        if (*s == '=' || *s == ':')
            return true;
        if (was_space && *s == ';')
            return false;
        was_space = *s == ' ' || *s == '\t' || *s == '\r' || *s == '\n' || *s == '\f' || *s == '\v';
    }
    return false;
}

static char *read_line(char *str, int num, void *stream)
{
    struct run *r = stream;
    if (r->stop)
        return NULL;
    int ch = getc(r->f);
    if (ch == EOF)
        return NULL;
    r->line++;

    /* The line, and its '\n' if it has one, must fit with the terminating NUL. */
    size_t n = 0, room = (size_t)num - 1;
    bool too_long = false;
    for (; ch != EOF; ch = getc(r->f)) {
        if (++r->bytes > MD_INI_FILE_MAX) {
            run_error(r, r->line, "file larger than %d bytes", MD_INI_FILE_MAX);
            r->stop = true;
            return NULL;
        }
        if (ch == '\0') {
            run_error(r, r->line, "NUL byte: the file is not text");
            r->stop = true;
            return NULL;
        }
        if (n < room && (ch == '\n' || n + 1 < room))
            str[n++] = (char)ch;
        else
            too_long = true;
        if (ch == '\n')
            break;
    }
    str[n] = '\0';
    if (too_long) {
        run_error(r, r->line, "line longer than %d characters", num - 2);
        str[0] = '\0';
        return str;
    }

    /* A UTF-8 byte order mark, which inih skips too, then the indentation. */
    if (r->line == 1 && memcmp(str, "\xEF\xBB\xBF", 3) == 0)
        memmove(str, str + 3, strlen(str + 3) + 1);
    size_t skip = strspn(str, " \t");
    if (skip != 0)
        memmove(str, str + skip, strlen(str + skip) + 1);

    if (str[0] == '[') {
        size_t end = strcspn(str + 1, "]\r\n");
        if (str[1 + end] == ']') {
            section_header(r, str + 1, end);
        } else {
            /* Refused here, on its line, before the section it would end is judged. */
            run_error(r, r->line, SYNTAX);
            section_end(r);
            r->header = true;
            str[0] = '\0';
        }
    } else if (str[0] != ';' && str[0] != '#' && str[strspn(str, " \t\r\n\f\v")] != '\0' &&
               !key_line_ok(str)) {
        run_error(r, r->line, SYNTAX);
        str[0] = '\0';
    }
    return str;
}

static bool repeatable(const md_ini_section *s, const char *name)
{
    for (size_t j = 0; s->repeatable != NULL && s->repeatable[j] != NULL; j++)
        if (strcmp(s->repeatable[j], name) == 0)
            return true;
    return false;
}

/* A key of the current section: the kind's table first, then its key(). r: the file's run
 * (NULL for --set, where each key comes once). */
static int section_key(const md_ini_conf *c, int i, void *inst, struct run *r, const char *name,
                       const char *value, uint32_t line, char *msg, size_t msg_len)
{
    const md_ini_section *s = c->registry[i].section;
    uint32_t(*seen)[MD_INI_KEYS_MAX] = r != NULL ? r->seen : NULL;
    size_t k;
    const md_ini_key *key = find_key(s, name, &k);
    if (key == NULL) {
        bool once = r != NULL && s->key != NULL && !repeatable(s, name);
        for (unsigned j = 0; once && j < r->nother; j++) {
            const struct other_key *o = &r->other[j];
            if (o->kind == i && o->inst == inst && strcmp(o->name, name) == 0) {
                snprintf(msg, msg_len, "set twice (first on line %u)", (unsigned)o->line);
                return -EINVAL;
            }
        }
        int rc = s->key != NULL ? s->key(inst, name, value, line, msg, msg_len) : -ENOENT;
        if (rc == -ENOENT) {
            char where[128];
            key_elsewhere(c, s, name, where, sizeof where);
            snprintf(msg, msg_len, "unknown key%s", where);
        }
        if (rc == 0 && once && r->nother < sizeof r->other / sizeof r->other[0] &&
            strlen(name) < sizeof r->other[0].name) {
            struct other_key *o = &r->other[r->nother++];
            o->kind = i;
            o->inst = inst;
            o->line = line;
            snprintf(o->name, sizeof o->name, "%s", name);
        }
        return rc == 0 ? 0 : -EINVAL;
    }
    if (seen != NULL && seen[i][k] != 0) {
        snprintf(msg, msg_len, "set twice (first on line %u)", (unsigned)seen[i][k]);
        return -EINVAL;
    }
    int rc = apply(inst, key, value, msg, msg_len);
    if (rc != 0)
        return rc;
    if (seen != NULL)
        seen[i][k] = line;
    c->lines[i][k] = line;
    return 0;
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
    struct run *r = user;
    (void)section; /* read_line() took the header: inih's copy may be cut */
    /* Errors are recorded here, in reading order; inih is always told the key went well, so
     * that what it returns says only what it refused itself. */
    if (!r->header) {
        run_error(r, r->line, "%s: key outside any [section]", name);
        return 1;
    }
    if (r->cur < 0)
        return 1; /* its header was refused, and said so */
    char msg[MD_INI_MSG_MAX];
    if (section_key(r->c, r->cur, r->inst, r, name, value, r->line, msg, sizeof msg) != 0)
        run_error(r, r->line, "%s %s: %s", r->label, name, msg);
    return 1;
}

int md_ini_parse(const md_ini_conf *c, FILE *f, const char *name, md_error *err)
{
    struct run run = {.c = c, .f = f, .name = name, .err = err, .cur = -1}, *r = &run;

    int rc = ini_parse_stream(read_line, r, on_key, r);
    section_end(r);
    for (size_t i = 0; i < c->n; i++) {
        const md_ini_section *s = c->registry[i].section;
        char msg[MD_INI_MSG_MAX];
        uint32_t line = 0;
        if (s->done != NULL && s->done(part(c, i), c, &line, msg, sizeof msg) != 0)
            run_error(r, line, "%s", msg);
    }
    if (ferror(f)) {
        int e = errno != 0 ? errno : EIO;
        md_ini_say(err, name, r->line, "read error: %s", strerror(e));
        return -e;
    }
    if (rc == -2) {
        md_ini_say(err, name, r->line, "out of memory");
        return -ENOMEM;
    }
    if (rc > 0 && (r->err_line == 0 || (unsigned)rc < r->err_line)) {
        /* read_line() refuses what inih refuses; this is in case their rules ever differ. */
        md_ini_say(err, name, (unsigned)rc, SYNTAX);
        return -EINVAL;
    }
    return r->err_line != 0 ? -EINVAL : 0;
}

int md_ini_set(const md_ini_conf *c, const char *assignment, md_error *err)
{
    const char *eq = strchr(assignment, '=');
    const char *dot = strchr(assignment, '.');
    if (eq == NULL || dot == NULL || dot > eq) {
        md_ini_say(err, NULL, 0, "expected section.key=value, got \"%s\"", assignment);
        return -EINVAL;
    }
    char section[64], name[64];
    size_t slen = (size_t)(dot - assignment), nlen = (size_t)(eq - dot - 1);
    if (slen == 0 || slen >= sizeof(section) || nlen == 0 || nlen >= sizeof(name)) {
        md_ini_say(err, NULL, 0, "expected section.key=value, got \"%s\"", assignment);
        return -EINVAL;
    }
    memcpy(section, assignment, slen);
    section[slen] = '\0';
    memcpy(name, dot + 1, nlen);
    name[nlen] = '\0';

    const char *arg;
    int i = find_section(c, section, &arg);
    if (i < 0) {
        md_ini_say(err, NULL, 0, "unknown section [%s]", section);
        return -EINVAL;
    }
    const md_ini_section *s = c->registry[i].section;
    if (s->repeats) {
        md_ini_say(err, NULL, 0, "[%s]: %ss are set in the file only", section, s->name);
        return -EINVAL;
    }
    char msg[MD_INI_MSG_MAX];
    if (section_key(c, i, part(c, (size_t)i), NULL, name, eq + 1, MD_INI_LINE_SET, msg,
                    sizeof msg) != 0) {
        md_ini_say(err, NULL, 0, "[%s] %s: %s", section, name, msg);
        return -EINVAL;
    }
    return 0;
}

uint32_t md_ini_key_line(const md_ini_conf *c, const char *section, const char *key)
{
    const char *arg;
    int i = find_section(c, section, &arg);
    size_t k;
    if (i < 0 || find_key(c->registry[i].section, key, &k) == NULL) {
        fprintf(stderr, "md_ini_key_line: no key [%s] %s\n", section, key);
        abort();
    }
    return c->lines[i][k];
}
