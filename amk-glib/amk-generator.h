/* amk-generator.h: text generation with a model: a KV cache session, sampling, stops.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <gio/gio.h>
#include <amk-glib/amk-version-macros.h>
#include <amk-glib/amk-executor.h>
#include <amk-glib/amk-model.h>

G_BEGIN_DECLS

/**
 * AMK_GENERATOR_ERROR:
 *
 * Error domain of [class@Amk.Generator]: what a generation was asked that it cannot do.
 * Errors in this domain are from the [error@Amk.GeneratorError] enumeration; a
 * cancelled generation fails with %G_IO_ERROR_CANCELLED, and the model, the tokenizer
 * and the executor report their errors in their own domains.
 */
#define AMK_GENERATOR_ERROR (amk_generator_error_quark ())

/**
 * AmkGeneratorError:
 * @AMK_GENERATOR_ERROR_EMPTY_PROMPT: the prompt is empty, or encodes to no tokens
 * @AMK_GENERATOR_ERROR_INVALID_TEMPERATURE: [property@Amk.Generator:temperature] is
 *   negative or not finite
 * @AMK_GENERATOR_ERROR_INVALID_TOP_P: [property@Amk.Generator:top-p] is outside (0, 1]
 * @AMK_GENERATOR_ERROR_CONTEXT_FULL: the prompt does not fit in what is left of the
 *   model's context (its KV cache)
 * @AMK_GENERATOR_ERROR_NO_TOKEN: the model's step produced no valid next token (its
 *   logits are not finite)
 * @AMK_GENERATOR_ERROR_BUSY: the generator is already generating
 * @AMK_GENERATOR_ERROR_NO_MODEL: the generator was made without a model (its
 *   [property@Amk.Generator:model] is unset)
 *
 * Error codes of the %AMK_GENERATOR_ERROR domain.
 */
typedef enum {
  AMK_GENERATOR_ERROR_EMPTY_PROMPT,
  AMK_GENERATOR_ERROR_INVALID_TEMPERATURE,
  AMK_GENERATOR_ERROR_INVALID_TOP_P,
  AMK_GENERATOR_ERROR_CONTEXT_FULL,
  AMK_GENERATOR_ERROR_NO_TOKEN,
  AMK_GENERATOR_ERROR_BUSY,
  AMK_GENERATOR_ERROR_NO_MODEL
} AmkGeneratorError;

AMK_AVAILABLE_IN_1_0
GQuark amk_generator_error_quark (void);

#define AMK_TYPE_GENERATOR (amk_generator_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkGenerator, amk_generator, AMK, GENERATOR, GObject)

AMK_AVAILABLE_IN_1_0
AmkGenerator *amk_generator_new                  (AmkModel            *model,
                                                  AmkExecutor         *executor);

AMK_AVAILABLE_IN_1_0
AmkModel     *amk_generator_get_model            (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
AmkExecutor  *amk_generator_get_executor         (AmkGenerator        *self);

AMK_AVAILABLE_IN_1_0
gdouble       amk_generator_get_temperature      (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
void          amk_generator_set_temperature      (AmkGenerator        *self,
                                                  gdouble              temperature);
AMK_AVAILABLE_IN_1_0
guint         amk_generator_get_top_k            (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
void          amk_generator_set_top_k            (AmkGenerator        *self,
                                                  guint                top_k);
AMK_AVAILABLE_IN_1_0
gdouble       amk_generator_get_top_p            (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
void          amk_generator_set_top_p            (AmkGenerator        *self,
                                                  gdouble              top_p);
AMK_AVAILABLE_IN_1_0
guint64       amk_generator_get_seed             (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
void          amk_generator_set_seed             (AmkGenerator        *self,
                                                  guint64              seed);
AMK_AVAILABLE_IN_1_0
guint         amk_generator_get_max_tokens       (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
void          amk_generator_set_max_tokens       (AmkGenerator        *self,
                                                  guint                max_tokens);

AMK_AVAILABLE_IN_1_0
void          amk_generator_add_stop_token       (AmkGenerator        *self,
                                                  gint32               token_id);
AMK_AVAILABLE_IN_1_0
void          amk_generator_add_stop_string      (AmkGenerator        *self,
                                                  const char          *text);
AMK_AVAILABLE_IN_1_0
void          amk_generator_clear_stops          (AmkGenerator        *self);

AMK_AVAILABLE_IN_1_0
guint         amk_generator_get_position         (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
guint         amk_generator_get_prompt_tokens    (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
guint         amk_generator_get_generated_tokens (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
gdouble       amk_generator_get_prefill_tokens_per_second (AmkGenerator *self);
AMK_AVAILABLE_IN_1_0
gdouble       amk_generator_get_tokens_per_second (AmkGenerator       *self);
AMK_AVAILABLE_IN_1_0
gdouble       amk_generator_get_time_to_first_token (AmkGenerator     *self);
AMK_AVAILABLE_IN_1_0
const gint32 *amk_generator_get_tokens           (AmkGenerator        *self,
                                                  gsize               *n_tokens);

AMK_AVAILABLE_IN_1_0
void          amk_generator_reset                (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
gboolean      amk_generator_prefill              (AmkGenerator        *self,
                                                  const char          *text,
                                                  GCancellable        *cancellable,
                                                  GError             **error);
AMK_AVAILABLE_IN_1_0
char         *amk_generator_generate             (AmkGenerator        *self,
                                                  const char          *prompt,
                                                  guint                max_tokens,
                                                  GCancellable        *cancellable,
                                                  GError             **error);
AMK_AVAILABLE_IN_1_0
void          amk_generator_generate_async       (AmkGenerator        *self,
                                                  const char          *prompt,
                                                  guint                max_tokens,
                                                  GCancellable        *cancellable,
                                                  GAsyncReadyCallback  callback,
                                                  gpointer             user_data);
AMK_AVAILABLE_IN_1_0
char         *amk_generator_generate_finish      (AmkGenerator        *self,
                                                  GAsyncResult        *result,
                                                  GError             **error);

G_END_DECLS
