/* cfgkey.h - configuration keys as tables, and the value parsers behind them
 * (internal).
 *
 * Each section lists its keys once (train in config.c; cluster, transport,
 * membership and collectives in cluster.c): the key's name, its kind, where
 * its value goes and its range. hora_cfg_key_set parses a value the same way
 * for every key of a kind (one integer, number, boolean, size and name
 * parser), checks the range and writes the field; every error names the key
 * ("transport.chunk_size must be a size in 4KiB..1GiB, ... (got 'big')").
 * Keys recognised but not available in this build are listed too
 * (HORA_CFG_REFUSED), so that they are refused with a reason instead of
 * being accepted and ignored. This is not the YAML walker (yamlwalk.c).
 */
#ifndef HORA_CORE_CFGKEY_H
#define HORA_CORE_CFGKEY_H

#include <stddef.h>
#include <stdint.h>

enum hora_cfg_kind {
	HORA_CFG_TEXT,         /* char[size] at off, not empty */
	HORA_CFG_TEXT_OR_NONE, /* char[size] at off; "" clears it */
	HORA_CFG_INT,          /* int, lo..hi */
	HORA_CFG_REAL,         /* double, lo..hi (flags: open ends) */
	HORA_CFG_BOOL,         /* int 0/1: true/yes/on/1, false/no/off/0 */
	HORA_CFG_SIZE,         /* size_t (or int) bytes, lo..hi, hora_cfg_size syntax */
	HORA_CFG_NAME,         /* int: the value of one of names[] (case-insensitive) */
	HORA_CFG_FN,           /* fn parses and stores it */
	HORA_CFG_REFUSED,      /* recognised, not available: what says why; also
				  matches every key below it ("train.gossip.x") */
};

#define HORA_CFG_LO_OPEN 1u /* REAL: lo itself is out of range */
#define HORA_CFG_HI_OPEN 2u /* REAL: hi itself is out of range */
#define HORA_CFG_DISTRIBUTED 4u /* read only by a job of several workers */

struct hora_cfg_name {
	const char *name;
	int value;
};

/* Stores value (of key, as the user wrote it) into the section struct base.
 * Returns 0, or HORA_ERR_CONFIG with the message in err (hora_cfg_bad). */
typedef int (*hora_cfg_set_fn)(void *base, const char *key, const char *value, int line, int col,
			       char *err, size_t errlen);

struct hora_cfg_key {
	const char *name;
	enum hora_cfg_kind kind;
	size_t off, size; /* the field in the section's struct: HORA_CFG_FIELD */
	double lo, hi;    /* INT, REAL, SIZE */
	unsigned flags;   /* HORA_CFG_LO_OPEN | HORA_CFG_HI_OPEN (REAL), HORA_CFG_DISTRIBUTED */
	const char *what; /* what a value must be ("a positive integer"); NULL: said
			     from the range. REFUSED: why the key is refused */
	const struct hora_cfg_name *names; /* NAME: ends with {NULL, 0} */
	hora_cfg_set_fn fn;                /* FN */
};

#define HORA_CFG_FIELD(type, field) .off = offsetof(type, field), .size = sizeof(((type *)0)->field)

/* The entry for key in t[0..n): the one of that name, or a REFUSED entry
 * above it (key continues with '.' or '['). NULL: no such key. */
const struct hora_cfg_key *hora_cfg_key_find(const struct hora_cfg_key *t, size_t n, const char *key);
/* Parse value as k says and store it into base. key is the name the user
 * wrote (e.g. with a node index), used in messages. Returns 0, or
 * HORA_ERR_CONFIG with "key must be ... (got 'value')" in err. */
int hora_cfg_key_set(const struct hora_cfg_key *k, void *base, const char *key, const char *value,
		     int line, int col, char *err, size_t errlen);
/* HORA_ERR_CONFIG with "key: why" when k (found for key) is REFUSED, else 0. */
int hora_cfg_key_refused(const struct hora_cfg_key *k, const char *key, char *err, size_t errlen);

/* Value parsers. Each returns 0, or -1 when v is not entirely a valid value
 * in range (no leading or trailing characters). */
int hora_cfg_int(const char *v, long lo, long hi, long *out);
int hora_cfg_bool(const char *v, int *out);
int hora_cfg_real(const char *v, double *out); /* finite */
/* Bytes: digits with an optional fraction and an optional suffix, one of
 * B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024, any case): "65536",
 * "64KiB", "1.5MiB". The result must be a whole number of bytes that fits
 * in 64 bits (-1 otherwise: overflow is checked, not wrapped). */
int hora_cfg_size(const char *v, uint64_t *out);
/* "64KiB", "1GiB", "0", "1000": bytes the way the size parser reads them */
void hora_cfg_size_str(uint64_t b, char *out, size_t len);
/* Copy v (key's value) into dst[cap]: 0, or HORA_ERR_CONFIG when it does
 * not fit or is empty and empty_ok is 0. */
int hora_cfg_text(char *dst, size_t cap, const char *key, const char *v, int empty_ok, char *err,
		  size_t errlen);
/* Format a message into err; returns HORA_ERR_CONFIG. */
int hora_cfg_bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
