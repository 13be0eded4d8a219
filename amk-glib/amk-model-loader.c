/* amk-model-loader.c: a model's path to its description and its decode step.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-model-loader-private.h"
#include "amk-model-readers-private.h"

AmkModelSpec *
amk_model_read_spec (const char  *path,
                     GError     **error)
{
  g_return_val_if_fail (path != NULL, NULL);

  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    return amk_hf_model_read (path, error);
  return amk_gguf_model_read (path, error);
}

AmkModelBuild *
amk_model_build_from_path (const char  *path,
                           guint        n_queues,
                           guint        context,
                           GError     **error)
{
  g_autoptr(AmkModelSpec) spec = NULL;

  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (n_queues > 0, NULL);
  g_return_val_if_fail (context > 0, NULL);

  spec = amk_model_read_spec (path, error);
  if (spec == NULL)
    return NULL;
  return amk_model_build_graph (spec, n_queues, context, error);
}
