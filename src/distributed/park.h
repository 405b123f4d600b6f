/*-------------------------------------------------------------------------
 *
 * park.h
 *		Where a node keeps the events of a range of keys while it moves away.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_PARK_H
#define EXACTONCE_PARK_H

#include "access/htup.h"
#include "utils/relcache.h"

#include "exactonce.h"

extern char *ParkName(int32 modulus, int32 remainder);
extern Oid	ParkTable(Oid nspid, int32 modulus, int32 remainder);
extern void ParkCreate(Pipeline *p, int32 modulus, int32 remainder);
extern bool ParkRow(Relation queue, HeapTuple row, int32 modulus, int32 remainder);
extern int64 ParkReturn(Pipeline *p, int32 modulus, int32 remainder);
extern int64 ParkCount(Oid nspid);

#endif							/* EXACTONCE_PARK_H */
