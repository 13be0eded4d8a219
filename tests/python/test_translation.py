# SPDX-License-Identifier: LGPL-2.1-or-later
#
# A GError message of amk-glib comes out translated.
#
# Environment (set by tests/python/meson.build for this test):
#   AMK_LOCALEDIR  the build's po/ folder, which holds de/LC_MESSAGES/amk-glib-1.0.mo;
#                  the library reads it when it is loaded, so it must be set before
#                  the process starts
#   LANGUAGE=de, LC_ALL=C.UTF-8
# The test sets LANGUAGE and the process locale itself as well (and restores them), so it
# also passes inside a pytest run shared with other tests.

import locale
import os

import pytest

import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, GLib  # noqa: E402

GETTEXT_PACKAGE = 'amk-glib-1.0'


def _catalogue():
    localedir = os.environ.get('AMK_LOCALEDIR')
    if not localedir:
        return None
    return os.path.join(localedir, 'de', 'LC_MESSAGES', GETTEXT_PACKAGE + '.mo')


@pytest.fixture
def german():
    mo = _catalogue()
    if mo is None:
        pytest.skip('AMK_LOCALEDIR is not set: run this test through meson test')
    if not os.path.exists(mo):
        pytest.skip(f'{mo} was not built (is the nls option disabled?)')

    saved_language = os.environ.get('LANGUAGE')
    saved_locale = locale.setlocale(locale.LC_ALL)
    os.environ['LANGUAGE'] = 'de'
    try:
        # gettext ignores LANGUAGE while LC_MESSAGES is "C", and Python only sets
        # LC_CTYPE from the environment at start-up.
        locale.setlocale(locale.LC_ALL, 'C.UTF-8')
    except locale.Error:
        pytest.skip('the C.UTF-8 locale is not available')
    try:
        yield
    finally:
        if saved_language is None:
            del os.environ['LANGUAGE']
        else:
            os.environ['LANGUAGE'] = saved_language
        locale.setlocale(locale.LC_ALL, saved_locale)


def _cycle():
    # Queue 0 waits on counter 1 and signals counter 0; queue 1 waits on counter 0 and
    # signals counter 1: neither can ever start.
    prog = Amk.Program.new(2)
    x = prog.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    c0 = prog.add_counter('c0')
    c1 = prog.add_counter('c1')

    a = prog.add_instruction(0, Amk.Opcode.FILL, [x])
    prog.set_param_int(a, 'count', 4)
    prog.set_param_float(a, 'value', 1.0)
    prog.add_wait(a, c1, 1)
    prog.set_signal(a, c0, 1)

    b = prog.add_instruction(1, Amk.Opcode.NOP, [])
    prog.add_wait(b, c0, 1)
    prog.set_signal(b, c1, 1)
    return prog


def test_error_message_is_german(german):
    # A message without 64-bit format macros: shows that the catalogue is found at all.
    prog = Amk.Program.new(1)
    nop = prog.add_instruction(0, Amk.Opcode.NOP, [])

    with pytest.raises(GLib.Error) as info:
        prog.add_wait(nop, 5, 1)

    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.OUT_OF_RANGE)
    # "Counter %u does not exist; the program has %u counters"
    assert info.value.message == 'Zähler 5 existiert nicht; das Programm hat 0 Zähler'


def test_deadlock_message_is_german(german):
    prog = _cycle()

    with pytest.raises(GLib.Error) as info:
        prog.verify()

    error = info.value
    assert error.domain == 'amk-program-error-quark'
    assert error.code == int(Amk.ProgramError.DEADLOCK)
    assert error.matches(Amk.ProgramError.quark(), Amk.ProgramError.DEADLOCK)

    # po/de.po: "Deadlock: queue %u stalls at instruction %u: ..." ->
    # "Verklemmung: Warteschlange %u bleibt bei Befehl %u stehen: ..."
    # If only this test fails, the msgid in po/ no longer matches the string the library
    # formats: xgettext cuts a msgid at a GLib format macro such as G_GUINT64_FORMAT
    # (use PRIu64 from <inttypes.h> in translatable strings).
    message = error.message
    assert message.startswith('Verklemmung: Warteschlange 0'), message
    assert 'Zähler' in message, message
    assert 'stalls' not in message, message
    assert prog.get_verified() is False
