/* hostport.c - "host:port" splitting, shared by every module (see hostport.h). */
#include "hostport.h"

#include <errno.h>
#include <string.h>

int hora_hostport_split(const char *s, char *host, size_t hostlen, uint16_t *port)
{
	if (!s)
		return -EINVAL;
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s)
		return -EINVAL;
	size_t hl = (size_t)(colon - s);
	const char *p = colon + 1;
	if (!*p || strlen(p) > 5)
		return -EINVAL;
	unsigned long v = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	if (v > 65535)
		return -EINVAL;
	if (host) {
		if (hl >= hostlen)
			return -EINVAL;
		memcpy(host, s, hl);
		host[hl] = 0;
	}
	if (port)
		*port = (uint16_t)v;
	return 0;
}
