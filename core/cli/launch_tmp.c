/* launch_tmp.c - the private directory of a launcher that writes the
 * cluster file its commands read (`hora run`'s generated file, an edited
 * copy for `hora launch FILE --set ... -- CMD`): mkdtemp (mode 0700) under
 * $TMPDIR or /tmp, the file mode 0600, both removed by launch_tmp_remove,
 * which the launchers call on every way out (a SIGINT/SIGTERM/SIGHUP is
 * caught and forwarded, so it is a way out too). */
#include "launch.h"

#include "env.h"
#include "yamledit.h"
#include "yamlwalk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int tmp_create(struct launch_tmp *t, const char *who)
{
	if (t->dir[0])
		return 0;
	const char *base = hora_env_tmpdir();
	char tpl[PATH_MAX];
	snprintf(tpl, sizeof(tpl), "%s/hora-run.XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(tpl)) {
		fprintf(stderr, "%s: cannot make a private directory %s: %s\n", who, tpl, strerror(errno));
		return 1;
	}
	snprintf(t->dir, sizeof(t->dir), "%s", tpl);
	return 0;
}

int launch_tmp_write(struct launch_tmp *t, const char *who, const char *text, size_t len,
		     const struct hora_setargs *sets, char *path, size_t cap)
{
	if (tmp_create(t, who))
		return 1;
	snprintf(t->file, sizeof(t->file), "%s/cluster.yaml", t->dir);
	unlink(t->file); /* a second write (the edited copy) replaces the first */
	int fd = open(t->file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", who, t->file, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	char err[1024];
	int rc = 0;
	if (sets && sets->n)
		rc = hora_yaml_edit(text, len, sets, f, err, sizeof(err));
	else if (fwrite(text, 1, len, f) != len)
		rc = -1, snprintf(err, sizeof(err), "%s", strerror(errno));
	if (fclose(f) && !rc)
		rc = -1, snprintf(err, sizeof(err), "%s", strerror(errno));
	if (rc) {
		fprintf(stderr, "%s: writing %s: %s\n", who, t->file, err);
		return 1;
	}
	snprintf(path, cap, "%s", t->file);
	return 0;
}

int launch_tmp_edited_copy(struct launch_tmp *t, const char *who, const char *file,
			   const struct hora_setargs *sets, char *path, size_t cap)
{
	FILE *f = fopen(file, "rb");
	char *text = malloc(HORA_YAML_MAX_BYTES + 1);
	size_t len = f && text ? fread(text, 1, HORA_YAML_MAX_BYTES + 1, f) : 0;
	int rc = 1;
	if (!f || !text)
		fprintf(stderr, "%s: %s: %s\n", who, file, strerror(errno));
	else if (len > HORA_YAML_MAX_BYTES) /* the loader refused it already; to be sure */
		fprintf(stderr, "%s: %s: larger than %d bytes\n", who, file, HORA_YAML_MAX_BYTES);
	else
		rc = launch_tmp_write(t, who, text, len, sets, path, cap);
	if (f)
		fclose(f);
	free(text);
	return rc;
}

void launch_tmp_remove(struct launch_tmp *t)
{
	if (t->file[0])
		unlink(t->file);
	if (t->dir[0])
		rmdir(t->dir);
	t->file[0] = t->dir[0] = 0;
}
