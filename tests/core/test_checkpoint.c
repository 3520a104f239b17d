/* test_checkpoint.c - checkpoint integrity and the resume hints: a damaged
 * file (header included) is called corrupt, naming the file and what failed,
 * and only an intact file of another version gets the version text; a
 * resume that fails because of the worker count or the settings says so and
 * does not offer the previous checkpoint, which a damaged file does. */
#include "hora.h"
#include "comm_helpers.h"
#include "../helpers.h"
#include "core/checkpoint.h"

#include <criterion/criterion.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NP 1000

static char *dir;
static char err[2048];
static float params[NP];
static struct hora_optim *opt;

static void setup(void)
{
	dir = th_tmpdir();
	err[0] = 0;
	struct hora_optim_config oc = {.kind = HORA_OPTIM_SGD, .lr = 0.1, .momentum = 0.9};
	cr_assert_eq(hora_optim_create(&oc, NP, &opt), 0);
	for (int i = 0; i < NP; i++)
		params[i] = (float)i * 0.5f;
}
static void teardown(void)
{
	hora_optim_destroy(opt);
	th_rmrf(dir);
	free(dir);
}
TestSuite(core_checkpoint, .init = setup, .fini = teardown);

/* a checkpoint of NP parameters in dir; its path in cur */
static void write_one(char *cur, size_t n)
{
	struct hora_ckpt_meta m = {.epoch = 3, .workers = 2, .step = 30, .rng = 7, .seed = 42,
				   .nparams = NP, .batch = 10};
	snprintf(m.model, sizeof(m.model), "mnist_mlp");
	snprintf(m.optimizer, sizeof(m.optimizer), "momentum");
	cr_assert_eq(hora_ckpt_write(dir, &m, params, opt, err, sizeof(err)), 0, "%s", err);
	char prev[1200];
	hora_ckpt_paths(dir, cur, prev, n);
}

static void flip(const char *path, long at, int bits)
{
	FILE *f = fopen(path, "r+b");
	cr_assert_not_null(f);
	fseek(f, at, SEEK_SET);
	int c = fgetc(f);
	fseek(f, at, SEEK_SET);
	fputc(c ^ bits, f);
	fclose(f);
}

static int read_back(const char *cur)
{
	struct hora_ckpt_meta m;
	static float out[NP];
	return hora_ckpt_read(cur, &m, out, NP, opt, err, sizeof(err));
}

Test(core_checkpoint, reads_back_what_it_wrote)
{
	char cur[1200];
	write_one(cur, sizeof(cur));
	struct hora_ckpt_meta m;
	static float out[NP];
	cr_assert_eq(hora_ckpt_read(cur, &m, out, NP, opt, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(m.epoch, 3);
	cr_assert_eq(m.workers, 2);
	cr_assert_eq(m.batch, 10);
	cr_assert_str_eq(m.optimizer, "momentum");
	cr_assert_eq(memcmp(out, params, sizeof(params)), 0);
}

/* byte 12 is the header length: flipped, it was reported as "version 2 not
 * supported (this hora reads 1 and 2)" */
Test(core_checkpoint, a_damaged_header_is_corrupt_not_another_version)
{
	char cur[1200];
	static const long at[] = {8, 9, 12, 13, 48, 56, 20, 100};
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		write_one(cur, sizeof(cur));
		flip(cur, at[i], 0x10);
		cr_assert_eq(read_back(cur), HORA_ERR_DATA, "byte %ld: %s", at[i], err);
		cr_assert(strstr(err, cur) && strstr(err, "is corrupt (checksum mismatch"),
			  "byte %ld: %s", at[i], err);
		cr_assert_null(strstr(err, "not supported"), "byte %ld: %s", at[i], err);
		cr_assert_null(strstr(err, "this hora reads"), "byte %ld: %s", at[i], err);
	}
	write_one(cur, sizeof(cur));
	flip(cur, 12, 0x10);
	read_back(cur);
	cr_assert(strstr(err, "its header is damaged too (version 2, header size 144)"), "%s", err);
}

Test(core_checkpoint, truncated_or_padded_files_say_so)
{
	char cur[1200];
	write_one(cur, sizeof(cur));
	FILE *f = fopen(cur, "r+b");
	cr_assert_eq(ftruncate(fileno(f), 300), 0);
	fclose(f);
	cr_assert_eq(read_back(cur), HORA_ERR_DATA);
	cr_assert(strstr(err, "is corrupt (checksum mismatch") &&
		  strstr(err, "it has 300 bytes where its header says") && strstr(err, "truncated"),
		  "%s", err);
	f = fopen(cur, "r+b");
	cr_assert_eq(ftruncate(fileno(f), 100), 0);
	fclose(f);
	cr_assert_eq(read_back(cur), HORA_ERR_DATA);
	cr_assert(strstr(err, "is truncated: 100 bytes, shorter than any checkpoint (160)"), "%s", err);
	write_one(cur, sizeof(cur));
	f = fopen(cur, "ab");
	fputs("extra", f);
	fclose(f);
	cr_assert_eq(read_back(cur), HORA_ERR_DATA);
	cr_assert(strstr(err, "is corrupt") && strstr(err, "trailing bytes"), "%s", err);
}

/* An intact file of another version: rewrite the version and the checksum. */
static void set_version(const char *path, uint32_t ver)
{
	FILE *f = fopen(path, "r+b");
	cr_assert_not_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	uint8_t *b = malloc((size_t)n);
	fseek(f, 0, SEEK_SET);
	cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	memcpy(b + 8, &ver, 4);
	crypto_generichash(b + n - 32, 32, b, (unsigned long long)n - 32, NULL, 0);
	fseek(f, 0, SEEK_SET);
	cr_assert_eq(fwrite(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	free(b);
}

Test(core_checkpoint, only_an_intact_file_gets_the_version_text)
{
	char cur[1200];
	write_one(cur, sizeof(cur));
	set_version(cur, 3);
	cr_assert_eq(read_back(cur), HORA_ERR_DATA);
	cr_assert(strstr(err, cur) && strstr(err, "is intact but version 3, and this hora reads "
						  "versions 1 and 2 (written by a newer hora?)"), "%s", err);
	/* the same file with one more flipped byte is corrupt, whatever its version says */
	flip(cur, 500, 0x01);
	cr_assert_eq(read_back(cur), HORA_ERR_DATA);
	cr_assert(strstr(err, "is corrupt (checksum mismatch"), "%s", err);
	cr_assert_null(strstr(err, "version 3, and"), "%s", err);
}

Test(core_checkpoint, another_model_is_a_config_error)
{
	char cur[1200];
	write_one(cur, sizeof(cur));
	struct hora_ckpt_meta m;
	static float out[NP];
	cr_assert_eq(hora_ckpt_read(cur, &m, out, NP - 1, opt, err, sizeof(err)), HORA_ERR_CONFIG);
	cr_assert(strstr(err, "holds 1000 parameters"), "%s", err);
}

/* ---- through training: the hint that fits the cause --------------------- */
/* (a suite of its own: its fixtures add a data set to the ones above) */

static char *data;

static void setup_train(void)
{
	setup();
	data = th_path(dir, "data");
	cr_assert_eq(mkdir(data, 0755), 0);
	th_make_dataset(data, 300, 100, 8, 4, 11, 0);
}
static void teardown_train(void)
{
	free(data);
	teardown();
}

static void train_cfg(struct hora_train_config *cfg, const char *ck)
{
	hora_train_config_defaults(cfg);
	snprintf(cfg->data, sizeof(cfg->data), "%s", data);
	cfg->hidden[0] = 16;
	cfg->epochs = 2;
	cfg->batch_size = 10;
	cfg->quiet = 1;
	cfg->optim.momentum = 0.9;
	snprintf(cfg->checkpoint_dir, sizeof(cfg->checkpoint_dir), "%s", ck);
	cfg->checkpoint_every = 1; /* after epoch 2: checkpoint.hora and checkpoint.prev.hora */
}

static void train_ranks(int n, const struct hora_train_config *cfg, struct tc_train_rank *rk)
{
	tc_pick_addrs(n);
	for (int i = 0; i < n; i++)
		rk[i] = (struct tc_train_rank){.r = i, .n = n, .cfg = cfg};
	tc_threads(n, tc_train_run, rk, sizeof(*rk));
}

/* The previous checkpoint was written by the same job of 2 workers: moving
 * it would not help a job of 1. The hint was "move it to ... to resume". */
Test(core_checkpoint_resume, another_worker_count_gets_the_worker_count_hint, .init = setup_train,
     .fini = teardown_train, .timeout = 120)
{
	char *ck = th_path(dir, "ck");
	struct hora_train_config cfg;
	train_cfg(&cfg, ck);
	struct tc_train_rank rk[2];
	train_ranks(2, &cfg, rk);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rk[i].rc, 0, "rank %d: %s", i, rk[i].err);
		hora_train_result_deinit(&rk[i].res);
	}
	char cur[1200], prev[1200];
	hora_ckpt_paths(ck, cur, prev, sizeof(cur));
	cr_assert_eq(access(prev, R_OK), 0, "no %s", prev);
	cfg.resume = 1;
	cfg.epochs = 3;
	struct hora_train_result res;
	int rc = hora_train_run(&cfg, &res, err, sizeof(err));
	cr_assert_eq(rc, HORA_ERR_CONFIG, "rc %d: %s", rc, err);
	cr_assert(strstr(err, "was written by a job of 2 workers") &&
		  strstr(err, "resume it with 2 workers"), "%s", err);
	cr_assert_null(strstr(err, "move it"), "%s", err);
	/* another seed: the settings, not the previous checkpoint */
	cfg.seed = 7;
	train_ranks(2, &cfg, rk);
	cr_assert_eq(rk[0].rc, HORA_ERR_CONFIG, "%s", rk[0].err);
	cr_assert(strstr(rk[0].err, "seed 42") && strstr(rk[0].err, "resume it with the settings that "
								    "wrote it"), "%s", rk[0].err);
	cr_assert_null(strstr(rk[0].err, "move it"), "%s", rk[0].err);
	for (int i = 0; i < 2; i++)
		hora_train_result_deinit(&rk[i].res);
	free(ck);
}

/* A damaged checkpoint: corrupt, the file named, the previous one offered;
 * without a previous one, nothing to move. */
Test(core_checkpoint_resume, a_damaged_checkpoint_gets_the_previous_one_hint, .init = setup_train,
     .fini = teardown_train, .timeout = 120)
{
	char *ck = th_path(dir, "ck");
	struct hora_train_config cfg;
	train_cfg(&cfg, ck);
	struct hora_train_result res;
	cr_assert_eq(hora_train_run(&cfg, &res, err, sizeof(err)), 0, "%s", err);
	hora_train_result_deinit(&res);
	char cur[1200], prev[1200];
	hora_ckpt_paths(ck, cur, prev, sizeof(cur));
	flip(cur, 12, 0x10);
	cfg.resume = 1;
	cfg.epochs = 3;
	int rc = hora_train_run(&cfg, &res, err, sizeof(err));
	cr_assert_eq(rc, HORA_ERR_DATA, "rc %d: %s", rc, err);
	cr_assert(strstr(err, cur) && strstr(err, "is corrupt (checksum mismatch"), "%s", err);
	cr_assert(strstr(err, "the previous checkpoint") && strstr(err, "move it to"), "%s", err);
	cr_assert_null(strstr(err, "not supported"), "%s", err);
	/* both damaged: the previous one is named damaged, not offered (the
	 * hint was "move it to ... to resume" for it too) */
	flip(prev, 12, 0x10);
	rc = hora_train_run(&cfg, &res, err, sizeof(err));
	cr_assert_eq(rc, HORA_ERR_DATA, "rc %d: %s", rc, err);
	cr_assert(strstr(err, "the previous checkpoint is no use either (checkpoint") && strstr(err, prev),
		  "%s", err);
	cr_assert_null(strstr(err, "move it"), "%s", err);
	cr_assert_eq(unlink(prev), 0);
	rc = hora_train_run(&cfg, &res, err, sizeof(err));
	cr_assert_eq(rc, HORA_ERR_DATA, "rc %d: %s", rc, err);
	cr_assert(strstr(err, "no previous checkpoint to fall back on"), "%s", err);
	/* none at all: bad input like a damaged one (it was -ENOENT: hora worker exited 1) */
	cr_assert_eq(unlink(cur), 0);
	rc = hora_train_run(&cfg, &res, err, sizeof(err));
	cr_assert_eq(rc, HORA_ERR_DATA, "rc %d: %s", rc, err);
	cr_assert(strstr(err, cur) && strstr(err, "No such file or directory"), "%s", err);
	free(ck);
}
