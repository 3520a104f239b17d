/* run_hosts.c - `hora run -H host:slots,...` and `--hostfile F` (run.h), as
 * horovodrun reads them: a host is a name or an IPv4 address, resolved here
 * for the checks (all loopback: local; one host named twice is refused; the
 * generated file keeps the name, which ssh and each host look up). */
#include "run.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* slots: a positive integer; -1 when not one */
static int parse_slots(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < 1 || v > 4096 || !isdigit((unsigned char)*s))
		return -1;
	return (int)v;
}

/* Append host name with slots, resolved. 0, or 2 with the problem in why. */
static int add_host(struct run_hosts *hs, const char *name, int slots, char *why, size_t cap)
{
	if (hs->n == HORA_CLUSTER_MAX_NODES) {
		snprintf(why, cap, "more than %d hosts", HORA_CLUSTER_MAX_NODES);
		return 2;
	}
	struct run_host *h = &hs->h[hs->n];
	if (snprintf(h->name, sizeof(h->name), "%s", name) >= (int)sizeof(h->name)) {
		snprintf(why, cap, "host name too long");
		return 2;
	}
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
	int rc = getaddrinfo(name, NULL, &hints, &ai);
	if (rc || !ai) {
		snprintf(why, cap, "cannot resolve host '%s' to an IPv4 address: %s", name, gai_strerror(rc));
		return 2;
	}
	inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, h->ip, sizeof(h->ip));
	freeaddrinfo(ai);
	for (int i = 0; i < hs->n; i++)
		if (!strcmp(hs->h[i].ip, h->ip)) {
			snprintf(why, cap, "host '%s' (%s) is named twice (give its slots once)", name, h->ip);
			return 2;
		}
	h->slots = slots;
	hs->n++;
	return 0;
}

int run_hosts_parse_list(struct run_hosts *hs, const char *list)
{
	char buf[4096], why[512];
	if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf) || !*list) {
		fprintf(stderr, "hora run: -H wants host[:slots],... (got '%s')\n", list);
		return 2;
	}
	char *p = buf;
	for (;;) {
		char *comma = strchr(p, ','), *colon;
		if (comma)
			*comma = 0;
		colon = strrchr(p, ':');
		int slots = 1;
		if (colon) {
			*colon = 0;
			slots = parse_slots(colon + 1);
		}
		if (!*p || slots < 0) {
			if (colon)
				*colon = ':';
			fprintf(stderr, "hora run: -H '%s': '%s' is not host[:slots] with slots a positive "
					"integer\n", list, p);
			return 2;
		}
		if (add_host(hs, p, slots, why, sizeof(why))) {
			fprintf(stderr, "hora run: -H '%s': %s\n", list, why);
			return 2;
		}
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

/* One hostfile line (comment stripped): "host [slots=N]"; empty: nothing.
 * 0, or 2 with why. */
static int file_line(struct run_hosts *hs, char *line, char *why, size_t cap)
{
	char *save, *host = strtok_r(line, " \t\r\n", &save);
	if (!host)
		return 0;
	char *opt = strtok_r(NULL, " \t\r\n", &save), *more = strtok_r(NULL, " \t\r\n", &save);
	int slots = 1;
	if (opt && (strncmp(opt, "slots=", 6) || (slots = parse_slots(opt + 6)) < 0 || more)) {
		snprintf(why, cap, "expected 'HOST slots=N' with N a positive integer (got '%s %s%s%s')",
			 host, opt, more ? " " : "", more ? more : "");
		return 2;
	}
	return add_host(hs, host, slots, why, cap);
}

int run_hosts_parse_file(struct run_hosts *hs, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "hora run: --hostfile %s: %s\n", path, strerror(errno));
		return 2;
	}
	char line[1024], why[512];
	int no = 0, rc = 0;
	while (!rc && fgets(line, sizeof(line), f)) {
		no++;
		if (!strchr(line, '\n') && !feof(f)) { /* longer than any host line can be */
			fprintf(stderr, "hora run: %s:%d: a line longer than %zu bytes\n", path, no,
				sizeof(line) - 2);
			rc = 2;
			break;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		if ((rc = file_line(hs, line, why, sizeof(why))))
			fprintf(stderr, "hora run: %s:%d: %s\n", path, no, why);
	}
	fclose(f);
	if (!rc && !hs->n) {
		fprintf(stderr, "hora run: %s: no hosts in the file\n", path);
		rc = 2;
	}
	return rc;
}

int run_hosts_fill(struct run_hosts *hs, int np, const char *from)
{
	int total = 0;
	for (int i = 0; i < hs->n; i++)
		total += hs->h[i].slots;
	if (np > total) {
		fprintf(stderr, "hora run: -np %d is more than the %d slot(s) of %s\n", np, total, from);
		return 2;
	}
	int left = np, n = 0;
	for (int i = 0; i < hs->n && left; i++, n++) {
		if (hs->h[i].slots > left)
			hs->h[i].slots = left;
		left -= hs->h[i].slots;
	}
	hs->n = n;
	return 0;
}

int run_hosts_check_mix(const struct run_hosts *hs, const char *from)
{
	int loop = -1, other = -1;
	for (int i = 0; i < hs->n; i++)
		*(strncmp(hs->h[i].ip, "127.", 4) ? &other : &loop) = i;
	if (loop < 0 || other < 0)
		return 0;
	fprintf(stderr, "hora run: %s: host '%s' is a loopback address (%s), which %s cannot reach: name "
			"this host by an address the other hosts reach\n",
		from, hs->h[loop].name, hs->h[loop].ip, hs->h[other].name);
	return 2;
}

bool run_hosts_all_loopback(const struct run_hosts *hs)
{
	for (int i = 0; i < hs->n; i++)
		if (strncmp(hs->h[i].ip, "127.", 4))
			return false;
	return true;
}
