/* amk-tokenizer-stream-private.h: the text of generated tokens as they come, one piece
 * per token, held back while it ends inside a UTF-8 character. Shared by AmkGenerator
 * and AmkBatch.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-tokenizer.h"

G_BEGIN_DECLS

/* The text of tokens[*held .. n): "" while it ends inside a character (for at most
 * three tokens, and unless `last`: nothing comes after; then it goes out with U+FFFD),
 * else the text, and *held becomes n. */
char *amk_tokenizer_decode_piece (AmkTokenizer  *self,
                                  const gint32  *tokens,
                                  guint          n,
                                  gboolean       last,
                                  guint         *held,
                                  GError       **error);

G_END_DECLS
