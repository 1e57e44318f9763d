/* list.h: the intrusive doubly linked lists of the runtime (a channel's and a notify's waiters,
 * a registry shard's tasks, the reactor's open streams, the per-thread caches' registries) and
 * of magpied (a server's connections, the open-file caches' LRU lists and registry, an upstream
 * peer's idle connections). NULL-terminated, with a head and, for the FIFO and LRU lists, a
 * tail. The one header both share: macros only, so the daemon includes it (as "list.h",
 * through the -Iruntime/src its build already has) without linking anything of the runtime's
 * internals. The caller names the link fields, so one struct can sit on a list
 * through fields of its own (mp_task's owned_prev/owned_next). Not thread-safe: the caller
 * holds whatever guards the list. Unlinking leaves the node's links as they were; each caller
 * resets them to what "not linked" means for it. The timer wheel's slot lists are circular
 * and keep their own (timer.c). */
#ifndef MP_LIST_H
#define MP_LIST_H

#include <stddef.h>

#define MP__LIST_PUSH_FRONT(head, node, prev, next)                                                \
    do {                                                                                           \
        (node)->prev = NULL;                                                                       \
        (node)->next = (head);                                                                     \
        if (head)                                                                                  \
            (head)->prev = (node);                                                                 \
        (head) = (node);                                                                           \
    } while (0)

#define MP__LIST_PUSH_BACK(head, tail, node, prev, next)                                           \
    do {                                                                                           \
        (node)->prev = (tail);                                                                     \
        (node)->next = NULL;                                                                       \
        if (tail)                                                                                  \
            (tail)->next = (node);                                                                 \
        else                                                                                       \
            (head) = (node);                                                                       \
        (tail) = (node);                                                                           \
    } while (0)

/* A list with a head and a tail, at the head (an LRU list's most recent end). */
#define MP__LIST_PUSH_FRONT_TAIL(head, tail, node, prev, next)                                     \
    do {                                                                                           \
        (node)->prev = NULL;                                                                       \
        (node)->next = (head);                                                                     \
        if (head)                                                                                  \
            (head)->prev = (node);                                                                 \
        else                                                                                       \
            (tail) = (node);                                                                       \
        (head) = (node);                                                                           \
    } while (0)

/* A list with a head only. */
#define MP__LIST_UNLINK(head, node, prev, next)                                                    \
    do {                                                                                           \
        if ((node)->prev)                                                                          \
            (node)->prev->next = (node)->next;                                                     \
        else                                                                                       \
            (head) = (node)->next;                                                                 \
        if ((node)->next)                                                                          \
            (node)->next->prev = (node)->prev;                                                     \
    } while (0)

/* A list with a head and a tail. */
#define MP__LIST_UNLINK_TAIL(head, tail, node, prev, next)                                         \
    do {                                                                                           \
        if ((node)->prev)                                                                          \
            (node)->prev->next = (node)->next;                                                     \
        else                                                                                       \
            (head) = (node)->next;                                                                 \
        if ((node)->next)                                                                          \
            (node)->next->prev = (node)->prev;                                                     \
        else                                                                                       \
            (tail) = (node)->prev;                                                                 \
    } while (0)

#endif
