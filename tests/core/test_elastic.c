/* test_elastic.c - elastic training in one process (tests/core/
 * elastic_helpers.h): two workers start, a third joins the running job and
 * all three end with bitwise identical parameters. The multi-process cases
 * (kill -9, SIGSTOP, SIGTERM, restart) are tests/integration/test_elastic.sh. */
#include "hora.h"
#include "elastic_helpers.h"

#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

Test(elastic, a_joiner_gets_the_committed_state_and_ends_identical, .timeout = 240)
{
	char *dir = th_tmpdir();
	struct hora_train_config cfg;
	te_config(dir, &cfg);
	struct te_rank rk[3];
	char *file = te_join_run(dir, th_port_base(8), &cfg, rk, false);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(rk[i].rc, 0, "worker %d: %s", i, rk[i].err);
	/* the joiner took the job's step count with the commit it was given */
	cr_assert_eq(rk[2].res.steps, rk[0].res.steps, "joiner %lld steps, worker 0 %lld",
		     (long long)rk[2].res.steps, (long long)rk[0].res.steps);
	for (int i = 1; i < 3; i++)
		cr_assert_eq(memcmp(rk[i].res.params, rk[0].res.params, rk[0].res.nparams * sizeof(float)), 0,
			     "worker %d ends with other parameters than worker 0", i);
	for (int i = 0; i < 3; i++) /* it joined before the end, in a later view */
		cr_assert(rk[i].res.last.workers == 3 && rk[i].res.last.view > 1,
			  "worker %d: the last epoch had %d workers in view %llu", i, rk[i].res.last.workers,
			  (unsigned long long)rk[i].res.last.view);
	for (int i = 0; i < 3; i++)
		hora_train_result_deinit(&rk[i].res);
	th_rmrf(dir);
	free(file);
	free(dir);
}

/* a joiner that ends before its first call (a program that fails while it
 * loads; its keeper then leaves the job for it): the other two re-form as
 * 2 and finish with identical parameters. It checks that they go on, not
 * how (a joiner that said it was ready and then vanished would be re-formed
 * around as well); the keeper's warning names the way. */
Test(elastic, a_joiner_that_ends_before_its_first_call_leaves_the_others_training, .timeout = 240)
{
	char *dir = th_tmpdir();
	struct hora_train_config cfg;
	te_config(dir, &cfg);
	struct te_rank rk[3];
	char *file = te_join_run(dir, th_port_base(8), &cfg, rk, true);
	cr_assert(rk[2].rc == 0 && rk[2].joined, "worker 2 did not join the running job (rc %d: %s)", rk[2].rc,
		  rk[2].err);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rk[i].rc, 0, "worker %d: %s", i, rk[i].err);
		cr_assert(rk[i].res.last.workers == 2 && rk[i].res.last.view > 2,
			  "worker %d: the last epoch had %d workers in view %llu (the joiner in view 2, gone after)",
			  i, rk[i].res.last.workers, (unsigned long long)rk[i].res.last.view);
	}
	cr_assert_eq(memcmp(rk[1].res.params, rk[0].res.params, rk[0].res.nparams * sizeof(float)), 0,
		     "worker 1 ends with other parameters than worker 0");
	for (int i = 0; i < 2; i++)
		hora_train_result_deinit(&rk[i].res);
	th_rmrf(dir);
	free(file);
	free(dir);
}
