/*
 * exactonce 1.23 -> 1.24: the library only.
 *
 * Nothing in the catalog changes.  Map hashes a batch's numbers as the
 * same canonical text as before, written from their stored digits, and
 * adds the leaf cells' sums as scaled integers while they fit; tokens and
 * sums are those of 1.23.
 */

\echo Use "ALTER EXTENSION exactonce UPDATE TO '1.24'" to load this file. \quit
