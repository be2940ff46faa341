"""Arenas: the first-fit allocator, zero-copy input views, output slots and growth."""

from __future__ import annotations

import os

import pytest
import torch

from tensorgate._arena import (
    ALIGN,
    FreeList,
    InArena,
    OutArena,
    can_read_gateway_files,
    read_files,
    write_files,
)
from tensorgate._dtypes import DTYPES, ITEMSIZE
from tensorgate._errors import BAD_TENSOR, SHARED_MEMORY_OUT_OF_RANGE, WorkerError


def tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw little-endian bytes of a tensor of any dtype (numpy has no bfloat16)."""
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


def sample(dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    values = torch.arange(-3, -3 + torch.Size(shape).numel()).reshape(shape)
    return (values % 2 == 0) if dtype == torch.bool else values.to(dtype)


# FreeList --------------------------------------------------------------------------------------


def test_allocations_are_aligned_and_first_fit():
    slots = FreeList(1024)
    a = slots.allocate(1)
    b = slots.allocate(65)
    c = slots.allocate(64)
    assert (a, b, c) == (0, 64, 192)
    assert all(o % ALIGN == 0 for o in (a, b, c))
    slots.free(b)
    assert slots.allocate(10) == 64  # first hole that fits, not the tail
    assert slots.allocate(64) == 128  # rest of the freed 128-byte hole
    assert slots.allocate(0) == 256  # empty tensors still get a slot of their own


def test_free_merges_neighbours_back_into_one_block():
    slots = FreeList(256)
    offsets = [slots.allocate(64) for _ in range(4)]
    assert slots.allocate(1) is None
    for o in (offsets[1], offsets[3], offsets[2], offsets[0]):
        slots.free(o)
    assert slots.used_bytes == 0
    assert slots.allocate(256) == 0  # one block again, not four


def test_free_of_an_unknown_offset_raises():
    slots = FreeList(256)
    with pytest.raises(KeyError):
        slots.free(64)


def test_grow_extends_a_free_tail():
    slots = FreeList(128)
    assert slots.allocate(64) == 0
    slots.grow(256)
    assert slots.allocate(192) == 64  # the old free tail and the new space are one block
    slots.grow(512)
    assert slots.allocate(256) == 256


# InArena ---------------------------------------------------------------------------------------


@pytest.fixture
def in_file(shm_path):
    path = shm_path("in")
    with open(path, "wb") as f:
        f.truncate(4096)
    return path


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_input_views_every_dtype_without_copying(in_file, name):
    dtype = DTYPES[name]
    expected = sample(dtype, [2, 3])
    fd = os.open(in_file, os.O_RDWR)
    os.pwrite(fd, tensor_bytes(expected), 128)
    arena = InArena(in_file)
    view = arena.tensor(dtype, [2, 3], 128, 6 * ITEMSIZE[dtype])
    assert view.dtype == dtype
    assert torch.equal(view, expected)
    os.pwrite(fd, tensor_bytes(torch.zeros(1, dtype=dtype)), 128)
    assert view.flatten()[0].item() == 0  # a view of the shared file, not a copy
    os.close(fd)
    arena.close()


def test_input_arena_follows_the_file_when_it_grows(in_file):
    arena = InArena(in_file)
    with open(in_file, "r+b") as f:
        f.truncate(3 * 4096)
        f.seek(8192)
        f.write(tensor_bytes(torch.tensor([1.0, 2.0])))
    first = arena.tensor(torch.float32, [1], 0, 4)
    grown = arena.tensor(torch.float32, [2], 8192, 8)  # past the old mapping: re-mapped
    assert grown.tolist() == [1.0, 2.0]
    assert arena.mapped_bytes == 3 * 4096
    assert first.item() == 0.0  # views of the old mapping stay valid


def test_empty_input_file_is_mapped_once_it_has_bytes(shm_path):
    path = shm_path("empty")
    open(path, "wb").close()
    arena = InArena(path)
    assert arena.mapped_bytes == 0
    with pytest.raises(WorkerError):
        arena.tensor(torch.float32, [1], 0, 4)
    os.truncate(path, 4096)
    assert arena.tensor(torch.float32, [1], 0, 4).item() == 0.0


def test_zero_element_inputs_need_no_bytes(in_file):
    assert InArena(in_file).tensor(torch.float32, [0, 4], 0, 0).shape == (0, 4)


def test_an_input_view_is_kept_for_its_layout_and_made_again_once_changed(in_file):
    fd = os.open(in_file, os.O_RDWR)
    arena = InArena(in_file)
    os.pwrite(fd, tensor_bytes(torch.tensor([1.0, 2.0, 3.0, 4.0])), 64)
    first = arena.tensor(torch.float32, [2, 2], 64, 16)
    again = arena.tensor(torch.float32, [2, 2], 64, 16)
    assert again is first  # the same layout: the view made for it
    os.pwrite(fd, tensor_bytes(torch.tensor([5.0, 6.0, 7.0, 8.0])), 64)
    assert again.tolist() == [[5.0, 6.0], [7.0, 8.0]]  # still a view of the shared file
    assert arena.tensor(torch.float32, [4], 64, 16) is not first  # another layout, another view

    first.unsqueeze_(0)  # what a model may do to its input
    remade = arena.tensor(torch.float32, [2, 2], 64, 16)
    assert remade is not first and remade.shape == (2, 2)
    assert remade.tolist() == [[5.0, 6.0], [7.0, 8.0]]
    remade.set_(torch.zeros(2, 2))  # another storage, same shape and strides
    fresh = arena.tensor(torch.float32, [2, 2], 64, 16)
    assert fresh is not remade and fresh.tolist() == [[5.0, 6.0], [7.0, 8.0]]
    os.close(fd)
    arena.close()


def test_views_kept_before_the_file_grew_are_not_handed_out_after(in_file):
    arena = InArena(in_file)
    before = arena.tensor(torch.float32, [1], 0, 4)
    os.truncate(in_file, 3 * 4096)
    arena.tensor(torch.float32, [1], 8192, 4)  # past the old mapping: re-mapped
    after = arena.tensor(torch.float32, [1], 0, 4)
    assert after is not before and after.item() == before.item() == 0.0


@pytest.mark.parametrize(
    ("shape", "offset", "nbytes", "match"),
    [
        ([1024], 64, 4096, "outside the input arena"),
        ([1], 4096, 4, "outside the input arena"),
        ([1], 4, 4, "multiple of 64"),
        ([1], -64, 4, "multiple of 64"),
        ([2], 0, 4, "nbytes"),
        ([2, -1], 0, 4, "shape"),
        ("2", 0, 8, "shape"),
        ([1], True, 4, "multiple of 64"),
    ],
)
def test_bad_input_headers_are_bad_tensor(in_file, shape, offset, nbytes, match):
    with pytest.raises(WorkerError, match=match) as info:
        InArena(in_file).tensor(torch.float32, shape, offset, nbytes)
    assert info.value.code == BAD_TENSOR


# OutArena --------------------------------------------------------------------------------------


def test_output_is_written_c_contiguous_in_the_declared_dtype(shm_path):
    path = shm_path("out")
    arena = OutArena(path, 4096)
    source = torch.arange(6, dtype=torch.float64).reshape(2, 3).t()  # not contiguous
    offset, nbytes = arena.write(source, torch.float32)
    assert nbytes == 24
    with open(path, "rb") as f:
        f.seek(offset)
        raw = f.read(nbytes)
    assert torch.frombuffer(bytearray(raw), dtype=torch.float32).tolist() == [0, 3, 1, 4, 2, 5]


def test_output_arena_grows_to_at_least_double_and_keeps_slots(shm_path):
    path = shm_path("out")
    arena = OutArena(path, 4096)
    first, _ = arena.write(torch.full((16,), 7, dtype=torch.int32), torch.int32)
    old_view = arena.view(first, torch.int32, [16])
    big, nbytes = arena.write(torch.ones(2000), torch.float32)  # 8000 bytes: must grow
    assert arena.capacity >= 2 * 4096
    assert os.path.getsize(path) == arena.capacity
    assert big >= 64 and nbytes == 8000
    assert old_view.tolist() == [7] * 16  # the pre-growth mapping is still alive
    assert arena.view(big, torch.float32, [2000]).sum().item() == 2000
    arena.release(first)
    arena.release(big)
    assert arena.slots.used_bytes == 0


def test_an_output_slot_written_again_holds_the_new_values(shm_path):
    path = shm_path("out")
    arena = OutArena(path, 4096)

    def read(offset: int, nbytes: int) -> list[float]:
        with open(path, "rb") as f:
            f.seek(offset)
            return torch.frombuffer(bytearray(f.read(nbytes)), dtype=torch.float32).tolist()

    for step in range(3):  # first-fit: the same slot each time, written through the view kept
        values = torch.tensor([[1.0, 2.0, 3.0]]) * (step + 1)
        offset, nbytes = arena.write(values, torch.float32)
        assert offset == 0 and read(offset, nbytes) == values.flatten().tolist()
        arena.release(offset)
    held, _ = arena.write(torch.ones(1, 3), torch.float32)
    arena.write(torch.ones(2000), torch.float32)  # grows: the views kept go with the old mapping
    arena.release(held)
    offset, nbytes = arena.write(torch.tensor([[7.0, 8.0, 9.0]]), torch.float32)
    assert offset == 0 and read(offset, nbytes) == [7.0, 8.0, 9.0]


def test_failed_copy_frees_its_slot(shm_path):
    arena = OutArena(shm_path("out"), 4096)
    with pytest.raises(NotImplementedError):
        arena.write(torch.empty(4, device="meta"), torch.float32)  # a tensor with no data
    assert arena.slots.used_bytes == 0


def test_out_bytes_below_a_page_are_rounded_up(shm_path):
    path = shm_path("out")
    OutArena(path, 1)
    assert os.path.getsize(path) == os.sysconf("SC_PAGE_SIZE")


# read_files ------------------------------------------------------------------------------------


def test_file_spans_land_at_any_byte_offset_of_the_arena(in_file, shm_path):
    """Parts of a batched tensor start wherever the previous part ended: no alignment asked."""
    source = shm_path("source")
    with open(source, "wb") as f:
        f.write(bytes(range(100)))
    fd = os.open(source, os.O_RDONLY)
    arena = InArena(in_file)
    try:
        path = f"/proc/{os.getpid()}/fd/{fd}"
        span = {"path": path, "what": "x"}
        read_files(
            arena,
            [
                {"offset": 3, "nbytes": 5, "position": 10, **span},
                {"offset": 8, "nbytes": 2, "position": 0, **span},
            ],
        )
        assert bytes(arena.span(0, 12)) == bytes([0, 0, 0, 10, 11, 12, 13, 14, 0, 1, 0, 0])
        with pytest.raises(WorkerError) as past:
            read_files(
                arena, [{"offset": 0, "nbytes": 8, "path": path, "position": 96, "what": "x"}]
            )
        assert (past.value.code, past.value.message) == (
            SHARED_MEMORY_OUT_OF_RANGE,
            "x ended after 4 of 8 bytes",
        )
        cut = {"offset": 0, "nbytes": 8, "position": 96, "code": BAD_TENSOR, **span}
        with pytest.raises(WorkerError) as rewritten:  # a .npy file rewritten since it was checked
            read_files(arena, [cut])
        assert (rewritten.value.code, rewritten.value.message) == (
            BAD_TENSOR,
            "x ended after 4 of 8 bytes",
        )
        malformed = ({"path": source}, {"position": -1}, {"offset": 4095, "nbytes": 2})
        for bad in (*malformed, {"code": "INFERENCE_FAILED"}):
            span = {"offset": 0, "nbytes": 1, "path": path, "position": 0, "what": "x", **bad}
            with pytest.raises(WorkerError) as refused:
                read_files(arena, [span])
            assert refused.value.code == BAD_TENSOR, bad
    finally:
        os.close(fd)
        arena.close()


def test_output_rows_are_written_into_files_where_they_fit(shm_path):
    """A batch's output rows go to each member's file span; what cannot be written is left out,
    never failed, and never grows a file."""
    arena = OutArena(shm_path("out"), 4096)
    region = shm_path("region")
    with open(region, "wb") as f:
        f.write(b"\xee" * 64)
    fd = os.open(region, os.O_RDWR)
    try:
        rows = torch.arange(12, dtype=torch.float32).reshape(4, 3)  # 12 bytes a row
        offset, nbytes = arena.write(rows, torch.float32)
        outputs = {"y": (offset, nbytes, [4, 3])}
        span = {"output": "y", "path": f"/proc/{os.getpid()}/fd/{fd}"}
        done = write_files(
            arena,
            outputs,
            [
                {**span, "row": 1, "rows": 2, "position": 4, "capacity": 24},
                {**span, "row": 3, "position": 40, "capacity": 12},  # rows: to the end
                # Left out: too small for its rows, past the file's end, a file that cannot be
                # opened, an output that does not exist, rows the output does not have.
                {**span, "row": 0, "rows": 1, "position": 0, "capacity": 8},
                {**span, "row": 0, "rows": 1, "position": 60, "capacity": 12},
                {
                    **span,
                    "row": 0,
                    "path": f"/proc/{os.getpid()}/fd/999999",
                    "position": 0,
                    "capacity": 64,
                },
                {**span, "output": "z", "row": 0, "position": 0, "capacity": 64},
                {**span, "row": 3, "rows": 2, "position": 0, "capacity": 64},
            ],
        )
        assert done == [0, 1]
        with open(region, "rb") as f:
            written = f.read()
        assert written[4:28] == tensor_bytes(rows[1:3])
        assert written[40:52] == tensor_bytes(rows[3:4])
        untouched = written[:4] + written[28:40] + written[52:]
        assert untouched == b"\xee" * 28  # and nothing grew the file
        for bad in ({"output": 3}, {"row": -1}, {"rows": "all"}, {"capacity": None}):
            with pytest.raises(WorkerError) as refused:
                write_files(
                    arena, outputs, [{**span, "row": 0, "position": 0, "capacity": 12, **bad}]
                )
            assert refused.value.code == BAD_TENSOR, bad
        with pytest.raises(WorkerError) as named:  # a path, not one of the gateway's descriptors
            write_files(arena, outputs, [{**span, "path": region, "position": 0, "capacity": 64}])
        assert named.value.code == BAD_TENSOR
    finally:
        os.close(fd)
        arena.close()


def test_reading_the_gateways_files_is_tried_on_the_file_named(shm_path):
    """pytest's parent process does not hold this file open, so there is nothing to open."""
    path = shm_path("unheld")
    with open(path, "wb") as f:
        f.write(b"x")
    assert can_read_gateway_files(path, os.getppid()) is False
