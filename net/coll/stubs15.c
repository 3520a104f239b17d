#include "net/coll/link_shm.h"
#include "net/coll/stage_shm.h"
#include <errno.h>
#include <stdio.h>
int hora_net_stage_shm_create(const struct hora_net_stage_shm_cfg *cfg, struct hora_net_stage **out, char *err, size_t errlen)
{ (void)cfg; *out = NULL; snprintf(err, errlen, "stub"); return -ENOSYS; }
