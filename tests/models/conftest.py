import pytest


@pytest.fixture()
def isolated_cache(tmp_path, monkeypatch):
    """Point ppokit's model cache at a fresh temporary folder."""
    monkeypatch.setenv("PPOKIT_CACHE", str(tmp_path / "ppokit-cache"))
    return tmp_path / "ppokit-cache" / "models"
