"""reward_server.py refuses numbers it cannot use with a sentence (issue 25), not an OverflowError."""

from __future__ import annotations

import pytest

from ppokit.rewards.cli import main


@pytest.mark.parametrize(("argv", "said"), [
    (["--port", "99999"], "99999 is not a TCP port: ports run from 0 to 65535"),
    (["--port", "-1"], "-1 is not a TCP port"),
    (["--port", "http"], "'http' is not a port number"),
    (["--request-timeout", "inf"], "inf must be a finite number greater than 0"),
    (["--max-body-mb", "nan"], "nan must be a finite number greater than 0"),
])
def test_bad_numbers_are_one_sentence(argv, said, capsys, monkeypatch):
    import uvicorn

    def serve(*args, **kwargs):
        raise AssertionError("the server started with a bad number")

    monkeypatch.setattr(uvicorn, "run", serve)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
