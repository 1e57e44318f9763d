/* What log.c, which owns the logs' configuration, asks of the error log (errlog.c) and of
 * the access log's writer (access_log.c). Control calls are serialized by log.c's ctl.mu.
 */
#ifndef MD_LOG_INTERNAL_H
#define MD_LOG_INTERNAL_H

#include <stdint.h>

#include "core/log.h"

/* acc.word: how lines are formatted now. 0: the access log is off. The bits above the flags
 * are the template's address (md_access_template, at least 8-aligned: it comes from calloc),
 * or zero for a preset. */
enum {
    MD_ACCESS_WORD_ON = 1,
    MD_ACCESS_WORD_PREFIXED = 2, /* "<6>" in front: the target is stderr */
    MD_ACCESS_WORD_JSON = 4,
    MD_ACCESS_WORD_FLAGS = 7,
};

/* The template a word formats with; NULL: a preset. */
static inline const md_access_template *md_access_word_template(uint64_t word)
{
    return (const md_access_template *)(uintptr_t)(word & ~(uint64_t)MD_ACCESS_WORD_FLAGS);
}

/* errlog.c: points the error log at fd (STDERR_FILENO or a file) and closes the old one. */
void md_errlog_switch(int fd);
void md_errlog_set_level(md_log_level level);

/* access_log.c. Starts the writer on fd with lines formatted as word (MD_ACCESS_WORD_*). 0 or
 * a negative errno; fd is the caller's on failure. */
int md_accesslog_start(int fd, uint64_t word);
/* From the writer's next swap on: lines formatted as word, written to fd (-1: the current
 * target). Returns once the writer has done it, so every line accepted before the call went
 * to the old target. */
void md_accesslog_request(int fd, uint64_t word);
/* Writes everything pending and stops the writer, which closes its target. */
void md_accesslog_stop(void);

#endif
