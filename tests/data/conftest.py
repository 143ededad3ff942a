import json

import pytest


@pytest.fixture
def write_jsonl(tmp_path):
    """write_jsonl(rows, name="train.jsonl") -> path; rows may be dicts or raw line strings."""

    def write(rows, name="train.jsonl"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return str(path)

    return write
