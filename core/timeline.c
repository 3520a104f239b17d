/* timeline.c - Chrome trace output (see distopt.h).
 *
 * Each rank keeps its spans in memory (a few per step). At the end every
 * rank sends them to rank 0 (allgather of the counts, then of the padded
 * span arrays, both collectives), and rank 0 writes one JSON file: pid =
 * rank ("rank N"), tid 0 = training thread, tid 1 = communication. Times are
 * microseconds since each rank's timeline start, which follows a barrier,
 * so the tracks line up to within a barrier's skew.
 */
#include "distopt.h"
#include "comm.h"

#include "net/util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct span {
	double t0, t1; /* seconds since start */
	double val;    /* a span's bytes, a counter's value */
	int32_t tid, name; /* index into names[]; tid -1: a counter (Chrome "C" event) at t0 */
};

static const char *const names[] = {"forward_backward", "allreduce", "wait", "optimizer_step",
				    "evaluate", "epoch", "checkpoint", "view_change", "consensus", "?"};
#define NNAMES ((int)(sizeof(names) / sizeof(names[0])))

struct hora_timeline {
	int rank;    /* the track's label: the rank, or (elastic) the worker */
	bool worker; /* label is a worker index */
	double start;
	struct span *s;
	size_t n, cap;
	bool full;
};

int hora_timeline_create(int rank, struct hora_timeline **out)
{
	struct hora_timeline *tl = calloc(1, sizeof(*tl));
	if (!tl)
		return -ENOMEM;
	tl->rank = rank;
	tl->start = hora_clock_s();
	*out = tl;
	return 0;
}

void hora_timeline_destroy(struct hora_timeline *tl)
{
	if (tl) {
		free(tl->s);
		free(tl);
	}
}

static void add(struct hora_timeline *tl, int tid, const char *name, double t0, double t1, double val)
{
	if (!tl || tl->full)
		return;
	if (tl->n == tl->cap) {
		size_t cap = tl->cap ? 2 * tl->cap : 4096;
		struct span *s = cap <= (64u << 20) / sizeof(*s) ? realloc(tl->s, cap * sizeof(*s)) : NULL;
		if (!s) {
			tl->full = true; /* keep what we have; the file says so */
			return;
		}
		tl->s = s;
		tl->cap = cap;
	}
	int k = NNAMES - 1;
	for (int i = 0; i < NNAMES - 1; i++)
		if (!strcmp(names[i], name))
			k = i;
	tl->s[tl->n++] = (struct span){t0 - tl->start, t1 - tl->start, val, tid, k};
}

void hora_timeline_span(struct hora_timeline *tl, int tid, const char *name, double t0, double t1,
			size_t bytes)
{
	add(tl, tid, name, t0, t1, (double)bytes);
}

void hora_timeline_counter(struct hora_timeline *tl, const char *name, double t, double value)
{
	add(tl, -1, name, t, t, value);
}

void hora_timeline_relabel(struct hora_timeline *tl, int worker)
{
	tl->rank = worker;
	tl->worker = true;
}

double hora_timeline_age(const struct hora_timeline *tl)
{
	return hora_clock_s() - tl->start;
}

void hora_timeline_align(struct hora_timeline *tl, double age)
{
	tl->start = hora_clock_s() - age;
}

int hora_timeline_write(struct hora_timeline *tl, struct hora_comm *c, const char *path, char *err,
			size_t errlen)
{
	const int n = hora_size(c), rank = hora_rank(c);
	/* per rank: its span count and its track's label (rank, or worker + 1 << 32) */
	int64_t mine[2] = {(int64_t)tl->n, tl->rank + (tl->worker ? (int64_t)1 << 32 : 0)};
	int64_t *counts = calloc((size_t)n * 2, sizeof(*counts));
	if (!counts)
		return -ENOMEM;
	int rc = hora_allgather(c, mine, counts, 2, HORA_I64);
	int64_t most = 0;
	for (int r = 0; !rc && r < n; r++)
		most = counts[2 * r] > most ? counts[2 * r] : most;
	/* spans travel as doubles: t0, t1, bytes, tid, name */
	const size_t per = 5, row = (size_t)most * per;
	double *buf = calloc(row ? row : 1, sizeof(double));
	double *all = calloc((size_t)n * (row ? row : 1), sizeof(double)); /* every rank: allgather */
	if (!rc && (!buf || !all))
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < tl->n; i++) {
		double *d = buf + i * per;
		d[0] = tl->s[i].t0;
		d[1] = tl->s[i].t1;
		d[2] = tl->s[i].val;
		d[3] = tl->s[i].tid;
		d[4] = tl->s[i].name;
	}
	if (!rc)
		rc = hora_allgather(c, buf, all, row, HORA_F64);
	if (rc) {
		snprintf(err, errlen, "timeline: gathering the events: %s", hora_comm_last_error(c));
	} else if (rank == 0) {
		FILE *f = fopen(path, "w");
		if (!f) {
			snprintf(err, errlen, "timeline: cannot write %s: %s", path, strerror(errno));
			rc = -errno;
		} else {
			fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
			int first = 1;
			for (int r = 0; r < n; r++) {
				const int64_t lab = counts[2 * r + 1];
				const char *what = lab >> 32 ? "worker" : "rank";
				fprintf(f, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"%s %d\"}},\n"
					   "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"training\"}},\n"
					   "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}}",
					first ? "" : ",\n", r, what, (int)(lab & 0xffffffff), r, r);
				first = 0;
				for (int64_t i = 0; i < counts[2 * r]; i++) {
					const double *d = all + (size_t)r * row + (size_t)i * per;
					int k = (int)d[4];
					if ((int)d[3] < 0) { /* a counter */
						fprintf(f, ",\n{\"ph\":\"C\",\"name\":\"%s\",\"pid\":%d,\"ts\":%.1f,"
							   "\"args\":{\"value\":%.6g}}",
							names[k >= 0 && k < NNAMES ? k : NNAMES - 1], r, d[0] * 1e6, d[2]);
						continue;
					}
					fprintf(f, ",\n{\"ph\":\"X\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f",
						names[k >= 0 && k < NNAMES ? k : NNAMES - 1], r, (int)d[3], d[0] * 1e6,
						(d[1] - d[0]) * 1e6);
					if (d[2] > 0)
						fprintf(f, ",\"args\":{\"bytes\":%.0f}", d[2]);
					fprintf(f, "}");
				}
			}
			fprintf(f, "\n]}\n");
			if (fclose(f)) {
				snprintf(err, errlen, "timeline: writing %s: %s", path, strerror(errno));
				rc = -EIO;
			}
		}
	}
	free(counts);
	free(buf);
	free(all);
	return rc;
}
