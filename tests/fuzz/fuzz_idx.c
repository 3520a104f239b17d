/* fuzz_idx.c - libFuzzer target for the IDX loader.
 * Input: 2 bytes (big-endian split point), then the image file bytes up to
 * the split, then the label file bytes. Files are memfds, so the real
 * path-based loader (stat, gzip detection, header checks) runs unchanged. */
#include "hora_model.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static int memfile(const uint8_t *p, size_t n, char *path, size_t len)
{
	int fd = memfd_create("idx", 0);
	if (fd < 0)
		return -1;
	if (n && write(fd, p, n) != (ssize_t)n) {
		close(fd);
		return -1;
	}
	snprintf(path, len, "/proc/self/fd/%d", fd);
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t split = (size_t)data[0] << 8 | data[1];
	data += 2;
	size -= 2;
	if (split > size)
		split = size;
	char pi[64], pl[64], err[512];
	int fi = memfile(data, split, pi, sizeof(pi));
	int fl = memfile(data + split, size - split, pl, sizeof(pl));
	if (fi >= 0 && fl >= 0) {
		struct hora_dataset ds;
		if (hora_dataset_load_idx(&ds, pi, pl, 10, err, sizeof(err)) == 0)
			hora_dataset_deinit(&ds);
	}
	if (fi >= 0)
		close(fi);
	if (fl >= 0)
		close(fl);
	return 0;
}
