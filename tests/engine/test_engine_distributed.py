import os

import pytest

from ppokit.engine import distributed


def test_multi_process_env_without_master_is_explained(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(RuntimeError, match="torchrun"):
        distributed._single_process_env_defaults()


def test_plain_python_becomes_rank_zero_of_one(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    distributed._single_process_env_defaults()

    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("0", "1", "0")
    assert os.environ["MASTER_ADDR"] == "127.0.0.1" and 0 < int(os.environ["MASTER_PORT"]) < 65536


def test_launcher_env_is_kept(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    distributed._single_process_env_defaults()

    assert (os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["MASTER_PORT"]) == ("3", "1", "29500")
