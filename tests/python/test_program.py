# SPDX-License-Identifier: LGPL-2.1-or-later
#
# AmkProgram from Python: construction, properties, introspection of buffers, counters
# and instructions, serialization round trips, and the ABI struct sizes.

import numpy as np
import pytest

from amktest import (Amk, GLib, Chain, add_op, make_rng, random_data, same_bits,
                     to_bytes, ELEMENT_SIZE)


@pytest.fixture
def rng():
    return make_rng()


def test_construct_with_properties():
    p = Amk.Program(num_queues=3)
    assert p.get_num_queues() == 3
    assert p.props.num_queues == 3
    assert p.props.verified is False
    assert p.props.scratch_size == 0
    assert p.get_n_buffers() == 0
    assert p.get_n_counters() == 0
    assert p.get_n_instructions() == 0
    assert [p.get_queue_length(q) for q in range(3)] == [0, 0, 0]

    q = Amk.Program.new(7)
    assert q.props.num_queues == 7


def test_buffers_introspection():
    p = Amk.Program.new(2)
    specs = [
        ('x', Amk.DType.F32, [3, 5], Amk.BufferRole.INPUT),
        ('y', Amk.DType.F16, [7], Amk.BufferRole.OUTPUT),
        ('w', Amk.DType.BF16, [2, 3, 4], Amk.BufferRole.CONSTANT),
        ('s', Amk.DType.I32, [9], Amk.BufferRole.SCRATCH),
        ('k', Amk.DType.U8, [11, 1], Amk.BufferRole.STATE),
        ('t', Amk.DType.F32, [1], Amk.BufferRole.SCRATCH),
    ]
    for index, (name, dtype, shape, role) in enumerate(specs):
        assert p.add_buffer(name, dtype, shape, role) == index
    assert p.get_n_buffers() == len(specs)

    for index, (name, dtype, shape, role) in enumerate(specs):
        n = int(np.prod(shape))
        assert p.find_buffer(name) == index
        assert p.get_buffer_name(index) == name
        assert p.get_buffer_dtype(index) == dtype
        assert p.get_buffer_role(index) == role
        assert list(p.get_buffer_shape(index)) == shape
        assert p.get_buffer_n_elements(index) == n
        assert p.get_buffer_size(index) == n * ELEMENT_SIZE[dtype]
        assert p.get_buffer_data(index) is None
    assert p.find_buffer('nope') == -1

    # both scratch buffers live in the arena, which is at least their total size
    assert p.props.scratch_size >= 9 * 4 + 4
    assert p.get_scratch_size() == p.props.scratch_size


def test_buffer_default_contents(rng):
    p = Amk.Program.new(1)
    w = p.add_buffer('w', Amk.DType.F32, [16], Amk.BufferRole.CONSTANT)
    data = random_data(rng, Amk.DType.F32, 16)
    p.set_buffer_data(w, to_bytes(data))
    got = np.frombuffer(p.get_buffer_data(w).get_data(), dtype=np.float32)
    assert same_bits(got, data)


def test_counters_and_instructions():
    p = Amk.Program.new(3)
    assert p.add_counter('first') == 0
    assert p.add_counter(None) == 1
    assert p.add_counter('third') == 2
    assert p.get_n_counters() == 3

    x = p.add_buffer('x', Amk.DType.F32, [8], Amk.BufferRole.OUTPUT)
    i0 = add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=8, value=1.5), signal=(0, 1))
    i1 = add_op(p, 2, Amk.Opcode.NOP, [], waits=[(0, 1)], signal=(1, 1))
    i2 = add_op(p, 2, Amk.Opcode.NOP, [], waits=[(1, 1), (0, 1)])
    i3 = p.add_instruction(1, Amk.Opcode.GRID_SYNC, None)
    assert (i0, i1, i2, i3) == (0, 1, 2, 3)
    assert p.get_n_instructions() == 4
    assert [p.get_queue_length(q) for q in range(3)] == [1, 1, 2]


def test_params_by_name_round_trip():
    p = Amk.Program.new(1)
    x = p.add_buffer('x', Amk.DType.F32, [8], Amk.BufferRole.OUTPUT)
    fill = add_op(p, 0, Amk.Opcode.FILL, [x], dict(offset=2, count=-6, value=0.375))
    rope = add_op(p, 0, Amk.Opcode.ROPE_KV, [x] * 6,
                  {'head_dim': 64, 'shape.n_kv_heads': 2, 'freq.theta': 500000.0,
                   'low_freq_factor': 1.5, 'original_context': 8192})
    # a getter gives (True, value): its boolean return comes with the out value
    assert p.get_param_int(fill, 'offset') == (True, 2)
    assert p.get_param_int(fill, 'count') == (True, -6)
    assert p.get_param_float(fill, 'value') == (True, 0.375)
    ok, value = p.get_param_int(rope, 'shape.head_dim')
    assert ok and value == 64
    assert p.get_param_int(rope, 'n_kv_heads') == (True, 2)
    assert p.get_param_int(rope, 'n_q_heads') == (True, 0)        # never set
    assert p.get_param_int(rope, 'freq.original_context') == (True, 8192)
    assert p.get_param_float(rope, 'theta') == (True, 500000.0)
    assert p.get_param_float(rope, 'freq.low_freq_factor') == (True, 1.5)
    for call, args in [(p.get_param_int, (fill, 'rows')), (p.get_param_float, (fill, 'eps')),
                       (p.get_param_int, (fill, 'value')), (p.get_param_float, (rope, 'head0'))]:
        with pytest.raises(GLib.Error) as info:
            call(*args)
        assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID), args
    with pytest.raises(GLib.Error) as info:
        p.get_param_int(rope + 1, 'count')
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.OUT_OF_RANGE)


def test_verified_property_and_notify():
    p = Amk.Program.new(1)
    x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=4, value=2.0))
    seen = []
    p.connect('notify::verified', lambda obj, pspec: seen.append(obj.props.verified))

    assert p.verify() is True
    assert p.get_verified() is True
    assert p.props.verified is True
    assert p.verify() is True          # verifying again is a no-op
    assert p.get_param_int(0, 'count') == (True, 4)   # reading changes nothing
    with pytest.raises(GLib.Error):
        p.set_param_int(0, 'rows', 1)  # nor does a refused change
    assert p.props.verified is True
    p.set_param_int(0, 'offset', 1)    # any change drops the proof
    assert p.props.verified is False
    assert seen == [True, False]


def _run_chain(chain, inp):
    ex = Amk.CpuExecutor.new(chain.program)
    out, want = chain.run(ex, inp, seed=3)
    assert same_bits(out, want)
    return out


@pytest.mark.parametrize('dtype', [Amk.DType.F32, Amk.DType.BF16, Amk.DType.I32],
                         ids=['f32', 'bf16', 'i32'])
def test_serialize_round_trip(rng, dtype):
    chain = Chain(dtype, rng)
    chain.program.verify()
    blob = chain.program.serialize()
    assert isinstance(blob, GLib.Bytes) and blob.get_size() > 0

    q = Amk.Program.new_from_bytes(blob)
    p = chain.program
    assert q.props.verified is True
    assert q.get_num_queues() == p.get_num_queues()
    assert q.get_n_buffers() == p.get_n_buffers()
    assert q.get_n_counters() == p.get_n_counters()
    assert q.get_n_instructions() == p.get_n_instructions()
    assert q.get_scratch_size() == p.get_scratch_size()
    for b in range(p.get_n_buffers()):
        assert q.get_buffer_name(b) == p.get_buffer_name(b)
        assert q.get_buffer_dtype(b) == p.get_buffer_dtype(b)
        assert q.get_buffer_role(b) == p.get_buffer_role(b)
        assert list(q.get_buffer_shape(b)) == list(p.get_buffer_shape(b))
    for queue in range(p.get_num_queues()):
        assert q.get_queue_length(queue) == p.get_queue_length(queue)
    assert q.get_buffer_data(chain.w).get_data() == chain.w_data.tobytes()
    # serializing the loaded program gives the same bytes
    assert q.serialize().get_data() == blob.get_data()

    inp = random_data(rng, dtype, chain.n)
    a = _run_chain(chain, inp)
    chain.program = q
    b = _run_chain(chain, inp)
    assert same_bits(a, b)


def test_save_and_load_file(rng, tmp_path):
    chain = Chain(Amk.DType.F32, rng)
    path = tmp_path / 'chain.amk'
    assert chain.program.save(str(path)) is True
    assert path.read_bytes() == chain.program.serialize().get_data()

    q = Amk.Program.new_from_file(str(path))
    inp = random_data(rng, Amk.DType.F32, chain.n)
    a = _run_chain(chain, inp)
    chain.program = q
    b = _run_chain(chain, inp)
    assert same_bits(a, b)


def test_load_missing_file(tmp_path):
    with pytest.raises(GLib.Error) as info:
        Amk.Program.new_from_file(str(tmp_path / 'missing.amk'))
    assert info.value.matches(GLib.file_error_quark(), GLib.FileError.NOENT)


def test_struct_sizes():
    for s in (Amk.struct_sizes_get(), Amk.StructSizes.get(), Amk.Launcher.new(0).struct_sizes()):
        assert s.abi_version == 1
        assert s.instruction == 128
        assert s.device_program == 128
        assert s.params == 48
        assert s.buffer == 24
        assert s.abort_record == 32
        assert s.trace_event == 32
        c = s.copy()
        assert c.instruction == 128


def test_launcher_properties():
    launcher = Amk.Launcher(device=0)
    assert launcher.props.device == 0
    assert launcher.get_device() == 0
    # chosen when a program is loaded (0 until then), unless set
    assert launcher.props.threads_per_block == 0
    assert launcher.props.dynamic_shared_memory == 0
    launcher.props.threads_per_block = 128
    assert launcher.get_threads_per_block() == 128
    launcher.set_watchdog_ms(250)
    assert launcher.props.watchdog_ms == 250
    launcher.props.dynamic_shared_memory = 4096
    assert launcher.get_dynamic_shared_memory() == 4096
    assert launcher.get_program() is None
    assert launcher.get_last_abort() is None
    assert isinstance(Amk.Launcher.get_have_cuda(), bool)
    # a library built without CUDA sees no device
    assert Amk.Launcher.get_have_cuda() or Amk.Launcher.get_device_count() == 0


def test_executor_properties(rng):
    chain = Chain(Amk.DType.F32, rng)
    # PyGObject 3.42 does not call GInitable.init() for a constructor call with
    # properties; Amk.CpuExecutor.new() does, else init(None) must be called by hand.
    ex = Amk.CpuExecutor(program=chain.program)
    assert ex.init(None) is True
    assert ex.props.program is chain.program
    assert ex.get_program() is chain.program
    assert chain.program.props.verified is True
    ex.set_seed(2 ** 63 + 5)
    assert ex.props.seed == 2 ** 63 + 5
    assert ex.get_last_abort() is None
    out, want = chain.run(ex, random_data(rng, Amk.DType.F32, chain.n), seed=ex.props.seed)
    assert same_bits(out, want)
