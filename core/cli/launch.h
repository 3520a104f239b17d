/* launch.h - `hora launch`'s pieces shared by launch.c (start, relay,
 * supervise, report) and launch_elastic.c (the train.elastic rules: a dead
 * worker is a casualty, restarts, the summary). Internal to the CLI. */
#ifndef HORA_CLI_LAUNCH_H
#define HORA_CLI_LAUNCH_H

#include "cluster.h"
#include "hora.h"
#include "setarg.h"

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#define LAUNCH_TAIL 8
#define LAUNCH_MAX_ARGS 64
#define LAUNCH_DEATHS 16 /* deaths of one worker kept for the elastic summary */

/* One death of a worker, for the elastic summary. */
enum launch_death_kind {
	LAUNCH_DEATH_CASUALTY, /* died while the others went on (restarted or not) */
	LAUNCH_DEATH_LATE,     /* failed after training completed: the job failed */
	LAUNCH_DEATH_CULLED,   /* still running a grace period after training completed: killed */
};
struct launch_death {
	enum launch_death_kind kind;
	int status;         /* waitpid's */
	double at_s;        /* since launch */
	double restarted_s; /* since launch; < 0: not restarted */
	int restart_no;     /* which restart that was (1..restart_limit) */
};

/* One worker as the launcher sees it: its process, its pipe and the last
 * lines relayed from it. */
struct launch_child {
	pid_t pid;
	int fd;
	int pidfd; /* readable once pid exited (launch_wait.c); -1: none (closed once reaped) */
	int g;
	const char *host;
	char buf[4096];
	size_t have;
	char tail[LAUNCH_TAIL][256];
	int ntail;
	int status;
	bool done;
	double died_at; /* when its exit was seen (hora_clock_s), once done */
	bool bar; /* a progress bar line (\r updates) is open on the terminal */
	/* elastic supervision (launch_elastic.c); seen..culled are per process,
	 * restarts and deaths outlive a restart */
	bool seen;   /* its exit has been handled */
	bool at_end; /* it was running when training completed */
	bool culled; /* the launcher killed it as a straggler */
	int restarts;
	int ndeaths; /* may exceed LAUNCH_DEATHS: the first LAUNCH_DEATHS are kept */
	struct launch_death death[LAUNCH_DEATHS];
};

/* The command line and the checked file (launch.c). */
struct launch {
	const char *who; /* "hora launch" or "hora run": the prefix of the launcher's lines */
	const char *file;
	const char *shown; /* file's name in messages (NULL: file; hora run's generated file) */
	struct hora_setargs sets;
	int extra, argc; /* argv[extra..argc) go to every worker after "--" */
	char **argv;
	/* a command run in place of `hora worker` (NULL: hora worker with
	 * argv[extra..argc)), with the environment of launch_cmd.c */
	char **cmd;
	int ncmd;
	const char *secret; /* HORA_SECRET for the command's processes (NULL: the launcher's own) */
	char *payload;      /* sent on the stdin of a command under ssh or a template: the
			       secret's line and the cluster file (launch_cmd.c) */
	size_t npayload;
	struct hora_cluster_config cc;
	bool local, netns;
	const char *tpl; /* command template (ssh or a custom launcher) */
	struct hora_elastic_config ec; /* train.elastic; ec.on only for a training job */
	char self[PATH_MAX], cfgpath[PATH_MAX];
};

/* The elastic supervision's state (launch_elastic.c). */
struct launch_elastic {
	const char *who; /* the launcher's name in its lines */
	const struct hora_elastic_config *ec;
	double grace_s;
	double t0;      /* launch time (hora_clock_s) */
	double done_at; /* when the first worker exited 0 (training completed); < 0 before */
	double last_exit; /* when a worker exited last */
	int late;       /* workers running at done_at that failed after it */
	double stop_at; /* when a signal was forwarded (no more restarts); < 0 before */
	double frozen_at; /* since when every running worker is stopped; < 0: not so */
	bool culled;    /* the stragglers have been killed */
	const char *cull_why; /* what they outlived by grace_s */
};

/* SIGINT, SIGTERM, SIGHUP and SIGQUIT caught, to be forwarded to the
 * workers once they run (launch.c); SIGPIPE ignored (a closed stdout stops
 * the job as SIGTERM does); whether one came already. */
void launch_signals_install(void);
/* signal worker pid's process group (each worker on this machine leads its
 * own), else pid (an ssh client, in the launcher's group) */
void launch_kill(pid_t pid, int sig);
bool launch_signal_pending(void);
/* The whole file la->file with every la->sets, as each worker will see it;
 * sets la->local/netns/tpl/ec. 0 or 2 (said, la->who first). */
int launch_check_file(struct launch *la);
/* Start every worker of la->cc, relay, supervise, report: the exit status
 * (0 every worker exited 0; 1). la->self and la->cfgpath are set. */
int launch_run(struct launch *la);

/* A command's process (launch_cmd.c). In the child of worker g (node,
 * local index li), before exec: HORA_CONFIG, HORA_PROC, HORA_RANK,
 * HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE, HORA_SECRET (la->secret). */
void launch_cmd_env(const struct launch *la, int g, const struct hora_cluster_node *node, int li);
/* The remote shell script of worker g under ssh or a template, quoted once
 * for the template's shell: it reads the secret's line and the cluster
 * file from stdin into a private directory, runs the command there with
 * the same environment, removes the directory. 0, or -1 (too long). */
int launch_cmd_remote(const struct launch *la, int g, const struct hora_cluster_node *node, int li,
		      char *out, size_t cap);
/* la->payload: the secret's line (empty without la->secret) and the file
 * at la->cfgpath. 0, or 1 (said). */
int launch_cmd_payload(struct launch *la);
/* Quote s for a POSIX shell ('...'). */
void launch_quote(char *out, size_t cap, const char *s);

/* A launcher's private directory and the one cluster file in it
 * (launch_tmp.c): $TMPDIR or /tmp, mode 0700, the file 0600. */
struct launch_tmp {
	char dir[PATH_MAX], file[PATH_MAX + 16];
};
/* Write text (with sets applied, hora_yaml_edit, when sets has any) as the
 * directory's cluster.yaml, made on first use; its path into path. 0 or 1
 * (said). */
int launch_tmp_write(struct launch_tmp *t, const char *who, const char *text, size_t len,
		     const struct hora_setargs *sets, char *path, size_t cap);
/* The same with the text of file. */
int launch_tmp_edited_copy(struct launch_tmp *t, const char *who, const char *file,
			   const struct hora_setargs *sets, char *path, size_t cap);
/* Remove the file and the directory (nothing when none was made). */
void launch_tmp_remove(struct launch_tmp *t);

/* Fork worker g with its output on a pipe into ch (launch.c). 0, or 1
 * (pipe failed, said on stderr); a failed fork leaves ch done with status
 * 127. */
int launch_start_worker(const struct launch *la, int g, struct launch_child *ch);
/* Relay the complete lines in c's buffer, all of it when eof (launch.c). */
void launch_drain(struct launch_child *c, bool eof);

/* launch_wait.c. A pidfd for pid (pidfd_open: Linux >= 5.3), readable once
 * it exited; -1 where there is none (the kernel's ENOSYS, or old headers). */
int launch_pidfd_open(pid_t pid);
struct pollfd;
/* Wait up to 200 ms for output or an exit: relay what is ready on each
 * worker's pipe, then reap the workers that exited (done, status, died_at:
 * the time it was seen, at once with a pidfd). pf: room for 2 n entries
 * (NULL: reap only, after 50 ms). Returns how many were reaped. */
int launch_wait(struct launch_child *ch, int n, struct pollfd *pf);
/* Once every worker exited: what is left in the pipes, read without
 * blocking (a process a worker left behind may hold its pipe open). */
void launch_drain_rest(struct launch_child *ch, int n);

/* Handle every exit that reap found (ch[g].done and not yet seen): record
 * deaths, start casualties again under train.elastic.restart (none once
 * signal_pending or a signal was forwarded). Returns how many run again. */
int launch_elastic_exits(const struct launch *la, struct launch_elastic *er, struct launch_child *ch,
			 int n, bool signal_pending);
/* SIGKILL, naming each, the workers still running er->grace_s after the
 * last exit once training completed, after a forwarded signal, or since
 * every running worker is stopped. Once. */
void launch_elastic_stragglers(struct launch_elastic *er, struct launch_child *ch, int n);
/* The summary line (stdout); 0 when training completed, else 1. */
int launch_elastic_report(const struct launch_elastic *er, const struct launch_child *ch, int n);

#endif
