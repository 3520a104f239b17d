/* balance.c - train.balance: the global batch split among the ranks by
 * their measured speeds, so that a synchronous step waits less for the
 * slowest rank (a core the host gives less time, a slower machine). Not
 * the step itself (train.c) nor the averaging: each rank's gradient is
 * still weighted by its share, so the update is the global batch's mean.
 *
 * Every rank times its forward/backward per sample at every step. About
 * every HORA_BALANCE_WINDOW_S of training (the same steps on every rank:
 * the step count is global, and the next agreement's step is computed
 * from what every rank gathered) the ranks allgather the median of their
 * steps' seconds per sample and every rank computes the same weights from
 * the same numbers
 * (hora_balance_weights):
 * each rank's share of the summed speeds, moved halfway from the last
 * weights (damping: one noisy window moves a share by half its noise), each
 * within [0.75, 1.25] x the even share before the weights are scaled to
 * sum 1 (so at most 1.25 / 0.75 = 5/3 of it after); they head back to even
 * when no speed share is further off than the dead band: an uneven split
 * costs a pass over the gradients (each rank's scaled by its share before
 * the average), and an imbalance of x saves about x of a step, so the band
 * is that pass's reckoned seconds over the slowest rank's step
 * (hora_balance_band, at least 1 %): at batch 32 on two cores (a 0.17 ms
 * step, 407 KB of gradients) ~12 %, where a few percent of imbalance gained
 * less than the pass cost (bench/RESULTS.md, session 16); at batch 1024 (5
 * ms) 1 %, where one core 4-5 % slower than the other made the other wait
 * ~0.3 ms a step (session 17). A rank's share of a global batch
 * is the stretch between the rounded cumulative weights: contiguous, in
 * rank order, covering the batch, at least one sample each when the batch
 * has as many as ranks. The window is in time, not steps, and the rate its
 * median: a rank that shares its CPU loses it in scheduler slices of
 * milliseconds. When steps are much shorter than a slice, most steps run
 * at full speed and a few hold a whole slice, which the others wait for
 * whatever the shares are: the median sees full speed and keeps the
 * shares even (giving that rank fewer samples would only slow the steps
 * it runs). When steps are longer than slices, every step of that rank
 * is slowed alike, the median says so, and its share shrinks. The weights start even and start even again at an
 * elastic re-form (hora_run_dist_optim) or a resume.
 */
#include "balance.h"
#include "hora.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

struct hora_balance {
	int size;
	double *w;      /* the weights: sum 1, the same bits on every rank */
	double *t;      /* the last allgather: each rank's seconds per sample */
	double *steps;  /* this rank's steps' seconds per sample since the last agreement */
	int nsteps;
	int64_t agreements;
	int64_t next;   /* the step of the next agreement */
	double pass_s;  /* an uneven split's pass over the gradients, reckoned */
};

int hora_balance_create(int size, size_t grad_bytes, struct hora_balance **out)
{
	*out = NULL;
	if (size < 1)
		return -EINVAL;
	struct hora_balance *b = calloc(1, sizeof(*b));
	if (!b || !(b->w = malloc((size_t)size * sizeof(double))) ||
	    !(b->t = malloc((size_t)size * sizeof(double))) ||
	    !(b->steps = malloc(HORA_BALANCE_MAX_STEPS * sizeof(double)))) {
		hora_balance_destroy(b);
		return -ENOMEM;
	}
	b->size = size;
	b->next = HORA_BALANCE_MIN_STEPS;
	b->pass_s = (double)grad_bytes / HORA_BALANCE_PASS_BPS;
	for (int r = 0; r < size; r++)
		b->w[r] = 1.0 / size;
	*out = b;
	return 0;
}

void hora_balance_destroy(struct hora_balance *b)
{
	if (!b)
		return;
	free(b->w);
	free(b->t);
	free(b->steps);
	free(b);
}

void hora_balance_record(struct hora_balance *b, double seconds, int samples)
{
	if (b && samples > 0 && seconds > 0 && b->nsteps < HORA_BALANCE_MAX_STEPS)
		b->steps[b->nsteps++] = seconds / samples;
}

void hora_balance_weights(double *w, const double *t, int size, double band)
{
	double sum = 0;
	for (int r = 0; r < size; r++) {
		if (!(t[r] > 0) || !isfinite(t[r]))
			return; /* a rank measured nothing: keep the weights (every rank sees the same t) */
		sum += 1.0 / t[r];
	}
	/* the dead band, on the speed shares themselves: even shares cost
	 * nothing (train.c scales no gradient) */
	bool near = true;
	for (int r = 0; r < size; r++)
		near = near && fabs((1.0 / t[r]) / sum * size - 1.0) < band;
	const double lo = 0.75 / size, hi = 1.25 / size;
	double total = 0;
	for (int r = 0; r < size; r++) {
		const double target = near ? 1.0 / size : (1.0 / t[r]) / sum;
		const double x = 0.5 * w[r] + 0.5 * target;
		w[r] = x < lo ? lo : x > hi ? hi : x;
		total += w[r];
	}
	/* back to exactly even once it is within the band (halving never gets there) */
	bool even = true;
	for (int r = 0; r < size; r++) {
		w[r] /= total;
		even = even && fabs(w[r] * size - 1.0) < band / 4;
	}
	for (int r = 0; near && even && r < size; r++)
		w[r] = 1.0 / size;
}

bool hora_balance_due(const struct hora_balance *b, int64_t step)
{
	return b && step >= b->next;
}

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int hora_balance_agree(struct hora_balance *b, struct hora_comm *c, int64_t step, int64_t batch)
{
	double mine = 0; /* no step measured: 0, and the weights stay */
	if (b->nsteps) {
		qsort(b->steps, (size_t)b->nsteps, sizeof(double), cmp_double);
		mine = b->steps[b->nsteps / 2];
	}
	int rc = hora_allgather(c, &mine, b->t, 1, HORA_F64);
	if (rc)
		return rc;
	b->nsteps = 0;
	hora_balance_update(b, b->t, batch);
	/* the slowest rank's seconds a step at the new shares: the window in steps */
	double slowest = 0;
	for (int r = 0; r < b->size; r++)
		if (b->t[r] > 0 && isfinite(b->t[r]) && b->t[r] * b->w[r] * (double)batch > slowest)
			slowest = b->t[r] * b->w[r] * (double)batch;
	double k = slowest > 0 ? ceil(HORA_BALANCE_WINDOW_S / slowest) : HORA_BALANCE_MIN_STEPS;
	k = k < HORA_BALANCE_MIN_STEPS ? HORA_BALANCE_MIN_STEPS : k > HORA_BALANCE_MAX_STEPS ? HORA_BALANCE_MAX_STEPS : k;
	b->next = step + (int64_t)k;
	return 0;
}

double hora_balance_band(const struct hora_balance *b, const double *t, int64_t batch)
{
	double slowest = 0;
	for (int r = 0; r < b->size; r++)
		if (t[r] > slowest && isfinite(t[r]))
			slowest = t[r];
	const double step = slowest * (double)batch / b->size;
	const double band = step > 0 ? b->pass_s / step : 1.0;
	return band > HORA_BALANCE_MIN_BAND ? band : HORA_BALANCE_MIN_BAND;
}

void hora_balance_update(struct hora_balance *b, const double *t, int64_t batch)
{
	hora_balance_weights(b->w, t, b->size, hora_balance_band(b, t, batch));
	b->agreements++;
}

/* the cumulative boundary before rank j: rounded, strictly increasing
 * when total >= size (each rank at least one sample) */
static int64_t boundary(const struct hora_balance *b, int64_t total, int j)
{
	double cum = 0;
	int64_t prev = 0;
	for (int i = 1; i <= j; i++) {
		cum += b->w[i - 1];
		int64_t x = i == b->size ? total : llround((double)total * cum);
		if (total >= b->size) {
			if (x < prev + 1)
				x = prev + 1;
			if (x > total - (b->size - i))
				x = total - (b->size - i);
		}
		prev = x < prev ? prev : x;
	}
	return prev;
}

int64_t hora_balance_share(const struct hora_balance *b, int64_t total, int r, int *n)
{
	const int64_t lo = boundary(b, total, r), hi = boundary(b, total, r + 1);
	*n = (int)(hi - lo);
	return lo;
}

int64_t hora_balance_agreements(const struct hora_balance *b)
{
	return b ? b->agreements : 0;
}
