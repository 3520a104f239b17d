/* log.h - internal logging: one sink (stderr), the only global in hora. */
#ifndef HORA_CORE_LOG_H
#define HORA_CORE_LOG_H

#include "hora.h"

void hora_log(enum hora_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int hora_log_enabled(enum hora_log_level level);

#define HORA_LOGE(...) hora_log(HORA_LOG_ERROR, __VA_ARGS__)
#define HORA_LOGW(...) hora_log(HORA_LOG_WARN, __VA_ARGS__)
#define HORA_LOGI(...) hora_log(HORA_LOG_INFO, __VA_ARGS__)
#define HORA_LOGD(...) hora_log(HORA_LOG_DEBUG, __VA_ARGS__)

#endif
