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
 * Writing: <dir>/checkpoint.hora.tmp, fsync, the current checkpoint.hora
 * becomes checkpoint.prev.hora, the new one is renamed into place, the
 * directory is fsynced. A crash at any point leaves a complete checkpoint.
 */
#include "checkpoint.h"

#include <errno.h>
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
	char cur[HORA_PATH_MAX + 32], prev[HORA_PATH_MAX + 32], tmp[HORA_PATH_MAX + 48];
	hora_ckpt_paths(dir, cur, prev, sizeof(cur));
	snprintf(tmp, sizeof(tmp), "%s.tmp", cur);
	if (mkdir(dir, 0755) && errno != EEXIST) {
		snprintf(err, errlen, "checkpoint: cannot create %s: %s", dir, strerror(errno));
		return -errno;
	}
	const uint64_t ob = hora_optim_state_bytes(o);
	uint8_t *state = malloc(ob ? ob : 1), hdr[HDR], sum[SUM];
	if (!state) {
		snprintf(err, errlen, "checkpoint: out of memory for %llu bytes of optimizer state",
			 (unsigned long long)ob);
		return -ENOMEM;
	}
	hora_optim_state_save(o, state);
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
	free(state);
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
	int moved;
	if (!link(cur, ptmp))
		moved = rename(ptmp, prev);
	else if (errno == ENOENT)
		moved = 0; /* the first checkpoint */
	else if (errno == EPERM || errno == EOPNOTSUPP || errno == ENOSYS)
		moved = rename(cur, prev);
	else
		moved = -1;
	if (moved || rename(tmp, cur)) {
		rc = -errno;
		snprintf(err, errlen, "checkpoint: renaming into %s: %s", cur, strerror(errno));
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

int hora_ckpt_read(const char *path, struct hora_ckpt_meta *m, float *params, size_t nparams,
		   struct hora_optim *o, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "checkpoint %s: %s", path, strerror(errno));
		return -errno;
	}
	uint8_t hdr[HDR], sum[SUM], want[SUM];
	uint8_t *state = NULL;
	int rc = HORA_ERR_DATA;
	uint32_t ver, hl;
	uint64_t ob, np;
	if (fread(hdr, 1, HDR, f) != HDR || memcmp(hdr, MAGIC, 8)) {
		snprintf(err, errlen, "checkpoint %s: not a hora checkpoint (bad magic or too short)", path);
		goto out;
	}
	memcpy(&ver, hdr + 8, 4);
	memcpy(&hl, hdr + 12, 4);
	memcpy(&np, hdr + 48, 8);
	memcpy(&ob, hdr + 56, 8);
	if ((ver != 1 && ver != 2) || hl != HDR) {
		snprintf(err, errlen, "checkpoint %s: version %u not supported (this hora reads 1 and 2)", path,
			 ver);
		goto out;
	}
	if (np != nparams || ob != hora_optim_state_bytes(o)) {
		snprintf(err, errlen, "checkpoint %s: holds %llu parameters and %llu bytes of optimizer "
				      "state, this model and optimizer need %zu and %zu",
			 path, (unsigned long long)np, (unsigned long long)ob, nparams, hora_optim_state_bytes(o));
		goto out;
	}
	state = malloc(ob ? ob : 1);
	float *p = malloc(nparams ? nparams * sizeof(float) : 1);
	if (!state || !p) {
		free(p);
		rc = -ENOMEM;
		goto out;
	}
	if (fread(p, sizeof(float), nparams, f) != nparams || fread(state, 1, ob, f) != ob ||
	    fread(sum, 1, SUM, f) != SUM || fgetc(f) != EOF) {
		snprintf(err, errlen, "checkpoint %s: truncated or with trailing bytes", path);
		free(p);
		goto out;
	}
	crypto_generichash_state hs;
	crypto_generichash_init(&hs, NULL, 0, SUM);
	crypto_generichash_update(&hs, hdr, HDR);
	crypto_generichash_update(&hs, (const uint8_t *)p, nparams * sizeof(float));
	crypto_generichash_update(&hs, state, ob);
	crypto_generichash_final(&hs, want, SUM);
	if (sodium_memcmp(sum, want, SUM)) {
		snprintf(err, errlen, "checkpoint %s: checksum mismatch (the file is corrupt)", path);
		free(p);
		goto out;
	}
	/* only now, with everything verified, touch the caller's state */
	memcpy(&m->epoch, hdr + 16, 4);
	memcpy(&m->workers, hdr + 20, 4);
	memcpy(&m->step, hdr + 24, 8);
	memcpy(&m->rng, hdr + 32, 8);
	memcpy(&m->seed, hdr + 40, 8);
	m->nparams = np;
	snprintf(m->model, sizeof(m->model), "%.47s", (const char *)hdr + 64);
	m->batch = 0;
	m->optimizer[0] = 0;
	if (ver >= 2) {
		memcpy(&m->batch, hdr + 112, 4);
		snprintf(m->optimizer, sizeof(m->optimizer), "%.11s", (const char *)hdr + 116);
	}
	memcpy(params, p, nparams * sizeof(float));
	hora_optim_state_load(o, state, ob);
	free(p);
	rc = 0;
out:
	free(state);
	fclose(f);
	return rc;
}
