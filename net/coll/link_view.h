/* link_view.h - a link over some ranks of another link (net/coll only):
 * rank i of the view is rank map[i] of the parent. The hierarchical
 * allreduce runs its cross-host stage on a communicator whose link is a
 * view of the ranks with the same local rank. Messages go on the parent's
 * streams, so calls on the view and on the parent must not overlap (one
 * caller thread runs one collective at a time). */
#ifndef HORA_NET_COLL_LINK_VIEW_H
#define HORA_NET_COLL_LINK_VIEW_H

#include "net/coll/link.h"

/* map: n parent ranks (copied), map[rank] the parent's own rank. The parent
 * must outlive the view; destroying the view frees only the view. NULL
 * when out of memory. */
struct hora_net_link *hora_net_link_view(struct hora_net_link *parent, int rank, int n, const int *map);

#endif
