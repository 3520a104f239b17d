/* idx.c - IDX (MNIST format) loader: raw or gzip files, fully validated.
 *
 * IDX is big-endian: magic = 0x0000 <type> <rank>, then rank u32 dims, then
 * the data. We accept unsigned-byte data (type 0x08) with rank 3 for images
 * and rank 1 for labels. Every header field is untrusted: sizes are checked
 * against limits before anything is allocated, and the payload must be
 * exactly as long as the header says.
 *
 * This file is not a general tensor reader: other IDX types are rejected.
 */
#include "hora_model.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_TYPE_UBYTE 0x08
#define IDX_MAX_SAMPLES (1LL << 27) /* 134M samples */
#define IDX_MAX_DIM 65536
#define IDX_MAX_BYTES (1LL << 34) /* 16 GiB of pixels */
#define IDX_READ_CHUNK (1u << 30)

static int fail(char *err, size_t errlen, int code, const char *path, const char *fmt, ...)
{
	if (err && errlen) {
		int k = snprintf(err, errlen, "%s: ", path);
		if (k < 0)
			k = 0;
		if ((size_t)k < errlen) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
			va_end(ap);
		}
	}
	return code;
}

struct idx_file {
	gzFile gz;
	const char *path;
	uint32_t dims[3];
	int rank;
};

/* Read exactly n bytes; returns 0, 1 on clean short read (truncated), -1 on
 * decompression/IO error. */
static int read_exact(gzFile gz, void *buf, int64_t n, int64_t *got)
{
	uint8_t *p = buf;
	*got = 0;
	while (n > 0) {
		unsigned want = n > IDX_READ_CHUNK ? IDX_READ_CHUNK : (unsigned)n;
		int r = gzread(gz, p, want);
		if (r < 0)
			return -1;
		if (r == 0)
			return 1;
		p += r;
		n -= r;
		*got += r;
	}
	return 0;
}

static const char *gz_reason(gzFile gz)
{
	int errnum = 0;
	const char *m = gzerror(gz, &errnum);
	if (errnum == Z_ERRNO)
		return strerror(errno);
	return m && *m ? m : "read error";
}

static int idx_open(struct idx_file *f, const char *path, int want_rank, char *err, size_t errlen)
{
	struct stat st;
	memset(f, 0, sizeof(*f));
	f->path = path;
	if (stat(path, &st) != 0)
		return fail(err, errlen, -ENOENT, path, "cannot open: %s", strerror(errno));
	if (!S_ISREG(st.st_mode))
		return fail(err, errlen, -EINVAL, path, "not a regular file");
	f->gz = gzopen(path, "rb");
	if (!f->gz)
		return fail(err, errlen, -ENOENT, path, "cannot open: %s", strerror(errno));
	gzbuffer(f->gz, 1 << 20);

	uint8_t hdr[4];
	int64_t got;
	int r = read_exact(f->gz, hdr, 4, &got);
	if (r < 0)
		return fail(err, errlen, -EIO, path, "corrupt compressed data: %s", gz_reason(f->gz));
	if (r > 0)
		return fail(err, errlen, -EINVAL, path,
			    "truncated: %lld bytes, too short for an IDX header", (long long)got);
	uint32_t magic = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (hdr[0] != 0 || hdr[1] != 0)
		return fail(err, errlen, -EINVAL, path, "wrong magic 0x%08x: not an IDX file", magic);
	if (hdr[2] != IDX_TYPE_UBYTE)
		return fail(err, errlen, -EINVAL, path,
			    "wrong magic 0x%08x: data type 0x%02x, only unsigned byte (0x08) is supported",
			    magic, hdr[2]);
	if (hdr[3] != want_rank)
		return fail(err, errlen, -EINVAL, path,
			    "wrong magic 0x%08x: rank %d, expected %d (%s file)", magic, hdr[3],
			    want_rank, want_rank == 3 ? "image" : "label");
	f->rank = hdr[3];
	uint8_t dims[12];
	r = read_exact(f->gz, dims, 4 * f->rank, &got);
	if (r < 0)
		return fail(err, errlen, -EIO, path, "corrupt compressed data: %s", gz_reason(f->gz));
	if (r > 0)
		return fail(err, errlen, -EINVAL, path, "truncated in the header (dimensions)");
	for (int i = 0; i < f->rank; i++)
		f->dims[i] = (uint32_t)dims[4 * i] << 24 | (uint32_t)dims[4 * i + 1] << 16 |
			     (uint32_t)dims[4 * i + 2] << 8 | dims[4 * i + 3];
	return 0;
}

static void idx_close(struct idx_file *f)
{
	if (f->gz)
		gzclose(f->gz);
	f->gz = NULL;
}

/* Read the payload of n bytes into a fresh buffer and check nothing follows.
 * The header is untrusted and a gzip stream's length is unknown up front, so
 * the buffer grows with the data actually read (doubling from 16 MiB): a
 * lying header costs at most twice what the file really holds. */
static int idx_payload(struct idx_file *f, int64_t n, uint8_t **out, char *err, size_t errlen)
{
	int64_t cap = n < (16 << 20) ? n : (16 << 20), have = 0;
	uint8_t *buf = malloc(cap > 0 ? (size_t)cap : 1);
	if (!buf)
		return fail(err, errlen, -ENOMEM, f->path, "cannot allocate %lld bytes", (long long)cap);
	for (;;) {
		int64_t got;
		int r = read_exact(f->gz, buf + have, cap - have, &got);
		have += got;
		if (r < 0) {
			free(buf);
			return fail(err, errlen, -EIO, f->path, "corrupt compressed data: %s",
				    gz_reason(f->gz));
		}
		if (r > 0) {
			free(buf);
			return fail(err, errlen, -EINVAL, f->path,
				    "truncated: header promises %lld data bytes, file has %lld",
				    (long long)n, (long long)have);
		}
		if (have == n)
			break;
		cap = cap * 2 < n ? cap * 2 : n;
		uint8_t *nb = realloc(buf, (size_t)cap);
		if (!nb) {
			free(buf);
			return fail(err, errlen, -ENOMEM, f->path, "cannot allocate %lld bytes",
				    (long long)cap);
		}
		buf = nb;
	}
	uint8_t extra;
	int64_t got;
	int r = read_exact(f->gz, &extra, 1, &got);
	if (r == 0) {
		free(buf);
		return fail(err, errlen, -EINVAL, f->path,
			    "trailing data after the %lld bytes the header promises", (long long)n);
	}
	if (r < 0) {
		free(buf);
		return fail(err, errlen, -EIO, f->path, "corrupt compressed data: %s", gz_reason(f->gz));
	}
	*out = buf;
	return 0;
}

int hora_dataset_load_idx(struct hora_dataset *ds, const char *images_path, const char *labels_path,
			  int max_classes, char *err, size_t errlen)
{
	struct idx_file fi, fl;
	uint8_t *images = NULL, *labels = NULL;
	int rc;

	memset(ds, 0, sizeof(*ds));
	memset(&fl, 0, sizeof(fl));
	rc = idx_open(&fi, images_path, 3, err, errlen);
	if (rc)
		goto out;
	rc = idx_open(&fl, labels_path, 1, err, errlen);
	if (rc)
		goto out;

	int64_t n = fi.dims[0], rows = fi.dims[1], cols = fi.dims[2];
	if (n > IDX_MAX_SAMPLES || rows == 0 || cols == 0 || rows > IDX_MAX_DIM ||
	    cols > IDX_MAX_DIM || n * rows * cols > IDX_MAX_BYTES) {
		rc = fail(err, errlen, -EINVAL, images_path,
			  "implausible dimensions %lld x %lld x %lld", (long long)n, (long long)rows,
			  (long long)cols);
		goto out;
	}
	if ((int64_t)fl.dims[0] != n) {
		rc = fail(err, errlen, -EINVAL, labels_path,
			  "count mismatch: %u labels but %s has %lld images", fl.dims[0], images_path,
			  (long long)n);
		goto out;
	}
	rc = idx_payload(&fi, n * rows * cols, &images, err, errlen);
	if (rc)
		goto out;
	rc = idx_payload(&fl, n, &labels, err, errlen);
	if (rc)
		goto out;

	int maxl = -1;
	for (int64_t i = 0; i < n; i++) {
		if (labels[i] >= max_classes) {
			rc = fail(err, errlen, -EINVAL, labels_path,
				  "label out of range: sample %lld has label %d, expected 0..%d",
				  (long long)i, labels[i], max_classes - 1);
			goto out;
		}
		if (labels[i] > maxl)
			maxl = labels[i];
	}
	ds->images = images;
	ds->labels = labels;
	ds->n = n;
	ds->rows = (int)rows;
	ds->cols = (int)cols;
	ds->num_classes = maxl + 1;
	images = labels = NULL;
out:
	free(images);
	free(labels);
	idx_close(&fi);
	idx_close(&fl);
	return rc;
}

static int pick(char *buf, size_t len, const char *dir, const char *base)
{
	struct stat st;
	snprintf(buf, len, "%s/%s", dir, base);
	if (stat(buf, &st) == 0)
		return 0;
	snprintf(buf, len, "%s/%s.gz", dir, base);
	if (stat(buf, &st) == 0)
		return 0;
	snprintf(buf, len, "%s/%s", dir, base); /* report the plain name */
	return -ENOENT;
}

int hora_dataset_load_dir(struct hora_dataset *ds, const char *dir, const char *split,
			  int max_classes, char *err, size_t errlen)
{
	char img[4096], lbl[4096];
	const char *pre;
	if (strcmp(split, "train") == 0)
		pre = "train";
	else if (strcmp(split, "test") == 0)
		pre = "t10k";
	else
		return fail(err, errlen, -EINVAL, dir, "unknown split '%s' (train|test)", split);
	char base[64];
	snprintf(base, sizeof(base), "%s-images-idx3-ubyte", pre);
	if (pick(img, sizeof(img), dir, base)) {
		memset(ds, 0, sizeof(*ds));
		return fail(err, errlen, -ENOENT, img, "missing (also tried %s.gz)", base);
	}
	snprintf(base, sizeof(base), "%s-labels-idx1-ubyte", pre);
	if (pick(lbl, sizeof(lbl), dir, base)) {
		memset(ds, 0, sizeof(*ds));
		return fail(err, errlen, -ENOENT, lbl, "missing (also tried %s.gz)", base);
	}
	return hora_dataset_load_idx(ds, img, lbl, max_classes, err, errlen);
}

void hora_dataset_deinit(struct hora_dataset *ds)
{
	if (!ds)
		return;
	free(ds->images);
	free(ds->labels);
	memset(ds, 0, sizeof(*ds));
}

void hora_dataset_gather(const struct hora_dataset *ds, const int64_t *idx, int n, float *x,
			 uint8_t *y)
{
	const size_t d = (size_t)ds->rows * ds->cols;
	const float scale = 1.0f / 255.0f;
	for (int i = 0; i < n; i++) {
		const uint8_t *src = ds->images + (size_t)idx[i] * d;
		float *dst = x + (size_t)i * d;
		for (size_t j = 0; j < d; j++)
			dst[j] = (float)src[j] * scale;
		y[i] = ds->labels[idx[i]];
	}
}
