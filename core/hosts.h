/* hosts.h - host names in cluster files (internal): a node's host and a
 * seed may be an IPv4 address or a DNS name (Kubernetes' <pod>.<service>,
 * Slurm's node names), resolved to IPv4 where a socket needs one, retried
 * while the name is not published yet (a pod that is still starting). */
#ifndef HORA_CORE_HOSTS_H
#define HORA_CORE_HOSTS_H

#include <stdbool.h>
#include <stddef.h>

#define HORA_HOST_IP_MAX 16 /* "255.255.255.255" + NUL */

/* An IPv4 address, or a DNS name: labels of letters, digits and '-' (not
 * at either end), at most 63 bytes each, 253 in all. */
bool hora_host_valid(const char *host);
/* host -> dotted IPv4 in ip: an address as it is, a name by getaddrinfo
 * (AF_INET), asked again every 200 ms until timeout_ms (0: once) while it
 * does not resolve. 0, or -EHOSTUNREACH with "NAME does not resolve
 * (after N s): REASON" in err. */
int hora_host_resolve(const char *host, char ip[HORA_HOST_IP_MAX], int timeout_ms, char *err, size_t errlen);
/* "host:port" -> "ip:port" in out, as hora_host_resolve. */
int hora_hostport_resolve(const char *hp, char *out, size_t outlen, int timeout_ms, char *err, size_t errlen);

#endif
