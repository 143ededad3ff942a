import json

import pytest


@pytest.fixture()
def prompts_file(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [{"prompt": f"say a {i}:"} for i in range(16)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)
