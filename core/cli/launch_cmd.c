/* launch_cmd.c - what a command run by a launcher (`hora run`, `hora launch
 * FILE -- CMD`) gets in place of `hora worker`'s flags: the environment that
 * hora_init(NULL, ...) and hora.init() read.
 *
 *   HORA_CONFIG      absolute path of the cluster file naming every worker
 *   HORA_PROC        the worker's global index in it (0..size-1): hora_init's input
 *   HORA_SECRET      the cluster secret, when the launcher holds one for the job
 *                    (the file names no secret_file); never on a command line
 *   HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE
 *                    informational: the index, the file's worker count, the index
 *                    on its node and the node's workers (hora_init takes its rank
 *                    from the agreed view, which equals HORA_PROC while all are alive)
 *
 * Local and netns: set in the child before exec, which also pins it to CPU
 * (its index mod the CPUs it may use) under cluster.bind: core, as hora worker pins
 * itself (refused for a remote command: launch_check_file). Under ssh or a template,
 * the remote host has neither the launcher's environment nor, for `hora
 * run`, its file: the command line is a small shell script that reads the
 * secret's line and the cluster file from its stdin (which ssh forwards;
 * the launcher writes them and closes it), writes the file into a private
 * directory (mktemp -d, umask 077) removed when the command ends, changes to
 * the launcher's working directory (as horovodrun does; the same paths on
 * every host), and runs the command with the variables above.
 */
#include "launch.h"

#include "env.h"
#include "net/util/cpus.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void set_int(const char *name, int v)
{
	char b[16];
	snprintf(b, sizeof(b), "%d", v);
	setenv(name, b, 1);
}

void launch_cmd_env(const struct launch *la, int g, const struct hora_cluster_node *node, int li)
{
	setenv("HORA_CONFIG", la->cfgpath, 1);
	set_int("HORA_PROC", g);
	set_int("HORA_RANK", g);
	set_int("HORA_SIZE", hora_cluster_size(&la->cc));
	set_int("HORA_LOCAL_RANK", li);
	set_int("HORA_LOCAL_SIZE", node->workers);
	if (la->secret)
		setenv("HORA_SECRET", la->secret, 1);
	if (la->cc.bind) { /* cluster.bind: core, as hora worker does it: the allowed CPU i mod k, */
		/* i over every node on this machine (the local and netns launchers'
		 * nodes all are: 127.0.0.1 and 127.0.0.2 must not share CPU 0) */
		const int cpu = hora_cpus_nth(la->local || la->netns ? g : li);
		const int rc = cpu < 0 ? -ENOENT : hora_cpus_bind_process(cpu);
		if (rc)
			fprintf(stderr, "%s: worker %d: cluster.bind: core: CPU %d: %s\n", la->who, g, cpu,
				strerror(-rc));
	}
}

/* Append s to out (k: its length so far); false when it does not fit. */
static bool put(char *out, size_t cap, size_t *k, const char *s)
{
	size_t n = strlen(s);
	if (*k + n + 1 > cap)
		return false;
	memcpy(out + *k, s, n + 1);
	*k += n;
	return true;
}

int launch_cmd_remote(const struct launch *la, int g, const struct hora_cluster_node *node, int li,
		      char *out, size_t cap)
{
	char cwd[PATH_MAX], q[PATH_MAX * 4 + 8], script[8192];
	if (!getcwd(cwd, sizeof(cwd)))
		snprintf(cwd, sizeof(cwd), "/");
	launch_quote(q, sizeof(q), cwd);
	int k0 = snprintf(script, sizeof(script),
			  "cd %s >/dev/null 2>&1; umask 077; d=$(mktemp -d) || exit 127; "
			  "trap 'rm -rf \"$d\"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; "
			  "trap 'exit 143' TERM; IFS= read -r s; [ -z \"$s\" ] || export HORA_SECRET=\"$s\"; "
			  "s=; cat >\"$d/cluster.yaml\" || exit 127; HORA_CONFIG=\"$d/cluster.yaml\" "
			  "HORA_PROC=%d HORA_RANK=%d HORA_SIZE=%d HORA_LOCAL_RANK=%d HORA_LOCAL_SIZE=%d",
			  q, g, g, hora_cluster_size(&la->cc), li, node->workers);
	if (k0 < 0 || (size_t)k0 >= sizeof(script))
		return -1;
	size_t k = (size_t)k0;
	for (int i = 0; i < la->ncmd; i++) {
		launch_quote(q, sizeof(q), la->cmd[i]);
		if (strlen(q) + 8 > sizeof(q) - 1 || !put(script, sizeof(script), &k, " ") ||
		    !put(script, sizeof(script), &k, q))
			return -1;
	}
	launch_quote(out, cap, script); /* one word for the template's shell */
	return strlen(out) + 8 > cap ? -1 : 0;
}

int launch_cmd_payload(struct launch *la)
{
	const char *secret = la->secret;
	if (!secret && !la->cc.secret_file[0])
		secret = hora_env_secret();
	if (secret && strpbrk(secret, "\r\n")) {
		fprintf(stderr, "%s: HORA_SECRET holds a line break: it cannot be sent to the remote "
				"workers on one line (use a secret without one, or cluster.secret_file)\n",
			la->who);
		return 1;
	}
	FILE *f = fopen(la->cfgpath, "rb");
	size_t slen = secret ? strlen(secret) : 0, cap = slen + 2 + (1u << 20);
	la->payload = malloc(cap);
	if (!f || !la->payload) {
		fprintf(stderr, "%s: %s: %s\n", la->who, la->cfgpath, strerror(errno));
		if (f)
			fclose(f);
		return 1;
	}
	if (slen)
		memcpy(la->payload, secret, slen);
	la->payload[slen] = '\n';
	la->npayload = slen + 1 + fread(la->payload + slen + 1, 1, cap - slen - 1, f);
	fclose(f);
	return 0;
}
