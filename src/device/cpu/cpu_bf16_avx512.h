/* Building blocks of the CPU backend's bf16 matrix products, shared by trident's
 * GEMM (cpu_gemm_bf16_avx512.c) and the attention's per-head GEMMs
 * (cpu_attention_bf16_avx512.c); include only from files compiled with the AVX-512
 * flags.
 *
 * Both read operands in the pair layout: a 32-bit word holds two bf16 adjacent in
 * k, (X[2p], X[2p+1]). AMX tiles are configured as 8 tiles of 16 rows x 64 bytes;
 * the AVX512-BF16 strip keeps 8 rows x 32 columns of fp32 C in 16 zmm registers
 * and, per pair of k, loads 32 columns of B (two 16-word halves) and broadcasts
 * one word of A per row into VDPBF16PS. */
#ifndef TD_DEVICE_CPU_BF16_AVX512_H
#define TD_DEVICE_CPU_BF16_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TD_AMX_FN __attribute__((target("amx-tile,amx-bf16")))
/* The tile intrinsics do not tell the compiler which memory they read or write. */
#define TD_MEMORY_BARRIER() __asm__ volatile("" ::: "memory")

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} td_amx_tile_config;

/* Tiles 0-7: 16 rows of 64 bytes (16 fp32, or 32 bf16, or 16 bf16 pairs). */
TD_AMX_FN static inline void td_amx_tiles_configure(void) {
  td_amx_tile_config c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 8; i++) c.rows[i] = 16, c.colsb[i] = 64;
  TD_MEMORY_BARRIER(); /* _tile_loadconfig's asm names only the first bytes of c */
  _tile_loadconfig(&c);
}

/* One 32-bit word of A (a pair of bf16 along k), read where bf16 is stored. */
typedef int32_t __attribute__((may_alias, aligned(2))) td_bf16_pair_word;

/* c[r][h] += rows r < 8 of A times 32 columns of B over kb_count steps of 16
 * pairs of k (offsets in bf16 elements):
 *   A word (row r, pair w, step kb) at a + r a_row + w a_pair + kb a_step;
 *   B pair row (w, kb) at b + w b_pair + kb b_step, columns 0-15 there and 16-31
 *   at + b_half. */
static inline __attribute__((always_inline)) void td_dp_rows8(
    __m512 c[8][2], const uint16_t *a, int64_t a_row, int64_t a_pair, int64_t a_step,
    const uint16_t *b, int64_t b_half, int64_t b_pair, int64_t b_step, int64_t kb_count) {
  for (int64_t kb = 0; kb < kb_count; kb++) {
    const uint16_t *ak = a + kb * a_step, *bk = b + kb * b_step;
#pragma GCC unroll 4
    for (int w = 0; w < 16; w++) {
      const __m512bh v0 = (__m512bh)_mm512_loadu_si512(bk + w * b_pair);
      const __m512bh v1 = (__m512bh)_mm512_loadu_si512(bk + w * b_pair + b_half);
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) {
        const __m512bh x = (__m512bh)_mm512_set1_epi32(
            *(const td_bf16_pair_word *)(ak + r * a_row + w * a_pair));
        c[r][0] = _mm512_dpbf16_ps(c[r][0], x, v0);
        c[r][1] = _mm512_dpbf16_ps(c[r][1], x, v1);
      }
    }
  }
}

#endif
