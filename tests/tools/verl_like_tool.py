"""A tool with verl's BaseTool interface (async create/execute/calc_reward/release), for the YAML tests."""

import uuid


class CounterTool:
    """Adds its argument to a per-trajectory counter that starts at create_kwargs['start']; rewards +0.5 per call."""

    def __init__(self, config, tool_schema):
        self.config, self.tool_schema = config, tool_schema
        self.state: dict[str, int] = {}
        self.released: list[str] = []

    async def create(self, instance_id=None, start: int = 0, **kwargs):
        instance_id = instance_id or str(uuid.uuid4())
        self.state[instance_id] = start
        return instance_id

    async def execute(self, instance_id, parameters, **kwargs):
        self.state[instance_id] += int(parameters["x"]) * self.config.get("scale", 1)
        return f"counter={self.state[instance_id]}", 0.5, {}

    async def calc_reward(self, instance_id, **kwargs):
        return 1.0 if self.state[instance_id] >= 10 else 0.0

    async def release(self, instance_id, **kwargs):
        self.released.append(instance_id)


class NoConfigTool:
    """A tool class whose constructor does not take verl's config= / tool_schema=."""

    def __init__(self, name):
        self.name = name
