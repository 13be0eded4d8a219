/* amk-rope-private.h: the RoPE frequencies of the CPU executor's ROPE_KV op, shared with
 * the GGUF loader (which recognises Llama-3 rope_freqs tables by them).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The fp32 steps of the RoPE code must not be fused into FMAs (the GPU rounds every one
 * of them). */
#if defined(__GNUC__) && !defined(__clang__)
#define AMK_NO_CONTRACT __attribute__ ((optimize ("fp-contract=off")))
#else
#define AMK_NO_CONTRACT
#endif

/* inv_freq[c] of pair c of a head of d elements: theta^(-2c/d), and with factor > 0 the
 * Llama-3 scaling (low and high frequency factors, the original context old_ctx), each
 * fp32 step rounded as HF transformers' _compute_default_rope_parameters and
 * _compute_llama3_parameters round it; the GPU's amk_rope_inv_freq
 * (kernels/ops-attention.cuh) takes the very same steps. */
float amk_rope_inv_freq (gint32 c,
                         gint32 d,
                         float  theta,
                         float  factor,
                         float  low,
                         float  high,
                         gint32 old_ctx);

/* cos and sin of the angle pos * inv_freq (the product rounded to fp32, cos and sin in
 * double precision, then rounded): what the CPU executor's ROPE_KV rotates by, and what
 * the fused attention's cos/sin table holds, so that both rotate by the same values. */
void amk_rope_cos_sin (gint64 pos,
                       float  inv_freq,
                       float *cs,
                       float *sn);

G_END_DECLS
