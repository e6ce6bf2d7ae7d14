/* Minimal test harness: checks count and print; tst_finish() prints
 * "N passed, N failed" and returns the exit code.
 * Random inputs are fresh each run (seed from the clock) and the seed is
 * printed; TRIDENT_TEST_SEED=<n> replays a run. */
#ifndef TD_TESTS_CHECK_H
#define TD_TESTS_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "device/device.h"
#include "model/gpt.h"

extern int tst_passed, tst_failed;

void tst_check(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define CHECK(cond, ...) tst_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

int tst_finish(void);

/* A check of one MPI rank's own (ranks of different split groups may run
 * different checks): rank 0 records it as CHECK does, other ranks print only
 * their failures to stderr. Returns ok, for the rank's own failure flag (the
 * exit code then combines every rank's). */
int tst_check_on_rank(int rank, int size, int ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Seed for this run (printed once). */
uint64_t tst_seed(void);
/* Uniform in [lo, hi) / normal(0, std), from stream `stream` of the run's seed. */
void tst_fill_uniform(float *x, int64_t n, uint64_t stream, float lo, float hi);
void tst_fill_normal(float *x, int64_t n, uint64_t stream, float std);

/* Normwise relative error max_i |got_i - ref_i| / max_i |ref_i| (double reference). */
double tst_rel_err(const float *got, const double *ref, int64_t n);
/* max_i |got_i - ref_i| / scale: for sums, whose natural scale is sum |terms|
 * (a sum that cancels to ~0 has no meaningful relative error). */
double tst_err_over(const float *got, const double *ref, int64_t n, double scale);
/* Same, with the reference given as float. */
double tst_rel_err_f(const float *got, const float *ref, int64_t n);
/* Check rel err < tol and print the measured value. */
#define CHECK_REL(what, err, tol) CHECK((err) < (tol), "%s: rel err %.3g (tol %.1g)", what, err, tol)

/* 1 in an AddressSanitizer build: its own SIGSEGV handler reports first, so
 * tests that expect a child to die of a fault skip those checks. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* The device under test, opened once: TRIDENT_TEST_DEVICE (cpu, sealed, cuda;
 * default cpu). One that is not available here (cuda without a GPU) ends the
 * test with exit 77, reported skipped. */
td_device *tst_device(void);

/* The tiny GPT the ZeRO tests train (3 layers of 16, 2 heads, MLP 40, seq 7 of 9
 * positions, a vocabulary of 37 padded to 40, no dropout), split into units. */
#define TST_TINY_SEQ 7
#define TST_TINY_VOCAB 37
td_gpt_config tst_tiny_gpt_config(void);
/* 1 when the device under test is the CPU (checks of the CPU's own machinery:
 * thread counts, GEMM library choice). */
int tst_device_is_cpu(void);
/* Device memory of bytes holding a copy of host (zeroed when host is NULL). */
void *tst_put(const void *host, size_t bytes);
/* Copy bytes of device memory back to host. */
void tst_get(void *host, const void *dev, size_t bytes);
void tst_release(void *dev);
/* The same for n floats (host NULL: zeros). */
float *tst_putf(const float *host, int64_t n);
void tst_getf(float *host, const float *dev, int64_t n);

/* Round a float buffer to bf16 in place (so a double reference sees the same inputs). */
void tst_round_bf16(float *x, int64_t n);

#endif
