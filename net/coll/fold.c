/* fold.c - the single-copy allreduce's fold in one pass (f32, sum or
 * avg): each rank sums its shard of every local rank's buffer in rank
 * order, scales it (AVG) and stores it into every buffer, so each element
 * is read once from each buffer and written once to each. The general
 * loop (stage_window.c) reduces into an 8 KiB block, scales it and copies
 * it out: three passes over it, three times the time for two ranks. */
#include "net/coll/reduce.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx")))
static size_t fold_avx(float *const *b, int n, size_t cnt, int div)
{
	const __m256 s = _mm256_set1_ps(div > 0 ? 1.0f / (float)div : 1.0f);
	size_t i = 0;
	if (n == 2) { /* two workers' gradients: the pointers in registers */
		float *x = b[0], *y = b[1];
		for (; i + 8 <= cnt; i += 8) {
			__m256 v = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));
			if (div > 0)
				v = _mm256_mul_ps(v, s);
			_mm256_storeu_ps(x + i, v);
			_mm256_storeu_ps(y + i, v);
		}
		return i;
	}
	for (; i + 8 <= cnt; i += 8) {
		__m256 v = _mm256_add_ps(_mm256_loadu_ps(b[0] + i), _mm256_loadu_ps(b[1] + i));
		for (int l = 2; l < n; l++)
			v = _mm256_add_ps(v, _mm256_loadu_ps(b[l] + i));
		if (div > 0)
			v = _mm256_mul_ps(v, s);
		for (int l = 0; l < n; l++)
			_mm256_storeu_ps(b[l] + i, v);
	}
	return i;
}
#else
static size_t fold_avx(float *const *b, int n, size_t cnt, int div)
{
	(void)b, (void)n, (void)cnt, (void)div;
	return 0;
}
#endif

void hora_net_fold_f32(float *const *b, int n, size_t cnt, int div)
{
	size_t i = n >= 2 && hora_net_have_avx2() ? fold_avx(b, n, cnt, div) : 0;
	const float s = div > 0 ? 1.0f / (float)div : 1.0f;
	for (; i < cnt; i++) {
		float v = b[0][i];
		for (int l = 1; l < n; l++)
			v += b[l][i];
		if (div > 0)
			v *= s;
		for (int l = 0; l < n; l++)
			b[l][i] = v;
	}
}
