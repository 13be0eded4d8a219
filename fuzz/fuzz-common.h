/* fuzz-common.h: what every libFuzzer target of fuzz/ shares: the entry points'
 * prototypes, the initialisation (a critical or a warning is a crash), and fail(),
 * which reports a broken contract and aborts so that libFuzzer keeps the input.
 * Define FUZZ_TARGET (the target's name) before including it, once per target.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <gio/gio.h>

#ifndef FUZZ_TARGET
#error "define FUZZ_TARGET before including fuzz-common.h"
#endif

int LLVMFuzzerInitialize (int *argc, char ***argv);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void G_GNUC_NORETURN
fail (const char *what, const GError *error)
{
  fprintf (stderr, FUZZ_TARGET ": %s%s%s\n", what, error != NULL ? ": " : "",
           error != NULL ? error->message : "");
  abort ();
}

/* A parser that refused its input must say why: in the model files' domain
 * (AMK_MODEL_ERROR, any code), or as G_IO_ERROR_INVALID_DATA or G_IO_ERROR_NOT_SUPPORTED
 * (the tokenizer); one that accepted it must leave no error. (The domain by its quark's
 * name: not every target includes the library's headers.) */
static G_GNUC_UNUSED void
check_parse_error (gboolean accepted, const GError *error)
{
  if (!accepted &&
      (error == NULL ||
       (error->domain != g_quark_from_static_string ("amk-model-error-quark") &&
        (error->domain != G_IO_ERROR ||
         (error->code != G_IO_ERROR_INVALID_DATA && error->code != G_IO_ERROR_NOT_SUPPORTED)))))
    fail ("the input was refused without a model error, INVALID_DATA or NOT_SUPPORTED", error);
  if (accepted && error != NULL)
    fail ("the input was accepted and an error set", error);
}

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  g_log_set_always_fatal (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  return 0;
}
