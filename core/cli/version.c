/* version.c - `hora --version` (`hora version`): the version on the first
 * line, then one line of features, each as what this build compiled and
 * what this machine allows, tried rather than assumed:
 *
 *   hora 0.1.0
 *   features: io_uring (liburing 2.3) yes; cuda: <hora_gpu_feature's text>;
 *             shared memory: yes; python: installed at /usr/lib/python3/dist-packages/hora
 *
 * (one line; wrapped here). io_uring: a ring is set up, or the kernel's
 * refusal is named (with kernel.io_uring_disabled when it is set); cuda:
 * libhora_gpu.so loaded or why not, and the devices (gpu/hora_gpu.h);
 * shared memory: a channel of net/shm/ is created and detached (memfd,
 * seals, the double mapping); python: where the binding was installed
 * (HORA_PYTHON_DIR, set by the build when it builds the binding, see
 * deploy/package/install.cmake), whether that directory holds it now, or
 * "not built". Scripts may grep "; NAME: " segments; the order is fixed.
 * Not part of libhora. */
#include "cli.h"
#include "gpu/hora_gpu.h"
#include "hora.h"
#include "hora_config.h"
#include "net/shm/shm.h"

#include <liburing.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* "yes", or "no: <reason>" for io_uring on this kernel. */
static void feature_uring(char *buf, size_t len)
{
	struct io_uring ring;
	int rc = io_uring_queue_init(2, &ring, 0);
	if (rc == 0) {
		io_uring_queue_exit(&ring);
		snprintf(buf, len, "yes");
		return;
	}
	int disabled = 0;
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
	if (f) {
		if (fscanf(f, "%d", &disabled) != 1)
			disabled = 0;
		fclose(f);
	}
	if (disabled)
		snprintf(buf, len, "no: %s (kernel.io_uring_disabled = %d)", strerror(-rc), disabled);
	else
		snprintf(buf, len, "no: %s", strerror(-rc));
}

/* "yes", or "no: <reason>": one channel made and left as a link would. */
static void feature_shm(char *buf, size_t len)
{
	struct hora_net_shm_cfg cfg = {.ring_bytes = 64 << 10, .spin_us = -1, .life_fd = -1};
	struct hora_net_shm *c;
	char err[256] = "";
	int rc = hora_net_shm_create(&cfg, &c, err, sizeof(err));
	if (rc == 0) {
		hora_net_shm_detach(c);
		snprintf(buf, len, "yes");
	} else {
		snprintf(buf, len, "no: %s", err[0] ? err : strerror(-rc));
	}
}

/* Where the Python binding went, if this build made one. */
static void feature_python(char *buf, size_t len)
{
#ifdef HORA_PYTHON_DIR
	char init[4096];
	struct stat st;
	snprintf(init, sizeof(init), "%s/__init__.py", HORA_PYTHON_DIR);
	if (stat(init, &st) == 0)
		snprintf(buf, len, "installed at %s", HORA_PYTHON_DIR);
#ifdef HORA_PYTHON_BUILD_DIR
	else
		snprintf(buf, len, "built (PYTHONPATH=%s), not installed (%s has no __init__.py)",
			 HORA_PYTHON_BUILD_DIR, HORA_PYTHON_DIR);
#else
	else
		snprintf(buf, len, "built, not installed (%s has no __init__.py)", HORA_PYTHON_DIR);
#endif
#else
	snprintf(buf, len, "not built");
#endif
}

int hora_cmd_version(void)
{
	char uring[256], cuda[2048], shm[320], py[4200];
	feature_uring(uring, sizeof(uring));
	hora_gpu_feature(cuda, sizeof(cuda));
	feature_shm(shm, sizeof(shm));
	feature_python(py, sizeof(py));
	printf("hora %s\nfeatures: io_uring (liburing %s) %s; %s; shared memory: %s; python: %s\n",
	       hora_version(), HORA_LIBURING_VERSION, uring, cuda, shm, py);
	return 0;
}
