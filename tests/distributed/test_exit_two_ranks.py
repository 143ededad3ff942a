"""A 2-rank script that ends without leaving the process group (a user's own script, a Session never closed) leaves
it at exit, before interpreter finalization, where gloo's threads could abort a finished rank (~10 s)."""

import re

from dist_helpers import HERE, tail, torchrun


def reports(done) -> list[str]:
    return sorted(re.findall(r"rank \d: group left before finalization: (?:True|False)", done.stdout))


def test_a_script_that_ends_leaves_the_group_before_finalization():
    done = torchrun(HERE / "group_left_at_exit.py", nproc=2, timeout=300)
    assert done.returncode == 0, tail(done)
    assert reports(done) == [f"rank {r}: group left before finalization: True" for r in (0, 1)], tail(done)


def test_after_an_uncaught_error_the_group_is_not_torn_down():
    """A peer may still wait in a collective after an error: the process ends without a teardown that waits."""
    done = torchrun(HERE / "group_left_at_exit.py", "raise", nproc=2, timeout=300)
    assert done.returncode != 0 and "an uncaught error after the collectives" in done.stderr, tail(done)
    assert reports(done) == [f"rank {r}: group left before finalization: False" for r in (0, 1)], tail(done)
