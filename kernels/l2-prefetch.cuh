/* l2-prefetch.cuh: streams an instruction's weights from HBM into L2 before the
 * instruction runs (amk_device_program.l2_prefetch).
 *
 * A decode step is a chain of short stages; between two stages every SM waits for a
 * counter, and during that wait nothing reads memory unless someone asked for it
 * earlier. The bulk prefetch (cp.async.bulk.prefetch.L2, sm_90) asks for a whole
 * contiguous range with one instruction, takes no registers or shared memory and cannot
 * change a result: L2 is the point of coherence, so prefetching a buffer another block
 * is still writing is only wasted bandwidth, never a stale read. Only MATVEC's W tile is
 * prefetched: it is nearly all of a decode step's bytes, and its range is known from the
 * instruction alone (ATTN_DECODE's range depends on the position, a device value).
 *
 * The range comes from an untrusted instruction, so it is checked against the buffer
 * table first, like every other access: a bad reference is simply not prefetched (the
 * instruction's own check reports it when it runs).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_L2_PREFETCH_CUH
#define AMK_L2_PREFETCH_CUH

#include <stdint.h>

#include "amk-abi.h"
#include "ops-utility.cuh"
#include "quant-blocks.cuh"

/* One warp: lane l prefetches the l-th of 32 slices of [p, p + bytes) (16-byte
 * granules; p 16-byte aligned). */
static __device__ __forceinline__ void
amk_l2_prefetch_range (const unsigned char *p, uint64_t bytes, int lane)
{
  const uint64_t granules = bytes / 16;
  const uint64_t per = (granules + 31) / 32;
  const uint64_t first = per * (uint64_t) lane;

  if (first >= granules)
    return;
  const uint64_t n = min (per, granules - first);
  /* the size operand is 32 bits: split absurdly large slices */
#pragma unroll 1
  for (uint64_t done = 0; done < n; done += (1u << 26))
    {
      const uint32_t chunk = (uint32_t) min (n - done, (uint64_t) (1u << 26)) * 16u;
      asm volatile ("cp.async.bulk.prefetch.L2.global [%0], %1;"
                    : : "l"(p + (first + done) * 16), "r"(chunk) : "memory");
    }
}

/* One warp: the W tile of a MATVEC instruction (rows r0 .. r0 + n of a K-column W). */
static __device__ __forceinline__ void
amk_l2_prefetch_instruction (const amk_device_program &prog, const amk_instruction_t *ins,
                             int lane)
{
  if (ins->opcode != AMK_ABI_OP_MATVEC)
    return;
  const int32_t ref = ins->buffers[1];
  const amk_matvec_params_t &p = ins->params.matvec;
  const int32_t r0 = p.row0, n = p.rows, k = p.k;
  if (ref < 0 || ref >= prog.n_buffers || r0 < 0 || n <= 0 || k <= 0)
    return;
  const amk_buffer_t b = prog.buffers[ref];
  const uint32_t es = b.dtype < 32 ? amk_dtype_size (b.dtype) : 0;
  const uint32_t qv = amk_qb_values (b.dtype);
  /* a block type's rows are whole blocks; the tile's bytes rounded in to 16-byte chunks */
  const uint64_t row = qv != 0 ? (k % qv == 0 ? (uint64_t) (k / qv) * amk_qb_bytes (b.dtype) : 0)
                               : (uint64_t) k * es;
  /* compared in rows, so nothing overflows */
  if (row == 0 || (qv == 0 && row % 16 != 0) || b.addr % 16 != 0 ||
      (uint64_t) r0 + (uint64_t) n > b.size_bytes / row)
    return;
  const uint64_t first = (b.addr + (uint64_t) r0 * row + 15) & ~15ull;
  const uint64_t end = (b.addr + ((uint64_t) r0 + (uint64_t) n) * row) & ~15ull;
  if (end > first)
    amk_l2_prefetch_range (reinterpret_cast<const unsigned char *> (first), end - first, lane);
}

#endif /* AMK_L2_PREFETCH_CUH */
