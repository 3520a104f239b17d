/* fold2.c - the single-copy allreduce of two local ranks in one pass: each
 * rank sums its shard of the two buffers, scales it (AVG) and stores it in
 * both, so the block is read once from each and written once to each (the
 * generic path reduces, scales and copies: three passes over it). */
#include "net/coll/reduce.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx")))
static size_t fold2_avx(float *d1, float *d2, const float *x, const float *y, size_t n, int div)
{
	const __m256 s = _mm256_set1_ps(div > 0 ? 1.0f / (float)div : 1.0f);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));
		if (div > 0)
			v = _mm256_mul_ps(v, s);
		_mm256_storeu_ps(d1 + i, v);
		_mm256_storeu_ps(d2 + i, v);
	}
	return i;
}
#else
static size_t fold2_avx(float *d1, float *d2, const float *x, const float *y, size_t n, int div)
{
	(void)d1, (void)d2, (void)x, (void)y, (void)n, (void)div;
	return 0;
}
#endif

void hora_net_fold2_f32(float *d1, float *d2, const float *x, const float *y, size_t n, int div)
{
	size_t i = hora_net_have_avx2() ? fold2_avx(d1, d2, x, y, n, div) : 0;
	const float s = div > 0 ? 1.0f / (float)div : 1.0f;
	for (; i < n; i++) {
		float v = x[i] + y[i];
		if (div > 0)
			v *= s;
		d1[i] = v;
		d2[i] = v;
	}
}
