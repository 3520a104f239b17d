/* test_idx.c - IDX loader: good raw/gz files and every kind of bad file. */
#include "hora_model.h"
#include "../helpers.h"

#include <criterion/criterion.h>
#include <errno.h>

static char *dir;
static char err[1024];
static struct hora_dataset ds;

static void setup(void)
{
	dir = th_tmpdir();
	memset(&ds, 0, sizeof(ds));
	err[0] = 0;
}
static void teardown(void)
{
	hora_dataset_deinit(&ds);
	th_rmrf(dir);
	free(dir);
}

TestSuite(model_idx, .init = setup, .fini = teardown);

static int load_pair(const char *img, const char *lbl)
{
	char *pi = th_path(dir, img), *pl = th_path(dir, lbl);
	int rc = hora_dataset_load_idx(&ds, pi, pl, 10, err, sizeof(err));
	free(pi);
	free(pl);
	return rc;
}

static void write_good(int gz)
{
	uint8_t px[3 * 2 * 2] = {0, 1, 2, 3, 10, 11, 12, 13, 250, 251, 252, 255};
	uint8_t y[3] = {7, 0, 9};
	char *pi = th_path(dir, gz ? "img.gz" : "img"), *pl = th_path(dir, gz ? "lbl.gz" : "lbl");
	th_write_images(pi, px, 3, 2, 2, gz);
	th_write_labels(pl, y, 3, gz);
	free(pi);
	free(pl);
}

Test(model_idx, loads_raw_file)
{
	write_good(0);
	cr_assert_eq(load_pair("img", "lbl"), 0, "%s", err);
	cr_assert_eq(ds.n, 3);
	cr_assert_eq(ds.rows, 2);
	cr_assert_eq(ds.cols, 2);
	cr_assert_eq(ds.images[4], 10);
	cr_assert_eq(ds.images[11], 255);
	cr_assert_eq(ds.labels[0], 7);
	cr_assert_eq(ds.labels[2], 9);
	cr_assert_eq(ds.num_classes, 10);
}

Test(model_idx, loads_gzip_file_same_content)
{
	write_good(1);
	cr_assert_eq(load_pair("img.gz", "lbl.gz"), 0, "%s", err);
	cr_assert_eq(ds.n, 3);
	cr_assert_eq(ds.images[8], 250);
	cr_assert_eq(ds.labels[1], 0);
}

Test(model_idx, gather_scales_to_unit_interval)
{
	write_good(0);
	cr_assert_eq(load_pair("img", "lbl"), 0, "%s", err);
	int64_t idx[2] = {2, 0};
	float x[8];
	uint8_t y[2];
	hora_dataset_gather(&ds, idx, 2, x, y);
	cr_assert_float_eq(x[3], 1.0f, 1e-7);
	cr_assert_float_eq(x[0], 250.0f / 255.0f, 1e-7);
	cr_assert_float_eq(x[5], 1.0f / 255.0f, 1e-7);
	cr_assert_eq(y[0], 9);
	cr_assert_eq(y[1], 7);
}

Test(model_idx, missing_file_names_it)
{
	write_good(0);
	cr_assert_eq(load_pair("nope", "lbl"), -ENOENT);
	cr_assert(strstr(err, "/nope") && strstr(err, "cannot open"), "err: %s", err);
	cr_assert_null(ds.images);
}

Test(model_idx, load_dir_reports_missing_split)
{
	int rc = hora_dataset_load_dir(&ds, dir, "train", 10, err, sizeof(err));
	cr_assert_eq(rc, -ENOENT);
	cr_assert(strstr(err, "train-images-idx3-ubyte") && strstr(err, "missing"), "err: %s", err);
}

Test(model_idx, load_dir_prefers_raw_then_gz)
{
	th_make_dataset(dir, 20, 10, 4, 3, 1, 1);
	cr_assert_eq(hora_dataset_load_dir(&ds, dir, "test", 10, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ds.n, 10);
	cr_assert_eq(ds.rows, 4);
}

Test(model_idx, wrong_magic)
{
	write_good(0);
	char *p = th_path(dir, "img");
	FILE *f = fopen(p, "r+b");
	fputc(0x12, f); /* first byte must be 0 */
	fclose(f);
	free(p);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "/img: wrong magic 0x12000803"), "err: %s", err);
}

Test(model_idx, labels_file_given_as_images)
{
	write_good(0);
	cr_assert_eq(load_pair("lbl", "lbl"), -EINVAL);
	cr_assert(strstr(err, "rank 1, expected 3"), "err: %s", err);
}

Test(model_idx, non_byte_type)
{
	uint8_t b[16] = {0, 0, 0x0D, 3}; /* float data */
	write_good(0);
	char *p = th_path(dir, "img");
	th_write(p, b, sizeof(b), 0);
	free(p);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "data type 0x0d"), "err: %s", err);
}

Test(model_idx, truncated_payload)
{
	write_good(0);
	char *p = th_path(dir, "img");
	cr_assert_eq(truncate(p, 16 + 5), 0);
	free(p);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "truncated: header promises 12 data bytes, file has 5"), "err: %s", err);
}

Test(model_idx, truncated_header)
{
	write_good(0);
	char *p = th_path(dir, "lbl");
	cr_assert_eq(truncate(p, 6), 0);
	free(p);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "/lbl: truncated in the header"), "err: %s", err);
}

Test(model_idx, empty_file)
{
	write_good(0);
	char *p = th_path(dir, "img");
	cr_assert_eq(truncate(p, 0), 0);
	free(p);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "too short for an IDX header"), "err: %s", err);
}

Test(model_idx, trailing_bytes)
{
	write_good(0);
	char *p = th_path(dir, "lbl");
	FILE *f = fopen(p, "ab");
	fputc(1, f);
	fclose(f);
	free(p);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "/lbl: trailing data"), "err: %s", err);
}

Test(model_idx, count_mismatch)
{
	uint8_t px[12] = {0}, y[2] = {1, 2};
	char *pi = th_path(dir, "img"), *pl = th_path(dir, "lbl");
	th_write_images(pi, px, 3, 2, 2, 0);
	th_write_labels(pl, y, 2, 0);
	free(pi);
	free(pl);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "count mismatch: 2 labels but") && strstr(err, "has 3 images"),
		  "err: %s", err);
}

Test(model_idx, label_out_of_range)
{
	uint8_t px[12] = {0}, y[3] = {1, 10, 2};
	char *pi = th_path(dir, "img"), *pl = th_path(dir, "lbl");
	th_write_images(pi, px, 3, 2, 2, 0);
	th_write_labels(pl, y, 3, 0);
	free(pi);
	free(pl);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "label out of range: sample 1 has label 10, expected 0..9"), "err: %s",
		  err);
}

Test(model_idx, huge_dimensions_refused_before_allocation)
{
	uint8_t b[16];
	th_be32(b, 0x803);
	th_be32(b + 4, 0xFFFFFFFFu);
	th_be32(b + 8, 60000);
	th_be32(b + 12, 60000);
	char *p = th_path(dir, "img");
	th_write(p, b, sizeof(b), 0);
	free(p);
	uint8_t y[1] = {0};
	p = th_path(dir, "lbl");
	th_write_labels(p, y, 1, 0);
	free(p);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "implausible dimensions"), "err: %s", err);
}

Test(model_idx, corrupt_gzip_stream)
{
	write_good(1);
	char *p = th_path(dir, "img.gz");
	FILE *f = fopen(p, "r+b");
	fseek(f, 12, SEEK_SET);
	for (int i = 0; i < 8; i++)
		fputc(0xA5, f);
	fclose(f);
	free(p);
	int rc = load_pair("img.gz", "lbl.gz");
	cr_assert(rc == -EIO || rc == -EINVAL, "rc %d", rc);
	cr_assert(strstr(err, "/img.gz: "), "err: %s", err);
}

Test(model_idx, directory_is_not_a_file)
{
	write_good(0);
	cr_assert_eq(hora_dataset_load_idx(&ds, dir, dir, 10, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "not a regular file"), "err: %s", err);
}

/* Regression (found by fuzz_idx): a header promising gigabytes with a tiny
 * payload must fail as truncated without allocating what it promises. */
Test(model_idx, lying_header_is_truncated_not_allocated)
{
	uint8_t b[16 + 10] = {0};
	th_be32(b, 0x803);
	th_be32(b + 4, 10000000);
	th_be32(b + 8, 28);
	th_be32(b + 12, 28);
	char *p = th_path(dir, "img");
	th_write(p, b, sizeof(b), 0);
	free(p);
	uint8_t *y = calloc(10000000, 1);
	p = th_path(dir, "lbl");
	th_write_labels(p, y, 10000000, 0);
	free(p);
	free(y);
	cr_assert_eq(load_pair("img", "lbl"), -EINVAL);
	cr_assert(strstr(err, "truncated: header promises 7840000000 data bytes, file has 10"),
		  "err: %s", err);
}
