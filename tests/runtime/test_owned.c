/* Tests of runtime/src/owned.c: the registry of live tasks. */
#include <criterion/criterion.h>

#include "internal.h"

Test(owned, bind_remove_count_close)
{
    mp__owned o;
    cr_assert_eq(mp__owned_init(&o, 2), 0);
    mp_task t[10];
    static const mp_task_vtable vt = {0};
    for (int i = 0; i < 10; i++) {
        mp_task_init(&t[i], &vt);
        cr_assert_eq(mp__owned_bind(&o, &t[i], i % 3 == 0 ? -1 : i % 2), 0);
    }
    cr_assert_eq(mp__owned_count(&o), 10);
    cr_assert(mp__owned_remove(&o, &t[4]));
    cr_assert_not(mp__owned_remove(&o, &t[4]), "removed once");
    cr_assert_eq(mp__owned_count(&o), 9);
    mp__owned_close(&o);
    mp_task late;
    mp_task_init(&late, &vt);
    cr_assert_eq(mp__owned_bind(&o, &late, 0), -ESHUTDOWN);
    for (int i = 0; i < 10; i++)
        if (i != 4)
            cr_assert(mp__owned_remove(&o, &t[i]));
    cr_assert_eq(mp__owned_count(&o), 0);
    mp__owned_destroy(&o);
}
