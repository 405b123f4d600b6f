/*-------------------------------------------------------------------------
 *
 * route.h
 *		A producer's COPY into a coordinator's ingest, routed line by line
 *		by its key, without parsing the rest.
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXACTONCE_ROUTE_H
#define EXACTONCE_ROUTE_H

extern void RouteInit(void);

#endif							/* EXACTONCE_ROUTE_H */
