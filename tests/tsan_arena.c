/* Linked into the ThreadSanitizer builds of the suites only.
 *
 * Criterion's process arena (BoxFort, src/arena.c) is mapped at 0x200000000000 +
 * (rand_r() & 0x3fffff) << 24, probing until it finds free pages. Under TSan nearly all of
 * that window is TSan's own shadow, metadata or protected memory, so Criterion dies at start
 * with "Could not initialize inheritable arena" (upstream Snaipe/Criterion#274, open). The
 * window does contain free application memory that TSan shadows: the PIE range
 * 0x550000000000-0x568000000000. Nothing else in these test programs calls rand_r, so this
 * one answers BoxFort with offsets that walk through that range; BoxFort's own probe still
 * skips pages that are in use (the program image lives there too). */
#include <stdlib.h>

int rand_r(unsigned int *seed)
{
    static unsigned int next = (0x558000000000u - 0x200000000000u) >> 24;
    (void)seed;
    return (int)__atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
}
