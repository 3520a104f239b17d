/* optim.c - optimizers over one flat parameter buffer: SGD (momentum,
 * Nesterov, coupled weight decay) and Adam, plus the learning-rate schedule
 * (linear warm-up, then constant or cosine).
 *
 * One pass over params/grads/state per step; the loops are unit-stride and
 * restrict-qualified so gcc vectorises them. Not here: gradient averaging
 * (that is the distributed optimizer's job, before step).
 */
#include "hora.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct hora_optim {
	struct hora_optim_config cfg;
	size_t n;
	int64_t t;  /* steps taken (Adam bias correction) */
	float *m;   /* SGD velocity / Adam first moment; NULL for plain SGD */
	float *v;   /* Adam second moment */
};

int hora_optim_create(const struct hora_optim_config *cfg, size_t nparams, struct hora_optim **out)
{
	*out = NULL;
	if (!(cfg->lr > 0) || cfg->momentum < 0 || cfg->momentum >= 1 || cfg->weight_decay < 0 ||
	    (cfg->nesterov && cfg->momentum <= 0))
		return -EINVAL;
	if (cfg->kind == HORA_OPTIM_ADAM &&
	    (cfg->beta1 < 0 || cfg->beta1 >= 1 || cfg->beta2 < 0 || cfg->beta2 >= 1 || !(cfg->eps > 0)))
		return -EINVAL;
	struct hora_optim *o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->cfg = *cfg;
	o->n = nparams;
	int need_m = cfg->kind == HORA_OPTIM_ADAM || cfg->momentum > 0;
	if (need_m && !(o->m = calloc(nparams ? nparams : 1, sizeof(float))))
		goto fail;
	if (cfg->kind == HORA_OPTIM_ADAM && !(o->v = calloc(nparams ? nparams : 1, sizeof(float))))
		goto fail;
	*out = o;
	return 0;
fail:
	hora_optim_destroy(o);
	return -ENOMEM;
}

void hora_optim_destroy(struct hora_optim *o)
{
	if (!o)
		return;
	free(o->m);
	free(o->v);
	free(o);
}

static void sgd_plain(float *restrict p, const float *restrict g, size_t n, float lr, float wd)
{
	if (wd == 0.0f)
		for (size_t i = 0; i < n; i++)
			p[i] -= lr * g[i];
	else
		for (size_t i = 0; i < n; i++)
			p[i] -= lr * (g[i] + wd * p[i]);
}

static void sgd_momentum(float *restrict p, const float *restrict g, float *restrict m, size_t n,
			 float lr, float mu, float wd, int nesterov)
{
	if (nesterov)
		for (size_t i = 0; i < n; i++) {
			float gi = g[i] + wd * p[i];
			float mi = mu * m[i] + gi;
			m[i] = mi;
			p[i] -= lr * (gi + mu * mi);
		}
	else
		for (size_t i = 0; i < n; i++) {
			float mi = mu * m[i] + g[i] + wd * p[i];
			m[i] = mi;
			p[i] -= lr * mi;
		}
}

static void adam(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
		 size_t n, float lr_t, float b1, float b2, float eps_t, float wd)
{
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] + wd * p[i];
		float mi = b1 * m[i] + (1.0f - b1) * gi;
		float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		p[i] -= lr_t * mi / (sqrtf(vi) + eps_t);
	}
}

void hora_optim_step(struct hora_optim *o, float *params, const float *grads, double lr)
{
	const struct hora_optim_config *c = &o->cfg;
	o->t++;
	if (c->kind == HORA_OPTIM_ADAM) {
		/* Bias correction folded into the step size (Kingma & Ba, sec. 2):
		 * lr_t = lr sqrt(1-b2^t)/(1-b1^t), eps_t = eps sqrt(1-b2^t). */
		double bc1 = 1.0 - pow(c->beta1, (double)o->t);
		double bc2 = sqrt(1.0 - pow(c->beta2, (double)o->t));
		adam(params, grads, o->m, o->v, o->n, (float)(lr * bc2 / bc1), (float)c->beta1,
		     (float)c->beta2, (float)(c->eps * bc2), (float)c->weight_decay);
	} else if (c->momentum > 0) {
		sgd_momentum(params, grads, o->m, o->n, (float)lr, (float)c->momentum,
			     (float)c->weight_decay, c->nesterov);
	} else {
		sgd_plain(params, grads, o->n, (float)lr, (float)c->weight_decay);
	}
}

double hora_lr_at(const struct hora_optim_config *c, int64_t step, int64_t steps_per_epoch,
		  int64_t total_steps, int nworkers)
{
	double peak = c->lr * (c->scale_lr_by_size && nworkers > 1 ? nworkers : 1);
	int64_t warm = (int64_t)llround(c->warmup_epochs * (double)steps_per_epoch);
	if (warm > 0 && step < warm) {
		/* Horovod's warm-up goes from lr to lr*size; with one worker (or no
		 * scaling) it ramps from ~0 to lr. */
		double start = peak > c->lr ? c->lr : 0.0;
		return start + (peak - start) * (double)(step + 1) / (double)warm;
	}
	if (c->schedule == HORA_LR_COSINE && total_steps > warm) {
		double t = (double)(step - warm) / (double)(total_steps - warm);
		if (t > 1)
			t = 1;
		return peak * 0.5 * (1.0 + cos(M_PI * t));
	}
	return peak;
}

/* ---- state for checkpoints (core/checkpoint.c) ------------------------------ */

size_t hora_optim_state_bytes(const struct hora_optim *o)
{
	return sizeof(int64_t) + (o->m ? o->n * sizeof(float) : 0) + (o->v ? o->n * sizeof(float) : 0);
}

void hora_optim_state_save(const struct hora_optim *o, uint8_t *out)
{
	memcpy(out, &o->t, sizeof(int64_t));
	out += sizeof(int64_t);
	if (o->m) {
		memcpy(out, o->m, o->n * sizeof(float));
		out += o->n * sizeof(float);
	}
	if (o->v)
		memcpy(out, o->v, o->n * sizeof(float));
}

int hora_optim_state_load(struct hora_optim *o, const uint8_t *in, size_t len)
{
	if (len != hora_optim_state_bytes(o))
		return -EINVAL;
	memcpy(&o->t, in, sizeof(int64_t));
	in += sizeof(int64_t);
	if (o->m) {
		memcpy(o->m, in, o->n * sizeof(float));
		in += o->n * sizeof(float);
	}
	if (o->v)
		memcpy(o->v, in, o->n * sizeof(float));
	return 0;
}
