#pragma once

/*
 * Crash points for the test suite: with CAIRN_CRASH_AT=<name> in its
 * environment, cairnd kills itself with SIGKILL when it reaches the named
 * point, so a test can check that every step of a multi-step change (a
 * repack, a seal) is safe to cut right there. Without the variable this is
 * one comparison of a pointer with NULL.
 */

/* Reads CAIRN_CRASH_AT once, at start. */
void crash_init(void);
/* Dies here when this is the point asked for. */
void crash_point(const char *name);
