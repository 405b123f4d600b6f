/*
 * exactonce 1.30 -> 1.31: the library only.
 *
 * Nothing in the catalog changes.  A coordinator checks what a node
 * answers before it uses it (a move's count of keys, its yes-or-no
 * questions, the header and fields of a binary COPY out), and sends a
 * producer's COPY line of the default text format without a backslash to
 * its node as it was read.  Reduce refuses a staged batch of the ledger
 * that map did not make before it reads any of it.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.31'" to load this file. \quit
