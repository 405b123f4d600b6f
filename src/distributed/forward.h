/*-------------------------------------------------------------------------
 *
 * forward.h
 *		exactonce_forward: the coordinator's foreign tables on the nodes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_FORWARD_H
#define EXACTONCE_FORWARD_H

#include "utils/rel.h"

#include "distributed/link.h"

extern Link *ForwardIngestLink(Relation rel);

#endif							/* EXACTONCE_FORWARD_H */
