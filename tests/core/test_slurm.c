/* test_slurm.c - an srun step as hora reads it (core/slurm.c): host lists
 * as `scontrol show hostnames` expands them, tasks per node, the nodes,
 * seed and ports made of them, and the block-distribution check. */
#include "cluster.h"
#include "slurm.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static char names[HORA_SLURM_MAX_HOSTS][64];

static void expect_names(const char *list, const char *const *want, int n)
{
	char err[256] = "";
	int got = hora_slurm_hostnames(list, names, HORA_SLURM_MAX_HOSTS, err, sizeof(err));
	cr_assert_eq(got, n, "'%s': %d hosts, want %d (%s)", list, got, n, err);
	for (int i = 0; i < n; i++)
		cr_expect_str_eq(names[i], want[i], "'%s' host %d", list, i);
}

Test(slurm, host_lists_expand_as_scontrol_show_hostnames)
{
	expect_names("n1", (const char *[]){"n1"}, 1);
	expect_names("n[1-3,7]", (const char *[]){"n1", "n2", "n3", "n7"}, 4);
	expect_names("gpu[08-10]-ib,login", (const char *[]){"gpu08-ib", "gpu09-ib", "gpu10-ib", "login"}, 4);
	expect_names("r[1-2]n[1-2]", (const char *[]){"r1n1", "r1n2", "r2n1", "r2n2"}, 4);
	expect_names("a,b[3],c", (const char *[]){"a", "b3", "c"}, 3);
	char err[256];
	cr_expect_eq(hora_slurm_hostnames("n[1-", names, 64, err, sizeof(err)), -1);
	cr_expect(strstr(err, "unclosed"), "%s", err);
	cr_expect_eq(hora_slurm_hostnames("n[3-1]", names, 64, err, sizeof(err)), -1);
	cr_expect(strstr(err, "bad range '3-1'"), "%s", err);
	cr_expect_eq(hora_slurm_hostnames("n[1-100]", names, 64, err, sizeof(err)), -1);
	cr_expect(strstr(err, "more than 64 hosts"), "%s", err);
	cr_expect_eq(hora_slurm_hostnames("a,,b", names, 64, err, sizeof(err)), -1);
}

Test(slurm, tasks_per_node_repeat)
{
	int t[8], err_n;
	char err[128];
	cr_assert_eq(hora_slurm_tasks_per_node("2(x3),1", t, 8, err, sizeof(err)), 4, "%s", err);
	cr_expect(t[0] == 2 && t[1] == 2 && t[2] == 2 && t[3] == 1);
	err_n = hora_slurm_tasks_per_node("2(x", t, 8, err, sizeof(err));
	cr_expect_eq(err_n, -1);
	cr_expect_eq(hora_slurm_tasks_per_node("0", t, 8, err, sizeof(err)), -1);
	cr_expect_eq(hora_slurm_tasks_per_node("2;3", t, 8, err, sizeof(err)), -1);
}

static struct hora_slurm step(int procid, int localid, int nodeid)
{
	struct hora_slurm s = {.on = 1, .procid = procid, .ntasks = 4, .localid = localid, .nodeid = nodeid,
			       .job_id = 17, .step_id = 0};
	snprintf(s.nodelist, sizeof(s.nodelist), "10.9.0.[1-2]"); /* addresses: no scontrol needed */
	snprintf(s.tasks_per_node, sizeof(s.tasks_per_node), "2(x2)");
	return s;
}

Test(slurm, the_step_gives_nodes_seed_and_ports)
{
	struct hora_cluster_config c;
	hora_cluster_defaults(&c);
	struct hora_slurm s = step(3, 1, 1);
	char err[512] = "";
	cr_assert_eq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.nnodes, 2);
	cr_expect_str_eq(c.nodes[0].host, "10.9.0.1");
	cr_expect_str_eq(c.nodes[1].host, "10.9.0.2");
	cr_expect(c.nodes[0].workers == 2 && c.nodes[1].workers == 2);
	cr_expect_eq(c.port_base, 10000 + 128 * ((17 * 31 + 0) % 170), "below the ephemeral ports");
	cr_expect_str_eq(c.seeds[0], "10.9.0.1:12177");
	snprintf(s.resv_ports, sizeof(s.resv_ports), "12000-12003");
	cr_assert_eq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(c.port_base, 11999, "worker g on port_base + 1 + g = the reserved ports");
	snprintf(s.resv_ports, sizeof(s.resv_ports), "12000-12004,12010");
	cr_assert_eq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(c.port_base, 11999, "a list: its first range");
	snprintf(s.resv_ports, sizeof(s.resv_ports), "12000-12002");
	cr_expect_neq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0);
	cr_expect(strstr(err, "holds 3 ports from 12000, the step has 4 tasks") &&
		  strstr(err, "srun --resv-ports=4"), "%s", err);
	snprintf(s.resv_ports, sizeof(s.resv_ports), "12000"); /* one port: refused, not ignored */
	cr_expect_neq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0);
	cr_expect(strstr(err, "holds 1 ports"), "%s", err);
	snprintf(s.resv_ports, sizeof(s.resv_ports), "12x");
	cr_expect_neq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0);
	cr_expect(strstr(err, "is not PORT[-PORT]"), "%s", err);
}

Test(slurm, fake_nodes_of_one_address_are_one_host)
{
	struct hora_cluster_config c;
	hora_cluster_defaults(&c);
	struct hora_slurm s = step(0, 0, 0);
	snprintf(s.nodelist, sizeof(s.nodelist), "127.0.0.1,127.0.0.1");
	char err[512] = "";
	cr_assert_eq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(c.nnodes, 1);
	cr_expect_eq(c.nodes[0].workers, 4);
}

Test(slurm, a_cyclic_distribution_is_refused_naming_it)
{
	struct hora_cluster_config c;
	hora_cluster_defaults(&c);
	struct hora_slurm s = step(1, 0, 1); /* task 1 on node 1: cyclic */
	char err[512] = "";
	cr_assert_neq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0);
	cr_expect(strstr(err, "block distribution"), "%s", err);
	s = step(0, 0, 0);
	snprintf(s.tasks_per_node, sizeof(s.tasks_per_node), "3,2");
	cr_assert_neq(hora_slurm_fill(&c, &s, err, sizeof(err)), 0);
	cr_expect(strstr(err, "sums to 5 tasks, SLURM_NTASKS is 4"), "%s", err);
}
