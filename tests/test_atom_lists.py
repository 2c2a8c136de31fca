"""Walks looking for tensors skip containers of plain values, told in C (validation-10
dataset_padded_to_longest_sample_oom: 12,000 lists of 2,048 token ids made the post-mortem walk every int,
67 s for a cell that fails in 0.8 s), and still find every tensor among other values."""

from __future__ import annotations

import torch

from vramnb._graph import held_tensors, only_atoms, tensor_items


def test_lists_of_plain_values_hold_nothing_and_are_not_walked() -> None:
    ids = [[i % 97 for i in range(512)] for _ in range(40)]
    assert only_atoms(ids[0]) and tensor_items(ids[0]) == []
    assert list(held_tensors({"input_ids": ids, "names": ["a"] * 20}, 6, {})) == []
    assert not only_atoms(ids)  # a list of lists: walked (its lists are skipped one by one)


def test_a_tensor_among_plain_values_is_found() -> None:
    t = torch.ones(3)
    mixed = [*range(20), t, "x", None]
    assert not only_atoms(mixed) and tensor_items(mixed) == mixed
    assert [x is t for x in held_tensors([mixed, list(range(50))], 4, {})] == [True]
    # subclasses of int are not taken as plain values (their attributes may hold anything)
    class Tagged(int):
        pass

    assert not only_atoms([Tagged(1)] * 20)


def test_short_containers_are_walked_as_before() -> None:
    assert not only_atoms([1, 2, 3])
