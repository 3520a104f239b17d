/* test_config.c - YAML config and key=value setters: good files, and bad
 * ones whose errors name file, line, column and key; nesting refused while
 * parsing; keys of features this build lacks refused, never ignored; one
 * size parser for every size key; the note on distributed-only keys. */
#include "hora.h"
#include "../helpers.h"
#include "core/cluster.h"
#include "core/config.h"
#include "gpu/hora_gpu.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <sys/stat.h>

static char *dir;
static char err[1024];
static struct hora_train_config cfg;

static void setup(void)
{
	dir = th_tmpdir();
	hora_train_config_defaults(&cfg);
	err[0] = 0;
}
static void teardown(void)
{
	th_rmrf(dir);
	free(dir);
}
TestSuite(core_config, .init = setup, .fini = teardown);

static int load(const char *yaml)
{
	char *p = th_path(dir, "c.yaml");
	th_write(p, yaml, strlen(yaml), 0);
	int rc = hora_config_load_yaml(&cfg, p, err, sizeof(err));
	free(p);
	return rc;
}

Test(core_config, full_file)
{
	int rc = load("cluster:\n"
		      "  name: demo\n"
		      "  seeds: [\"127.0.0.1:29500\"]\n"
		      "transport: {chunk_size: 1MiB}\n"
		      "train:\n"
		      "  model: softmax_regression\n"
		      "  hidden: [256, 64]\n"
		      "  data: data/fashion-mnist\n"
		      "  epochs: 3\n"
		      "  batch_size: 128\n"
		      "  seed: 7\n"
		      "  metrics: out.jsonl\n"
		      "  optimizer:\n"
		      "    name: adam\n"
		      "    lr: 0.001\n"
		      "    beta2: 0.99\n"
		      "    warmup_epochs: 0.5\n"
		      "    schedule: constant\n"
		      "    scale_lr_by_size: false\n"
		      "  sync: allreduce\n");
	cr_assert_eq(rc, 0, "%s", err);
	cr_assert_str_eq(cfg.model, "softmax_regression");
	cr_assert_eq(cfg.nhidden, 2);
	cr_assert_eq(cfg.hidden[0], 256);
	cr_assert_eq(cfg.hidden[1], 64);
	cr_assert_str_eq(cfg.data, "data/fashion-mnist");
	cr_assert_eq(cfg.epochs, 3);
	cr_assert_eq(cfg.batch_size, 128);
	cr_assert_eq(cfg.seed, 7);
	cr_assert_str_eq(cfg.metrics, "out.jsonl");
	cr_assert_eq(cfg.optim.kind, HORA_OPTIM_ADAM);
	cr_assert_float_eq(cfg.optim.lr, 0.001, 1e-12);
	cr_assert_float_eq(cfg.optim.beta2, 0.99, 1e-12);
	cr_assert_float_eq(cfg.optim.warmup_epochs, 0.5, 1e-12);
	cr_assert_eq(cfg.optim.schedule, HORA_LR_CONSTANT);
	cr_assert_eq(cfg.optim.scale_lr_by_size, 0);
}

Test(core_config, plugin_model_mapping)
{
	cr_assert_eq(load("train:\n  model: {plugin: ./libfoo.so}\n"), 0, "%s", err);
	cr_assert_str_eq(cfg.model, "./libfoo.so");
}

Test(core_config, values_not_in_file_keep_defaults)
{
	cr_assert_eq(load("train:\n  epochs: 2\n"), 0, "%s", err);
	cr_assert_eq(cfg.batch_size, 32);
	cr_assert_str_eq(cfg.model, "mnist_mlp");
}

Test(core_config, wrong_type_names_line_column_key)
{
	cr_assert_eq(load("train:\n  model: mnist_mlp\n  epochs: many\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:11: train.epochs must be a positive integer (got 'many')"),
		  "err: %s", err);
}

Test(core_config, negative_batch)
{
	cr_assert_eq(load("train:\n    batch_size: -4\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:17: train.batch_size must be an integer in 1..1048576"),
		  "err: %s", err);
}

Test(core_config, unknown_key)
{
	cr_assert_eq(load("train:\n  optimizer:\n    lr: 0.1\n    mommentum: 0.9\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:4:5: unknown key 'train.optimizer.mommentum'"), "err: %s", err);
}

Test(core_config, unknown_section)
{
	cr_assert_eq(load("trian:\n  epochs: 1\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:1:1: unknown section 'trian'"), "err: %s", err);
}

Test(core_config, malformed_yaml_has_position)
{
	cr_assert_eq(load("train:\n  epochs: [1, 2\n  batch_size: 3\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:") && strstr(err, "invalid YAML"), "err: %s", err);
	cr_assert(strstr(err, "c.yaml:3:") || strstr(err, "c.yaml:2:"), "err: %s", err);
}

Test(core_config, bad_indentation)
{
	cr_assert_eq(load("train:\n  epochs: 1\n batch_size: 3\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:") && strstr(err, "invalid YAML"), "err: %s", err);
}

Test(core_config, list_where_scalar_expected)
{
	cr_assert_eq(load("train:\n  epochs: [1, 2]\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:11: train.epochs must be a scalar, not a list"), "err: %s", err);
}

Test(core_config, bad_hidden_item)
{
	cr_assert_eq(load("train:\n  hidden: [128, x]\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:11: train.hidden must be a list of layer widths"), "err: %s",
		  err);
}

Test(core_config, duplicate_key)
{
	cr_assert_eq(load("train:\n  epochs: 1\n  epochs: 2\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:3: duplicate key 'train.epochs'"), "err: %s", err);
}

Test(core_config, top_level_must_be_mapping)
{
	cr_assert_eq(load("- a\n- b\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:1:1: top level must be a mapping, not a list"), "err: %s", err);
}

Test(core_config, empty_file)
{
	cr_assert_eq(load(""), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "empty file"), "err: %s", err);
}

Test(core_config, missing_file)
{
	cr_assert_eq(hora_config_load_yaml(&cfg, "/nonexistent/x.yaml", err, sizeof(err)),
		     HORA_ERR_CONFIG);
	cr_assert(strstr(err, "/nonexistent/x.yaml: cannot open"), "err: %s", err);
}

Test(core_config, failing_file_leaves_config_untouched)
{
	cr_assert_eq(load("train:\n  epochs: 5\n  lr: 0.1\n"), HORA_ERR_CONFIG);
	cr_assert_eq(cfg.epochs, 20);
}

Test(core_config, binary_garbage)
{
	const char junk[] = "\x01\x02\xff\xfe: [\x00\x80";
	char *p = th_path(dir, "c.yaml");
	th_write(p, junk, sizeof(junk), 0);
	cr_assert_eq(hora_config_load_yaml(&cfg, p, err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:"), "err: %s", err);
	free(p);
}

Test(core_config, setter_validates_like_yaml)
{
	cr_assert_eq(hora_config_set(&cfg, "train.optimizer.lr", "0", err, sizeof(err)),
		     HORA_ERR_CONFIG);
	cr_assert(strstr(err, "train.optimizer.lr must be a positive number (got '0')"), "%s", err);
	cr_assert_eq(hora_config_set(&cfg, "train.optimizer.momentum", "0.9", err, sizeof(err)), 0);
	cr_assert_float_eq(cfg.optim.momentum, 0.9, 1e-12);
	cr_assert_eq(hora_config_set(&cfg, "train.optimizer.nesterov", "yes", err, sizeof(err)), 0);
	cr_assert_eq(cfg.optim.nesterov, 1);
	cr_assert_eq(hora_config_set(&cfg, "train.hidden", "64,32", err, sizeof(err)), 0);
	cr_assert_eq(cfg.nhidden, 2);
	cr_assert_eq(hora_config_set(&cfg, "train.hidden", "[]", err, sizeof(err)), 0);
	cr_assert_eq(cfg.nhidden, 0);
	cr_assert_eq(hora_config_set(&cfg, "train.hidden", "1,2,3,4,5,6,7,8,9", err, sizeof(err)),
		     HORA_ERR_CONFIG);
	cr_assert_eq(hora_config_set(&cfg, "train.seed", "-1", err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert_eq(hora_config_set(&cfg, "nope", "1", err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "unknown key 'nope'"), "%s", err);
}

/* ---- nesting: refused while parsing, at the level that goes too deep ---- */

/* "train:\n" head, then n x open, inner, n x close */
static int load_nested_after(const char *head, int n, const char *open, const char *inner,
			     const char *close)
{
	const size_t lo = strlen(open), lc = strlen(close);
	char *y = malloc(32 + strlen(head) + (size_t)n * (lo + lc) + strlen(inner));
	cr_assert_not_null(y);
	size_t k = (size_t)sprintf(y, "train:\n%s", head);
	for (int i = 0; i < n; i++, k += lo)
		memcpy(y + k, open, lo);
	k += (size_t)sprintf(y + k, "%s", inner);
	for (int i = 0; i < n; i++, k += lc)
		memcpy(y + k, close, lc);
	y[k++] = '\n';
	char *p = th_path(dir, "c.yaml");
	th_write(p, y, k, 0);
	free(y);
	int rc = hora_config_load_yaml(&cfg, p, err, sizeof(err));
	free(p);
	return rc;
}

static int load_nested(int n, const char *open, const char *inner, const char *close)
{
	return load_nested_after("  epochs: ", n, open, inner, close);
}

/* 200,000 levels took minutes of CPU in libyaml before being refused (its
 * scanner and loader are quadratic in the depth); now the event stream is
 * checked first and the 65th level is refused where it opens: the top
 * mapping and train's are levels 1 and 2, so '[' number 63 at column 73. */
Test(core_config, deep_nesting_is_refused_at_its_position, .timeout = 60)
{
	cr_assert_eq(load_nested(200000, "[", "", "]"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:73: nested more than 64 levels deep"), "err: %s", err);
	/* flow mappings: "{a: " is 4 columns */
	cr_assert_eq(load_nested(200000, "{a: ", "1", "}"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:259: nested more than 64 levels deep"), "err: %s", err);
	/* block sequences on one line: "- " is 2 columns from column 5 */
	cr_assert_eq(load_nested_after("  epochs:\n    ", 200000, "- ", "1", ""), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:129: nested more than 64 levels deep"), "err: %s", err);
	cr_assert_eq(cfg.epochs, 20);
}

Test(core_config, nesting_up_to_the_limit_is_parsed)
{
	/* 62 lists inside train's mapping: 64 levels, a type error, not a depth one */
	cr_assert_eq(load_nested(62, "[", "1", "]"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:11: train.epochs must be a scalar, not a list"), "err: %s", err);
	cr_assert_eq(load_nested(63, "[", "1", "]"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:73: nested more than 64 levels deep"), "err: %s", err);
}

Test(core_config, the_cluster_loader_refuses_deep_nesting_too, .timeout = 60)
{
	cr_assert_eq(load_nested(200000, "[", "", "]"), HORA_ERR_CONFIG);
	char *p = th_path(dir, "c.yaml");
	struct hora_cluster_config cc;
	hora_cluster_defaults(&cc);
	cr_assert_eq(hora_cluster_load(&cc, p, err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:73: nested more than 64 levels deep"), "err: %s", err);
	free(p);
}

/* aliases nest a mapping without nesting the text: the walk counts too */
Test(core_config, nesting_through_aliases_is_refused)
{
	char y[8192];
	/* a chain of 70 anchors inside a section the train loader skips, each
	 * mapping holding the one before: 3 levels of text, 72 walked */
	size_t k = (size_t)sprintf(y, "cluster:\n  a0: &a0 {x: 1}\n");
	for (int i = 1; i <= 70; i++)
		k += (size_t)sprintf(y + k, "  a%d: &a%d {x: *a%d}\n", i, i, i - 1);
	k += (size_t)sprintf(y + k, "train:\n  optimizer: {x: *a70}\n");
	char *p = th_path(dir, "c.yaml");
	th_write(p, y, k, 0);
	cr_assert_eq(hora_config_load_yaml(&cfg, p, err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "nested more than 64 levels deep (through aliases)"), "err: %s", err);
	free(p);
}

Test(core_config, a_second_document_is_refused)
{
	cr_assert_eq(load("train:\n  epochs: 1\n---\ntrain:\n  epochs: 2\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:1: a second YAML document"), "err: %s", err);
}

Test(core_config, a_directory_or_a_huge_file_is_refused)
{
	cr_assert_eq(hora_config_load_yaml(&cfg, dir, err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "cannot read: Is a directory"), "err: %s", err);
	size_t n = (2u << 20) + 1;
	char *y = malloc(n);
	cr_assert_not_null(y);
	memset(y, '#', n);
	y[n - 1] = '\n';
	char *p = th_path(dir, "c.yaml");
	th_write(p, y, n, 0);
	free(y);
	cr_assert_eq(hora_config_load_yaml(&cfg, p, err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml: larger than 1024 KiB"), "err: %s", err);
	free(p);
}

/* ---- nothing accepted and ignored ------------------------------------ */

Test(core_config, train_sync_is_allreduce_or_gossip)
{
	cr_assert_eq(load("train:\n  sync: allreduce\n"), 0, "%s", err);
	cr_assert_eq(cfg.gossip.on, 0);
	cr_assert_eq(load("train:\n  epochs: 2\n  sync: gossip\n"), 0, "%s", err);
	cr_assert_eq(cfg.gossip.on, 1);
	cr_assert_eq(cfg.gossip.topology, HORA_GOSSIP_EXPONENTIAL); /* BlueFog's default */
	cr_assert_eq(cfg.gossip.period, 1);
	cr_assert_lt(cfg.gossip.self_weight, 0);
	cr_assert_eq(hora_config_set(&cfg, "train.sync", "elastic", err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "train.sync must be allreduce or gossip (got 'elastic')"), "%s", err);
	cr_assert_eq(load("train:\n  sync: {mode: gossip}\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:2:3: train.sync must be a scalar, not a mapping") ||
		  strstr(err, "unknown key 'train.sync.mode'"), "err: %s", err);
}

Test(core_config, the_elastic_section_turns_it_on_and_every_key_is_checked)
{
	cr_assert_eq(cfg.elastic.on, 0);
	cr_assert_eq(load("train:\n  elastic:\n    min_workers: 2\n    batch: global\n"), 0, "%s", err);
	cr_assert_eq(cfg.elastic.on, 1);
	cr_assert_eq(cfg.elastic.min_workers, 2);
	cr_assert_eq(cfg.elastic.batch, HORA_ELASTIC_GLOBAL);
	cr_assert_eq(cfg.elastic.commit_steps, 20);
	hora_train_config_defaults(&cfg); /* enabled: false wins, written before or after */
	cr_assert_eq(load("train:\n  elastic:\n    enabled: false\n    restart: true\n"), 0, "%s", err);
	cr_assert_eq(cfg.elastic.on, 0);
	cr_assert_eq(cfg.elastic.restart, 1);
	hora_train_config_defaults(&cfg);
	cr_assert_eq(load("train:\n  elastic:\n    restart: true\n    enabled: false\n"), 0, "%s", err);
	cr_assert_eq(cfg.elastic.on, 0);
	static const char *const bad[][3] = {
		{"commit_steps: 0", "c.yaml:3:19: train.elastic.commit_steps must be an integer in 1..1000000",
		 NULL},
		{"batch: globl", "c.yaml:3:12: train.elastic.batch must be per_worker or global", NULL},
		{"wait_s: -1", "c.yaml:3:13: train.elastic.wait_s must be a positive number", NULL},
		{"min_workers: x", "c.yaml:3:18: train.elastic.min_workers must be an integer in 1..4096", NULL},
		{"restart: maybe", "c.yaml:3:14: train.elastic.restart", NULL},
		{"max_worker: 3", "unknown key 'train.elastic.max_worker'", NULL},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char y[128];
		snprintf(y, sizeof(y), "train:\n  elastic:\n    %s\n", bad[i][0]);
		cr_assert_eq(load(y), HORA_ERR_CONFIG, "%s", bad[i][0]);
		cr_assert(strstr(err, bad[i][1]), "%s: err: %s", bad[i][0], err);
	}
}

/* train.gossip: any key turns gossip on; every key checked with file:line:col;
 * what this build cannot do (gossip with elastic), what async does not take, and what contradicts
 * train.sync: allreduce is refused, in either order */
Test(core_config, the_gossip_section_turns_it_on_and_every_key_is_checked)
{
	cr_assert_eq(load("train:\n  gossip:\n    topology: ring\n    period: 4\n    self_weight: 0.5\n"
			  "    consensus_every: 100\n    mode: sync\n"), 0, "%s", err);
	cr_assert_eq(cfg.gossip.on, 1);
	cr_assert_eq(cfg.gossip.topology, HORA_GOSSIP_RING);
	cr_assert_eq(cfg.gossip.period, 4);
	cr_assert_float_eq(cfg.gossip.self_weight, 0.5, 1e-12);
	cr_assert_eq(cfg.gossip.consensus_every, 100);
	hora_train_config_defaults(&cfg);
	cr_assert_eq(load("train:\n  sync: gossip\n  gossip: {topology: one_peer_exponential}\n"), 0, "%s", err);
	cr_assert_eq(cfg.gossip.topology, HORA_GOSSIP_ONE_PEER_EXPONENTIAL);
	hora_train_config_defaults(&cfg);
	cr_assert_eq(cfg.gossip.adaptive, 1);
	cr_assert_eq(load("train:\n  gossip: {mode: async, adaptive: false, topology: ring}\n"), 0, "%s", err);
	cr_assert(cfg.gossip.mode == HORA_GOSSIP_ASYNC && cfg.gossip.adaptive == 0);
	static const char *const bad[][2] = {
		{"  gossip:\n    topology: star\n",
		 "c.yaml:3:15: train.gossip.topology must be ring, exponential, one_peer_exponential or random"},
		{"  gossip:\n    period: 0\n", "c.yaml:3:13: train.gossip.period must be an integer in 1..1000000"},
		{"  gossip:\n    self_weight: 1.5\n", "c.yaml:3:18: train.gossip.self_weight must be a number in [0, 1]"},
		{"  gossip:\n    consensus_every: -1\n", "c.yaml:3:22: train.gossip.consensus_every must be a non-negative"},
		{"  gossip:\n    fanout: 3\n", "unknown key 'train.gossip.fanout'"},
		{"  gossip:\n    adaptive: false\n", "c.yaml:3:15: train.gossip.adaptive applies to train.gossip.mode: async"},
		{"  gossip:\n    mode: async\n    adaptive: maybe\n", "c.yaml:4:15: train.gossip.adaptive must be"},
		{"  gossip:\n    self_weight: 0.5\n    mode: async\n",
		 "c.yaml:4:11: train.gossip.mode: async does not take train.gossip.self_weight (its pairs average"},
		{"  gossip:\n    consensus_every: 9\n    mode: async\n",
		 "c.yaml:4:11: train.gossip.mode: async does not take train.gossip.consensus_every (no barrier"},
		{"  gossip:\n    mode: async\n    consensus_every: 10\n",
		 "c.yaml:4:22: train.gossip.consensus_every does not apply to train.gossip.mode: async (no barrier"},
		{"  gossip:\n    mode: async\n    self_weight: 0.2\n",
		 "c.yaml:4:18: train.gossip.self_weight does not apply to train.gossip.mode: async (its pairs"},
		{"  sync: allreduce\n  gossip:\n    topology: ring\n",
		 "c.yaml:4:15: train.gossip.topology applies to train.sync: gossip, and train.sync is allreduce"},
		{"  gossip:\n    topology: ring\n  sync: allreduce\n",
		 "c.yaml:4:9: train.sync: allreduce, but a train.gossip key came before it"},
		{"  sync: gossip\n  elastic: {min_workers: 2}\n",
		 "c.yaml:3:26: train.elastic.min_workers: train.sync: gossip with train.elastic is not available"},
		{"  elastic: {min_workers: 2}\n  gossip: {period: 2}\n",
		 "c.yaml:3:20: train.gossip.period: train.sync: gossip with train.elastic is not available"},
		{"  elastic: {min_workers: 2}\n  sync: gossip\n", /* the key once, not "train.sync: train.sync:" */
		 "c.yaml:3:9: train.sync: gossip is not available with train.elastic in this build"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char y[256];
		hora_train_config_defaults(&cfg);
		snprintf(y, sizeof(y), "train:\n%s", bad[i][0]);
		cr_assert_eq(load(y), HORA_ERR_CONFIG, "%s", bad[i][0]);
		cr_assert(strstr(err, bad[i][1]), "%s: err: %s", bad[i][0], err);
	}
}

/* hora train (one worker) names what only a distributed job does, gossip too */
Test(core_config, a_single_worker_run_names_the_distributed_keys_it_ignores)
{
	char msg[512];
	cr_assert_eq(hora_config_single_worker_note(&cfg, msg, sizeof(msg)), 0);
	cr_assert_eq(load("train:\n  sync: gossip\n  stall_abort_s: 5\n"), 0, "%s", err);
	cr_assert_eq(hora_config_single_worker_note(&cfg, msg, sizeof(msg)), 2, "%s", msg);
	cr_assert(strstr(msg, "train.stall_abort_s, train.sync: gossip (train.gossip) apply only to distributed jobs"),
		  "%s", msg);
}

/* membership.refusal_proves_death: on by default, a boolean, checked */
Test(core_config, the_cluster_file_turns_the_proof_of_death_off)
{
	char *p = th_path(dir, "c.yaml");
	struct hora_cluster_config cc;
	hora_cluster_defaults(&cc);
	cc.secret_env = "config-test-secret-0123456789";
	cr_assert_eq(cc.membership.refusal_proves_death, 1);
	const char *y = "cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 2}\nmembership:\n"
			"  refusal_proves_death: false\n";
	th_write(p, y, strlen(y), 0);
	cr_assert_eq(hora_cluster_load(&cc, p, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(cc.membership.refusal_proves_death, 0);
	y = "cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 2}\nmembership:\n  refusal_proves_death: maybe\n";
	th_write(p, y, strlen(y), 0);
	hora_cluster_defaults(&cc);
	cc.secret_env = "config-test-secret-0123456789";
	cr_assert_eq(hora_cluster_load(&cc, p, err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:5:25: membership.refusal_proves_death"), "err: %s", err);
	free(p);
}

/* train.device: cpu always; cuda only where the CUDA MLP can run, refused
 * otherwise with the position and the GPU loader's own reason */
Test(core_config, train_device_cuda_is_refused_with_the_loaders_reason)
{
	cr_assert_eq(load("train:\n  device: cpu\n"), 0, "%s", err);
	cr_assert_eq(cfg.device, HORA_DEVICE_CPU);
	cr_assert_eq(load("train:\n  device: tpu\n"), HORA_ERR_CONFIG);
	cr_assert(strstr(err, ":2:11: train.device must be cpu or cuda (got 'tpu')"), "%s", err);

	char why[512] = "";
	int n = hora_gpu_device_count(why, sizeof(why));
	int rc = load("train:\n  epochs: 1\n  device: cuda\n");
	if (n >= 1) {
		cr_assert_eq(rc, 0, "%s", err);
		cr_assert_eq(cfg.device, HORA_DEVICE_CUDA);
		return;
	}
	cr_assert_eq(rc, HORA_ERR_CONFIG);
	cr_assert(strstr(err, "c.yaml:3:11: train.device: cuda is not available here: "), "%s", err);
	cr_assert(strstr(err, why), "the loader's reason '%s' is not in: %s", why, err);
	cr_assert_eq(cfg.device, HORA_DEVICE_CPU);
}

/* hora_init's view of a cluster file (hora_config_load_elastic): the
 * train.elastic keys only, checked; the rest of the train section (a model,
 * train.device: cuda, even a key this build does not know) is left unread,
 * so a program of its own is not refused for the built-in trainer's keys
 * nor made to probe the GPU. */
Test(core_config, hora_init_reads_only_the_elastic_keys)
{
	char *p = th_path(dir, "c.yaml");
	const char *ok = "cluster:\n  nodes: [{host: 127.0.0.1, workers: 2}]\n"
			 "train:\n  model: no_such_model\n  device: cuda\n  epochs: many\n"
			 "  elastic: {min_workers: 2, wait_s: 5}\n";
	th_write(p, ok, strlen(ok), 0);
	struct hora_elastic_config el = {0};
	cr_assert_eq(hora_config_load_elastic(&el, p, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(el.on, 1);
	cr_expect_eq(el.min_workers, 2);
	cr_expect_eq(el.wait_s, 5.0);
	const char *none = "cluster:\n  nodes: [{host: 127.0.0.1, workers: 2}]\ntrain:\n  epochs: 3\n";
	th_write(p, none, strlen(none), 0);
	cr_assert_eq(hora_config_load_elastic(&el, p, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(el.on, 0, "no train.elastic: not elastic");
	const char *bad = "train:\n  elastic:\n    min_workers: two\n";
	th_write(p, bad, strlen(bad), 0);
	cr_assert_neq(hora_config_load_elastic(&el, p, err, sizeof(err)), 0);
	cr_expect(strstr(err, "c.yaml:3:18: train.elastic.min_workers"), "%s", err);
	free(p);
}
