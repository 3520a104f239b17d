/* cli.h - the subcommands of the `hora` executable (core/cli/, not part of
 * libhora). Each takes its own argv (argv[0] = the subcommand) and returns
 * the process exit status: 0 ok, 1 runtime failure, 2 bad input. */
#ifndef HORA_CLI_CLI_H
#define HORA_CLI_CLI_H

int hora_cmd_version(void);                 /* version.c: `hora --version` */
int hora_cmd_seed(int argc, char **argv);   /* worker.c */
int hora_cmd_worker(int argc, char **argv); /* worker.c */
int hora_cmd_launch(int argc, char **argv); /* launch.c */
int hora_cmd_run(int argc, char **argv);    /* run.c */
#if HORA_WITH_BENCH
#endif

#endif
