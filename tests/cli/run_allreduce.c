/* run_allreduce.c - a program as `hora run` starts it (tests/cli/test_run.sh):
 * hora_init(NULL, ...) with nothing but the environment the launcher gives
 * (HORA_CONFIG, HORA_PROC, HORA_SECRET), one allreduce of rank + 1 over 4
 * doubles, prints "rank R of N: sum S" (S = N(N+1)/2 on every rank). Public
 * API only, linked with libhora.so as a user's program is. */
#include "hora.h"

#include <stdio.h>

int main(void)
{
	char err[1024];
	struct hora_comm *c;
	if (hora_init(NULL, &c, err, sizeof(err))) {
		fprintf(stderr, "init: %s\n", err);
		return 1;
	}
	const int r = hora_rank(c), n = hora_size(c);
	double x[4] = {r + 1, r + 1, r + 1, r + 1};
	int rc = hora_allreduce(c, x, x, 4, HORA_F64, HORA_SUM);
	if (rc)
		fprintf(stderr, "allreduce: %s\n", hora_strerror(rc));
	else
		printf("rank %d of %d: sum %.0f %.0f\n", r, n, x[0], x[3]);
	hora_finalize(c);
	return rc ? 1 : 0;
}
