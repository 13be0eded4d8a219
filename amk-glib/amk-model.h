/* amk-model.h: a language model loaded from a file as one compiled decode step (and a
 * prefill chunk beside it).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <gio/gio.h>
#include <amk-glib/amk-version-macros.h>
#include <amk-glib/amk-types.h>
#include <amk-glib/amk-program.h>
#include <amk-glib/amk-tokenizer.h>

G_BEGIN_DECLS

/**
 * AMK_MODEL_ERROR:
 *
 * Error domain of model files: [class@Amk.Model] loading a GGUF file or a Hugging Face
 * checkpoint folder. Errors in this domain are from the [error@Amk.ModelError]
 * enumeration; a file that cannot be found, read or mapped is a #G_IO_ERROR instead.
 */
#define AMK_MODEL_ERROR (amk_model_error_quark ())

/**
 * AmkModelError:
 * @AMK_MODEL_ERROR_CORRUPT: the file is not well-formed: a bad magic, a truncated
 *   header, an offset or length outside the file, invalid JSON, a duplicated key
 * @AMK_MODEL_ERROR_UNSUPPORTED_VERSION: the file is of a format version amk-glib does not
 *   read (a GGUF version other than 3, a big-endian GGUF file)
 * @AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE: the model's architecture is not one amk-glib
 *   builds (only "llama" and "qwen3", LlamaForCausalLM and Qwen3ForCausalLM are)
 * @AMK_MODEL_ERROR_UNSUPPORTED_FEATURE: the architecture is supported but the model uses
 *   a feature of it that amk-glib does not run (another RoPE scaling, biases,
 *   sliding-window attention, quantized checkpoints)
 * @AMK_MODEL_ERROR_INVALID_METADATA: a hyperparameter or other metadata (a GGUF key, a
 *   config.json field, a special token id) is missing, of the wrong type, out of range,
 *   or inconsistent with the others
 * @AMK_MODEL_ERROR_MISSING_TENSOR: a weight the model needs is not in the file
 * @AMK_MODEL_ERROR_TENSOR_SHAPE: a tensor's shape or size is not the one the
 *   hyperparameters ask for
 * @AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE: a tensor is stored in an element type that
 *   amk-glib cannot convert to bf16, or that the file format does not know
 *
 * Error codes of the %AMK_MODEL_ERROR domain.
 */
typedef enum {
  AMK_MODEL_ERROR_CORRUPT,
  AMK_MODEL_ERROR_UNSUPPORTED_VERSION,
  AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE,
  AMK_MODEL_ERROR_UNSUPPORTED_FEATURE,
  AMK_MODEL_ERROR_INVALID_METADATA,
  AMK_MODEL_ERROR_MISSING_TENSOR,
  AMK_MODEL_ERROR_TENSOR_SHAPE,
  AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE
} AmkModelError;

AMK_AVAILABLE_IN_1_0
GQuark        amk_model_error_quark          (void);

#define AMK_TYPE_MODEL (amk_model_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkModel, amk_model, AMK, MODEL, GObject)

AMK_AVAILABLE_IN_1_0
AmkModel     *amk_model_new_from_file        (const char           *path,
                                              GCancellable         *cancellable,
                                              GError              **error);
AMK_AVAILABLE_IN_1_0
void          amk_model_new_from_file_async  (const char           *path,
                                              GCancellable         *cancellable,
                                              GAsyncReadyCallback   callback,
                                              gpointer              user_data);
AMK_AVAILABLE_IN_1_0
AmkModel     *amk_model_new_from_file_finish (GAsyncResult         *result,
                                              GError              **error);

AMK_AVAILABLE_IN_1_0
const char   *amk_model_get_path             (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
gboolean      amk_model_get_loaded           (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
const char   *amk_model_get_architecture     (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_n_layers         (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_hidden_size      (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_vocab_size       (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_context_length   (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_n_queues         (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_prefill_chunk    (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
gboolean      amk_model_get_keep_quantized   (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
AmkDType      amk_model_get_dtype            (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint64       amk_model_get_weight_bytes     (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
AmkTokenizer *amk_model_get_tokenizer        (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
AmkProgram   *amk_model_get_program          (AmkModel             *self);

G_END_DECLS
