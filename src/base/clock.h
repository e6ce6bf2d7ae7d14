/* Wall-clock time for measurements: seconds on CLOCK_MONOTONIC (never jumps with
 * the system clock), as a double. */
#ifndef TD_BASE_CLOCK_H
#define TD_BASE_CLOCK_H

double td_now_seconds(void);

#endif
