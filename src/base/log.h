/* Logging to stderr with a level; the Megatron-style training log goes to stdout
 * through printf in train/, this is for everything else. */
#ifndef TD_BASE_LOG_H
#define TD_BASE_LOG_H

typedef enum { TD_LOG_DEBUG = 0, TD_LOG_INFO = 1, TD_LOG_WARN = 2 } td_log_level;

void td_log_set_level(td_log_level level);
void td_log(td_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define td_info(...) td_log(TD_LOG_INFO, __VA_ARGS__)
#define td_warn(...) td_log(TD_LOG_WARN, __VA_ARGS__)
#define td_debug(...) td_log(TD_LOG_DEBUG, __VA_ARGS__)

#endif
