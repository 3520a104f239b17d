/* distopt.c - the distributed optimizer: tensor fusion and gradient
 * averaging overlapped with backward.
 *
 * Backward reports gradient ranges as they become final, output layer
 * first (hora_grads_ready_fn). Consecutive ranges are adjacent in the flat
 * gradient buffer (the layout tiles it in order), so a fusion buffer is
 * simply a contiguous slice of the gradients, averaged in place: no packing
 * copy. When a buffer closes, its allreduce is queued on the communicator's
 * background thread and backward goes on; the step waits for all of them
 * and then runs the wrapped optimizer on the average.
 *
 * All ranks must cut the same buffers, or their calls would not match. By
 * default buffers are cut by size only, which every rank computes alike and
 * which keeps runs reproducible (and --resume bitwise equal to an
 * uninterrupted run: buffer boundaries decide each element's summation
 * order). With a cycle time, the first step cuts by size while rank 0 times
 * when each range became ready; it then plans buffers with both the byte
 * threshold and the cycle time, broadcasts the plan once, and every rank
 * follows it from the second step on.
 */
#include "comm.h"
#include "distopt.h"
#include "log.h"
#include "net/coll/reduce.h"
#include "net/util/clock.h"
#include "hora.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

struct bucket {
	size_t off, cnt;
	struct hora_request *req; /* NULL: ran inline, times in s, e */
	int events;               /* ranges in it */
	double s, e;
};

struct hora_dist_optim {
	struct hora_comm *c;
	struct hora_optim *inner;
	size_t nparams;
	struct hora_fusion_config fc;
	float *grads;
	double weight;
	uint16_t *comp; /* fusion.compression: the gradients in 16 bits, same offsets */
	/* the plan: close the buffer after event k when close_after[k] */
	int planned;
	int32_t *close_after;
	double *ev_time;       /* first step: when each range was ready */
	size_t *ev_off, *ev_cnt; /* first step: the ranges */
	int nev, capev, last_nev; /* last_nev: ranges of the last complete step */
	/* the open buffer */
	int open;
	size_t cur_off, cur_cnt;
	int cur_events;
	struct bucket *b;
	int nb, capb;
	int err;
	char msg[256];      /* why err, when it is not the communicator's */
	size_t expect_end;  /* the next range must end here (ranges run down to 0) */
	/* this step */
	double t_begin, t_fb_end;
	struct hora_dist_stats st;
	struct hora_timeline *tl;
};

int hora_dist_optim_create(struct hora_comm *c, struct hora_optim *inner, size_t nparams,
			   const struct hora_fusion_config *fusion, struct hora_dist_optim **out)
{
	*out = NULL;
	if (!c || !inner)
		return -EINVAL;
	struct hora_dist_optim *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->c = c;
	d->inner = inner;
	d->nparams = nparams;
	d->fc.threshold_bytes = fusion && fusion->threshold_bytes ? fusion->threshold_bytes : 1 << 20;
	d->fc.cycle_time_ms = fusion && fusion->cycle_time_ms > 0 ? fusion->cycle_time_ms : 0.0;
	/* the environment's (hora_init) win, as in Horovod */
	const struct hora_fusion_override *ov = hora_comm_fusion_override(c);
	if (ov->has_threshold)
		d->fc.threshold_bytes = ov->threshold_bytes;
	if (ov->has_cycle_time)
		d->fc.cycle_time_ms = ov->cycle_time_ms;
	d->fc.compression = fusion ? fusion->compression : HORA_COMPRESSION_NONE;
	d->fc.single_copy = fusion ? fusion->single_copy : 0;
	if ((unsigned)d->fc.compression > HORA_COMPRESSION_BF16) {
		free(d);
		return -EINVAL;
	}
	const bool comp = d->fc.compression != HORA_COMPRESSION_NONE;
	const size_t cb = (nparams ? nparams : 1) * sizeof(uint16_t);
	if (comp && !(d->comp = d->fc.single_copy ? hora_comm_mem_alloc(c, cb) : malloc(cb))) {
		free(d);
		return -ENOMEM;
	}
	d->weight = 1.0;
	d->planned = d->fc.cycle_time_ms <= 0; /* sizes only: the same plan from the first step */
	*out = d;
	return 0;
}

void hora_dist_optim_destroy(struct hora_dist_optim *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->nb; i++)
		if (d->b[i].req)
			hora_wait(d->b[i].req);
	free(d->b);
	free(d->close_after);
	free(d->ev_time);
	free(d->ev_off);
	free(d->ev_cnt);
	if (d->fc.single_copy)
		hora_comm_mem_free(d->c, d->comp);
	else
		free(d->comp);
	free(d);
}

void hora_dist_optim_set_timeline(struct hora_dist_optim *d, struct hora_timeline *tl)
{
	d->tl = tl;
}

const struct hora_fusion_config *hora_dist_optim_fusion(const struct hora_dist_optim *d)
{
	return &d->fc;
}

void hora_dist_optim_begin(struct hora_dist_optim *d, float *grads, double weight)
{
	for (int i = 0; i < d->nb; i++) /* a step abandoned halfway: its averages end first */
		if (d->b[i].req) {
			hora_wait(d->b[i].req);
			d->b[i].req = NULL;
		}
	d->expect_end = d->nparams;
	d->grads = grads;
	d->weight = weight;
	d->nev = 0;
	d->open = 0;
	d->nb = 0;
	d->t_begin = hora_clock_s();
}

/* Queue the open buffer's average on the background thread, or (inline,
 * for the last one at step time) run it here: with nothing queued ahead it
 * then costs no thread hand-off at all. */
static void close_bucket(struct hora_dist_optim *d, bool inline_now)
{
	if (!d->open)
		return;
	d->open = 0;
	if (d->err)
		return;
	if (d->nb == d->capb) {
		int cap = d->capb ? 2 * d->capb : 16;
		struct bucket *nb = realloc(d->b, (size_t)cap * sizeof(*nb));
		if (!nb) {
			d->err = -ENOMEM;
			return;
		}
		d->b = nb;
		d->capb = cap;
	}
	float *g = d->grads + d->cur_off;
	if (d->weight == 0.0) /* no samples here: exactly nothing, even from inf */
		memset(g, 0, d->cur_cnt * sizeof(float));
	else if (d->weight != 1.0) { /* this rank's share of an uneven global batch */
		const float w = (float)d->weight;
		for (size_t i = 0; i < d->cur_cnt; i++)
			g[i] *= w;
	}
	struct bucket *b = &d->b[d->nb];
	*b = (struct bucket){.off = d->cur_off, .cnt = d->cur_cnt, .events = d->cur_events};
	void *buf = g;
	enum hora_dtype t = HORA_F32;
	if (d->fc.compression != HORA_COMPRESSION_NONE) { /* 16 bits on the wire and in the sums */
		const bool bf16 = d->fc.compression == HORA_COMPRESSION_BF16;
		hora_net_f32_to_half_n(g, d->comp + d->cur_off, d->cur_cnt, bf16);
		buf = d->comp + d->cur_off;
		t = bf16 ? HORA_BF16 : HORA_F16;
	}
	int rc;
	if (inline_now) {
		b->s = hora_clock_s();
		rc = hora_allreduce(d->c, buf, buf, d->cur_cnt, t, HORA_AVG);
		b->e = hora_clock_s();
	} else {
		rc = hora_allreduce_async(d->c, buf, buf, d->cur_cnt, t, HORA_AVG, &b->req);
	}
	if (rc)
		d->err = rc;
	else
		d->nb++;
}

/* the first step records every range; later steps have exactly as many */
static int grow_events(struct hora_dist_optim *d)
{
	if (d->planned && d->fc.cycle_time_ms > 0)
		return -EPROTO; /* more ranges than in the planned step: the model changed */
	int cap = d->capev ? 2 * d->capev : 64;
	double *t = realloc(d->ev_time, (size_t)cap * sizeof(*t));
	if (t)
		d->ev_time = t;
	size_t *o = realloc(d->ev_off, (size_t)cap * sizeof(*o));
	if (o)
		d->ev_off = o;
	size_t *n = realloc(d->ev_cnt, (size_t)cap * sizeof(*n));
	if (n)
		d->ev_cnt = n;
	int32_t *p = realloc(d->close_after, (size_t)cap * sizeof(*p));
	if (p)
		d->close_after = p;
	if (!t || !o || !n || !p)
		return -ENOMEM;
	d->capev = cap;
	return 0;
}

void hora_dist_optim_grads_ready(void *arg, int layer, size_t offset, size_t count)
{
	struct hora_dist_optim *d = arg;
	if (d->err)
		return;
	if (offset + count != d->expect_end || count > d->expect_end) {
		snprintf(d->msg, sizeof(d->msg),
			 "the model reported gradients [%zu, %zu) of layer %d ready where a range ending at "
			 "%zu was due: ranges must run down from %zu to 0, each right below the previous "
			 "(model/hora_model.h)",
			 offset, offset + count, layer, d->expect_end, d->nparams);
		d->err = -EPROTO;
		return;
	}
	d->expect_end = offset;
	int rc;
	if (d->nev >= d->capev && (rc = grow_events(d))) {
		d->err = rc;
		return;
	}
	const int k = d->nev++;
	if (!d->planned || d->fc.cycle_time_ms <= 0) {
		d->ev_time[k] = hora_clock_s();
		d->ev_off[k] = offset;
		d->ev_cnt[k] = count;
	}
	/* a range that does not sit right below the open buffer starts a new one */
	if (d->open && offset + count != d->cur_off)
		close_bucket(d, false);
	if (d->open) {
		d->cur_off = offset;
		d->cur_cnt += count;
		d->cur_events++;
	} else {
		d->open = 1;
		d->cur_off = offset;
		d->cur_cnt = count;
		d->cur_events = 1;
	}
	bool timed = d->fc.cycle_time_ms > 0 && d->planned;
	bool close = timed ? d->close_after[k] != 0 : d->cur_cnt * sizeof(float) >= d->fc.threshold_bytes;
	if (close)
		close_bucket(d, false);
}

/* rank 0 cuts buffers by threshold and cycle time from the first step's
 * timings; everyone gets the plan */
static int make_plan(struct hora_dist_optim *d)
{
	const int n = d->nev;
	if (hora_rank(d->c) == 0) {
		size_t bytes = 0;
		double t_first = 0;
		for (int k = 0; k < n; k++) {
			if (!bytes)
				t_first = d->ev_time[k];
			bytes += d->ev_cnt[k] * sizeof(float);
			bool late = k + 1 < n && (d->ev_time[k + 1] - t_first) * 1e3 > d->fc.cycle_time_ms;
			bool gap = k + 1 < n && d->ev_off[k + 1] + d->ev_cnt[k + 1] != d->ev_off[k];
			d->close_after[k] = bytes >= d->fc.threshold_bytes || late || k == n - 1;
			if (d->close_after[k] || gap)
				bytes = 0;
		}
	}
	int rc = hora_broadcast(d->c, d->close_after, (size_t)n, HORA_I32, 0);
	if (!rc)
		d->planned = 1;
	return rc;
}

hora_grads_ready_fn hora_dist_optim_ready_fn(const struct hora_dist_optim *d)
{
	/* at a threshold of exactly the gradients' size the last piece closes
	 * the buffer: pieces then, so that the whole never closes early */
	const bool pieces = d->fc.cycle_time_ms > 0 || d->fc.threshold_bytes <= d->nparams * sizeof(float);
	return pieces ? hora_dist_optim_grads_ready : NULL;
}

int hora_dist_optim_step(struct hora_dist_optim *d, float *params, double lr)
{
	d->t_fb_end = hora_clock_s();
	/* no range reported where no callback was due: all at once (where one
	 * was due, the check below names the model's missing ranges) */
	if (!d->err && !d->nev && d->expect_end == d->nparams && d->nparams && !hora_dist_optim_ready_fn(d))
		hora_dist_optim_grads_ready(d, 0, 0, d->nparams);
	if (!d->err && d->expect_end) {
		snprintf(d->msg, sizeof(d->msg),
			 "the model reported only the gradients from %zu to %zu ready (of %zu): every "
			 "parameter's must be, once a step (model/hora_model.h)",
			 d->expect_end, d->nparams, d->nparams);
		d->err = -EPROTO; /* the buffers already queued are still waited for below */
	}
	double t_wait0 = hora_clock_s(), busy = 0, hidden = 0;
	close_bucket(d, true); /* the last buffer: here, behind the queued ones */
	int rc = d->err;
	for (int i = 0; i < d->nb; i++) {
		double s = d->b[i].s, e = d->b[i].e;
		if (d->b[i].req) {
			int r2 = hora_wait_timed(d->b[i].req, &s, &e);
			d->b[i].req = NULL;
			if (!rc)
				rc = r2;
		}
		if (e > s) {
			busy += e - s;
			double hs = s > d->t_begin ? s : d->t_begin, he = e < d->t_fb_end ? e : d->t_fb_end;
			if (he > hs)
				hidden += he - hs;
			if (d->tl)
				hora_timeline_span(d->tl, 1, "allreduce", s, e,
						   d->b[i].cnt * (d->fc.compression != HORA_COMPRESSION_NONE ? 2 : sizeof(float)));
		}
	}
	double t_wait1 = hora_clock_s();
	if (d->tl) {
		hora_timeline_span(d->tl, 0, "forward_backward", d->t_begin, d->t_fb_end, 0);
		if (t_wait1 > t_wait0)
			hora_timeline_span(d->tl, 0, "wait", t_wait0, t_wait1, 0);
	}
	d->last_nev = d->nev;
	d->st.steps++;
	d->st.allreduce_s += busy;
	d->st.hidden_s += hidden;
	d->st.wait_s += t_wait1 - t_wait0;
	d->st.buffers += d->nb;
	if (!rc && d->fc.compression != HORA_COMPRESSION_NONE)
		for (int i = 0; i < d->nb; i++)
			hora_net_half_to_f32_n(d->comp + d->b[i].off, d->grads + d->b[i].off, d->b[i].cnt,
					       d->fc.compression == HORA_COMPRESSION_BF16);
	if (rc) {
		d->err = rc;
		return rc;
	}
	if (!d->planned && (rc = make_plan(d)))
		return d->err = rc;
	double t0 = hora_clock_s();
	hora_optim_step(d->inner, params, d->grads, lr);
	if (d->tl)
		hora_timeline_span(d->tl, 0, "optimizer_step", t0, hora_clock_s(), 0);
	d->nb = 0;
	return 0;
}

int hora_dist_optim_replay_zero(struct hora_dist_optim *d)
{
	if (!d->last_nev || d->fc.cycle_time_ms > 0)
		return -ENOENT;
	memset(d->grads, 0, d->nparams * sizeof(float));
	const int n = d->last_nev;
	for (int k = 0; k < n; k++) /* ev_off/ev_cnt hold every step's ranges in sizes-only mode */
		hora_dist_optim_grads_ready(d, 0, d->ev_off[k], d->ev_cnt[k]);
	return 0;
}

const char *hora_dist_optim_error(const struct hora_dist_optim *d)
{
	if (d->msg[0])
		return d->msg;
	const char *m = hora_comm_last_error(d->c);
	return m && *m ? m : hora_strerror(d->err);
}

void hora_dist_optim_stats(const struct hora_dist_optim *d, struct hora_dist_stats *st)
{
	*st = d->st;
}
