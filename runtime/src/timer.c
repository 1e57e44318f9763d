/* timer.c: timers for tasks (mp_timer_*, mp_now_ms) and the hierarchical hashed timer wheel
 * under them (the Linux kernel's timer wheel, Tokio's time driver).
 *
 * The wheel (mp__wheel_*) is a data structure only: no threads, no clock. The timer API
 * below it, at the end of this file, reads the clock, calls mp__wheel_advance() from one
 * uv_timer on the loop's thread and arms that uv_timer for mp__wheel_next_expiration(), all
 * under the reactor's wheel lock; the loop and the driver role it runs on are reactor.c's.
 *
 * Time is in ms. Six levels of 64 slots: a level-L slot covers 64^L ms and level L as a whole
 * 64^(L+1) ms, so the wheel reaches 64^6 ms (about 2.2 years) ahead. Write a time as base-64
 * digits; digit L is (t >> 6L) & 63. An entry due at d is filed at the level of the highest
 * digit in which d differs from elapsed_ms (level 0 when only the lowest differs), in slot
 * d's digit at that level. So d shares every higher digit with elapsed_ms and its digit there
 * is larger: the slot begins after elapsed_ms and no later than d. When time reaches a
 * slot's start, its entries are re-filed against the new elapsed_ms and land at a lower
 * level (cascade), until they reach level 0, where a slot holds exactly one ms: its own.
 *
 * Invariant after every call: no entry sits in a slot that begins at or before elapsed_ms,
 * except level 0's current slot (elapsed_ms & 63), which holds only overdue entries (inserted
 * with deadline <= elapsed_ms), sorted by deadline. Hence the next slot of level L is found
 * by rotating occupied[L] to the current digit and counting trailing zeros: O(levels) per
 * look-up, and mp__wheel_advance() visits only non-empty slots however far it jumps.
 *
 * Deadlines 64^6 ms or more ahead are filed at level 5 by their digit 5, which may be at or
 * behind the current one: level 5's slots then act as a ring, such a slot is taken to mean
 * its next turn (at most 64^6 ms ahead, still no later than d), and the entry is re-filed
 * from there, one turn of level 5 at a time.
 *
 * mp__wheel_advance() visits slots in time order and moves elapsed_ms to each slot's start
 * as it goes, so the entries it cascades are re-filed exactly as if time had been stepped.
 * Entries due after now_ms are set aside and re-filed once against now_ms at the end, so a
 * jump of days touches each pending entry once. An entry due within the jump but 64^6 ms or
 * more beyond the slot that holds it costs one visit per turn of level 5 (2.2 years).
 *
 * Slot lists are circular and doubly linked (O(1) append and unlink; the head's prev is the
 * tail). Entries fire in deadline order, ties in insertion order: slots are visited in time
 * order, appends keep arrival order, and entries with equal deadlines always share a slot
 * (one filed lower than another was filed after the other's slot began, and so after it
 * cascaded).
 */
#include "internal.h"

#define SLOT_MASK ((uint64_t)MP__WHEEL_SLOTS - 1)
#define TOP_LEVEL (MP__WHEEL_LEVELS - 1)

_Static_assert(MP__WHEEL_SLOTS == 64, "occupied[] is one 64-bit word per level");
_Static_assert((MP__WHEEL_LEVELS * MP__WHEEL_SLOT_BITS) < 64, "the wheel's span fits uint64_t");

static inline unsigned shift_of(unsigned level)
{
    return level * MP__WHEEL_SLOT_BITS;
}

static inline unsigned digit(uint64_t t, unsigned level)
{
    return (unsigned)((t >> shift_of(level)) & SLOT_MASK);
}

/* when > elapsed. OR-ing in the slot mask makes "differs only in digit 0" level 0. */
static unsigned level_for(uint64_t elapsed, uint64_t when)
{
    uint64_t masked = (elapsed ^ when) | SLOT_MASK;
    unsigned level = (unsigned)(63 - __builtin_clzll(masked)) / MP__WHEEL_SLOT_BITS;
    return level < TOP_LEVEL ? level : TOP_LEVEL;
}

static void list_append(mp__timer_entry **head, mp__timer_entry *e)
{
    mp__timer_entry *h = *head;
    if (!h) {
        e->prev = e->next = e;
        *head = e;
        return;
    }
    e->prev = h->prev;
    e->next = h;
    h->prev->next = e;
    h->prev = e;
}

static void list_unlink(mp__timer_entry **head, mp__timer_entry *e)
{
    if (e->next == e) {
        *head = NULL;
    } else {
        e->prev->next = e->next;
        e->next->prev = e->prev;
        if (*head == e)
            *head = e->next;
    }
    e->prev = e->next = NULL;
}

/* Overdue entries go to level 0's current slot in deadline order, after equal deadlines.
 * The walk starts at the tail: overdue deadlines are usually elapsed_ms itself. */
static void list_insert_sorted(mp__timer_entry **head, mp__timer_entry *e)
{
    mp__timer_entry *h = *head;
    if (!h || h->prev->deadline_ms <= e->deadline_ms) {
        list_append(head, e);
        return;
    }
    mp__timer_entry *p = h->prev;
    while (p != h && p->deadline_ms > e->deadline_ms)
        p = p->prev;
    if (p->deadline_ms > e->deadline_ms) {
        /* Earlier than all: appending before the head of a circle and moving the head. */
        list_append(head, e);
        *head = e;
        return;
    }
    e->prev = p;
    e->next = p->next;
    p->next->prev = e;
    p->next = e;
}

/* The start of level's next non-empty slot in time order, and that slot; false if the level
 * is empty. Level 0 looks from the current digit (its overdue slot) on, higher levels from
 * the next digit on: their current slot began at or before elapsed_ms. */
static bool level_next(const mp__timer_wheel *w, unsigned level, uint64_t *when, unsigned *slot)
{
    uint64_t occ = w->occupied[level];
    if (!occ)
        return false;
    uint64_t now = w->elapsed_ms;
    unsigned cur = digit(now, level);
    unsigned from = (cur + (level > 0)) & (unsigned)SLOT_MASK;
    uint64_t rotated = from ? (occ >> from) | (occ << (64 - from)) : occ;
    unsigned s = (from + (unsigned)__builtin_ctzll(rotated)) & (unsigned)SLOT_MASK;

    unsigned shift = shift_of(level);
    uint64_t span = (uint64_t)1 << (shift + MP__WHEEL_SLOT_BITS);
    uint64_t t = (now & ~(span - 1)) + ((uint64_t)s << shift);
    if (level > 0 ? s <= cur : s < cur) {
        /* Behind the current digit: the slot's next turn. Only far deadlines clamped to the
         * top level get there; anywhere else it would be an entry left behind by advance. */
        if (level != TOP_LEVEL)
            MP__UNREACHABLE("timer wheel level %u slot %u behind digit %u", level, s, cur);
        t += span;
    }
    *when = t;
    *slot = s;
    return true;
}

/* The earliest non-empty slot over all levels. Starts never tie in a way that matters: a
 * lower slot that begins where a higher one does can only be filled by that one's cascade. */
static bool wheel_next(const mp__timer_wheel *w, uint64_t *when, unsigned *level, unsigned *slot)
{
    bool found = false;
    uint64_t best = UINT64_MAX;
    for (unsigned l = 0; l < MP__WHEEL_LEVELS; l++) {
        uint64_t t;
        unsigned s;
        if (level_next(w, l, &t, &s) && (!found || t < best)) {
            found = true;
            best = t;
            *level = l;
            *slot = s;
        }
    }
    *when = best;
    return found;
}

void mp__wheel_init(mp__timer_wheel *w, uint64_t now_ms)
{
    memset(w, 0, sizeof *w);
    w->elapsed_ms = now_ms;
}

void mp__timer_entry_init(mp__timer_entry *e)
{
    e->prev = e->next = NULL;
    e->deadline_ms = 0;
    e->where = MP__TIMER_NOT_LINKED;
}

void mp__wheel_insert(mp__timer_wheel *w, mp__timer_entry *e, uint64_t deadline_ms)
{
    mp__wheel_remove(w, e);
    e->deadline_ms = deadline_ms;
    unsigned level, s;
    if (deadline_ms <= w->elapsed_ms) {
        level = 0;
        s = digit(w->elapsed_ms, 0);
        list_insert_sorted(&w->slots[0][s], e);
    } else {
        level = level_for(w->elapsed_ms, deadline_ms);
        s = digit(deadline_ms, level);
        list_append(&w->slots[level][s], e);
    }
    w->occupied[level] |= (uint64_t)1 << s;
    e->where = level * MP__WHEEL_SLOTS + s;
    w->count++;
}

bool mp__wheel_remove(mp__timer_wheel *w, mp__timer_entry *e)
{
    if (e->where == MP__TIMER_NOT_LINKED)
        return false;
    unsigned level = e->where / MP__WHEEL_SLOTS, s = e->where % MP__WHEEL_SLOTS;
    if (level >= MP__WHEEL_LEVELS)
        MP__UNREACHABLE("timer entry %p where=%u", (void *)e, e->where);
    list_unlink(&w->slots[level][s], e);
    if (!w->slots[level][s])
        w->occupied[level] &= ~((uint64_t)1 << s);
    e->where = MP__TIMER_NOT_LINKED;
    w->count--;
    return true;
}

uint64_t mp__wheel_next_expiration(const mp__timer_wheel *w)
{
    /* Overdue entries come first; the slot is sorted, so its head is the earliest. */
    const mp__timer_entry *overdue = w->slots[0][digit(w->elapsed_ms, 0)];
    if (overdue)
        return overdue->deadline_ms;
    uint64_t when;
    unsigned level, s;
    return wheel_next(w, &when, &level, &s) ? when : UINT64_MAX;
}

mp__timer_entry *mp__wheel_advance(mp__timer_wheel *w, uint64_t now_ms)
{
    mp__timer_entry *fired = NULL, **fired_tail = &fired;
    mp__timer_entry *later = NULL, **later_tail = &later;
    uint64_t now = now_ms > w->elapsed_ms ? now_ms : w->elapsed_ms;
    uint64_t when;
    unsigned level = 0, s = 0; /* set by wheel_next() when it returns true */
    while (wheel_next(w, &when, &level, &s) && when <= now) {
        /* Every slot before this one is empty, so time may move to its start. */
        w->elapsed_ms = when;
        mp__timer_entry *e = w->slots[level][s];
        w->slots[level][s] = NULL;
        w->occupied[level] &= ~((uint64_t)1 << s);
        e->prev->next = NULL; /* open the circle */
        while (e) {
            mp__timer_entry *next = e->next;
            e->where = MP__TIMER_NOT_LINKED;
            e->prev = e->next = NULL;
            w->count--;
            if (e->deadline_ms <= when) {
                /* Level 0's entries, and cascaded ones due at exactly this slot's start. */
                *fired_tail = e;
                fired_tail = &e->next;
            } else if (e->deadline_ms > now) {
                /* Not due in this call: re-filed once against now, below, instead of at
                 * every lower slot this jump would pass. Equal deadlines share a slot, so
                 * they stay in order. */
                *later_tail = e;
                later_tail = &e->next;
            } else {
                /* Cascade: to a lower level, or to level 5's next turn if still far. */
                mp__wheel_insert(w, e, e->deadline_ms);
            }
            e = next;
        }
    }
    w->elapsed_ms = now;
    while (later) {
        mp__timer_entry *next = later->next;
        mp__wheel_insert(w, later, later->deadline_ms);
        later = next;
    }
    return fired;
}

size_t mp__wheel_count(const mp__timer_wheel *w)
{
    return w->count;
}

/* The timers of tasks on the wheel. The wheel is shared: tasks on any worker arm and cancel under
 * wheel_lock, the loop fires. The uv_timer is only ever set for the wheel's next expiration, so an
 * idle runtime with no timer pending has none armed. A task whose deadline comes before what the
 * uv_timer is armed for asks the loop to re-arm it (armed_ms is updated at once, under the
 * lock, so that only the first such task sends the command; rearm_queued keeps rearm_cmd in
 * the command stack at most once, and its release/acquire pair hands the struct back).
 *
 * The lost timer wake-up (libuv 1.44, the version these builds use), had the driver blocked
 * in uv_run(UV_RUN_ONCE):
 *
 *   driver (one worker, the loop's only runner)
 *   uv_run(ONCE): timer armed for D, blocks until D
 *   woken early by the async handle (a spawn); runs that task past D
 *   parks, drives again: uv_run(ONCE)
 *     runs due timers first: D fires, its task -> this worker's queue
 *     computes the poll timeout: no timer left, nothing pending -> epoll_wait(-1)
 *   -> the woken task sits in the queue of a thread that sleeps for ever
 *
 * The driver never blocks after running anything: its turn (mp__reactor_run in reactor.c)
 * takes libuv's timeout first, waits in its own epoll set for at most that long, and only
 * then runs the loop without blocking (UV_RUN_NOWAIT); D being due makes that timeout 0. A
 * fired timer is not itself what makes it ready: mp_timer_poll() asks the clock, so a
 * deadline moved later after it fired waits for the new one. */
_Static_assert(offsetof(mp_timer, link_) == offsetof(mp__timer_entry, prev) &&
                   offsetof(mp_timer, deadline_ms) == offsetof(mp__timer_entry, deadline_ms) &&
                   offsetof(mp_timer, where_) == offsetof(mp__timer_entry, where),
               "mp_timer must begin with an mp__timer_entry");

uint64_t mp_now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

static void timers_cb(uv_timer_t *h);

/* want_ms_'s top bit: the loop found the entry due and fired it (deadlines never reach it). */
#define FIRED (UINT64_C(1) << 63)

static void arm_locked_unlock(mp__reactor *r)
{
    uint64_t next = mp__wheel_next_expiration(&r->wheel);
    r->armed_ms = next;
    mp__spin_unlock(&r->wheel_lock);
    if (next == UINT64_MAX) {
        uv_timer_stop(&r->timer);
        return;
    }
    uint64_t now = mp_now_ms();
    uv_update_time(&r->loop);
    uv_timer_start(&r->timer, timers_cb, next > now ? next - now : 0, 0);
}

/* On the loop: fire what is due and arm for the next expiration. The fired timers' tasks
 * are woken by reference under the lock: their wakers stay in the timers (a task's next
 * poll or cancel drops them), so no waker's last reference, and no user code, is dropped
 * here. */
static void fire_due(mp__reactor *r)
{
    uint64_t now = mp_now_ms();
    mp__spin_lock(&r->wheel_lock);
    for (mp__timer_entry *e = mp__wheel_advance(&r->wheel, now); e;) {
        mp__timer_entry *next = e->next;
        mp_timer *t = (mp_timer *)e;
        /* Relaxed: the CAS only decides between us and the owner's lock-free move
         * (mp_timer_poll()); both sides publish nothing else through want_ms_. */
        uint64_t want = atomic_load_explicit(&t->want_ms_, memory_order_relaxed);
        if (r->fire_delay_us != 0) /* testhook.c: widen the race with move_later() */
            for (uint64_t until = mp__now_ns() + r->fire_delay_us * 1000ull; mp__now_ns() < until;)
                ;
        for (;;) {
            if (want > now) {
                /* Moved later while linked (mp_timer_poll's lazy path): follow it, no wake. */
                mp__wheel_insert(&r->wheel, e, want);
                break;
            }
            if (atomic_compare_exchange_weak_explicit(&t->want_ms_, &want, want | FIRED,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                mp_waker_wake_by_ref(&t->waker);
                break;
            }
        }
        e = next;
    }
    arm_locked_unlock(r);
}

static void timers_cb(uv_timer_t *h)
{
    fire_due(h->data);
}

static void rearm_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    mp__reactor *r = arg;
    /* Release: run_commands() is done with rearm_cmd (it read ->next and ->fn before calling
     * us), so the next queue_rearm() may rewrite it; pairs with the acquire CAS there. The
     * wheel is read under its lock below, after this store, so a task that finds the flag
     * clear and queues again is not needed for what it inserted before. */
    atomic_store_explicit(&r->rearm_queued, false, memory_order_release);
    fire_due(r);
}

void mp_timer_init(mp_timer *t, mp_runtime *rt)
{
    memset(t, 0, sizeof *t);
    mp__timer_entry_init((mp__timer_entry *)t);
    t->rt = rt;
}

/* Under wheel_lock: the last pending timer went away but the uv_timer is still armed for it.
 * Disarm it now, while there is activity, rather than wake an idle runtime later for nothing.
 * Returns whether the caller must queue rearm_cmd (after unlocking). */
static bool disarm_if_empty_locked(mp__reactor *r)
{
    if (mp__wheel_count(&r->wheel) != 0 || r->armed_ms == UINT64_MAX)
        return false;
    r->armed_ms = UINT64_MAX;
    return true;
}

static void queue_rearm(mp_runtime *rt)
{
    mp__reactor *r = &rt->reactor;
    bool expected = false;
    /* Acquire: rearm_cmd is ours to rewrite only after the loop's last read of it;
     * pairs with the release store in rearm_cmd(). A command still queued (the flag set) will read
     * the wheel after our insert, so nothing more is needed then. */
    if (atomic_compare_exchange_strong_explicit(&r->rearm_queued, &expected, true,
                                                memory_order_acquire, memory_order_relaxed) &&
        mp_loop_call(rt, &r->rearm_cmd, rearm_cmd, r) != 0)
        atomic_store_explicit(&r->rearm_queued, false, memory_order_relaxed);
}

/* Moving a linked deadline later, without the wheel's lock. A keep-alive connection does it
 * with every request, from any worker; the lock is one line for the whole runtime. The race
 * it must not lose:
 *
 *   task (owner)                                 loop (fire_due, under the lock)
 *   sees the entry linked, due at D <= new       entry due: want_ms_ == D <= now
 *   want_ms_ = new; return MP_PENDING            fire: wake the task, entry unlinked
 *                                                -> if the store lands after the loop read
 *                                                   D, nobody re-files the entry; the wake
 *                                                   has come and gone, the new deadline
 *                                                   never fires
 *
 * Both sides change want_ms_ by compare-and-swap: the owner from a value without FIRED to
 * the new deadline, the loop from a value <= now to that value | FIRED. Whichever swaps
 * first wins; the loser sees the other's value: the loop then re-files the entry at the new
 * deadline, the owner takes the locked path, finds the entry unlinked and re-arms it. armed_
 * is the owner's own record that its last poll left the entry linked (mp_timer_cancel() and a
 * ready poll clear it; nothing else unlinks an entry without FIRED but shutdown). */
static bool move_later(mp_timer *t, uint64_t deadline_ms, mp_context *cx)
{
    if (!t->armed_ || !mp_waker_will_wake(&t->waker, mp_context_waker(cx)))
        return false;
    /* Relaxed: see fire_due(); the CAS alone decides, nothing else is published. */
    uint64_t want = atomic_load_explicit(&t->want_ms_, memory_order_relaxed);
    if ((want & FIRED) || deadline_ms < want)
        return false;
    return want == deadline_ms ||
           atomic_compare_exchange_strong_explicit(&t->want_ms_, &want, deadline_ms,
                                                   memory_order_relaxed, memory_order_relaxed);
}

mp_poll mp_timer_poll(mp_timer *t, uint64_t deadline_ms, mp_context *cx)
{
    if (deadline_ms >= FIRED)
        deadline_ms = FIRED - 1; /* 292 million years: never, in effect */
    if (move_later(t, deadline_ms, cx))
        return MP_PENDING;
    mp__reactor *r = &t->rt->reactor;
    mp__timer_entry *e = (mp__timer_entry *)t;
    mp_waker old = {0};
    mp__spin_lock(&r->wheel_lock);
    /* Ready by the clock alone: the wheel fires an entry only once mp_now_ms() has reached
     * its deadline, so a fired entry is due here too, while a deadline moved later since it
     * fired is not (a "fired" flag would say READY for it at once). */
    if (mp_now_ms() >= deadline_ms) {
        mp__wheel_remove(&r->wheel, e);
        t->armed_ = false;
        atomic_store_explicit(&t->want_ms_, 0, memory_order_relaxed); /* under the lock */
        old = t->waker;
        t->waker = (mp_waker){0};
        bool disarm = disarm_if_empty_locked(r);
        mp__spin_unlock(&r->wheel_lock);
        mp_waker_drop(&old);
        if (disarm)
            queue_rearm(t->rt);
        return MP_READY;
    }
    /* Under the lock the loop is not firing: a linked entry due no later than the new
     * deadline only needs the new one recorded (fire_due() follows it when it comes due);
     * an unlinked one (fired, or never armed) or a later one is filed again. */
    atomic_store_explicit(&t->want_ms_, deadline_ms, memory_order_relaxed);
    if (e->where == MP__TIMER_NOT_LINKED || e->deadline_ms > deadline_ms)
        mp__wheel_insert(&r->wheel, e, deadline_ms);
    t->armed_ = true;
    if (!mp_waker_will_wake(&t->waker, mp_context_waker(cx))) {
        old = t->waker;
        t->waker = mp_waker_clone(mp_context_waker(cx));
    }
    bool rearm = e->deadline_ms < r->armed_ms;
    if (rearm)
        r->armed_ms = e->deadline_ms;
    mp__spin_unlock(&r->wheel_lock);
    mp_waker_drop(&old);
    if (rearm)
        queue_rearm(t->rt);
    return MP_PENDING;
}

void mp_timer_cancel(mp_timer *t)
{
    mp__reactor *r = &t->rt->reactor;
    mp__spin_lock(&r->wheel_lock);
    mp__wheel_remove(&r->wheel, (mp__timer_entry *)t);
    t->armed_ = false;
    atomic_store_explicit(&t->want_ms_, 0, memory_order_relaxed); /* under the lock */
    mp_waker old = t->waker;
    t->waker = (mp_waker){0};
    bool disarm = disarm_if_empty_locked(r);
    mp__spin_unlock(&r->wheel_lock);
    mp_waker_drop(&old);
    if (disarm)
        queue_rearm(t->rt);
}

/* Shutdown, on the loop with every worker stopped (reactor.c): timers still armed belong to
 * tasks that are gone; drop the wakers they kept. */
void mp__timers_close(mp__reactor *r)
{
    mp__spin_lock(&r->wheel_lock);
    mp__timer_entry *left = mp__wheel_advance(&r->wheel, UINT64_MAX - 1);
    mp__spin_unlock(&r->wheel_lock);
    while (left) {
        mp__timer_entry *next = left->next;
        mp_waker_drop(&((mp_timer *)left)->waker);
        left = next;
    }
}
