/* coll.c - `hora bench allreduce|broadcast|allgather|reduce_scatter`:
 * nccl-tests-style tables for the public collectives (core/hora.h).
 *
 *   hora bench allreduce [--ranks N] [--sizes 8:64M] [--dtype f32] [--op sum]
 *        [--algo auto|ring|latency] [--segment B] [--slice B] [--setup lo|netns --rate 1gbit]
 *        [--hosts H|3,1] [--shm auto|off] [--hier auto|on|off] [--with-memcpy]
 *        [--in-place] [--mem malloc|shared]
 *        [--json F] [--plot F.png [--anchors A.json]] [--crossover]
 *        [--device cuda [--gpu-library F]]
 *   hora bench allreduce --rank R --addrs ip:port,ip:port,...   (one rank of a
 *        cluster started elsewhere; rank 0 prints)
 *
 * N ranks are forked here, over 127.0.0.1 (lo) or in network namespaces of
 * deploy/netns-cluster.sh (netns: one per rank, tbf-shaped like the anchors;
 * --hosts H or --hosts 3,1: H namespace hosts, the ranks split over them
 * contiguously, those of one host on its address with ports P, P+1, ...).
 * The header names the path (hora_comm_describe) at the smallest and the
 * largest size, the JSON rows at every size. --with-memcpy adds, per size,
 * the memcpy bandwidth of the same bytes with every rank copying at once
 * (timed like the calls: per pass the max over ranks, the median) and
 * busbw / memcpy: the physical limit beside a shared-memory figure.
 * --in-place: allreduce with send == recv. --mem shared: the buffers from
 * hora_comm_mem_alloc, so that an in-place allreduce of ranks on one host
 * takes the single-copy path (net/coll/stage_window.c).
 * For each size: one verification call (integer-valued data, exact in every
 * dtype, checked on every rank), 3 warm-up calls, then about 200 ms of timed
 * calls (5..1000), one timestamp pair per call, no barrier between calls.
 * Per call the MAX over ranks is taken and the median reported, as the
 * anchors do:  size count type redop time_us algbw_GBps busbw_GBps wrong
 * size is the larger buffer of the call (allgather: the output, reduce-
 * scatter: the input); busbw = algbw x 2(N-1)/N (allreduce), (N-1)/N
 * (allgather, reduce-scatter), 1 (broadcast).
 * --crossover times the three allreduce algorithms (latency, direct ring,
 * pipelined ring) from 1 KiB to 4 MiB and prints, for the first two, the
 * last size of their first run of wins: the values for
 * collectives.small_bytes and collectives.medium_bytes.
 * --device cuda puts both buffers in device memory (coll_device.c): the
 * verification copies its data in and out, the timed calls are the
 * collectives on device buffers alone (NCCL on one host, else staged
 * through host memory: the last line says how the calls went).
 */
#include "bench.h"
#include "coll_device.h"
#include "core/comm.h"
#include "hora.h"
#include "net/coll/coll.h"
#include "net/util/cpus.h"
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct opts {
	enum hora_net_coll_kind coll;
	int n, algo, crossover, bind, sockets, iters, rcvlowat;
	int shm, hier, with_memcpy; /* enum hora_shm, enum hora_hier; --with-memcpy */
	int in_place, mem_shared, dirty;   /* --in-place (allreduce); --mem shared (hora_comm_mem_alloc) */
	int nhosts, host[64];       /* netns: namespace hosts, host (0-based) of each rank */
	int device;                 /* --device cuda: the buffers in device memory */
	const char *gpu_lib;        /* --gpu-library: that file as hora's GPU module */
	size_t lo, hi, segment, slice;
	enum hora_dtype t;
	enum hora_op op;
	const char *json, *plot, *anchors, *setup, *rate;
};

static const char *const shm_names[] = {"auto", "off"}, *const hier_names[] = {"auto", "on", "off"};

/* index of s in names[0..n), or -1 */
static int lookup(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

static size_t esz(enum hora_dtype t)
{
	return hora_net_dtype_size((enum hora_net_dtype)t);
}

/* element i of p as a double, and setting it (net/coll/reduce.h) */
static void put(void *p, size_t i, enum hora_dtype t, double v)
{
	hora_net_value_put(p, i, (enum hora_net_dtype)t, v);
}

static double get(const void *p, size_t i, enum hora_dtype t)
{
	return hora_net_value_get(p, i, (enum hora_net_dtype)t);
}

/* elements per rank-buffer and the "size" of the call for `bytes` */
static size_t count_for(const struct opts *o, size_t bytes)
{
	size_t c = bytes / esz(o->t);
	if (o->coll == HORA_NET_COLL_ALLGATHER || o->coll == HORA_NET_COLL_REDUCE_SCATTER)
		c /= (size_t)o->n;
	return c;
}

static int call(struct hora_comm *c, const struct opts *o, void *send, void *recv, size_t count)
{
	switch (o->coll) {
	case HORA_NET_COLL_ALLREDUCE: return hora_allreduce(c, o->in_place ? recv : send, recv, count, o->t, o->op);
	case HORA_NET_COLL_BROADCAST: return hora_broadcast(c, recv, count, o->t, 0);
	case HORA_NET_COLL_ALLGATHER: return hora_allgather(c, send, recv, count, o->t);
	case HORA_NET_COLL_REDUCE_SCATTER: return hora_reduce_scatter(c, send, recv, count, o->t, o->op);
	default: break;
	}
	return -EINVAL;
}

/* value of element i of rank r's input; small integers */
static double in_val(size_t i, int r)
{
	return (double)(i % 7) + r;
}

static double reduce_ref(const struct opts *o, size_t i)
{
	double acc = in_val(i, 0);
	for (int r = 1; r < o->n; r++) {
		double v = in_val(i, r);
		acc = o->op == HORA_MAX ? (v > acc ? v : acc) : o->op == HORA_MIN ? (v < acc ? v : acc)
		      : o->op == HORA_PROD ? acc * v : acc + v;
	}
	if (o->op == HORA_AVG)
		acc = o->t == HORA_I32 || o->t == HORA_I64 ? (double)(long long)(acc / o->n) : acc / o->n;
	return acc;
}

/* fill, run once, count wrong elements */
/* --device cuda: the call on the device buffers dv[0] (send), dv[1] (recv),
 * the inputs copied there first and the output back */
static int call_dev(struct hora_comm *c, const struct opts *o, void *const *dv, const uint8_t *send, uint8_t *recv,
		    size_t count, size_t in, size_t out)
{
	char e[300];
	const size_t s = hora_net_dtype_size((enum hora_net_dtype)o->t);
	if (bench_dev_put(dv[0], send, in * s, e, sizeof(e)) || bench_dev_put(dv[1], recv, out * s, e, sizeof(e)) ||
	    call(c, o, dv[0], dv[1], count) || bench_dev_get(recv, dv[1], out * s, e, sizeof(e))) {
		if (hora_comm_last_error(c)[0] == 0)
			fprintf(stderr, "hora bench: device buffers: %s\n", e);
		return -EIO;
	}
	return 0;
}

static long verify(struct hora_comm *c, const struct opts *o, int rank, uint8_t *send, uint8_t *recv,
		   void *const *dv, size_t count, int *rc)
{
	const int n = o->n;
	size_t in = o->coll == HORA_NET_COLL_REDUCE_SCATTER ? count * (size_t)n : count;
	size_t out = o->coll == HORA_NET_COLL_ALLGATHER ? count * (size_t)n : count;
	for (size_t i = 0; i < in; i++)
		put(o->in_place ? recv : send, i, o->t, o->coll == HORA_NET_COLL_ALLGATHER ? in_val(i, rank) + rank : in_val(i, rank));
	if (o->coll == HORA_NET_COLL_BROADCAST)
		for (size_t i = 0; i < out; i++)
			put(recv, i, o->t, rank == 0 ? in_val(i, 3) : 0);
	*rc = dv ? call_dev(c, o, dv, send, recv, count, in, out) : call(c, o, send, recv, count);
	if (*rc)
		return -1;
	long wrong = 0;
	for (size_t i = 0; i < out; i++) {
		double want;
		switch (o->coll) {
		case HORA_NET_COLL_ALLREDUCE: want = reduce_ref(o, i); break;
		case HORA_NET_COLL_BROADCAST: want = in_val(i, 3); break;
		case HORA_NET_COLL_ALLGATHER: want = in_val(i % count, (int)(i / count)) + (double)(i / count); break;
		default: want = reduce_ref(o, (size_t)rank * count + i); break;
		}
		double got = get(recv, i, o->t);
		if (o->t == HORA_F16 || o->t == HORA_BF16) /* inputs round, like the library does */
			want = get((uint16_t[]){o->t == HORA_F16 ? hora_net_f32_to_f16((float)want)
								  : hora_net_f32_to_bf16((float)want)},
				   0, o->t);
		wrong += got != want;
	}
	return wrong;
}

/* median over iters of the per-call max over ranks, in us */
static double time_calls(struct hora_comm *c, const struct opts *o, uint8_t *send, uint8_t *recv,
			 size_t count, size_t bytes, double *t, int *rc)
{
	int iters = (int)(2e8 / (double)(bytes > 1024 ? bytes : 1024) / 2);
	iters = o->iters > 0 ? o->iters : iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
	for (int w = 0; w < 3 && !*rc; w++)
		*rc = call(c, o, send, recv, count);
	for (int i = 0; i < iters && !*rc; i++) {
		/* as a backward pass: the buffer freshly written by its rank (the values do
		 * not matter for the time; verify() fills the buffer itself), then a
		 * barrier, so that the call's time is not the other rank's copy */
		if (o->dirty && (memcpy(recv, send, bytes), (*rc = hora_barrier(c))))
			break;
		double t0 = hora_bench_now();
		*rc = call(c, o, send, recv, count);
		t[i] = hora_bench_now() - t0;
	}
	if (*rc || (*rc = hora_allreduce(c, t, t, (size_t)iters, HORA_F64, HORA_MAX)))
		return 0;
	return hora_bench_median(t, iters) * 1e6;
}

/* --with-memcpy: GB/s of memcpy(recv, send, bytes) with every rank copying
 * at the same time (after a barrier), per pass the max over ranks, the
 * median; a pass copies at least 64 KiB (small sizes repeat). */
static double memcpy_gbps(struct hora_comm *c, uint8_t *send, uint8_t *recv, size_t bytes, double *t, int *rc)
{
	const size_t each = bytes ? bytes : 1, reps = each < 65536 ? 65536 / each : 1;
	int iters = (int)(1e8 / (double)(each * reps));
	iters = iters < 5 ? 5 : iters > 200 ? 200 : iters;
	double go = 0;
	if ((*rc = hora_allreduce(c, &go, &go, 1, HORA_F64, HORA_SUM)))
		return 0;
	for (int i = 0; i < iters; i++) {
		double t0 = hora_bench_now();
		for (size_t k = 0; k < reps; k++) {
			memcpy(recv, send, bytes);
			__asm__ __volatile__("" ::: "memory"); /* every copy happens */
		}
		t[i] = (hora_bench_now() - t0) / (double)reps;
	}
	if ((*rc = hora_allreduce(c, t, t, (size_t)iters, HORA_F64, HORA_MAX)))
		return 0;
	double med = hora_bench_median(t, iters);
	return med > 0 ? (double)bytes / med / 1e9 : 0;
}

/* s as a JSON string */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/* the sizes the table runs: lo, 16, 64, ... (x4) up to hi */
static size_t next_size(size_t sz)
{
	return sz < 16 ? 16 : sz * 4;
}

static size_t bytes_for(const struct opts *o, size_t sz)
{
	size_t count = count_for(o, sz);
	return o->coll == HORA_NET_COLL_ALLGATHER || o->coll == HORA_NET_COLL_REDUCE_SCATTER
		       ? count * (size_t)o->n * esz(o->t) : count * esz(o->t);
}

/* the header of the table: the setup, the settings and the path an
 * allreduce takes at the smallest and the largest size */
static void free_buf(struct hora_comm *c, const struct opts *o, void *p)
{
	if (o->mem_shared)
		hora_comm_mem_free(c, p);
	else
		free(p);
}

static void print_header(FILE *out, const struct opts *o, struct hora_comm *c, const char *tn, const char *on)
{
	fprintf(out, "# hora bench %s: %d ranks (%s), %s %s, %s, %s algorithm, %s, shm %s, hierarchical %s\n",
		hora_net_coll_name(o->coll), o->n, o->setup, tn, on,
		o->coll == HORA_NET_COLL_BROADCAST ? "root 0" : o->in_place ? "in place" : "out of place",
		o->algo == 1 ? "ring" : o->algo == 2 ? "latency" : o->algo == 3 ? "direct ring" : "auto",
		o->bind ? "rank r on allowed CPU r mod k" : "not bound", shm_names[o->shm], hier_names[o->hier]);
	if (o->rcvlowat)
		fprintf(out, "# SO_RCVLOWAT off\n");
	if (o->mem_shared)
		fprintf(out, "# buffers: hora_comm_mem_alloc (%s)\n",
			o->in_place ? "in place on one host above the latency path: the single-copy stage"
				    : "out of place: the copying stage");
	if (o->dirty)
		fprintf(out, "# --dirty: each rank rewrites its buffer before every timed call (untimed), as "
			     "a backward pass does: its lines are in its own cache, not where the last call left them\n");
	size_t last = o->lo;
	for (size_t sz = o->lo; sz <= o->hi; sz = next_size(sz))
		last = sz;
	char d[512];
	for (size_t sz = o->lo;; sz = last) {
		hora_comm_describe(c, bytes_for(o, sz), d, sizeof(d));
		fprintf(out, "# path: %s\n", d);
		if (sz == last)
			break;
	}
	if (o->with_memcpy)
		fprintf(out, "# memcpy_GBps: memcpy of the same bytes, all %d ranks copying at once (max over ranks, "
			     "median); bus/memcpy = busbw / memcpy_GBps\n", o->n);
	fprintf(out, "%12s %12s %6s %6s %12s %12s %12s %6s", "size", "count", "type", "redop", "time_us",
		"algbw_GBps", "busbw_GBps", "wrong");
	if (o->with_memcpy)
		fprintf(out, " %12s %11s", "memcpy_GBps", "bus/memcpy");
	fprintf(out, "\n");
}

static double busbw_factor(const struct opts *o)
{
	double n = o->n;
	return o->coll == HORA_NET_COLL_ALLREDUCE ? 2 * (n - 1) / n : o->coll == HORA_NET_COLL_BROADCAST ? 1 : (n - 1) / n;
}

/* --crossover: allreduce by the latency algorithm, the direct ring and the
 * pipelined ring from 1 KiB to 4 MiB; the sizes where each stops winning */
static int crossover(struct hora_comm *c, const struct opts *o, uint8_t *send, uint8_t *recv, double *t,
		     FILE *out)
{
	int rc = 0;
	size_t small = 0, medium = 0;
	int small_done = 0, medium_done = 0; /* the first loss ends each run of wins */
	if (out)
		fprintf(out, "# %s crossover, %d ranks (%s): median us per call\n%12s %12s %12s %12s\n",
			hora_net_coll_name(o->coll), o->n, o->setup, "size", "latency", "direct", "ring");
	static const enum hora_algo algs[3] = {HORA_ALGO_LATENCY, HORA_ALGO_DIRECT_RING, HORA_ALGO_RING};
	for (size_t sz = 1024; sz <= (4u << 20) && sz <= o->hi && !rc; sz *= 2) {
		size_t count = count_for(o, sz);
		double tm[3];
		for (int a = 0; a < 3 && !rc; a++) {
			if (sz > (1u << 20) && a == 0) { /* past the latency path's buffers */
				tm[a] = 1e30;
				continue;
			}
			hora_comm_set_algorithm(c, algs[a]);
			tm[a] = time_calls(c, o, send, recv, count, sz, t, &rc);
		}
		if (rc)
			break;
		if (!small_done && tm[0] <= tm[1] && tm[0] <= tm[2])
			small = sz;
		else
			small_done = 1;
		if (!medium_done && (tm[1] <= tm[2] || tm[0] <= tm[2]))
			medium = sz;
		else
			medium_done = 1;
		if (out)
			fprintf(out, "%12zu %12.2f %12.2f %12.2f\n", sz, tm[0] < 1e29 ? tm[0] : 0.0, tm[1], tm[2]);
	}
	if (out && !rc)
		fprintf(out, "crossover: latency up to %zu bytes, direct ring up to %zu bytes\n"
			     "(collectives.small_bytes: %zu, collectives.medium_bytes: %zu)\n",
			small, medium, small, medium);
	return rc;
}

/* one size's results */
struct row {
	size_t bytes, count;
	double time_us, algbw, busbw, wrong, memcpy_gbps;
};

/* a size's line of the table (out) and its JSON object (json), either NULL */
static void print_row(FILE *out, FILE *json, struct hora_comm *c, const struct opts *o, const struct row *r,
		      const char *tn, const char *on, int first)
{
	const double frac = r->memcpy_gbps > 0 ? r->busbw / r->memcpy_gbps : 0;
	if (out) {
		fprintf(out, "%12zu %12zu %6s %6s %12.2f %12.4f %12.4f %6.0f", r->bytes, r->count, tn, on, r->time_us,
			r->algbw, r->busbw, r->wrong);
		if (o->with_memcpy)
			fprintf(out, " %12.4f %11.3f", r->memcpy_gbps, frac);
		fprintf(out, "\n");
		fflush(out);
	}
	if (json) {
		char d[512];
		hora_comm_describe(c, r->bytes, d, sizeof(d));
		fprintf(json, "%s\n {\"size_bytes\":%zu,\"time_us\":%.3f,\"algbw_gbps\":%.5f,"
			      "\"busbw_gbps\":%.5f,\"wrong\":%.0f",
			first ? "" : ",", r->bytes, r->time_us, r->algbw, r->busbw, r->wrong);
		if (o->with_memcpy)
			fprintf(json, ",\"memcpy_gbps\":%.5f,\"busbw_per_memcpy\":%.5f", r->memcpy_gbps, frac);
		fprintf(json, ",\"path\":");
		json_str(json, d);
		fprintf(json, "}");
	}
}

static int run_rank(const struct opts *o, int rank, const char *const *addrs, const uint8_t *secret,
		    size_t slen, FILE *out, FILE *json)
{
	if (o->bind) { /* rank r on the allowed CPU r mod k, as mpirun --bind-to core does */
		const int cpu = hora_cpus_nth(rank);
		if (cpu >= 0)
			hora_cpus_bind_process(cpu); /* one path, CPUs past 1023 too */
	}
	struct hora_comm_config cfg;
	hora_comm_config_defaults(&cfg);
	cfg.rank = rank;
	cfg.size = o->n;
	cfg.addrs = addrs;
	cfg.segment_bytes = o->segment;
	cfg.slice_bytes = o->slice;
	cfg.algorithm = (enum hora_algo)o->algo;
	cfg.sockets_per_peer = o->sockets;
	cfg.rcvlowat = o->rcvlowat;
	cfg.shm = (enum hora_shm)o->shm;
	cfg.hierarchical = (enum hora_hier)o->hier;
	if (secret) {
		cfg.secret = secret;
		cfg.secret_len = slen;
	}
	struct hora_comm *c;
	char err[512];
	if (hora_comm_create(&cfg, &c, err, sizeof(err))) {
		fprintf(stderr, "hora bench %s: rank %d: %s\n", hora_net_coll_name(o->coll), rank, err);
		return 1;
	}
	size_t cap = o->hi + 64;
	uint8_t *send = o->mem_shared ? hora_comm_mem_alloc(c, cap) : malloc(cap);
	uint8_t *recv = o->mem_shared ? hora_comm_mem_alloc(c, cap) : malloc(cap);
	double *t = malloc(sizeof(double) * 1000);
	void *dv[2] = {NULL, NULL};
	if (o->device && (bench_dev_open(o->gpu_lib, err, sizeof(err)) || bench_dev_alloc(cap, &dv[0], err, sizeof(err)) ||
			  bench_dev_alloc(cap, &dv[1], err, sizeof(err)))) {
		fprintf(stderr, "hora bench %s: rank %d: %s\n", hora_net_coll_name(o->coll), rank, err);
		bench_dev_free(dv[0]);
		free_buf(c, o, send), free_buf(c, o, recv), free(t);
		hora_comm_destroy(c);
		return 1;
	}
	const char *tn = hora_net_dtype_name((enum hora_net_dtype)o->t);
	const char *on = o->coll == HORA_NET_COLL_ALLREDUCE || o->coll == HORA_NET_COLL_REDUCE_SCATTER
				 ? hora_net_op_name((enum hora_net_op)o->op) : "none";
	int rc = 0;
	if (out && !o->crossover)
		print_header(out, o, c, tn, on);
	if (json)
		fprintf(json, "[");
	int first = 1;
	if (o->crossover)
		rc = crossover(c, o, send, recv, t, out);
	for (size_t sz = o->lo; sz <= o->hi && !rc && !o->crossover; sz = next_size(sz)) {
		size_t count = count_for(o, sz);
		if (!count && sz)
			continue;
		size_t bytes = bytes_for(o, sz);
		double wrong = (double)verify(c, o, rank, send, recv, o->device ? dv : NULL, count, &rc);
		if (rc || (rc = hora_allreduce(c, &wrong, &wrong, 1, HORA_F64, HORA_SUM)))
			break;
		double med = o->device ? time_calls(c, o, dv[0], dv[1], count, bytes, t, &rc)
				       : time_calls(c, o, send, recv, count, bytes, t, &rc);
		if (rc)
			break;
		double algbw = (double)bytes / med / 1e3, busbw = algbw * busbw_factor(o);
		double mc = o->with_memcpy ? memcpy_gbps(c, send, recv, bytes, t, &rc) : 0;
		if (rc)
			break;
		const struct row row = {bytes, count, med, algbw, busbw, wrong, mc};
		print_row(out, json, c, o, &row, tn, on, first);
		first = 0;
		if (wrong)
			rc = 1;
	}
	if (rc < 0)
		fprintf(stderr, "hora bench %s: rank %d: %s\n", hora_net_coll_name(o->coll), rank, hora_comm_last_error(c));
	if (json)
		fprintf(json, "\n]\n");
	if (o->device && out)
		fprintf(out, "# %s\n", hora_comm_device_path(c));
	free_buf(c, o, send);
	free_buf(c, o, recv);
	free(t);
	bench_dev_free(dv[0]);
	bench_dev_free(dv[1]);
	hora_comm_destroy(c);
	return rc ? 1 : 0;
}

/* ---- --plot: busbw vs size, hora and the anchors, with gnuplot ------------------- */

/* the ']' that closes the array opening at p, past strings (a row's "path" may hold one) */
static const char *array_end(const char *p)
{
	int depth = 0, str = 0;
	for (; *p; p++) {
		if (str) {
			if (*p == '\\' && p[1])
				p++;
			else if (*p == '"')
				str = 0;
		} else if (*p == '"') {
			str = 1;
		} else if (*p == '[') {
			depth++;
		} else if (*p == ']' && !--depth) {
			return p;
		}
	}
	return p;
}

/* rows of one anchor variant in run.sh's JSON: "name": [ {...,"size_bytes": S,...,"busbw_gbps": B,...}, ... ] */
static int anchor_rows(const char *js, const char *name, FILE *dat)
{
	char key[64];
	snprintf(key, sizeof(key), "\"%s\":", name);
	const char *p = strstr(js, key);
	if (!p || !(p = strchr(p, '[')))
		return 0;
	const char *end = array_end(p);
	int rows = 0;
	while ((p = strstr(p, "\"size_bytes\":")) && p < end) {
		double s = strtod(p + 13, NULL);
		const char *b = strstr(p, "\"busbw_gbps\":");
		if (!b || b > end)
			break;
		fprintf(dat, "%.0f %.6f\n", s, strtod(b + 13, NULL));
		rows++;
		p = b;
	}
	if (rows) /* gnuplot merges empty blocks into one separator: a block only with rows */
		fprintf(dat, "\n\n");
	return rows;
}

static int plot(const struct opts *o, const char *hora_json)
{
	const char *td = getenv("TMPDIR");
	char path[PATH_MAX];
	/* mkstemp template: the six X become a unique suffix */
	snprintf(path, sizeof(path), "%s/hora-plot-XXXXXX", td && *td ? td : "/tmp");
	int fd = mkstemp(path);
	if (fd < 0)
		return fprintf(stderr, "hora bench: --plot: %s: %s\n", path, strerror(errno)), 1;
	FILE *f = fdopen(fd, "w");
	char *js = hora_bench_slurp(hora_json);
	/* our own rows have the same keys: reuse the scanner with a fake name */
	char *wrapped = NULL;
	if (js && asprintf(&wrapped, "{\"hora\": %s}", js) < 0)
		wrapped = NULL;
	static const char *const names[] = {"hora", "gloo", "gloo_ring_chunked", "gloo_halving_doubling",
					    "openmpi", "openmpi_ring", "openmpi_sm"};
	enum { NAMES = sizeof(names) / sizeof(names[0]) };
	int present[NAMES] = {0};
	present[0] = wrapped ? anchor_rows(wrapped, "hora", f) : 0;
	char *as = NULL;
	if (o->anchors) {
		as = hora_bench_slurp(o->anchors);
		if (!as) {
			fprintf(stderr, "hora bench: --anchors %s: %s\n", o->anchors, strerror(errno));
		} else {
			for (int i = 1; i < NAMES; i++)
				present[i] = anchor_rows(as, names[i], f);
		}
	}
	fclose(f);
	char cmd[4 * PATH_MAX];
	int k = snprintf(cmd, sizeof(cmd),
			 "gnuplot -e \"set terminal pngcairo size 900,540 font ',10' noenhanced; set output '%s'; "
			 "set logscale x 2; set xtics ('8B' 8, '256B' 256, '4KiB' 4096, '64KiB' 65536, "
			 "'1MiB' 1048576, '16MiB' 16777216, '64MiB' 67108864); set xlabel 'size'; "
			 "set ylabel 'busbw (GB/s = 1e9 B/s)'; set key left top; set grid; "
			 "set title '%s, %d ranks (%s), %s'; plot ",
			 o->plot, hora_net_coll_name(o->coll), o->n, o->setup,
			 hora_net_dtype_name((enum hora_net_dtype)o->t));
	int any = 0;
	for (int i = 0; i < NAMES; i++) /* the blocks in the file are those with rows, in order */
		if (present[i])
			k += snprintf(cmd + k, sizeof(cmd) - (size_t)k, "%s'%s' index %d with linespoints lw %d title '%s'",
				      any ? ", " : "", path, any, i ? 1 : 3, names[i]), any++;
	snprintf(cmd + k, sizeof(cmd) - (size_t)k, "\"");
	int rc = any ? system(cmd) : -1;
	unlink(path);
	free(js);
	free(wrapped);
	free(as);
	if (rc) {
		fprintf(stderr, "hora bench: --plot %s failed (gnuplot installed? deploy/install-deps.sh)\n", o->plot);
		return 1;
	}
	printf("# plot: %s\n", o->plot);
	return 0;
}

/* ---- launching ranks -------------------------------------------------------------- */

static int netns_script(char *out, size_t n)
{
	char exe[PATH_MAX - 64];
	ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (l > 0) {
		exe[l] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			if (snprintf(out, n, "%s/../deploy/netns-cluster.sh", exe) < (int)n &&
			    !access(out, R_OK))
				return 0;
		}
	}
	snprintf(out, n, "deploy/netns-cluster.sh");
	return access(out, R_OK) ? -1 : 0;
}

/* --hosts H (the ranks split contiguously, the first hosts one more when
 * they do not divide) or --hosts 3,1 (ranks per host; their sum is the
 * rank count, and --ranks, if given, must agree). Without it: one host per
 * rank. 0, or -1 with a message. */
static int parse_hosts(struct opts *o, const char *arg, int ranks_given)
{
	if (!arg) {
		o->nhosts = o->n;
		for (int r = 0; r < o->n; r++)
			o->host[r] = r;
		return 0;
	}
	int per[64], h = 0, sum = 0;
	const char *p = arg;
	while (*p && h < 64) {
		char *e;
		long v = strtol(p, &e, 10);
		if (e == p || v < 1 || v > 64 || (*e && *e != ','))
			return fprintf(stderr, "hora bench: --hosts wants H or ranks per host like 3,1 (got '%s')\n",
				       arg), -1;
		per[h++] = (int)v;
		sum += (int)v;
		p = *e ? e + 1 : e;
	}
	if (*p)
		return fprintf(stderr, "hora bench: --hosts: at most 64 hosts\n"), -1;
	if (h == 1) { /* a host count */
		h = per[0];
		if (h > o->n)
			return fprintf(stderr, "hora bench: --hosts %d: more hosts than the %d ranks\n", h, o->n), -1;
		for (int i = 0; i < h; i++)
			per[i] = o->n / h + (i < o->n % h);
	} else {
		if (ranks_given && sum != o->n)
			return fprintf(stderr, "hora bench: --hosts %s is %d ranks, --ranks says %d\n", arg, sum, o->n),
			       -1;
		if (sum > 64)
			return fprintf(stderr, "hora bench: --hosts %s: more than 64 ranks\n", arg), -1;
		o->n = sum;
	}
	o->nhosts = h;
	for (int i = 0, r = 0; i < h; i++)
		for (int k = 0; k < per[i]; k++)
			o->host[r++] = i;
	return 0;
}

/* "2,2": ranks per host */
static void hosts_text(const struct opts *o, char *buf, size_t len)
{
	size_t k = 0;
	buf[0] = 0;
	for (int i = 0, r = 0; i < o->nhosts && k < len; i++) {
		int c = 0;
		while (r < o->n && o->host[r] == i)
			c++, r++;
		k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? "," : "", c);
	}
}

/* the fork of rank r: enter its host's namespace (netns), run, exit */
static void rank_child(const struct opts *o, int r, const char *tag, const char *const *addrs,
		       const uint8_t *secret, size_t slen)
{
	if (tag) {
		char p[128];
		snprintf(p, sizeof(p), "/run/netns/%s-%d", tag, o->host[r] + 1);
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET)) {
			fprintf(stderr, "hora bench: rank %d: entering %s: %s\n", r, p, strerror(errno));
			_exit(1);
		}
		close(fd);
	}
	FILE *jf = r == 0 && o->json ? hora_bench_json_open(o->json) : NULL;
	int x = run_rank(o, r, addrs, secret, slen, r == 0 ? stdout : NULL, jf);
	hora_bench_json_close(jf);
	fflush(stdout);
	_exit(x);
}

/* N ranks forked here: on 127.0.0.1 (rank 0 in this process), or in the
 * namespace hosts of deploy/netns-cluster.sh (made and removed here); the
 * ranks of one host listen on its address at port, port + 1, ... */
static int launch(const struct opts *o, int port, const uint8_t *secret, size_t slen)
{
	int netns = !strcmp(o->setup, "netns");
	char script[PATH_MAX], tag[32], cmd[2 * PATH_MAX];
	snprintf(tag, sizeof(tag), "hb%d", (int)getpid() % 100000);
	if (netns) {
		if (netns_script(script, sizeof(script)))
			return fprintf(stderr, "hora bench: deploy/netns-cluster.sh not found\n"), 1;
		snprintf(cmd, sizeof(cmd), "bash '%s' up %d --rate '%s' --tag %s >/dev/null", script, o->nhosts,
			 o->rate, tag);
		if (system(cmd))
			return fprintf(stderr, "hora bench: could not create %d namespaces (root needed)\n", o->nhosts), 1;
		char per[256];
		hosts_text(o, per, sizeof(per));
		printf("# netns: %d hosts 10.213.8.1..%d, egress tbf %s, ranks per host %s (contiguous)\n", o->nhosts,
		       o->nhosts, o->rate, per);
	}
	char (*addr)[32] = calloc((size_t)o->n, 32);
	const char **addrs = calloc((size_t)o->n, sizeof(*addrs));
	pid_t *pids = calloc((size_t)o->n, sizeof(pid_t));
	for (int i = 0, local = 0; i < o->n; i++) {
		local = i && o->host[i] == o->host[i - 1] ? local + 1 : 0;
		if (netns)
			snprintf(addr[i], 32, "10.213.8.%d:%d", o->host[i] + 1, port + local);
		else
			snprintf(addr[i], 32, "127.0.0.1:%d", port + i);
		addrs[i] = addr[i];
	}
	fflush(stdout);
	int rc = 0;
	for (int r = netns ? 0 : 1; r < o->n; r++)
		if ((pids[r] = fork()) == 0)
			rank_child(o, r, netns ? tag : NULL, addrs, secret, slen);
	if (!netns) {
		FILE *jf = o->json ? hora_bench_json_open(o->json) : NULL;
		rc = run_rank(o, 0, addrs, secret, slen, stdout, jf);
		hora_bench_json_close(jf);
	}
	for (int r = netns ? 0 : 1; r < o->n; r++) {
		int st;
		if (pids[r] < 0 || waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			rc = 1;
	}
	if (netns) {
		snprintf(cmd, sizeof(cmd), "bash '%s' down --tag %s >/dev/null", script, tag);
		if (system(cmd))
			rc = 1;
	}
	free(pids);
	free(addr);
	free(addrs);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hora bench allreduce|broadcast|allgather|reduce_scatter [--ranks N] [--sizes 8:64M]\n"
		   "         [--dtype f32|f64|f16|bf16|i32|i64] [--op sum|avg|min|max|prod]\n"
		   "         [--algo auto|ring|latency|direct] [--segment BYTES] [--slice BYTES] [--iters K]\n"
		   "         [--setup lo|netns] [--rate 1gbit] [--hosts H|3,1]  (netns: H hosts, ranks contiguous)\n"
		   "         [--shm auto|off] [--hier auto|on|off] [--with-memcpy]\n"
		   "         [--in-place] [--mem malloc|shared]  (shared: hora_comm_mem_alloc's buffers)\n"
		   "         [--dirty]            (with --in-place: each rank rewrites its buffer before every call)\n"
		   "         [--json F] [--plot F.png] [--anchors RUN.json] [--crossover] [--port BASE]\n"
		   "         [--bind core|none]   (default: core when ranks <= CPUs, as mpirun)\n"
		   "         [--device cpu|cuda]  (cuda: the buffers in device memory, core/devcoll.c)\n"
		   "         [--gpu-library F]    (that file as hora's GPU module, e.g. the tests' CPU double)\n"
		   "         [--sockets K]        (TCP streams per peer for the ring, default 1)\n"
		   "         [--rcvlowat on|off]  (wake once per large frame, default on)\n"
		   "         [--plot F.png --from ROWS.json [--anchors RUN.json]]  (plot only, no run)\n"
		   "       hora bench <coll> --rank R --addrs IP:PORT,IP:PORT,... [same options]\n");
}

/* the command line's other values */
struct cli {
	int port, rank;
	const char *from;
	char *addrlist;
};

/* argv into o and a: 0, 1 after --help, 2 on a bad flag (said why) */
static int parse_args(const char *what, int argc, char **argv, struct opts *o, struct cli *a)
{
	static const struct option lopts[] = {
		{"ranks", required_argument, 0, 'n'}, {"sizes", required_argument, 0, 's'},
		{"json", required_argument, 0, 'j'}, {"algo", required_argument, 0, 'a'},
		{"port", required_argument, 0, 'p'}, {"segment", required_argument, 0, 'g'},
		{"slice", required_argument, 0, 'l'}, {"iters", required_argument, 0, 'I'},
		{"dtype", required_argument, 0, 't'}, {"op", required_argument, 0, 'o'},
		{"setup", required_argument, 0, 'S'}, {"rate", required_argument, 0, 'R'},
		{"plot", required_argument, 0, 'P'}, {"anchors", required_argument, 0, 'A'},
		{"crossover", no_argument, 0, 'x'}, {"rank", required_argument, 0, 'r'},
		{"addrs", required_argument, 0, 'd'}, {"bind", required_argument, 0, 'b'},
		{"sockets", required_argument, 0, 'K'}, {"from", required_argument, 0, 'F'},
		{"rcvlowat", required_argument, 0, 'L'}, {"shm", required_argument, 0, 'M'},
		{"hier", required_argument, 0, 'H'}, {"hosts", required_argument, 0, 'T'},
		{"with-memcpy", no_argument, 0, 'C'}, {"device", required_argument, 0, 'D'},
		{"gpu-library", required_argument, 0, 'G'}, {"in-place", no_argument, 0, 'i'},
		{"mem", required_argument, 0, 'm'}, {"dirty", no_argument, 0, 'W'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
	};
	int c, ranks_given = 0;
	const char *hosts = NULL;
	for (int i = 0; i < HORA_NET_COLL_KINDS; i++)
		if (!strcmp(what, hora_net_coll_name((uint32_t)i)))
			o->coll = (enum hora_net_coll_kind)i;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'n': o->n = atoi(optarg); ranks_given = 1; break;
		case 's': {
			const char *colon = strchr(optarg, ':');
			o->lo = hora_bench_size(optarg);
			o->hi = colon ? hora_bench_size(colon + 1) : o->lo;
			break;
		}
		case 'j': o->json = optarg; break;
		case 'a':
			o->algo = !strcmp(optarg, "ring")			       ? HORA_ALGO_RING
				 : !strcmp(optarg, "latency") || !strcmp(optarg, "doubling") ? HORA_ALGO_LATENCY
				 : !strcmp(optarg, "direct")			       ? HORA_ALGO_DIRECT_RING
				 : !strcmp(optarg, "auto")			       ? HORA_ALGO_AUTO
										       : -1;
			break;
		case 'p': a->port = atoi(optarg); break;
		case 'g': o->segment = hora_bench_size(optarg); break;
		case 'l': o->slice = hora_bench_size(optarg); break;
		case 'I': o->iters = atoi(optarg); break;
		case 't':
			o->t = (enum hora_dtype)-1;
			for (int i = 0; i < HORA_NET_DTYPES; i++)
				if (!strcmp(optarg, hora_net_dtype_name((enum hora_net_dtype)i)))
					o->t = (enum hora_dtype)i;
			break;
		case 'o':
			o->op = (enum hora_op)-1;
			for (int i = 0; i < HORA_NET_OPS; i++)
				if (!strcmp(optarg, hora_net_op_name((enum hora_net_op)i)))
					o->op = (enum hora_op)i;
			break;
		case 'S': o->setup = optarg; break;
		case 'R': o->rate = optarg; break;
		case 'P': o->plot = optarg; break;
		case 'A': o->anchors = optarg; break;
		case 'x': o->crossover = 1; break;
		case 'r': a->rank = atoi(optarg); break;
		case 'd': a->addrlist = optarg; break;
		case 'K': o->sockets = atoi(optarg); break;
		case 'L': o->rcvlowat = !strcmp(optarg, "on") ? 0 : !strcmp(optarg, "off") ? -1 : -2; break;
		case 'F': a->from = optarg; break;
		case 'b': o->bind = !strcmp(optarg, "core") ? 1 : !strcmp(optarg, "none") ? 0 : -1; break;
		case 'M': o->shm = lookup(optarg, shm_names, 2); break;
		case 'H': o->hier = lookup(optarg, hier_names, 3); break;
		case 'T': hosts = optarg; break;
		case 'C': o->with_memcpy = 1; break;
		case 'i': o->in_place = 1; break;
		case 'W': o->dirty = 1; break;
		case 'm':
			if ((o->mem_shared = lookup(optarg, (const char *const[]){"malloc", "shared"}, 2)) < 0)
				return fprintf(stderr, "hora bench %s: --mem malloc|shared, not %s\n", what, optarg), 2;
			break;
		case 'D': o->device = !strcmp(optarg, "cuda") ? 1 : !strcmp(optarg, "cpu") ? 0 : -1; break;
		case 'G': o->gpu_lib = optarg; break;
		case 'h': usage(stdout); return 1;
		default: usage(stderr); return 2;
		}
	}
	if (o->device < 0)
		return usage(stderr), fprintf(stderr, "hora bench %s: --device is cpu or cuda\n", what), 2;
	if (o->in_place && (o->coll != HORA_NET_COLL_ALLREDUCE || o->device || o->crossover))
		return fprintf(stderr, "hora bench %s: --in-place is for allreduce of host buffers (no --device "
				       "cuda, no --crossover)\n", what), 2;
	if (o->dirty && !o->in_place)
		return fprintf(stderr, "hora bench %s: --dirty is for --in-place allreduce (the buffer a "
				       "backward pass writes)\n", what), 2;
	if (o->mem_shared && (o->device || o->crossover))
		return fprintf(stderr, "hora bench %s: --mem shared is for host buffers (no --device cuda, "
				       "no --crossover)\n", what), 2;
	if (o->device && (o->crossover || o->with_memcpy))
		return fprintf(stderr, "hora bench %s: --device cuda times the calls only (no --crossover, "
				       "--with-memcpy)\n", what), 2;
	if (o->bind == -1)
		return fprintf(stderr, "hora bench %s: --bind is core or none\n", what), 2;
	if (o->shm < 0 || o->hier < 0) {
		usage(stderr);
		fprintf(stderr, "hora bench %s: --shm is auto or off, --hier auto, on or off\n", what);
		return 2;
	}
	if (hosts && strcmp(o->setup, "netns"))
		return fprintf(stderr, "hora bench %s: --hosts needs --setup netns (on lo every rank is on one host)\n",
			       what), 2;
	if (o->n >= 1 && o->n <= 64 && parse_hosts(o, hosts, ranks_given))
		return 2;
	if (o->bind == -2) /* mpirun's default: bind to a core unless oversubscribed */
		o->bind = o->n <= hora_cpus_allowed();
	if (o->n < 1 || o->n > 64 || o->lo > o->hi || o->iters < 0 || o->iters > 1000 || o->algo < 0 || o->bind < 0 || o->sockets < 0 || o->sockets > 64 || o->rcvlowat < -1 || (int)o->t < 0 || (int)o->op < 0 ||
	    (strcmp(o->setup, "lo") && strcmp(o->setup, "netns"))) {
		usage(stderr);
		fprintf(stderr, "hora bench %s: need 1 <= ranks <= 64, lo <= hi sizes, a known dtype, op, algo and setup\n",
			what);
		return 2;
	}
	return 0;
}

int hora_bench_coll(const char *what, int argc, char **argv)
{
	struct opts o = {.n = 2, .bind = -2, .lo = 8, .hi = 64 << 20, .t = HORA_F32, .op = HORA_SUM, .setup = "lo",
			 .rate = "1gbit"};
	struct cli cl = {.rank = -1};
	int prc = parse_args(what, argc, argv, &o, &cl);
	if (prc)
		return prc == 1 ? 0 : prc;
	int port = cl.port, rank = cl.rank;
	const char *from = cl.from;
	char *addrlist = cl.addrlist;
	if (o.plot && !o.json)
		o.json = "bench-coll.json"; /* the plot reads the rows back */
	if (o.plot && from) { /* plot rows measured before (e.g. by allreduce-compare.sh) */
		o.json = from;
		return plot(&o, from);
	}
	if (addrlist) { /* one rank of a cluster started elsewhere (secret: HORA_SECRET) */
		const char *a[64];
		int k = 0;
		for (char *save, *tok = strtok_r(addrlist, ",", &save); tok && k < 64; tok = strtok_r(NULL, ",", &save))
			a[k++] = tok;
		o.n = k;
		if (rank < 0 || rank >= k) {
			fprintf(stderr, "hora bench %s: --rank must be in 0..%d\n", what, k - 1);
			return 2;
		}
		FILE *jf = rank == 0 && o.json ? hora_bench_json_open(o.json) : NULL;
		int rc = run_rank(&o, rank, a, NULL, 0, rank == 0 ? stdout : NULL, jf);
		hora_bench_json_close(jf);
		return rc || (rank == 0 && o.plot && plot(&o, o.json));
	}
	uint8_t secret[32];
	if (getrandom(secret, sizeof(secret), 0) != sizeof(secret))
		return 1;
	if (!port)
		port = 10000 + (int)((getpid() * 31 + time(NULL)) % 20000);
	int rc = launch(&o, port, secret, sizeof(secret));
	if (!rc && o.plot)
		rc = plot(&o, o.json);
	return rc;
}
