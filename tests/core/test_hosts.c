/* test_hosts.c - host names in cluster files (core/hosts.c): which strings
 * are hosts, and the lookup of an address, of a name, and of HOST:PORT. */
#include "hosts.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

Test(hosts, addresses_and_names_are_hosts_and_the_rest_is_not)
{
	const char *good[] = {"127.0.0.1", "10.213.8.4", "localhost", "hora-0.hora", "n1",
			      "hora-3.hora.default.svc.cluster.local", "a-b.c-d", "x1.y2"};
	const char *bad[] = {"", "node_1", "-a", "a-", "a..b", ".a", "a.", "10.0.0", "1.2.3.4.5", "a b",
			     "host:1", "é"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		cr_expect(hora_host_valid(good[i]), "'%s' is a host", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect(!hora_host_valid(bad[i]), "'%s' is no host", bad[i]);
	char label[70];
	memset(label, 'a', 64);
	label[64] = 0;
	cr_expect(!hora_host_valid(label), "a label of 64 bytes is too long");
	label[63] = 0;
	cr_expect(hora_host_valid(label), "a label of 63 bytes is fine");
}

Test(hosts, an_address_stays_and_a_name_is_looked_up)
{
	char ip[HORA_HOST_IP_MAX], err[256] = "", out[64];
	cr_assert_eq(hora_host_resolve("10.1.2.3", ip, 0, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(ip, "10.1.2.3");
	cr_assert_eq(hora_host_resolve("localhost", ip, 0, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(ip, "127.0.0.1", "localhost is 127.0.0.1 in /etc/hosts (got %s)", ip);
	cr_assert_eq(hora_hostport_resolve("localhost:29501", out, sizeof(out), 0, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(out, "127.0.0.1:29501");
	cr_expect_eq(hora_hostport_resolve("localhost", out, sizeof(out), 0, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "'localhost' is not HOST:PORT"), "%s", err);
}
