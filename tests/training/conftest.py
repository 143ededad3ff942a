import json

import pytest

from ppokit.testing import save_tiny_model


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture()
def prompts_file(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [{"prompt": f"say a {i}:", "task_hint": i} for i in range(16)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)
