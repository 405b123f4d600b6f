/*-------------------------------------------------------------------------
 *
 * keyprobe.h
 *		Finding the state rows of a batch's keys, in key order.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_KEYPROBE_H
#define EXACTONCE_KEYPROBE_H

#include "executor/tuptable.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

typedef struct KeyProbe KeyProbe;

/* what KeyProbeFetch found out about a key */
typedef enum KeyProbeResult
{
	KEY_FOUND,					/* its visible row is in the slot */
	KEY_ABSENT,					/* it has no visible row */
	KEY_UNSURE					/* ask the index the usual way */
} KeyProbeResult;

extern KeyProbe *KeyProbeBegin(Relation heap, Relation index, Snapshot snap);
extern KeyProbeResult KeyProbeFetch(KeyProbe *kp, Datum *keys, TupleTableSlot *slot);
extern void KeyProbeEnd(KeyProbe *kp);

#endif							/* EXACTONCE_KEYPROBE_H */
