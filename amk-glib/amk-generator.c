/* amk-generator.c: AmkGenerator, a generation session on a model: the KV cache (the
 * program's STATE buffers, in its executor), the position, the
 * prompt's prefill, greedy decoding with the token kept on the device, or sampling on
 * the host, stops, and a signal per token.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-generator.h"
#include "amk-cpu-executor.h"
#include "amk-launcher.h"
#include "amk-model-private.h"
#include "amk-sampler-private.h"
#include "amk-tokenizer-stream-private.h"

/**
 * AmkGenerator:
 *
 * Generates text with an [class@Amk.Model]: a session that keeps the model's KV cache
 * between calls.
 *
 * Each generated token is one run of the model's decode step on the generator's
 * [iface@Amk.Executor]: an [class@Amk.Launcher] on a GPU, or the [class@Amk.CpuExecutor]
 * the generator makes when it is given none (it holds its own copy of the weights). The
 * KV cache and the position live with the
 * generator, so a second [method@Amk.Generator.generate] continues where the first
 * ended (a conversation); [method@Amk.Generator.reset] starts over.
 *
 * [method@Amk.Generator.generate] feeds the prompt in: every token but the last through
 * the model's prefill chunk, [property@Amk.Model:prefill-chunk] tokens per launch, on a
 * second executor of the same kind (the same device) that shares the decode step's
 * weights and KV cache ([method@Amk.Executor.load_shared]), emitting
 * [signal@Amk.Generator::prefill-progress] after each launch; then the last token
 * through the decode step, whose logits give the first generated token (on the CPU
 * executor, whose MATMULs skip a chunk's padding rows, the last chunk takes the last
 * token too and computes its logits for that row alone). (A model
 * loaded with a prefill chunk of 1, or an executor of a kind the generator cannot make
 * a second of, feeds every prompt token through the decode step.) Then it chooses each
 * next token from the last step's logits:
 *
 * - greedy (a [property@Amk.Generator:temperature] of 0, the default): the step's
 *   ARGMAX writes the token where the next step's EMBED reads it, so the token stays
 *   on the device; only its id (4 bytes) is read back, to stream and check the stops;
 * - sampling (a positive temperature): the logits are read back and the token is drawn
 *   on the host from their softmax at that temperature, cut to the
 *   [property@Amk.Generator:top-k] most likely tokens and then to the
 *   [property@Amk.Generator:top-p] probability mass, with a generator seeded from
 *   [property@Amk.Generator:seed]: the same seed after [method@Amk.Generator.reset]
 *   gives the same tokens. The token is then uploaded for the next step.
 *
 * Either way only ids that the tokenizer has a piece for are produced, as in
 * transformers: where the model's vocabulary is padded beyond the tokenizer's (its
 * embedding rounded up to a multiple of 64, say), the padding ids are never chosen.
 *
 * Generation stops at the tokenizer's end-of-sequence token, a token added with
 * [method@Amk.Generator.add_stop_token], a text added with
 * [method@Amk.Generator.add_stop_string], after the most tokens asked for, or when the
 * KV cache is full. The [signal@Amk.Generator::token] signal streams every generated
 * token with its text.
 *
 * A generator runs one generation at a time; [method@Amk.Generator.generate_async]
 * runs it in a worker thread. A failed or cancelled call leaves the generator as it was
 * before the call. What a generation is asked that it cannot do fails in the
 * %AMK_GENERATOR_ERROR domain.
 */

struct _AmkGenerator
{
  GObject parent_instance;

  AmkModel       *model;
  AmkExecutor    *executor;      /* given, or a CPU executor made at construction */
  AmkExecutor    *prefill_executor;  /* one like it for the prefill chunk, or NULL */

  gdouble         temperature;
  guint           top_k;
  gdouble         top_p;
  guint64         seed;
  guint           max_tokens;
  GArray         *stop_tokens;   /* gint32 */
  GPtrArray      *stop_strings;  /* char * */

  /* the session */
  guint           position;      /* KV cache rows in use */
  gint32          pending;       /* generated but not fed to the model yet, or -1 */
  GRand          *rand;
  guint           epoch;         /* bumped by reset: a run of an older epoch is dropped */
  guint           rand_epoch;    /* bumped when the seed changes */
  gboolean        busy;

  /* the last successful call */
  GArray         *tokens;        /* gint32 */
  guint           prompt_tokens;
  gdouble         prefill_tokens_per_second;
  gdouble         tokens_per_second;
  gdouble         time_to_first_token;
};

enum {
  PROP_0,
  PROP_MODEL,
  PROP_EXECUTOR,
  PROP_TEMPERATURE,
  PROP_TOP_K,
  PROP_TOP_P,
  PROP_SEED,
  PROP_MAX_TOKENS,
  PROP_POSITION,
  PROP_PROMPT_TOKENS,
  PROP_GENERATED_TOKENS,
  PROP_PREFILL_TOKENS_PER_SECOND,
  PROP_TOKENS_PER_SECOND,
  PROP_TIME_TO_FIRST_TOKEN,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

enum {
  SIGNAL_TOKEN,
  SIGNAL_PREFILL_PROGRESS,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

G_DEFINE_FINAL_TYPE (AmkGenerator, amk_generator, G_TYPE_OBJECT)

G_DEFINE_QUARK (amk-generator-error-quark, amk_generator_error)

static GRand *
new_rand (guint64 seed)
{
  guint32 words[2] = { (guint32) seed, (guint32) (seed >> 32) };

  return g_rand_new_with_seed_array (words, G_N_ELEMENTS (words));
}

static void
amk_generator_finalize (GObject *object)
{
  AmkGenerator *self = AMK_GENERATOR (object);

  g_clear_object (&self->prefill_executor);
  g_clear_object (&self->executor);
  g_clear_object (&self->model);
  g_clear_pointer (&self->stop_tokens, g_array_unref);
  g_clear_pointer (&self->stop_strings, g_ptr_array_unref);
  g_clear_pointer (&self->rand, g_rand_free);
  g_clear_pointer (&self->tokens, g_array_unref);

  G_OBJECT_CLASS (amk_generator_parent_class)->finalize (object);
}

static void
amk_generator_get_property (GObject    *object,
                            guint       prop_id,
                            GValue     *value,
                            GParamSpec *pspec)
{
  AmkGenerator *self = AMK_GENERATOR (object);

  switch (prop_id)
    {
    case PROP_MODEL:
      g_value_set_object (value, self->model);
      break;
    case PROP_EXECUTOR:
      g_value_set_object (value, self->executor);
      break;
    case PROP_TEMPERATURE:
      g_value_set_double (value, self->temperature);
      break;
    case PROP_TOP_K:
      g_value_set_uint (value, self->top_k);
      break;
    case PROP_TOP_P:
      g_value_set_double (value, self->top_p);
      break;
    case PROP_SEED:
      g_value_set_uint64 (value, self->seed);
      break;
    case PROP_MAX_TOKENS:
      g_value_set_uint (value, self->max_tokens);
      break;
    case PROP_POSITION:
      g_value_set_uint (value, self->position);
      break;
    case PROP_PROMPT_TOKENS:
      g_value_set_uint (value, self->prompt_tokens);
      break;
    case PROP_GENERATED_TOKENS:
      g_value_set_uint (value, self->tokens->len);
      break;
    case PROP_PREFILL_TOKENS_PER_SECOND:
      g_value_set_double (value, self->prefill_tokens_per_second);
      break;
    case PROP_TOKENS_PER_SECOND:
      g_value_set_double (value, self->tokens_per_second);
      break;
    case PROP_TIME_TO_FIRST_TOKEN:
      g_value_set_double (value, self->time_to_first_token);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_generator_set_property (GObject      *object,
                            guint         prop_id,
                            const GValue *value,
                            GParamSpec   *pspec)
{
  AmkGenerator *self = AMK_GENERATOR (object);

  switch (prop_id)
    {
    case PROP_MODEL:
      g_set_object (&self->model, g_value_get_object (value));
      break;
    case PROP_EXECUTOR:
      g_set_object (&self->executor, g_value_get_object (value));
      break;
    case PROP_TEMPERATURE:
      amk_generator_set_temperature (self, g_value_get_double (value));
      break;
    case PROP_TOP_K:
      amk_generator_set_top_k (self, g_value_get_uint (value));
      break;
    case PROP_TOP_P:
      amk_generator_set_top_p (self, g_value_get_double (value));
      break;
    case PROP_SEED:
      amk_generator_set_seed (self, g_value_get_uint64 (value));
      break;
    case PROP_MAX_TOKENS:
      amk_generator_set_max_tokens (self, g_value_get_uint (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_generator_constructed (GObject *object)
{
  AmkGenerator *self = AMK_GENERATOR (object);

  G_OBJECT_CLASS (amk_generator_parent_class)->constructed (object);

  if (self->executor == NULL)
    self->executor = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
}

static void
amk_generator_class_init (AmkGeneratorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = amk_generator_finalize;
  object_class->constructed = amk_generator_constructed;
  object_class->get_property = amk_generator_get_property;
  object_class->set_property = amk_generator_set_property;

  /**
   * AmkGenerator:model:
   *
   * The model that generates. A model that is not loaded yet is loaded (initialised)
   * by the first call that needs it, for the generator's executor: its default
   * [property@Amk.Model:n-queues] is the executor's
   * [method@Amk.Executor.get_preferred_queues].
   */
  properties[PROP_MODEL] =
    g_param_spec_object ("model", NULL, NULL, AMK_TYPE_MODEL,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:executor:
   *
   * What runs the decode step: an [class@Amk.Launcher] on a GPU or an
   * [class@Amk.CpuExecutor]; given as %NULL, the generator makes a CPU executor. The
   * generator loads the model's program on it (an executor runs one program at a time:
   * if something else is loaded on it between two calls, the generator loads its
   * program again and starts over at position 0). For the model's prefill chunk the
   * generator makes a second executor of the same kind (a launcher on the same device)
   * that uses this one's weights and KV cache ([method@Amk.Executor.load_shared]).
   */
  properties[PROP_EXECUTOR] =
    g_param_spec_object ("executor", NULL, NULL, AMK_TYPE_EXECUTOR,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:temperature:
   *
   * 0 for greedy decoding (the default), else the softmax temperature of sampling:
   * below 1 sharper, above 1 flatter. A negative or non-finite value makes the next
   * generation fail with %AMK_GENERATOR_ERROR_INVALID_TEMPERATURE (set through the
   * property, a NaN or an infinity is refused by GObject with a warning instead).
   */
  properties[PROP_TEMPERATURE] =
    g_param_spec_double ("temperature", NULL, NULL, -G_MAXDOUBLE, G_MAXDOUBLE, 0.0,
                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:top-k:
   *
   * When sampling, draw from the @top-k most likely tokens only; 0 (the default) keeps
   * every token.
   */
  properties[PROP_TOP_K] =
    g_param_spec_uint ("top-k", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:top-p:
   *
   * When sampling, draw from the smallest set of the most likely tokens whose
   * probabilities add up to at least @top-p (nucleus sampling); 1 (the default) keeps
   * every token. A value outside (0, 1] makes the next generation fail with
   * %AMK_GENERATOR_ERROR_INVALID_TOP_P.
   */
  properties[PROP_TOP_P] =
    g_param_spec_double ("top-p", NULL, NULL, -G_MAXDOUBLE, G_MAXDOUBLE, 1.0,
                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:seed:
   *
   * The seed of the sampling's random numbers. Setting it (and
   * [method@Amk.Generator.reset]) restarts the random sequence, so the same seed, model
   * and prompts give the same tokens.
   */
  properties[PROP_SEED] =
    g_param_spec_uint64 ("seed", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:max-tokens:
   *
   * The most tokens a generation makes when its call passes 0 for the count; at least
   * 1 (GObject refuses 0 with a warning).
   */
  properties[PROP_MAX_TOKENS] =
    g_param_spec_uint ("max-tokens", NULL, NULL, 1, G_MAXUINT, 128,
                       G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:position:
   *
   * The positions of the KV cache in use: the tokens the model has seen since the
   * generator was made or reset.
   */
  properties[PROP_POSITION] =
    g_param_spec_uint ("position", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:prompt-tokens:
   *
   * The tokens the last successful generation fed in before generating: the prompt's,
   * and the last token of the call before, which the model had not seen yet.
   */
  properties[PROP_PROMPT_TOKENS] =
    g_param_spec_uint ("prompt-tokens", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:generated-tokens:
   *
   * The tokens the last successful call generated (stop tokens not counted); see
   * [method@Amk.Generator.get_tokens].
   */
  properties[PROP_GENERATED_TOKENS] =
    g_param_spec_uint ("generated-tokens", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:prefill-tokens-per-second:
   *
   * The prefill speed of the last successful call: the tokens it fed in before
   * generating ([property@Amk.Generator:prompt-tokens]) per second of wall-clock time
   * from the first of their launches to the end of the last: the prefill chunks (see
   * [property@Amk.Model:prefill-chunk]), then the decode step of the prompt's last
   * token, which computes the first generated token (on the CPU executor the last chunk
   * computes it).
   */
  properties[PROP_PREFILL_TOKENS_PER_SECOND] =
    g_param_spec_double ("prefill-tokens-per-second", NULL, NULL, 0.0, G_MAXDOUBLE, 0.0,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:tokens-per-second:
   *
   * The generation speed of the last successful call, the prefill left out: the decode
   * steps after the prompt's (one launch each, computing one token from the token
   * before) per second of wall-clock time from the end of the prefill to the end of the
   * call, choosing, decoding and emitting the tokens included. The inverse is the time
   * per generated token. 0 when the call ran no step after the prompt's (it generated
   * one token, or none). The prefill's speed is
   * [property@Amk.Generator:prefill-tokens-per-second].
   */
  properties[PROP_TOKENS_PER_SECOND] =
    g_param_spec_double ("tokens-per-second", NULL, NULL, 0.0, G_MAXDOUBLE, 0.0,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkGenerator:time-to-first-token:
   *
   * The seconds the last successful generation took from its start to its first
   * generated token (known on the host, before [signal@Amk.Generator::token] is
   * emitted): the prompt's encoding and its prefill. Loading the model, and its
   * programs on the executor, is left out. 0 before the first generation.
   */
  properties[PROP_TIME_TO_FIRST_TOKEN] =
    g_param_spec_double ("time-to-first-token", NULL, NULL, 0.0, G_MAXDOUBLE, 0.0,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);

  /**
   * AmkGenerator::token:
   * @self: the generator
   * @token_id: the token's id
   * @piece: the text the token adds: empty while the token ends inside a multi-byte
   *   character, whose bytes then come with a later token's piece
   *
   * Emitted for every generated token, as soon as it is known (stop tokens are not
   * emitted). [method@Amk.Generator.generate] emits it in the calling thread;
   * [method@Amk.Generator.generate_async] in the thread-default main context of the
   * thread that called it, in order, and all before its callback runs.
   */
  signals[SIGNAL_TOKEN] =
    g_signal_new ("token", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                  NULL, NULL, NULL, G_TYPE_NONE, 2, G_TYPE_INT, G_TYPE_STRING);

  /**
   * AmkGenerator::prefill-progress:
   * @self: the generator
   * @fed: the prompt tokens fed in so far by this call
   * @total: the prompt tokens this call feeds in
   *
   * Emitted after each launch of the prefill chunk (see
   * [property@Amk.Model:prefill-chunk]), to show the progress of a long prompt; the
   * cancellable of the call is checked before the next one. Where the prompt's last
   * token goes through the decode step (on a GPU), @fed stops one short of the total;
   * where the chunk also computes that token's logits (on the CPU executor), it reaches
   * the total. The first [signal@Amk.Generator::token] follows. In the same thread as
   * [signal@Amk.Generator::token].
   */
  signals[SIGNAL_PREFILL_PROGRESS] =
    g_signal_new ("prefill-progress", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                  NULL, NULL, NULL, G_TYPE_NONE, 2, G_TYPE_UINT, G_TYPE_UINT);
}

static void
amk_generator_init (AmkGenerator *self)
{
  self->top_p = 1.0;
  self->max_tokens = 128;
  self->pending = -1;
  self->rand = new_rand (0);
  self->stop_tokens = g_array_new (FALSE, FALSE, sizeof (gint32));
  self->stop_strings = g_ptr_array_new_with_free_func (g_free);
  self->tokens = g_array_new (FALSE, FALSE, sizeof (gint32));
}

/**
 * amk_generator_new:
 * @model: a model
 * @executor: (nullable): what runs the model: an [class@Amk.Launcher] for a GPU, or
 *   %NULL for a new [class@Amk.CpuExecutor]
 *
 * Makes a generator for @model. Nothing is loaded before the first call that needs
 * it: [method@Amk.Generator.prefill] or [method@Amk.Generator.generate].
 *
 * Returns: (transfer full): a new generator
 */
AmkGenerator *
amk_generator_new (AmkModel    *model,
                   AmkExecutor *executor)
{
  g_return_val_if_fail (AMK_IS_MODEL (model), NULL);
  g_return_val_if_fail (executor == NULL || AMK_IS_EXECUTOR (executor), NULL);

  return g_object_new (AMK_TYPE_GENERATOR, "model", model, "executor", executor, NULL);
}

/* ---- properties ------------------------------------------------------------------- */

/**
 * amk_generator_get_model:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:model].
 *
 * Returns: (transfer none): the model
 */
AmkModel *
amk_generator_get_model (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), NULL);

  return self->model;
}

/**
 * amk_generator_get_executor:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:executor].
 *
 * Returns: (transfer none): the executor that runs the model
 */
AmkExecutor *
amk_generator_get_executor (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), NULL);

  return self->executor;
}

/**
 * amk_generator_get_temperature:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:temperature].
 *
 * Returns: the temperature; 0 means greedy
 */
gdouble
amk_generator_get_temperature (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0.0);

  return self->temperature;
}

/**
 * amk_generator_set_temperature:
 * @self: a generator
 * @temperature: 0 for greedy decoding, or a positive temperature
 *
 * Sets [property@Amk.Generator:temperature]. It is checked when a generation starts.
 */
void
amk_generator_set_temperature (AmkGenerator *self,
                               gdouble       temperature)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));

  if (self->temperature == temperature)
    return;
  self->temperature = temperature;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_TEMPERATURE]);
}

/**
 * amk_generator_get_top_k:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:top-k].
 *
 * Returns: the number of tokens sampling draws from; 0 means all
 */
guint
amk_generator_get_top_k (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0);

  return self->top_k;
}

/**
 * amk_generator_set_top_k:
 * @self: a generator
 * @top_k: how many of the most likely tokens sampling draws from; 0 for all
 *
 * Sets [property@Amk.Generator:top-k].
 */
void
amk_generator_set_top_k (AmkGenerator *self,
                         guint         top_k)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));

  if (self->top_k == top_k)
    return;
  self->top_k = top_k;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_TOP_K]);
}

/**
 * amk_generator_get_top_p:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:top-p].
 *
 * Returns: the probability mass sampling draws from
 */
gdouble
amk_generator_get_top_p (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 1.0);

  return self->top_p;
}

/**
 * amk_generator_set_top_p:
 * @self: a generator
 * @top_p: the probability mass, above 0 and at most 1, that sampling draws from
 *
 * Sets [property@Amk.Generator:top-p]. It is checked when a generation starts.
 */
void
amk_generator_set_top_p (AmkGenerator *self,
                         gdouble       top_p)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));

  if (self->top_p == top_p)
    return;
  self->top_p = top_p;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_TOP_P]);
}

/**
 * amk_generator_get_seed:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:seed].
 *
 * Returns: the seed
 */
guint64
amk_generator_get_seed (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0);

  return self->seed;
}

/**
 * amk_generator_set_seed:
 * @self: a generator
 * @seed: a seed
 *
 * Sets [property@Amk.Generator:seed] and restarts the random numbers from it.
 */
void
amk_generator_set_seed (AmkGenerator *self,
                        guint64       seed)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));

  g_rand_free (self->rand);
  self->rand = new_rand (seed);
  self->rand_epoch++;
  if (self->seed == seed)
    return;
  self->seed = seed;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_SEED]);
}

/**
 * amk_generator_get_max_tokens:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:max-tokens].
 *
 * Returns: the default most tokens of a generation
 */
guint
amk_generator_get_max_tokens (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0);

  return self->max_tokens;
}

/**
 * amk_generator_set_max_tokens:
 * @self: a generator
 * @max_tokens: the most tokens a generation makes by default, at least 1
 *
 * Sets [property@Amk.Generator:max-tokens]. @max_tokens must be at least 1: 0 is a
 * programmer error (a critical warning, and the setting stays as it was; through the
 * property, GObject's warning for a value out of its range).
 */
void
amk_generator_set_max_tokens (AmkGenerator *self,
                              guint         max_tokens)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));
  g_return_if_fail (max_tokens > 0);

  if (self->max_tokens == max_tokens)
    return;
  self->max_tokens = max_tokens;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_MAX_TOKENS]);
}

/**
 * amk_generator_add_stop_token:
 * @self: a generator
 * @token_id: a token id, 0 or more, such as that of `<|im_end|>`
 *  ([method@Amk.Tokenizer.token_to_id] finds it)
 *
 * Makes generation stop when the model produces @token_id, as it always does at the
 * tokenizer's end-of-sequence token. The stop token is not part of the text, nor
 * emitted by [signal@Amk.Generator::token]; the model sees it at the start of the
 * next call.
 *
 * @token_id must be 0 or more: a negative id is a programmer error (a critical
 * warning, and nothing is added). [method@Amk.Tokenizer.token_to_id] gives -1 for a
 * token the vocabulary lacks: check what it gave first.
 */
void
amk_generator_add_stop_token (AmkGenerator *self,
                              gint32        token_id)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));
  g_return_if_fail (token_id >= 0);

  for (guint i = 0; i < self->stop_tokens->len; i++)
    if (g_array_index (self->stop_tokens, gint32, i) == token_id)
      return;
  g_array_append_val (self->stop_tokens, token_id);
}

/**
 * amk_generator_add_stop_string:
 * @self: a generator
 * @text: a non-empty text
 *
 * Makes generation stop once the generated text contains @text. The returned text
 * ends before @text; the tokens that spelt it have been generated (and emitted by
 * [signal@Amk.Generator::token]) all the same.
 *
 * @text must not be empty: "" is a programmer error (a critical warning, and nothing
 * is added).
 */
void
amk_generator_add_stop_string (AmkGenerator *self,
                               const char   *text)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));
  g_return_if_fail (text != NULL && *text != '\0');

  g_ptr_array_add (self->stop_strings, g_strdup (text));
}

/**
 * amk_generator_clear_stops:
 * @self: a generator
 *
 * Forgets the stop tokens and stop strings added; the end-of-sequence token still
 * stops generation.
 */
void
amk_generator_clear_stops (AmkGenerator *self)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));

  g_array_set_size (self->stop_tokens, 0);
  g_ptr_array_set_size (self->stop_strings, 0);
}

/**
 * amk_generator_get_position:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:position].
 *
 * Returns: the KV cache positions in use
 */
guint
amk_generator_get_position (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0);

  return self->position;
}

/**
 * amk_generator_get_prompt_tokens:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:prompt-tokens].
 *
 * Returns: the tokens the last call fed in before generating
 */
guint
amk_generator_get_prompt_tokens (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0);

  return self->prompt_tokens;
}

/**
 * amk_generator_get_generated_tokens:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:generated-tokens].
 *
 * Returns: the tokens the last call generated
 */
guint
amk_generator_get_generated_tokens (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0);

  return self->tokens->len;
}

/**
 * amk_generator_get_prefill_tokens_per_second:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:prefill-tokens-per-second].
 *
 * Returns: the prompt tokens fed in per second by the last call
 */
gdouble
amk_generator_get_prefill_tokens_per_second (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0.0);

  return self->prefill_tokens_per_second;
}

/**
 * amk_generator_get_tokens_per_second:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:tokens-per-second].
 *
 * Returns: the tokens generated per second by the last call, its prefill left out
 */
gdouble
amk_generator_get_tokens_per_second (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0.0);

  return self->tokens_per_second;
}

/**
 * amk_generator_get_time_to_first_token:
 * @self: a generator
 *
 * Gets [property@Amk.Generator:time-to-first-token].
 *
 * Returns: the seconds from the start of the last generation to its first token
 */
gdouble
amk_generator_get_time_to_first_token (AmkGenerator *self)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), 0.0);

  return self->time_to_first_token;
}

/**
 * amk_generator_get_tokens:
 * @self: a generator
 * @n_tokens: (out): the number of tokens
 *
 * Gets the ids of the tokens the last successful call generated, in order, stop
 * tokens left out.
 *
 * Returns: (array length=n_tokens) (transfer none): the token ids, valid until the
 *   next call
 */
const gint32 *
amk_generator_get_tokens (AmkGenerator *self,
                          gsize        *n_tokens)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), NULL);
  g_return_val_if_fail (n_tokens != NULL, NULL);

  *n_tokens = self->tokens->len;
  return (const gint32 *) self->tokens->data;
}

/**
 * amk_generator_reset:
 * @self: a generator
 *
 * Starts the session over: position 0 (the KV cache is overwritten as new tokens come
 * in), and the random numbers restarted from [property@Amk.Generator:seed]. A
 * generation running in a worker thread finishes, but its effect on the session is
 * dropped.
 */
void
amk_generator_reset (AmkGenerator *self)
{
  g_return_if_fail (AMK_IS_GENERATOR (self));

  self->epoch++;
  self->pending = -1;
  g_rand_free (self->rand);
  self->rand = new_rand (self->seed);
  self->rand_epoch++;
  if (self->position != 0)
    {
      self->position = 0;
      g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_POSITION]);
    }
}

/* ---- one run: the prefill and the generation --------------------------------------- */

/* A call's parameters (copied when it starts, so that changes apply to the next call)
 * and its copy of the session; the session is written back when it succeeds. */
typedef struct {
  char         *prompt;
  gboolean      generate;       /* FALSE: prefill only */
  guint         max_tokens;
  gdouble       temperature;
  guint         top_k;
  gdouble       top_p;
  GArray       *stop_tokens;
  GStrv         stop_strings;
  GMainContext *context;        /* async: where ::token is emitted; NULL: right away */

  guint         epoch, rand_epoch;
  guint         position;
  gint32        pending;
  gint          head_row;       /* the prefill chunk's row whose logits come next, or -1 */
  GRand        *rand;
  gboolean      reloaded;       /* a new KV cache: the session restarts even on failure */

  GArray       *tokens;
  guint         prompt_tokens;
  guint         steps;          /* decode steps */
  guint         prompt_steps;   /* of which the prompt's */
  gint64        prefill_usec;   /* the prompt's chunks and steps */
  gint64        generate_usec;  /* from there to the end of the generation */
  gint64        first_token_usec;  /* from the start to the first generated token */
  char         *text;
} Run;

static void
run_free (Run *run)
{
  g_free (run->prompt);
  g_clear_pointer (&run->stop_tokens, g_array_unref);
  g_strfreev (run->stop_strings);
  g_clear_pointer (&run->context, g_main_context_unref);
  g_clear_pointer (&run->rand, g_rand_free);
  g_clear_pointer (&run->tokens, g_array_unref);
  g_free (run->text);
  g_free (run);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (Run, run_free)

static Run *
run_new (AmkGenerator *self,
         const char   *prompt,
         gboolean      generate,
         guint         max_tokens)
{
  Run *run = g_new0 (Run, 1);

  run->prompt = g_strdup (prompt);
  run->generate = generate;
  run->max_tokens = max_tokens > 0 ? max_tokens : self->max_tokens;
  run->temperature = self->temperature;
  run->top_k = self->top_k;
  run->top_p = self->top_p;
  run->stop_tokens = g_array_copy (self->stop_tokens);
  run->stop_strings = g_new0 (char *, self->stop_strings->len + 1);
  for (guint i = 0; i < self->stop_strings->len; i++)
    run->stop_strings[i] = g_strdup (g_ptr_array_index (self->stop_strings, i));
  run->epoch = self->epoch;
  run->rand_epoch = self->rand_epoch;
  run->position = self->position;
  run->pending = self->pending;
  run->head_row = -1;
  run->rand = g_rand_copy (self->rand);
  run->tokens = g_array_new (FALSE, FALSE, sizeof (gint32));
  return run;
}

/* The checks of what a caller can get wrong, before anything runs. */
static gboolean
run_check (Run     *run,
           GError **error)
{
  if (run->prompt == NULL || *run->prompt == '\0')
    {
      g_set_error_literal (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_EMPTY_PROMPT,
                           _("The prompt is empty: give some text to start from"));
      return FALSE;
    }
  if (!run->generate)
    return TRUE;
  if (!isfinite (run->temperature) || run->temperature < 0.0)
    {
      g_set_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_INVALID_TEMPERATURE,
                   _("The temperature %g is not valid: give 0 for greedy decoding or a "
                     "positive number such as 0.7"), run->temperature);
      return FALSE;
    }
  if (!(run->top_p > 0.0 && run->top_p <= 1.0))
    {
      g_set_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_INVALID_TOP_P,
                   _("The top-p value %g is not valid: give a probability mass above 0 "
                     "and at most 1 (1 keeps every token)"), run->top_p);
      return FALSE;
    }
  return TRUE;
}

static gboolean
upload_i32 (AmkGenerator  *self,
            gint           buffer,
            gint32         value,
            GError       **error)
{
  g_autoptr(GBytes) bytes = g_bytes_new (&value, sizeof value);

  return amk_executor_upload (self->executor, (guint) buffer, bytes, error);
}

static GBytes *
download (AmkGenerator  *self,
          gint           buffer,
          GError       **error)
{
  return amk_executor_download (self->executor, (guint) buffer, error);
}

/* One decode step: token (or, when token < 0, the one the last step's ARGMAX left on
 * the device) at run->position. */
static gboolean
step (AmkGenerator  *self,
      Run           *run,
      gint32         token,
      GCancellable  *cancellable,
      GError       **error)
{
  AmkModelBuild *build = amk_model_get_build (self->model);

  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;
  if ((token >= 0 && !upload_i32 (self, build->tokens, token, error)) ||
      !upload_i32 (self, build->pos, (gint32) run->position, error))
    return FALSE;
  if (!amk_executor_run (self->executor, cancellable, error))
    return FALSE;
  run->position++;
  run->steps++;
  return TRUE;
}

/* One emission of ::token or ::prefill-progress. */
typedef struct {
  AmkGenerator *self;
  guint         signal;
  gint32        token;       /* ::token */
  char         *piece;
  guint         fed, total;  /* ::prefill-progress */
} Emission;

static gboolean
emission_emit (gpointer data)
{
  Emission *e = data;

  if (e->signal == SIGNAL_TOKEN)
    g_signal_emit (e->self, signals[SIGNAL_TOKEN], 0, (gint) e->token, e->piece);
  else
    g_signal_emit (e->self, signals[SIGNAL_PREFILL_PROGRESS], 0, e->fed, e->total);
  return G_SOURCE_REMOVE;
}

static void
emission_free (gpointer data)
{
  Emission *e = data;

  g_object_unref (e->self);
  g_free (e->piece);
  g_free (e);
}

/* Queues func in context at the GTask's completion priority, behind what was queued
 * before: never a direct call, as g_main_context_invoke_full() makes from a worker
 * thread when context is the global default one and nobody iterates it at that moment
 * (the signals and the end of the run belong to the caller's thread). */
static void
queue_in_context (GMainContext   *context,
                  GSourceFunc     func,
                  gpointer        data,
                  GDestroyNotify  notify)
{
  g_autoptr(GSource) source = g_idle_source_new ();

  g_source_set_priority (source, G_PRIORITY_DEFAULT);
  g_source_set_callback (source, func, data, notify);
  g_source_set_static_name (source, "[amk] AmkGenerator run");
  g_source_attach (source, context);
}

/* Emits right away, or for an asynchronous run in the caller's context. */
static void
emit (Run      *run,
      Emission *e)
{
  if (run->context == NULL)
    {
      emission_emit (e);
      emission_free (e);
      return;
    }
  /* same priority as the GTask's completion, which is queued after: ordered */
  queue_in_context (run->context, emission_emit, e, emission_free);
}

static void
emit_token (AmkGenerator *self,
            Run          *run,
            gint32        token,
            const char   *piece)
{
  Emission *e = g_new0 (Emission, 1);

  e->self = g_object_ref (self);
  e->signal = SIGNAL_TOKEN;
  e->token = token;
  e->piece = g_strdup (piece);
  emit (run, e);
}

static void
emit_prefill_progress (AmkGenerator *self,
                       Run          *run,
                       guint         fed,
                       guint         total)
{
  Emission *e = g_new0 (Emission, 1);

  e->self = g_object_ref (self);
  e->signal = SIGNAL_PREFILL_PROGRESS;
  e->fed = fed;
  e->total = total;
  emit (run, e);
}

/* The model loaded, its decode step ready on the executor and its prefill chunk, when
 * it has one, on the prefill executor, sharing the decode step's weights and KV cache. */
static gboolean
prepare (AmkGenerator  *self,
         Run           *run,
         GCancellable  *cancellable,
         GError       **error)
{
  AmkModelBuild *build;

  /* (a model not loaded yet gets the queue count of the executor that runs it) */
  if (!amk_model_load_for_executor (self->model, self->executor, cancellable, error))
    return FALSE;
  build = amk_model_get_build (self->model);
  if (amk_executor_get_program (self->executor) != build->program)
    {
      /* a new KV cache: the session starts over */
      run->reloaded = TRUE;
      run->position = 0;
      run->pending = -1;
      if (!amk_executor_load (self->executor, build->program, error))
        return FALSE;
    }
  if (build->prefill == NULL)
    return TRUE;
  if (self->prefill_executor == NULL &&
      (self->prefill_executor = amk_executor_new_sibling (self->executor)) == NULL)
    return TRUE;   /* every prompt token through the decode step */
  /* a decode step loaded again has new memory: share that */
  if (run->reloaded || amk_executor_get_program (self->prefill_executor) != build->prefill->program)
    return amk_executor_load_shared (self->prefill_executor, build->prefill->program, self->executor,
                                     error);
  return TRUE;
}

/* Feeds tokens[0 .. n) at run->position and on through the prefill chunk, one launch
 * per chunk of rows; the rows after the last token get token 0 at position -1 (padding,
 * which the chunk's ops skip). A chunk with a head also computes the logits of
 * tokens[n - 1]: run->head_row says in which row of its last launch. */
static gboolean
prefill_chunks (AmkGenerator  *self,
                Run           *run,
                const gint32  *tokens,
                guint          n,
                GCancellable  *cancellable,
                GError       **error)
{
  AmkModelBuild *build = amk_model_get_build (self->model);
  const guint chunk = build->prefill->rows;
  const gboolean head = build->prefill->head_pos >= 0;
  g_autofree gint32 *ids = g_new (gint32, chunk);
  g_autofree gint32 *pos = g_new (gint32, chunk);
  g_autofree gint32 *head_pos = g_new (gint32, chunk);

  for (guint fed = 0; fed < n;)
    {
      const guint rows = MIN (chunk, n - fed);
      g_autoptr(GBytes) ids_bytes = NULL;
      g_autoptr(GBytes) pos_bytes = NULL;

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        return FALSE;
      for (guint r = 0; r < chunk; r++)
        {
          ids[r] = r < rows ? tokens[fed + r] : 0;
          pos[r] = r < rows ? (gint32) (run->position + r) : -1;
          head_pos[r] = fed + r + 1 == n ? pos[r] : -1;
        }
      ids_bytes = g_bytes_new (ids, chunk * sizeof (gint32));
      pos_bytes = g_bytes_new (pos, chunk * sizeof (gint32));
      if (!amk_executor_upload (self->prefill_executor, (guint) build->prefill->tokens, ids_bytes, error) ||
          !amk_executor_upload (self->prefill_executor, (guint) build->prefill->pos, pos_bytes, error))
        return FALSE;
      if (head)
        {
          g_autoptr(GBytes) head_bytes = g_bytes_new (head_pos, chunk * sizeof (gint32));

          if (!amk_executor_upload (self->prefill_executor, (guint) build->prefill->head_pos, head_bytes, error))
            return FALSE;
          if (fed + rows == n)
            run->head_row = (gint) rows - 1;
        }
      if (!amk_executor_run (self->prefill_executor, cancellable, error))
        return FALSE;
      run->position += rows;
      fed += rows;
      emit_prefill_progress (self, run, fed, head ? n : n + 1);
    }
  return TRUE;
}

static gboolean
is_stop_token (AmkModelBuild *build,
               Run           *run,
               gint32         token)
{
  if (build->eos_id >= 0 && token == build->eos_id)
    return TRUE;
  for (guint i = 0; i < run->stop_tokens->len; i++)
    if (g_array_index (run->stop_tokens, gint32, i) == token)
      return TRUE;
  return FALSE;
}

/* The offset in text of the first stop string that ends after from, or -1. */
static gssize
find_stop_string (Run        *run,
                  const char *text,
                  gsize       length,
                  gsize       from)
{
  gssize found = -1;

  for (guint i = 0; run->stop_strings[i] != NULL; i++)
    {
      gsize n = strlen (run->stop_strings[i]);
      gsize start = from >= n ? from - n + 1 : 0;
      const char *hit = g_strstr_len (text + start, (gssize) (length - start),
                                      run->stop_strings[i]);

      if (hit != NULL && (found < 0 || hit - text < found))
        found = hit - text;
    }
  return found;
}

/* The first token after a prompt whose last row went through the prefill chunk's head:
 * that row's argmax, or sampled from its logits, as next_token() does for a step (which
 * checks it). FALSE with error set when a download failed. */
static gboolean
head_token (AmkGenerator  *self,
            Run           *run,
            gint32        *out,
            GError       **error)
{
  AmkModelBuild *build = amk_model_get_build (self->model);
  const AmkModelRows *chunk = build->prefill;
  const gsize row = (gsize) run->head_row;
  g_autoptr(GBytes) bytes = NULL;
  const guint8 *data;
  gsize size = 0;
  gint32 token;

  run->head_row = -1;
  if (run->temperature == 0.0)
    {
      if ((bytes = amk_executor_download (self->prefill_executor, (guint) chunk->next, error)) == NULL)
        return FALSE;
      data = g_bytes_get_data (bytes, &size);
      g_return_val_if_fail (size == chunk->rows * sizeof token, FALSE);
      memcpy (&token, data + row * sizeof token, sizeof token);
      /* a padding id of the embedding (beyond the tokenizer's): the host's argmax */
      if (token < 0 || (guint) token < build->n_pieces || (guint) token >= build->vocab_size)
        {
          *out = token;
          return TRUE;
        }
      g_clear_pointer (&bytes, g_bytes_unref);
    }
  if ((bytes = amk_executor_download (self->prefill_executor, (guint) chunk->logits, error)) == NULL)
    return FALSE;
  data = g_bytes_get_data (bytes, &size);
  g_return_val_if_fail (size == (gsize) chunk->rows * build->vocab_size * sizeof (float), FALSE);
  data += row * build->vocab_size * sizeof (float);
  if (run->temperature == 0.0)
    *out = amk_sample_argmax ((const float *) data, build->n_pieces);
  else
    *out = amk_sample_token ((const float *) data, build->n_pieces, run->temperature, run->top_k,
                             run->top_p, run->rand);
  return TRUE;
}

/* The next token from the last step: the device's argmax, or sampled from the
 * logits (and then uploaded by the next step); `on_device` says whether the token is
 * where the next step's EMBED reads it.
 *
 * Only ids with a piece in the tokenizer are produced, as transformers does: a model
 * whose embedding is padded beyond the tokenizer's vocabulary (to a multiple of 64, say)
 * has logits for ids that no text has. The sampler looks at the tokenizer's ids only;
 * when the device's argmax picked a padding id, the host takes the argmax over those
 * ids instead, and the token is uploaded like a sampled one. */
static gint32
next_token (AmkGenerator  *self,
            Run           *run,
            gboolean      *on_device,
            GError       **error)
{
  AmkModelBuild *build = amk_model_get_build (self->model);
  const guint n_pieces = build->n_pieces;
  g_autoptr(GBytes) bytes = NULL;
  const void *data;
  gsize size = 0;
  gint32 token;

  *on_device = FALSE;
  if (run->head_row >= 0)
    {
      if (!head_token (self, run, &token, error))
        return -1;
    }
  else if (run->temperature == 0.0)
    {
      bytes = download (self, build->tokens, error);
      if (bytes == NULL)
        return -1;
      data = g_bytes_get_data (bytes, &size);
      g_return_val_if_fail (size == sizeof token, -1);
      memcpy (&token, data, sizeof token);
      *on_device = TRUE;
      if (token >= 0 && (guint) token >= n_pieces && (guint) token < build->vocab_size)
        {
          g_clear_pointer (&bytes, g_bytes_unref);
          bytes = download (self, build->logits, error);
          if (bytes == NULL)
            return -1;
          data = g_bytes_get_data (bytes, &size);
          g_return_val_if_fail (size == build->vocab_size * sizeof (float), -1);
          token = amk_sample_argmax (data, n_pieces);
          *on_device = FALSE;
        }
    }
  else
    {
      bytes = download (self, build->logits, error);
      if (bytes == NULL)
        return -1;
      data = g_bytes_get_data (bytes, &size);
      g_return_val_if_fail (size == build->vocab_size * sizeof (float), -1);
      token = amk_sample_token (data, n_pieces, run->temperature, run->top_k,
                                run->top_p, run->rand);
    }
  if (token < 0 || (guint) token >= n_pieces)
    {
      g_set_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_NO_TOKEN,
                   _("The model produced no valid next token at position %u (its logits "
                     "are not finite)"), run->position);
      return -1;
    }
  return token;
}

/* Runs the prefill and, when asked, the generation, on the run's copy of the session. */
static gboolean
run_execute (AmkGenerator  *self,
             Run           *run,
             GCancellable  *cancellable,
             GError       **error)
{
  AmkModelBuild *build;
  g_autofree gint32 *ids = NULL;
  g_autoptr(GArray) feed = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GString) emitted = g_string_new (NULL);
  gsize n_ids = 0;
  guint held_from = 0;   /* the first generated token whose text is not emitted yet */
  guint from = 0;        /* the first prompt token of the decode steps */
  gssize stop_at = -1;
  gint64 call_start, prefill_start, start;

  if (g_cancellable_set_error_if_cancelled (cancellable, error) ||
      !run_check (run, error) ||
      !prepare (self, run, cancellable, error))
    return FALSE;
  build = amk_model_get_build (self->model);
  call_start = g_get_monotonic_time ();

  /* the tokenizer's BOS only at the start of the session */
  ids = amk_tokenizer_encode (build->tokenizer, run->prompt,
                              run->position == 0 && run->pending < 0, &n_ids, error);
  if (ids == NULL)
    return FALSE;
  if (n_ids == 0)
    {
      g_set_error_literal (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_EMPTY_PROMPT,
                           _("The prompt encodes to no tokens"));
      return FALSE;
    }
  if (run->pending >= 0)
    g_array_append_val (feed, run->pending);
  g_array_append_vals (feed, ids, (guint) n_ids);
  if ((gsize) run->position + feed->len > build->context)
    {
      g_set_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_CONTEXT_FULL,
                   _("The prompt (%u tokens) does not fit in the context of %u tokens, "
                     "of which %u are in use: shorten it, reset the generator or load the "
                     "model with a longer context"),
                   feed->len, build->context, run->position);
      return FALSE;
    }
  run->prompt_tokens = feed->len;

  /* every token but the last through the prefill chunk where there is one, the last
   * through the decode step, which computes the logits of the next; or, when the chunk
   * has a head, which computes them for its last row, every token through the chunk */
  prefill_start = g_get_monotonic_time ();
  if (feed->len > 1 && build->prefill != NULL && self->prefill_executor != NULL)
    {
      const guint chunked = build->prefill->head_pos >= 0 ? feed->len : feed->len - 1;

      if (!prefill_chunks (self, run, (const gint32 *) feed->data, chunked, cancellable, error))
        return FALSE;
      from = chunked;
    }
  for (guint i = from; i < feed->len; i++)
    if (!step (self, run, g_array_index (feed, gint32, i), cancellable, error))
      return FALSE;
  run->pending = -1;
  run->prompt_steps = run->steps;
  start = g_get_monotonic_time ();
  run->prefill_usec = start - prefill_start;

  while (run->generate)
    {
      g_autofree char *piece = NULL;
      gsize before = emitted->len;
      gboolean on_device;
      gint32 token = next_token (self, run, &on_device, error);

      if (token < 0)
        return FALSE;
      if (run->first_token_usec == 0)
        run->first_token_usec = MAX (g_get_monotonic_time () - call_start, 1);
      if (is_stop_token (build, run, token))
        {
          run->pending = token;
          break;
        }
      g_array_append_val (run->tokens, token);

      /* the text of the tokens held so far, unless it ends inside a character */
      piece = amk_tokenizer_decode_piece (build->tokenizer, (const gint32 *) run->tokens->data,
                                          run->tokens->len, FALSE, &held_from, error);
      if (piece == NULL)
        return FALSE;
      g_string_append (emitted, piece);
      emit_token (self, run, token, piece);

      if (run->stop_strings[0] != NULL && emitted->len > before)
        stop_at = find_stop_string (run, emitted->str, emitted->len, before);
      if (stop_at >= 0 || run->tokens->len >= run->max_tokens ||
          run->position >= build->context)
        {
          run->pending = token;
          break;
        }
      /* greedy: ARGMAX left the token where EMBED reads it */
      if (!step (self, run, on_device ? -1 : token, cancellable, error))
        return FALSE;
    }
  run->generate_usec = g_get_monotonic_time () - start;

  if (stop_at >= 0)
    run->text = g_strndup (emitted->str, (gsize) stop_at);
  else
    {
      run->text = amk_tokenizer_decode (build->tokenizer, (const gint32 *) run->tokens->data,
                                        run->tokens->len, error);
      if (run->text == NULL)
        return FALSE;
    }
  return TRUE;
}

static void
set_position (AmkGenerator *self,
              guint         position)
{
  if (self->position == position)
    return;
  self->position = position;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_POSITION]);
}

/* Writes a run's session and statistics back, unless a reset or a new seed came in
 * between; after a failure only a session that started over. In the caller's thread. */
static void
run_commit (AmkGenerator *self,
            Run          *run,
            gboolean      ok)
{
  GObject *object = G_OBJECT (self);

  if (!ok)
    {
      if (run->reloaded && run->epoch == self->epoch)
        {
          self->pending = -1;
          set_position (self, 0);
        }
      return;
    }
  g_object_freeze_notify (object);
  if (run->epoch == self->epoch)
    {
      self->pending = run->pending;
      set_position (self, run->position);
    }
  if (run->rand_epoch == self->rand_epoch)
    {
      g_rand_free (self->rand);
      self->rand = g_steal_pointer (&run->rand);
    }
  if (run->generate)
    {
      const guint generate_steps = run->steps - run->prompt_steps;

      g_array_set_size (self->tokens, 0);
      g_array_append_vals (self->tokens, run->tokens->data, run->tokens->len);
      self->prompt_tokens = run->prompt_tokens;
      self->prefill_tokens_per_second = run->prompt_tokens / MAX (run->prefill_usec / 1e6, 1e-9);
      self->tokens_per_second = generate_steps > 0
                                  ? generate_steps / MAX (run->generate_usec / 1e6, 1e-9) : 0.0;
      self->time_to_first_token = run->first_token_usec / 1e6;
      g_object_notify_by_pspec (object, properties[PROP_PROMPT_TOKENS]);
      g_object_notify_by_pspec (object, properties[PROP_GENERATED_TOKENS]);
      g_object_notify_by_pspec (object, properties[PROP_PREFILL_TOKENS_PER_SECOND]);
      g_object_notify_by_pspec (object, properties[PROP_TOKENS_PER_SECOND]);
      g_object_notify_by_pspec (object, properties[PROP_TIME_TO_FIRST_TOKEN]);
    }
  g_object_thaw_notify (object);
}

static gboolean
begin (AmkGenerator  *self,
       GError       **error)
{
  /* a generator made from a binding without its model: every run says so */
  if (self->model == NULL)
    {
      g_set_error_literal (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_NO_MODEL,
                           _("The generator has no model: make it with a model "
                             "(amk_generator_new(), or the “model” property)"));
      return FALSE;
    }
  if (self->busy)
    {
      g_set_error_literal (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_BUSY,
                           _("The generator is already generating: wait until it is "
                             "done, or use a second generator"));
      return FALSE;
    }
  self->busy = TRUE;
  return TRUE;
}

/* The synchronous calls: the run, then the commit, in this thread. */
static char *
run_sync (AmkGenerator  *self,
          const char    *prompt,
          gboolean       generate,
          guint          max_tokens,
          GCancellable  *cancellable,
          GError       **error)
{
  g_autoptr(Run) run = NULL;
  gboolean ok;

  if (!begin (self, error))
    return NULL;
  run = run_new (self, prompt, generate, max_tokens);
  ok = run_execute (self, run, cancellable, error);
  self->busy = FALSE;
  run_commit (self, run, ok);
  if (!ok)
    return NULL;
  return generate ? g_steal_pointer (&run->text) : g_strdup ("");
}

/**
 * amk_generator_prefill:
 * @self: a generator
 * @text: the text to feed in
 * @cancellable: (nullable): a #GCancellable, checked before every step and every
 *   prefill chunk
 * @error: return location for a #GError
 *
 * Feeds @text to the model without generating: a system prompt, or a document to ask
 * about afterwards. The tokenizer's beginning-of-sequence token comes first when the
 * session is at position 0. Fails as [method@Amk.Generator.generate] does.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_generator_prefill (AmkGenerator  *self,
                       const char    *text,
                       GCancellable  *cancellable,
                       GError       **error)
{
  g_autofree char *ok = NULL;

  g_return_val_if_fail (AMK_IS_GENERATOR (self), FALSE);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  ok = run_sync (self, text, FALSE, 0, cancellable, error);
  return ok != NULL;
}

/**
 * amk_generator_generate:
 * @self: a generator
 * @prompt: the prompt
 * @max_tokens: the most tokens to generate, or 0 for [property@Amk.Generator:max-tokens]
 * @cancellable: (nullable): a #GCancellable, checked before every step and every
 *   prefill chunk
 * @error: return location for a #GError
 *
 * Feeds @prompt to the model after what it has seen so far (with the
 * beginning-of-sequence token first at position 0), then generates up to @max_tokens
 * tokens, emitting [signal@Amk.Generator::token] for each, until a stop (see
 * [class@Amk.Generator]) or a full KV cache.
 *
 * An empty prompt (%AMK_GENERATOR_ERROR_EMPTY_PROMPT), a prompt that does not fit in
 * the rest of the context (%AMK_GENERATOR_ERROR_CONTEXT_FULL), a negative
 * [property@Amk.Generator:temperature] (%AMK_GENERATOR_ERROR_INVALID_TEMPERATURE) or a
 * [property@Amk.Generator:top-p] outside (0, 1] (%AMK_GENERATOR_ERROR_INVALID_TOP_P)
 * fail before anything runs; a generation already running fails with
 * %AMK_GENERATOR_ERROR_BUSY, cancelling with %G_IO_ERROR_CANCELLED, a failed run with
 * its #AmkLaunchError. After a failure the session is as it was before the call.
 *
 * Returns: (transfer full): the generated text (stop tokens left out, cut before a
 *   stop string), or %NULL with @error set
 */
char *
amk_generator_generate (AmkGenerator  *self,
                        const char    *prompt,
                        guint          max_tokens,
                        GCancellable  *cancellable,
                        GError       **error)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), NULL);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return run_sync (self, prompt, TRUE, max_tokens, cancellable, error);
}

/* The end of an asynchronous run, in the caller's context before its callback. */
typedef struct {
  GTask    *task;     /* holds the generator and the run (the task data) */
  gboolean  ok;
} RunEnd;

static gboolean
end_in_context (gpointer data)
{
  RunEnd *end = data;
  AmkGenerator *self = g_task_get_source_object (end->task);

  self->busy = FALSE;
  run_commit (self, g_task_get_task_data (end->task), end->ok);
  return G_SOURCE_REMOVE;
}

static void
run_end_free (gpointer data)
{
  RunEnd *end = data;

  g_object_unref (end->task);
  g_free (end);
}

static void
generate_thread (GTask        *task,
                 gpointer      source_object,
                 gpointer      task_data,
                 GCancellable *cancellable)
{
  AmkGenerator *self = source_object;
  Run *run = task_data;
  RunEnd *end = g_new0 (RunEnd, 1);
  GError *error = NULL;
  gboolean ok;

  ok = run_execute (self, run, cancellable, &error);
  end->task = g_object_ref (task);
  end->ok = ok;
  /* queued before the task's completion, at its priority: runs first */
  queue_in_context (run->context, end_in_context, end, run_end_free);
  if (ok)
    g_task_return_pointer (task, g_strdup (run->text), g_free);
  else
    g_task_return_error (task, error);
}

/**
 * amk_generator_generate_async:
 * @self: a generator
 * @prompt: the prompt
 * @max_tokens: the most tokens to generate, or 0 for [property@Amk.Generator:max-tokens]
 * @cancellable: (nullable): a #GCancellable, checked before every step and every
 *   prefill chunk
 * @callback: (scope async): called when the generation ended
 * @user_data: data for @callback
 *
 * Runs [method@Amk.Generator.generate] in a worker thread. The
 * [signal@Amk.Generator::token] signal is emitted in the thread-default main context
 * of the calling thread, one emission per token in order, all before @callback runs;
 * the session's properties change just before @callback runs. Cancelling stops the
 * generation between two steps with %G_IO_ERROR_CANCELLED (on the GPU, a launch in
 * progress is aborted) and leaves the session as it was.
 */
void
amk_generator_generate_async (AmkGenerator        *self,
                              const char          *prompt,
                              guint                max_tokens,
                              GCancellable        *cancellable,
                              GAsyncReadyCallback  callback,
                              gpointer             user_data)
{
  g_autoptr(GTask) task = NULL;
  GError *error = NULL;
  Run *run;

  g_return_if_fail (AMK_IS_GENERATOR (self));
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));

  task = g_task_new (self, cancellable, callback, user_data);
  g_task_set_source_tag (task, amk_generator_generate_async);
  g_task_set_return_on_cancel (task, FALSE);
  if (!begin (self, &error))
    {
      g_task_return_error (task, error);
      return;
    }
  run = run_new (self, prompt, TRUE, max_tokens);
  run->context = g_main_context_ref_thread_default ();
  g_task_set_task_data (task, run, (GDestroyNotify) run_free);
  g_task_run_in_thread (task, generate_thread);
}

/**
 * amk_generator_generate_finish:
 * @self: a generator
 * @result: the #GAsyncResult passed to the callback
 * @error: return location for a #GError
 *
 * Finishes [method@Amk.Generator.generate_async].
 * Call it once for each @result: a second call is a programmer error (a critical
 * warning, and no result).
 *
 * Returns: (transfer full): the generated text, or %NULL with @error set
 */
char *
amk_generator_generate_finish (AmkGenerator  *self,
                               GAsyncResult  *result,
                               GError       **error)
{
  g_return_val_if_fail (AMK_IS_GENERATOR (self), NULL);
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);
  g_return_val_if_fail (g_async_result_is_tagged (result, amk_generator_generate_async), NULL);

  return g_task_propagate_pointer (G_TASK (result), error);
}
