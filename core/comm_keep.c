/* comm_keep.c - readiness rounds after an elastic communicator is formed,
 * and a joiner's keeper that answers them while it is not ready yet.
 *
 * A joiner is admitted (its hora_init returns) long before it can take
 * part in the job: it still loads its data and builds its model, or the
 * caller's own code runs. Meanwhile the others, re-formed with it, start
 * the sync that hands it the committed state; a collective that waits for
 * a joiner longer than transport.io_timeout_ms fails, and with it the job.
 * So every rank of a formation first runs readiness rounds
 * (hora_comm_await_ready): allreduces of one int32, MIN, until every rank
 * says 1. The joiner's rounds run on a thread of their own, the keeper
 * (hora_comm_keep_start, from hora_rejoin_join), one every KEEP_ROUND_MS,
 * saying 0 until a call of the joiner's own claims the communicator
 * (hora_comm_keep_claim: its collectives, blocking or async,
 * hora_comm_set_* and re-forms; not rank or size queries): then 1, and the keeper
 * ends. The others' rounds each wait in the allreduce for the keeper's
 * next one, so no collective waits longer than a round. Each formation's
 * rounds run once per rank (ready_done): the joiner's main thread, whose
 * keeper ran them, goes straight to the sync.
 *
 * A keeper not claimed within train.elastic.wait_s (the caller's code
 * hangs), one whose round fails (a rank of the formation died: the others
 * re-form, which they could not with this worker's main thread still
 * loading) and one whose worker ends before its first call
 * (hora_comm_destroy), each while not claimed, make the joiner leave the job: it leaves the
 * membership and breaks the communicator, so that the others' round fails
 * at once and they re-form without it; every call of the joiner's fails
 * with HORA_ERR_STALL saying why.
 */
#include "comm_internal.h"
#include "log.h"

#include "net/membership/membership.h"
#include "net/util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define KEEP_ROUND_MS 100 /* at most: a quarter of transport.io_timeout_ms where that is less */

static _Thread_local bool in_keeper; /* this thread is a keeper: its calls claim nothing */

/* Wait on c->cv (mu held) until claimed, abandoned or ms have passed. */
static void keep_nap(struct hora_comm *c, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts); /* pthread_cond_timedwait's clock */
	ts.tv_nsec += (long)ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	while (!c->keep_claimed && !c->keep_abandon && pthread_cond_timedwait(&c->cv, &c->mu, &ts) != ETIMEDOUT)
		;
}

/* The keeper gives up (why: what happened): the worker leaves the job, the
 * communicator breaks (the others' round fails now, naming this rank, not
 * at their io timeout) and every call of this worker's fails with
 * HORA_ERR_STALL and the message. Its stop wins over the monitor's (which
 * stops first): this worker is out of the membership, it cannot re-form. */
static int keep_give_up(struct hora_comm *c, const char *why)
{
	atomic_store(&c->monitor_stop, true);
	char msg[sizeof(c->stop_msg)];
	snprintf(msg, sizeof(msg), "%s: this worker left the job before it was ready", why);
	pthread_mutex_lock(&c->mu);
	/* the monitor's stop, if it came first (a death while this worker
	 * loaded), is in why; nothing of this worker's reads the message
	 * before its first call, which waits for the keeper */
	memcpy(c->stop_msg, msg, sizeof(msg));
	atomic_store_explicit(&c->stopped, HORA_ERR_STALL, memory_order_release);
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	HORA_LOGW("%s", c->stop_msg);
	if (c->owned_m)
		hora_net_membership_leave(c->owned_m);
	hora_net_comm_fail(c->net, HORA_ERR_STALL, c->stop_msg);
	return HORA_ERR_STALL;
}

/* Rounds until every rank says 1. keeper: say 1 once claimed, until then
 * 0, a round every KEEP_ROUND_MS; others say 1 at once. A keeper ends on
 * its own only by giving up: not claimed within wait_s, a round failed
 * (a rank of the formation died: the others re-form, and they could not
 * with this worker's main thread still loading; so it leaves them), or
 * the worker ends (hora_comm_destroy) before its first call. */
static int rounds(struct hora_comm *c, bool keeper)
{
	const double t0 = hora_clock_s();
	const int io_ms = c->net ? hora_net_comm_io_timeout_ms(c->net) : 0;
	const int nap_ms = io_ms > 0 && io_ms / 4 < KEEP_ROUND_MS ? io_ms / 4 : KEEP_ROUND_MS;
	char why[400];
	for (int n = 0;; n++) {
		int32_t v = 1;
		if (keeper) {
			pthread_mutex_lock(&c->mu);
			if (n)
				keep_nap(c, nap_ms);
			v = c->keep_claimed;
			const bool abandon = c->keep_abandon && !v;
			pthread_mutex_unlock(&c->mu);
			if (abandon)
				return keep_give_up(c, "the worker ended before its first call");
			if (!v && hora_clock_s() - t0 > c->keep_wait_s) {
				snprintf(why, sizeof(why), "admitted to the job %.0f s ago, this worker made no call "
					 "since (its data or model still loading: train.elastic.wait_s %.0f)",
					 hora_clock_s() - t0, c->keep_wait_s);
				return keep_give_up(c, why);
			}
		}
		const int rc = hora_allreduce(c, &v, &v, 1, HORA_I32, HORA_MIN);
		if (rc && keeper) {
			pthread_mutex_lock(&c->mu);
			const bool ready = c->keep_claimed && !c->keep_abandon;
			pthread_mutex_unlock(&c->mu);
			if (ready) /* claimed meanwhile: its own call fails and it re-forms */
				return rc;
			snprintf(why, sizeof(why), "a readiness round of view %llu failed while this worker loaded "
				 "(%s)", (unsigned long long)hora_comm_view(c), hora_comm_last_error(c));
			return keep_give_up(c, why);
		}
		if (rc)
			return rc;
		if (v) {
			if (!keeper && hora_clock_s() - t0 >= 1.0)
				HORA_LOGI("view %llu: waited %.1f s for every worker of it to be ready (a joiner "
					  "loading its data or model, or a slower start)",
					  (unsigned long long)hora_comm_view(c), hora_clock_s() - t0);
			return 0;
		}
	}
}

static void *keeper_main(void *arg)
{
	struct hora_comm *c = arg;
	in_keeper = true;
	const int rc = rounds(c, true);
	pthread_mutex_lock(&c->mu);
	c->ready_done = !rc;
	c->keeping = false;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int hora_comm_keep_start(struct hora_comm *c, double wait_s)
{
	pthread_mutex_lock(&c->mu);
	c->keep_wait_s = wait_s > 0 ? wait_s : 600;
	c->keeping = true;
	c->keep_claimed = false;
	c->ready_done = false;
	int rc = pthread_create(&c->keeper, NULL, keeper_main, c);
	if (rc)
		c->keeping = false; /* the first call of its own runs the rounds, at once */
	else
		atomic_store_explicit(&c->keeper_live, true, memory_order_release);
	pthread_mutex_unlock(&c->mu);
	return -rc;
}

/* Tell a live keeper this worker is ready (claim) or ends (abandon), wait
 * for it to end its rounds, and join it (the first caller to see it does). */
static void keep_end(struct hora_comm *c, bool abandon)
{
	pthread_mutex_lock(&c->mu);
	if (abandon)
		c->keep_abandon = true;
	else
		c->keep_claimed = true;
	pthread_cond_broadcast(&c->cv);
	while (c->keeping)
		pthread_cond_wait(&c->cv, &c->mu);
	const bool join = atomic_exchange(&c->keeper_live, false);
	pthread_mutex_unlock(&c->mu);
	if (join)
		pthread_join(c->keeper, NULL);
}

void hora_comm_keep_claim(struct hora_comm *c)
{
	if (atomic_load_explicit(&c->keeper_live, memory_order_acquire) && !in_keeper)
		keep_end(c, false);
}

void hora_comm_keep_abandon(struct hora_comm *c)
{
	if (atomic_load_explicit(&c->keeper_live, memory_order_acquire))
		keep_end(c, true);
}

int hora_comm_await_ready(struct hora_comm *c)
{
	hora_comm_keep_claim(c);
	pthread_mutex_lock(&c->mu);
	const bool done = c->ready_done;
	pthread_mutex_unlock(&c->mu);
	if (done || !c->elastic)
		return 0;
	const int rc = rounds(c, false);
	pthread_mutex_lock(&c->mu);
	c->ready_done = !rc;
	pthread_mutex_unlock(&c->mu);
	return rc;
}
