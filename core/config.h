/* config.h - the train section beyond the public hora_config_* (internal). */
#ifndef HORA_CORE_CONFIG_H
#define HORA_CORE_CONFIG_H

#include <stddef.h>

struct hora_train_config;
struct hora_elastic_config;

/* hora_config_load_yaml that also counts the train keys it read (0: the
 * file has no train section). */
int hora_config_load_train(struct hora_train_config *cfg, const char *path, int *nkeys, char *err,
			   size_t errlen);

/* Only the train.elastic keys of path (checked as hora_config_load_yaml
 * checks them; every other key of the file is left alone, unread): what
 * hora_init takes from a cluster file for a program of its own. el gets
 * the defaults when the file has none. */
int hora_config_load_elastic(struct hora_elastic_config *el, const char *path, char *err, size_t errlen);

/* Keys set away from their defaults that only a job of several workers
 * reads (train.fusion.*, train.timeline, train.stall_*, train.communication).
 * Returns how many; when any, msg holds one line naming them, "train.timeline
 * applies only to distributed jobs (hora launch); this single-worker run
 * ignores it", for a single-worker run to print. */
int hora_config_single_worker_note(const struct hora_train_config *c, char *msg, size_t len);

#endif
