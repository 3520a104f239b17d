/* elastic_threads.c - a ThreadSanitizer driver (see coll_threads.c) for
 * elastic training: two workers of hora_init_with train as threads, a third
 * joins the running job (the others re-form their communicator: monitor
 * thread stopped and started again, the membership's status callback
 * reading the communicator while its net comm is replaced), and all three
 * end with bitwise identical parameters. The scenario is
 * tests/core/elastic_helpers.h's te_join_run, the one test_elastic.c checks
 * with Criterion.
 * With "quit" the joiner ends before its first call instead (its keeper
 * leaves the job for it) and the other two finish as 2.
 *   elastic_threads [PORT_BASE|0] [quit] */
#include "tests/core/elastic_helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const int port = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : th_port_base(8);
	const bool quit = argc > 2 && !strcmp(argv[2], "quit");
	char *dir = th_tmpdir();
	struct hora_train_config cfg;
	te_config(dir, &cfg);
	struct te_rank rk[3];
	char *file = te_join_run(dir, port, &cfg, rk, quit);
	int bad = 0;
	const int n = quit ? 2 : 3; /* quit: the joiner ends before training */
	if (rk[2].rc || !rk[2].joined)
		fprintf(stderr, "worker 2 did not join the running job: %s\n", rk[2].err), bad = 1;
	for (int i = 0; i < n; i++) {
		if (rk[i].rc)
			fprintf(stderr, "worker %d: %s\n", i, rk[i].err), bad = 1;
		else if (memcmp(rk[i].res.params, rk[0].res.params, rk[0].res.nparams * sizeof(float)))
			fprintf(stderr, "worker %d ends with other parameters than worker 0\n", i), bad = 1;
		else if (rk[i].res.last.workers != n || (quit && rk[i].res.last.view <= 2))
			fprintf(stderr, "worker %d: the last epoch had %d workers\n", i, rk[i].res.last.workers),
				bad = 1;
		hora_train_result_deinit(&rk[i].res);
	}
	th_rmrf(dir);
	free(file);
	free(dir);
	printf("elastic_threads: %s\n", bad ? "FAIL" : "ok");
	return bad;
}
