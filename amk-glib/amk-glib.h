/* amk-glib.h: the single public include of amk-glib.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#define __AMK_GLIB_INSIDE__

#include <amk-glib/amk-version-macros.h>
#include <amk-glib/amk-version.h>
#include <amk-glib/amk-types.h>
#include <amk-glib/amk-error.h>
#include <amk-glib/amk-enum-types.h>
#include <amk-glib/amk-abort-record.h>
#include <amk-glib/amk-kernel-attributes.h>
#include <amk-glib/amk-struct-sizes.h>
#include <amk-glib/amk-program.h>
#include <amk-glib/amk-executor.h>
#include <amk-glib/amk-cpu-executor.h>
#include <amk-glib/amk-launcher.h>
#include <amk-glib/amk-tokenizer.h>
#include <amk-glib/amk-model.h>
#include <amk-glib/amk-generator.h>
#include <amk-glib/amk-batch.h>

#undef __AMK_GLIB_INSIDE__
