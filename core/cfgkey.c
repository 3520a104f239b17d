/* cfgkey.c - table-driven configuration keys and the one parser of each
 * kind of value (see cfgkey.h). Not the YAML walker, not any section's keys. */
#include "cfgkey.h"

#include "hora.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int hora_cfg_bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return HORA_ERR_CONFIG;
}

int hora_cfg_int(const char *v, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi)
		return -1;
	*out = x;
	return 0;
}

int hora_cfg_bool(const char *v, int *out)
{
	static const char *const t[] = {"true", "yes", "on", "1"}, *const f[] = {"false", "no", "off", "0"};
	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(v, t[i]))
			return *out = 1, 0;
		if (!strcasecmp(v, f[i]))
			return *out = 0, 0;
	}
	return -1;
}

int hora_cfg_real(const char *v, double *out)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x))
		return -1;
	*out = x;
	return 0;
}

static const struct {
	const char *a, *b; /* short and long spelling */
	int shift;
} units[] = {{"", "B", 0}, {"K", "KiB", 10}, {"M", "MiB", 20}, {"G", "GiB", 30}, {"T", "TiB", 40}};

int hora_cfg_size(const char *v, uint64_t *out)
{
	const char *p = v;
	uint64_t whole = 0, frac = 0, scale = 1;
	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++)
		if (__builtin_mul_overflow(whole, 10, &whole) ||
		    __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
			return -1;
	if (*p == '.') {
		if (*++p < '0' || *p > '9')
			return -1;
		for (; *p >= '0' && *p <= '9'; p++) {
			if (scale >= 1000000000000000000ull)
				return -1; /* more than 18 decimals */
			frac = frac * 10 + (uint64_t)(*p - '0');
			scale *= 10;
		}
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcasecmp(p, units[i].a) && strcasecmp(p, units[i].b))
			continue;
		const int s = units[i].shift;
		/* whole << s and frac << s, both without overflow; frac must
		 * come out a whole number of bytes */
		if (s && whole > (UINT64_MAX >> s))
			return -1;
		unsigned __int128 f = (unsigned __int128)frac << s;
		if (f % scale)
			return -1;
		uint64_t b = whole << s;
		if (__builtin_add_overflow(b, (uint64_t)(f / scale), &b))
			return -1;
		*out = b;
		return 0;
	}
	return -1;
}

void hora_cfg_size_str(uint64_t b, char *out, size_t len)
{
	for (int i = (int)(sizeof(units) / sizeof(units[0])) - 1; i > 0; i--) {
		const uint64_t u = 1ull << units[i].shift;
		if (b && b % u == 0) {
			snprintf(out, len, "%llu%s", (unsigned long long)(b / u), units[i].b);
			return;
		}
	}
	snprintf(out, len, "%llu", (unsigned long long)b);
}

const struct hora_cfg_key *hora_cfg_key_find(const struct hora_cfg_key *t, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(key, t[i].name))
			return &t[i];
		const size_t len = strlen(t[i].name);
		if (t[i].kind == HORA_CFG_REFUSED && !strncmp(key, t[i].name, len) &&
		    (key[len] == '.' || key[len] == '['))
			return &t[i];
	}
	return NULL;
}

int hora_cfg_key_refused(const struct hora_cfg_key *k, const char *key, char *err, size_t errlen)
{
	if (!k || k->kind != HORA_CFG_REFUSED)
		return 0;
	return hora_cfg_bad(err, errlen, "%s: %s", key, k->what);
}

int hora_cfg_text(char *dst, size_t cap, const char *key, const char *v, int empty_ok, char *err,
		  size_t errlen)
{
	const size_t len = strlen(v);
	if (!len && !empty_ok)
		return hora_cfg_bad(err, errlen, "%s must not be empty", key);
	if (len >= cap)
		return hora_cfg_bad(err, errlen, "%s is too long (%zu bytes, at most %zu)", key, len,
				    cap - 1);
	memcpy(dst, v, len + 1);
	return 0;
}

static int set_int(const struct hora_cfg_key *k, void *dst, const char *key, const char *v, char *err,
		   size_t errlen)
{
	long x;
	assert(k->size == sizeof(int));
	if (hora_cfg_int(v, (long)k->lo, (long)k->hi, &x)) {
		if (k->what)
			return hora_cfg_bad(err, errlen, "%s must be %s (got '%s')", key, k->what, v);
		return hora_cfg_bad(err, errlen, "%s must be an integer in %ld..%ld (got '%s')", key,
				    (long)k->lo, (long)k->hi, v);
	}
	const int i = (int)x;
	memcpy(dst, &i, sizeof(i));
	return 0;
}

static int set_real(const struct hora_cfg_key *k, void *dst, const char *key, const char *v, char *err,
		    size_t errlen)
{
	double d;
	assert(k->size == sizeof(double));
	if (hora_cfg_real(v, &d) || !(k->flags & HORA_CFG_LO_OPEN ? d > k->lo : d >= k->lo) ||
	    !(k->flags & HORA_CFG_HI_OPEN ? d < k->hi : d <= k->hi)) {
		if (k->what)
			return hora_cfg_bad(err, errlen, "%s must be %s (got '%s')", key, k->what, v);
		return hora_cfg_bad(err, errlen, "%s must be a number in %c%g, %g%c (got '%s')", key,
				    k->flags & HORA_CFG_LO_OPEN ? '(' : '[', k->lo, k->hi,
				    k->flags & HORA_CFG_HI_OPEN ? ')' : ']', v);
	}
	memcpy(dst, &d, sizeof(d));
	return 0;
}

static int set_size(const struct hora_cfg_key *k, void *dst, const char *key, const char *v, char *err,
		    size_t errlen)
{
	uint64_t b;
	assert(k->size == sizeof(size_t) || (k->size == sizeof(int) && k->hi <= 0x7fffffff));
	if (hora_cfg_size(v, &b) || (double)b < k->lo || (double)b > k->hi) {
		char lo[32], hi[32];
		hora_cfg_size_str((uint64_t)k->lo, lo, sizeof(lo));
		hora_cfg_size_str((uint64_t)k->hi, hi, sizeof(hi));
		return hora_cfg_bad(err, errlen, "%s must be a size in %s..%s, in bytes or with a KiB, "
					    "MiB or GiB suffix (got '%s')", key, lo, hi, v);
	}
	if (k->size == sizeof(int)) {
		const int i = (int)b;
		memcpy(dst, &i, sizeof(i));
	} else {
		const size_t s = (size_t)b;
		memcpy(dst, &s, sizeof(s));
	}
	return 0;
}

static int set_name(const struct hora_cfg_key *k, void *dst, const char *key, const char *v, char *err,
		    size_t errlen)
{
	assert(k->size == sizeof(int));
	for (const struct hora_cfg_name *n = k->names; n->name; n++)
		if (!strcasecmp(v, n->name)) {
			memcpy(dst, &n->value, sizeof(int));
			return 0;
		}
	char list[256] = "";
	size_t len = 0;
	for (const struct hora_cfg_name *n = k->names; n->name && len < sizeof(list); n++) {
		const char *sep = n == k->names ? "" : n[1].name ? ", " : " or ";
		int w = snprintf(list + len, sizeof(list) - len, "%s%s", sep, n->name);
		if (w < 0)
			break;
		len += (size_t)w;
	}
	return hora_cfg_bad(err, errlen, "%s must be %s (got '%s')", key, list, v);
}

int hora_cfg_key_set(const struct hora_cfg_key *k, void *base, const char *key, const char *value,
		     int line, int col, char *err, size_t errlen)
{
	char *dst = (char *)base + k->off;
	switch (k->kind) {
	case HORA_CFG_TEXT:
	case HORA_CFG_TEXT_OR_NONE:
		return hora_cfg_text(dst, k->size, key, value, k->kind == HORA_CFG_TEXT_OR_NONE, err,
				     errlen);
	case HORA_CFG_INT:
		return set_int(k, dst, key, value, err, errlen);
	case HORA_CFG_REAL:
		return set_real(k, dst, key, value, err, errlen);
	case HORA_CFG_BOOL: {
		int b;
		assert(k->size == sizeof(int));
		if (hora_cfg_bool(value, &b))
			return hora_cfg_bad(err, errlen, "%s must be true or false (got '%s')", key, value);
		memcpy(dst, &b, sizeof(b));
		return 0;
	}
	case HORA_CFG_SIZE:
		return set_size(k, dst, key, value, err, errlen);
	case HORA_CFG_NAME:
		return set_name(k, dst, key, value, err, errlen);
	case HORA_CFG_FN:
		return k->fn(base, key, value, line, col, err, errlen);
	case HORA_CFG_REFUSED:
		return hora_cfg_key_refused(k, key, err, errlen);
	}
	return hora_cfg_bad(err, errlen, "%s: unknown kind of key", key);
}
