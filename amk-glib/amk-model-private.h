/* amk-model-private.h: what AmkGenerator needs of an AmkModel.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-model.h"
#include "amk-model-builder-private.h"

G_BEGIN_DECLS

/* The loaded build (program, tokenizer, buffer indices), or NULL before loading. */
AmkModelBuild *amk_model_get_build (AmkModel *self);

G_END_DECLS
