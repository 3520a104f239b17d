/* hosts.c - host names in cluster files: checked at load, resolved at use
 * (hosts.h). */
#include "hosts.h"

#include "net/util/clock.h"
#include "net/util/hostport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

bool hora_host_valid(const char *host)
{
	struct in_addr a;
	if (inet_pton(AF_INET, host, &a) == 1)
		return true;
	size_t n = strlen(host), label = 0;
	if (n == 0 || n > 253)
		return false;
	bool digits_only = true;
	for (size_t i = 0; i <= n; i++) {
		const char ch = host[i];
		if (ch == '.' || ch == 0) {
			if (label == 0 || host[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		const bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
		if (!alnum && (ch != '-' || label == 0))
			return false;
		digits_only = digits_only && ch >= '0' && ch <= '9';
		if (++label > 63)
			return false;
	}
	return !digits_only; /* "10.0.0" is a broken address, not a name */
}

static int lookup(const char *host, char ip[HORA_HOST_IP_MAX], const char **why)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc) {
		*why = rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc);
		return -1;
	}
	const struct sockaddr_in *sin = (const struct sockaddr_in *)res->ai_addr;
	inet_ntop(AF_INET, &sin->sin_addr, ip, HORA_HOST_IP_MAX);
	freeaddrinfo(res);
	return 0;
}

int hora_host_resolve(const char *host, char ip[HORA_HOST_IP_MAX], int timeout_ms, char *err, size_t errlen)
{
	struct in_addr a;
	if (inet_pton(AF_INET, host, &a) == 1) {
		snprintf(ip, HORA_HOST_IP_MAX, "%s", host);
		return 0;
	}
	const double t0 = hora_clock_s(), end = t0 + timeout_ms / 1e3;
	const char *why = "";
	while (lookup(host, ip, &why)) {
		if (hora_clock_s() >= end) {
			snprintf(err, errlen, "%s does not resolve to an IPv4 address (after %.1f s): %s", host,
				 hora_clock_s() - t0, why);
			return -EHOSTUNREACH;
		}
		usleep(200000);
	}
	return 0;
}

int hora_hostport_resolve(const char *hp, char *out, size_t outlen, int timeout_ms, char *err, size_t errlen)
{
	char host[256], ip[HORA_HOST_IP_MAX];
	uint16_t port;
	if (hora_hostport_split(hp, host, sizeof(host), &port))
		return snprintf(err, errlen, "'%s' is not HOST:PORT", hp), -EINVAL;
	int rc = hora_host_resolve(host, ip, timeout_ms, err, errlen);
	if (!rc)
		snprintf(out, outlen, "%s:%u", ip, port);
	return rc;
}
