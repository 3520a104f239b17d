/* lost_threads.c - a ThreadSanitizer driver (see coll_threads.c) for the
 * loss watcher: three ranks of hora_init_with as threads of one process,
 * rank 2's membership loop blocked (a frozen process); ranks 0 and 1 fail
 * with HORA_ERR_LOST from the monitor thread while their calls run on the
 * async path, rank 2 thaws and its late call fails; every communicator is
 * then destroyed. The scenario is tests/core/comm_helpers.h's
 * tc_frozen_run, the one test_comm.c checks with Criterion.
 *   lost_threads [PORT_BASE] */
#include "tests/core/comm_helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const int port = argc > 1 ? atoi(argv[1]) : th_port_base(8);
	char *dir = th_tmpdir();
	struct tc_frozen_rank rk[3];
	char *file = tc_frozen_run(dir, port, 1, rk);
	int bad = 0;
	for (int i = 0; i < 3; i++) {
		if (rk[i].rc) {
			fprintf(stderr, "rank %d: %s\n", i, rk[i].err);
			bad = 1;
		}
		if (i < 2 && (rk[i].rc2 != HORA_ERR_LOST || !strstr(rk[i].err, "rank 2 (worker 2, "))) {
			fprintf(stderr, "rank %d: rc %d: %s\n", i, rk[i].rc2, rk[i].err);
			bad = 1;
		}
		if (i == 2 && !rk[i].rc2) {
			fprintf(stderr, "rank 2: the late allreduce succeeded\n");
			bad = 1;
		}
		hora_finalize(rk[i].c);
	}
	th_rmrf(dir);
	free(file);
	free(dir);
	printf("lost_threads: %s\n", bad ? "FAIL" : "ok");
	return bad;
}
