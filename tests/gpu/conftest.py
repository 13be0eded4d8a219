"""pytest hooks of the gpu suite's Python files.

pytest exits 0 when every test skipped and 5 when none was collected, which meson would
report as OK on a machine without a GPU. Without a CUDA device such a run exits 77 (SKIP
for meson) instead; with a device, or when anything ran or failed, the status stays
pytest's own, so a real failure stays a failure and an empty run on the GPU fails.

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import gi
import pytest

gi.require_version("Amk", "1.0")
from gi.repository import Amk  # noqa: E402

MESON_SKIP = 77
RAN = ("passed", "failed", "error", "xfailed", "xpassed")


def pytest_sessionfinish(session, exitstatus):
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter is not None else {}
    if any(stats.get(outcome) for outcome in RAN):
        return
    if Amk.Launcher.get_device_count() == 0:
        session.exitstatus = MESON_SKIP

