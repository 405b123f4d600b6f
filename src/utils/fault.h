/*-------------------------------------------------------------------------
 *
 * fault.h
 *		Fault injection into the three stages and the retirement of a
 *		drained queue partition.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_FAULT_H
#define EXACTONCE_FAULT_H

/* stages that faults can be injected into */
typedef enum FaultStage
{
	FAULT_STATE,
	FAULT_MAP,
	FAULT_REDUCE,
	FAULT_RETIRE,
	FAULT_STAGES
} FaultStage;

extern void FaultInit(void);
extern void FaultMaybeFail(FaultStage stage);
extern void FaultPoison(text *key);

#endif							/* EXACTONCE_FAULT_H */
