/* reduce.c - reduction loops. Each (dtype, op) is its own unit-stride loop
 * that gcc vectorises (dst may alias an input exactly; gcc checks overlap at
 * run time); f16/bf16 go through f32 in blocks of 256. */
#include "net/coll/reduce.h"

#include <math.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <string.h>

size_t hora_net_dtype_size(enum hora_net_dtype t)
{
	static const size_t sz[] = {4, 8, 2, 2, 4, 8};
	return t < HORA_NET_DTYPES ? sz[t] : 0;
}

const char *hora_net_dtype_name(enum hora_net_dtype t)
{
	static const char *const n[] = {"f32", "f64", "f16", "bf16", "i32", "i64"};
	return t < HORA_NET_DTYPES ? n[t] : "?";
}

const char *hora_net_op_name(enum hora_net_op op)
{
	static const char *const n[] = {"sum", "avg", "min", "max", "prod"};
	return op < HORA_NET_OPS ? n[op] : "?";
}

float hora_net_f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
	if (e == 0) {
		if (!m) {
			bits = s;
		} else { /* subnormal: normalise */
			e = 127 - 15 + 1;
			while (!(m & 0x400)) {
				m <<= 1;
				e--;
			}
			bits = s | e << 23 | (m & 0x3ff) << 13;
		}
	} else if (e == 31) {
		bits = s | 0x7f800000 | m << 13;
	} else {
		bits = s | (e + 127 - 15) << 23 | m << 13;
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t hora_net_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t s = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
	if (e == 0xff)
		return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
	int ee = (int)e - 127 + 15;
	if (ee >= 31)
		return (uint16_t)(s | 0x7c00);
	if (ee <= 0) {
		if (ee < -10)
			return (uint16_t)s;
		m |= 0x800000;
		int shift = 14 - ee;
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(s | r);
	}
	uint32_t r = (uint32_t)ee << 10 | m >> 13, rem = m & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
		r++; /* may carry into the exponent: still right (up to inf) */
	return (uint16_t)(s | r);
}

float hora_net_bf16_to_f32(uint16_t h)
{
	uint32_t x = (uint32_t)h << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

uint16_t hora_net_f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

#define LOOP(T, EXPR)                                                                             \
	do {                                                                                      \
		T *d = dst; /* may alias x or y exactly: no restrict; gcc    */                  \
		const T *x = a, *y = b; /* vectorises behind an overlap check */                  \
		for (size_t i = 0; i < n; i++)                                                    \
			d[i] = EXPR;                                                              \
	} while (0)
#define OPS(T)                                                                                    \
	switch (op) {                                                                             \
	case HORA_NET_SUM:                                                                        \
	case HORA_NET_AVG:                                                                        \
		LOOP(T, x[i] + y[i]);                                                             \
		break;                                                                            \
	case HORA_NET_MIN:                                                                        \
		LOOP(T, x[i] < y[i] ? x[i] : y[i]);                                               \
		break;                                                                            \
	case HORA_NET_MAX:                                                                        \
		LOOP(T, x[i] > y[i] ? x[i] : y[i]);                                               \
		break;                                                                            \
	case HORA_NET_PROD:                                                                       \
		LOOP(T, x[i] * y[i]);                                                             \
		break;                                                                            \
	default:                                                                                  \
		break;                                                                            \
	}

static void reduce_same(void *dst, const void *a, const void *b, size_t n, enum hora_net_dtype t,
			enum hora_net_op op)
{
	switch (t) {
	case HORA_NET_F32:
		OPS(float)
		break;
	case HORA_NET_F64:
		OPS(double)
		break;
	case HORA_NET_I32:
		OPS(int32_t)
		break;
	case HORA_NET_I64:
		OPS(int64_t)
		break;
	default:
		break;
	}
}

/* bf16 <-> f32 without branches, so the block loops vectorise; the same
 * bits as hora_net_bf16_to_f32 / hora_net_f32_to_bf16 */
static inline float bf2f(uint16_t h)
{
	union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
	return v.f;
}
static inline uint16_t f2bf(float f)
{
	union { float f; uint32_t u; } v = {.f = f};
	uint32_t x = v.u, r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, q = (x >> 16) | 0x40u;
	return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? q : r);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
/* f16 with the F16C conversions (round to nearest even, as the software
 * path; only NaN payloads may differ), picked at run time */
#define F16C_LOOP(OP)                                                                            \
	for (; i + 8 <= n; i += 8) {                                                               \
		__m256 u = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));             \
		__m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));             \
		_mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(OP(u, v), _MM_FROUND_TO_NEAREST_INT)); \
	}
__attribute__((target("avx,f16c"))) static size_t reduce_f16c(uint16_t *d, const uint16_t *x,
							     const uint16_t *y, size_t n,
							     enum hora_net_op op)
{
	size_t i = 0;
	switch (op) {
	case HORA_NET_SUM:
	case HORA_NET_AVG: F16C_LOOP(_mm256_add_ps) break;
	case HORA_NET_MIN: F16C_LOOP(_mm256_min_ps) break; /* (x < y ? x : y), NaN -> y, as C */
	case HORA_NET_MAX: F16C_LOOP(_mm256_max_ps) break;
	case HORA_NET_PROD: F16C_LOOP(_mm256_mul_ps) break;
	default: break;
	}
	return i; /* elements done; the caller finishes the tail */
}
__attribute__((target("avx,f16c"))) static size_t cvt_f16c(const float *in, uint16_t *out,
							     const uint16_t *hin, float *fout, size_t n)
{
	size_t i = 0;
	if (in)
		for (; i + 8 <= n; i += 8)
			_mm_storeu_si128((__m128i *)(out + i),
					 _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
	else
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(fout + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hin + i))));
	return i;
}

/* bf16 with AVX2 integer shifts: the same bits as f2bf (RNE, quiet NaN) */
#define BF_LOOP(OP)                                                                              \
	for (; i + 8 <= n; i += 8) {                                                               \
		__m256 u = _mm256_castsi256_ps(_mm256_slli_epi32(                                  \
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i))), 16));     \
		__m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(                                  \
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(y + i))), 16));     \
		__m256i r = _mm256_castps_si256(OP(u, v));                                         \
		__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(r, 16), one);                     \
		__m256i rnd = _mm256_srli_epi32(_mm256_add_epi32(r, _mm256_add_epi32(bias, lsb)), 16); \
		__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(r, absm), inf);                  \
		__m256i q = _mm256_or_si256(_mm256_srli_epi32(r, 16), qbit);                       \
		__m256i o = _mm256_blendv_epi8(rnd, q, nan);                                       \
		__m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(o, o), 0x08);             \
		_mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(p));                   \
	}
__attribute__((target("avx2"))) static size_t reduce_bf16_avx2(uint16_t *d, const uint16_t *x,
							       const uint16_t *y, size_t n,
							       enum hora_net_op op)
{
	const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff),
		      absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
		      qbit = _mm256_set1_epi32(0x40);
	size_t i = 0;
	switch (op) {
	case HORA_NET_SUM:
	case HORA_NET_AVG: BF_LOOP(_mm256_add_ps) break;
	case HORA_NET_MIN: BF_LOOP(_mm256_min_ps) break;
	case HORA_NET_MAX: BF_LOOP(_mm256_max_ps) break;
	case HORA_NET_PROD: BF_LOOP(_mm256_mul_ps) break;
	default: break;
	}
	return i;
}
/* CPU features from cpuid (gcc's and clang's __builtin_cpu_supports do not
 * agree on names): bit 0 = AVX usable (OS saves YMM), 1 = F16C, 2 = AVX2 */
static int cpu_features(void)
{
	static _Atomic int v = -1; /* any thread may ask first; all compute the same */
	int seen = atomic_load_explicit(&v, memory_order_relaxed);
	if (seen >= 0)
		return seen;
	unsigned a, b, c, d;
	int f = 0;
	if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) && (c & (1u << 28))) {
		unsigned lo, hi;
		__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		if ((lo & 6) == 6) { /* XMM and YMM state enabled */
			f |= 1;
			if (c & (1u << 29))
				f |= 2;
			if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 5)))
				f |= 4;
		}
	}
	atomic_store_explicit(&v, f, memory_order_relaxed);
	return f;
}
static int have_avx2(void)
{
	return (cpu_features() & 5) == 5;
}
static int have_f16c(void)
{
	return (cpu_features() & 3) == 3;
}
int hora_net_have_avx2(void)
{
	return have_avx2();
}
#else
int hora_net_have_avx2(void)
{
	return 0;
}
static size_t reduce_f16c(uint16_t *d, const uint16_t *x, const uint16_t *y, size_t n, enum hora_net_op op)
{
	(void)d, (void)x, (void)y, (void)n, (void)op;
	return 0;
}
static int have_f16c(void)
{
	return 0;
}
static size_t cvt_f16c(const float *in, uint16_t *out, const uint16_t *hin, float *fout, size_t n)
{
	(void)in, (void)out, (void)hin, (void)fout, (void)n;
	return 0;
}
static size_t reduce_bf16_avx2(uint16_t *d, const uint16_t *x, const uint16_t *y, size_t n, enum hora_net_op op)
{
	(void)d, (void)x, (void)y, (void)n, (void)op;
	return 0;
}
static int have_avx2(void)
{
	return 0;
}
#endif

static void reduce_half(void *dst, const void *a, const void *b, size_t n, bool bf,
			enum hora_net_op op)
{
	uint16_t *d = dst;
	const uint16_t *x = a, *y = b;
	size_t done = bf ? (have_avx2() ? reduce_bf16_avx2(d, x, y, n, op) : 0)
			 : (have_f16c() ? reduce_f16c(d, x, y, n, op) : 0);
	d += done, x += done, y += done, n -= done;
	float fx[256], fy[256];
	for (size_t i = 0; i < n; i += 256) {
		size_t k = n - i < 256 ? n - i : 256;
		if (bf) {
			for (size_t j = 0; j < k; j++) {
				fx[j] = bf2f(x[i + j]);
				fy[j] = bf2f(y[i + j]);
			}
		} else {
			for (size_t j = 0; j < k; j++) {
				fx[j] = hora_net_f16_to_f32(x[i + j]);
				fy[j] = hora_net_f16_to_f32(y[i + j]);
			}
		}
		reduce_same(fx, fx, fy, k, HORA_NET_F32, op);
		if (bf)
			for (size_t j = 0; j < k; j++)
				d[i + j] = f2bf(fx[j]);
		else
			for (size_t j = 0; j < k; j++)
				d[i + j] = hora_net_f32_to_f16(fx[j]);
	}
}

void hora_net_f32_to_half_n(const float *in, uint16_t *out, size_t n, int bf)
{
	size_t i = 0;
	if (bf) {
		for (; i < n; i++) /* branch-free: gcc vectorises it */
			out[i] = f2bf(in[i]);
		return;
	}
	if (have_f16c())
		i = cvt_f16c(in, out, NULL, NULL, n);
	for (; i < n; i++)
		out[i] = hora_net_f32_to_f16(in[i]);
}

void hora_net_half_to_f32_n(const uint16_t *in, float *out, size_t n, int bf)
{
	size_t i = 0;
	if (bf) {
		for (; i < n; i++)
			out[i] = bf2f(in[i]);
		return;
	}
	if (have_f16c())
		i = cvt_f16c(NULL, NULL, in, out, n);
	for (; i < n; i++)
		out[i] = hora_net_f16_to_f32(in[i]);
}

void hora_net_reduce(void *dst, const void *a, const void *b, size_t n, enum hora_net_dtype t,
		     enum hora_net_op op)
{
	if (t == HORA_NET_F16 || t == HORA_NET_BF16) {
		reduce_half(dst, a, b, n, t == HORA_NET_BF16, op);
		return;
	}
	reduce_same(dst, a, b, n, t, op);
}

void hora_net_scale(void *p, size_t n, enum hora_net_dtype t, int div)
{
	switch (t) {
	case HORA_NET_F32: {
		float *x = p, s = 1.0f / (float)div;
		for (size_t i = 0; i < n; i++)
			x[i] *= s;
		break;
	}
	case HORA_NET_F64: {
		double *x = p, s = 1.0 / div;
		for (size_t i = 0; i < n; i++)
			x[i] *= s;
		break;
	}
	case HORA_NET_I32: {
		int32_t *x = p;
		for (size_t i = 0; i < n; i++)
			x[i] /= div;
		break;
	}
	case HORA_NET_I64: {
		int64_t *x = p;
		for (size_t i = 0; i < n; i++)
			x[i] /= div;
		break;
	}
	case HORA_NET_F16:
	case HORA_NET_BF16: { /* in blocks through f32, with the vector conversions */
		uint16_t *x = p;
		const int bf = t == HORA_NET_BF16;
		float f[256];
		for (size_t i = 0; i < n; i += 256) {
			size_t k = n - i < 256 ? n - i : 256;
			hora_net_half_to_f32_n(x + i, f, k, bf);
			for (size_t j = 0; j < k; j++)
				f[j] /= (float)div;
			hora_net_f32_to_half_n(f, x + i, k, bf);
		}
		break;
	}
	default:
		break;
	}
}

double hora_net_value_get(const void *p, size_t i, enum hora_net_dtype t)
{
	switch (t) {
	case HORA_NET_F32: return ((const float *)p)[i];
	case HORA_NET_F64: return ((const double *)p)[i];
	case HORA_NET_F16: return hora_net_f16_to_f32(((const uint16_t *)p)[i]);
	case HORA_NET_BF16: return hora_net_bf16_to_f32(((const uint16_t *)p)[i]);
	case HORA_NET_I32: return ((const int32_t *)p)[i];
	case HORA_NET_I64: return (double)((const int64_t *)p)[i];
	default: return NAN;
	}
}

void hora_net_value_put(void *p, size_t i, enum hora_net_dtype t, double v)
{
	switch (t) {
	case HORA_NET_F32: ((float *)p)[i] = (float)v; break;
	case HORA_NET_F64: ((double *)p)[i] = v; break;
	case HORA_NET_F16: ((uint16_t *)p)[i] = hora_net_f32_to_f16((float)v); break;
	case HORA_NET_BF16: ((uint16_t *)p)[i] = hora_net_f32_to_bf16((float)v); break;
	case HORA_NET_I32: ((int32_t *)p)[i] = (int32_t)v; break;
	case HORA_NET_I64: ((int64_t *)p)[i] = (int64_t)v; break;
	default: break;
	}
}
