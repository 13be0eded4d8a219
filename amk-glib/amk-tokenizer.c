/* amk-tokenizer.c: byte-level BPE tokenizer.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-tokenizer.h"

/**
 * AmkTokenizer:
 *
 * A byte-level BPE tokenizer.
 */
struct _AmkTokenizer
{
  GObject parent_instance;
};

G_DEFINE_FINAL_TYPE (AmkTokenizer, amk_tokenizer, G_TYPE_OBJECT)

static void
amk_tokenizer_class_init (AmkTokenizerClass *klass)
{
}

static void
amk_tokenizer_init (AmkTokenizer *self)
{
}
