/* nn.c - dense-layer kernels shared by the built-in models.
 * Loops are written so gcc vectorises them at -O2/-O3 (no aliasing through
 * restrict-qualified pointers, unit strides). */
#include "nn.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void hora_nn_sgemm(struct hora_gemm_trace *t, bool trans_a, bool trans_b, int m, int n, int k,
		   const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	if (t) {
		if (t->n < HORA_GEMM_TRACE_MAX)
			t->calls[t->n++] = (struct hora_gemm_call){trans_a, trans_b, m, n, k,
								   lda, ldb, ldc, beta};
		else
			t->dropped = true;
	}
	cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
		    trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void hora_nn_bias_act(float *restrict z, const float *restrict bias, int rows, int n, bool relu)
{
	for (int r = 0; r < rows; r++) {
		float *restrict zr = z + (size_t)r * n;
		if (relu)
			for (int j = 0; j < n; j++) {
				float v = zr[j] + bias[j];
				zr[j] = v > 0.0f ? v : 0.0f;
			}
		else
			for (int j = 0; j < n; j++)
				zr[j] += bias[j];
	}
}

void hora_nn_softmax_xent(float *logits, const uint8_t *y, int rows, int c, float *dlogits,
			  struct hora_model_stats *stats)
{
	const float inv_rows = 1.0f / (float)rows;
	double loss = 0.0;
	int64_t correct = 0;
	for (int r = 0; r < rows; r++) {
		float *z = logits + (size_t)r * c;
		float mx = z[0];
		int arg = 0;
		for (int j = 1; j < c; j++)
			if (z[j] > mx) {
				mx = z[j];
				arg = j;
			}
		correct += arg == y[r];
		float sum = 0.0f;
		float zy = z[y[r]];
		float *d = dlogits ? dlogits + (size_t)r * c : NULL;
		for (int j = 0; j < c; j++) {
			float e = expf(z[j] - mx);
			sum += e;
			if (d)
				d[j] = e;
		}
		loss += (double)logf(sum) - (double)(zy - mx);
		if (d) {
			float s = inv_rows / sum;
			for (int j = 0; j < c; j++)
				d[j] *= s;
			d[y[r]] -= inv_rows;
		}
	}
	stats->loss_sum += loss;
	stats->correct += correct;
	stats->n += rows;
}

void hora_nn_bias_grad(const float *restrict dz, int rows, int n, float *restrict db)
{
	memcpy(db, dz, (size_t)n * sizeof(float));
	for (int r = 1; r < rows; r++) {
		const float *restrict d = dz + (size_t)r * n;
		for (int j = 0; j < n; j++)
			db[j] += d[j];
	}
}

void hora_nn_relu_backward(float *restrict d, const float *restrict h, size_t count)
{
	for (size_t i = 0; i < count; i++)
		d[i] = h[i] > 0.0f ? d[i] : 0.0f;
}

uint64_t hora_nn_rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
	return (double)(hora_nn_rng_next(s) >> 11) * 0x1.0p-53; /* [0,1) */
}

void hora_nn_init_he_normal(float *w, size_t count, int fan_in, uint64_t *s)
{
	const double sd = sqrt(2.0 / fan_in);
	for (size_t i = 0; i < count; i += 2) {
		double u1 = 1.0 - uniform01(s), u2 = uniform01(s); /* u1 in (0,1] */
		double r = sqrt(-2.0 * log(u1));
		w[i] = (float)(sd * r * cos(2.0 * M_PI * u2));
		if (i + 1 < count)
			w[i + 1] = (float)(sd * r * sin(2.0 * M_PI * u2));
	}
}

void hora_nn_init_glorot_uniform(float *w, size_t count, int fan_in, int fan_out, uint64_t *s)
{
	const double lim = sqrt(6.0 / (fan_in + fan_out));
	for (size_t i = 0; i < count; i++)
		w[i] = (float)((2.0 * uniform01(s) - 1.0) * lim);
}

int hora_nn_check_config(const struct hora_model_config *cfg, int max_hidden, char *err,
			 size_t errlen)
{
	if (cfg->input_dim <= 0 || cfg->input_dim > (1 << 24))
		return snprintf(err, errlen, "input_dim %d out of range 1..16777216", cfg->input_dim),
		       -EINVAL;
	if (cfg->num_classes < 2 || cfg->num_classes > 256)
		return snprintf(err, errlen, "num_classes %d out of range 2..256", cfg->num_classes),
		       -EINVAL;
	if (cfg->nhidden < 0 || cfg->nhidden > max_hidden)
		return snprintf(err, errlen, "%d hidden layers, this model takes 0..%d", cfg->nhidden,
				max_hidden),
		       -EINVAL;
	for (int i = 0; i < cfg->nhidden; i++)
		if (cfg->hidden[i] <= 0 || cfg->hidden[i] > (1 << 16))
			return snprintf(err, errlen, "hidden[%d] = %d out of range 1..65536", i,
					cfg->hidden[i]),
			       -EINVAL;
	if (cfg->max_batch <= 0 || cfg->max_batch > (1 << 20))
		return snprintf(err, errlen, "max_batch %d out of range 1..1048576", cfg->max_batch),
		       -EINVAL;
	return 0;
}
