/* bench.c - `hora bench <what>` dispatcher. One file per bench. */
#include <stdio.h>
#include <string.h>

int hora_bench_train(int argc, char **argv);
int hora_bench_p2p(int argc, char **argv);
int hora_bench_membership(int argc, char **argv);
int hora_bench_allreduce(int argc, char **argv);

int hora_bench_main(int argc, char **argv);
int hora_bench_main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help")) {
		fprintf(argc < 2 ? stderr : stdout,
			"usage: hora bench <what> [options]\n"
			"  train   training step vs the same GEMMs alone (hora bench train --help)\n"
			"  p2p     transport latency / bandwidth between two processes\n"
			"  membership  SWIM agreement / failure detection / gossip traffic vs members\n"
			"  allreduce   allreduce latency and bus bandwidth across N local ranks\n");
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "train"))
		return hora_bench_train(argc - 1, argv + 1);
	if (!strcmp(argv[1], "allreduce"))
		return hora_bench_allreduce(argc - 1, argv + 1);
	if (!strcmp(argv[1], "membership"))
		return hora_bench_membership(argc - 1, argv + 1);
	if (!strcmp(argv[1], "p2p"))
		return hora_bench_p2p(argc - 1, argv + 1);
	fprintf(stderr, "hora bench: unknown bench '%s'\n", argv[1]);
	return 2;
}
