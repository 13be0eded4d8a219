/* amk-sampler-private.h: picks the next token from logits on the host: temperature,
 * top-k, top-p, with a seeded GRand.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Samples a token id from the softmax of logits / temperature (temperature > 0),
 * restricted to the top_k most likely tokens (0: all) and then to the smallest set of
 * the most likely whose probability reaches top_p (1: all). Ties go to the lower id.
 * Returns -1 when no logit is finite. Deterministic for a given GRand state. */
gint32 amk_sample_token (const float *logits,
                         gsize        n_logits,
                         double       temperature,
                         guint        top_k,
                         double       top_p,
                         GRand       *rand);

/* The index of the largest finite logit (the lower one on ties), or -1. */
gint32 amk_sample_argmax (const float *logits,
                          gsize        n_logits);

G_END_DECLS
