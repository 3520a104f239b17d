/* fuzz_config.c - libFuzzer target for the YAML config loader. */
#include "core/cluster.h"
#include "hora.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("yaml", 0);
	if (fd < 0)
		return 0;
	if (size == 0 || write(fd, data, size) == (ssize_t)size) {
		char path[64], err[1024];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		struct hora_train_config cfg;
		hora_train_config_defaults(&cfg);
		hora_config_load_yaml(&cfg, path, err, sizeof(err));
		struct hora_cluster_config cc; /* the cluster sections, same file */
		hora_cluster_defaults(&cc);
		cc.secret_env = "fuzz-secret-0123456789abcdef0123"; /* the checks after it run too */
		hora_cluster_load(&cc, path, err, sizeof(err));
	}
	close(fd);
	return 0;
}
