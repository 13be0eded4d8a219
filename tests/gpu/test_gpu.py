"""The megakernel from Python: one good launch checked against numpy and the CPU
executor, and one TIMEOUT that leaves the launcher usable. Skips without a GPU."""
import gi
import numpy as np
import pytest

gi.require_version("Amk", "1.0")
from gi.repository import Amk, GLib  # noqa: E402

pytestmark = pytest.mark.skipif(Amk.Launcher.get_device_count() == 0, reason="no CUDA device")


def chain(n=1000):
    p = Amk.Program.new(3)
    a = p.add_buffer("a", Amk.DType.F32, [n], Amk.BufferRole.INPUT)
    b = p.add_buffer("b", Amk.DType.F32, [n], Amk.BufferRole.INPUT)
    t = p.add_buffer("t", Amk.DType.F32, [n], Amk.BufferRole.SCRATCH)
    out = p.add_buffer("out", Amk.DType.F32, [n], Amk.BufferRole.OUTPUT)
    c0, c1 = p.add_counter("copied"), p.add_counter("added")
    i = p.add_instruction(0, Amk.Opcode.COPY, [t, a])
    p.set_param_int(i, 'count', n)
    p.set_signal(i, c0, 1)
    i = p.add_instruction(1, Amk.Opcode.ADD, [out, t, b])
    p.set_param_int(i, 'count', n)
    p.add_wait(i, c0, 1)
    p.set_signal(i, c1, 1)
    i = p.add_instruction(2, Amk.Opcode.ADD, [out, out, out])
    p.set_param_int(i, 'count', n)
    p.add_wait(i, c1, 1)
    return p, a, b, out


def test_good_launch():
    rng = np.random.default_rng()
    p, a, b, out = chain()
    xa = rng.standard_normal(1000, dtype=np.float32)
    xb = rng.standard_normal(1000, dtype=np.float32)
    launcher = Amk.Launcher(device=0)
    launcher.load(p)
    launcher.upload(a, GLib.Bytes.new(xa.tobytes()))
    launcher.upload(b, GLib.Bytes.new(xb.tobytes()))
    launcher.upload(out, GLib.Bytes.new(np.full(1000, np.nan, np.float32).tobytes()))
    launcher.launch(None)
    got = np.frombuffer(launcher.download(out).get_data(), np.float32)
    np.testing.assert_array_equal(got, (xa + xb) * 2)

    cpu = Amk.CpuExecutor.new(p)
    cpu.upload(a, GLib.Bytes.new(xa.tobytes()))
    cpu.upload(b, GLib.Bytes.new(xb.tobytes()))
    cpu.run()
    assert cpu.download(out).get_data() == launcher.download(out).get_data()


def test_timeout_then_good_launch():
    p = Amk.Program.new(2)
    c = p.add_counter("never")
    i = p.add_instruction(1, Amk.Opcode.NOP, [])
    p.add_wait(i, c, 1)
    launcher = Amk.Launcher(device=0, watchdog_ms=100)
    launcher.load_unverified(p)
    with pytest.raises(GLib.Error) as info:
        launcher.launch(None)
    assert info.value.matches(Amk.launch_error_quark(), Amk.LaunchError.TIMEOUT)
    record = launcher.get_last_abort()
    assert record.code == Amk.AbortCode.TIMEOUT
    assert (record.queue, record.instruction, record.counter, record.target) == (1, 0, c, 1)
    test_good_launch()
