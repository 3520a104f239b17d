/* link_tcp.h - the TCP link (link.h) of a communicator: the io_uring
 * transport for queued messages, one plain TCP socket per pair for the
 * caller-driven path (net/coll only). */
#ifndef HORA_NET_COLL_LINK_TCP_H
#define HORA_NET_COLL_LINK_TCP_H

#include "net/coll/coll.h"
#include "net/coll/link.h"

/* Connect rank cfg->rank to every other rank of cfg (defaults already
 * applied by hora_net_comm_create): listen on its address, connect to the
 * lower ranks and accept the higher ones on the transport, exchange hellos
 * (a rank created with another size is named: "rank 1 was created with size
 * 3, this rank with size 4"), then the small-message sockets. cfg is read
 * only during the call. Returns 0 with *out (free with ops->destroy) or
 * -errno with the reason in err. */
int hora_net_link_tcp_create(const struct hora_net_comm_cfg *cfg, struct hora_net_link **out, char *err,
			     size_t errlen);

#endif
