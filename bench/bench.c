/* bench.c - `hora bench <what>` dispatcher. One file per bench. */
#include "bench.h"

#include <stdio.h>
#include <string.h>


int hora_bench_main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help")) {
		fprintf(argc < 2 ? stderr : stdout,
			"usage: hora bench <what> [options]\n"
			"  train   training step vs the same GEMMs alone (hora bench train --help)\n"
			"  p2p     transport latency / bandwidth between two processes\n"
			"  membership  SWIM agreement / failure detection / gossip traffic vs members\n"
			"  allreduce | broadcast | allgather | reduce_scatter\n"
			"              collective latency and bus bandwidth across N ranks (lo or netns)\n"
			"  reduce      reduction loops vs memcpy, one core\n"
			"  xcpu        one cache line's round trip between two CPUs\n");
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "train"))
		return hora_bench_train(argc - 1, argv + 1);
	if (!strcmp(argv[1], "allreduce") || !strcmp(argv[1], "broadcast") ||
	    !strcmp(argv[1], "allgather") || !strcmp(argv[1], "reduce_scatter"))
		return hora_bench_coll(argv[1], argc - 1, argv + 1);
	if (!strcmp(argv[1], "xcpu"))
		return hora_bench_xcpu(argc - 1, argv + 1);
	if (!strcmp(argv[1], "reduce"))
		return hora_bench_reduce(argc - 1, argv + 1);
	if (!strcmp(argv[1], "membership"))
		return hora_bench_membership(argc - 1, argv + 1);
	if (!strcmp(argv[1], "p2p"))
		return hora_bench_p2p(argc - 1, argv + 1);
	fprintf(stderr, "hora bench: unknown bench '%s'\n", argv[1]);
	return 2;
}
