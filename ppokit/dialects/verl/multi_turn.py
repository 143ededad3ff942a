"""verl's multi-turn rollout keys (`actor_rollout_ref.rollout.multi_turn.*`, `data.tool_config_path`) onto ppokit's
agent-loop keys: multi_turn, tool_config_path, max_assistant_turns, max_tool_response_length, tool_format,
max_parallel_calls. Interactions (a simulated user) and callbacks are refused; verl's tokenization checks have no
effect (ppokit never re-tokenizes the model's tokens)."""

from __future__ import annotations

from .convert import VerlKey, _unless_null
from .rules import A

K = VerlKey
_MT = "multi-turn tool use (ppokit.rollout.agent_loop)"
_MT_USER = "interactions (a simulated user answering between turns) are not supported; only tools answer"
M = A + "rollout.multi_turn."
MULTI_TURN_KEYS: dict[str, VerlKey] = {
    M + "enable": K(False, "multi_turn", "tool calls over several turns (ppokit.rollout.agent_loop)"),
    M + "tool_config_path": K(None, "tool_config_path", "verl's tool config YAML", _unless_null("tool_config_path")),
    M + "max_assistant_turns": K(None, "max_assistant_turns", "null -> ppokit's 5", _unless_null("max_assistant_turns")),
    M + "max_turns": K(None, "max_assistant_turns", "verl 0.4.0's name of max_assistant_turns",
                       _unless_null("max_assistant_turns")),
    M + "max_tool_response_length": K(256, "max_tool_response_length", "characters, as verl counts them"),
    M + "format": K("hermes", "tool_format", "chatml (verl 0.4.0's default) is hermes' markup",
                    lambda v, c: {"tool_format": "hermes" if v in (None, "chatml") else v}),
    M + "max_parallel_calls": K(1, "max_parallel_calls"),
    M + "max_user_turns": K(None, None, _MT, refuse=_MT_USER),
    M + "tool_response_truncate_side": K("middle", None, "ppokit keeps a tool result's start and marks the cut",
                                         refuse="tool_response_truncate_side: ppokit cuts a tool result at its end",
                                         inert=("right",)),
    M + "interaction_config_path": K(None, None, _MT, refuse=_MT_USER),
    M + "use_inference_chat_template": K(False, None, "ppokit renders every turn with the tokenizer's chat template"),
    M + "tokenization_sanity_check_mode": K("strict", None, "ppokit never re-tokenizes the model's own tokens"),
    M + "num_repeat_rollouts": K(None, None, _MT, refuse="num_repeat_rollouts: use rollout_n for samples per prompt"),
    M + "completion_callback": K(None, None, _MT, refuse="completion_callback: ppokit's agent loop has no callbacks"),
    M + "_target_": K("verl.workers.config.MultiTurnConfig", None, "verl's dataclass binding (Hydra _target_)"),
    "data.tool_config_path": K(None, "tool_config_path", "verl 0.6+: ${...multi_turn.tool_config_path}",
                               _unless_null("tool_config_path")),
}
