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
#include <amk-glib/amk-launcher.h>
#include <amk-glib/amk-model.h>

G_BEGIN_DECLS

#define AMK_TYPE_GENERATOR (amk_generator_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkGenerator, amk_generator, AMK, GENERATOR, GObject)

AMK_AVAILABLE_IN_1_0
AmkGenerator *amk_generator_new                  (AmkModel            *model,
                                                  AmkLauncher         *launcher);

AMK_AVAILABLE_IN_1_0
AmkModel     *amk_generator_get_model            (AmkGenerator        *self);
AMK_AVAILABLE_IN_1_0
AmkLauncher  *amk_generator_get_launcher         (AmkGenerator        *self);

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
