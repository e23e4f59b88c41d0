/* A monotonic clock for timing what the code does (steps, checkpoint writes,
 * evaluations). It never jumps with NTP or the wall clock, so a duration is
 * never negative; it is not a time of day and means nothing across processes
 * or machines. Seconds as a double: nanosecond resolution for about a century
 * of uptime, and no MPI needed (MPI_Wtime ties the caller to MPI headers).
 */
#ifndef CT_CORE_CLOCK_H
#define CT_CORE_CLOCK_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double ct_now_s(void);

#endif
