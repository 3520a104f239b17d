/* elastic_api.c - elastic jobs for programs of their own (hora.h,
 * "elastic jobs"): the calls Horovod's hvd.elastic is built on, over the
 * same communicator re-forms as the built-in trainer's (core/elastic.c),
 * which keeps its own commits; here the caller keeps the state (the Python
 * binding's hora.torch.elastic: core/python/).
 */
#include "comm.h"
#include "hora.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "net/util/clock.h"

int hora_elastic_on(const struct hora_comm *c)
{
	return c && hora_comm_is_elastic(c);
}

int hora_elastic_joined(const struct hora_comm *c)
{
	return c && hora_comm_joined(c);
}

int hora_elastic_pending(struct hora_comm *c)
{
	return hora_elastic_on(c) && (hora_comm_view_changed(c) || hora_comm_joiners(c));
}

uint64_t hora_elastic_view(const struct hora_comm *c)
{
	return c ? hora_comm_view(c) : 0;
}

/* codes a re-form cannot mend (as core/elastic.c's) */
static int fatal(int rc)
{
	return rc == HORA_ERR_CONFIG || rc == HORA_ERR_DATA || rc == HORA_ERR_MODEL || rc == HORA_ERR_DIVERGED ||
	       rc == HORA_ERR_STALL || rc == -ENOMEM || rc == HORA_ERR_NOJOB;
}

/* A failure that is no view change yet: the failure detector's time
 * (longer while a rank is suspected) to say so. 0: re-form; else the code
 * to return, with err. */
static int await_change(struct hora_comm *c, int rc, char *err, size_t errlen)
{
	const double deadline = hora_clock_s() + hora_comm_detect_s(c);
	while (!hora_comm_view_changed(c) && !hora_comm_joiners(c)) {
		if (hora_clock_s() > deadline && !hora_comm_suspect(c)) {
			if (!rc)
				return snprintf(err, errlen, "nothing to re-form for: every worker of view %llu is "
							     "alive and no joiner waits",
						(unsigned long long)hora_comm_view(c)), -EAGAIN;
			snprintf(err, errlen, "%s (and every worker is still alive: not a view change)",
				 hora_comm_last_error(c));
			return rc;
		}
		usleep(20000);
	}
	return 0;
}

int hora_elastic_reform(struct hora_comm *c, int rc, char *err, size_t errlen)
{
	if (!hora_elastic_on(c))
		return snprintf(err, errlen, "not an elastic communicator (train.elastic is off in the cluster "
					     "file, or there is none)"), -EINVAL;
	if (fatal(rc))
		return snprintf(err, errlen, "%s: a re-form cannot mend it", hora_comm_last_error(c)), rc;
	/* a death during the readiness rounds (a joiner still loading) is one
	 * more view change: re-form again, as core/elastic.c's recovery */
	for (int tries = 0;; tries++) {
		int k = await_change(c, rc, err, errlen);
		if (k || (k = hora_comm_reform(c, err, errlen)))
			return k;
		if (!(rc = hora_comm_await_ready(c)))
			return 0;
		snprintf(err, errlen, "the readiness rounds of view %llu: %s", (unsigned long long)hora_comm_view(c),
			 hora_comm_last_error(c));
		if (fatal(rc) || tries == 20)
			return rc;
	}
}
