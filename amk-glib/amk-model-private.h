/* amk-model-private.h: what AmkGenerator needs of an AmkModel.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-model.h"
#include "amk-model-builder-private.h"

G_BEGIN_DECLS

/* The loaded build (program, tokenizer, buffer indices), or NULL before loading. */
AmkModelBuild *amk_model_get_build         (AmkModel      *self);
/* g_initable_init() for the executor that will run the model (NULL: not known yet): an
 * n-queues of 0 chooses the executor's preferred queue count. */
gboolean       amk_model_load_for_executor (AmkModel      *self,
                                            AmkExecutor   *executor,
                                            GCancellable  *cancellable,
                                            GError       **error);

G_END_DECLS
