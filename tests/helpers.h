/* helpers.h - shared test helpers: temp dirs, IDX writers, synthetic data.
 * Header-only (static functions) so each test binary stays self-contained. */
#ifndef HORA_TEST_HELPERS_H
#define HORA_TEST_HELPERS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

/* A port base for a cluster file's port_base + 0..n: every port free for
 * TCP and UDP on 127.0.0.1 now, in 20000..32767, below the kernel's
 * ephemeral range (32768..60999 here), where an outgoing connection's local
 * port could hold one (a pid-derived base up to 60000 did: a rank whose
 * listen failed left rank 0 waiting 30 s for it). Starts from the pid, so
 * tests side by side start apart; moves on past a busy port. */
static inline int th_port_base(int n)
{
	int base = 20000 + (int)(getpid() % 2900) * 4;
	for (int tries = 0; tries < 400; tries++, base += n + 1) {
		if (base + n > 32767)
			base = 20000 + (base + n) % 7;
		int ok = 1;
		for (int k = 0; k <= n && ok; k++)
			for (int type = 0; type < 2 && ok; type++) {
				int fd = socket(AF_INET, type ? SOCK_DGRAM : SOCK_STREAM, 0);
				struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(base + k)),
							.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
				ok = fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a));
				if (fd >= 0)
					close(fd);
			}
		if (ok)
			return base;
	}
	return base;
}

/* Listen addresses for the n ranks of one communicator, "127.A.B.C:PORT":
 * A.B.C comes from this process's pid (all of 127/8 is loopback), so tests
 * that run side by side (Criterion --jobs, one process per test) never meet
 * on an address, and the ports move on with every call so that one test's
 * communicators do not land on the last one's sockets. */
static inline void th_rank_addrs(char (*addr)[32], const char **addrs, int n)
{
	static int round;
	unsigned pid = (unsigned)getpid();
	int base = 10000 + (int)((97u * (unsigned)round++) % 20000); /* below the ephemeral ports */
	for (int i = 0; i < n; i++) {
		snprintf(addr[i], 32, "127.%u.%u.%u:%d", 1 + (pid >> 16) % 254, (pid >> 8) & 255u,
			 pid & 255u, base + i);
		addrs[i] = addr[i];
	}
}

/* A fresh directory under $TMPDIR (or /tmp); aborts the test on failure.
 * ("XXXXXX" is mkdtemp's template: it becomes a unique suffix.) */
static inline char *th_tmpdir(void)
{
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char *p = malloc(strlen(base) + 32);
	snprintf(p, strlen(base) + 32, "%s/hora-test-XXXXXX", base);
	if (!mkdtemp(p)) {
		perror("mkdtemp");
		abort();
	}
	return p;
}

/* A fresh empty file under $TMPDIR (or /tmp), mode 0600; returns its path
 * (malloc'd) and its open descriptor in *fd. Aborts the test on failure. */
static inline char *th_tmpfile(const char *prefix, int *fd)
{
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	size_t n = strlen(base) + strlen(prefix) + 16;
	char *p = malloc(n);
	snprintf(p, n, "%s/%s-XXXXXX", base, prefix); /* mkstemp's template */
	*fd = mkstemp(p);
	if (*fd < 0) {
		perror("mkstemp");
		abort();
	}
	return p;
}

static inline char *th_path(const char *dir, const char *name)
{
	char *p = malloc(strlen(dir) + strlen(name) + 2);
	sprintf(p, "%s/%s", dir, name);
	return p;
}

static inline void th_rmrf(const char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

static inline void th_be32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

/* Write bytes to path, gzip-compressed when gz. */
static inline void th_write(const char *path, const void *buf, size_t n, int gz)
{
	if (gz) {
		gzFile f = gzopen(path, "wb");
		gzwrite(f, buf, (unsigned)n);
		gzclose(f);
	} else {
		FILE *f = fopen(path, "wb");
		fwrite(buf, 1, n, f);
		fclose(f);
	}
}

/* An IDX image file of n images (rows x cols) with the given pixels. */
static inline void th_write_images(const char *path, const uint8_t *px, uint32_t n, uint32_t rows,
				   uint32_t cols, int gz)
{
	size_t len = 16 + (size_t)n * rows * cols;
	uint8_t *b = malloc(len);
	th_be32(b, 0x803);
	th_be32(b + 4, n);
	th_be32(b + 8, rows);
	th_be32(b + 12, cols);
	memcpy(b + 16, px, (size_t)n * rows * cols);
	th_write(path, b, len, gz);
	free(b);
}

static inline void th_write_labels(const char *path, const uint8_t *y, uint32_t n, int gz)
{
	uint8_t *b = malloc(8 + n);
	th_be32(b, 0x801);
	th_be32(b + 4, n);
	memcpy(b + 8, y, n);
	th_write(path, b, 8 + n, gz);
	free(b);
}

/* A learnable synthetic set: `classes` classes of side x side images; class c
 * lights a band of rows c*side/classes.. plus seeded noise. Writes the four
 * IDX files (train n_train, test n_test) into dir. */
static inline void th_make_dataset(const char *dir, int n_train, int n_test, int side, int classes,
				   uint64_t seed, int gz)
{
	const char *pre[2] = {"train", "t10k"};
	int counts[2] = {n_train, n_test};
	for (int s = 0; s < 2; s++) {
		int n = counts[s];
		uint8_t *px = malloc((size_t)n * side * side), *y = malloc((size_t)n);
		for (int i = 0; i < n; i++) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			int c = (int)((seed >> 33) % (uint64_t)classes);
			y[i] = (uint8_t)c;
			for (int r = 0; r < side; r++)
				for (int k = 0; k < side; k++) {
					seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
					int noise = (int)((seed >> 33) % 96);
					int band = r * classes / side == c;
					px[((size_t)i * side + r) * side + k] = (uint8_t)(band ? 150 + noise : noise);
				}
		}
		char name[128];
		snprintf(name, sizeof(name), "%s/%s-images-idx3-ubyte%s", dir, pre[s], gz ? ".gz" : "");
		th_write_images(name, px, (uint32_t)n, (uint32_t)side, (uint32_t)side, gz);
		snprintf(name, sizeof(name), "%s/%s-labels-idx1-ubyte%s", dir, pre[s], gz ? ".gz" : "");
		th_write_labels(name, y, (uint32_t)n, gz);
		free(px);
		free(y);
	}
}


/* The names in /dev/shm, as one string "\nname\nname\n" (free it). */
static inline char *th_dev_shm(void)
{
	size_t cap = 1 << 16, n = 0;
	char *s = calloc(1, cap);
	DIR *d = opendir("/dev/shm");
	if (!d)
		return s;
	for (struct dirent *e; (e = readdir(d));)
		n += (size_t)snprintf(s + n, n < cap ? cap - n : 0, "\n%s", e->d_name);
	if (n < cap - 1)
		s[n] = '\n';
	closedir(d);
	return s;
}

/* The first name of `now` (th_dev_shm) that `before` lacks, into name
 * (Criterion's bxfi_* sandboxes aside);
 * 0 when there is none (others' files may come and go: only new ones count). */
static inline int th_dev_shm_new(const char *before, const char *now, char *name, size_t len)
{
	for (const char *p = now; (p = strchr(p, '\n')) && p[1];) {
		const char *e = strchr(p + 1, '\n');
		size_t k = e ? (size_t)(e - p) + 1 : strlen(p);
		/* bxfi_*: Criterion's own, for the tests running beside this one */
		if (strncmp(p + 1, "bxfi_", 5) && !memmem(before, strlen(before), p, k)) {
			snprintf(name, len, "%.*s", (int)(k > 2 ? k - 2 : 0), p + 1);
			return 1;
		}
		p += k - 1;
	}
	return 0;
}


/* A 64-bit mixer (splitmix64's finalizer), and bytes made from it: n bytes
 * that depend on seed and position, to fill a message and check it came
 * whole and in order. th_bytes_differ: the first index that differs from
 * th_fill_bytes(seed), or -1. */
static inline uint64_t th_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline void th_fill_bytes(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(th_mix(seed * 1000003 + i / 8) >> (8 * (i % 8)));
}

static inline long th_bytes_differ(const uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(th_mix(seed * 1000003 + i / 8) >> (8 * (i % 8))))
			return (long)i;
	return -1;
}

#endif
