/* distopt.h - internals of the distributed optimizer and the timeline
 * (core/ only; the public API is in hora.h). */
#ifndef HORA_CORE_DISTOPT_H
#define HORA_CORE_DISTOPT_H

#include "hora.h"

#include <stdbool.h>
#include <stdint.h>

/* Chrome trace events (chrome://tracing, Perfetto): one process per rank,
 * thread 0 = the training thread, 1 = the communicator's background thread.
 * Events are kept in memory and written once, by rank 0, for every rank. */
struct hora_timeline;
int hora_timeline_create(int rank, struct hora_timeline **out);
void hora_timeline_destroy(struct hora_timeline *tl);
/* A span [t0, t1] (hora_clock_s() seconds) on track tid; bytes > 0 is shown as an arg. */
void hora_timeline_span(struct hora_timeline *tl, int tid, const char *name, double t0, double t1,
			size_t bytes);
/* Gather every rank's events on rank 0 (a collective: every rank calls it)
 * and write path there. Times are relative to the timeline's creation,
 * which every rank does right after a barrier. */
/* Elastic training: the track is named for worker (it keeps its name when
 * the ranks are renumbered); a joiner's times are aligned to a survivor's
 * (age: seconds since that one's creation). */
/* A counter (Chrome "C" event) name = value at time t (hora_clock_s()),
 * e.g. gossip's consensus distance. */
void hora_timeline_counter(struct hora_timeline *tl, const char *name, double t, double value);
void hora_timeline_relabel(struct hora_timeline *tl, int worker);
double hora_timeline_age(const struct hora_timeline *tl);
void hora_timeline_align(struct hora_timeline *tl, double age);
int hora_timeline_write(struct hora_timeline *tl, struct hora_comm *c, const char *path, char *err,
			size_t errlen);

struct hora_dist_stats {
	int64_t steps, buffers;
	double allreduce_s; /* time the averages ran on the background thread */
	double hidden_s;    /* ... of it while forward/backward was still running */
	double wait_s;      /* time the step waited for them */
};
void hora_dist_optim_stats(const struct hora_dist_optim *d, struct hora_dist_stats *st);
/* Why the last call failed: the model's broken gradient ranges, the
 * communicator's error, or the errno's text. */
const char *hora_dist_optim_error(const struct hora_dist_optim *d);
/* A rank without samples in this step: after hora_dist_optim_begin, zero
 * the gradients and report the previous step's ranges as ready, so that it
 * takes part in the same averages with nothing. -ENOENT before the first
 * step (the caller then runs one sample at weight 0). */
int hora_dist_optim_replay_zero(struct hora_dist_optim *d);
void hora_dist_optim_set_timeline(struct hora_dist_optim *d, struct hora_timeline *tl);
const struct hora_fusion_config *hora_dist_optim_fusion(const struct hora_dist_optim *d);

#endif
