/* fuzz-image.c: libFuzzer target for the amk image loader.
 *
 * The bytes go to amk_program_new_from_bytes(), which must either return a verified
 * program or fail with an AMK_PROGRAM_ERROR (never crash, leak, hang or log a
 * critical). A program that loads must serialize to bytes that load again and
 * serialize to the very same bytes, and, when it is small, run on the CPU executor
 * (a TRAP may abort the run with AMK_LAUNCH_ERROR_ABORTED; nothing else may fail).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amk-glib/amk-glib.h>
#include "amk-abi.h"

#define FUZZ_TARGET "fuzz-image"
#include "fuzz-common.h"

/* Run only programs this small on the CPU executor, so one input stays fast. */
#define MAX_RUN_INSTRUCTIONS 10000u
#define MAX_RUN_BYTES        (16u << 20)   /* all buffers plus the scratch arena */
#define MAX_RUN_ELEMENTS     (1u << 22)    /* elements touched by all instructions */

/* The image's GVariant type, as amk-image.c writes it; used only to estimate the
 * work of a run from the raw instruction table. */
#define IMAGE_TYPE "(suuta(syyaxtmay)amsayaai)"

/* Elements the instructions of @image touch, or G_MAXUINT64 if it cannot tell. */
static guint64
estimate_elements (GBytes *image)
{
  g_autoptr(GVariant) v = g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE (IMAGE_TYPE), image, TRUE));
  g_autoptr(GVariant) table = g_variant_get_child_value (v, 6);
  gsize n_bytes = 0;
  const amk_instruction_t *ins = g_variant_get_fixed_array (table, &n_bytes, 1);
  guint64 total = 0;

  if (n_bytes % sizeof (amk_instruction_t) != 0)
    return G_MAXUINT64;
  for (gsize i = 0; i < n_bytes / sizeof (amk_instruction_t); i++)
    {
      amk_instruction_t one;
      gint32 count = 0;

      memcpy (&one, &ins[i], sizeof one);   /* the table may be unaligned */
      if (one.opcode == AMK_ABI_OP_COPY)
        count = one.params.copy.count;
      else if (one.opcode == AMK_ABI_OP_FILL)
        count = one.params.fill.count;
      else if (one.opcode == AMK_ABI_OP_ADD)
        count = one.params.add.count;
      if (one.opcode == AMK_ABI_OP_MATVEC)   /* rows x K multiply-adds */
        total += 1 + (guint64) MAX (one.params.matvec.rows, 0) * (guint64) MAX (one.params.matvec.k, 0);
      else
        total += 1 + (guint64) MAX (count, 0);
    }
  return total;
}

/* Bytes of the scratch arena plus all other buffers, saturating at G_MAXUINT64. */
static guint64
total_bytes (AmkProgram *program)
{
  guint64 total = amk_program_get_scratch_size (program);

  for (guint b = 0; b < amk_program_get_n_buffers (program); b++)
    if (amk_program_get_buffer_role (program, b) != AMK_BUFFER_ROLE_SCRATCH &&
        !g_uint64_checked_add (&total, total, amk_program_get_buffer_size (program, b)))
      return G_MAXUINT64;
  return total;
}

static void
run_on_cpu (AmkProgram *program)
{
  g_autoptr(AmkCpuExecutor) executor = NULL;
  g_autoptr(GError) error = NULL;

  executor = amk_cpu_executor_new (program, &error);
  if (executor == NULL)
    fail ("a verified program has no CPU executor", error);
  amk_cpu_executor_set_seed (executor, 0x5eed);
  if (!amk_cpu_executor_run (executor, &error))
    {
      g_autoptr(AmkAbortRecord) record = amk_cpu_executor_get_last_abort (executor);

      /* TRAP is the only way a verified program may stop early */
      if (!g_error_matches (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED) || record == NULL ||
          record->code != AMK_ABORT_CODE_TRAP)
        fail ("a verified program failed on the CPU executor", error);
      return;
    }
  if (amk_cpu_executor_get_last_abort (executor) != NULL)
    fail ("a run that succeeded left an abort record", NULL);

  for (guint b = 0; b < amk_program_get_n_buffers (program); b++)
    {
      g_autoptr(GBytes) contents = amk_cpu_executor_download (executor, b, &error);

      if (contents == NULL)
        fail ("download failed", error);
      if (g_bytes_get_size (contents) != amk_program_get_buffer_size (program, b))
        fail ("download returned the wrong size", NULL);
      if (amk_program_get_buffer_role (program, b) == AMK_BUFFER_ROLE_INPUT &&
          !amk_cpu_executor_upload (executor, b, contents, &error))
        fail ("upload of a buffer's own contents failed", error);
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GBytes) bytes = g_bytes_new_static (data, size);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkProgram) program = NULL;
  g_autoptr(AmkProgram) again = NULL;
  g_autoptr(GBytes) image = NULL;
  g_autoptr(GBytes) image_again = NULL;

  program = amk_program_new_from_bytes (bytes, &error);
  if (program == NULL)
    {
      if (error == NULL || error->domain != AMK_PROGRAM_ERROR)
        fail ("loading failed without an AMK_PROGRAM_ERROR", error);
      return 0;
    }
  if (error != NULL)
    fail ("loading succeeded but set an error", error);
  if (!amk_program_get_verified (program))
    fail ("a loaded program is not verified", NULL);

  /* round trip: serialize, load, serialize again: the same bytes */
  image = amk_program_serialize (program);
  again = amk_program_new_from_bytes (image, &error);
  if (again == NULL)
    fail ("the serialized image of a loaded program does not load", error);
  image_again = amk_program_serialize (again);
  if (!g_bytes_equal (image, image_again))
    fail ("serialize(load(serialize(p))) differs from serialize(p)", NULL);
  if (amk_program_get_n_instructions (again) != amk_program_get_n_instructions (program) ||
      amk_program_get_n_buffers (again) != amk_program_get_n_buffers (program) ||
      amk_program_get_n_counters (again) != amk_program_get_n_counters (program) ||
      amk_program_get_num_queues (again) != amk_program_get_num_queues (program))
    fail ("the round trip changed the program", NULL);

  if (amk_program_get_n_instructions (again) <= MAX_RUN_INSTRUCTIONS &&
      total_bytes (again) <= MAX_RUN_BYTES &&
      estimate_elements (image) <= MAX_RUN_ELEMENTS)
    run_on_cpu (again);
  return 0;
}
