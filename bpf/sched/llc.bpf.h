/* SPDX-License-Identifier: GPL-2.0 */
/*
 * llc.bpf.h: one queue per LLC, and the balance between the queues.
 *
 * QUEUES. Each LLC (last-level cache: the CPUs that share an L3; the loader's cpu_llc table) has
 * a vtime-ordered DSQ of its own, llc_dsq(llc), and a front of its own (vtime.bpf.h). A task that
 * waits for a CPU is queued in the LLC of the CPU it last ran on or that ops.select_cpu chose
 * (task_llc), and the CPUs of that LLC take it in key order. So a dispatch takes the lock of its
 * own LLC's queue, shared only with the CPUs of that LLC, and writes only its own LLC's front. A
 * machine of one LLC (or whose cache topology the loader could not read) has one queue, and none
 * of what follows runs: nr_llcs is a load-time constant, and the verifier drops the dead code.
 *
 * ONE SCALE. Keys are on one virtual-time scale for the whole machine: a thread's vtime is
 * charged by its share of the machine (share.bpf.h), wherever it runs. Within a queue, keys
 * order as with one queue; between queues, the queue whose head is further behind holds threads
 * that have had less than their share. Evening that out is the job of the CPUs that dispatch:
 *
 * BALANCE, at each ops.dispatch of a machine of several LLCs (llc_balance, keep_prev):
 * - the CPU's front follows another LLC's front when that is ahead (fronts_meet): a front is the
 *   largest key taken, as vtime_now was with one queue, and an LLC whose CPUs took only idle
 *   wakeups for a while would otherwise give its sleepers credit against a stale front;
 * - a CPU whose own queue is empty takes the first task it may run from the other LLCs' queues,
 *   starting at a random one: no CPU idles while a task it may run waits (work conservation).
 *   It looks only at queues marked as maybe holding tasks (llc_front.waiting: set by an enqueue
 *   there, cleared by a dispatch there that finds the queue empty), since every look at a DSQ
 *   costs a hash lookup of its id, and on a machine with idle CPUs most queues are empty;
 * - a CPU whose queue has a head looks at the head of one other LLC's queue, chosen at random,
 *   and takes from that queue when its head's key is behind its own head's by more than its own
 *   head's request (key - vtime: one slice, or latency target, of that thread's service);
 * - keep_prev does not keep prev when that other head is behind prev's key by more than prev's
 *   request: the CPU then takes it (dispatch.bpf.h).
 * So while every CPU is busy the heads of the queues stay within about one request of each
 * other, and the machine-wide shares hold over time as with one queue: every thread's vtime,
 * whichever queue it waits in, stays within a bounded distance of the others', and what the
 * bound allows is a little more wait for a thread of the queue that is behind, not less share.
 * Tasks change LLC only for these reasons (or because ops.select_cpu found an idle CPU in
 * another), so a thread keeps its cache while the load is even.
 *
 * Worked example: 2 LLCs of 4 CPUs; 8 equal hogs queued in LLC 0, none in LLC 1. The CPUs of
 * LLC 1 find their queue empty and take LLC 0's heads, one each; from then on each CPU, at the
 * end of a slice, compares its prev (or its head) with the other queue's head and takes that
 * when it is more than a slice behind: each hog gets a whole CPU here, 8/12 of one with 12 hogs,
 * as with one queue, and a hog changes LLC only when its queue has fallen more than a slice
 * behind the other, not at every slice.
 *
 * COST. A dispatch reads one other LLC's front and flag (no lock: each is written by that LLC's
 * CPUs only) and, when that queue is marked, peeks at its head; only when that head is behind
 * its own does it read its own head's task storage for the bound. A CPU whose queue is empty reads
 * the other LLCs' flags and tries the queues marked: at most nr_llcs - 1. An enqueue writes its
 * LLC's flag only when it was clear. None of it grows with the number of CPUs.
 *
 * Known weaknesses: one other queue is compared per dispatch, so on a machine of many LLCs an
 * uneven load is evened over several dispatches; an LLC of very many CPUs (one L3 for a socket)
 * still shares one queue's lock among them.
 *
 * Races accepted: heads and fronts of other LLCs are read without their locks: a head may have
 * been taken by the time the CPU moves from that queue (it then takes the next task it may run
 * there, or none), and a front read late only delays its catching up by a dispatch. An enqueue
 * that reads the waiting flag as set just before a dispatch of its LLC clears it, its insert not
 * yet seen by that dispatch's second look, leaves its task unflagged: it waits for its own LLC's
 * next dispatch (the end of a slice there), not for an idle CPU elsewhere; the next enqueue there
 * sets the flag again.
 */
#ifndef ZERNEL_SCHED_LLC_BPF_H
#define ZERNEL_SCHED_LLC_BPF_H

#include "common.bpf.h"
#include "compat.bpf.h"
#include "task.bpf.h"
#include "vtime.bpf.h"

/* Another LLC than llc, at random (llc itself on a machine of one). */
static __always_inline u32 other_llc(u32 llc)
{
	u32 n = nr_llcs;

	if (n <= 1)
		return llc;
	if (n == 2)
		return llc ^ 1;
	return (llc + 1 + bpf_get_prandom_u32() % (n - 1)) % n;
}

/*
 * A dispatch of llc found its queue empty: other LLCs' idle CPUs need not look there. True when
 * the flag was set: the caller looks at its queue again, since a task queued between its look and
 * the clear would otherwise wait, unflagged, for its own LLC's next dispatch (the exchange orders
 * the clear before that second look).
 */
static __always_inline bool llc_mark_empty(u32 llc)
{
	struct llc_front *st = llc_state(llc);

	return st->waiting && __sync_lock_test_and_set(&st->waiting, 0);
}

/* A queued task's request in virtual time, the part of its key above its vtime (BALANCE). */
static u64 queued_request(struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&zernel_task_ctx, p, 0, 0);
	u64 key = p->scx.dsq_vtime;

	if (!tctx || time_before(key, tctx->pub.vtime))
		return 0;
	return key - tctx->pub.vtime;
}

/*
 * The key of the head of llc's queue, when it has one. A queue not marked as waiting is not
 * looked at: its head would cost a hash lookup to find missing.
 */
static bool llc_head_key(u32 llc, u64 *key)
{
	struct task_struct *h;

	if (!llc_state(llc)->waiting)
		return false;
	h = __COMPAT_scx_bpf_dsq_peek(llc_dsq(llc));
	if (!h)
		return false;
	*key = h->scx.dsq_vtime;
	return true;
}

/* True when the head of llc's queue is behind key by more than bound (BALANCE). */
static bool llc_behind(u32 llc, u64 key, u64 bound)
{
	u64 hk;

	return llc_head_key(llc, &hk) && time_before(hk + bound, key);
}

/* A front follows another LLC's front that is ahead (BALANCE, first point). */
static __always_inline void fronts_meet(u32 llc, u32 other)
{
	front_advance(front_of(llc), *front_of(other));
}

/*
 * Moves a task from llc's queue to this CPU's local DSQ; counted. Not when no task was queued
 * there since one of its CPUs found it empty: a look at an empty DSQ costs a hash lookup.
 */
static bool llc_take(u32 llc)
{
	if (!llc_state(llc)->waiting || !scx_bpf_dsq_move_to_local(llc_dsq(llc), 0))
		return false;
	stat_inc(ZERNEL_STAT_LLC_STEAL);
	return true;
}

/*
 * BALANCE for a CPU of llc that did not keep prev: with an empty queue, a task from the others'
 * (from `other` on); with a head, the other's head when it is behind by more than the head's
 * request. True when a task was taken.
 */
static bool llc_balance(u32 llc, u32 other, struct task_struct *head)
{
	u64 key, okey;
	u32 i, l;

	if (head) {
		/* One peek; only a head behind its own is worth the storage lookup of the bound. */
		key = head->scx.dsq_vtime;
		if (!llc_head_key(other, &okey) || !time_before(okey, key))
			return false;
		return time_before(okey + queued_request(head), key) && llc_take(other);
	}
	if (llc_take(other))
		return true;
	if (nr_llcs <= 2)
		return false;
	bpf_for(i, 1, nr_llcs) {
		l = (other + i) % nr_llcs;
		if (l != llc && llc_take(l))
			return true;
	}
	return false;
}

#endif /* ZERNEL_SCHED_LLC_BPF_H */
