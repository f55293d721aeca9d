"""benchmarks.decode_changes: the reverted code is patched in only inside the block, and a toy
run finds every variant's n-best lists equal to the unchanged code's."""

from __future__ import annotations

from benchmarks.decode_changes import CHANGES, SCORE_TOLERANCE, measure, reverted, variants


def test_reverted_restores_the_current_code() -> None:
    current = {name: getattr(owner, attr) for name, (owner, attr, _) in CHANGES.items()}
    with reverted(list(CHANGES)):
        for name, (owner, attr, old) in CHANGES.items():
            assert getattr(owner, attr) is old, name
    for name, (owner, attr, _) in CHANGES.items():
        assert getattr(owner, attr) is current[name], name


def test_variants_add_the_changes_one_at_a_time() -> None:
    specs = variants()
    assert specs["before"] == list(CHANGES)
    assert list(specs.values())[-1] == []
    assert [len(undo) for undo in specs.values()] == list(range(len(CHANGES), -1, -1))


def test_toy_run_times_every_variant_with_unchanged_hypotheses() -> None:
    rows = measure("toy", "fp32", beam=3, rounds=1)
    assert [name for name, *_ in rows] == list(variants())
    assert all(speed > 0 and diff <= SCORE_TOLERANCE for _, speed, _, diff in rows)
