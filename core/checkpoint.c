/* checkpoint.c - training checkpoints: parameters, optimizer state, epoch,
 * step and shuffle RNG state, checksummed, written atomically.
 *
 * File (host byte order, little-endian on every machine hora runs on):
 *   0   "HORACKPT"            8 bytes
 *   8   version = 2           u32
 *   12  header bytes = 128    u32
 *   16  epoch (done)          i32     20  workers   i32
 *   24  step (global)         i64     32  rng state u64
 *   40  seed                  u64     48  nparams   u64
 *   56  optimizer bytes       u64     64  model     char[48]
 *   112 batch per worker      i32     116 optimizer char[12] ("sgd", "momentum",
 *                                         "nesterov", "adam")
 *   (version 1, still read: model char[64] at 64, no batch or optimizer)
 *   128 params                f32[nparams]
 *   ... optimizer state       (hora_optim_state_save)
 *   end BLAKE2b-256 of all the bytes before it (libsodium)
 * Every version, past and future, ends with that checksum: a reader checks
 * the whole file against it first, so that a damaged file is called damaged
 * and only an intact one is judged by its version.
 * Writing: <dir>/checkpoint.hora.tmp, fsync, the current checkpoint.hora
 * becomes checkpoint.prev.hora, the new one is renamed into place, the
 * directory is fsynced. A crash at any point leaves a complete checkpoint.
 */
#include "checkpoint.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "HORACKPT"
#define HDR 128
#define SUM 32

void hora_ckpt_paths(const char *dir, char *cur, char *prev, size_t n)
{
	snprintf(cur, n, "%s/checkpoint.hora", dir);
	snprintf(prev, n, "%s/checkpoint.prev.hora", dir);
}

static void put_header(uint8_t *h, const struct hora_ckpt_meta *m, uint64_t optim_bytes)
{
	memset(h, 0, HDR);
	memcpy(h, MAGIC, 8);
	uint32_t ver = 2, hl = HDR;
	memcpy(h + 8, &ver, 4);
	memcpy(h + 12, &hl, 4);
	memcpy(h + 16, &m->epoch, 4);
	memcpy(h + 20, &m->workers, 4);
	memcpy(h + 24, &m->step, 8);
	memcpy(h + 32, &m->rng, 8);
	memcpy(h + 40, &m->seed, 8);
	memcpy(h + 48, &m->nparams, 8);
	memcpy(h + 56, &optim_bytes, 8);
	snprintf((char *)h + 64, 48, "%s", m->model);
	memcpy(h + 112, &m->batch, 4);
	snprintf((char *)h + 116, 12, "%s", m->optimizer);
}

int hora_ckpt_write(const char *dir, const struct hora_ckpt_meta *m, const float *params,
		    const struct hora_optim *o, char *err, size_t errlen)
{
	const uint64_t ob = hora_optim_state_bytes(o);
	uint8_t *state = malloc(ob ? ob : 1);
	if (!state) {
		snprintf(err, errlen, "checkpoint: out of memory for %llu bytes of optimizer state",
			 (unsigned long long)ob);
		return -ENOMEM;
	}
	hora_optim_state_save(o, state);
	const int rc = hora_ckpt_write_state(dir, m, params, state, ob, err, errlen);
	free(state);
	return rc;
}

int hora_ckpt_write_state(const char *dir, const struct hora_ckpt_meta *m, const float *params,
			  const uint8_t *state, size_t ob, char *err, size_t errlen)
{
	char cur[HORA_PATH_MAX + 32], prev[HORA_PATH_MAX + 32], tmp[HORA_PATH_MAX + 48];
	hora_ckpt_paths(dir, cur, prev, sizeof(cur));
	snprintf(tmp, sizeof(tmp), "%s.tmp", cur);
	if (mkdir(dir, 0755) && errno != EEXIST) {
		snprintf(err, errlen, "checkpoint: cannot create %s: %s", dir, strerror(errno));
		return -errno;
	}
	uint8_t hdr[HDR], sum[SUM];
	put_header(hdr, m, ob);
	crypto_generichash_state hs;
	crypto_generichash_init(&hs, NULL, 0, SUM);
	crypto_generichash_update(&hs, hdr, HDR);
	crypto_generichash_update(&hs, (const uint8_t *)params, m->nparams * sizeof(float));
	crypto_generichash_update(&hs, state, ob);
	crypto_generichash_final(&hs, sum, SUM);
	int rc = 0;
	errno = 0; /* not mkdir's EEXIST: a short fwrite need not set it */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
	if (!f || fwrite(hdr, 1, HDR, f) != HDR ||
	    fwrite(params, sizeof(float), m->nparams, f) != m->nparams || fwrite(state, 1, ob, f) != ob ||
	    fwrite(sum, 1, SUM, f) != SUM || fflush(f) || fsync(fileno(f))) {
		rc = -(errno ? errno : EIO);
		snprintf(err, errlen, "checkpoint: writing %s: %s", tmp, strerror(-rc));
	}
	if (f)
		fclose(f);
	else if (fd >= 0)
		close(fd);
	if (rc) {
		unlink(tmp);
		return rc; /* the previous checkpoint is untouched */
	}
	/* cur exists at every moment: the previous one becomes prev through a
	 * second link (prev.tmp, then renamed over prev), and only then is cur
	 * replaced, atomically. A crash anywhere leaves a complete cur. On a file
	 * system without hard links, cur is renamed to prev first (a crash
	 * between the two renames then leaves prev and the complete .tmp). */
	char ptmp[HORA_PATH_MAX + 48];
	snprintf(ptmp, sizeof(ptmp), "%s.tmp", prev);
	unlink(ptmp);
	int moved, cur_gone = 0;
	if (!link(cur, ptmp))
		moved = rename(ptmp, prev);
	else if (errno == ENOENT)
		moved = 0; /* the first checkpoint */
	else if (errno == EPERM || errno == EOPNOTSUPP || errno == ENOSYS)
		cur_gone = !(moved = rename(cur, prev));
	else
		moved = -1;
	if (moved || rename(tmp, cur)) {
		rc = -errno;
		if (cur_gone) { /* no cur now: the new one stays as .tmp beside prev */
			snprintf(err, errlen, "checkpoint: renaming %s into %s: %s (the new checkpoint is kept as "
					      "%s, the previous one as %s)", tmp, cur, strerror(-rc), tmp, prev);
			return rc;
		}
		snprintf(err, errlen, "checkpoint: renaming into %s: %s", cur, strerror(-rc));
		unlink(tmp);
		unlink(ptmp);
		return rc;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd)) {
		rc = -errno;
		snprintf(err, errlen, "checkpoint: syncing the directory %s: %s", dir, strerror(errno));
	}
	if (dfd >= 0)
		close(dfd);
	return rc;
}

/* What a header says, before anything in it is trusted. */
struct header {
	uint32_t ver, hl;
	uint64_t np, ob;
	uint64_t size; /* of the whole file, if the header is one this hora reads; else 0 */
};

static void parse_header(const uint8_t *h, struct header *x)
{
	memcpy(&x->ver, h + 8, 4);
	memcpy(&x->hl, h + 12, 4);
	memcpy(&x->np, h + 48, 8);
	memcpy(&x->ob, h + 56, 8);
	x->size = 0;
	if ((x->ver == 1 || x->ver == 2) && x->hl == HDR && x->np < (1ull << 60) && x->ob < (1ull << 60))
		x->size = HDR + x->np * sizeof(float) + x->ob + SUM;
}

/* Hash the n bytes after the header into hs; into dst when there is one,
 * else through a bounce buffer. 0, or -1 on a short read. */
static int hash_bytes(FILE *f, crypto_generichash_state *hs, uint8_t *dst, uint64_t n)
{
	uint8_t buf[65536];
	while (n) {
		const size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
		uint8_t *to = dst ? dst : buf;
		if (fread(to, 1, k, f) != k)
			return -1;
		crypto_generichash_update(hs, to, k);
		if (dst)
			dst += k;
		n -= k;
	}
	return 0;
}

/* Integrity before meaning: every version ends with the BLAKE2b-256 of all
 * the bytes before it, so the whole file is checked against its checksum
 * before its version, sizes or contents are believed. A damaged header is
 * then reported as damage, not as a version or size it never had. When the
 * header is one this model can load, params and optimizer state are read
 * into p and state on the way (one pass, nothing read twice). */
static int verify(FILE *f, const char *path, uint64_t size, const uint8_t *hdr, const struct header *x,
		  uint8_t *p, uint8_t *state, char *err, size_t errlen)
{
	uint8_t sum[SUM], want[SUM];
	crypto_generichash_state hs;
	crypto_generichash_init(&hs, NULL, 0, SUM);
	crypto_generichash_update(&hs, hdr, HDR);
	int rd;
	if (p) /* x->size == size */
		rd = hash_bytes(f, &hs, p, x->np * sizeof(float)) || hash_bytes(f, &hs, state, x->ob);
	else
		rd = hash_bytes(f, &hs, NULL, size - HDR - SUM);
	if (rd || fread(sum, 1, SUM, f) != SUM) {
		snprintf(err, errlen, "checkpoint %s: cannot read it: %s", path,
			 ferror(f) ? strerror(errno) : "it shrank while being read");
		return ferror(f) && errno ? -errno : HORA_ERR_DATA;
	}
	crypto_generichash_final(&hs, want, SUM);
	if (!sodium_memcmp(sum, want, SUM))
		return 0;
	int k = snprintf(err, errlen, "checkpoint %s is corrupt (checksum mismatch: its BLAKE2b "
				      "checksum does not match its contents)", path);
	if (k > 0 && (size_t)k < errlen && x->size && x->size != size)
		snprintf(err + k, errlen - (size_t)k, "; it has %llu bytes where its header says %llu: "
						      "truncated or with trailing bytes",
			 (unsigned long long)size, (unsigned long long)x->size);
	else if (k > 0 && (size_t)k < errlen && !x->size)
		snprintf(err + k, errlen - (size_t)k, "; its header is damaged too (version %u, header "
						      "size %u)", x->ver, x->hl);
	return HORA_ERR_DATA;
}

/* An intact file this hora cannot load: another version, or another model
 * or optimizer than this job's. */
static int check_layout(const char *path, uint64_t size, const struct header *x, size_t nparams,
			size_t ob, char *err, size_t errlen)
{
	if (x->ver != 1 && x->ver != 2) {
		snprintf(err, errlen, "checkpoint %s is intact but version %u, and this hora reads versions 1 "
				      "and 2 (written by %s hora?)", path, x->ver,
			 x->ver > 2 ? "a newer" : "another");
		return HORA_ERR_DATA;
	}
	if (!x->size || x->size != size) {
		snprintf(err, errlen, "checkpoint %s is intact but inconsistent: header size %u, %llu bytes "
				      "where its header says %llu (not written by hora?)", path, x->hl,
			 (unsigned long long)size, (unsigned long long)x->size);
		return HORA_ERR_DATA;
	}
	if (x->np != nparams || x->ob != ob) {
		snprintf(err, errlen, "checkpoint %s: holds %llu parameters and %llu bytes of optimizer "
				      "state, this model and optimizer need %zu and %zu",
			 path, (unsigned long long)x->np, (unsigned long long)x->ob, nparams, ob);
		return HORA_ERR_CONFIG;
	}
	return 0;
}

static void fill_meta(struct hora_ckpt_meta *m, const uint8_t *hdr, const struct header *x)
{
	memcpy(&m->epoch, hdr + 16, 4);
	memcpy(&m->workers, hdr + 20, 4);
	memcpy(&m->step, hdr + 24, 8);
	memcpy(&m->rng, hdr + 32, 8);
	memcpy(&m->seed, hdr + 40, 8);
	m->nparams = x->np;
	snprintf(m->model, sizeof(m->model), "%.47s", (const char *)hdr + 64);
	m->batch = 0;
	m->optimizer[0] = 0;
	if (x->ver >= 2) {
		memcpy(&m->batch, hdr + 112, 4);
		snprintf(m->optimizer, sizeof(m->optimizer), "%.11s", (const char *)hdr + 116);
	}
}

int hora_ckpt_read_state(const char *path, struct hora_ckpt_meta *m, float *params, size_t nparams,
			 uint8_t *state_out, size_t ob, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "checkpoint %s: %s", path, strerror(errno));
		return -errno;
	}
	uint8_t hdr[HDR];
	uint8_t *state = NULL, *p = NULL;
	struct header x;
	struct stat st;
	int rc = HORA_ERR_DATA;
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "checkpoint %s: not a regular file", path);
		goto out;
	}
	const uint64_t size = (uint64_t)st.st_size;
	if (size < HDR + SUM || fread(hdr, 1, HDR, f) != HDR) {
		snprintf(err, errlen, "checkpoint %s is truncated: %llu bytes, shorter than any checkpoint "
				      "(%d)", path, (unsigned long long)size, HDR + SUM);
		goto out;
	}
	if (memcmp(hdr, MAGIC, 8)) {
		snprintf(err, errlen, "checkpoint %s: not a hora checkpoint (it does not start with %s)",
			 path, MAGIC);
		goto out;
	}
	parse_header(hdr, &x);
	if (x.size == size && x.np == nparams && x.ob == ob) {
		p = malloc(nparams ? nparams * sizeof(float) : 1);
		state = malloc(ob ? ob : 1);
		if (!p || !state) {
			snprintf(err, errlen, "checkpoint %s: out of memory", path);
			rc = -ENOMEM;
			goto out;
		}
	}
	if ((rc = verify(f, path, size, hdr, &x, p, state, err, errlen)) ||
	    (rc = check_layout(path, size, &x, nparams, ob, err, errlen)))
		goto out;
	/* only now, with everything verified, touch the caller's state */
	fill_meta(m, hdr, &x);
	memcpy(params, p, nparams * sizeof(float));
	memcpy(state_out, state, ob);
	rc = 0;
out:
	free(p);
	free(state);
	fclose(f);
	return rc;
}

int hora_ckpt_read(const char *path, struct hora_ckpt_meta *m, float *params, size_t nparams,
		   struct hora_optim *o, char *err, size_t errlen)
{
	const size_t ob = hora_optim_state_bytes(o);
	uint8_t *state = malloc(ob ? ob : 1);
	if (!state) {
		snprintf(err, errlen, "checkpoint %s: out of memory", path);
		return -ENOMEM;
	}
	int rc = hora_ckpt_read_state(path, m, params, nparams, state, ob, err, errlen);
	if (!rc)
		hora_optim_state_load(o, state, ob);
	free(state);
	return rc;
}

/* The job that wrote the checkpoint must be this one (HORA_ERR_CONFIG). */
static int check_job(const char *path, const struct hora_ckpt_meta *m, const struct hora_ckpt_job *j,
		     char *err, size_t errlen)
{
	if (m->batch && (m->batch != j->batch || strcmp(m->optimizer, j->optimizer))) {
		snprintf(err, errlen, "checkpoint %s was written with batch %d per worker and the %s "
				      "optimizer; this job has batch %d and %s",
			 path, m->batch, m->optimizer, j->batch, j->optimizer);
		return HORA_ERR_CONFIG;
	}
	if ((j->workers && m->workers != j->workers) || m->seed != j->seed || strcmp(m->model, j->model)) {
		snprintf(err, errlen, "checkpoint %s was written by a job of %d workers, seed %llu, "
				      "model %s; this job has %d, seed %llu, model %s",
			 path, m->workers, (unsigned long long)m->seed, m->model, j->workers,
			 (unsigned long long)j->seed, j->model);
		return HORA_ERR_CONFIG;
	}
	return 0;
}

/* Whether the previous checkpoint could be resumed from in place of the
 * current one: read whole (into buffers of its own: the caller's state is
 * not touched) and of this job. why: why not, empty when it is missing. */
static bool prev_usable(const char *prev, const struct hora_ckpt_job *j, size_t nparams, size_t ob, char *why,
			size_t whylen)
{
	why[0] = 0;
	if (access(prev, F_OK))
		return false;
	struct hora_ckpt_meta m;
	float *p = malloc(nparams ? nparams * sizeof(float) : 1);
	uint8_t *st = malloc(ob ? ob : 1);
	int rc = p && st ? hora_ckpt_read_state(prev, &m, p, nparams, st, ob, why, whylen) : -ENOMEM;
	if (rc == -ENOMEM)
		snprintf(why, whylen, "checkpoint %s: out of memory to check it", prev);
	else if (!rc)
		rc = check_job(prev, &m, j, why, whylen);
	free(p);
	free(st);
	return !rc;
}

/* What to do about it, after the reason in err: a damaged or missing file
 * can be replaced by the previous checkpoint when that one is whole and of
 * this job; a checkpoint of another job cannot (the previous one was
 * written by that job too). */
static void add_hint(int rc, const struct hora_ckpt_meta *m, const struct hora_ckpt_job *j, size_t nparams,
		     size_t ob, const char *cur, const char *prev, char *err, size_t errlen)
{
	size_t k = strlen(err);
	char why[HORA_PATH_MAX + 512];
	if (k >= errlen)
		return;
	if (rc == HORA_ERR_CONFIG && m->nparams && j->workers && m->workers != j->workers)
		snprintf(err + k, errlen - k, "; resume it with %d workers (each worker's share of every "
					      "batch depends on the job size), or start afresh with "
					      "another train.checkpoint.dir or without train.resume",
			 m->workers);
	else if (rc == HORA_ERR_CONFIG)
		snprintf(err + k, errlen - k, "; resume it with the settings that wrote it, or start "
					      "afresh with another train.checkpoint.dir or without "
					      "train.resume");
	else if (prev_usable(prev, j, nparams, ob, why, sizeof(why)))
		snprintf(err + k, errlen - k, "; the previous checkpoint %s is whole (move it to %s to "
					      "resume from it)", prev, cur);
	else if (why[0])
		snprintf(err + k, errlen - k, "; the previous checkpoint is no use either (%s): start "
					      "afresh without train.resume", why);
	else
		snprintf(err + k, errlen - k, "; there is no previous checkpoint to fall back on: start "
					      "afresh without train.resume");
}

int hora_ckpt_resume_state(const char *dir, const struct hora_ckpt_job *job, struct hora_ckpt_meta *m,
			   float *params, size_t nparams, uint8_t *state, size_t ob, char *err, size_t errlen)
{
	char cur[HORA_PATH_MAX + 32], prev[HORA_PATH_MAX + 32];
	hora_ckpt_paths(dir, cur, prev, sizeof(cur));
	memset(m, 0, sizeof(*m));
	int rc = hora_ckpt_read_state(cur, m, params, nparams, state, ob, err, errlen);
	if (!rc)
		rc = check_job(cur, m, job, err, errlen);
	if (rc)
		add_hint(rc, m, job, nparams, ob, cur, prev, err, errlen);
	/* a checkpoint that is missing or cannot be read is bad input, as a
	 * damaged one is (hora worker exits 2 for both) */
	return rc < 0 && rc > -4096 && rc != -ENOMEM ? HORA_ERR_DATA : rc;
}

int hora_ckpt_resume(const char *dir, const struct hora_ckpt_job *job, struct hora_ckpt_meta *m,
		     float *params, size_t nparams, struct hora_optim *o, char *err, size_t errlen)
{
	const size_t ob = hora_optim_state_bytes(o);
	uint8_t *state = malloc(ob ? ob : 1);
	if (!state) {
		memset(m, 0, sizeof(*m));
		snprintf(err, errlen, "checkpoint in %s: out of memory", dir);
		return -ENOMEM;
	}
	int rc = hora_ckpt_resume_state(dir, job, m, params, nparams, state, ob, err, errlen);
	if (!rc)
		hora_optim_state_load(o, state, ob);
	free(state);
	return rc;
}
