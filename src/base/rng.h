/* Counter-based RNG: Philox4x32-10 (Salmon et al., SC'11; Random123).
 * A value is a pure function of (seed, stream, element index), so initialisation
 * and dropout give the same numbers whatever the thread count or the order of
 * evaluation, and any slice of a tensor can be drawn on its own (init on the
 * global shape, then slice: DESIGN.md).
 *
 * Element i of stream s under seed: block j = i / 4 is the Philox output for
 * counter {j_lo, j_hi, s_lo, s_hi} and key {seed_lo, seed_hi}; element i uses
 * word i % 4 of its block (for normals: Box-Muller on words (0,1) and (2,3)). */
#ifndef TD_BASE_RNG_H
#define TD_BASE_RNG_H

#include <stdint.h>

#include "base/hostdev.h"

/* Philox4x32-10 of counter ctr under key (base/hostdev.h's, shared with the GPU kernels). */
void td_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* 32 random bits for element i of stream s. */
uint32_t td_rng_u32(uint64_t seed, uint64_t stream, uint64_t i);
/* Uniform in (0, 1]: (bits >> 8) * 2^-24 + 2^-25 in fp32 (never 0; 1 for the top
 * 2^8 bit patterns: hostdev.h). */
static inline float td_rng_bits_to_unit(uint32_t bits) { return td_hd_bits_to_unit(bits); }

/* out[k] = value of element (offset + k) of the stream, k < n. OpenMP-parallel;
 * the result does not depend on the number of threads. */
void td_rng_fill_uniform(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset);
void td_rng_fill_normal(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset,
                        float mean, float std);

#endif
