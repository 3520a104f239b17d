/* hostport.h - the one parser of "host:port" strings (cluster files, --listen,
 * --seed, bench flags). The port is after the LAST colon, so a bracket-free
 * IPv6 literal is not supported (hora's addresses are IPv4 or names).
 * Pure: no I/O, no allocation, thread-safe. */
#ifndef HORA_NET_UTIL_HOSTPORT_H
#define HORA_NET_UTIL_HOSTPORT_H

#include <stddef.h>
#include <stdint.h>

/* Split `s` = "host:port" into host (NUL-terminated, at most hostlen-1 bytes)
 * and port (0..65535, decimal digits only, nothing after them). host or port
 * may be NULL when the caller does not need it. Returns 0, or -EINVAL when
 * there is no colon, the host is empty or too long, or the port is not a
 * number in range; host and port are untouched then. */
int hora_hostport_split(const char *s, char *host, size_t hostlen, uint16_t *port);

#endif
