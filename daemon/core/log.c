/* log.c: the logs' configuration (see log.h): the [log] section's keys (md_section_log, read
 * by the INI engine, core/ini.h), and which targets, formats and level are in use, changed by
 * the control calls (open, apply, reopen, flush, close), which are serialized by ctl.mu. The
 * parts they drive:
 *
 *   errlog.c         the error log, written by the calling thread
 *   access_log.c     the access log's shared buffer and its writer thread
 *   access_format.c  access-log lines (combined, JSON)
 *   logfd.c          writing to a descriptor that may stall
 *
 * Control calls never touch the writer's descriptor: they post a request that the writer
 * carries out at its next swap (md_accesslog_request), so the switch falls between two lines.
 *
 * Lock order: ctl.mu, then acc.mu (access_log.c) or elog.mu (errlog.c); never acc.mu and
 * elog.mu together.
 */
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/ini.h"

#include "core/log_internal.h"
#include "core/logfd.h"

/* The control calls' view: what is configured now. */
static struct {
    pthread_mutex_t mu; /* serializes the control calls; guards the rest */
    bool open;
    char err_path[MD_LOG_PATH_MAX]; /* "" = stderr */
    uint64_t acc_word;              /* 0: off */
    bool acc_to_file;
    char acc_path[MD_LOG_PATH_MAX];
    bool running; /* the writer thread exists */
} ctl = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const char *const level_names[] = {
    [MD_LOG_ERROR] = "error",
    [MD_LOG_WARN] = "warn",
    [MD_LOG_INFO] = "info",
    [MD_LOG_DEBUG] = "debug",
};

static const char *const format_names[] = {
    [MD_ACCESS_FORMAT_COMBINED] = "combined",
    [MD_ACCESS_FORMAT_JSON] = "json",
    [MD_ACCESS_FORMAT_TEMPLATE] = "template",
};

const char *md_access_format_name(md_access_format format)
{
    if ((unsigned)format >= sizeof(format_names) / sizeof(format_names[0]))
        return "?";
    return format_names[format];
}

const char *md_log_level_name(md_log_level level)
{
    if ((unsigned)level >= sizeof(level_names) / sizeof(level_names[0]))
        return "?";
    return level_names[level];
}

/* The [log] section: its keys and their defaults. */

static void log_init(void *conf)
{
    md_log_config *l = conf;
    memset(l, 0, sizeof *l);
    l->level = MD_LOG_INFO;
    l->access_log = MD_ACCESS_LOG_OFF;
    l->access_format = MD_ACCESS_FORMAT_COMBINED;
}

static int parse_level(void *conf, const md_ini_key *k, const char *value, char *msg,
                       size_t msg_len)
{
    (void)k;
    for (unsigned i = MD_LOG_ERROR; i <= MD_LOG_DEBUG; i++) {
        if (strcmp(value, md_log_level_name((md_log_level)i)) == 0) {
            ((md_log_config *)conf)->level = (md_log_level)i;
            return 0;
        }
    }
    snprintf(msg, msg_len, "expected error, warn, info or debug, got \"%s\"", value);
    return -EINVAL;
}

static int parse_format(void *conf, const md_ini_key *k, const char *value, char *msg,
                        size_t msg_len)
{
    (void)k;
    md_log_config *l = conf;
    for (unsigned i = MD_ACCESS_FORMAT_COMBINED; i <= MD_ACCESS_FORMAT_JSON; i++) {
        if (strcmp(value, md_access_format_name((md_access_format)i)) == 0) {
            l->access_format = (md_access_format)i;
            l->access_template[0] = '\0';
            return 0;
        }
    }
    /* A template names at least one field: a word without "$" is a mistyped preset. */
    if (strchr(value, '$') == NULL) {
        snprintf(msg, msg_len, "expected combined, json, or a template of $fields, got \"%s\"",
                 value);
        return -EINVAL;
    }
    if (md_access_template_check(value, msg, msg_len) != 0)
        return -EINVAL;
    l->access_format = MD_ACCESS_FORMAT_TEMPLATE;
    snprintf(l->access_template, sizeof l->access_template, "%s", value);
    return 0;
}

/* A log file's path (MD_LOG_PATH_MAX bytes at dst): absolute, or relative to the working
 * directory with a leading '.', so that a typo of a keyword is not taken for a file name. */
static int set_path(char *dst, const char *value, const char *keywords, char *msg, size_t msg_len)
{
    if (value[0] != '/' && value[0] != '.') {
        snprintf(msg, msg_len, "expected %s, or a path starting with / or ., got \"%s\"", keywords,
                 value);
        return -EINVAL;
    }
    if (strlen(value) >= MD_LOG_PATH_MAX) {
        snprintf(msg, msg_len, "path longer than %d bytes", MD_LOG_PATH_MAX - 1);
        return -EINVAL;
    }
    snprintf(dst, MD_LOG_PATH_MAX, "%s", value);
    return 0;
}

static int parse_error_log(void *conf, const md_ini_key *k, const char *value, char *msg,
                           size_t msg_len)
{
    (void)k;
    md_log_config *l = conf;
    if (strcmp(value, "stderr") == 0) {
        l->error_log_path[0] = '\0';
        return 0;
    }
    return set_path(l->error_log_path, value, "stderr", msg, msg_len);
}

static int parse_access_log(void *conf, const md_ini_key *k, const char *value, char *msg,
                            size_t msg_len)
{
    (void)k;
    md_log_config *l = conf;
    if (strcmp(value, "off") == 0) {
        l->access_log = MD_ACCESS_LOG_OFF;
        return 0;
    }
    if (strcmp(value, "stderr") == 0) {
        l->access_log = MD_ACCESS_LOG_STDERR;
        return 0;
    }
    if (set_path(l->access_log_path, value, "off, stderr", msg, msg_len) != 0)
        return -EINVAL;
    l->access_log = MD_ACCESS_LOG_FILE;
    return 0;
}

static const md_ini_key log_keys[] = {
    {"level", MD_INI_PARSE, 0, 0, 0, parse_level},
    {"access_log", MD_INI_PARSE, 0, 0, 0, parse_access_log},
    {"access_format", MD_INI_PARSE, 0, 0, 0, parse_format},
    {"error_log", MD_INI_PARSE, 0, 0, 0, parse_error_log},
    {NULL, 0, 0, 0, 0, NULL},
};

const md_ini_section md_section_log = {.name = "log", .keys = log_keys, .init = log_init};

/* The access log's word for cfg (log_internal.h): 0 when it is off. -ENOMEM with err when a
 * template cannot be made. */
static int access_word(const md_log_config *cfg, uint64_t *word, md_error *err)
{
    *word = 0;
    if (cfg->access_log == MD_ACCESS_LOG_OFF)
        return 0;
    uint64_t t = 0;
    if (cfg->access_format == MD_ACCESS_FORMAT_TEMPLATE) {
        char msg[256];
        const md_access_template *tpl =
            md_access_template_intern(cfg->access_template, msg, sizeof msg);
        if (tpl == NULL) {
            if (err)
                snprintf(err->msg, sizeof(err->msg), "[log] access_format: %s", msg);
            return -ENOMEM; /* it was checked when read: only memory can be short */
        }
        t = (uint64_t)(uintptr_t)tpl;
    }
    *word = MD_ACCESS_WORD_ON | t |
            (cfg->access_log == MD_ACCESS_LOG_STDERR ? MD_ACCESS_WORD_PREFIXED : 0) |
            (cfg->access_format == MD_ACCESS_FORMAT_JSON ? MD_ACCESS_WORD_JSON : 0);
    return 0;
}

/* Everything that can fail (opening files, starting the writer) happens before anything
 * changes, so a failure leaves the old settings. ctl.mu held. */
static int apply_locked(const md_log_config *cfg, md_error *err)
{
    uint64_t word;
    int rc = access_word(cfg, &word, err);
    if (rc != 0)
        return rc;
    int efd = -1; /* -1: the error log stays where it is */
    if (strcmp(cfg->error_log_path, ctl.err_path) != 0) {
        efd = cfg->error_log_path[0] ? md_logfd_open(cfg->error_log_path, err) : STDERR_FILENO;
        if (efd < 0)
            return efd;
    }

    bool to_file = cfg->access_log == MD_ACCESS_LOG_FILE;
    int afd = -1; /* -1: the access log keeps its target */
    if (word != 0 && to_file &&
        !(ctl.running && ctl.acc_to_file && strcmp(cfg->access_log_path, ctl.acc_path) == 0)) {
        afd = md_logfd_open(cfg->access_log_path, err);
        if (afd < 0) {
            md_logfd_close(efd);
            return afd;
        }
    } else if (word != 0 && !to_file && !(ctl.running && !ctl.acc_to_file)) {
        afd = STDERR_FILENO;
    }

    if (word != 0 && !ctl.running) {
        rc = md_accesslog_start(afd, word);
        if (rc == 0)
            ctl.running = true;
        if (rc != 0) {
            if (err)
                snprintf(err->msg, sizeof(err->msg), "access log writer: %s", strerror(-rc));
            md_logfd_close(afd);
            md_logfd_close(efd);
            return rc;
        }
    } else if (word == 0 && ctl.running) {
        md_accesslog_stop();
        ctl.running = false;
    } else if (word != 0 && (afd >= 0 || word != ctl.acc_word)) {
        md_accesslog_request(afd, word);
    }
    ctl.acc_word = word;
    ctl.acc_to_file = word != 0 && to_file;
    snprintf(ctl.acc_path, sizeof(ctl.acc_path), "%s", ctl.acc_to_file ? cfg->access_log_path : "");

    if (efd >= 0) {
        md_errlog_switch(efd);
        snprintf(ctl.err_path, sizeof(ctl.err_path), "%s", cfg->error_log_path);
    }
    md_errlog_set_level(cfg->level);
    return 0;
}

int md_log_open(const md_log_config *cfg, md_error *err)
{
    pthread_mutex_lock(&ctl.mu);
    int rc = -EALREADY;
    if (ctl.open) {
        if (err)
            snprintf(err->msg, sizeof(err->msg), "log: already open");
    } else {
        rc = apply_locked(cfg, err);
        ctl.open = rc == 0;
    }
    pthread_mutex_unlock(&ctl.mu);
    return rc;
}

int md_log_apply(const md_log_config *cfg, md_error *err)
{
    pthread_mutex_lock(&ctl.mu);
    int rc = apply_locked(cfg, err);
    if (rc == 0)
        ctl.open = true;
    pthread_mutex_unlock(&ctl.mu);
    return rc;
}

int md_log_reopen(void)
{
    int first = 0;
    pthread_mutex_lock(&ctl.mu);
    if (ctl.err_path[0]) {
        int fd = md_logfd_open(ctl.err_path, NULL);
        if (fd >= 0)
            md_errlog_switch(fd);
        else
            md_log(MD_LOG_ERROR, "cannot reopen the error log %s: %s", ctl.err_path,
                   strerror(-(first = fd)));
    }
    if (ctl.running && ctl.acc_to_file) {
        int fd = md_logfd_open(ctl.acc_path, NULL);
        if (fd >= 0) {
            md_accesslog_request(fd, ctl.acc_word);
        } else {
            md_log(MD_LOG_ERROR, "cannot reopen the access log %s: %s", ctl.acc_path,
                   strerror(-fd));
            if (first == 0)
                first = fd;
        }
    }
    pthread_mutex_unlock(&ctl.mu);
    return first;
}

void md_log_flush(void)
{
    pthread_mutex_lock(&ctl.mu);
    if (ctl.running) {
        md_accesslog_request(-1, ctl.acc_word);
    }
    pthread_mutex_unlock(&ctl.mu);
}

void md_log_close(void)
{
    pthread_mutex_lock(&ctl.mu);
    if (ctl.running)
        md_accesslog_stop();
    ctl.running = false;
    ctl.acc_word = 0;
    ctl.acc_to_file = false;
    ctl.acc_path[0] = '\0';
    if (ctl.err_path[0]) {
        md_errlog_switch(STDERR_FILENO);
        ctl.err_path[0] = '\0';
    }
    ctl.open = false;
    pthread_mutex_unlock(&ctl.mu);
}
