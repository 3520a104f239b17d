/* clock.h - the one monotonic clock of hora (CLOCK_MONOTONIC), in the units
 * callers need. Header-only so that every module (net/, core/, bench/, tests)
 * can use it without a link dependency; net/util/ includes nothing of hora.
 * Not a wall clock: for timestamps shared between processes see
 * net/membership's wall-clock offset. Thread-safe. */
#ifndef HORA_NET_UTIL_CLOCK_H
#define HORA_NET_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t hora_clock_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t hora_clock_us(void)
{
	return hora_clock_ns() / 1000;
}

static inline int64_t hora_clock_ms(void)
{
	return hora_clock_ns() / 1000000;
}

/* seconds as a double, for rates and reports */
static inline double hora_clock_s(void)
{
	return 1e-9 * (double)hora_clock_ns();
}

#endif
