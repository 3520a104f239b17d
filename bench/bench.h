/* bench.h - the benches' entry points (`hora bench <what>`, bench/README.md).
 * Each returns the process exit status (0 ok, 1 failed or wrong results,
 * 2 bad flags) and prints its table; argv[0] is the bench's name. */
#ifndef HORA_BENCH_BENCH_H
#define HORA_BENCH_BENCH_H

int hora_bench_main(int argc, char **argv); /* dispatch on argv[1] */
int hora_bench_train(int argc, char **argv);
int hora_bench_p2p(int argc, char **argv);
int hora_bench_membership(int argc, char **argv);
int hora_bench_membership_sim(int argc, char **argv); /* --simulate N (membership_sim.c) */
/* what: "allreduce", "broadcast", "allgather", "reduce_scatter" */
int hora_bench_coll(const char *what, int argc, char **argv);
int hora_bench_reduce(int argc, char **argv);
int hora_bench_xcpu(int argc, char **argv);   /* xcpu.c */

#endif
