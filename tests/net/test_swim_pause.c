/* test_swim_pause.c - a member that freezes and resumes (SIGSTOP/SIGCONT,
 * a swap storm, a VM paused), on the simulated network of swim_sim.h with
 * the real state machine: datagrams sent to it wait in its socket, its
 * timers stand still.
 *  - Shorter than suspect_timeout + 2 probe periods (1.4 s): nobody ever
 *    takes it for dead and no view changes, whoever freezes (the
 *    coordinator too) and wherever in a probe period the freeze starts.
 *  - Longer: a view without it is agreed within suspect_timeout + 3
 *    periods (+ a commit round); once it resumes it is back in a view of
 *    every member within a few periods, and no other member was ever taken
 *    for dead, by it or by anyone.
 *  - A 1|3 partition, healed at once or host by host: no healthy member is
 *    ever taken for dead or left out of a view.
 * Times are the simulation's clock, not wall time. */
#include "swim_sim.h"

#include <stdio.h>

#define T_MS 200
#define SUSPECT_MS 1000

/* whether any running member holds member `who` DEAD */
static bool anyone_holds_dead(int who)
{
	for (int i = 0; i < n; i++) {
		if (i == who || frozen[i] || down[i])
			continue;
		struct hora_swim_member m[MAXN];
		const int k = hora_swim_members(sw[i], m, MAXN);
		for (int j = 0; j < k; j++)
			if (m[j].uid == 1000 + (uint64_t)who && m[j].state == HORA_SWIM_DEAD)
				return true;
	}
	return false;
}

/* the highest view id any member installed */
static uint64_t top_view(void)
{
	uint64_t top = 0;
	for (int i = 0; i < n; i++) {
		struct hora_swim_view v;
		int rank;
		bool paused;
		view_of(i, &v, &rank, &paused);
		if (v.id > top)
			top = v.id;
	}
	return top;
}

/* 6 members in steady state, at offset ms into a probe period */
static void steady(int offset)
{
	start(6, 6);
	cr_assert_geq(until_agreed(6, 10000), 0);
	run_ms(3000 + T_MS - (int)(now % T_MS));
	run_ms(offset);
}

Test(net_swim_pause, a_freeze_shorter_than_detection_changes_nothing)
{
	static const int offsets[] = {0, 20, 55, 130, 199};
	static const int freezes[] = {300, 800, 1200, 1350};
	for (int victim = 0; victim < 6; victim++)
		for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++)
			for (size_t f = 0; f < sizeof(freezes) / sizeof(freezes[0]); f++) {
				steady(offsets[o]);
				const uint64_t v0 = agreed(6);
				frozen[victim] = true;
				for (int t = 0; t < freezes[f]; t += 5) {
					run_ms(5);
					cr_assert(!anyone_holds_dead(victim), "victim %d, freeze %d ms at +%d: "
						  "declared dead after %d ms", victim, freezes[f], offsets[o], t);
				}
				thaw(victim);
				for (int t = 0; t < 3000; t += 5) {
					run_ms(5);
					cr_assert(!anyone_holds_dead(victim), "victim %d, freeze %d ms at +%d: "
						  "declared dead %d ms after it resumed", victim, freezes[f],
						  offsets[o], t);
				}
				cr_assert_eq(top_view(), v0, "victim %d, freeze %d ms at +%d: the view changed",
					     victim, freezes[f], offsets[o]);
				cr_assert_eq(agreed(6), v0);
				struct hora_swim_stats st;
				hora_swim_stats_get(sw[victim], &st);
				cr_assert_eq(st.pauses, freezes[f] >= T_MS, "the victim saw %llu pauses",
					     (unsigned long long)st.pauses);
				stop();
			}
}

Test(net_swim_pause, a_longer_freeze_is_a_death_and_the_member_comes_back)
{
	static const int offsets[] = {0, 90, 199};
	for (int victim = 0; victim < 6; victim++)
		for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++) {
			steady(offsets[o]);
			frozen[victim] = true;
			int64_t gone = -1;
			for (int t = 0; t < 2500; t += 5) {
				run_ms(5);
				if (gone < 0 && agreed(5))
					gone = t + 5;
			}
			cr_assert_geq(gone, SUSPECT_MS + 2 * T_MS, "victim %d at +%d: a view without it after %lld ms",
				      victim, offsets[o], (long long)gone);
			cr_assert_leq(gone, SUSPECT_MS + 3 * T_MS + 100, "victim %d at +%d: no view without it "
				      "within the detection time (%lld ms)", victim, offsets[o], (long long)gone);
			thaw(victim);
			const int64_t back = until_agreed(6, 5000);
			cr_assert_geq(back, 0, "victim %d at +%d: not back in a view of 6", victim, offsets[o]);
			cr_assert_leq(back, 3 * T_MS, "victim %d at +%d: back after %lld ms", victim, offsets[o],
				      (long long)back);
			for (int i = 0; i < n; i++)
				cr_assert(i == victim || !anyone_holds_dead(i), "victim %d at +%d: member %d was "
					  "taken for dead", victim, offsets[o], i);
			stop();
		}
}

/* A 1|3 partition that cuts off member 0 (the coordinator) or member 2,
 * then heals. The cut-off member declares the other three dead on its side
 * (it cannot tell a partition from deaths); once healed, its gossip carries
 * those verdicts to the majority. They are rumours from a member the
 * majority holds dead: no majority member may be taken for dead for them
 * (before, a healthy majority member was evicted now and then), and every
 * member is back in one view. */
Test(net_swim_pause, a_healed_minority_evicts_no_one)
{
	static const int lengths[] = {2500, 4000, 6000};
	static const int offsets[] = {0, 70, 150};
	for (int cut = 0; cut < 4; cut += 2)
		for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
			for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++) {
				start(4, 4);
				cr_assert_geq(until_agreed(4, 10000), 0);
				run_ms(3000 + T_MS - (int)(now % T_MS) + offsets[o]);
				side[cut] = 1;
				run_ms(lengths[l]);
				side[cut] = 0;
				for (int t = 0; t < 4000; t += 5) {
					run_ms(5);
					for (int i = 0; i < 4; i++) {
						if (i == cut)
							continue;
						for (int j = 0; j < 4; j++) {
							if (j == cut || j == i)
								continue;
							struct hora_swim_member m[MAXN];
							const int k = hora_swim_members(sw[i], m, MAXN);
							for (int x = 0; x < k; x++)
								cr_assert(m[x].uid != 1000 + (uint64_t)j ||
									  m[x].state != HORA_SWIM_DEAD,
									  "cut %d for %d ms at +%d: member %d took member "
									  "%d for dead %d ms after the heal", cut, lengths[l],
									  offsets[o], i, j, t);
						}
					}
				}
				cr_assert_neq(agreed(4), 0, "cut %d for %d ms at +%d: no view of 4 after the heal", cut,
					      lengths[l], offsets[o]);
				stop();
			}
}

/* A late member (its loop busy for less than a probe period, no pause)
 * whose probe's deadline passed while the ACK waited in its socket: its
 * tick comes first when it runs again, and must not take the ACK it has
 * not read yet for silence (before, its target became SUSPECT). Its target,
 * and everyone else, are late too, so whoever it pings answers late. */
Test(net_swim_pause, a_late_tick_reads_the_ack_before_it_suspects)
{
	start(4, 4);
	cr_assert_geq(until_agreed(4, 10000), 0);
	run_ms(3000 + T_MS - (int)(now % T_MS) - 5); /* 5 ms before a period boundary B */
	const int x = 1;
	struct hora_swim_stats before;
	hora_swim_stats_get(sw[x], &before);
	for (int i = 0; i < 4; i++)
		frozen[i] = i != x; /* the others, B-5 .. B+100 */
	run_ms(5);  /* B: x pings; the ping waits at its target */
	run_ms(60); /* B+60: x is busy too, until B+230 */
	frozen[x] = true;
	run_ms(40);
	for (int i = 0; i < 4; i++)
		if (i != x)
			thaw(i); /* B+100: the target ACKs; the ACK waits at x */
	run_ms(130);
	thaw_tick_first(x); /* B+230: past the probe's deadline (T = 200 ms) */
	run_ms(300);
	struct hora_swim_stats st;
	hora_swim_stats_get(sw[x], &st);
	cr_assert_eq(st.pauses, before.pauses, "a busy stretch of 170 ms was taken for a pause");
	cr_assert_eq(st.suspicions, before.suspicions, "member %d suspected a member whose ACK waited in its "
		     "socket", x);
	stop();
}

/* whether member i holds member j DEAD */
static bool holds_dead(int i, int j)
{
	struct hora_swim_member m[MAXN];
	const int k = hora_swim_members(sw[i], m, MAXN);
	for (int x = 0; x < k; x++)
		if (m[x].uid == 1000 + (uint64_t)j && m[x].state == HORA_SWIM_DEAD)
			return true;
	return false;
}

/* every member's installed view holds every member but `cut` */
static void assert_views_hold_all_but(int cut, const char *what, int t)
{
	for (int i = 0; i < n; i++) {
		struct hora_swim_view v;
		int rank;
		bool paused;
		view_of(i, &v, &rank, &paused);
		for (int j = 0; j < n; j++) {
			bool has = false;
			for (int k = 0; k < v.n; k++)
				has |= v.uids[k] == 1000 + (uint64_t)j;
			cr_assert(j == cut || has, "%s, %d ms after the heal began: member %d installed view %llu "
				  "without healthy member %d", what, t, i, (unsigned long long)v.id, j);
		}
	}
}

/* The same 1|3 partition, healed host by host as firewall rules are taken
 * down one after the other: the cut-off member hears some of the majority
 * back while another is still out of its reach, and holds that one dead (a
 * doubted death: it had no majority when it declared it, or doubts it since
 * it learned that it was the cut-off one). A doubted death evicts no one: no
 * view ever lacks a healthy majority member, nobody on the majority side
 * takes one for dead, and all four are in one view in the end. Before, the
 * cut-off coordinator proposed a view of the members it heard back first,
 * a majority of its old view, and the others promised it; or, holding the
 * last one suspect again, declared it dead before its refutation could reach
 * it. The links come back at the offsets below (ms after the first), in
 * three rotations; with `freeze`, the member whose link comes back last was
 * also frozen for 300 ms during the partition (its incarnation is higher
 * than the cut-off member knows). */
static void host_by_host(int cut, const int back[3], int ph, bool freeze)
{
	char what[128];
	snprintf(what, sizeof(what), "cut %d, links back at +%d/+%d/+%d ms, phase %d%s", cut, back[0], back[1],
		 back[2], ph, freeze ? ", the last frozen" : "");
	start(4, 4);
	cr_assert_geq(until_agreed(4, 10000), 0);
	run_ms(3000);
	int others[3], k = 0, last = 0;
	for (int j = 0; j < 4; j++)
		if (j != cut)
			others[k++] = j;
	for (int l = 1; l < 3; l++)
		if (back[l] > back[last])
			last = l;
	last = others[last];
	for (int j = 0; j < 4; j++)
		severed[cut][j] = j != cut;
	for (int t = 0; t < 4000 + 35 * ph; t += 5) {
		if (freeze && t == 1500)
			frozen[last] = true;
		if (freeze && t == 1800)
			thaw(last);
		run_ms(5);
		assert_views_hold_all_but(cut, what, -1);
	}
	for (int t = 0; t < 3000 + 4000; t += 5) {
		for (int l = 0; l < 3; l++)
			if (t == back[l])
				severed[cut][others[l]] = false;
		run_ms(5);
		assert_views_hold_all_but(cut, what, t);
		for (int a = 0; a < 3; a++)
			for (int b = 0; b < 3; b++)
				cr_assert(a == b || !holds_dead(others[a], others[b]),
					  "%s, %d ms after the heal began: member %d took healthy member %d for dead",
					  what, t, others[a], others[b]);
	}
	cr_assert_neq(agreed(4), 0, "%s: no view of 4 after the heal", what);
	stop();
}

Test(net_swim_pause, a_minority_healed_host_by_host_evicts_no_one)
{
	static const int backs[][3] = {{0, 20, 40},    {0, 200, 400},  {0, 500, 1000}, {0, 1200, 2400},
				       {0, 100, 1300}, {0, 100, 2000}, {0, 100, 3000}, {0, 1500, 1600}};
	for (int cut = 0; cut < 4; cut += 2)
		for (size_t b = 0; b < sizeof(backs) / sizeof(backs[0]); b++)
			for (int rot = 0; rot < 3; rot++)
				for (int ph = 0; ph < 3; ph++) {
					const int back[3] = {backs[b][rot], backs[b][(rot + 1) % 3],
							     backs[b][(rot + 2) % 3]};
					host_by_host(cut, back, ph, false);
					host_by_host(cut, back, ph, true);
				}
}

/* A member declares a silent member dead with a majority (a host gone, no
 * proof), a committed view leaves it out; later the declarer is frozen past
 * the detection time and comes back. It doubts its own deaths then (it may
 * have been the cut-off one), but not this one: a majority agreed on it.
 * Doubted, it came back alive at the declarer for its probes to judge, and
 * a returning coordinator proposed views with it that never committed:
 * 0.2-1.4 s more before the view of the others was agreed. */
Test(net_swim_pause, a_death_a_view_agreed_on_stays_after_the_declarer_returns)
{
	for (int off = 0; off < 4000; off += 111) {
		start(5, 5);
		cr_assert_geq(until_agreed(5, 10000), 0);
		run_ms(3000 + off);
		down[4] = true;
		cr_assert_geq(until_agreed(4, 10000), 0);
		run_ms(1000);
		frozen[0] = true;
		run_ms(4000);
		thaw(0);
		int64_t back = -1;
		for (int t = 0; t < 3000; t += 5) {
			run_ms(5);
			cr_assert(holds_dead(0, 4), "crash at +%d: member 0 holds the dead member 4 alive again %d ms "
				  "after it resumed", off, t);
			if (back < 0 && agreed(4))
				back = t + 5;
		}
		cr_assert_geq(back, 0, "crash at +%d: no view of the 4 after member 0 resumed", off);
		cr_assert_leq(back, 3 * T_MS, "crash at +%d: the view of the 4 after %lld ms", off, (long long)back);
		stop();
	}
}
