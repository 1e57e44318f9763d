/* Tests of runtime/src/list.h: the intrusive list macros, with and without a tail, unlinking
 * at the head, in the middle and at the tail. */
#include <criterion/criterion.h>

#include "list.h"

typedef struct node {
    struct node *up, *down; /* named links, as mp_task's owned_prev/owned_next */
    int v;
} node;

typedef struct list {
    node *head, *tail;
} list;

static void expect(const list *l, const int *want, int n)
{
    const node *prev = NULL;
    int i = 0;
    for (const node *x = l->head; x; prev = x, x = x->down, i++) {
        cr_assert_lt(i, n, "longer than %d", n);
        cr_assert_eq(x->v, want[i], "at %d", i);
        cr_assert_eq(x->up, prev, "back link at %d", i);
    }
    cr_assert_eq(i, n);
    cr_assert_eq(l->tail, prev, "tail");
}

Test(list, push_back_and_unlink_keep_head_and_tail)
{
    node n[4] = {{.v = 0}, {.v = 1}, {.v = 2}, {.v = 3}};
    list l = {NULL, NULL};
    for (int i = 0; i < 4; i++)
        MP__LIST_PUSH_BACK(l.head, l.tail, &n[i], up, down);
    expect(&l, (int[]){0, 1, 2, 3}, 4);
    MP__LIST_UNLINK_TAIL(l.head, l.tail, &n[1], up, down); /* middle */
    expect(&l, (int[]){0, 2, 3}, 3);
    MP__LIST_UNLINK_TAIL(l.head, l.tail, &n[3], up, down); /* tail */
    expect(&l, (int[]){0, 2}, 2);
    MP__LIST_UNLINK_TAIL(l.head, l.tail, &n[0], up, down); /* head */
    expect(&l, (int[]){2}, 1);
    MP__LIST_UNLINK_TAIL(l.head, l.tail, &n[2], up, down); /* the last one */
    cr_assert_null(l.head);
    cr_assert_null(l.tail);
}

Test(list, push_front_and_unlink_with_a_head_only)
{
    node n[3] = {{.v = 0}, {.v = 1}, {.v = 2}};
    node *head = NULL;
    for (int i = 0; i < 3; i++)
        MP__LIST_PUSH_FRONT(head, &n[i], up, down);
    cr_assert_eq(head, &n[2]);
    cr_assert_eq(n[2].down, &n[1]);
    cr_assert_eq(n[1].up, &n[2]);
    MP__LIST_UNLINK(head, &n[2], up, down); /* head */
    cr_assert_eq(head, &n[1]);
    cr_assert_null(n[1].up);
    MP__LIST_UNLINK(head, &n[0], up, down); /* tail end */
    cr_assert_null(n[1].down);
    MP__LIST_UNLINK(head, &n[1], up, down);
    cr_assert_null(head);
}

Test(list, push_front_with_a_tail_keeps_an_lru_order)
{
    node n[3] = {{.v = 0}, {.v = 1}, {.v = 2}};
    list l = {NULL, NULL};
    for (int i = 0; i < 3; i++)
        MP__LIST_PUSH_FRONT_TAIL(l.head, l.tail, &n[i], up, down);
    expect(&l, (int[]){2, 1, 0}, 3);
    /* Used again: to the front (magpied's open-file cache does this on a hit). */
    MP__LIST_UNLINK_TAIL(l.head, l.tail, &n[0], up, down);
    MP__LIST_PUSH_FRONT_TAIL(l.head, l.tail, &n[0], up, down);
    expect(&l, (int[]){0, 2, 1}, 3);
    MP__LIST_UNLINK_TAIL(l.head, l.tail, &n[1], up, down); /* the least recent goes */
    expect(&l, (int[]){0, 2}, 2);
}
