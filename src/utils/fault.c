/*-------------------------------------------------------------------------
 *
 * fault.c
 *		Fault injection: make a stage fail at random, as the resilience test
 *		of the source material does, to prove that retries stay exact.
 *
 * The settings are PGC_SUSET: only a superuser can set them, for a session
 * or in postgresql.conf.  An injected failure is an ordinary ERROR with its
 * own SQLSTATE (EO001), raised after the stage did its work and before that
 * work commits, so everything it did is rolled back and retried.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/pg_prng.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "exactonce.h"
#include "utils/fault.h"
#include "utils/shmem.h"

PG_FUNCTION_INFO_V1(exactonce_faults_injected);

StaticAssertDecl(FAULT_STAGES <= SHMEM_FAULT_COUNTERS, "a shared counter per stage");

static const char *const stage_names[FAULT_STAGES] = {"state", "map", "reduce", "retire"};

/* exactonce.fault_<stage>: the failure probability of each stage */
static double fault_probability[FAULT_STAGES];
static char *exactonce_fault_poison_key = NULL;

/*
 * DefineFaultSetting registers the failure probability of one stage.  The
 * GUC machinery keeps the description without copying it: it lives in
 * TopMemoryContext, not in whatever context loaded the library.
 */
static void
DefineFaultSetting(const char *stage, double *var)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	char	   *name = psprintf("exactonce.fault_%s", stage);
	char	   *desc = psprintf("Probability that the %s stage fails on purpose.", stage);

	MemoryContextSwitchTo(old);
	DefineCustomRealVariable(name,
							 desc,
							 "For resilience tests only; 0 disables it.",
							 var,
							 0.0, 0.0, 1.0,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
}

/*
 * FaultInit registers the fault injection settings.
 */
void
FaultInit(void)
{
	for (int i = 0; i < FAULT_STAGES; i++)
		DefineFaultSetting(stage_names[i], &fault_probability[i]);
	DefineCustomStringVariable("exactonce.fault_poison_key",
							   "Key whose events make the state stage fail, every time.",
							   "For tests of poison-event isolation only; empty disables it.",
							   &exactonce_fault_poison_key,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, NULL, NULL);
}

/*
 * FaultPoison fails, as bad data would, if an event carries the poison key.
 */
void
FaultPoison(text *key)
{
	size_t		len;

	if (exactonce_fault_poison_key == NULL || exactonce_fault_poison_key[0] == '\0')
		return;
	len = strlen(exactonce_fault_poison_key);
	if (VARSIZE_ANY_EXHDR(key) == len &&
		memcmp(VARDATA_ANY(key), exactonce_fault_poison_key, len) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("injected poison event with key \"%s\"", exactonce_fault_poison_key)));
}

/*
 * FaultMaybeFail raises an injected failure in stage with the probability
 * exactonce.fault_<stage> says, and counts it.
 */
void
FaultMaybeFail(FaultStage stage)
{
	double		probability = fault_probability[stage];

	Assert(stage >= 0 && stage < FAULT_STAGES);
	if (probability <= 0.0)
		return;
	if (pg_prng_double(&pg_global_prng_state) >= probability)
		return;
	if (exactonce_shared != NULL)
		pg_atomic_fetch_add_u64(&exactonce_shared->faults[stage], 1);
	ereport(ERROR,
			(errcode(ERRCODE_EXACTONCE_INJECTED_FAULT),
			 errmsg("injected failure in %s stage", stage_names[stage]),
			 errdetail("exactonce.fault_%s is %g.", stage_names[stage], probability)));
}

/*
 * exactonce_faults_injected returns how many failures each stage has had
 * injected since the server started (NULL without shared_preload_libraries).
 */
Datum
exactonce_faults_injected(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < FAULT_STAGES; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, exactonce_shared == NULL};

		values[0] = CStringGetTextDatum(stage_names[i]);
		values[1] = exactonce_shared ? Int64GetDatum((int64) pg_atomic_read_u64(&exactonce_shared->faults[i])) : (Datum) 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
