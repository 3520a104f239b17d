/* train_threads.c - a ThreadSanitizer driver (see coll_threads.c): N ranks
 * as threads of one process train the MLP on a small generated data set
 * through the public API (communicator, distributed optimizer, fusion,
 * the comm worker threads), with f32 or fp16 fusion buffers of a given
 * size, and end with bitwise identical parameters; or with gossip instead
 * (the neighbour allreduce, or async pairs on their engine's threads),
 * ending with x̄ on every rank.
 *   train_threads NRANKS COMPRESSION(0 none, 1 fp16) FUSION_BYTES [SYNC: 0
 *   allreduce, 1 gossip sync, 2 gossip async] */
#include "hora.h"
#include "tests/core/comm_helpers.h"
#include "tests/helpers.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	if (n < 1 || n > TC_MAXR)
		return fprintf(stderr, "ranks: 1..%d\n", TC_MAXR), 2;
	char *dir = th_tmpdir();
	th_make_dataset(dir, 97, 50, 8, 4, 11, 0);
	struct hora_train_config cfg;
	hora_train_config_defaults(&cfg);
	snprintf(cfg.data, sizeof(cfg.data), "%s", dir);
	cfg.hidden[0] = 16;
	cfg.epochs = 2;
	cfg.batch_size = 8;
	cfg.quiet = 1;
	cfg.fusion.compression = argc > 2 ? atoi(argv[2]) : 0;
	cfg.fusion.threshold_bytes = argc > 3 ? (size_t)atol(argv[3]) : 1024;
	const int sync = argc > 4 ? atoi(argv[4]) : 0;
	cfg.gossip.on = sync > 0;
	cfg.gossip.mode = sync == 2 ? HORA_GOSSIP_ASYNC : HORA_GOSSIP_SYNC;
	struct tc_train_rank rk[TC_MAXR];
	tc_pick_addrs(n);
	for (int i = 0; i < n; i++)
		rk[i] = (struct tc_train_rank){.r = i, .n = n, .cfg = &cfg};
	tc_threads(n, tc_train_run, rk, sizeof(*rk));
	int bad = 0;
	for (int i = 0; i < n; i++) {
		if (rk[i].rc)
			fprintf(stderr, "rank %d: %s\n", i, rk[i].err), bad = 1;
		else if (memcmp(rk[i].res.params, rk[0].res.params, rk[0].res.nparams * sizeof(float)))
			fprintf(stderr, "rank %d ends with other parameters than rank 0\n", i), bad = 1;
	}
	for (int i = 0; i < n; i++)
		if (!rk[i].rc)
			hora_train_result_deinit(&rk[i].res);
	printf("training, %d ranks, compression %d, fusion %zu B, %s: %s\n", n, cfg.fusion.compression,
	       cfg.fusion.threshold_bytes, sync == 2 ? "gossip async" : sync ? "gossip sync" : "allreduce",
	       bad ? "FAILED" : "ok");
	th_rmrf(dir);
	return bad;
}
