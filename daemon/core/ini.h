/* The INI engine and the section registry: magpied's configuration file read line by line,
 * each line handed to the section that owns it.
 *
 * A section kind (md_ini_section) is declared by the layer that uses its keys, the way an
 * nginx module declares its directives: its name, whether it repeats ("[route = /p]",
 * "[upstream app]": one section per argument), its keys (md_ini_key: name, type or parser,
 * range; the defaults are its init()), and callbacks at a repeating section's header, per
 * key the table does not hold, at the end of each section and at the end of the file. A
 * registry (md_ini_entry[]) says where in the caller's configuration struct each kind keeps
 * its part; the engine reaches that part through the offset alone, so core/ knows no
 * section's struct and includes nothing above it. The owner of a kind finds its part with
 * md_ini_find().
 *
 * The file goes through libinih, fed line by line by the engine's reader, which counts lines
 * (inih's handler gets no line number), strips indentation (inih would read an indented line
 * as the previous value's continuation), recognises section headers itself (inih cuts long
 * section names and says nothing of an empty section) and refuses a line inih would refuse
 * on that line (so the first error in reading order is the one reported). Every error names
 * where it is, in one shape:
 *
 *   config/magpied.conf:12: [limits] max_body_bytes: expected an integer in 0..1073741824, got
 *   "12x"
 *   --set: [limits] nope: unknown key
 *
 * and only the first error of a file is kept (later ones are often its echo). An error at the
 * end of a section (a route without a handler) names the section's header line; a bogus header
 * that ends it is reported first, on its own line.
 *
 * Single-threaded: a configuration is read by one thread (main at start, the signal thread at
 * a reload), into a struct nothing else uses yet.
 */
#ifndef MD_INI_H
#define MD_INI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

enum {
    MD_INI_SECTIONS_MAX = 16, /* kinds in one registry */
    MD_INI_KEYS_MAX = 32,     /* keys in one kind's table (md_ini_init() aborts past it) */
    /* Bytes a configuration file may have: the shipped file is a few KiB, and a cap makes a
     * stream that never ends (a device, a pipe) an error instead of a hang. */
    MD_INI_FILE_MAX = 1048576,
    MD_INI_MSG_MAX = MD_ERROR_MAX - 96, /* an owner's message, before the prefix */
};

/* The line of a key's value in md_ini_conf.lines: 0 for the default, or this for --set. */
#define MD_INI_LINE_SET UINT32_MAX

typedef enum md_ini_type {
    MD_INI_U32,   /* an unsigned integer in min..max (core/text.h's grammar) */
    MD_INI_U64,   /* the same, 64 bits wide */
    MD_INI_BOOL,  /* core/text.h's one boolean grammar, into a bool */
    MD_INI_PARSE, /* the key's own parser */
} md_ini_type;

struct md_ini_key;

/* An MD_INI_PARSE key's parser: value into the section's part (conf); 0, or -EINVAL with msg
 * (no section or key name in it: the engine prefixes "[section] key: "). */
typedef int (*md_ini_parse_fn)(void *conf, const struct md_ini_key *k, const char *value, char *msg,
                               size_t msg_len);

typedef struct md_ini_key {
    const char *name;
    md_ini_type type;
    size_t offset;         /* of the value in the section's part (not used by MD_INI_PARSE) */
    uint64_t min, max;     /* MD_INI_U32, MD_INI_U64 */
    md_ini_parse_fn parse; /* MD_INI_PARSE */
} md_ini_key;

struct md_ini_conf;

/* A kind of section. Every member but name is optional. "conf" is the kind's part of the
 * configuration (md_ini_entry.offset), "inst" one section of a repeating kind (what begin
 * returned), or the part itself for a kind that does not repeat. */
typedef struct md_ini_section {
    const char *name;
    /* "[name ARG]" and "[name = ARG]": each header a section of its own (begin()), whose keys
     * are set in the file only; otherwise "[name]" exactly, and writing it twice continues
     * it (a key set in both is still set twice). */
    bool repeats;
    const md_ini_key *keys; /* the key table, ending with a NULL name; NULL: none */
    /* The defaults, into the part (zeroed by nobody: init sets every field it owns). */
    void (*init)(void *conf);
    /* A repeating section's header: ARG as written after the name (blanks and a '=' included),
     * first when it is the file's first section of this kind (a file's routes replace the
     * built-in ones). 0 with *inst set, or -EINVAL with msg (the keys that follow are then
     * ignored). */
    int (*begin)(void *conf, const char *arg, bool first, uint32_t line, void **inst, char *msg,
                 size_t msg_len);
    /* A key the table does not hold: 0, -ENOENT when the kind does not know it either, or
     * -EINVAL with msg (no key name in it). Each such key may be given once per section, as
     * a table's (the engine says "set twice"), unless repeatable names it. */
    int (*key)(void *inst, const char *key, const char *value, uint32_t line, char *msg,
               size_t msg_len);
    const char *const *repeatable; /* key()'s keys that may repeat, NULL-terminated; NULL: none */
    /* After a section's last key (the next header, or the end of the file): what the section
     * requires. 0 or -EINVAL with msg, reported at the section's header line. */
    int (*end)(void *inst, char *msg, size_t msg_len);
    /* After the whole file, once for every kind in the registry whether or not the file has
     * such a section: what the part names elsewhere (a proxy route's [upstream]), and what is
     * prepared once the part is complete. 0, or -EINVAL with msg and *line set to the line to
     * blame. Not run for --set. */
    int (*done)(void *conf, const struct md_ini_conf *all, uint32_t *line, char *msg,
                size_t msg_len);
} md_ini_section;

/* One line of a registry: a kind, and where its part is in the configuration struct. */
typedef struct md_ini_entry {
    const md_ini_section *section;
    size_t offset;
} md_ini_entry;

/* A configuration as the engine sees it: the registry, the struct it describes, and the line
 * of each key's current value (lines[i][k]: entry i, key k of its table). A view: the struct
 * owns nothing of it, so a configuration stays a plain value that a reload copies. */
typedef struct md_ini_conf {
    const md_ini_entry *registry;
    size_t n; /* entries; at most MD_INI_SECTIONS_MAX */
    void *base;
    uint32_t (*lines)[MD_INI_KEYS_MAX];
} md_ini_conf;

/* The part of kind s, or NULL when the registry does not hold s. */
void *md_ini_find(const md_ini_conf *c, const md_ini_section *s);

/* Every kind's init(), and every line back to 0. */
void md_ini_init(const md_ini_conf *c);

/* Applies an INI stream on top of c; name is the file's name in messages. 0, -EINVAL with err
 * (also for a NUL byte, and past MD_INI_FILE_MAX bytes, where reading stops), -ENOMEM, or the
 * negative errno of a read error. */
int md_ini_parse(const md_ini_conf *c, FILE *f, const char *name, md_error *err);

/* One override, "section.key=value" (the value may be empty or contain '='), checked exactly
 * as the same key in the file. 0 or -EINVAL. */
int md_ini_set(const md_ini_conf *c, const char *assignment, md_error *err);

/* The line of the value of [section] key (0: the default; MD_INI_LINE_SET: --set), for
 * messages of checks across keys. The key must be in the registry's tables. */
uint32_t md_ini_key_line(const md_ini_conf *c, const char *section, const char *key);

/* err->msg = "file:line: " (file NULL: "--set: ") and the formatted text. */
void md_ini_say(md_error *err, const char *file, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
