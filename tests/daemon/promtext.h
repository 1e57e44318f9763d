/* A checker for the Prometheus text exposition format (version 0.0.4), for the tests of
 * /metrics: what `promtool check metrics` checks, without installing a Prometheus server for
 * one program (Debian ships promtool only inside the prometheus package, 96 MB with the server,
 * its web assets and a service).
 *
 * prom_check(text, problems, len) parses strictly and lints, and returns the number of problems,
 * each described on a line "line N: name: what" in problems (truncated to len).
 *
 * The parse: every line ends in '\n'; "# HELP name text" (escapes \\ and \n only) and
 * "# TYPE name counter|gauge|histogram|summary|untyped", each at most once a family and before
 * its samples; other '#' lines are comments; a sample is name{label="value",...} value
 * [timestamp], with valid names, label values escaping only \\ \" \n, no label twice, a float
 * value (NaN, +Inf, -Inf too) and an integer timestamp; one group of lines a family; no series
 * twice. Families: a histogram's _bucket (with le), _sum and _count, a summary's quantile
 * samples, _sum and _count. Per series of a histogram: le parses, cumulative counts never
 * decrease with le, le="+Inf" is there and equals _count, _sum is there; a summary's quantiles
 * lie in [0, 1]; a counter is never negative.
 *
 * The lint, promtool's rules (client_golang's promlint): HELP present; counters end in _total,
 * other typed metrics do not; base units (seconds, bytes, ...; not milliseconds, bits, hours);
 * no abbreviated units (_ms, _s, _sec, _kb, ...) and no type (_counter, _gauge, ...) in names;
 * no ':' and no camelCase in names, no camelCase in label names; _bucket, _sum, _count, le and
 * quantile only where a histogram or summary uses them.
 */
#ifndef MAGPIE_TESTS_PROMTEXT_H
#define MAGPIE_TESTS_PROMTEXT_H

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PT_NAME_MAX = 200, PT_KEY_MAX = 1024, PT_FAMILIES_MAX = 512, PT_SAMPLES_MAX = 2048 };

enum pt_type { PT_UNTYPED, PT_COUNTER, PT_GAUGE, PT_HISTOGRAM, PT_SUMMARY };

typedef struct pt_family {
    char name[PT_NAME_MAX];
    enum pt_type type;
    bool typed, helped, sampled, closed;
    int line;
    bool label_camel, label_le, label_quantile;
} pt_family;

enum pt_part { PT_PLAIN, PT_BUCKET, PT_SUM, PT_COUNT };

typedef struct pt_sample {
    int family, line;
    enum pt_part part;
    char series[PT_NAME_MAX + PT_KEY_MAX]; /* name and every label: duplicates */
    char group[PT_KEY_MAX];                /* labels but le and quantile: a histogram's series */
    bool has_le;
    double le, value;
} pt_sample;

typedef struct pt_state {
    pt_family fam[PT_FAMILIES_MAX];
    int nfam, current;
    pt_sample *samples;
    int nsamples;
    char *out;
    size_t len, used;
    int problems;
} pt_state;

static inline void pt_problem(pt_state *s, int line, const char *name, const char *fmt, ...)
{
    s->problems++;
    if (s->used + 1 >= s->len)
        return;
    int n = line > 0 ? snprintf(s->out + s->used, s->len - s->used, "line %d: %s: ", line, name)
                     : snprintf(s->out + s->used, s->len - s->used, "%s: ", name);
    if (n > 0)
        s->used = s->used + (size_t)n < s->len ? s->used + (size_t)n : s->len - 1;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(s->out + s->used, s->len - s->used, fmt, ap);
    va_end(ap);
    if (n > 0)
        s->used = s->used + (size_t)n < s->len ? s->used + (size_t)n : s->len - 1;
    if (s->used + 1 < s->len) {
        s->out[s->used++] = '\n';
        s->out[s->used] = '\0';
    }
}

static inline bool pt_ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A metric name at *p: [a-zA-Z_:][a-zA-Z0-9_:]*; copied to name. */
static inline bool pt_metric_name(const char **p, char *name)
{
    const char *q = *p;
    if (!(isalpha((unsigned char)*q) || *q == '_' || *q == ':'))
        return false;
    size_t n = 0;
    while (isalnum((unsigned char)*q) || *q == '_' || *q == ':') {
        if (n + 1 >= PT_NAME_MAX)
            return false;
        name[n++] = *q++;
    }
    name[n] = '\0';
    *p = q;
    return true;
}

static inline bool pt_label_name(const char **p, char *name)
{
    const char *q = *p;
    if (!(isalpha((unsigned char)*q) || *q == '_'))
        return false;
    size_t n = 0;
    while (isalnum((unsigned char)*q) || *q == '_') {
        if (n + 1 >= PT_NAME_MAX)
            return false;
        name[n++] = *q++;
    }
    name[n] = '\0';
    *p = q;
    return true;
}

/* A float as Prometheus writes one: strtod's forms, plus NaN, +Inf, -Inf. */
static inline bool pt_float(const char *tok, double *v)
{
    if (strcmp(tok, "NaN") == 0) {
        *v = NAN;
        return true;
    }
    if (strcmp(tok, "+Inf") == 0 || strcmp(tok, "Inf") == 0) {
        *v = INFINITY;
        return true;
    }
    if (strcmp(tok, "-Inf") == 0) {
        *v = -INFINITY;
        return true;
    }
    if (*tok == '\0' || isspace((unsigned char)*tok) || strpbrk(tok, "xXnNiI") != NULL)
        return false; /* no hex floats, no other spellings of inf and nan */
    char *end;
    *v = strtod(tok, &end);
    return *end == '\0';
}

static inline bool pt_int(const char *tok)
{
    const char *q = tok;
    if (*q == '-' || *q == '+')
        q++;
    if (!isdigit((unsigned char)*q))
        return false;
    while (isdigit((unsigned char)*q))
        q++;
    return *q == '\0';
}

static inline int pt_family_find(pt_state *s, const char *name)
{
    for (int i = 0; i < s->nfam; i++)
        if (strcmp(s->fam[i].name, name) == 0)
            return i;
    return -1;
}

static inline int pt_family_get(pt_state *s, const char *name, int line)
{
    int i = pt_family_find(s, name);
    if (i >= 0 || s->nfam == PT_FAMILIES_MAX)
        return i;
    pt_family *f = &s->fam[s->nfam];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->line = line;
    return s->nfam++;
}

/* The family lines from here on belong to: the one before is done. */
static inline void pt_enter(pt_state *s, int i)
{
    if (s->current >= 0 && s->current != i)
        s->fam[s->current].closed = true;
    s->current = i;
}

/* The family a sample name belongs to, and which part of it. */
static inline int pt_resolve(pt_state *s, const char *name, enum pt_part *part, int line)
{
    static const struct {
        const char *suffix;
        enum pt_part part;
    } parts[] = {{"_bucket", PT_BUCKET}, {"_sum", PT_SUM}, {"_count", PT_COUNT}};
    *part = PT_PLAIN;
    int i = pt_family_find(s, name);
    if (i >= 0 && s->fam[i].typed)
        return i;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        if (!pt_ends_with(name, parts[k].suffix))
            continue;
        char base[PT_NAME_MAX];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - strlen(parts[k].suffix)), name);
        int b = pt_family_find(s, base);
        if (b >= 0 && (s->fam[b].type == PT_HISTOGRAM ||
                       (s->fam[b].type == PT_SUMMARY && parts[k].part != PT_BUCKET))) {
            *part = parts[k].part;
            return b;
        }
    }
    return pt_family_get(s, name, line);
}

typedef struct pt_label {
    char name[PT_NAME_MAX];
    char value[PT_KEY_MAX];
} pt_label;

static inline int pt_label_cmp(const void *a, const void *b)
{
    return strcmp(((const pt_label *)a)->name, ((const pt_label *)b)->name);
}

static inline void pt_sample_line(pt_state *s, const char *p, int line)
{
    char name[PT_NAME_MAX];
    if (!pt_metric_name(&p, name)) {
        pt_problem(s, line, "?", "not a metric name");
        return;
    }
    pt_label labels[32];
    int nl = 0;
    if (*p == '{') {
        p++;
        while (*p != '}') {
            if (nl == 32) {
                pt_problem(s, line, name, "more than 32 labels");
                return;
            }
            pt_label *l = &labels[nl];
            if (!pt_label_name(&p, l->name)) {
                pt_problem(s, line, name, "bad label name at \"%.20s\"", p);
                return;
            }
            if (strncmp(l->name, "__", 2) == 0)
                pt_problem(s, line, name, "label name %s is reserved", l->name);
            if (p[0] != '=' || p[1] != '"') {
                pt_problem(s, line, name, "label %s: expected =\"", l->name);
                return;
            }
            p += 2;
            size_t n = 0;
            while (*p != '"') {
                char c = *p++;
                if (c == '\0' || c == '\n') {
                    pt_problem(s, line, name, "label %s: unterminated value", l->name);
                    return;
                }
                if (c == '\\') {
                    c = *p++;
                    if (c == 'n')
                        c = '\n';
                    else if (c != '\\' && c != '"') {
                        pt_problem(s, line, name, "label %s: bad escape \\%c", l->name, c);
                        return;
                    }
                }
                if (n + 1 < sizeof l->value)
                    l->value[n++] = c;
            }
            l->value[n] = '\0';
            p++;
            for (int j = 0; j < nl; j++)
                if (strcmp(labels[j].name, l->name) == 0)
                    pt_problem(s, line, name, "label %s twice", l->name);
            nl++;
            if (*p == ',')
                p++;
            else if (*p != '}') {
                pt_problem(s, line, name, "expected , or } after label %s", l->name);
                return;
            }
        }
        p++;
    }
    if (*p != ' ' && *p != '\t') {
        pt_problem(s, line, name, "expected a blank before the value");
        return;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    char tok[64], ts[64];
    int fields = sscanf(p, "%63s %63s", tok, ts);
    char rest[2];
    if (fields < 1 || sscanf(p, "%*s %*s %1s", rest) == 1) {
        pt_problem(s, line, name, "expected a value and at most a timestamp");
        return;
    }
    double value;
    if (!pt_float(tok, &value)) {
        pt_problem(s, line, name, "bad value \"%s\"", tok);
        return;
    }
    if (fields == 2 && !pt_int(ts))
        pt_problem(s, line, name, "bad timestamp \"%s\"", ts);

    enum pt_part part;
    int fi = pt_resolve(s, name, &part, line);
    if (fi < 0) {
        pt_problem(s, line, name, "too many families");
        return;
    }
    pt_family *f = &s->fam[fi];
    if (f->closed)
        pt_problem(s, line, name, "the lines of %s are not one group", f->name);
    pt_enter(s, fi);
    f->sampled = true;

    qsort(labels, (size_t)nl, sizeof labels[0], pt_label_cmp);
    if (s->nsamples == PT_SAMPLES_MAX) {
        pt_problem(s, line, name, "too many samples");
        return;
    }
    pt_sample *x = &s->samples[s->nsamples++];
    memset(x, 0, sizeof *x);
    x->family = fi;
    x->line = line;
    x->part = part;
    x->value = value;
    size_t sn = (size_t)snprintf(x->series, sizeof x->series, "%s", name);
    size_t gn = 0;
    for (int j = 0; j < nl; j++) {
        const pt_label *l = &labels[j];
        if (sn < sizeof x->series)
            sn += (size_t)snprintf(x->series + sn, sizeof x->series - sn, "\037%s=%s", l->name,
                                   l->value);
        for (const char *c = l->name; c[0] && c[1]; c++)
            if (islower((unsigned char)c[0]) && isupper((unsigned char)c[1]))
                f->label_camel = true;
        if (strcmp(l->name, "le") == 0 && f->type != PT_HISTOGRAM)
            f->label_le = true;
        if (strcmp(l->name, "quantile") == 0 && f->type != PT_SUMMARY)
            f->label_quantile = true;
        if (f->type == PT_HISTOGRAM && part == PT_BUCKET && strcmp(l->name, "le") == 0) {
            x->has_le = true;
            if (!pt_float(l->value, &x->le) || isnan(x->le))
                pt_problem(s, line, name, "bad le \"%s\"", l->value);
            continue;
        }
        if (f->type == PT_SUMMARY && part == PT_PLAIN && strcmp(l->name, "quantile") == 0) {
            double q;
            if (!pt_float(l->value, &q) || !(q >= 0 && q <= 1))
                pt_problem(s, line, name, "bad quantile \"%s\"", l->value);
            continue;
        }
        if (gn < sizeof x->group)
            gn += (size_t)snprintf(x->group + gn, sizeof x->group - gn, "\037%s=%s", l->name,
                                   l->value);
    }
    if (f->type == PT_HISTOGRAM && part == PT_BUCKET && !x->has_le)
        pt_problem(s, line, name, "a bucket without le");
    if (f->type == PT_HISTOGRAM && part == PT_PLAIN)
        pt_problem(s, line, name, "a histogram sample that is no _bucket, _sum or _count");
    if (f->type == PT_COUNTER && value < 0)
        pt_problem(s, line, name, "a negative counter");
    for (int j = 0; j < s->nsamples - 1; j++)
        if (strcmp(s->samples[j].series, x->series) == 0)
            pt_problem(s, line, name, "the same series as line %d", s->samples[j].line);
}

static inline void pt_comment_line(pt_state *s, const char *p, int line)
{
    bool help = strncmp(p, "# HELP ", 7) == 0, type = strncmp(p, "# TYPE ", 7) == 0;
    if (!help && !type)
        return; /* a comment */
    p += 7;
    char name[PT_NAME_MAX];
    if (!pt_metric_name(&p, name)) {
        pt_problem(s, line, "?", "%s without a metric name", help ? "HELP" : "TYPE");
        return;
    }
    int fi = pt_family_get(s, name, line);
    if (fi < 0) {
        pt_problem(s, line, name, "too many families");
        return;
    }
    pt_family *f = &s->fam[fi];
    if (f->closed)
        pt_problem(s, line, name, "the lines of %s are not one group", name);
    pt_enter(s, fi);
    if (help) {
        if (*p != ' ' && *p != '\0')
            pt_problem(s, line, name, "HELP: expected a blank after the name");
        for (const char *c = p; *c; c++)
            if (*c == '\\' && (c[1] == '\\' || c[1] == 'n'))
                c++;
            else if (*c == '\\')
                pt_problem(s, line, name, "HELP: bad escape \\%c", c[1]);
        if (f->helped)
            pt_problem(s, line, name, "a second HELP");
        if (f->sampled)
            pt_problem(s, line, name, "HELP after the samples");
        f->helped = true;
        return;
    }
    if (*p != ' ') {
        pt_problem(s, line, name, "TYPE: expected a blank after the name");
        return;
    }
    p++;
    static const char *const type_names[] = {"untyped", "counter", "gauge", "histogram", "summary"};
    int t = -1;
    for (int k = 0; k < 5; k++)
        if (strcmp(p, type_names[k]) == 0)
            t = k;
    if (t < 0) {
        pt_problem(s, line, name, "TYPE: unknown type \"%s\"", p);
        return;
    }
    if (f->typed)
        pt_problem(s, line, name, "a second TYPE");
    if (f->sampled)
        pt_problem(s, line, name, "TYPE after the samples");
    f->typed = true;
    f->type = (enum pt_type)t;
}

static inline int pt_cmp_le(const void *a, const void *b)
{
    double x = (*(const pt_sample *const *)a)->le, y = (*(const pt_sample *const *)b)->le;
    return x < y ? -1 : x > y;
}

/* Per series of a histogram or summary: the parts that must be there, and the buckets. */
static inline void pt_check_groups(pt_state *s)
{
    pt_sample **buckets = malloc(sizeof *buckets * (size_t)(s->nsamples + 1));
    if (buckets == NULL)
        return;
    for (int i = 0; i < s->nsamples; i++) {
        pt_sample *a = &s->samples[i];
        pt_family *f = &s->fam[a->family];
        if (f->type != PT_HISTOGRAM && f->type != PT_SUMMARY)
            continue;
        bool first = true;
        for (int j = 0; j < i && first; j++)
            if (s->samples[j].family == a->family && strcmp(s->samples[j].group, a->group) == 0)
                first = false;
        if (!first)
            continue;
        int nb = 0;
        const pt_sample *sum = NULL, *count = NULL;
        for (int j = i; j < s->nsamples; j++) {
            pt_sample *b = &s->samples[j];
            if (b->family != a->family || strcmp(b->group, a->group) != 0)
                continue;
            if (b->part == PT_BUCKET && b->has_le)
                buckets[nb++] = b;
            else if (b->part == PT_SUM)
                sum = b;
            else if (b->part == PT_COUNT)
                count = b;
        }
        if (sum == NULL)
            pt_problem(s, a->line, f->name, "no _sum for this series");
        if (count == NULL)
            pt_problem(s, a->line, f->name, "no _count for this series");
        if (f->type != PT_HISTOGRAM)
            continue;
        qsort(buckets, (size_t)nb, sizeof buckets[0], pt_cmp_le);
        for (int k = 1; k < nb; k++)
            if (buckets[k]->value < buckets[k - 1]->value)
                pt_problem(s, buckets[k]->line, f->name, "bucket le=%g holds fewer than le=%g",
                           buckets[k]->le, buckets[k - 1]->le);
        if (nb == 0 || !isinf(buckets[nb - 1]->le))
            pt_problem(s, a->line, f->name, "no le=\"+Inf\" bucket for this series");
        else if (count != NULL && count->value != buckets[nb - 1]->value)
            pt_problem(s, count->line, f->name, "_count %g is not the +Inf bucket's %g",
                       count->value, buckets[nb - 1]->value);
    }
    free(buckets);
}

/* A name component (between '_') equal to word, or the name ending in "_" word. */
static inline bool pt_has_component(const char *name, const char *word)
{
    size_t w = strlen(word);
    for (const char *p = name; (p = strchr(p, '_')) != NULL; p++)
        if (strncmp(p + 1, word, w) == 0 && (p[1 + w] == '_' || p[1 + w] == '\0'))
            return true;
    return false;
}

static inline void pt_lint(pt_state *s, const pt_family *f)
{
    static const char *const units[][2] = {
        {"amperes", "amperes"},    {"bytes", "bytes"},     {"celsius", "celsius"},
        {"grams", "grams"},        {"joules", "joules"},   {"kelvin", "kelvin"},
        {"meters", "meters"},      {"metres", "metres"},   {"seconds", "seconds"},
        {"volts", "volts"},        {"minutes", "seconds"}, {"hours", "seconds"},
        {"days", "seconds"},       {"weeks", "seconds"},   {"kelvins", "kelvin"},
        {"fahrenheit", "celsius"}, {"rankine", "celsius"}, {"inches", "meters"},
        {"yards", "meters"},       {"miles", "meters"},    {"bits", "bytes"},
        {"calories", "joules"},    {"pounds", "grams"},    {"ounces", "grams"}};
    static const char *const prefixes[] = {"pico", "nano",  "micro", "milli", "centi", "deci",
                                           "deca", "hecto", "kilo",  "kibi",  "mega",  "mibi",
                                           "giga", "gibi",  "tera",  "tebi",  "peta",  "pebi"};
    static const char *const abbreviations[] = {"s",  "ms", "us", "ns", "sec", "b", "kb",
                                                "mb", "gb", "tb", "pb", "m",   "h", "d"};
    static const char *const types[] = {"counter", "gauge", "histogram", "summary",
                                        "gauge_histogram"};
    const char *n = f->name;
    if (!f->helped)
        pt_problem(s, f->line, n, "no help text");
    bool total = pt_ends_with(n, "_total");
    if (f->type == PT_COUNTER && !total)
        pt_problem(s, f->line, n, "a counter's name should end in _total");
    if (f->type != PT_COUNTER && f->type != PT_UNTYPED && total)
        pt_problem(s, f->line, n, "only a counter's name should end in _total");
    /* The first known unit among the components: a base unit, or the one to use instead. */
    char copy[PT_NAME_MAX];
    snprintf(copy, sizeof copy, "%s", n);
    bool unit_seen = false;
    for (char *save, *c = strtok_r(copy, "_", &save); c && !unit_seen;
         c = strtok_r(NULL, "_", &save)) {
        for (size_t u = 0; u < sizeof units / sizeof units[0] && !unit_seen; u++) {
            const char *word = c;
            for (size_t k = 0; k <= sizeof prefixes / sizeof prefixes[0]; k++) {
                if (k > 0) {
                    size_t pl = strlen(prefixes[k - 1]);
                    if (strncmp(c, prefixes[k - 1], pl) != 0)
                        continue;
                    word = c + pl;
                }
                if (strcmp(word, units[u][0]) == 0) {
                    unit_seen = true;
                    if (strcmp(c, units[u][1]) != 0)
                        pt_problem(s, f->line, n, "use the base unit %s, not %s", units[u][1], c);
                    break;
                }
            }
        }
    }
    char lower[PT_NAME_MAX];
    for (size_t i = 0; i < sizeof lower; i++)
        if ((lower[i] = (char)tolower((unsigned char)n[i])) == '\0')
            break;
    for (size_t k = 0; k < sizeof abbreviations / sizeof abbreviations[0]; k++)
        if (pt_has_component(lower, abbreviations[k]))
            pt_problem(s, f->line, n, "an abbreviated unit (_%s) in the name", abbreviations[k]);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        if (pt_has_component(lower, types[k]))
            pt_problem(s, f->line, n, "the type (%s) in the name", types[k]);
    if (strchr(n, ':'))
        pt_problem(s, f->line, n, "a ':' in the name (kept for recording rules)");
    for (const char *c = n; c[0] && c[1]; c++)
        if (islower((unsigned char)c[0]) && isupper((unsigned char)c[1])) {
            pt_problem(s, f->line, n, "camelCase in the name (snake_case)");
            break;
        }
    if (f->label_camel)
        pt_problem(s, f->line, n, "camelCase in a label name (snake_case)");
    if (f->type != PT_UNTYPED) {
        if (f->type != PT_HISTOGRAM && pt_ends_with(n, "_bucket"))
            pt_problem(s, f->line, n, "_bucket ends only a histogram's name");
        if (f->type != PT_HISTOGRAM && f->type != PT_SUMMARY &&
            (pt_ends_with(n, "_count") || pt_ends_with(n, "_sum")))
            pt_problem(s, f->line, n, "_count and _sum end only a histogram's or summary's name");
        if (f->label_le)
            pt_problem(s, f->line, n, "an le label outside a histogram");
        if (f->label_quantile)
            pt_problem(s, f->line, n, "a quantile label outside a summary");
    }
}

static inline int prom_check(const char *text, char *problems, size_t len)
{
    pt_state *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -1;
    s->samples = calloc(PT_SAMPLES_MAX, sizeof *s->samples);
    if (s->samples == NULL) {
        free(s);
        return -1;
    }
    s->out = problems;
    s->len = len;
    s->current = -1;
    if (len > 0)
        problems[0] = '\0';
    int line = 0;
    for (const char *p = text; *p;) {
        line++;
        const char *eol = strchr(p, '\n');
        if (eol == NULL) {
            pt_problem(s, line, "?", "the last line does not end in a newline");
            eol = p + strlen(p);
        }
        char buf[4096];
        size_t n = (size_t)(eol - p);
        if (n >= sizeof buf) {
            pt_problem(s, line, "?", "a line over %zu bytes", sizeof buf - 1);
            n = sizeof buf - 1;
        }
        memcpy(buf, p, n);
        buf[n] = '\0';
        if (memchr(buf, '\0', n) != NULL || strchr(buf, '\r') != NULL)
            pt_problem(s, line, "?", "a NUL or CR in the line");
        else if (buf[0] == '#')
            pt_comment_line(s, buf, line);
        else if (strspn(buf, " \t") != n)
            pt_sample_line(s, buf + strspn(buf, " \t"), line);
        p = *eol ? eol + 1 : eol;
    }
    pt_check_groups(s);
    for (int i = 0; i < s->nfam; i++) {
        if (!s->fam[i].sampled)
            pt_problem(s, s->fam[i].line, s->fam[i].name, "HELP or TYPE but no sample");
        pt_lint(s, &s->fam[i]);
    }
    int count = s->problems;
    free(s->samples);
    free(s);
    return count;
}

#endif
