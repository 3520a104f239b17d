/* main.c - a program outside the hora tree, built against an installed hora
 * (tests/install/test_install.sh builds it four ways: pkg-config and
 * find_package, each with libhora.so and with libhora.a).
 *
 * Two ranks, two processes (fork) on loopback, one communicator made with
 * hora_comm_create; rank r contributes x[i] = (r + 1) * (i + 1), so the sum
 * is 3 * (i + 1) on both ranks, checked element by element. Prints
 * "hora VERSION: allreduce of N floats over 2 ranks ok (PATH)" and exits 0,
 * or names what went wrong and exits 1. Only <hora/hora.h>: the public API. */
#include <hora/hora.h>
#include <hora/hora_config.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 4099 /* more than one small message, an odd count */

/* A free TCP port on 127.0.0.1 below the kernel's ephemeral range (where
 * an outgoing connection of another process could take it between this
 * check and the rank's bind), at random (main seeds rand) among those
 * that bind now. */
static int free_port(void)
{
	int lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	if (lo <= 12000)
		lo = 32768; /* an unusual range: below it is still outside */
	for (int tries = 0; tries < 200; tries++) {
		int port = 10000 + rand() % (lo - 10000);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			return -1;
		int ok = !bind(fd, (struct sockaddr *)&a, sizeof(a));
		close(fd);
		if (ok)
			return port;
	}
	return -1;
}

static int run_rank(int rank, const char *const *addrs)
{
	static float x[N];
	char err[1024], path[256];
	struct hora_comm_config cfg;
	struct hora_comm *c;
	hora_comm_config_defaults(&cfg);
	cfg.rank = rank;
	cfg.size = 2;
	cfg.addrs = addrs;
	cfg.secret = "consumer-test-secret-0123456789";
	cfg.secret_len = strlen(cfg.secret);
	cfg.connect_timeout_ms = 20000;
	int rc = hora_comm_create(&cfg, &c, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "rank %d: hora_comm_create: %s\n", rank, err);
		return 1;
	}
	for (int i = 0; i < N; i++)
		x[i] = (float)((rank + 1) * (i + 1));
	rc = hora_allreduce(c, x, x, N, HORA_F32, HORA_SUM);
	if (rc) {
		fprintf(stderr, "rank %d: hora_allreduce: %s (%s)\n", rank, hora_strerror(rc),
			hora_comm_last_error(c));
		hora_comm_destroy(c);
		return 1;
	}
	int bad = 0;
	for (int i = 0; i < N; i++)
		if (x[i] != (float)(3 * (i + 1))) {
			if (!bad)
				fprintf(stderr, "rank %d: x[%d] = %g, expected %d\n", rank, i, x[i], 3 * (i + 1));
			bad++;
		}
	hora_comm_describe(c, sizeof(x), path, sizeof(path));
	hora_comm_destroy(c);
	if (bad)
		return 1;
	if (rank == 0)
		printf("hora %s: allreduce of %d floats over 2 ranks ok (%s)\n", hora_version(), N, path);
	return 0;
}

int main(void)
{
	if (strcmp(hora_version(), HORA_VERSION_STRING)) {
		fprintf(stderr, "library %s, headers %s\n", hora_version(), HORA_VERSION_STRING);
		return 1;
	}
	srand((unsigned)getpid() ^ (unsigned)time(NULL));
	int p0 = free_port(), p1 = free_port();
	if (p0 < 0 || p1 < 0 || p0 == p1) {
		fprintf(stderr, "no free ports\n");
		return 1;
	}
	char a0[32], a1[32];
	snprintf(a0, sizeof(a0), "127.0.0.1:%d", p0);
	snprintf(a1, sizeof(a1), "127.0.0.1:%d", p1);
	const char *addrs[2] = {a0, a1};
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0)
		_exit(run_rank(1, addrs));
	int rc = run_rank(0, addrs), st = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "rank 1 (pid %d) failed (status 0x%x)\n", (int)pid, st);
		rc = 1;
	}
	return rc;
}
