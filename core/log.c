/* log.c - the log sink: timestamped lines on stderr, level set by
 * hora_log_set_level (HORA_LOG is read by env.c, not here).
 * Thread-safe: one fprintf per line (stdio locks the stream). */
#include "log.h"

#include "hora_config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic int g_level = HORA_LOG_INFO;

void hora_log_set_level(enum hora_log_level level)
{
	atomic_store_explicit(&g_level, (int)level, memory_order_relaxed);
}

int hora_log_enabled(enum hora_log_level level)
{
	return (int)level <= atomic_load_explicit(&g_level, memory_order_relaxed);
}

void hora_log(enum hora_log_level level, const char *fmt, ...)
{
	static const char *const tag[] = {"E", "W", "I", "D"};
	if (!hora_log_enabled(level))
		return;
	char line[1024];
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	int k = snprintf(line, sizeof(line), "hora %s %02d:%02d:%02d.%03ld ", tag[level], tm.tm_hour,
			 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + k, sizeof(line) - (size_t)k, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

const char *hora_strerror(int code)
{
	switch (code) {
	case 0:
		return "success";
	case HORA_ERR_CONFIG:
		return "invalid configuration";
	case HORA_ERR_DATA:
		return "invalid or missing data";
	case HORA_ERR_MODEL:
		return "model could not be loaded or built";
	case HORA_ERR_DIVERGED:
		return "training diverged (non-finite loss)";
	case HORA_ERR_STALL:
		return "stopped by the stall inspector (a rank did not reach a collective)";
	case HORA_ERR_LOST:
		return "a worker of the job was declared dead by the failure detector";
	case HORA_ERR_NOJOB:
		return "no running job to join (it had ended, or no worker that trained is left)";
	case HORA_ERR_VIEW:
		return "the membership view changed (elastic training re-forms the communicator)";
	default:
		if (code < 0 && code > -4096)
			return strerror(-code);
		return "unknown error";
	}
}

const char *hora_version(void)
{
	return HORA_VERSION_STRING;
}
