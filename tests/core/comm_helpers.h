/* comm_helpers.h - ranks as threads of one test process, each with its own
 * communicator over loopback (test_comm.c, test_dtrain.c). */
#ifndef HORA_TEST_COMM_HELPERS_H
#define HORA_TEST_COMM_HELPERS_H

#include "hora.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TC_MAXR 6
#define TC_SECRET "test-cluster-secret-0123456789"

static char tc_addr[TC_MAXR][32];
static const char *tc_addrs[TC_MAXR];

/* fresh 127.0.0.1 ports for n ranks, below the ephemeral range (32768+) so
 * that no outgoing socket holds one */
static inline void tc_pick_addrs(int n)
{
	static int round;
	int base = 10000 + (int)((getpid() * 41 + time(NULL) + 97 * round++) % 20000);
	for (int i = 0; i < n; i++) {
		snprintf(tc_addr[i], sizeof(tc_addr[i]), "127.0.0.1:%d", base + i);
		tc_addrs[i] = tc_addr[i];
	}
}

static inline void tc_config(struct hora_comm_config *cfg, int rank, int n)
{
	hora_comm_config_defaults(cfg);
	cfg->rank = rank;
	cfg->size = n;
	cfg->addrs = tc_addrs;
	cfg->secret = TC_SECRET;
	cfg->secret_len = strlen(TC_SECRET);
	cfg->connect_timeout_ms = 10000;
	cfg->io_timeout_ms = 20000;
}

/* run fn on args[0..n) (each `size` bytes apart), one thread each, and join */
static inline void tc_threads(int n, void *(*fn)(void *), void *args, size_t size)
{
	pthread_t th[TC_MAXR];
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * size);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

#endif
