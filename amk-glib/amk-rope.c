/* amk-rope.c: the RoPE frequencies, plain and with Llama-3 scaling (HF transformers'
 * arithmetic; see amk-rope-private.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>

#include "amk-rope-private.h"

float AMK_NO_CONTRACT
amk_rope_inv_freq (gint32 c,
                   gint32 d,
                   float  theta,
                   float  factor,
                   float  low,
                   float  high,
                   gint32 old_ctx)
{
  const float exponent = (float) (2 * c) / (float) d;
  const float base_pow = (float) pow ((double) theta, (double) exponent);
  float inv = 1.0f / base_pow;

  if (factor > 0.0f)
    {
      const float wavelen = (float) (2.0 * G_PI) / inv;
      const float low_freq_wavelen = (float) ((double) old_ctx / (double) low);
      const float high_freq_wavelen = (float) ((double) old_ctx / (double) high);

      if (wavelen > low_freq_wavelen)
        inv = inv / factor;
      else if (!(wavelen < high_freq_wavelen))
        {
          const float smooth = ((float) old_ctx / wavelen - low) / (high - low);
          const float a = (1.0f - smooth) * inv;
          const float b = a / factor;
          const float s = smooth * inv;
          inv = b + s;
        }
    }
  return inv;
}

void
amk_rope_cos_sin (gint64 pos,
                  float  inv_freq,
                  float *cs,
                  float *sn)
{
  const float angle = (float) pos * inv_freq;

  *cs = (float) cos ((double) angle);
  *sn = (float) sin ((double) angle);
}
