/* amk-model-loader-private.h: a model's path to its description (the reader the path
 * calls for) and to its decode step: reader → AmkModelSpec → builder.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-model-spec-private.h"
#include "amk-model-builder-private.h"

G_BEGIN_DECLS

/* A folder is read as a Hugging Face checkpoint (amk_hf_model_read()), anything else as
 * a GGUF file (amk_gguf_model_read()). */
AmkModelSpec  *amk_model_read_spec       (const char   *path,
                                          GError      **error);
/* amk_model_read_spec() then amk_model_build_graph(). */
AmkModelBuild *amk_model_build_from_path (const char   *path,
                                          guint         n_queues,
                                          guint         context,
                                          GError      **error);

G_END_DECLS
