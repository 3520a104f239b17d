/* reduce.h - elementwise reductions for the collectives (net/ only). */
#ifndef HORA_NET_REDUCE_H
#define HORA_NET_REDUCE_H

#include <stddef.h>
#include <stdint.h>

enum hora_net_dtype { HORA_NET_F32, HORA_NET_F64, HORA_NET_F16, HORA_NET_BF16, HORA_NET_I32,
		      HORA_NET_I64, HORA_NET_DTYPES };
enum hora_net_op { HORA_NET_SUM, HORA_NET_AVG, HORA_NET_MIN, HORA_NET_MAX, HORA_NET_PROD,
		   HORA_NET_OPS };

size_t hora_net_dtype_size(enum hora_net_dtype t);
const char *hora_net_dtype_name(enum hora_net_dtype t);
const char *hora_net_op_name(enum hora_net_op op);

/* dst[i] = a[i] op b[i] for count elements (dst may alias a or b). AVG sums
 * (the caller divides once with hora_net_scale). f16/bf16 are reduced in
 * f32 and rounded to nearest even. */
void hora_net_reduce(void *dst, const void *a, const void *b, size_t count, enum hora_net_dtype t,
		     enum hora_net_op op);
/* x[i] /= n (AVG's final step; integers truncate toward zero). */
void hora_net_scale(void *x, size_t count, enum hora_net_dtype t, int n);
/* The single-copy fold in one pass (fold.c): for i < cnt, every b[l][i]
 * (l < n) becomes ((b[0][i] + b[1][i]) + ...) times 1/div when div > 0
 * (AVG): the bits of hora_net_reduce over the ranks in order, then
 * hora_net_scale. f32. */
void hora_net_fold_f32(float *const *b, int n, size_t cnt, int div);
/* whether the CPU runs AVX2 (and the OS saves its registers) */
int hora_net_have_avx2(void);

/* n floats to f16 (bf = 0) or bf16 (bf = 1) and back, round to nearest
 * even; the same bits as the scalar conversions below (F16C / AVX2 when the
 * CPU has them). */
void hora_net_f32_to_half_n(const float *in, uint16_t *out, size_t n, int bf);
void hora_net_half_to_f32_n(const uint16_t *in, float *out, size_t n, int bf);

/* f16/bf16 <-> f32 (round to nearest even), exposed for tests. */
float hora_net_f16_to_f32(uint16_t h);
uint16_t hora_net_f32_to_f16(float f);
float hora_net_bf16_to_f32(uint16_t h);
uint16_t hora_net_f32_to_bf16(float f);

/* Element i of p as a double, and setting it from one (f16/bf16 rounded to
 * nearest even, integers truncated): for tests and benches that fill and
 * check buffers of any dtype. */
double hora_net_value_get(const void *p, size_t i, enum hora_net_dtype t);
void hora_net_value_put(void *p, size_t i, enum hora_net_dtype t, double v);

#endif
