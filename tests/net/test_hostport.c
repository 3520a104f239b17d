/* test_hostport.c - the one host:port parser (net/util/hostport.c). */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "net/util/hostport.h"

Test(net_hostport, splits_at_the_last_colon)
{
	char host[16];
	uint16_t port = 0;
	cr_assert_eq(hora_hostport_split("10.0.0.2:29500", host, sizeof(host), &port), 0);
	cr_assert_str_eq(host, "10.0.0.2");
	cr_assert_eq(port, 29500);
	cr_assert_eq(hora_hostport_split("a:b:0", host, sizeof(host), &port), 0);
	cr_assert_str_eq(host, "a:b");
	cr_assert_eq(port, 0);
}

Test(net_hostport, refuses_what_is_not_host_colon_port)
{
	char host[8] = "keep";
	uint16_t port = 7;
	const char *bad[] = {"", "nohost", ":80", "h:", "h:65536", "h:8x", "h:-1", "h: 80",
			     "h:123456", "toolonghost:80"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		cr_assert_eq(hora_hostport_split(bad[i], host, sizeof(host), &port), -EINVAL, "%s",
			     bad[i]);
	cr_assert_str_eq(host, "keep");
	cr_assert_eq(port, 7);
	cr_assert_eq(hora_hostport_split(NULL, host, sizeof(host), &port), -EINVAL);
	cr_assert_eq(hora_hostport_split("h:65535", NULL, 0, &port), 0);
	cr_assert_eq(port, 65535);
}
