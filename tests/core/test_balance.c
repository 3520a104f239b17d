/* test_balance.c - train.balance's arithmetic (core/balance.c): the weights
 * move halfway to the ranks' speed shares and stay within the clamp; the
 * dead band is the gradient pass's reckoned cost over the step; a rank
 * that measured nothing keeps everyone's weights; the shares of any batch
 * tile it in rank order with at least one sample each when it has as many
 * as ranks, and a slower rank's share is the smaller. The training with it
 * is in test_dtrain.c. */
#include "core/balance.h"
#include "core/run.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

Test(balance, weights_move_halfway_to_the_speed_shares_within_the_clamp)
{
	double w[2] = {0.5, 0.5};
	const double t[2] = {1.0, 2.0}; /* rank 1 takes twice as long a sample */
	hora_balance_weights(w, t, 2, 0.05);
	cr_assert_float_eq(w[0], 0.5 * 0.5 + 0.5 * (2.0 / 3.0), 1e-12, "w0 %g", w[0]);
	cr_assert_float_eq(w[0] + w[1], 1.0, 1e-12);
	for (int i = 0; i < 20; i++)
		hora_balance_weights(w, t, 2, 0.05);
	/* the speed share 2/3 is past the clamp 1.25 / 2 */
	cr_assert_float_eq(w[0], 0.625, 1e-12, "w0 %g", w[0]);
	cr_assert_float_eq(w[1], 0.375, 1e-12, "w1 %g", w[1]);
}

Test(balance, weights_near_even_are_made_even)
{
	double w[2] = {0.5, 0.5};
	const double t[2] = {1.0, 1.08}; /* 4 % apart: halfway moves w0 by ~1 % */
	for (int i = 0; i < 30; i++) {
		hora_balance_weights(w, t, 2, 0.05);
		cr_assert(w[0] == 0.5 && w[1] == 0.5, "round %d: %g %g", i, w[0], w[1]);
	}
	const double far[2] = {1.0, 1.3}; /* 13 % apart: past the dead band */
	hora_balance_weights(w, far, 2, 0.05);
	cr_assert_gt(w[0], 0.5);
}

/* the band is the gradient pass's cost over the step: the MNIST MLP's
 * 407 KB at 20 GB/s (20 us) against a 5.1 ms step at batch 1024 (5 us a
 * sample; the 1 % floor) and a 160 us step at batch 32 (12.7 %); a rank
 * 4 % slower is evened out at the first and left alone at the second */
Test(balance, the_dead_band_is_the_gradient_pass_over_the_step)
{
	struct hora_balance *b;
	cr_assert_eq(hora_balance_create(2, 407080, &b), 0);
	const double t[2] = {5e-6, 5.2e-6};
	cr_assert_float_eq(hora_balance_band(b, t, 2048), 0.01, 1e-12, "batch 1024: %g", hora_balance_band(b, t, 2048));
	const double want = 407080 / 20e9 / (5.2e-6 * 32);
	cr_assert_float_eq(hora_balance_band(b, t, 64), want, 1e-12, "batch 32: %g", hora_balance_band(b, t, 64));
	int n0, n1;
	hora_balance_update(b, t, 64);
	hora_balance_share(b, 64, 0, &n0);
	hora_balance_share(b, 64, 1, &n1);
	cr_assert(n0 == 32 && n1 == 32, "batch 32: shares %d and %d", n0, n1);
	hora_balance_update(b, t, 2048);
	hora_balance_share(b, 2048, 0, &n0);
	hora_balance_share(b, 2048, 1, &n1);
	cr_assert(n0 > 1024 && n1 < 1024 && n0 + n1 == 2048, "batch 1024: shares %d and %d", n0, n1);
	hora_balance_destroy(b);
}

Test(balance, a_rank_that_measured_nothing_keeps_the_weights)
{
	double w[3] = {0.3, 0.3, 0.4};
	const double bad[][3] = {{1, 0, 1}, {1, NAN, 1}, {1, INFINITY, 1}, {-1, 1, 1}};
	for (int k = 0; k < 4; k++) {
		hora_balance_weights(w, bad[k], 3, 0.05);
		cr_assert(w[0] == 0.3 && w[1] == 0.3 && w[2] == 0.4, "case %d changed the weights", k);
	}
}

static void check_tiling(struct hora_balance *b, int size, int64_t total)
{
	int64_t next = 0;
	for (int r = 0; r < size; r++) {
		int n;
		const int64_t lo = hora_balance_share(b, total, r, &n);
		cr_assert_eq(lo, next, "size %d total %lld: rank %d starts at %lld, not %lld", size, (long long)total, r,
			     (long long)lo, (long long)next);
		cr_assert_geq(n, total >= size ? 1 : 0, "size %d total %lld: rank %d has %d", size, (long long)total,
			      r, n);
		next = lo + n;
	}
	cr_assert_eq(next, total, "size %d total %lld: the shares end at %lld", size, (long long)total,
		     (long long)next);
}

Test(balance, shares_tile_every_batch_and_a_slow_rank_gets_fewer)
{
	for (int size = 1; size <= 8; size++) {
		struct hora_balance *b;
		cr_assert_eq(hora_balance_create(size, 407080, &b), 0);
		for (int64_t total = 0; total <= 100; total++)
			check_tiling(b, size, total); /* even */
		for (int round = 0; round < 30; round++) {
			/* rank r takes 1 + r / 4 seconds a sample, plus noise on odd
			 * ranks; from round 20 on all but rank 0 crawl (rank 0's share
			 * at its largest) */
			double t[8];
			for (int r = 0; r < size; r++)
				t[r] = round < 20 ? 1.0 + r / 4.0 + (round % 3) * 0.1 * (r % 2) : r ? 100.0 : 1.0;
			hora_balance_update(b, t, 64 * (int64_t)size);
			for (int64_t total = 0; total <= 70; total += 7)
				check_tiling(b, size, total);
			check_tiling(b, size, 1024 * (int64_t)size);
			for (int r = 0; r < size; r++) { /* the trainer's buffers hold 2 x batch + 2 (trainer.c) */
				int n;
				hora_balance_share(b, 1024 * (int64_t)size, r, &n);
				cr_assert_leq(n, 2 * 1024 + 2, "size %d: rank %d's share of 1024 x size is %d", size, r, n);
			}
		}
		cr_assert_eq(hora_balance_agreements(b), 30);
		/* the slowest rank (the last) has the smallest share, the fastest the largest */
		int n0, nl;
		for (int round = 0; round < 10; round++) {
			double t[8];
			for (int r = 0; r < size; r++)
				t[r] = 1.0 + r / 4.0;
			hora_balance_update(b, t, 64 * (int64_t)size);
		}
		hora_balance_share(b, 64 * (int64_t)size, 0, &n0);
		hora_balance_share(b, 64 * (int64_t)size, size - 1, &nl);
		if (size > 1)
			cr_assert(n0 > 64 && nl < 64, "size %d: rank 0 has %d, rank %d has %d of 64 each", size, n0,
				  size - 1, nl);
		hora_balance_destroy(b);
	}
}

/* a rank's gradient weight: the mean over the step's samples whatever the
 * shares; a global batch of 128 over 3 ranks (43/43/42) once gave the rank
 * whose share is 128/3 rounded down the weight 1 */
Test(balance, gradient_weights_give_the_mean_over_the_steps_samples)
{
	cr_assert_eq(hora_run_grad_weight(32, 2, 64), 1.0);
	cr_assert_eq(hora_run_grad_weight(42, 3, 128), 42.0 * 3 / 128);
	cr_assert_eq(hora_run_grad_weight(43, 3, 128), 43.0 * 3 / 128);
	const int sh[3] = {43, 43, 42};
	double sum = 0;
	for (int r = 0; r < 3; r++)
		sum += hora_run_grad_weight(sh[r], 3, 128);
	cr_assert_float_eq(sum, 3.0, 1e-12, "the weights of a step sum to size: %.17g", sum);
	cr_assert_eq(hora_run_grad_weight(5, 3, 13), 15.0 / 13);
}
