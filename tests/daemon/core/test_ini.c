/* Tests of daemon/core/ini.c, the INI engine and the section registry, with kinds of section
 * of the tests' own (the daemon's are tested through tests/daemon/server/test_config.c): the
 * dispatch of headers and keys to their kind, defaults, key tables and their types, repeating
 * sections, the end-of-section and end-of-file callbacks, --set, and that every error names
 * the file, the line and the key that are wrong.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/ini.h"

/* [plain]: a section that does not repeat, with a key of each type. */
typedef struct plain {
    uint32_t count;
    uint64_t big;
    bool flag;
    char word[16];
} plain;

static int parse_word(void *conf, const md_ini_key *k, const char *value, char *msg, size_t msg_len)
{
    (void)k;
    if (strlen(value) >= sizeof((plain *)conf)->word || strchr(value, ' ') != NULL) {
        snprintf(msg, msg_len, "expected one short word, got \"%s\"", value);
        return -EINVAL;
    }
    snprintf(((plain *)conf)->word, sizeof((plain *)conf)->word, "%s", value);
    return 0;
}

static void plain_init(void *conf)
{
    *(plain *)conf = (plain){.count = 7, .big = 1, .flag = false};
    snprintf(((plain *)conf)->word, sizeof((plain *)conf)->word, "none");
}

static const md_ini_key plain_keys[] = {
    {"count", MD_INI_U32, offsetof(plain, count), 1, 100, NULL},
    {"big", MD_INI_U64, offsetof(plain, big), 0, UINT64_C(1) << 40, NULL},
    {"flag", MD_INI_BOOL, offsetof(plain, flag), 0, 0, NULL},
    {"word", MD_INI_PARSE, 0, 0, 0, parse_word},
    {NULL, 0, 0, 0, 0, NULL},
};

static const md_ini_section plain_section = {
    .name = "plain", .keys = plain_keys, .init = plain_init};

/* [other]: a second one, whose key "depth" the messages about [plain] point to. */
typedef struct other {
    uint32_t depth;
} other;

static const md_ini_key other_keys[] = {
    {"depth", MD_INI_U32, offsetof(other, depth), 0, 10, NULL},
    {NULL, 0, 0, 0, 0, NULL},
};

static const md_ini_section other_section = {.name = "other", .keys = other_keys};

/* [item NAME] / [item = NAME]: a repeating section; each needs a size, and may name another
 * item (checked at the end of the file). */
enum { ITEMS_MAX = 4 };

typedef struct item {
    char name[32];
    bool exact;
    uint32_t line, size, refers_line;
    char refers[32];
} item;

typedef struct items {
    uint32_t n;
    item it[ITEMS_MAX];
    bool done; /* the end-of-file callback ran */
} items;

static void items_init(void *conf)
{
    memset(conf, 0, sizeof(items));
}

static int items_begin(void *conf, const char *arg, bool first, uint32_t line, void **inst,
                       char *msg, size_t msg_len)
{
    items *t = conf;
    if (first)
        t->n = 0;
    while (*arg == ' ' || *arg == '\t')
        arg++;
    bool exact = *arg == '=';
    if (exact)
        arg += 1 + strspn(arg + 1, " \t");
    if (*arg == '\0' || strlen(arg) >= sizeof t->it[0].name) {
        snprintf(msg, msg_len, "expected [item NAME]");
        return -EINVAL;
    }
    if (t->n == ITEMS_MAX) {
        snprintf(msg, msg_len, "more than %d items", ITEMS_MAX);
        return -EINVAL;
    }
    item *it = &t->it[t->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->name, sizeof it->name, "%s", arg);
    it->exact = exact;
    it->line = line;
    *inst = it;
    return 0;
}

static int items_key(void *inst, const char *key, const char *value, uint32_t line, char *msg,
                     size_t msg_len)
{
    item *it = inst;
    if (strcmp(key, "refers") == 0) {
        snprintf(it->refers, sizeof it->refers, "%s", value);
        it->refers_line = line;
        return 0;
    }
    if (strcmp(key, "tag") == 0)
        return 0; /* a list key: may repeat */
    if (strcmp(key, "size") == 0) {
        if (strcmp(value, "big") == 0) {
            it->size = 100;
            return 0;
        }
        snprintf(msg, msg_len, "expected big");
        return -EINVAL;
    }
    return -ENOENT;
}

static int items_end(void *inst, char *msg, size_t msg_len)
{
    if (((item *)inst)->size == 0) {
        snprintf(msg, msg_len, "size: required");
        return -EINVAL;
    }
    return 0;
}

static int items_done(void *conf, const md_ini_conf *all, uint32_t *line, char *msg, size_t msg_len)
{
    items *t = conf;
    t->done = true;
    cr_assert_not_null(md_ini_find(all, &plain_section), "the whole configuration is at hand");
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->it[i].refers[0] == '\0')
            continue;
        bool found = false;
        for (uint32_t j = 0; j < t->n; j++)
            found = found || strcmp(t->it[j].name, t->it[i].refers) == 0;
        if (!found) {
            snprintf(msg, msg_len, "[item %s] refers: no [item %s]", t->it[i].name,
                     t->it[i].refers);
            *line = t->it[i].refers_line;
            return -EINVAL;
        }
    }
    return 0;
}

static const md_ini_section items_section = {
    .name = "item",
    .repeats = true,
    .init = items_init,
    .begin = items_begin,
    .key = items_key,
    .repeatable = (const char *const[]){"tag", NULL},
    .end = items_end,
    .done = items_done,
};

/* The configuration the registry describes. */
typedef struct conf {
    plain p;
    other o;
    items items;
    uint32_t lines[MD_INI_SECTIONS_MAX][MD_INI_KEYS_MAX];
} conf;

static const md_ini_entry registry[] = {
    {&plain_section, offsetof(conf, p)},
    {&other_section, offsetof(conf, o)},
    {&items_section, offsetof(conf, items)},
};

static md_ini_conf view(conf *c)
{
    return (md_ini_conf){registry, sizeof registry / sizeof registry[0], c, c->lines};
}

static int parse_n(conf *c, const char *text, size_t len, md_error *err)
{
    memset(c, 0xa5, sizeof *c); /* init must set what it owns */
    memset(&c->o, 0, sizeof c->o);
    md_ini_conf v = view(c);
    md_ini_init(&v);
    FILE *f = fmemopen((void *)text, len, "r");
    cr_assert_not_null(f);
    int rc = md_ini_parse(&v, f, "t.ini", err);
    fclose(f);
    return rc;
}

static int parse(conf *c, const char *text, md_error *err)
{
    return parse_n(c, text, strlen(text), err);
}

static void expect_error(const char *text, const char *msg)
{
    conf c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, text, &err), -EINVAL, "accepted: %s", text);
    cr_assert_str_eq(err.msg, msg, "for: %s", text);
}

TestSuite(ini, .timeout = 5);

Test(ini, defaults_come_from_init_and_lines_start_at_zero)
{
    conf c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "", &err), 0, "%s", err.msg);
    cr_assert_eq(c.p.count, 7);
    cr_assert_str_eq(c.p.word, "none");
    cr_assert_eq(c.items.n, 0);
    cr_assert(c.items.done, "the end-of-file callback runs without any such section");
    md_ini_conf v = view(&c);
    cr_assert_eq(md_ini_key_line(&v, "plain", "count"), 0);
    cr_assert_eq(md_ini_find(&v, &other_section), &c.o);
    cr_assert_null(md_ini_find(&v, &(md_ini_section){.name = "plain"}));
}

Test(ini, keys_go_to_their_section_with_their_lines)
{
    conf c;
    md_error err = {{0}};
    const char *text = "; a comment\n"
                       "[plain]\n"
                       "  count = 42\n"
                       "big = 1099511627776\n"
                       "# another\n"
                       "flag = YES\n"
                       "word = hello ; inline\n"
                       "[other]\n"
                       "depth = 3\n";
    cr_assert_eq(parse(&c, text, &err), 0, "%s", err.msg);
    cr_assert_eq(c.p.count, 42);
    cr_assert_eq(c.p.big, UINT64_C(1) << 40);
    cr_assert(c.p.flag);
    cr_assert_str_eq(c.p.word, "hello");
    cr_assert_eq(c.o.depth, 3);
    md_ini_conf v = view(&c);
    cr_assert_eq(md_ini_key_line(&v, "plain", "count"), 3);
    cr_assert_eq(md_ini_key_line(&v, "plain", "word"), 7);
    cr_assert_eq(md_ini_key_line(&v, "other", "depth"), 9);
}

Test(ini, unknown_section_and_key)
{
    expect_error("[plain]\ncount = 1\n[plian]\n", "t.ini:3: unknown section [plian]");
    expect_error("[plain]\ncountt = 1\n", "t.ini:2: [plain] countt: unknown key");
    expect_error("count = 1\n", "t.ini:1: count: key outside any [section]");
    /* A repeating kind's name alone is no header, nor is a fixed one's with an argument. */
    expect_error("[item]\n", "t.ini:1: unknown section [item]");
    expect_error("[plain x]\n", "t.ini:1: unknown section [plain x]");
    /* A key of the section after an unknown header is not reported again. */
    expect_error("[nope]\nwhatever = 1\n", "t.ini:1: unknown section [nope]");
}

Test(ini, a_key_of_another_section_says_where_it_belongs)
{
    expect_error("[plain]\ndepth = 3\n", "t.ini:2: [plain] depth: unknown key (a key of [other])");
    expect_error("[item a]\nsize = big\ncount = 2\n",
                 "t.ini:3: [item a] count: unknown key (a key of [plain])");
}

Test(ini, a_bad_value_names_its_line_and_key)
{
    expect_error("[plain]\n\n\ncount = 0\n",
                 "t.ini:4: [plain] count: expected an integer in 1..100, got \"0\"");
    expect_error("[plain]\nflag = maybe\n", "t.ini:2: [plain] flag: expected on, yes, true or 1, "
                                            "or off, no, false or 0 (any case), got \"maybe\"");
    expect_error("[plain]\nword = two words\n",
                 "t.ini:2: [plain] word: expected one short word, got \"two words\"");
    expect_error("[item = a]\nsize = small\n", "t.ini:2: [item = a] size: expected big");
}

Test(ini, a_section_that_does_not_repeat_continues_when_written_again)
{
    conf c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "[plain]\ncount = 2\n[other]\n[plain]\nflag = on\n", &err), 0, "%s",
                 err.msg);
    cr_assert_eq(c.p.count, 2);
    cr_assert(c.p.flag);
    expect_error("[plain]\ncount = 2\n[other]\n[plain]\ncount = 3\n",
                 "t.ini:5: [plain] count: set twice (first on line 2)");
}

Test(ini, repeating_sections_are_each_their_own)
{
    conf c;
    md_error err = {{0}};
    const char *text = "[item a]\nsize = big\n[item = b]\nsize = big\nrefers = a\n";
    cr_assert_eq(parse(&c, text, &err), 0, "%s", err.msg);
    cr_assert_eq(c.items.n, 2);
    cr_assert_str_eq(c.items.it[0].name, "a");
    cr_assert_not(c.items.it[0].exact);
    cr_assert_str_eq(c.items.it[1].name, "b");
    cr_assert(c.items.it[1].exact);
    cr_assert_eq(c.items.it[1].line, 3);
    /* The kind's own refusal of a header names the header as written. */
    expect_error("[item a]\nsize = big\n[item a b c d e f g h i j k l m n o p q r s t u v]\n",
                 "t.ini:3: [item a b c d e f g h i j k l m n o p q r s t u v]: expected [item "
                 "NAME]");
    expect_error("[item a]\nsize = big\n[item  ]\n", "t.ini:3: [item  ]: expected [item NAME]");
}

/* A key the kind's key() takes comes once per section too, as a table's, unless the kind says
 * it repeats; each section of a repeating kind is its own. */
Test(ini, keys_of_a_kinds_own_come_once_unless_they_repeat)
{
    expect_error("[item a]\nsize = big\nrefers = a\nrefers = b\n",
                 "t.ini:4: [item a] refers: set twice (first on line 3)");
    conf c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c,
                       "[item a]\nsize = big\ntag = x\ntag = y\n[item b]\nsize = big\n"
                       "refers = a\n[item c]\nsize = big\nrefers = a\n",
                       &err),
                 0, "%s", err.msg);
    /* --set sets a key once: nothing to compare with. */
    cr_assert_eq(c.items.n, 3);
}

Test(ini, the_end_of_a_section_is_judged_at_its_header)
{
    expect_error("[item a]\nrefers = a\n[plain]\n", "t.ini:1: [item a] size: required");
    expect_error("[plain]\n[item  =  a ]\n", "t.ini:2: [item = a] size: required");
    /* At the end of the file too. */
    expect_error("[plain]\ncount = 1\n[item a]\n", "t.ini:3: [item a] size: required");
}

/* A bogus header right after a section that lacks something is the error on its own line,
 * not the section's (a configuration fuzzer found magpied's blamed on the line before). */
Test(ini, a_bogus_header_after_a_section_is_reported_on_its_own_line)
{
    expect_error("[item a]\n[]\n", "t.ini:2: unknown section []");
    expect_error("[item a]\n[sssssssss]\nsize = big\n", "t.ini:2: unknown section [sssssssss]");
    expect_error("[item a]\n[sss\n", "t.ini:2: syntax error: expected [section], key = value, or "
                                     "a ; or # comment");
    expect_error("[item a]\nsize\n", "t.ini:2: syntax error: expected [section], key = value, "
                                     "or a ; or # comment");
}

Test(ini, the_end_of_file_callback_blames_the_line_it_names)
{
    expect_error("[item a]\nsize = big\n\nrefers = zz\n", "t.ini:4: [item a] refers: no [item zz]");
}

Test(ini, the_first_error_in_reading_order_wins)
{
    expect_error("[plain]\ncount = 0\ncount 3\n",
                 "t.ini:2: [plain] count: expected an integer in 1..100, got \"0\"");
    expect_error("[plain]\ncount 3\ncount = 0\n", "t.ini:2: syntax error: expected [section], key "
                                                  "= value, or a ; or # comment");
}

Test(ini, nul_bytes_and_long_lines)
{
    conf c;
    md_error err = {{0}};
    static const char nul[] = "[plain]\ncount = 1\0\n";
    cr_assert_eq(parse_n(&c, nul, sizeof nul - 1, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "t.ini:2: NUL byte: the file is not text");
    char line[400];
    memset(line, 'a', sizeof line);
    memcpy(line, "[plain]\nword = ", 15);
    line[sizeof line - 1] = '\n';
    cr_assert_eq(parse_n(&c, line, sizeof line, &err), -EINVAL);
    cr_assert_str_eq(err.msg, "t.ini:2: line longer than 198 characters");
}

Test(ini, set_overrides_as_the_file_does)
{
    conf c;
    md_error err = {{0}};
    cr_assert_eq(parse(&c, "[plain]\ncount = 2\n", &err), 0, "%s", err.msg);
    md_ini_conf v = view(&c);
    cr_assert_eq(md_ini_set(&v, "plain.count=9", &err), 0, "%s", err.msg);
    cr_assert_eq(c.p.count, 9);
    cr_assert_eq(md_ini_key_line(&v, "plain", "count"), MD_INI_LINE_SET);
    cr_assert_eq(md_ini_set(&v, "plain.word=a=b", &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.p.word, "a=b");
    cr_assert_eq(md_ini_set(&v, "plain.count=0", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: [plain] count: expected an integer in 1..100, got \"0\"");
    cr_assert_eq(md_ini_set(&v, "plain.depth=1", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: [plain] depth: unknown key (a key of [other])");
    cr_assert_eq(md_ini_set(&v, "nope.count=1", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: unknown section [nope]");
    cr_assert_eq(md_ini_set(&v, "item a.size=big", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: [item a]: items are set in the file only");
    cr_assert_eq(md_ini_set(&v, "count=1", &err), -EINVAL);
    cr_assert_str_eq(err.msg, "--set: expected section.key=value, got \"count=1\"");
}

Test(ini, say_prefixes_file_and_line_or_set)
{
    md_error err;
    md_ini_say(&err, "f.ini", 12, "[plain] count: %d", 3);
    cr_assert_str_eq(err.msg, "f.ini:12: [plain] count: 3");
    md_ini_say(&err, NULL, 0, "x");
    cr_assert_str_eq(err.msg, "--set: x");
}
