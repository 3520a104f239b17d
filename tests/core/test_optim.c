/* test_optim.c - optimizer updates against closed forms, and the schedule. */
#include "hora.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>

static struct hora_optim_config base(void)
{
	struct hora_optim_config c = {.kind = HORA_OPTIM_SGD, .lr = 0.1, .beta1 = 0.9,
				      .beta2 = 0.999, .eps = 1e-8};
	return c;
}

Test(core_optim, plain_sgd)
{
	struct hora_optim_config c = base();
	struct hora_optim *o;
	cr_assert_eq(hora_optim_create(&c, 3, &o), 0);
	float p[3] = {1, 2, 3}, g[3] = {0.5f, -1, 0};
	hora_optim_step(o, p, g, 0.1);
	cr_assert_float_eq(p[0], 0.95f, 1e-7);
	cr_assert_float_eq(p[1], 2.1f, 1e-6);
	cr_assert_float_eq(p[2], 3.0f, 1e-7);
	hora_optim_destroy(o);
}

Test(core_optim, momentum_and_nesterov_two_steps)
{
	struct hora_optim_config c = base();
	c.momentum = 0.9;
	struct hora_optim *o, *n;
	cr_assert_eq(hora_optim_create(&c, 1, &o), 0);
	c.nesterov = 1;
	cr_assert_eq(hora_optim_create(&c, 1, &n), 0);
	float p = 0, q = 0, g = 1;
	hora_optim_step(o, &p, &g, 0.1); /* v=1, p=-0.1 */
	hora_optim_step(o, &p, &g, 0.1); /* v=1.9, p=-0.29 */
	cr_assert_float_eq(p, -0.29f, 1e-6);
	hora_optim_step(n, &q, &g, 0.1); /* v=1, q -= 0.1*(1+0.9) = -0.19 */
	hora_optim_step(n, &q, &g, 0.1); /* v=1.9, q -= 0.1*(1+1.71) = -0.461 */
	cr_assert_float_eq(q, -0.461f, 1e-6);
	hora_optim_destroy(o);
	hora_optim_destroy(n);
}

Test(core_optim, adam_first_step_is_lr_times_sign)
{
	struct hora_optim_config c = base();
	c.kind = HORA_OPTIM_ADAM;
	struct hora_optim *o;
	cr_assert_eq(hora_optim_create(&c, 2, &o), 0);
	float p[2] = {0, 0}, g[2] = {3, -0.02f};
	hora_optim_step(o, p, g, 0.01);
	cr_assert_float_eq(p[0], -0.01f, 1e-6);
	cr_assert_float_eq(p[1], 0.01f, 1e-6);
	hora_optim_destroy(o);
}

Test(core_optim, weight_decay)
{
	struct hora_optim_config c = base();
	c.weight_decay = 0.5;
	struct hora_optim *o;
	cr_assert_eq(hora_optim_create(&c, 1, &o), 0);
	float p = 2, g = 0;
	hora_optim_step(o, &p, &g, 0.1);
	cr_assert_float_eq(p, 1.9f, 1e-6);
	hora_optim_destroy(o);
}

Test(core_optim, rejects_bad_settings)
{
	struct hora_optim_config c = base();
	struct hora_optim *o;
	c.lr = 0;
	cr_assert_eq(hora_optim_create(&c, 1, &o), -EINVAL);
	c = base();
	c.nesterov = 1;
	cr_assert_eq(hora_optim_create(&c, 1, &o), -EINVAL);
	c = base();
	c.momentum = 1;
	cr_assert_eq(hora_optim_create(&c, 1, &o), -EINVAL);
}

Test(core_optim, warmup_then_cosine)
{
	struct hora_optim_config c = base();
	c.warmup_epochs = 1;
	c.schedule = HORA_LR_COSINE;
	/* 10 steps/epoch, 30 steps total */
	cr_assert_float_eq(hora_lr_at(&c, 0, 10, 30, 1), 0.01, 1e-12);
	cr_assert_float_eq(hora_lr_at(&c, 9, 10, 30, 1), 0.1, 1e-12);
	cr_assert_float_eq(hora_lr_at(&c, 10, 10, 30, 1), 0.1, 1e-12);
	cr_assert_float_eq(hora_lr_at(&c, 20, 10, 30, 1), 0.05, 1e-12);
	cr_assert(hora_lr_at(&c, 29, 10, 30, 1) < 0.001);
	/* scaled by size: warm-up goes from lr to lr*size (Horovod) */
	c.scale_lr_by_size = 1;
	c.schedule = HORA_LR_CONSTANT;
	cr_assert_float_eq(hora_lr_at(&c, 4, 10, 30, 4), 0.1 + 0.3 * 5 / 10, 1e-12);
	cr_assert_float_eq(hora_lr_at(&c, 15, 10, 30, 4), 0.4, 1e-12);
}
