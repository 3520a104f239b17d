/* stall_rank.c - a worker for test_stall.sh (public API only): every rank
 * joins the job (HORA_CONFIG, HORA_PROC), rank `sleeper` sleeps before an
 * allreduce that the others enter at once, so their stall inspector must
 * name it. A stall abort comes back as the allreduce's HORA_ERR_STALL (the
 * library never exits); this program exits 3 on it, as `hora` does.
 * usage: stall_rank SLEEPER SLEEP_S WARN_S ABORT_S */
#include "hora.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	char err[1024];
	struct hora_comm *c;
	if (hora_init(NULL, &c, err, sizeof(err))) {
		fprintf(stderr, "init: %s\n", err);
		return 1;
	}
	hora_comm_set_stall(c, atof(argv[3]), atof(argv[4]));
	const int rank = hora_rank(c);
	float v = 1.0f;
	if (rank == atoi(argv[1]))
		sleep((unsigned)atoi(argv[2]));
	int rc = hora_allreduce(c, &v, &v, 1, HORA_F32, HORA_SUM);
	printf("rank %d: allreduce rc %d value %g%s%s\n", rank, rc, v, rc ? ": " : "",
	       rc ? hora_comm_last_error(c) : "");
	fflush(stdout);
	hora_finalize(c);
	return rc == HORA_ERR_STALL ? 3 : rc ? 1 : 0;
}
