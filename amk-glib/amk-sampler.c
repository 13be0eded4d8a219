/* amk-sampler.c: the host side of sampling. The decode step leaves the logits in an
 * OUTPUT buffer; the generator downloads them and picks the next token here, then
 * uploads it where the next step's EMBED reads it.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "amk-sampler-private.h"

typedef struct {
  float  logit;
  gint32 id;
  double p;      /* exp ((logit - max) / temperature), once known */
} Candidate;

/* Whether a ranks before b: the larger logit, on ties the lower id (a total order, so
 * that qsort, which is not stable, still gives one answer). */
static inline gboolean
ranks_before (const Candidate *a,
              const Candidate *b)
{
  return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int
compare_candidates (const void *pa,
                    const void *pb)
{
  const Candidate *a = pa;
  const Candidate *b = pb;

  if (ranks_before (a, b))
    return -1;
  if (ranks_before (b, a))
    return 1;
  return 0;
}

/* Restores the heap below i: every node ranks after its children (the root is the
 * worst of the heap). */
static void
sift_down (Candidate *heap,
           gsize      n,
           gsize      i)
{
  for (;;)
    {
      gsize worst = i;
      gsize left = 2 * i + 1;
      gsize right = left + 1;
      Candidate tmp;

      if (left < n && ranks_before (&heap[worst], &heap[left]))
        worst = left;
      if (right < n && ranks_before (&heap[worst], &heap[right]))
        worst = right;
      if (worst == i)
        return;
      tmp = heap[i];
      heap[i] = heap[worst];
      heap[worst] = tmp;
      i = worst;
    }
}

/* Moves the k best of c[0..n) to c[0..k), in rank order: O(n log k). */
static void
select_top_k (Candidate *c,
              gsize      n,
              gsize      k)
{
  for (gsize i = k / 2; i-- > 0;)
    sift_down (c, k, i);
  for (gsize i = k; i < n; i++)
    if (ranks_before (&c[i], &c[0]))
      {
        c[0] = c[i];
        sift_down (c, k, 0);
      }
  qsort (c, k, sizeof *c, compare_candidates);
}

gint32
amk_sample_token (const float *logits,
                  gsize        n_logits,
                  double       temperature,
                  guint        top_k,
                  double       top_p,
                  GRand       *rand)
{
  g_autofree Candidate *c = NULL;
  gboolean sorted = FALSE;
  double max, total = 0.0, r, acc = 0.0;
  gsize n = 0;

  g_return_val_if_fail (logits != NULL || n_logits == 0, -1);
  g_return_val_if_fail (temperature > 0.0, -1);
  g_return_val_if_fail (top_p > 0.0 && top_p <= 1.0, -1);
  g_return_val_if_fail (rand != NULL, -1);

  c = g_new (Candidate, MAX (n_logits, 1));
  for (gsize i = 0; i < n_logits; i++)
    if (isfinite (logits[i]))
      {
        c[n].logit = logits[i];
        c[n].id = (gint32) i;
        n++;
      }
  if (n == 0)
    return -1;

  if (top_k > 0 && top_k < n)
    {
      select_top_k (c, n, top_k);
      n = top_k;
      sorted = TRUE;
    }

  max = c[0].logit;
  if (!sorted)
    for (gsize i = 1; i < n; i++)
      max = MAX (max, c[i].logit);
  for (gsize i = 0; i < n; i++)
    {
      c[i].p = exp (((double) c[i].logit - max) / temperature);
      total += c[i].p;
    }

  if (top_p < 1.0)
    {
      /* the nucleus: the most likely tokens until their mass reaches top_p */
      double threshold = top_p * total;

      if (!sorted)
        {
          /* Sorted, a token j with p_j <= (1 - top_p) total / n cannot be in the
           * nucleus: the tokens after it weigh at most n p_j, so those before it
           * already reach the threshold. Sort only the others. */
          double bound = (1.0 - top_p) * total / (double) n;
          gsize kept = 0;

          for (gsize i = 0; i < n; i++)
            if (c[i].p > bound)
              c[kept++] = c[i];
          n = kept;
          qsort (c, n, sizeof *c, compare_candidates);
        }
      for (gsize i = 0; i < n; i++)
        {
          acc += c[i].p;
          if (acc >= threshold)
            {
              n = i + 1;
              break;
            }
        }
      total = acc;
      acc = 0.0;
    }

  r = g_rand_double (rand) * total;
  for (gsize i = 0; i < n; i++)
    {
      acc += c[i].p;
      if (r < acc)
        return c[i].id;
    }
  return c[n - 1].id;
}

gint32
amk_sample_argmax (const float *logits,
                   gsize        n_logits)
{
  gint32 best = -1;

  g_return_val_if_fail (logits != NULL || n_logits == 0, -1);

  for (gsize i = 0; i < n_logits; i++)
    if (isfinite (logits[i]) && (best < 0 || logits[i] > logits[best]))
      best = (gint32) i;
  return best;
}
